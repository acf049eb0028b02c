"""Student-t likelihood for robust regression (a heavy-tailed alternative to Bonilla et al. 2019, §9.3.1; any
likelihood with a log density fits the black-box scheme of §4).

With nu degrees of freedom and scale s,

    log p(y_n | f_n) = log Gamma((nu + 1) / 2) - log Gamma(nu / 2) - 1/2 log(nu pi) - log s
                       - (nu + 1) / 2 log(1 + ((y_n - f_n) / s)^2 / nu).

E[y | f] = f, and Var[y | f] = s^2 nu / (nu - 2) for nu > 2 (infinite otherwise).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from .base import Likelihood, bad_rows_message
from .parameters import PositiveParameter

_LOG_PI = math.log(math.pi)


class StudentT(Likelihood):
    """y_n = f_n + s * e_n, e_n ~ Student-t(nu). Q = P = 1.

    Args:
        df: initial degrees of freedom nu > 0.
        scale: initial scale s > 0.
        learn_df: learn nu (fixed by default: it is poorly identified on small data sets).
        learn_scale: learn s with its own gradient (Bonilla et al. 2019, App. D.2).
    """

    num_latent = 1
    output_dim = 1
    task = "regression"

    def __init__(self, df: float = 4.0, scale: float = 1.0, learn_df: bool = False, learn_scale: bool = True):
        super().__init__()
        self.df = PositiveParameter(df, floor=1e-6, learnable=learn_df)
        self.scale = PositiveParameter(scale, floor=1e-8, learnable=learn_scale)

    def _log_prob(self, y: Tensor, f: Tensor) -> Tensor:
        """log p(y_n | f_n) for ``y`` ``(B, 1)`` and ``f`` ``(..., B, 1)``: ``(..., B)``."""
        nu, s = self.df().to(f), self.scale().to(f)
        z = (y[:, 0].to(f) - f[..., 0]) / s
        const = torch.lgamma(0.5 * (nu + 1)) - torch.lgamma(0.5 * nu) - 0.5 * (torch.log(nu) + _LOG_PI) - torch.log(s)
        return const - 0.5 * (nu + 1) * torch.log1p(z * z / nu)

    def conditional_moments(self, f: Tensor) -> tuple[Tensor, Tensor]:
        """E[y | f] = f and Var[y | f] = s^2 nu / (nu - 2) (inf for nu <= 2), each ``(..., B, 1)``."""
        nu, s = self.df().to(f), self.scale().to(f)
        var = torch.where(nu > 2, s * s * nu / (nu - 2).clamp_min(1e-30), torch.full_like(nu, math.inf))
        return f[..., :1], var.expand_as(f[..., :1])

    def validate_targets(self, y: Tensor) -> None:
        super().validate_targets(y)
        msg = bad_rows_message(~torch.isfinite(y), y, "are not finite")
        if msg:
            raise ValueError(f"StudentT likelihood: {msg}")

    def extra_repr(self) -> str:
        return f"df={float(self.df()):.4g}, scale={float(self.scale()):.4g}"
