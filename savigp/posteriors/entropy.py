"""The entropy term of a mixture of Gaussians over the inducing values (seed 004, eq. (18)), and
the initial means that break a mixture's symmetry.

* :func:`entropy_bound`: Bonilla et al. 2019, eq. (18), -sum_k pi_k log sum_l pi_l N(m_k; m_l, S_k + S_l),
  a deterministic lower bound (Jensen's inequality).
* :func:`entropy_monte_carlo`: a reparameterized Monte Carlo estimate of the exact entropy.

Means ``(K, Q, M)``; factors ``(K, Q, M, M)`` (lower Cholesky factors of full covariances) or
standard deviations ``(K, Q, M)`` (diagonal covariances); log pi ``(K,)``.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from ..constraints import LOG_2PI
from .._triangular import lower_factor_gram

#: the entropy estimates of a mixture with K > 1 components
ENTROPY_ESTIMATES = ("bound", "mc")


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


def entropy_bound(mean: Tensor, L: Tensor, log_pi: Tensor, diagonal: bool) -> Tensor:
    """Eq. (18) of seed 004 for means ``(K, Q, M)`` and factors ``(K, Q, M, M)`` / sds ``(K, Q, M)``."""
    K, M = mean.shape[0], mean.shape[-1]
    if diagonal:
        diff = mean.unsqueeze(1) - mean.unsqueeze(0)  # (K, K, Q, M): m_k - m_l
        var = L * L
        C = var.unsqueeze(1) + var.unsqueeze(0)  # (K, K, Q, M)
        log_n = -0.5 * (LOG_2PI + torch.log(C) + diff * diff / C).sum((-1, -2))
    else:
        # l = k: S_k + S_k = 2 L_k L_k^T and m_k - m_k = 0, in closed form; only the K (K - 1) / 2
        # pairs k < l need a Cholesky factorization (the matrix of log N is symmetric)
        logdet_self = M * math.log(2.0) + 2.0 * torch.log(L.diagonal(dim1=-2, dim2=-1)).sum(-1)  # (K, Q)
        log_n = torch.diag_embed(-0.5 * (M * LOG_2PI + logdet_self).sum(-1))  # (K, K)
        k, l = torch.triu_indices(K, K, offset=1, device=L.device)
        S = lower_factor_gram(L)  # (K, Q, M, M)
        Lc = torch.linalg.cholesky(S[k] + S[l])  # (pairs, Q, M, M)
        d = (mean[k] - mean[l]).unsqueeze(-1)  # (pairs, Q, M, 1)
        alpha = torch.linalg.solve_triangular(Lc, d, upper=False).squeeze(-1)
        logdet = 2.0 * torch.log(Lc.diagonal(dim1=-2, dim2=-1)).sum(-1)
        off = -0.5 * (M * LOG_2PI + logdet + (alpha * alpha).sum(-1)).sum(-1)  # (pairs,)
        log_n = log_n.index_put((k, l), off).index_put((l, k), off)
    inner = torch.logsumexp(log_pi.unsqueeze(0) + log_n, dim=1)  # (K,)  over l
    return -(log_pi.exp() * inner).sum()


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
