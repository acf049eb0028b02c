"""Exploring starts of a mixture posterior inside :func:`savigp.fit` (Adam or Adadelta; K > 1, and
K = 1 started at a stationary point).

A mixture over a posterior with several modes has local optima that no step size removes: both
components on one mode, or a component whose mean changes sign between inputs, half on each mode
(docs/mixtures.md, "Mixtures under stochastic training"). Which one a fit ends in is decided in
its first steps, by where its components start. :func:`savigp.fit` therefore spends a fraction of
the budget on ``starts`` short fits from different starts (:func:`start_kinds`) -- the model's
own start, a start along the directions in which the prior moves f at the data most
(:func:`leading_directions`, :meth:`savigp.posteriors.MixturePosterior.spread_along`: smooth
functions of one sign, related by the likelihood's symmetry), fresh random spreads of the
component means (:meth:`~savigp.posteriors.MixturePosterior.respread`) -- and keeps the one with
the highest full-data ELBO (eq. (17) of Bonilla et al. 2019, estimated with common random
numbers: the same draws for every start, so that the comparison's Monte Carlo error is that of
the difference), from which fit goes on. This is the restart strategy of EM for mixtures (the
"short runs" initialization of Biernacki, Celeux & Govaert 2003: several short runs from random
starts, the best by the objective continued) applied to the variational mixture. Then a move
(:func:`move`: every component folded to one sign, the lightest replaced by the reflection of
the heaviest) competes with the fit as it is. A single Gaussian explores too when it starts at a
stationary point of the ELBO (:func:`stationary_start`: a likelihood symmetric about the prior
mean makes m = 0 one), and fit warns when it ends below what its exploration reached
(:func:`verdict`). Deterministic given the model and fit's ``seed``.

The exploration is phases of fit's schedule (:mod:`savigp.training.schedule`: each start, the
steps before the reflection move, its two branches), so a run interrupted inside it resumes
exactly; :func:`begin` and :func:`end` are what a phase does before its first step and after its
last, with what they keep between phases in the schedule's record (``memo``).
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from .._choices import OPTIMIZERS
from .convergence import full_data_elbo
from .loop import parameter_copies, restore_parameters
from .notes import Note

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
        reflection: the move (:func:`move`; None if not tried): ``{"after": steps taken on the kept
            path before it, "steps": steps of each branch, "source": k, "target": l, "elbo": ELBO of
            the branch kept as it was, "elbo_reflected": of the moved branch, "accepted": bool,
            "move": what the move did, e.g. "no fold, reflection"}``.
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

    def note(self) -> Note:
        """What the starts and the move did, one line (a :class:`~savigp.training.notes.Note` of kind
        ``"starts"``, a record, not a warning)."""
        parts = []
        if self.starts > 1:
            parts.append(f"{self.starts} starts of {self.steps} steps, kept start {self.kept} (full-data ELBO "
                         + ", ".join(f"{e:.6g}" for e in self.elbo) + ")")
        r = self.reflection
        if r is not None:
            parts.append(f"move ({r.get('move', 'reflection')}) of component {r['source']} onto {r['target']} after "
                         f"{r['after']} steps {'accepted' if r['accepted'] else 'declined'} (ELBO "
                         f"{r['elbo_reflected']:.6g} against {r['elbo']:.6g})")
        return Note("starts", "mixture search (savigp.fit's starts): " + "; ".join(parts))


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
    optimizer (its ``first_order``: L-BFGS is left as it was), and for ``mixture`` a family that takes the component
    moves (:attr:`savigp.posteriors.Posterior.component_moves`) with its means
    among the trained parameters and either K > 1 or, for K = 1, a start at the prior mean (every
    mean 0) that is a stationary point of the ELBO (:func:`stationary_start`: the test runs here,
    once per run; a fitted model is at a stationary point too, and is not explored again). (A resumed run, one process
    or several under torch.distributed: the same schedule, :mod:`savigp.training.schedule`.)"""
    post = model.posterior
    if not OPTIMIZERS[optimizer].first_order:
        return False
    if not mixture:
        return True
    if not (post.component_moves and any(p is post.component_means for p in params)):
        return False
    if post.num_components >= 2:
        return True
    # a log-concave likelihood gives a posterior of one mode: no saddle to test for (and no extra calls);
    # the saddle the starts leave is the prior mean (means 0): a fitted model trained further sits at a
    # stationary point too, its optimum, and explored four starts and printed a mixture search for its
    # one component (issue 54)
    if getattr(model.likelihood, "log_concave", False) or bool(post.component_means.detach().abs().max() > 0):
        return False
    return stationary_start(model)


