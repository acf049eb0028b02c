"""Exploring starts of a mixture posterior inside :func:`savigp.fit` (K > 1, Adam or Adadelta).

A mixture over a posterior with several modes has local optima that no step size removes: both
components on one mode, or a component whose mean changes sign between inputs, half on each mode
(docs/mixtures.md, "Mixtures under stochastic training"). Which one a fit ends in is decided in
its first steps, by where its components start. :func:`savigp.fit` therefore spends a fraction of
the budget on ``starts`` short fits from different starts -- the model's own start and fresh
spreads of the component means (:meth:`savigp.posteriors.MixturePosterior.respread`) -- and keeps
the one with the highest full-data ELBO (eq. (17) of Bonilla et al. 2019, estimated with common
random numbers: the same draws for every start, so that the comparison's Monte Carlo error is
that of the difference), from which fit goes on. This is the restart strategy of EM for
mixtures (the "short runs" initialization of Biernacki, Celeux & Govaert 2003: several short
runs from random starts, the best by the objective continued) applied to the variational
mixture. Deterministic given the model and fit's ``seed``.

The exploration is phases of fit's schedule (:mod:`savigp.training.schedule`: each start, the
steps before the reflection move, its two branches), so a run interrupted inside it resumes
exactly; :func:`begin` and :func:`end` are what a phase does before its first step and after its
last, with what they keep between phases in the schedule's record (``memo``).
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from .convergence import full_data_elbo
from .loop import parameter_copies, restore_parameters

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
    """What fit's exploration did before its own phase (:func:`begin`, :func:`end`).

    Attributes:
        starts, steps: ``starts`` starts of ``steps`` steps each (start 0: the model's own, the
            others fresh spreads of its means); ``elbo``: their full-data ELBO after those steps
            (one per start, common draws); ``kept``: the start kept.
        reflection: the reflection move (None if not tried): ``{"after": steps taken on the kept
            path before it, "steps": steps of each branch, "source": k, "target": l, "elbo": ELBO of
            the branch kept as it was, "elbo_reflected": of the reflected branch, "accepted": bool}``.
        path_steps: steps on the path to the model fit's last phase starts from (the kept start's,
            the steps before the move and the kept branch's); the per-step ELBO estimates of those
            this call of fit took (all, unless it resumed a run) open ``history.elbo``.
    """

    starts: int
    steps: int
    elbo: list = field(default_factory=list)
    kept: int = 0
    reflection: Optional[dict] = None
    path_steps: int = 0
    #: the per-step ELBO estimates of those of the ``path_steps`` steps this call of fit took
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

def explorable(model, optimizer: str, params: list, mixture: bool = True) -> bool:
    """Whether fit explores starts (``mixture``; else: whether it can anneal): a first-order
    optimizer (L-BFGS is left as it was), and for ``mixture`` a mixture with K > 1 that can respread
    its means, its means among the trained parameters. (A resumed run, one process or several
    under torch.distributed: the same schedule, :mod:`savigp.training.schedule`.)"""
    post = model.posterior
    if optimizer not in ("adam", "adadelta"):
        return False
    return not mixture or (getattr(post, "num_components", 1) >= 2 and hasattr(post, "respread")
                           and any(p is getattr(post, "mean", None) for p in params))


def _spread_seed(model, seed: int) -> int:
    """A seed for the fresh spreads from fit's ``seed`` and the model's start (its means), so that
    models built with different seeds explore different spreads even under one fit seed."""
    data = model.posterior.mean.detach().to("cpu", torch.float64).contiguous().numpy().tobytes()
    return (zlib.crc32(data) + 1_000_003 * int(seed)) % (2 ** 62)


def score(model, num_samples: int, estimator: str, seed: int, shard: tuple = (0, 1), reduce=None) -> float:
    """The full-data ELBO with the draws of ``seed`` (common to everything compared); ``shard`` and
    ``reduce``: :func:`~savigp.training.convergence.full_data_elbo`'s (several ranks)."""
    return float(full_data_elbo(model, num_samples=num_samples, estimator=estimator, seed=int(seed) + SEED_STRIDE,
                                shard=shard, reduce=reduce)[0])


