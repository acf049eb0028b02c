"""Growing a mixture posterior and choosing its number of components K.

* :func:`grow`: K -> K + 1 in place, by a *birth* that splits one component along the principal
  direction of its covariance, m +- sqrt(lambda) v / 2 with half the weight each and the
  covariance reduced so that the pair keeps the parent's first two moments (the split move of
  Richardson & Green 1997 and of Ueda et al. 2000's split-and-merge EM): the grown mixture starts
  next to where the K-component fit ended.
* :func:`restart`: a fresh K-component posterior (means spread by
  :func:`savigp.posteriors.entropy.spread_means` from a new seed), the model's hyper-parameters
  kept: a new start for a posterior with several basins.
* :func:`choose_components`: fit K = 1, 2, ... up to ``max_components``; each K is fitted from a
  birth of the previous K's fit and from ``restarts`` fresh starts, the fit with the highest
  full-data ELBO kept; K grows while the kept fit's full-data ELBO exceeds the previous K's by more
  than ``min_gain_se`` Monte Carlo standard errors of the difference. The ELBO is the model's own
  (eq. (17) with whatever entropy term the model uses for K > 1), so the choice is as good as that
  entropy's ranking of K (see docs/mixtures.md). The search proposes the candidates of each K; the
  candidate loop (:mod:`savigp.selection.candidates`) fits, scores, rejects and compares them.
"""
from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Optional

import torch

from .._choices import ESTIMATORS
from ..model import SAVIGP
from ..training.component_checks import ComponentWarning
from ..training.convergence import ConvergenceWarning, full_data_elbo
from .candidates import Candidate, CandidateLoop, Fitted, Trial, best as best_trial, fit_while_rising


def _check_growable(model: SAVIGP):
    """The model's posterior, if it takes the component moves (a mixture family) and the model has no
    mean head that holds the posterior it was built with; else a ValueError saying which."""
    post = model.posterior
    if not post.component_moves:
        raise ValueError(f"growing K needs a mixture posterior ('full', 'diag', 'diag-u': component_moves); this "
                         f"model's is {type(post).__name__}")
    if model.head.size:
        raise ValueError("growing K is not supported with a mean head (mean_basis_size > 0): the head holds the "
                         "posterior it was built with")
    return post


def disagreement(model: SAVIGP, *, num_samples: int = 32, max_points: int = 1000, seed: int = 0) -> torch.Tensor:
    """How much the data disagree with each component, ``(K,)``: sum_n Var_{f ~ q_k(f_n)}[log p(y_n | f)],
    the spread of the log-likelihood of each data point over the component's own marginal q_k(f_n)
    (Bonilla et al. 2019, eq. (22)-(23)), from ``num_samples`` draws per point shared by the
    components, on at most ``max_points`` training points (a seeded subset, scaled to N). A
    component that sits on one mode of the posterior has values of f that the data judge alike; one
    that straddles two modes, or a saddle between them, covers values the data judge very
    differently: the data disagree with it, and it is the one a birth (:func:`grow`) splits."""
    N = int(model.num_data)
    gen = torch.Generator().manual_seed(int(seed))
    idx = torch.arange(N) if N <= max_points else torch.randperm(N, generator=gen)[:int(max_points)]
    idx = idx.to(model.device)
    with torch.no_grad():
        mean, var, _ = model.predict_latent(model.train_x[idx])  # (K, n, Q)
        eps = torch.randn((int(num_samples), 1) + tuple(mean.shape[1:]), generator=gen, dtype=torch.float64)
        f = mean + var.clamp_min(0).sqrt() * eps.to(mean)  # (S, K, n, Q)
        logp = model.likelihood.log_prob(model.train_y[idx], f)  # (S, K, n)
        return logp.var(0).sum(-1) * (N / idx.numel())