#: the leading directions and the stationarity test look at this many training inputs at most (a seeded subset)
MAX_POINTS = 1000
#: :func:`stationary_start`'s draws per point, its gradient estimates (at most; in rounds of
#: STATIONARY_ROUND), the ratio below which the start is stationary, and the ratio above which a
#: round of at least 8 estimates already says it is not
STATIONARY_SAMPLES, STATIONARY_REPEATS, STATIONARY_ROUND, STATIONARY_RATIO, MOVING_RATIO = 16, 24, 8, 10.0, 40.0

def _subset(model, seed: int) -> torch.Tensor:
    """Indices of at most :data:`MAX_POINTS` training rows (all of them, or a seeded random subset)."""
    N = int(model.num_data)
    if N <= MAX_POINTS:
        return torch.arange(N, device=model.device)
    return torch.randperm(N, generator=torch.Generator().manual_seed(int(seed)))[:MAX_POINTS].to(model.device)


@torch.no_grad()
def leading_directions(model, count: int, seed: int = 0) -> torch.Tensor:
    """The ``count`` directions ``(count, Q, M)`` of the whitened means along which the prior moves
    the latent functions at the training inputs most, each as long as a typical prior draw of f is there.

    In whitened coordinates f_j(X) = mu_j + V_j^T m_j with V_j = L_zz^-1 K_zx (Bonilla et al. 2019,
    eq. (22)), so the mean square of f_j at the inputs along a unit direction e is e^T G_j e,
    G_j = V_j V_j^T / N: the leading eigenvectors of G_j (over all the latent functions, the largest
    eigenvalues lambda first) are the smoothest functions that the data's inputs see most, and
    by the Perron-Frobenius theorem the first of a positive kernel is of one sign at every input.
    Each is scaled to sqrt(tr G_j / lambda), so that f moves along it by the root mean square of a
    prior draw, sqrt(tr G_j), and signed so that f rises on average. At most :data:`MAX_POINTS`
    inputs are used (a subset seeded by ``seed``).
    """
    X = model.train_x[_subset(model, seed)]
    Z = model.kernel_inducing()
    Q, M = model.num_latent, model.num_inducing
    L = model.prior_factor().to(torch.float64)
    V = torch.linalg.solve_triangular(L, model.kernel(Z, X).to(torch.float64).expand(Q, M, X.shape[0]), upper=False)
    lam, E = torch.linalg.eigh(V @ V.transpose(-1, -2) / X.shape[0])  # (Q, M), (Q, M, M), ascending
    total = lam.sum(-1).clamp_min(1e-300)  # (Q,)
    order = torch.argsort(lam.flatten(), descending=True, stable=True)[:int(count)]
    out = torch.zeros(len(order), Q, M, dtype=torch.float64)
    for r, i in enumerate(order.tolist()):
        j, k = divmod(i, M)
        e = E[j, :, k]
        e = e * (1.0 if float((V[j].transpose(0, 1) @ e).sum()) >= 0 else -1.0)
        out[r, j] = e * (total[j] / lam[j, k].clamp_min(1e-300 * total[j])).sqrt()
    return out.to(device=model.device, dtype=model.posterior.component_means.dtype)


