"""The Gauss-Hermite quadrature estimator of the expected log-likelihood, ``"quadrature"`` (Bonilla et al.
2019, eq. (24); the gradients through the score identity of eq. (25)): on a tensor grid of n points per
latent function, nodes x_g and weights w_g of N(0, I_Q),

    E_{q_k(f_n)}[log p(y_n | f_n)] ~= sum_g w_g log p(y_n | b_kn + sqrt(s2_kn) x_g),
    d/db  ~= sum_g w_g log p(...) x_g / sqrt(s2_kn),    d/ds2 ~= sum_g w_g log p(...) (x_g^2 - 1) / (2 s2_kn),

values of log p only, deterministic. The grid has n^Q points: small Q only, factorized marginals only.
"""
from __future__ import annotations

from typing import ClassVar

import torch

from likelihoods.quadrature import gauss_hermite_grid

from .base import ELLEstimate, Estimator
from .sampling import checked_log_prob, weighted_sum

#: the largest grid (n^Q points) the estimator builds
MAX_GRID = 20000


class Quadrature(Estimator):
    """``"quadrature"``: Gauss-Hermite quadrature on a tensor grid (small Q, factorized marginals)."""

    name = "quadrature"
    summary = "Gauss-Hermite quadrature of the likelihood's values"
    monte_carlo = False
    #: its grid is built with numpy on the host
    cuda_graph_safe = False
    #: Gauss-Hermite points per latent function
    points: ClassVar[int] = 20

    @classmethod
    def _missing(cls, likelihood, coupled: bool) -> str:
        if cls.points ** int(likelihood.num_latent) > MAX_GRID:
            return "grid"
        return super()._missing(likelihood, coupled)

    @classmethod
    def refusal(cls, likelihood, coupled: bool = False) -> str:
        if cls._missing(likelihood, coupled) == "grid":
            Q = int(likelihood.num_latent)
            return (f"estimator='quadrature' with Q={Q} latent functions needs a grid of {cls.points}^{Q} points "
                    f"(at most {MAX_GRID}); use 'score' or 'reparam'")
        return super().refusal(likelihood, coupled)

    def factorized(self, likelihood, y, marginals, *, num_samples, scale, generator):
        mean, var, weights = marginals.mean, marginals.var, marginals.weights()
        K, B, Q = mean.shape
        n = self.points
        if n ** Q > MAX_GRID:
            raise ValueError(f"estimator='quadrature' with Q={Q} needs {n}^{Q} grid points; use 'score' or fewer points")
        nodes, wgrid = gauss_hermite_grid(n, Q, mean)  # (G, Q), (G,)
        eps = nodes[:, None, None, :].expand(-1, K, B, Q)  # (G, K, B, Q)
        sd = torch.sqrt(var)
        values = checked_log_prob(likelihood, y, mean.detach() + sd.detach() * eps)  # (G, K, B)
        wv = wgrid[:, None, None]
        g = values.detach().unsqueeze(-1)
        wq = wgrid[:, None, None, None]
        grad_b = (wq * g * eps).sum(0) / sd.detach()
        grad_s2 = (wq * g * (eps * eps - 1.0)).sum(0) / (2.0 * var.detach())
        surrogate = (mean * grad_b + var * grad_s2).sum(-1)
        per = (wv * values).sum(0) + (surrogate - surrogate.detach())
        return ELLEstimate(weighted_sum(weights, per, scale), (wv * values).detach().sum(0), 0.0)