@torch.no_grad()
def grow(model: SAVIGP, component: Optional[int] = None, *, entropy: Optional[str] = None) -> SAVIGP:
    """Add a component to ``model``'s mixture in place by splitting one (a birth,
    :meth:`savigp.posteriors.MixturePosterior.split`): component k (default: the one the data
    disagree with most, :func:`disagreement`) becomes two halves at m +- a along its widest
    direction, each with half its weight, with the pair's mean and covariance the parent's (Richardson
    & Green 1997; Ueda et al. 2000's split-and-merge EM): the grown mixture starts next to where the
    K-component fit ended. Returns ``model``.

    ``entropy``: the grown mixture's entropy term (``"bound"``, ``"mc"``, ...; None: the model's
    mixture's, or the library's default when the model has a single full Gaussian). Raises
    ValueError for posteriors that are not mixtures ('joint') or models with a mean head.
    """
    post = _check_growable(model)
    K = post.num_components
    k = int(disagreement(model).argmax()) if component is None else int(component)
    if not 0 <= k < K:
        raise ValueError(f"component must be in [0, {K}), got {component}")
    model.replace_posterior(post.grown(k, lambda: model.prior_factor().detach().cpu(), entropy=entropy))
    return model


def restart(model: SAVIGP, num_components: int, seed: int, *, entropy: Optional[str] = None) -> SAVIGP:
    """A copy of ``model`` with a fresh ``num_components``-component posterior (means spread from
    ``seed``; kernel, likelihood and inducing inputs kept; ``entropy`` as in :func:`grow`)."""
    _check_growable(model)
    out = copy.deepcopy(model)
    out.replace_posterior(out.posterior.restarted(int(num_components), lambda: out.prior_factor().detach().cpu(),
                                                  generator=torch.Generator().manual_seed(int(seed)), entropy=entropy))
    return out


def elbo_estimate(model: SAVIGP, *, num_samples: int = 1000, repeats: int = 4, estimator: str = "auto",
                  seed: int = 0) -> tuple[float, float]:
    """The ELBO on all the data (eq. (17)) as the mean of ``repeats`` independent evaluations of
    :func:`savigp.training.convergence.full_data_elbo` (chunked, ``num_samples`` draws per point and
    component), and its standard error (their standard deviation / sqrt(repeats), so that the error
    of a Monte Carlo entropy is included; a closed-form or quadrature estimator and a deterministic
    entropy give 0)."""
    if repeats < 2:
        raise ValueError(f"repeats must be >= 2 (the standard error needs two), got {repeats}")
    est = model.resolved_estimator(estimator)
    vals = torch.tensor([full_data_elbo(model, num_samples=num_samples, estimator=est, seed=int(seed) * 1000 + r)[0]
                         for r in range(repeats)], dtype=torch.float64)
    return float(vals.mean()), float(vals.std() / math.sqrt(repeats))


@torch.no_grad()
def adopt(model: SAVIGP, source: SAVIGP) -> SAVIGP:
    """Make ``model`` hold ``source``'s posterior (any K) and every other parameter and buffer, in
    place (``source`` is a copy of ``model`` refitted, e.g. by :func:`choose_components`)."""
    if source is not model:
        model.replace_posterior(copy.deepcopy(source.posterior))
        model.load_state_dict(source.state_dict())
    return model


@dataclass
class ComponentSearch:
    """What :func:`choose_components` did.

    Attributes:
        model: the chosen model (K = ``num_components``), fitted.
        num_components: the chosen K.
        table: per K tried, ``{"elbo", "se", "gain", "gain_se", "start", "starts", "converged", "fits",
            "seconds"}``: the kept fit's full-data ELBO and standard error, its gain over K - 1 and the
            gain's standard error, which start it came from (``"given"``, ``"split"``, ``"restart i"``,
            ``"continued"``: the K - 1 ... fit continued for the budget K + 1's candidates had) and every
            start's ELBO, whether the kept fit's ELBO had stopped rising
            (:func:`savigp.training.convergence.still_rising`), the fits of fit's ``iterations`` it took
            (extensions included) and the seconds spent on K's candidates.
        seconds: the whole search's wall time.
    """

    model: SAVIGP
    num_components: int
    table: dict = field(default_factory=dict)
    #: the chosen fit's :class:`savigp.TrainingHistory`
    history: Optional[object] = None
    seconds: float = 0.0

    def format(self) -> str:
        return format_table(self.table, self.num_components)