def stationary_start(model, seed: int = 0) -> bool:
    """Whether the expected gradient of the ELBO (eq. (17)) in the posterior's means is zero at the
    model's parameters, as far as independent estimates g_1..g_R of it tell: the ratio of the
    squared norm of their mean to its expected value at a stationary point, ||mean g||^2 / (sum of
    the coordinates' sample variances / R), is about 1 there (between an F(1, R - 1) and an
    F(D, D (R - 1)) variable, D the number of means: the estimates' errors are correlated across
    coordinates) and grows like R with the signal. Stationary: below :data:`STATIONARY_RATIO` after
    :data:`STATIONARY_REPEATS` estimates (an F(1, 23) variable exceeds 10 with probability 0.004);
    not: above it, or above :data:`MOVING_RATIO` after a round of :data:`STATIONARY_ROUND`. Each
    estimate is on at most :data:`MAX_POINTS` inputs (scaled to N), :data:`STATIONARY_SAMPLES`
    draws per point, the model's ``"auto"`` estimator (a closed form where there is one, else the
    reparameterization where the likelihood is differentiable). A likelihood symmetric about the
    prior mean (y = |f|, y = f^2, y = (f_1 + i f_2)^3) makes the prior mean (m = 0) such a point: a
    first-order fit started there leaves it only by its Monte Carlo noise, in directions that noise
    picks."""
    post = model.posterior
    idx = _subset(model, seed)
    est = model.resolved_estimator("auto")
    gen = torch.Generator(device="cpu" if model.device.type == "cpu" else model.device).manual_seed(int(seed) + 17)
    grads: list = []
    ratio = 0.0
    while len(grads) < STATIONARY_REPEATS:
        for _ in range(STATIONARY_ROUND):
            terms = model.elbo(idx, num_samples=STATIONARY_SAMPLES, estimator=est, generator=gen)
            grads.append(torch.autograd.grad(terms.elbo, post.component_means)[0].detach().flatten().to(torch.float64))
        g = torch.stack(grads)  # (R, D)
        noise = float(g.var(0).sum()) / g.shape[0]
        signal = float(g.mean(0).pow(2).sum())
        if noise == 0.0:  # (an exact gradient: a closed form)
            return signal == 0.0
        ratio = signal / noise
        if ratio > MOVING_RATIO:
            return False
    return ratio < STATIONARY_RATIO

def _spread_seed(model, seed: int) -> int:
    """A seed for the fresh spreads from fit's ``seed`` and the model's start (its means), so that
    models built with different seeds explore different spreads even under one fit seed."""
    data = model.posterior.component_means.detach().to("cpu", torch.float64).contiguous().numpy().tobytes()
    return (zlib.crc32(data) + 1_000_003 * int(seed)) % (2 ** 62)


def score(model, num_samples: int, estimator: str, seed: int, shard: tuple = (0, 1), reduce=None) -> float:
    """The full-data ELBO with the draws of ``seed`` (common to everything compared); ``shard`` and
    ``reduce``: :func:`~savigp.training.convergence.full_data_elbo`'s (several ranks)."""
    return float(full_data_elbo(model, num_samples=num_samples, estimator=estimator, seed=int(seed) + SEED_STRIDE,
                                shard=shard, reduce=reduce)[0])


def start_kinds(at_prior: bool, count: int) -> list:
    """What each of ``count`` starts is: ``"given"`` (the model as given; left out when its means
    all sit at the prior mean, a stationary point of a likelihood symmetric about it), then
    ``"leading"`` (:func:`leading_directions`), then ``"spread"`` (fresh random means)."""
    return ((["leading"] if at_prior else ["given", "leading"]) + ["spread"] * int(count))[:int(count)]


def _start(model, index: int, memo: dict, seed: int) -> None:
    """Set start ``index`` (:func:`start_kinds`) on the model, whose parameters are the given ones."""
    post = model.posterior
    kind = start_kinds(bool(memo.get("at_prior", False)), index + 1)[index]
    gen = torch.Generator().manual_seed(int(memo["base"]) + index)
    if kind == "leading":
        post.spread_along(leading_directions(model, 2 if post.num_components >= 3 else 1, seed), gen)
    elif kind == "spread":  # fresh random means (K = 1: a draw of the prior's around the given mean)
        post.restart_means(model.prior_factor, gen)


#: draws per point of :func:`direct_score`
DIRECT_SAMPLES = 128
#: the symmetry maps a move tries at most (the reflection, label switches, rotations of two latent functions)
MAX_MAPS = 16


def symmetry_maps(Q: int, K: int) -> dict:
    """Linear maps of the Q latent functions ``{name: (Q, Q)}`` that a likelihood's symmetry may be
    made of (each maps the prior of latent functions with one kernel to itself): the reflection -I,
    then for every pair (i, j) the swap of f_i and f_j (a label switch) and, for K >= 3, the rotations
    of (f_i, f_j) by +-2 pi / K (K modes related by a rotation), at most :data:`MAX_MAPS`."""
    eye = torch.eye(Q, dtype=torch.float64)
    out = {"reflection": -eye}
    for i in range(Q):
        for j in range(i + 1, Q):
            P = eye.clone()
            P[[i, j]] = P[[j, i]]
            out[f"swap {i},{j}"] = P
            for sign in ((1, -1) if K >= 3 else ()):
                a = sign * 2 * math.pi / K
                R = eye.clone()
                R[i, i], R[i, j], R[j, i], R[j, j] = math.cos(a), -math.sin(a), math.sin(a), math.cos(a)
                out[f"rotation {i},{j} by {'+' if sign > 0 else '-'}2pi/{K}"] = R
    return dict(list(out.items())[:MAX_MAPS])


