"""A Gaussian posterior coupled across the latent functions (``posterior="joint"``).

SAVIGP's posteriors factorize over the Q latent functions, q(u) = prod_j q(u_j) (Bonilla et al. 2019, eq.
(10)-(11)), so q(f_n) is a product of univariate Gaussians and the posterior cannot represent
correlations between latent functions at the same input. Where the likelihood couples them (the
seismic forward model divides a depth by a velocity, GPRN multiplies weights and latent
functions), the exact posterior correlates them and a factorized q underestimates the spread along
those directions (``experiments/seismic.py``: std ratios 0.45-0.83 against the exact posterior).

``JointGaussian`` is one Gaussian over all Q * M whitened inducing values,

    q(v) = N(v; m, S),   v = (v_1, ..., v_Q) in R^{QM},   u_j = mu_j + L_zz,j v_j,   S = L_S L_S^T,

with L_S a dense lower-triangular (QM x QM) factor. With V_j = L_zz,j^-1 K_zx^j (columns v_nj),
the marginal at x_n is a Q-variate Gaussian (Bonilla et al. 2019, eq. (22)-(23) with the cross terms kept):

    E[f_nj]          = mu_j + v_nj^T m_j,
    Cov[f_nj, f_nk]  = v_nj^T S_jk v_nk + delta_jk (k_j(x_n, x_n) - v_nj^T v_nj),

where S_jk is the (j, k) block of S. In factor form, C_n = L_S^T blockdiag(v_n1, ..., v_nQ) is
(QM x Q) and Cov[f_n] = C_n^T C_n + diag(k_nn - |v_n|^2), which costs O(B Q^2 M^2) per step: use it
for moderate Q * M (the seismic model: Q = 8, M = 113). The ELBO terms in whitened coordinates are

    L_ent   = QM/2 log(2 pi e) + sum log diag L_S,
    L_cross = -1/2 (QM log 2 pi + m^T m + ||L_S||_F^2),

and the model's estimator of the expected log-likelihood draws from the correlated q(f_n)
(the estimators' ``coupled`` forms, :mod:`savigp.estimators`), by reparameterization or by the score
function (black-box likelihoods). One component only (K = 1). The family implements the protocol of
:mod:`savigp.posteriors.base` with covariances ``(1, B, Q, Q)`` in its marginals, and always
differentiates through L_zz (no fused path).
"""
from __future__ import annotations

import math
from typing import Any, Optional

import torch
from torch import Tensor, nn
from likelihoods.densities import LOG_2PI
from likelihoods.parameters import inverse_softplus

from ._autograd import lower_factor
from .base import InducingPrior, LatentMarginals, ScaledPosterior


