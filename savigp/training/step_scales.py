"""Learning rates per parameter for the first-order optimizers: steps scaled to what each parameter
can move.

Adam's step is about its learning rate in every coordinate, whatever the ELBO's curvature along it
(Kingma & Ba 2015, §2.1: the effective step |m_hat / sqrt(v_hat)| <= 1 times the rate). For most
parameters of a GP model that is harmless; for a period learned over many cycles it is not: a change
dp moves the phase at the far end of the data by L dp / p^2 cycles (L the data's extent), so at
fit's rate the period of a monthly series over 48 years jumps by half a cycle there per step and
leaves its optimum (issue 57: elnino's period drifted to 0.95, 1.10 and 0.80 years). A kernel family
declares such parameters and their factor (:meth:`savigp.kernels.base.Kernel.step_scales`); here
they get optimizer groups of their own at the learning rate times that factor. Models without them
keep their groups (and their traces) as they were.

Units: a parameter in the inputs' units (a length-scale, a period, a linear offset, the inducing
inputs) steps in units of its columns' spread where the inputs are far from unit scale
(:func:`savigp.kernels.base.column_step_factor`): Adam's step of 0.01 is a hundredth of a standardized
column but a seven-hundredth of a year-valued one of spread 14 (elnino: ``rbf(t)`` took 2530 steps in
years against 750 standardized to the same optimum; the periodic model reached the 20000-step cap).
"""
from __future__ import annotations

import torch


def parameter_step_scales(model) -> dict:
    """``{parameter: factor}`` of every kernel module of ``model`` (:meth:`Kernel.step_scales`, on
    the model's training inputs; the smallest factor where two modules name one parameter) and of
    its learned inducing inputs and mean-head basis inputs (:meth:`MeanHead.input_locations`), by
    :func:`~savigp.kernels.base.column_step_factor` of all D columns."""
    from ..kernels.base import Kernel, column_step_factor

    out: dict = {}
    X = model.train_x
    for module in model.kernel.modules():
        if isinstance(module, Kernel):
            for p, f in module.step_scales(X).items():
                out[p] = min(float(f), out.get(p, float("inf")))
    located = [model.inducing, *model.head.input_locations()]
    factor = column_step_factor(X, positive=False)
    for p in located:
        if factor != 1.0 and isinstance(p, torch.nn.Parameter) and p.requires_grad:
            out[p] = factor
    return out


def scaled_groups(model, groups: list, lr: float) -> list:
    """``groups`` (a list of parameters, or of optimizer group dicts whose ``lr`` defaults to ``lr``)
    with each parameter of :func:`parameter_step_scales` moved to a group of its own at its group's
    rate times its factor; ``groups`` itself where no parameter has one. (A tensor hashes by
    identity, so the factors are looked up by the parameter itself.)"""
    scales = {p: f for p, f in parameter_step_scales(model).items() if p.requires_grad}
    if not scales or not groups:
        return groups
    dicts = groups if isinstance(groups[0], dict) else [{"params": list(groups)}]
    out = []
    for g in dicts:
        rate = float(g.get("lr", lr))
        kept = [p for p in g["params"] if p not in scales]
        if kept:
            out.append({**g, "params": kept})
        out += [{**g, "params": [p], "lr": rate * scales[p]} for p in g["params"] if p in scales]
    return out