def direct_score(model, seed: int) -> float:
    """The ELBO on at most :data:`MAX_POINTS` training points (scaled to N), :data:`DIRECT_SAMPLES`
    draws per point shared by the components, the model's ``"auto"`` estimator, the draws of ``seed``: a
    comparison of candidate parameters without fitting them (common random numbers)."""
    gen = torch.Generator(device="cpu" if model.device.type == "cpu" else model.device).manual_seed(int(seed) + 29)
    with torch.no_grad():
        return float(model.elbo(_subset(model, seed), num_samples=DIRECT_SAMPLES,
                                estimator=model.resolved_estimator("auto"), generator=gen).elbo)


#: the (source, target, map) candidates a move scores at most, the closest pairs of components first
MAX_CANDIDATES = 48


def move(model, seed: int = 0) -> tuple:
    """The move of the exploration's second branch, in place; returns ``(source, target, what it
    did)``. Each component is folded to one sign per latent function
    (:meth:`~savigp.posteriors.MixturePosterior.fold`: a sign flip on the inputs where its mean has
    the minority's sign) where that raises the ELBO on the spot (:func:`direct_score`; a component
    on a mode whose functions cross zero loses by it); then, for K > 1, one component (the target)
    is replaced by the image of another (the source) under a map of :func:`symmetry_maps`
    (:meth:`~savigp.posteriors.MixturePosterior.transform`: the reflection through the prior mean,
    label switches, rotations), the (source, target, map) with the highest ELBO on the spot among
    at most :data:`MAX_CANDIDATES` (the closest pairs first): the image of a mode under a symmetry
    of the likelihood is a mode, so it scores at once, and replacing a second component on one
    mode by it gains. Further replacements follow while each raises that ELBO (up to K - 1: all K
    components on one mode, spread over K). Under a symmetric likelihood the folded components are
    each on one mode and the targets move to modes no component had; elsewhere the moved copy
    loses the comparison and the fit goes on as it was. Returns the first replacement's source and
    target."""
    post = model.posterior
    folded = []
    for k in range(post.num_components):  # (a fold is kept where it raises the ELBO on the spot)
        before, score = parameter_copies(model), direct_score(model, seed)
        if bool(post.fold(k, model.prior_factor).any()) and direct_score(model, seed) > score:
            folded.append(k)
        else:
            restore_parameters(model, before)
    did = f"fold of {folded}" if folded else "no fold"
    if post.num_components == 1:
        return 0, 0, did
    maps = symmetry_maps(post.num_latent, post.num_components)
    done, current = [], None
    for _ in range(post.num_components - 1):  # (K - 1 components at most: all K on one mode, spread over K)
        candidates = [(k, l, name) for k, l in post.component_pairs() for name in maps][:MAX_CANDIDATES]
        base, scores = parameter_copies(model), {}
        for k, l, name in candidates:
            restore_parameters(model, base)
            post.transform(k, l, maps[name], model.prior_factor)
            scores[(k, l, name)] = direct_score(model, seed)
        restore_parameters(model, base)
        best = max(scores, key=scores.get)
        if done and not scores[best] > current:  # (a further replacement only where it gains)
            break
        post.transform(best[0], best[1], maps[best[2]], model.prior_factor)
        done.append(best)
        current = scores[best]
    k, l, _ = done[0]
    return k, l, ", ".join([did] + [f"{name} of {a} onto {b}" for a, b, name in done])


