"""Shorter length-scales tried where a run to convergence slows down, so that a plateau where the
data's variation was taken for noise is not handed back as the optimum.

A stationary part's length-scale starts at its column's spread (:func:`savigp.kernels.spec.default_lengthscale`),
and from there the ELBO often climbs to a plateau where that part is nearly flat and the likelihood's
noise explains what it could have modelled: the classic local optimum of GP hyper-parameters
(Rasmussen & Williams 2006, §5.4.1, fig. 5.5: a long length-scale with large noise against a short
one with small noise). The rule of :mod:`savigp.training.until_converged` calls such a plateau
converged, rightly: its trend is flat. Measured (issue 57): elnino's ``rbf(t) + periodic(t, period=1)
* rbf(t)`` converged at ELBO -424.7 with the RBF's length-scale at 31 years and the noise at 0.23;
the same model crawling at a fourteenth of the rate (in years, before the steps were scaled to the
column's spread) left the plateau after 2000 steps and reached +5.15 at the 20000-step cap with the RBF
at 0.52 years (the anomalies), and a forecast NLPD of 1.34 against 1.79.

The move (tried by :mod:`savigp.training.until_converged` at the first round that gains little, and
once more where the rule or the cap would end the run):
for each learned length-scale in the inputs' units (a kernel family's :class:`Hyper` named
``lengthscale`` with ``units="scale"``; a periodic part's, relative to its sinusoid, has none) that is
at least :data:`LONG_FRACTION` of its column's spread, copies of the model with that length-scale at
:data:`FRACTIONS` of the spread are fitted for :data:`PROBE_STEPS` steps (fit's rate, no warm-up, no annealing);
the best copy by the full-data ELBO replaces the model where it gains more than twice the standard
error of the difference, :data:`MIN_GAIN_NATS` and RISE_PER_POINT nats per point, and the run goes on
from it with the copy's optimizer state. Where none gains, the model is as it was. A move is a
proposal judged by the ELBO, as the kernel search's are; it costs PROBE_STEPS steps per value tried
(at most two per long length-scale); the copies share the model's training data.
"""
from __future__ import annotations

import copy
import math
from typing import Callable, Optional

import torch

#: the length-scales tried, as fractions of their column's spread (each at least SPACINGS times the
#: column's median spacing, and at most half the length-scale as it stands)
FRACTIONS = (0.1, 0.01)
SPACINGS = 2.0
#: the steps each tried copy is fitted for
PROBE_STEPS = 300
#: a length-scale is tried shorter where it is at least this fraction of its column's spread
LONG_FRACTION = 0.5
#: a part's signal variance below this is put back to VARIANCE_START in a tried copy (a collapsed one)
VARIANCE_COLLAPSED, VARIANCE_START = 1e-6, 1.0
#: a move needs at least this gain (and twice its standard error, and RISE_PER_POINT nats per point)
MIN_GAIN_NATS = 1.0


def long_lengthscales(model) -> list:
    """``[(index, hyper, values)]``: the kernel modules of ``model`` (by their index in
    ``model.kernel.modules()``) with a learned length-scale in the inputs' units at least
    :data:`LONG_FRACTION` of the spread s of the columns it reads (the smallest spread of them), and
    the values to try: s times :data:`FRACTIONS`, at least :data:`SPACINGS` times the columns' median
    spacing (the largest of them: below it the part sees no two points together) and at most half
    the length-scale as it stands."""
    from ..kernels.base import Kernel

    X = model.train_x.detach().to(torch.float64)
    out = []
    for index, module in enumerate(model.kernel.modules()):
        if not isinstance(module, Kernel):
            continue
        for h in module.hypers:
            if h.name != "lengthscale" or h.units != "scale" or not hasattr(module, h.attr or h.name):
                continue
            value = getattr(module, h.attr or h.name)
            if not getattr(value.raw, "requires_grad", False):
                continue
            columns = X if module.active_dims is None else X[:, list(module.active_dims)]
            spread = float(columns.std(0, unbiased=False).min()) if columns.shape[0] > 1 else 0.0
            now = float(value().detach().min())
            if not (spread > 0 and now >= LONG_FRACTION * spread):
                continue
            least = SPACINGS * max(_median_spacing(columns[:, j]) for j in range(columns.shape[1]))
            values = sorted({v for v in (spread * f for f in FRACTIONS) if least <= v <= 0.5 * now}, reverse=True)
            if values:
                out.append((index, h, values))
    return out