class JointGaussian(ScaledPosterior):
    """q(v) = N(m, L_S L_S^T) over all Q * M whitened inducing values (see the module docstring).

    Args:
        num_latent: Q.
        num_inducing: M.
        init_scale: initial standard deviation of every v (1.0 = the whitened prior).

    Parameters: ``mean`` ``(1, Q, M)`` and ``raw_scale`` ``(QM, QM)`` (strictly lower part and a
    softplus diagonal give L_S).
    """

    whitened: bool = True
    diagonal: bool = False
    kind: str = "joint"
    fused_prior = False
    joint = True
    max_components = 1

    @classmethod
    def build(cls, num_latent: int, num_inducing: int, num_components: int = 1, **options) -> "JointGaussian":
        """``posterior="joint"``: one component (the mixture ``options`` do not apply)."""
        if num_components != 1:
            raise ValueError(f"posterior='joint' has one component, got num_components={num_components}")
        return cls(num_latent, num_inducing)

    def __init__(self, num_latent: int, num_inducing: int, init_scale: float = 1.0):
        super().__init__()
        Q, M = int(num_latent), int(num_inducing)
        if Q < 1 or M < 1:
            raise ValueError(f"posterior sizes must be >= 1, got Q={Q}, M={M}")
        self.num_components, self.num_latent, self.num_inducing = 1, Q, M
        self.mean = nn.Parameter(torch.zeros(1, Q, M, dtype=torch.float64))
        raw = torch.zeros(Q * M, Q * M, dtype=torch.float64)
        raw.diagonal().fill_(float(inverse_softplus(torch.tensor(float(init_scale), dtype=torch.float64))))
        self.raw_scale = nn.Parameter(raw)

    # ------------------------------------------------------------------ parameters
    @property
    def component_means(self) -> Tensor:
        """The mean m ``(1, Q, M)``, the parameter itself (:attr:`Posterior.component_means`)."""
        return self.mean

    def weights(self) -> Tensor:
        """Mixture weights, ``(1,)`` (one component)."""
        return self.mean.new_ones(1)

    def log_weights(self) -> Tensor:
        return self.mean.new_zeros(1)

    def scale(self) -> Tensor:
        """The lower Cholesky factor L_S of S, ``(QM, QM)``; rows and columns ordered (j, m)."""
        return lower_factor(self.raw_scale)

    def covariance(self) -> Tensor:
        """S, ``(QM, QM)``."""
        L = self.scale()
        return L @ L.T

    @torch.no_grad()
    def set_full(self, mean: Tensor, chol: Tensor | None = None) -> None:
        """Set m (``(Q, M)`` or ``(1, Q, M)``) and optionally the factor: ``(QM, QM)``, or per-latent
        factors ``(1, Q, M, M)`` / ``(Q, M, M)`` (placed on the block diagonal: no coupling yet)."""
        self.mean.copy_(mean.reshape(self.mean.shape))
        if chol is None:
            return
        Q, M = self.num_latent, self.num_inducing
        if chol.dim() >= 3:
            chol = torch.block_diag(*chol.reshape(Q, M, M).unbind(0))
        if tuple(chol.shape) != (Q * M, Q * M):
            raise ValueError(f"JointGaussian.set_full: chol must be ({Q * M}, {Q * M}) or ({Q}, {M}, {M}), "
                             f"got {tuple(chol.shape)}")
        raw = torch.tril(chol, -1)
        raw.diagonal().copy_(inverse_softplus(chol.diagonal().clamp_min(1e-9)))
        self.raw_scale.copy_(raw)

    # ------------------------------------------------------------------ marginals
    def joint_marginals(self, V: Tensor, kxx: Tensor, scale: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Means and covariances of q(f_n) less the prior mean, at B inputs.

        Args:
            V: ``(Q, M, B)``, the whitened cross-covariances L_zz^-1 K_zx (with autograd graph).
            kxx: ``(Q, B)``, the prior variances k_j(x_n, x_n).
            scale: optional precomputed :meth:`scale`.

        Returns:
            ``v_nj^T m_j`` of shape ``(B, Q)`` and Cov[f_n] of shape ``(B, Q, Q)``.
        """
        Q, M, B = V.shape
        if (Q, M) != (self.num_latent, self.num_inducing):
            raise ValueError(f"JointGaussian: V must be ({self.num_latent}, {self.num_inducing}, B), got {tuple(V.shape)}")
        L = self.scale() if scale is None else scale
        fmean = torch.einsum("qm,qmb->bq", self.mean[0], V)
        C = torch.matmul(V.transpose(-1, -2), L.reshape(Q, M, Q * M))  # (Q, B, QM): C[j, n, r] = sum_m V_jmn L_(jm),r
        cov = torch.einsum("jnr,knr->njk", C, C)  # (B, Q, Q)
        cond = (kxx - (V * V).sum(-2)).clamp_min(0.0)  # (Q, B): k_nn - v^T v
        cov = cov + torch.diag_embed(cond.T)
        return fmean, cov

    # ------------------------------------------------------------------ ELBO terms
    def entropy(self, scale: Tensor | None = None, *, generator: Optional[torch.Generator] = None) -> Tensor:
        """Entropy of q(v): QM/2 log(2 pi e) + sum log diag L_S (closed form: ``generator`` unused)."""
        L = self.scale() if scale is None else scale
        n = L.shape[-1]
        return 0.5 * n * (LOG_2PI + 1.0) + torch.log(L.diagonal()).sum()

    def cross_entropy(self, scale: Tensor | None = None) -> Tensor:
        """E_q[log N(v; 0, I)] = -1/2 (QM log 2 pi + m^T m + ||L_S||_F^2)."""
        L = self.scale() if scale is None else scale
        n = L.shape[-1]
        return -0.5 * (n * math.log(2.0 * math.pi) + (self.mean * self.mean).sum() + (L * L).sum())

    # ------------------------------------------------------------------ the protocol (savigp.posteriors.base)
    def marginals(self, prior: InducingPrior, Kzx: Tensor, kxx: Tensor, state: Any = None) -> LatentMarginals:
        """q(f_n) less the prior mean: means ``(1, B, Q)`` and covariances ``(1, B, Q, Q)``
        (:meth:`joint_marginals`), with autograd through ``prior.Lzz``."""
        V = torch.linalg.solve_triangular(prior.Lzz, Kzx, upper=False)  # (Q, M, B)
        fmean, cov = self.joint_marginals(V, kxx, state)
        return LatentMarginals(fmean[None], cov.diagonal(dim1=-2, dim2=-1)[None], self.log_weights(), cov=cov[None], V=V)

    def natural_gradient_obstacle(self) -> Optional[str]:
        return ("natural-gradient updates are derived for posteriors factorized over the latent functions; "
                "this model's posterior is 'joint' (coupled across them): use savigp.fit (Adam or L-BFGS)")


    @classmethod
    def cost_terms(cls, num_components: int, num_latent: int, num_inducing: int, batch: int) -> tuple[int, int, float]:
        """One (Q M) x (Q M) covariance (see :meth:`Posterior.cost_terms`)."""
        return (num_latent * num_inducing) ** 2, 0, 0.0

    def extra_repr(self) -> str:
        return f"Q={self.num_latent}, M={self.num_inducing} (one Gaussian over all {self.num_latent * self.num_inducing} values)"