def begin(model, phase: dict, memo: dict, seed: int) -> None:
    """What a phase of the exploration does before its first step (module docstring; the phases
    are :mod:`savigp.training.schedule`'s, ``seed`` fit's). ``memo`` is the schedule's record of
    the exploration (plain values and tensors, kept in fit's resumable state): what the starts
    and the move compare and keep, so that a resumed run decides as the uninterrupted one.

    1. *Starts*: each from the given parameters (kept in ``memo["given"]``), start i as
       :func:`start_kinds` says (the given start, unless its means sit at the prior mean; the
       leading directions; fresh spreads, generator seeded by :func:`_spread_seed` + i).
    2. *Move*: branch 0 is the fit as it is (kept in ``memo["branch_start"]``), branch 1 the same
       start moved (:func:`move`: folded where that helps, and for K > 1 one component replaced by
       the image of another under a symmetry map). (``before``: the steps between, on the kept
       start.)

    Idempotent: a run resumed before the phase's first step does it again with the same result."""
    post = model.posterior
    if phase["kind"] == "start":
        if phase["index"] == 0:
            memo.update(given=parameter_copies(model), base=_spread_seed(model, seed), elbo=[], kept=0,
                        at_prior=bool(float(post.component_means.detach().abs().max()) == 0.0))
        else:
            restore_parameters(model, memo["given"])
        _start(model, int(phase["index"]), memo, seed)
    elif phase["kind"] == "branch" and phase["index"] == 0:
        memo.update(branch_start=parameter_copies(model))
    elif phase["kind"] == "branch":
        restore_parameters(model, memo["branch_start"])
        k, l, did = move(model, seed)
        memo.update(source=k, target=l, move=did)


def end(model, phase: dict, memo: dict, score: Callable[[], float], last_start: bool) -> None:
    """What a phase of the exploration does after its last step: a start's full-data ELBO
    (``score()``, eq. (17) of Bonilla et al. 2019 with the draws common to every candidate, so that
    the comparison's Monte Carlo error is that of the difference) and the best start's parameters;
    after the last start (``last_start``) the model takes them. Branch 0's ELBO and parameters;
    after branch 1, the better branch is kept (the moved one only if its ELBO is higher:
    components that change sign between inputs, or two components on one mode, of a
    sign-symmetric posterior then end on both modes; on a problem without the symmetry the moved
    copy loses and the fit goes on as it was)."""
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


class LocalOptimumWarning(UserWarning):
    """:func:`savigp.fit` ended below the full-data ELBO that one of its own starts or moves reached."""


#: a fit is said to end below its exploration when its ELBO is below the best the exploration
#: reached by more than this many standard errors of the final estimate (common draws)
BELOW_SE = 3.0


def verdict(model, record: Optional[Exploration], num_samples: int, estimator: str, seed: int, shard: tuple = (0, 1),
            reduce=None) -> Optional["Note"]:
    """A :class:`~savigp.training.notes.Note` (kind ``"local optimum"``, :class:`LocalOptimumWarning`) when the fit ended below an ELBO that its exploration reached (``record``:
    every start's full-data ELBO after its short run and both branches' after the move), else None.
    The fitted model's full-data ELBO is estimated with the draws of the exploration's comparisons
    (:func:`score`'s: common random numbers; ``shard``, ``reduce`` for several ranks). The fit went on from the best of them,
    so a fit that ends lower has left that basin for a worse one (or its learning rate is too high
    for it to stay), and a longer fit from that start, or a lower ``lr``, should do better."""
    if record is None:
        return None
    reached = {f"start {i}": e for i, e in enumerate(record.elbo)}
    if record.reflection is not None:
        reached.update({"the move's branch as it was": record.reflection["elbo"],
                        "the move's moved branch": record.reflection["elbo_reflected"]})
    reached = {k: v for k, v in reached.items() if math.isfinite(v)}
    if not reached:
        return None
    best = max(reached, key=reached.get)
    final, se = full_data_elbo(model, num_samples=num_samples, estimator=estimator, seed=int(seed) + SEED_STRIDE,
                               shard=shard, reduce=reduce)
    if final < reached[best] - BELOW_SE * se:
        return Note("local optimum", f"the fit ended at a full-data ELBO of {final:.2f} (s.e. {se:.2f}), below the "
                    f"{reached[best]:.2f} that {best} of its exploration reached (the same draws): it left the basin it "
                    "was started in for a worse one", "a lower lr or more starts may keep it (history.starts holds the "
                    "record)", LocalOptimumWarning)
    return None


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
                          "elbo_reflected": float(memo["elbo_reflected"]), "accepted": bool(memo["accepted"]),
                          "move": str(memo.get("move", "reflection"))}
        path += int(branch[0]["steps"])
    out.path_steps, out.trace = path, list(trace)
    return out