def _median_spacing(column: torch.Tensor) -> float:
    """The median gap between the sorted distinct values of ``column (N,)``."""
    distinct = torch.unique(column)
    return float(torch.diff(distinct).median()) if distinct.numel() > 1 else 0.0


def try_shorter(model, fit_copy: Callable, score: Callable, now: tuple) -> Optional[dict]:
    """Fit a copy of ``model`` with each long length-scale set to each of its values to try
    (:func:`long_lengthscales`) for :data:`PROBE_STEPS` steps (``fit_copy(copy, steps, state)``: the
    run's fit of so many steps, at its rate, with no warm-up and no annealing, leaving its optimizer
    in ``state``) and score it (``score(model) -> (elbo, se)``, the run's full-data ELBO). ``now``: the
    model's ``(elbo, se)``. Returns the best copy that gains enough (module docstring) as
    ``{"model", "optimizer_state", "elbo", "se", "gain", "part", "lengthscale"}``, or None."""
    best = None
    floor = max(MIN_GAIN_NATS, 1e-3 * model.num_data)
    for index, h, values in long_lengthscales(model):
        for target in values:
            found = _trial(model, index, h, target, fit_copy, score)
            if found is None:
                continue
            gain = found["elbo"] - float(now[0])
            if math.isfinite(gain) and gain > max(2.0 * math.hypot(found["se"], float(now[1])), floor) \
                    and (best is None or gain > best["gain"]):
                best = {**found, "gain": gain}
    return best


def _trial(model, index: int, h, target: float, fit_copy: Callable, score: Callable) -> Optional[dict]:
    """A copy of ``model`` with the length-scale ``h`` of its kernel module ``index`` at ``target``,
    fitted for :data:`PROBE_STEPS` steps and scored; None where that fails."""
    shared = {id(model.train_x): model.train_x, id(model.train_y): model.train_y}  # (the data: read, never copied)
    trial = copy.deepcopy(model, memo=shared)
    module = list(trial.kernel.modules())[index]
    value = getattr(module, h.attr or h.name)
    with torch.no_grad():
        value.set(torch.full_like(value().detach(), float(target)))
        _revive_variance(module)
    state: dict = {}
    try:
        fit_copy(trial, PROBE_STEPS, state)
        elbo, se = score(trial)
    except (ArithmeticError, RuntimeError, ValueError):  # (a trial that fails is no move)
        return None
    optimizer = state.get("optimizer")
    return {"model": trial, "optimizer_state": optimizer.state_dict() if optimizer is not None else None,
            "elbo": float(elbo), "se": float(se), "part": f"{type(module).__name__} #{index}",
            "lengthscale": float(target)}


def _revive_variance(module) -> None:
    """Put the signal variance of the kernel ``module`` back to :data:`VARIANCE_START` (the families'
    default start) where it has collapsed below :data:`VARIANCE_COLLAPSED`. At the exact stationary
    point of the plateau (all noise; an L-BFGS polish reaches it) the part's variance is 0, and with it
    the ELBO's gradient in the length-scale and in q(u): a shorter length-scale alone does not move
    (the plateau's test problem: variance 1.7e-13, the tried copy 300 steps later at the plateau's
    ELBO to 7 digits)."""
    for h in getattr(module, "hypers", ()):
        if h.name != "variance" or h.floor is None or not hasattr(module, h.attr or h.name):
            continue
        value = getattr(module, h.attr or h.name)
        if not getattr(value.raw, "requires_grad", False):
            continue
        now = value().detach()
        value.set(torch.where(now < VARIANCE_COLLAPSED, torch.full_like(now, VARIANCE_START), now))
