"""A candidate settled at its optimum by L-BFGS (full batch, strong Wolfe line search, the Monte
Carlo draws fixed within an outer step; Nocedal & Wright 2006, §7.2): what the kernel search does to
every start and after Adam (:mod:`savigp.selection.kernel_search`), and what
:func:`to_optimum` runs on in rounds until the ELBO stops rising (the CO2 experiment's hand-built
kernel, trained as the search trains its candidates).

Adam at a fixed rate leaves a sharp optimum (a period over many cycles) at a random point of its
noise floor, nats below it; L-BFGS from there stays in the basin and ends at its top.
"""
from __future__ import annotations

import copy
import math
from typing import Callable, Optional

from ..training.fitting import fit
from .candidates import candidate_errors


def lbfgs_steps(model, options: dict, *, stop: Optional[Callable[..., bool]] = None) -> bool:
    """L-BFGS outer steps (:func:`savigp.training.fitting.fit` with ``options``, e.g. ``iterations``,
    ``groups``, ``seed``, ``estimator``; at step size 1, read every step). A trial point of its line
    search where the kernel matrix is not positive definite or the ELBO not finite raises inside
    torch's L-BFGS and leaves the parameters there: the model goes back to where the last whole outer
    step ended (a start whose first steps were good keeps them). ``stop``: fit's callback (the
    budget's), also asked before the first step. Returns False when a step failed."""
    last_good = [copy.deepcopy(model.state_dict())]
    if stop is not None and stop():
        return True

    def keep(step, terms):
        last_good[0] = copy.deepcopy(model.state_dict())
        return bool(stop()) if stop is not None else False

    try:
        fit(model, **{**options, "optimizer": "lbfgs", "lr": 1.0, "log_every": 1, "callback": keep,
                      "final_elbo": False})
    except candidate_errors():
        model.load_state_dict(last_good[0])
        return False
    return True


def settle(model, options: dict, polish: int, *, stop: Optional[Callable[..., bool]] = None):
    """L-BFGS on q(u) alone at the start's hyper-parameters (3 outer steps), then ``polish`` outer
    steps on everything (none for 0). Returns ``model``."""
    lbfgs_steps(model, {**options, "iterations": 3, "groups": ["posterior"]}, stop=stop)
    if polish > 0:
        lbfgs_steps(model, {**options, "iterations": polish}, stop=stop)
    return model


def to_optimum(model, options: dict, score: Callable[[], float], *, rounds: int = 40, steps: int = 10,
               tol: float = 1e-4) -> tuple:
    """:func:`settle` ``model`` on q(u), then rounds of ``steps`` L-BFGS outer steps on everything
    until a round gains under ``tol`` nats per training point by ``score()`` (a deterministic ELBO,
    e.g. the closed form), at most ``rounds``. A round whose step fails or whose score falls (or is
    not finite) is undone and ends the training. Returns ``(rounds run, the last score)``."""
    settle(model, options, 0)
    last, done = score(), 0
    for done in range(1, int(rounds) + 1):
        before = copy.deepcopy(model.state_dict())
        try:
            now = score() if lbfgs_steps(model, {**options, "iterations": int(steps)}) else math.nan
        except candidate_errors():
            now = math.nan
        if not math.isfinite(now) or now < last:
            model.load_state_dict(before)
            break
        gain, last = now - last, now
        if gain < tol * model.num_data:
            break
    return done, last
