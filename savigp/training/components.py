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
  entropy's ranking of K (see docs/mixtures.md).
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from ..model import SAVIGP
from ..posteriors import FullGaussian, make_posterior
from ..posteriors.mixture import MixturePosterior
from ..posteriors.moments import raw_scale
from .convergence import full_data_elbo


def _check_growable(model: SAVIGP) -> MixturePosterior:
    post = model.posterior
    if not isinstance(post, MixturePosterior) or getattr(post, "joint", False):
        raise ValueError(f"growing K needs a mixture posterior ('full', 'diag', 'diag-u'); this model's is "
                         f"{type(post).__name__}")
    if model.mean_head is not None:
        raise ValueError("growing K is not supported with a mean head (mean_basis_size > 0): the head holds the "
                         "posterior it was built with")
    return post


def _replace_posterior(model: SAVIGP, K: int, generator: Optional[torch.Generator],
                       entropy: Optional[str]) -> MixturePosterior:
    """A fresh K-component posterior of the model's kind, started as the model's constructor starts
    one, on the model's device; set as ``model.posterior`` and returned. Its entropy term for K > 1:
    ``entropy``, else the model's mixture's, else (a single full Gaussian, which keeps none) the
    library's default."""
    old = model.posterior
    if entropy is None and not isinstance(old, FullGaussian):
        entropy = old.entropy_estimate
    options = {} if entropy is None else {"entropy": entropy}
    new = make_posterior(old.kind, old.num_latent, old.num_inducing, K, generator=generator,
                         entropy_samples=old.entropy_samples, **options)
    with torch.no_grad():
        new.start(lambda: model.prior_factor().detach().cpu())
    new = new.to(device=model.device, dtype=model.dtype)
    for p_new, p_old in zip(new.parameters(), old.parameters()):
        p_new.requires_grad_(p_old.requires_grad)
    _set_posterior(model, new)
    return new


def _set_posterior(model: SAVIGP, posterior: MixturePosterior) -> None:
    """``model.posterior = posterior``, and the model's ``config`` (what a model file records) with it."""
    model.posterior = posterior
    model.config.update(num_components=posterior.num_components, entropy=posterior.entropy_estimate,
                        entropy_samples=int(posterior.entropy_samples))


def split_direction(post: MixturePosterior, k: int) -> torch.Tensor:
    """sqrt(lambda) v ``(Q, M)`` for component k: v the leading eigenvector of its covariance over all
    Q M coordinates (block diagonal over the latent functions), lambda its eigenvalue; for diagonal
    covariances the coordinate of the largest variance. In the coordinates the parameters hold
    (whitened v; the relative scales of :class:`~savigp.posteriors.UDiagonalMixture`)."""
    Q, M = post.num_latent, post.num_inducing
    with torch.no_grad():
        L = post.scale()[k]
        out = torch.zeros(Q, M, dtype=L.dtype, device=L.device)
        if post.diagonal:
            flat = (L * L).flatten()
            i = int(flat.argmax())
            out.view(-1)[i] = flat[i].sqrt()
            return out
        evals, evecs = torch.linalg.eigh(L @ L.transpose(-1, -2))  # (Q, M), (Q, M, M), ascending
        j = int(evals[:, -1].argmax())
        out[j] = evecs[j, :, -1] * evals[j, -1].clamp_min(0).sqrt()
        return out


#: a split puts the halves at m +- SPLIT_SHIFT sqrt(lambda) v
SPLIT_SHIFT = 0.5


