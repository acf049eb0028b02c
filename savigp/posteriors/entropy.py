"""The entropy term of a mixture of Gaussians over the inducing values, and the initial means that
break a mixture's symmetry.

* :func:`entropy_pairwise` (``entropy="pairwise"``, the default for K > 1): the pairwise-distance
  lower bound of Kolchinsky & Tracey (2017) with the Bhattacharyya distance, exact when the
  components coincide and when they are far apart.
* :func:`entropy_bound` (``entropy="bound"``): Bonilla et al. 2019, eq. (18),
  -sum_k pi_k log sum_l pi_l N(m_k; m_l, S_k + S_l), a deterministic lower bound (Jensen's
  inequality), 0.153 Q M nats loose at both extremes.
* :func:`entropy_monte_carlo`: a reparameterized Monte Carlo estimate of the exact entropy.

Means ``(K, Q, M)``; factors ``(K, Q, M, M)`` (lower Cholesky factors of full covariances) or
standard deviations ``(K, Q, M)`` (diagonal covariances); log pi ``(K,)``.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from likelihoods.densities import LOG_2PI
from .._choices import DEFAULT_ENTROPY, ENTROPY_ESTIMATES
from ..linalg.triangular import lower_factor_gram
from ..runtime import sync_free

# ENTROPY_ESTIMATES, the entropy estimates of a mixture with K > 1 components: "pairwise" (Kolchinsky
# & Tracey 2017, the default, DEFAULT_ENTROPY), "bound" (Bonilla et al. 2019, eq. (18); the name
# model files have always stored for it, so it keeps that meaning) and "mc" (Monte Carlo, unbiased);
# they live in savigp._choices, which the command's parser reads without importing torch


def spread_means(K: int, Q: int, M: int, spread: float = 1.0, generator: torch.Generator | None = None) -> Tensor:
    """Initial component means ``(K, Q, M)`` that break the symmetry of a K-component mixture.

    K = 1: zeros (the prior mean). K > 1: the vertices of a regular simplex centred on zero in a
    random (K - 1)-dimensional subspace of the Q M coordinates (K = 2: +z and -z), each at
    distance spread * sqrt(Q M) from zero (spread^2 per coordinate on average). In the
    coordinates the means are held in (whitened v, or w of the diagonal mixture over u) the initial
    q has unit spread, so with ``spread = 1`` each mean lies where a typical draw of the initial q
    (the prior) lies, the mixture's mean stays the prior mean, and the components start as far
    apart as draws of q are -- in different basins of a multimodal posterior whenever the basins
    lie along the prior's spread, instead of all at one point.
    """
    if K == 1:
        return torch.zeros(1, Q, M, dtype=torch.float64)
    D = Q * M
    if D >= K:  # random orthonormal directions U (D, K); vertex k = U (e_k - 1/K): centred, equidistant
        U, _ = torch.linalg.qr(torch.randn(D, K, dtype=torch.float64, generator=generator))
        coords = (torch.eye(K, dtype=torch.float64) - 1.0 / K) @ U.T  # (K, D)
    else:  # fewer coordinates than components: centred random points
        coords = torch.randn(K, D, dtype=torch.float64, generator=generator)
        coords = coords - coords.mean(0, keepdim=True)
    coords = coords / coords.norm(dim=1, keepdim=True).clamp_min(1e-300) * math.sqrt(D)
    return (spread * coords).reshape(K, Q, M)


def _pair_terms(mean: Tensor, L: Tensor, diagonal: bool) -> tuple[Tensor, Tensor, Tensor]:
    """The Gaussian pair quantities both closed-form mixture entropies need, summed over the Q latents
    (the components are block diagonal over the latent functions), for means ``(K, Q, M)`` and
    factors ``(K, Q, M, M)`` / standard deviations ``(K, Q, M)``:

    * ``quad`` ``(K, K)``: (m_k - m_l)^T (S_k + S_l)^-1 (m_k - m_l), zero on the diagonal;
    * ``logdet`` ``(K, K)``: log|S_k + S_l|, M Q log 2 + log|S_k| on the diagonal;
    * ``logdet_self`` ``(K,)``: log|S_k|.

    Full covariances: only the K (K - 1) / 2 pairs k < l need a Cholesky factorization (both
    matrices are symmetric, the diagonal is in closed form); diagonal ones: O(K^2 Q M) elementwise.
    """
    K, M = mean.shape[0], mean.shape[-1]
    if diagonal:
        diff = mean.unsqueeze(1) - mean.unsqueeze(0)  # (K, K, Q, M): m_k - m_l
        var = L * L
        C = var.unsqueeze(1) + var.unsqueeze(0)  # (K, K, Q, M)
        return (diff * diff / C).sum((-1, -2)), torch.log(C).sum((-1, -2)), 2.0 * torch.log(L).sum((-1, -2))
    Q = mean.shape[1]
    logdet_self = 2.0 * torch.log(L.diagonal(dim1=-2, dim2=-1)).sum((-1, -2))  # (K,)
    quad = mean.new_zeros(K, K)
    logdet = torch.diag_embed(Q * M * math.log(2.0) + logdet_self)  # (K, K)
    k, l = torch.triu_indices(K, K, offset=1, device=L.device)
    S = lower_factor_gram(L)  # (K, Q, M, M)
    Lc = sync_free.cholesky(S[k] + S[l], flag=None)  # (pairs, Q, M, M); a failure: NaN terms, a bad step
    d = (mean[k] - mean[l]).unsqueeze(-1)  # (pairs, Q, M, 1)
    alpha = torch.linalg.solve_triangular(Lc, d, upper=False).squeeze(-1)
    q = (alpha * alpha).sum((-1, -2))  # (pairs,)
    ld = 2.0 * torch.log(Lc.diagonal(dim1=-2, dim2=-1)).sum((-1, -2))  # (pairs,)
    return (quad.index_put((k, l), q).index_put((l, k), q), logdet.index_put((k, l), ld).index_put((l, k), ld),
            logdet_self)


def entropy_bound(mean: Tensor, L: Tensor, log_pi: Tensor, diagonal: bool) -> Tensor:
    """Bonilla et al. 2019, eq. (18): -sum_k pi_k log sum_l pi_l N(m_k; m_l, S_k + S_l), a lower
    bound on the entropy by Jensen's inequality, for means ``(K, Q, M)`` and factors
    ``(K, Q, M, M)`` / sds ``(K, Q, M)``, log pi ``(K,)``. D/2 (1 - log 2) = 0.153 D nats (D = Q M)
    below the entropy both when the components coincide and when they are far apart."""
    D = mean.shape[1] * mean.shape[2]
    quad, logdet, _ = _pair_terms(mean, L, diagonal)
    log_n = -0.5 * (D * LOG_2PI + logdet + quad)  # (K, K): log N(m_k; m_l, S_k + S_l)
    inner = torch.logsumexp(log_pi.unsqueeze(0) + log_n, dim=1)  # (K,)  over l
    return -(log_pi.exp() * inner).sum()


def bhattacharyya_distances(mean: Tensor, L: Tensor, diagonal: bool) -> tuple[Tensor, Tensor]:
    """Bhattacharyya distances D_B(q_k, q_l) ``(K, K)`` between the Gaussian components, and log|S_k|
    ``(K,)``, for means ``(K, Q, M)`` and factors ``(K, Q, M, M)`` or sds ``(K, Q, M)``. With
    S_bar = (S_k + S_l) / 2 and d = m_k - m_l,

        D_B = 1/8 d^T S_bar^-1 d + 1/2 log(|S_bar| / sqrt(|S_k| |S_l|)),

    the Chernoff alpha-divergence at alpha = 1/2 (Kolchinsky & Tracey 2017, their closed form for
    Gaussians), written through S_k + S_l as in eq. (18): d^T S_bar^-1 d / 8 = d^T (S_k + S_l)^-1 d / 4
    and log|S_bar| = log|S_k + S_l| - D log 2 (D = Q M). Zero on the diagonal exactly."""
    K, Q, M = mean.shape
    quad, logdet, logdet_self = _pair_terms(mean, L, diagonal)
    dist = 0.25 * quad + 0.5 * (logdet - Q * M * math.log(2.0)
                                 - 0.5 * (logdet_self.unsqueeze(1) + logdet_self.unsqueeze(0)))
    # D_B >= 0 (rounding of log|S_k + S_l| against the log|S_k| could leave -1e-16 D for near-equal pairs)
    return dist.clamp_min(0.0) * (1.0 - torch.eye(K, dtype=dist.dtype, device=dist.device)), logdet_self


def entropy_pairwise(mean: Tensor, L: Tensor, log_pi: Tensor, diagonal: bool) -> Tensor:
    """The pairwise-distance lower bound of Kolchinsky & Tracey (2017, "Estimating mixture entropy
    with pairwise distances", Entropy 19(7):361): their pairwise estimator with the Chernoff
    alpha-divergence as the distance, a lower bound for every alpha in [0, 1], here at alpha = 1/2
    (the Bhattacharyya distance, the tightest for symmetric components of a location family):

        H >= sum_k pi_k H(q_k) - sum_k pi_k log sum_l pi_l exp(-D_B(q_k, q_l)),

    for means ``(K, Q, M)``, factors ``(K, Q, M, M)`` / sds ``(K, Q, M)``, log pi ``(K,)``;
    H(q_k) = D/2 log(2 pi e) + 1/2 log|S_k| (D = Q M). Exact at both extremes, unlike eq. (18):
    coinciding components have D_B = 0 and the bound is H(q_k) = H; components far apart have
    D_B -> inf and it tends to sum_k pi_k H(q_k) + H(pi), the entropy of well-separated components.
    Deterministic, differentiable; the cost of :func:`entropy_bound` (the same factorizations)."""
    D = mean.shape[1] * mean.shape[2]
    dist, logdet_self = bhattacharyya_distances(mean, L, diagonal)
    h = 0.5 * D * (LOG_2PI + 1.0) + 0.5 * logdet_self  # (K,)
    pi = log_pi.exp()
    return (pi * h).sum() - (pi * torch.logsumexp(log_pi.unsqueeze(0) - dist, dim=1)).sum()


def entropy_monte_carlo(mean: Tensor, L: Tensor, log_pi: Tensor, diagonal: bool, S: int,
                         generator: torch.Generator | None) -> Tensor:
    """The reparameterized Monte Carlo entropy of :meth:`savigp.posteriors.MixturePosterior.entropy`."""
    K, Q, M = mean.shape
    eps = torch.randn((S, K, Q, M), dtype=torch.float64, generator=generator).to(mean)
    if diagonal:
        v = mean + L * eps  # (S, K, Q, M): draws of component k
        z = (v.unsqueeze(2) - mean) / L  # (S, K, K_l, Q, M), standardized by component l
        log_det = torch.log(L).sum((-1, -2))  # (K_l,)
    else:
        v = mean + torch.matmul(L, eps.unsqueeze(-1)).squeeze(-1)  # (S, K, Q, M)
        diff = (v.unsqueeze(2) - mean).permute(2, 3, 4, 0, 1).reshape(K, Q, M, S * K)  # (K_l, Q, M, S K)
        z = torch.linalg.solve_triangular(L, diff, upper=False)  # L_l^-1 (v - m_l)
        z = z.reshape(K, Q, M, S, K).permute(3, 4, 0, 1, 2)  # (S, K, K_l, Q, M)
        log_det = torch.log(L.diagonal(dim1=-2, dim2=-1)).sum((-1, -2))  # (K_l,)
    # a draw's own component: L_k^-1 (v_ks - m_k) = eps_ks exactly (not the round trip through a
    # solve, whose error grows with the condition number of L_k and could make log q(v_ks) fall
    # below log pi_k + log N_k(v_ks), the bound every draw must respect)
    own = torch.eye(K, dtype=torch.bool, device=mean.device)[None, :, :, None, None]
    z = torch.where(own, eps.unsqueeze(2), z)
    log_n = -0.5 * (Q * M * LOG_2PI + (z * z).sum((-1, -2))) - log_det  # (S, K, K_l)
    log_q = torch.logsumexp(log_pi + log_n, dim=-1)  # (S, K)
    return -(log_pi.exp() * log_q.mean(0)).sum()
