"""What the estimators of the expected log-likelihood share: the likelihood's values with their shapes and
finiteness checked, standard normal draws, the mixture-weighted sum of per-point expectations and the Monte
Carlo standard error of such a sum (Bonilla et al. 2019, eq. (24), (29), (33)):

    L_ell = (N / B) sum_{n in batch} sum_k pi_k E_{q_k(f_n)}[log p(y_n | f_n)].
"""
from __future__ import annotations

import torch
from torch import Tensor

from likelihoods.base import log_prob_checked

from ..linalg.cholesky import point_cholesky
from ..runtime import sync_free
from .nonfinite import non_finite_error


def checked_log_prob(likelihood, y: Tensor, f: Tensor, check_finite: bool = True) -> Tensor:
    """``likelihood.log_prob(y, f)`` with its shapes (by the likelihood's template method, see
    :func:`likelihoods.base.log_prob_checked`) and finiteness checked.

    Args:
        y: ``(B, P)``; f: ``(..., B, Q)``.
        check_finite: check the values (callers that check a reduction of them instead pass False,
            and call :func:`check_means`).

    Returns:
        ``(..., B)``. Raises ``ValueError`` naming the likelihood and the shapes, or
        :class:`~savigp.estimators.nonfinite.NonFiniteLogProb` (a ``ValueError``) naming the likelihood, the
        rows of the batch, their targets and the f values where the values are NaN or infinite.
    """
    out = log_prob_checked(likelihood, y, f)  # shapes: likelihoods.Likelihood.log_prob
    if not check_finite:
        return out
    bad = ~torch.isfinite(out)
    flags = sync_free.active()
    if flags is not None:  # inside fit's step: flagged on the device; fit's read re-evaluates for the message
        flags.note("log_prob", bad)
        return out
    if bool(bad.any()):
        raise non_finite_error(likelihood, y, f, out)
    return out


def check_means(likelihood, y: Tensor, f: Tensor, per_value: Tensor) -> None:
    """A non-finite value makes its column's mean ``per_value`` ``(K, B)`` non-finite: check the means, and
    evaluate ``log_prob(y, f)`` again with the full check (which names the rows) only when one is (inside
    fit's step, flag it instead, see :mod:`savigp.runtime.sync_free`)."""
    bad = ~torch.isfinite(per_value.detach())
    flags = sync_free.active()
    if flags is not None:
        flags.note("log_prob", bad)
    elif bool(bad.any()):
        checked_log_prob(likelihood, y, f)  # raises the error naming the rows


def standard_normal(shape, like: Tensor, generator: torch.Generator | None) -> Tensor:
    """Standard normal draws of ``shape`` with ``like``'s dtype and device, from ``generator``.

    On the CPU, float64 draws are generated in float32 and promoted, because PyTorch's float64 normal
    sampler is several times slower there (docs/performance.md, "Standard normal draws"). Each draw is
    then exact to float32's 2^-24 relative rounding and the tails are cut at |eps| ~ 5.7 (probability
    ~1e-8), both far below the Monte Carlo error of any estimate made from them: the draws stay
    independent standard normals for every statistical purpose here.
    """
    gen_device = generator.device if generator is not None else like.device
    dtype = like.dtype
    if dtype == torch.float64 and gen_device.type == "cpu":
        dtype = torch.float32
    eps = torch.randn(shape, dtype=dtype, device=gen_device, generator=generator)
    return eps.to(device=like.device, dtype=like.dtype)


def factorized_draws(mean: Tensor, num_samples: int, generator: torch.Generator | None,
                     common_draws: bool | None) -> tuple[Tensor, bool]:
    """Standard normal draws ``(S, K, B, Q)`` for the factorized marginals of means ``mean`` ``(K, B, Q)``.

    ``common_draws``: one set of S draws per data point shared by all K components (f_skn = b_kn +
    sqrt(s2_kn) eps_sn), or independent draws per component. None: shared when gradients are off
    (``torch.is_grad_enabled()`` False, an evaluation such as
    :func:`savigp.training.convergence.full_data_elbo`), independent otherwise (training). Both are
    unbiased. Shared draws make the estimate for K components that coincide the single Gaussian's
    estimate from the same generator, exactly, so that ELBOs of fits of different K are compared with
    common random numbers; in training, independent draws give coincident components distinct
    gradients, so that they can still separate.

    Returns:
        ``(eps, common)``: the draws (expanded over K when shared) and whether they are shared (the
        standard error follows the draws, :func:`monte_carlo_stderr`). Raises ``ValueError`` for S < 2.
    """
    K, B, Q = mean.shape
    S = int(num_samples)
    if S < 2:
        raise ValueError(f"num_samples must be >= 2 for Monte Carlo estimators, got {S}")
    common = (not torch.is_grad_enabled()) if common_draws is None else bool(common_draws)
    common = common and K > 1
    return standard_normal((S, 1 if common else K, B, Q), mean, generator).expand(S, K, B, Q), common


def coupled_draws(mean: Tensor, cov: Tensor, num_samples: int, generator: torch.Generator | None,
                  estimator: str) -> tuple[Tensor, Tensor]:
    """Standard normal draws ``(S, 1, B, Q)`` and the lower Cholesky factors L ``(B, Q, Q)`` of the
    covariances ``cov`` ``(B, Q, Q)`` of marginals coupled across the latent functions with means ``mean``
    ``(B, Q)``: f_s = b + L eps_s. Raises ``ValueError`` naming ``estimator`` for S < 2."""
    B, Q = mean.shape
    S = int(num_samples)
    if S < 2:
        raise ValueError(f"num_samples must be >= 2 for estimator={estimator!r}, got {S}")
    eps = standard_normal((S, 1, B, Q), mean, generator)
    return eps, point_cholesky(cov)


def weighted_sum(weights: Tensor, per_point: Tensor, scale: float) -> Tensor:
    """scale * sum_n sum_k pi_k per_point[k, n] for ``weights`` pi ``(K,)`` and ``per_point`` ``(K, B)``: 0-dim."""
    return scale * (weights.unsqueeze(-1) * per_point).sum()


def monte_carlo_stderr(values: Tensor, weights: Tensor, scale: float, common: bool = False) -> Tensor:
    """The Monte Carlo standard error of scale * sum_n sum_k pi_k mean_s values[s, k, n], a detached 0-dim tensor.

    Args:
        values: ``(S, K, B)``; weights: pi ``(K,)``.
        common: the draws are independent across the components (False: the variance is
            sum_k pi_k^2 Var_k / S per point) or one draw per sample shared by all of them (True: the
            variance of sum_k pi_k values[s, k, n] over s, / S).
    """
    if common:  # (the mixture's per-sample value: one "component" of weight 1)
        values = (weights.detach().view(1, -1, 1) * values.detach()).sum(1, keepdim=True)
        weights = weights.new_ones(1)
    S = values.shape[0]
    # unbiased variance over the samples from two sums of the values shifted by the first sample
    # (the shift avoids cancellation when the spread is small next to the mean); a sum over the
    # leading axis is a fast vectorized reduction (Tensor.var(dim=0) is slower for (S, K, B))
    v = values.detach()
    v = v - v[:1]
    s1 = v.sum(0)
    var_mean = ((v * v).sum(0) - s1 * s1 / S).clamp_min(0.0) / ((S - 1) * S)  # (K, B)
    w = weights.detach().unsqueeze(-1)
    return scale * torch.sqrt((w * w * var_mean).sum())  # a 0-dim tensor: no host read