@torch.no_grad()
def grow(model: SAVIGP, component: Optional[int] = None, *, entropy: Optional[str] = None) -> SAVIGP:
    """Add a component to ``model``'s mixture in place by splitting one (a birth): component k
    (default: the heaviest), N(m, S) with weight pi_k, becomes the two halves

        N(m + a, S - a a^T) and N(m - a, S - a a^T), each with weight pi_k / 2,
        a = :data:`SPLIT_SHIFT` sqrt(lambda) v  (v, lambda: :func:`split_direction`),

    a moment-preserving split (Richardson & Green 1997, §3.2; Ueda et al. 2000): the pair has the
    parent's mean and covariance, so the cross-entropy term (eq. (19), which depends on the first
    two moments only) is unchanged and the other terms move little, while the halves sit on either
    side of the parent along its widest direction, where a second mode would pull them apart.
    In the coordinates the parameters hold (whitened v, or (w, d) of the diagonal mixture over u).
    Returns ``model``.

    ``entropy``: the grown mixture's entropy term (``"bound"``, ``"mc"``, ...; None: the model's
    mixture's, or the library's default when the model has a single full Gaussian). Raises
    ValueError for posteriors that are not mixtures ('joint') or models with a mean head.
    """
    post = _check_growable(model)
    K = post.num_components
    k = int(post.weights().argmax()) if component is None else int(component)
    if not 0 <= k < K:
        raise ValueError(f"component must be in [0, {K}), got {component}")
    a = SPLIT_SHIFT * split_direction(post, k)  # (Q, M)
    L = post.scale()[k]  # (Q, M, M) lower factors, or (Q, M) standard deviations
    if post.diagonal:
        sd = (L * L - a * a).clamp_min(0).sqrt()
        raw_k = raw_scale(sd)
    else:
        S = L @ L.transpose(-1, -2) - a.unsqueeze(-1) * a.unsqueeze(-2)
        C = torch.linalg.cholesky(S)  # (positive definite: a a^T is a quarter of S's top eigenvalue)
        raw_k = torch.tril(C, -1)
        raw_k.diagonal(dim1=-2, dim2=-1).copy_(raw_scale(C.diagonal(dim1=-2, dim2=-1)))
    mean, raw, logits = post.mean.detach().clone(), post.raw_scale.detach().clone(), post.log_weights().detach()
    new = _replace_posterior(model, K + 1, None, entropy)
    raw[k] = raw_k
    new.mean.copy_(torch.cat([mean, mean[k:k + 1]]))
    new.mean[k].add_(a)
    new.mean[K].sub_(a)
    new.raw_scale.copy_(torch.cat([raw, raw[k:k + 1]]))
    half = logits[k] - math.log(2.0)
    new.logits.copy_(torch.cat([logits, half.view(1)]))
    new.logits[k] = half
    return model


def restart(model: SAVIGP, num_components: int, seed: int, *, entropy: Optional[str] = None) -> SAVIGP:
    """A copy of ``model`` with a fresh ``num_components``-component posterior (means spread from
    ``seed``; kernel, likelihood and inducing inputs kept; ``entropy`` as in :func:`grow`)."""
    _check_growable(model)
    out = copy.deepcopy(model)
    _replace_posterior(out, int(num_components), torch.Generator().manual_seed(int(seed)), entropy)
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
        _set_posterior(model, copy.deepcopy(source.posterior))
        model.load_state_dict(source.state_dict())
    return model


@dataclass
class ComponentSearch:
    """What :func:`choose_components` did.

    Attributes:
        model: the chosen model (K = ``num_components``), fitted.
        num_components: the chosen K.
        table: per K tried, ``{"elbo", "se", "gain", "gain_se", "start", "starts"}``: the kept fit's
            full-data ELBO and standard error, its gain over K - 1 and the gain's standard error,
            which start it came from (``"split"`` or ``"restart i"``) and every start's ELBO.
    """

    model: SAVIGP
    num_components: int
    table: dict = field(default_factory=dict)
    #: the chosen fit's :class:`savigp.TrainingHistory`
    history: Optional[object] = None

    def format(self) -> str:
        return format_table(self.table, self.num_components)


def format_table(table: dict, chosen: int) -> str:
    """:attr:`ComponentSearch.table` as text, one row per K, the chosen K marked."""
    lines = ["  K      ELBO    s.e.      gain  (s.e.)  kept start  [ELBO of every start]"]
    for K, r in table.items():
        gain = "" if r["gain"] is None else f"{r['gain']:+9.2f}  ({r['gain_se']:.2f})"
        starts = ", ".join(f"{n} {v:.2f}" for n, v in r["starts"].items())
        mark = " <- chosen" if K == chosen else ""
        lines.append(f"{K:3d} {r['elbo']:9.2f} {r['se']:7.2f} {gain:>19s}  {r['start']:>10s}  [{starts}]{mark}")
    return "\n".join(lines)


