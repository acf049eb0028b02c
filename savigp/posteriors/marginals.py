"""The marginals q(f_n) at a batch of inputs: what a posterior family (with the prior mean and the
mean head added by the model) hands to an estimator of the expected log-likelihood, one object with
a fixed shape contract whatever the family.

For a mixture of K Gaussians over the inducing values (Bonilla et al. 2019, eq. (22)-(23)), the
marginal of component k at input x_n is

    q_k(f_n) = N(f_n; b_kn, C_kn),     b_kn in R^Q,

with C_kn diagonal (s2_kn) for the families factorized over the Q latent functions and a full
Q x Q covariance for a family coupled across them (:mod:`savigp.posteriors.joint`). The expected
log-likelihood L_ell (eq. (24), (29)) reads the means, the covariances and the weights pi_k only.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional, Sequence

import torch
from torch import Tensor

from ..linalg.cholesky import point_cholesky


@dataclass(frozen=True)
class LatentMarginals:
    """q_k(f_n) at B inputs for K components and Q latent functions.

    Attributes:
        mean: b, ``(K, B, Q)``.
        var: the marginal variances s2 = diag C, ``(K, B, Q)`` (always given, also for coupled
            families, where they are the diagonals of ``cov``).
        log_weights: log pi, ``(K,)``.
        cov: the covariances C ``(K, B, Q, Q)`` of a family coupled across the latent functions,
            or None (factorized: C = diag(var)).
        V: the whitened cross-covariances L_zz^-1 K_zx ``(Q, M, B)`` when the family formed them
            with autograd through L_zz (the model's mean head then reuses them), else None; not
            read by estimators.

    Raises:
        ValueError: at construction, naming the field, its shape and the shape it must have.
    """

    mean: Tensor
    var: Tensor
    log_weights: Tensor
    cov: Optional[Tensor] = None
    V: Optional[Tensor] = None

    def __post_init__(self):
        if self.mean.dim() != 3:
            raise ValueError(f"LatentMarginals: mean must be (K, B, Q), got shape {tuple(self.mean.shape)}")
        K, B, Q = self.mean.shape
        if tuple(self.var.shape) != (K, B, Q):
            raise ValueError(f"LatentMarginals: var must have the shape of mean {(K, B, Q)}, got {tuple(self.var.shape)}")
        if tuple(self.log_weights.shape) != (K,):
            raise ValueError(f"LatentMarginals: log_weights must be (K,) = {(K,)} for mean {(K, B, Q)}, "
                             f"got {tuple(self.log_weights.shape)}")
        if self.cov is not None and tuple(self.cov.shape) != (K, B, Q, Q):
            raise ValueError(f"LatentMarginals: cov must be (K, B, Q, Q) = {(K, B, Q, Q)} for mean {(K, B, Q)}, "
                             f"got {tuple(self.cov.shape)}")
        if self.V is not None and (self.V.dim() != 3 or self.V.shape[0] != Q or self.V.shape[2] != B):
            raise ValueError(f"LatentMarginals: V must be (Q, M, B) with (Q, B) = {(Q, B)}, got {tuple(self.V.shape)}")

    @property
    def shape(self) -> tuple:
        """(K, B, Q)."""
        return tuple(self.mean.shape)

    @property
    def coupled(self) -> bool:
        """Whether q(f_n) is coupled across the latent functions (``cov`` given)."""
        return self.cov is not None

    def weights(self) -> Tensor:
        """pi = exp(log pi), ``(K,)``."""
        return torch.exp(self.log_weights)

    def shifted(self, shift: Tensor) -> "LatentMarginals":
        """The marginals with ``shift`` added to every mean (the prior mean mu ``(Q,)``, a mean
        head's r ``(B, Q)``, anything that broadcasts to ``(K, B, Q)``); covariances unchanged."""
        return replace(self, mean=self.mean + shift)

    def sample(self, eps: Tensor) -> Tensor:
        """f = b + C^(1/2) eps, ``(S, K, B, Q)``, for standard normal ``eps`` ``(S, K, B or 1, Q)``:
        sqrt(s2) eps when factorized, the lower Cholesky factor of C per point when coupled."""
        if self.cov is None:
            return self.mean + self.var.sqrt() * eps
        Q = self.cov.shape[-1]
        L = point_cholesky(self.cov.reshape(-1, Q, Q)).reshape(self.cov.shape)  # rows named as k * B + n
        return self.mean + torch.matmul(L, eps.unsqueeze(-1)).squeeze(-1)

    @staticmethod
    def cat(parts: Sequence["LatentMarginals"]) -> "LatentMarginals":
        """The marginals of consecutive chunks of inputs as one (along B; ``V`` dropped)."""
        if len(parts) == 1:
            return parts[0]
        cov = None if parts[0].cov is None else torch.cat([p.cov for p in parts], dim=1)
        return LatentMarginals(torch.cat([p.mean for p in parts], dim=1), torch.cat([p.var for p in parts], dim=1),
                               parts[0].log_weights, cov)