def format_table(table: dict, chosen: int) -> str:
    """:attr:`ComponentSearch.table` as text, one row per K, the chosen K marked."""
    lines = ["  K      ELBO    s.e.      gain  (s.e.)  converged  fits  kept start  seconds  [ELBO of every start]"]
    for K, r in table.items():
        gain = "" if r["gain"] is None else f"{r['gain']:+9.2f}  ({r['gain_se']:.2f})"
        starts = ", ".join(f"{n} {v:.2f}" for n, v in r["starts"].items())
        mark = " <- chosen" if K == chosen else ""
        lines.append(f"{K:3d} {r['elbo']:9.2f} {r['se']:7.2f} {gain:>19s}  {'yes' if r['converged'] else 'no':>9s}  "
                     f"{r['fits']:4d}  {r['start']:>10s}  {r['seconds']:7.1f}  [{starts}]{mark}")
    return "\n".join(lines)


def choose_components(model: SAVIGP, *, max_components: int = 4, restarts: int = 2, min_gain_se: float = 2.0,
                      min_gain: float = 0.1, max_extensions: int = 2,
                      eval_samples: int = 1000, eval_repeats: int = 4, entropy: Optional[str] = None,
                      verbose: bool = True, **fit_kwargs) -> ComponentSearch:
    """Choose the number of mixture components K by the full-data ELBO, comparing fits of equal budgets.

    Fits ``model`` as it is (:func:`savigp.training.fitting.fit` with ``fit_kwargs``; normally K = 1).
    Then, for K + 1, three kinds of candidate, each fitted with ``fit_kwargs``:

    * a birth (:func:`grow`) of the kept K fit, splitting the component the data disagree with most
      (:func:`disagreement`);
    * ``restarts`` fresh starts (:func:`restart`, seeds from ``fit_kwargs['seed']``);
    * the kept K fit itself, continued: the birth starts where the K fit ended and so has had twice
      its steps, and a K fit that had not converged would otherwise lose to its own continuation
      and make K + 1 look better by what the extra steps gave. The K fit compared is the better of
      the two (its row of the table says so).

    Each candidate goes through the candidate loop (:class:`savigp.selection.candidates.CandidateLoop`):
    it is fitted on (without starts or move, up to ``max_extensions`` times) while its ELBO is still
    rising at its end (:func:`savigp.selection.candidates.fit_while_rising`), so that fits are compared
    where their ELBO stopped rising; one whose fit fails (a diverged fit, a non-finite ELBO or
    parameter) is rejected (its start's ELBO in the table is NaN) and changes no other. The kept
    candidate of K + 1 is the one with the highest full-data ELBO (:func:`elbo_estimate`). K + 1 is
    accepted while its ELBO exceeds K's by more than ``min_gain_se`` standard errors of the
    difference and by more than ``min_gain`` nats (a K + 1 that only repeats K's fit, e.g. two
    coinciding components under an entropy that is exact for them, gains about 0, and an ELBO
    without Monte Carlo error has no standard error to compare with); the search stops at the first
    K + 1 that is not, or at ``max_components``. The default of 2 standard errors grows K by chance
    with probability about 2% when K + 1 adds nothing (a one-sided normal test).

    Args:
        model: a :class:`savigp.SAVIGP` with a mixture posterior ('full', 'diag', 'diag-u')
            and no mean head. It is fitted in place (as the first K); the other fits are copies.
        max_components: the largest K tried (>= the model's K).
        restarts: fresh starts per K > the model's K, besides the birth.
        min_gain_se: the gain, in standard errors, that K + 1 must show.
        min_gain: the gain, in nats, that K + 1 must show.
        max_extensions: the most times a fit whose ELBO is still rising is fitted on (0: never).
        eval_samples, eval_repeats: :func:`elbo_estimate`'s ``num_samples`` and ``repeats``.
        entropy: the entropy term of the mixtures with K > 1 (see :func:`grow`; None: the model's,
            or the library's default).
        verbose: print the table at the end.
        fit_kwargs: passed to :func:`savigp.training.fitting.fit` for every fit (e.g. ``iterations``, ``lr``,
            ``num_samples``, ``estimator``, ``batch_size``, ``groups``, ``seed``).

    Returns:
        :class:`ComponentSearch`: the chosen, fitted model, its K, the table per K and the time taken.
    """
    post = _check_growable(model)
    K0 = post.num_components
    if int(max_components) < K0:
        raise ValueError(f"max_components must be >= the model's K={K0}, got {max_components}")
    if int(restarts) < 0:
        raise ValueError(f"restarts must be >= 0, got {restarts}")
    if int(max_extensions) < 0:
        raise ValueError(f"max_extensions must be >= 0, got {max_extensions}")
    t_start = time.perf_counter()
    fit_kwargs.setdefault("progress", False)
    # every K's fit ends with fit's annealing phase (a mixture's does by default): K = 1 at the
    # noise floor of its learning rate against an annealed K = 2 would favour K = 2 by that floor
    if fit_kwargs.get("anneal") is None:
        fit_kwargs["anneal"] = True
    extend_kwargs = dict(fit_kwargs, starts=1, reflect=False)
    estimator = fit_kwargs.get("estimator", "auto")
    eval_estimator = "auto" if ESTIMATORS[estimator].score_function else estimator
    seed = int(fit_kwargs.get("seed", 0))
    loop = CandidateLoop(score=lambda m: elbo_estimate(m, num_samples=eval_samples, repeats=eval_repeats,
                                                       estimator=eval_estimator, seed=seed),
                         min_gain_se=min_gain_se, min_gain=min_gain)

    def fitted(label: str, m: SAVIGP) -> Trial:
        def fit_m() -> Fitted:
            h, fits = fit_while_rising(m, fit_kwargs, again=extend_kwargs, max_extensions=max_extensions,
                                       quiet=(ConvergenceWarning, ComponentWarning))  # (K + 1 on a K-mode posterior repeats a mode)
            return Fitted(m, h.still_rising is None, fits, h)
        return loop.fit(Candidate(label, fit_m))

    best = fitted("given", model)
    if best.failed:
        raise best.error if best.error is not None else RuntimeError(f"choose_components: the given fit: {best.failed}")
    search = ComponentSearch(model, K0, {K0: _row(best, "given", {"given": best.elbo}, best.seconds)})
    for K in range(K0 + 1, int(max_components) + 1):
        t0 = time.perf_counter()
        starts = {"split": grow(copy.deepcopy(best.model), entropy=entropy)}
        for r in range(int(restarts)):
            starts[f"restart {r + 1}"] = restart(model, K, seed + 1000 * K + r + 1, entropy=entropy)
        results = {name: fitted(name, m) for name, m in starts.items()}
        continued = fitted("continued", copy.deepcopy(best.model))
        previous = search.table[K - 1]
        previous["starts"]["continued"] = continued.elbo
        if continued.failed is None and continued.elbo > best.elbo:  # (the K - 1 fit compared is the better of the two)
            best = continued
            previous.update(_row(best, "continued", previous["starts"], previous["seconds"], previous["gain"],
                                 previous["gain_se"]))
            search.model = best.model
        cand = best_trial(results.values())
        if cand is None:  # (every K + 1 candidate failed: K stays)
            break
        gain, gain_se = cand.elbo - best.elbo, math.hypot(cand.se, best.se)
        search.table[K] = _row(cand, cand.label, {n: v.elbo for n, v in results.items()}, time.perf_counter() - t0,
                               gain, gain_se)
        if not loop.wins(cand, best):
            break
        best = cand
        search.model, search.num_components = cand.model, K
    search.history = best.history  # (best is the chosen fit: K's, continued or not, or the last accepted K)
    search.seconds = time.perf_counter() - t_start
    if verbose:
        print(f"savigp.choose_components: K = {search.num_components} (K + 1 needs a gain > {min_gain_se:g} s.e. "
              f"and > {min_gain:g} nats; {search.seconds:.1f} s)\n" + search.format())
    return search


def _row(c: Trial, start: str, starts: dict, seconds: float, gain=None, gain_se=None) -> dict:
    """A row of :attr:`ComponentSearch.table`."""
    return {"elbo": c.elbo, "se": c.se, "gain": gain, "gain_se": gain_se, "start": start, "starts": starts,
            "converged": c.converged, "fits": c.fits, "seconds": seconds}