def search_components(model: SAVIGP, fit: Callable, *, max_components: int = 4, restarts: int = 2, min_gain_se: float = 2.0,
                      min_gain: float = 0.1,
                      eval_samples: int = 1000, eval_repeats: int = 4, entropy: Optional[str] = None,
                      verbose: bool = True, **fit_kwargs) -> ComponentSearch:
    """Choose the number of mixture components K by the full-data ELBO.

    Fits ``model`` as it is (``fit(model, **fit_kwargs)``, :func:`savigp.fit` when called as
    :func:`savigp.choose_components`; normally K = 1), then for
    K + 1: a birth (:func:`grow`) of the kept K fit and ``restarts`` fresh starts (:func:`restart`,
    seeds ``fit_kwargs['seed'] + 1, 2, ...``), each fitted with ``fit_kwargs``; the start with the
    highest full-data ELBO (:func:`elbo_estimate`) is kept. K + 1 is accepted while its ELBO exceeds
    K's by more than ``min_gain_se`` standard errors of the difference and by more than ``min_gain``
    nats (a K + 1 that only repeats K's fit, e.g. two coinciding components under an entropy that is
    exact for them, gains about 0, and an ELBO without Monte Carlo error has no standard error to
    compare with); the search stops at the first K + 1 that is not, or at ``max_components``.
    The default of 2 standard errors grows K by chance with probability about 2% when K + 1 adds
    nothing (a one-sided normal test).

    Args:
        fit: fits one model in place with ``fit_kwargs`` and returns its ``TrainingHistory``
            (:func:`savigp.fit`, which :func:`savigp.choose_components` passes; taken as an
            argument so that this module does not import the training loop that calls it).
        model: a :class:`savigp.SAVIGP` with a mixture posterior ('full', 'diag', 'diag-u')
            and no mean head. It is fitted in place (as the first K); the other fits are copies.
        max_components: the largest K tried (>= the model's K).
        restarts: fresh starts per K > the model's K, besides the birth.
        min_gain_se: the gain, in standard errors, that K + 1 must show.
        min_gain: the gain, in nats, that K + 1 must show.
        eval_samples, eval_repeats: :func:`elbo_estimate`'s ``num_samples`` and ``repeats``.
        entropy: the entropy term of the mixtures with K > 1 (see :func:`grow`; None: the model's,
            or the library's default).
        verbose: print the table at the end.
        fit_kwargs: passed to :func:`savigp.fit` for every fit (e.g. ``iterations``, ``lr``,
            ``num_samples``, ``estimator``, ``batch_size``, ``groups``, ``seed``).

    Returns:
        :class:`ComponentSearch`: the chosen, fitted model, its K, and the ELBO per K.
    """
    post = _check_growable(model)
    K0 = post.num_components
    if int(max_components) < K0:
        raise ValueError(f"max_components must be >= the model's K={K0}, got {max_components}")
    if int(restarts) < 0:
        raise ValueError(f"restarts must be >= 0, got {restarts}")
    fit_kwargs.setdefault("progress", False)
    # every K's fit ends with fit's annealing phase (a mixture's does by default): K = 1 at the
    # noise floor of its learning rate against an annealed K = 2 would favour K = 2 by that floor
    if fit_kwargs.get("anneal") is None:
        fit_kwargs["anneal"] = True
    estimator = fit_kwargs.get("estimator", "auto")
    eval_estimator = "auto" if estimator in ("score", "score-nocv") else estimator
    seed = int(fit_kwargs.get("seed", 0))

    def fitted(m):
        histories[id(m)] = fit(m, **fit_kwargs)
        return m, *elbo_estimate(m, num_samples=eval_samples, repeats=eval_repeats, estimator=eval_estimator,
                                 seed=seed)

    histories = {}
    best, elbo, se = fitted(model)
    search = ComponentSearch(best, K0, {K0: {"elbo": elbo, "se": se, "gain": None, "gain_se": None, "start": "given",
                                             "starts": {"given": elbo}}})
    for K in range(K0 + 1, int(max_components) + 1):
        starts = {"split": grow(copy.deepcopy(best), entropy=entropy)}
        for r in range(int(restarts)):
            starts[f"restart {r + 1}"] = restart(model, K, seed + 1000 * K + r + 1, entropy=entropy)
        results = {name: fitted(m) for name, m in starts.items()}
        name = max(results, key=lambda n: results[n][1])
        cand, c_elbo, c_se = results[name]
        gain, gain_se = c_elbo - elbo, math.hypot(c_se, se)
        search.table[K] = {"elbo": c_elbo, "se": c_se, "gain": gain, "gain_se": gain_se, "start": name,
                           "starts": {n: v[1] for n, v in results.items()}}
        if not (gain > float(min_gain_se) * gain_se and gain > float(min_gain)):
            break
        best, elbo, se = cand, c_elbo, c_se
        search.model, search.num_components = cand, K
    search.history = histories[id(search.model)]
    if verbose:
        print(f"savigp.choose_components: K = {search.num_components} (K + 1 needs a gain > {min_gain_se:g} s.e. "
              f"and > {min_gain:g} nats)\n"
              + search.format())
    return search
