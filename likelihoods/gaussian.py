"""Gaussian likelihood with a learnable noise variance (Bonilla et al. 2019, §9.3.1).

    log p(y_n | f_n) = log N(y_n; f_n, sigma^2) = -1/2 log(2 pi sigma^2) - (y_n - f_n)^2 / (2 sigma^2)

Its expected log-likelihood under q(f_n) = N(m, v) has the closed form

    E_q[log p(y_n | f_n)] = -1/2 log(2 pi sigma^2) - ((y_n - m)^2 + v) / (2 sigma^2),

which the engine uses by default (``estimator="auto"``); the black-box path stays available.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .base import Likelihood, bad_rows_message
from .densities import gaussian_log_density
from .parameters import PositiveParameter


class Gaussian(Likelihood):
    """y_n = f_n + eps, eps ~ N(0, sigma^2). Q = P = 1.

    Args:
        variance: initial noise variance sigma^2 (> 0).
        learn_variance: learn sigma^2 with its own gradient (Bonilla et al. 2019, App. D.2).
    """

    log_concave = True  # log p(y | f) is concave in f for every y
    conjugate = True  # y = f + eps: the posterior over f is Gaussian

    num_latent = 1
    output_dim = 1
    task = "regression"

    def __init__(self, variance: float = 1.0, learn_variance: bool = True):
        super().__init__()
        self.variance = PositiveParameter(variance, floor=1e-8, learnable=learn_variance)

    def _log_prob(self, y: Tensor, f: Tensor) -> Tensor:
        var = self.variance()
        return gaussian_log_density(y[:, 0], f[..., 0], var)

    def expected_log_prob(self, y: Tensor, mean: Tensor, var: Tensor) -> Tensor:
        noise = self.variance()
        return gaussian_log_density(y[:, 0], mean[..., 0], noise, var[..., 0])

    def predictive_moments(self, mean: Tensor, var: Tensor) -> tuple[Tensor, Tensor]:
        """E[y] = m and Var[y] = v + sigma^2 under f ~ N(m, v), exactly."""
        return mean[..., :1], var[..., :1] + self.variance().to(var)

    def conditional_moments(self, f: Tensor) -> tuple[Tensor, Tensor]:
        return f[..., :1], self.variance().to(f).expand_as(f[..., :1])

    def sample(self, f: Tensor, generator: torch.Generator) -> Tensor:
        """y = f + sigma eps, eps ~ N(0, 1): ``(..., B, 1)``."""
        eps = torch.randn(f[..., :1].shape, generator=generator, dtype=f.dtype, device=f.device)
        return f[..., :1] + self.variance().to(f).sqrt() * eps

    def validate_targets(self, y: Tensor) -> None:
        super().validate_targets(y)
        msg = bad_rows_message(~torch.isfinite(y), y, "are not finite")
        if msg:
            raise ValueError(f"Gaussian likelihood: {msg}")
