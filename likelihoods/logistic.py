"""Logistic (Bernoulli) likelihood for binary classification (Bonilla et al. 2019, §9.3.3).

    p(y_n = 1 | f_n) = 1 / (1 + exp(-f_n)),   log p(y_n | f_n) = -log(1 + exp(-s_n f_n)),

with s_n = +1 for the positive class and -1 for the negative one. Labels may be given in
{-1, +1} or in {0, 1}; anything else is rejected, naming the rows.
"""
from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F

from .base import Likelihood, bad_rows_message


class Logistic(Likelihood):
    """Binary classification with a logistic link. Q = P = 1.

    ``conditional_moments`` returns p(y = 1 | f) and its Bernoulli variance, so the predictive
    "mean" of a point is the probability of the positive class.
    """

    cli_name = "logistic"
    cli_options = ()

    num_latent = 1
    output_dim = 1
    task = "classification"

    @staticmethod
    def _signs(y: Tensor) -> Tensor:
        # {0, 1} -> {-1, +1}; {-1, +1} unchanged
        return torch.where(y[:, 0] > 0, 1.0, -1.0).to(y.dtype)

    def _log_prob(self, y: Tensor, f: Tensor) -> Tensor:
        return -F.softplus(-self._signs(y) * f[..., 0])

    def conditional_moments(self, f: Tensor) -> tuple[Tensor, Tensor]:
        p = torch.sigmoid(f[..., :1])
        return p, p * (1 - p)

    def class_probabilities(self, f: Tensor) -> Tensor:
        """p(y = c | f) for c in (negative, positive): shape ``(..., B, 2)``."""
        p = torch.sigmoid(f[..., 0])
        return torch.stack([1 - p, p], dim=-1)

    def class_index(self, y: Tensor) -> Tensor:
        """Class index (0 = negative, 1 = positive) of each row of ``y`` (shape ``(B, 1)``): ``(B,)``."""
        return (y[:, 0] > 0).long()

    def validate_targets(self, y: Tensor) -> None:
        super().validate_targets(y)
        ok = (y == 1) | (y == 0) | (y == -1)
        msg = bad_rows_message(~ok, y, "are not binary labels in {-1, +1} or {0, 1}")
        if msg:
            raise ValueError(f"{type(self).__name__} likelihood: {msg}")
        if bool((y == 0).any()) and bool((y == -1).any()):
            raise ValueError(f"{type(self).__name__} likelihood: labels mix 0 and -1; use {{-1, +1}} or {{0, 1}}, not both")
