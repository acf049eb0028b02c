"""Exploring starts of a mixture posterior inside :func:`savigp.fit` (K > 1, Adam or Adadelta).

A mixture over a posterior with several modes has local optima that no step size removes: both
components on one mode, or a component whose mean changes sign between inputs, half on each mode
(docs/mixtures.md, "Mixtures under stochastic training"). Which one a fit ends in is decided in
its first steps, by where its components start. :func:`explore` therefore spends a fraction of
the budget on ``starts`` short fits from different starts -- the model's own start and fresh
spreads of the component means (:meth:`savigp.posteriors.MixturePosterior.respread`) -- and keeps
the one with the highest full-data ELBO (eq. (17) of Bonilla et al. 2019, estimated with common
random numbers: the same draws for every start, so that the comparison's Monte Carlo error is
that of the difference), from which fit goes on. This is the restart strategy of EM for
mixtures (the "short runs" initialization of Biernacki, Celeux & Govaert 2003: several short
runs from random starts, the best by the objective continued) applied to the variational
mixture. Deterministic given the model and fit's ``seed``.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from .convergence import full_data_elbo
from .loop import LastGood

#: fit's default number of starts explored for a mixture (K > 1) with Adam or Adadelta
DEFAULT_STARTS = 4
#: fit's default fraction of the iterations spent on the exploration (all starts together)
DEFAULT_FRACTION = 0.2
#: the reflection move is tried after this fraction of the iterations ...
REFLECT_AT = 0.5
#: ... by two branches (kept as it is, reflected) of this fraction of the iterations each
REFLECT_FRACTION = 0.15
#: the last ANNEAL_FRACTION of the iterations are taken at ANNEAL_LR times fit's learning rates
ANNEAL_FRACTION = 0.1
ANNEAL_LR = 0.1
#: no exploration when a start would get fewer steps than this (nor a reflection move when a branch would)
MIN_STEPS = 20
#: the seeds of the starts' draws are fit's seed + SEED_STRIDE * (i + 1), start i = 0, 1, ...
SEED_STRIDE = 7919


@dataclass
class Exploration:
    """What :func:`search` did before fit's last phase.

    Attributes:
        starts, steps: ``starts`` starts of ``steps`` steps each (start 0: the model's own, the
            others fresh spreads of its means); ``elbo``: their full-data ELBO after those steps
            (one per start, common draws); ``kept``: the start kept.
        reflection: the reflection move (None if not tried): ``{"after": steps taken on the kept
            path before it, "steps": steps of each branch, "source": k, "target": l, "elbo": ELBO of
            the branch kept as it was, "elbo_reflected": of the reflected branch, "accepted": bool}``.
        path_steps: steps on the path to the model fit's last phase starts from (the kept start's,
            the steps before the move and the kept branch's); their per-step ELBO estimates open
            ``history.elbo``.
    """

    starts: int
    steps: int
    elbo: list = field(default_factory=list)
    kept: int = 0
    reflection: Optional[dict] = None
    path_steps: int = 0
    #: the per-step ELBO estimates of those ``path_steps`` steps
    trace: list = field(default_factory=list, repr=False)


def plan(iterations: int, starts: int, fraction: float, reflect: bool, anneal: bool) -> Optional[dict]:
    """The steps of each phase of fit for a mixture for its ``iterations`` (None: none but fit's
    own): ``start`` per start (``fraction * iterations / starts``), ``before`` the move on the kept
    start (to :data:`REFLECT_AT` of the iterations), ``branch`` per branch of the move
    (:data:`REFLECT_FRACTION`; 0 without it), ``final``, fit's own phase, and ``anneal``, the last
    :data:`ANNEAL_FRACTION` at a tenth of the rates (0 without it), so that all the steps taken
    add up to ``iterations``. A phase shorter than :data:`MIN_STEPS` is left out."""
    start = int(fraction * iterations) // starts if starts > 1 else 0
    branch = int(REFLECT_FRACTION * iterations) if reflect else 0
    cool = int(ANNEAL_FRACTION * iterations) if anneal else 0
    start, branch, cool = (n if n >= MIN_STEPS else 0 for n in (start, branch, cool))
    if start == 0 and branch == 0 and cool == 0:
        return None
    before = max(0, int(REFLECT_AT * iterations) - starts * start) if branch else 0
    final = iterations - (starts * start if start else 0) - before - 2 * branch - cool
    return {"start": start, "before": before, "branch": branch, "final": final, "anneal": cool}

def explorable(model, optimizer: str, params: list, state: Optional[dict], mixture: bool = True) -> bool:
    """Whether fit explores starts (``mixture``; else: whether it can anneal): a first-order
    optimizer (L-BFGS is left as it was), no resumed state, one process (not under
    torch.distributed), and for ``mixture`` a mixture with K > 1 that can respread its means, its
    means among the trained parameters."""
    from . import distributed

    post = model.posterior
    if optimizer not in ("adam", "adadelta") or state is not None:
        return False
    if mixture and (getattr(post, "num_components", 1) < 2 or not hasattr(post, "respread")
                    or not any(p is getattr(post, "mean", None) for p in params)):
        return False
    dist = torch.distributed
    return not (distributed.launched() or (dist.is_available() and dist.is_initialized()))


def _spread_seed(model, seed: int) -> int:
    """A seed for the fresh spreads from fit's ``seed`` and the model's start (its means), so that
    models built with different seeds explore different spreads even under one fit seed."""
    data = model.posterior.mean.detach().to("cpu", torch.float64).contiguous().numpy().tobytes()
    return (zlib.crc32(data) + 1_000_003 * int(seed)) % (2 ** 62)


def _score(model, num_samples: int, estimator: str, seed: int) -> float:
    """The full-data ELBO with the draws of ``seed`` (common to everything compared)."""
    return float(full_data_elbo(model, num_samples=num_samples, estimator=estimator, seed=int(seed) + SEED_STRIDE)[0])


def search(model, run: Callable[[int, int], object], *, steps: dict, starts: int, num_samples: int, estimator: str,
           seed: int) -> Exploration:
    """The phases of fit before its last (:func:`plan`'s ``steps``), on ``model`` in place, each
    fitted by ``run(steps, seed) -> TrainingHistory`` (a short :func:`savigp.fit` without a final
    ELBO or progress); every comparison is by the full-data ELBO
    (:func:`~savigp.training.convergence.full_data_elbo`, ``num_samples`` draws per point and
    component with ``estimator``, the same draws for every candidate, so that the comparison's
    Monte Carlo error is that of the difference).

    1. *Starts* (``steps["start"] > 0``): start 0 is the model as given, start i > 0 the given
       state with its component means spread afresh
       (:meth:`~savigp.posteriors.MixturePosterior.respread`, generator seeded by
       :func:`_spread_seed` + i); each is fitted for ``steps["start"]`` steps (every trained
       parameter reset to the given state first) and the best is kept.
    2. ``steps["before"]`` more steps on it.
    3. *Reflection move* (``steps["branch"] > 0``): the fit as it is and a copy whose lightest
       component is replaced by the reflection of the heaviest through the prior mean
       (:meth:`~savigp.posteriors.MixturePosterior.reflect`) are each fitted for ``steps["branch"]``
       steps; the better is kept. Two components on one mode of a sign-symmetric posterior (a
       local optimum 0.69 nats below the two-mode fit, which the starts' short runs cannot tell
       apart) then end on both; on a problem without the symmetry the reflected copy loses and the
       fit goes on as it was.

    Returns the :class:`Exploration` record; the model holds the parameters fit's last phase starts from.
    """
    post = model.posterior
    record = Exploration(starts=int(starts) if steps["start"] else 1, steps=int(steps["start"]))
    trace: list = []
    if steps["start"]:
        given, best = LastGood(model), LastGood(model)  # (the given parameters, saved at construction)
        base = _spread_seed(model, seed)
        traces = []
        for i in range(int(starts)):
            given.restore()
            if i > 0:
                post.respread(model.prior_factor, torch.Generator().manual_seed(base + i))
            traces.append(list(run(int(steps["start"]), int(seed) + SEED_STRIDE * (i + 1)).elbo))
            elbo = _score(model, num_samples, estimator, seed)
            record.elbo.append(elbo)
            if i == 0 or elbo > record.elbo[record.kept]:  # (a NaN estimate never wins)
                record.kept = i
                best.save()
        best.restore()
        trace += traces[record.kept]
    if steps["before"]:
        trace += run(int(steps["before"]), int(seed)).elbo
    if steps["branch"]:
        after = len(trace)
        w = post.weights().detach()
        k, l = int(w.argmax()), int(w.argmin())
        l = l if l != k else (k + 1) % post.num_components
        start = LastGood(model)
        branch_seed = int(seed) + SEED_STRIDE * (int(starts) + 1)
        as_is = list(run(int(steps["branch"]), branch_seed).elbo)
        e_as_is = _score(model, num_samples, estimator, seed)
        kept = LastGood(model)
        start.restore()
        post.reflect(k, l)
        reflected = list(run(int(steps["branch"]), branch_seed).elbo)
        e_reflected = _score(model, num_samples, estimator, seed)
        accepted = e_reflected > e_as_is
        if not accepted:
            kept.restore()
        trace += reflected if accepted else as_is
        record.reflection = {"after": after, "steps": int(steps["branch"]), "source": k, "target": l,
                             "elbo": e_as_is, "elbo_reflected": e_reflected, "accepted": bool(accepted)}
    record.path_steps, record.trace = len(trace), trace
    return record
