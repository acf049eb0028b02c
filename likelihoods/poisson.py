"""Poisson likelihood / log Gaussian Cox process (Bonilla et al. 2019, §9.3.5).

Counts y_n in bins of width w with log-intensity f_n + m (m: a learnable offset of the log mean):

    lambda_n = w exp(f_n + m),
    log p(y_n | f_n) = y_n log lambda_n - lambda_n - log Gamma(y_n + 1).

Because E_{N(f; mu, v)}[exp(f)] = exp(mu + v / 2), the expected log-likelihood has the closed form

    E_q[log p(y_n | f_n)] = y_n (log w + mu + m) - w exp(mu + v / 2 + m) - log Gamma(y_n + 1),

which the engine uses by default; the black-box path stays available.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .base import Likelihood, bad_rows_message


class Poisson(Likelihood):
    """Counts y_n ~ Poisson(w exp(f_n + m)). Q = P = 1.

    Args:
        bin_width: w > 0, the width (exposure) of every bin; fixed.
        offset: initial offset m of the log-intensity.
        learn_offset: learn m with its own gradient (Bonilla et al. 2019, App. D.2); ``initialize_from_data``
            then sets it to log(mean count / w).
    """

    log_concave = True  # log p(y | f) is concave in f for every y

    num_latent = 1
    output_dim = 1
    task = "regression"

    def __init__(self, bin_width: float = 1.0, offset: float = 0.0, learn_offset: bool = True):
        super().__init__()
        if not (math.isfinite(float(bin_width)) and float(bin_width) > 0):
            raise ValueError(f"Poisson: bin_width must be a finite number > 0, got {bin_width!r}")
        if not math.isfinite(float(offset)):
            raise ValueError(f"Poisson: offset must be finite, got {offset!r}")
        self.bin_width = float(bin_width)
        self.learn_offset = bool(learn_offset)
        dtype = torch.get_default_dtype()
        self.register_buffer("log_bin_width", torch.tensor(math.log(self.bin_width), dtype=dtype))
        off = torch.tensor(float(offset), dtype=dtype)
        if self.learn_offset:
            self.offset = nn.Parameter(off)
        else:
            self.register_buffer("offset", off)

    def log_rate(self, f: Tensor) -> Tensor:
        """log lambda = log w + f + m for ``f`` of shape ``(..., B, 1)``: ``(..., B)``."""
        return f[..., 0] + (self.offset + self.log_bin_width).to(f)

    def _log_prob(self, y: Tensor, f: Tensor) -> Tensor:
        """log p(y_n | f_n) for counts ``y`` ``(B, 1)`` and ``f`` ``(..., B, 1)``: ``(..., B)``."""
        log_rate = self.log_rate(f)
        counts = y[:, 0].to(f)
        return counts * log_rate - torch.exp(log_rate) - torch.lgamma(counts + 1)

    def expected_log_prob(self, y: Tensor, mean: Tensor, var: Tensor) -> Tensor:
        """Closed-form E_{N(f; mean, var)}[log p(y | f)]; ``mean``, ``var`` ``(..., B, 1)`` -> ``(..., B)``."""
        log_rate = self.log_rate(mean)
        counts = y[:, 0].to(mean)
        return counts * log_rate - torch.exp(log_rate + 0.5 * var[..., 0]) - torch.lgamma(counts + 1)

    def conditional_moments(self, f: Tensor) -> tuple[Tensor, Tensor]:
        """E[y | f] = Var[y | f] = lambda, each ``(..., B, 1)``."""
        rate = torch.exp(self.log_rate(f)).unsqueeze(-1)
        return rate, rate

    def sample(self, f: Tensor, generator: torch.Generator) -> Tensor:
        """Counts y ~ Poisson(lambda), lambda = w exp(f + m): ``(..., B, 1)``."""
        return torch.poisson(torch.exp(self.log_rate(f)).unsqueeze(-1), generator=generator)

    def validate_targets(self, y: Tensor) -> None:
        """Raise ``ValueError`` unless ``y`` (shape ``(N, 1)``) holds non-negative integer counts."""
        super().validate_targets(y)
        ok = torch.isfinite(y) & (y >= 0) & (y == torch.round(y))
        msg = bad_rows_message(~ok, y, "are not non-negative integer counts")
        if msg:
            raise ValueError(f"Poisson likelihood: {msg}")

    @torch.no_grad()
    def initialize_from_data(self, y: Tensor) -> None:
        """Set a learnable offset to log(mean count / bin_width) (a fixed offset is left alone)."""
        mean = float(y.double().mean())
        if self.learn_offset and mean > 0:
            self.offset.fill_(math.log(mean / self.bin_width))

    def extra_repr(self) -> str:
        return f"bin_width={self.bin_width}, offset={float(self.offset.detach()):.4g}, learn_offset={self.learn_offset}"
