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
(:func:`savigp.kernels.base.column_step_factors`, per column): Adam's step of 0.01 is a hundredth of a standardized
column but a seven-hundredth of a year-valued one of spread 14 (elnino: ``rbf(t)`` took 2530 steps in
years against 750 standardized to the same optimum; the periodic model reached the 20000-step cap).
"""
from __future__ import annotations

import torch


def parameter_step_scales(model) -> dict:
    """``{parameter: factor}`` of every kernel module of ``model`` (:meth:`Kernel.step_scales`, on
    the model's training inputs; the smallest factor where two modules name one parameter) and of
    its learned inducing inputs and mean-head basis inputs (:meth:`MeanHead.input_locations`: points
    ``(..., D)``), by :func:`~savigp.kernels.base.column_step_factors` of the D columns. A factor is a
    float for all of a parameter's entries, or a tensor broadcast to it (one per column)."""
    from ..kernels.base import Kernel, column_step_factors

    out: dict = {}
    X = model.train_x
    for module in model.kernel.modules():
        if isinstance(module, Kernel):
            for p, f in module.step_scales(X).items():
                out[p] = f if p not in out else _smaller(out[p], f)
    factors = column_step_factors(X, positive=False)  # (D,)
    if bool((factors != 1.0).any()):
        factor = float(factors[0]) if bool((factors == factors[0]).all()) else factors
        for p in [model.inducing, *model.head.input_locations()]:
            if isinstance(p, torch.nn.Parameter) and p.requires_grad:
                out[p] = factor if isinstance(factor, float) else factor.to(p.dtype).reshape(*(1,) * (p.dim() - 1), -1)
    return out


def _smaller(a, b):
    """The entrywise smaller of two factors (floats or tensors)."""
    if isinstance(a, float) and isinstance(b, float):
        return min(a, b)
    return torch.minimum(torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64))


def scaled_groups(model, groups: list, lr: float) -> list:
    """``groups`` (a list of parameters, or of optimizer group dicts whose ``lr`` defaults to ``lr``)
    with each parameter of :func:`parameter_step_scales` moved to a group of its own: at its group's
    rate times its factor where that is a float, or at its group's rate with the factor as the group's
    ``"element_scale"`` where it is a tensor (applied to each step by :func:`attach_element_scales`);
    ``groups`` itself where no parameter has one. (A tensor hashes by identity, so the factors are
    looked up by the parameter itself.)"""
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
        for p in g["params"]:
            if p not in scales:
                continue
            f = scales[p]
            if isinstance(f, float):
                out.append({**g, "params": [p], "lr": rate * f})
            else:
                out.append({**g, "params": [p], "lr": rate, "element_scale": f.to(device=p.device, dtype=p.dtype)})
    return out


def attach_element_scales(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """``optimizer`` with each step of a group holding an ``"element_scale"`` (:func:`scaled_groups`)
    scaled entrywise: p <- p_before + scale * (p_after - p_before), the per-column learning rate a
    group's scalar rate cannot give (Adam's step is invariant to the gradient's scale, so the step
    itself is scaled). The copy of p_before lives in a buffer made once, so that the step can be
    captured in a CUDA graph. Returns ``optimizer``; none attached where no group holds one."""
    scaled = [g for g in optimizer.param_groups if g.get("element_scale") is not None]
    if not scaled:
        return optimizer
    before = {id(p): torch.empty_like(p) for g in scaled for p in g["params"]}

    def keep(opt, args, kwargs):
        with torch.no_grad():
            for g in opt.param_groups:
                if g.get("element_scale") is not None:
                    for p in g["params"]:
                        before[id(p)].copy_(p)

    def scale(opt, args, kwargs):
        with torch.no_grad():
            for g in opt.param_groups:
                if g.get("element_scale") is not None:
                    for p in g["params"]:
                        old = before[id(p)]
                        p.copy_(torch.addcmul(old, p - old, g["element_scale"]))

    optimizer.register_step_pre_hook(keep)
    optimizer.register_step_post_hook(scale)
    return optimizer