def begin(model, phase: dict, memo: dict, seed: int) -> None:
    """What a phase of the exploration does before its first step (module docstring; the phases
    are :mod:`savigp.training.schedule`'s, ``seed`` fit's). ``memo`` is the schedule's record of
    the exploration (plain values and tensors, kept in fit's resumable state): what the starts
    and the move compare and keep, so that a resumed run decides as the uninterrupted one.

    1. *Starts*: start 0 is the model as given (its parameters are kept in ``memo["given"]``),
       start i > 0 the given state with its component means spread afresh
       (:meth:`~savigp.posteriors.MixturePosterior.respread`, generator seeded by
       :func:`_spread_seed` + i, every trained parameter reset to the given state first).
    2. *Reflection move*: branch 0 is the fit as it is (kept in ``memo["branch_start"]``), branch 1
       the same start with its lightest component replaced by the reflection of the heaviest
       through the prior mean (:meth:`~savigp.posteriors.MixturePosterior.reflect`).
       (``before``: the steps between, on the kept start.)

    Idempotent: a run resumed before the phase's first step does it again with the same result."""
    post = model.posterior
    if phase["kind"] == "start":
        if phase["index"] == 0:
            memo.update(given=parameter_copies(model), base=_spread_seed(model, seed), elbo=[], kept=0)
        else:
            restore_parameters(model, memo["given"])
            post.respread(model.prior_factor, torch.Generator().manual_seed(int(memo["base"]) + int(phase["index"])))
    elif phase["kind"] == "branch" and phase["index"] == 0:
        w = post.weights().detach()
        k, l = int(w.argmax()), int(w.argmin())
        l = l if l != k else (k + 1) % post.num_components
        memo.update(branch_start=parameter_copies(model), source=k, target=l)
    elif phase["kind"] == "branch":
        restore_parameters(model, memo["branch_start"])
        post.reflect(int(memo["source"]), int(memo["target"]))


def end(model, phase: dict, memo: dict, score: Callable[[], float], last_start: bool) -> None:
    """What a phase of the exploration does after its last step: a start's full-data ELBO
    (``score()``, eq. (17) of Bonilla et al. 2019 with the draws common to every candidate, so that
    the comparison's Monte Carlo error is that of the difference) and the best start's parameters;
    after the last start (``last_start``) the model takes them. Branch 0's ELBO and parameters;
    after branch 1, the better branch is kept (the reflected one only if its ELBO is higher:
    two components on one mode of a sign-symmetric posterior then end on both; on a problem
    without the symmetry the reflected copy loses and the fit goes on as it was)."""
    if phase["kind"] == "start":
        elbo = score()
        memo["elbo"].append(elbo)
        if phase["index"] == 0 or elbo > memo["elbo"][memo["kept"]]:  # (a NaN estimate never wins)
            memo.update(kept=int(phase["index"]), best=parameter_copies(model))
        if last_start:
            restore_parameters(model, memo.pop("best"))
            memo.pop("given")
    elif phase["kind"] == "branch" and phase["index"] == 0:
        memo.update(elbo_as_is=score(), as_is=parameter_copies(model))
    elif phase["kind"] == "branch":
        reflected = score()
        memo["accepted"] = bool(reflected > memo["elbo_as_is"])
        memo["elbo_reflected"] = reflected
        if not memo["accepted"]:
            restore_parameters(model, memo["as_is"])
        memo.pop("as_is"), memo.pop("branch_start")


def on_path(phase: dict, memo: dict) -> bool:
    """Whether ``phase``'s steps are on the path to the model fit goes on with (the kept start's,
    the kept branch's, every other phase's), as far as the exploration has decided."""
    if phase["kind"] == "start":
        return "kept" in memo and phase["index"] == memo["kept"] and "given" not in memo
    if phase["kind"] == "branch":
        return "accepted" in memo and phase["index"] == int(memo["accepted"])
    return True


def record(run_phases: list, memo: dict, trace: list) -> Optional[Exploration]:
    """The :class:`Exploration` of one fit's phases ``run_phases`` (None without starts or a move):
    its ``trace`` is ``trace``, the per-step ELBOs of the steps on its path taken by this call."""
    starts = [ph for ph in run_phases if ph["kind"] == "start"]
    branch = [ph for ph in run_phases if ph["kind"] == "branch"]
    if not starts and not branch:
        return None
    out = Exploration(starts=len(starts) if starts else 1, steps=int(starts[0]["steps"]) if starts else 0,
                      elbo=list(memo.get("elbo", [])), kept=int(memo.get("kept", 0)))
    before = sum(int(ph["steps"]) for ph in run_phases if ph["kind"] == "before")
    path = (out.steps if starts else 0) + before
    if branch and "accepted" in memo:
        out.reflection = {"after": path, "steps": int(branch[0]["steps"]), "source": int(memo["source"]),
                          "target": int(memo["target"]), "elbo": float(memo["elbo_as_is"]),
                          "elbo_reflected": float(memo["elbo_reflected"]), "accepted": bool(memo["accepted"])}
        path += int(branch[0]["steps"])
    out.path_steps, out.trace = path, list(trace)
    return out
