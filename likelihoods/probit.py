"""Probit (Bernoulli) likelihood for binary classification: the logistic likelihood's labels with
the standard normal CDF Phi as the link (Rasmussen & Williams 2006, §3.4; the Bernoulli likelihood
of GPflow and GPyTorch):

    p(y_n = 1 | f_n) = Phi(f_n),   log p(y_n | f_n) = log Phi(s_n f_n),

with s_n = +1 for the positive class and -1 for the negative one (labels in {-1, +1} or {0, 1}).
log Phi is evaluated by ``torch.special.log_ndtr``, accurate far into the lower tail (no log(0)).

Its predictive probability has a closed form, p(y* = 1) = Phi(mu / sqrt(1 + sigma^2)) for
f* ~ N(mu, sigma^2) (Rasmussen & Williams 2006, eq. (3.80)), and so has the log predictive density,
log p(y*) = log Phi(s mu / sqrt(1 + sigma^2)): predictions use them, no Monte Carlo.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .logistic import Logistic


class Probit(Logistic):
    """Binary classification with a probit link. Q = P = 1. Labels, their checks and the class
    indices are the logistic likelihood's; only the link differs."""

    def _log_prob(self, y: Tensor, f: Tensor) -> Tensor:
        return torch.special.log_ndtr(self._signs(y) * f[..., 0])

    def conditional_moments(self, f: Tensor) -> tuple[Tensor, Tensor]:
        p = torch.special.ndtr(f[..., :1])
        return p, p * (1 - p)

    def class_probabilities(self, f: Tensor) -> Tensor:
        """p(y = c | f) for c in (negative, positive): shape ``(..., B, 2)``."""
        p = torch.special.ndtr(f[..., 0])
        return torch.stack([1 - p, p], dim=-1)

    def _log_predictive(self, mean: Tensor, var: Tensor) -> Tensor:
        """log p(y* = 1) = log Phi(mean / sqrt(1 + var)) for f* ~ N(mean, var), elementwise
        (Rasmussen & Williams 2006, eq. (3.80)); the logistic likelihood's predictive methods
        call it with s mean for the label's sign s."""
        return torch.special.log_ndtr(mean / torch.sqrt(1 + var))
