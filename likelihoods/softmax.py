"""Softmax likelihood for multi-class classification (Bonilla et al. 2019, §9.3.4).

With C classes and one latent function per class (Q = C),

    p(y_n = c | f_n) = exp(f_nc) / sum_i exp(f_ni),   log p(y_n = c | f_n) = f_nc - logsumexp(f_n).

The paper prints exp(-f_c) / sum_i exp(-f_i); under the zero-mean (sign-symmetric) GP prior the two
conventions describe the same model, and the sign used here is the one of the original code.

Labels are either integer class indices 0..C-1 in one column (``one_hot=False``, P = 1) or one-hot
rows (``one_hot=True``, P = C, the layout of the paper's USPS files). Anything else is rejected,
naming the rows.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .base import Likelihood, bad_rows_message


class Softmax(Likelihood):
    """Multi-class classification with a softmax link. Q = C; P = 1 (class indices) or C (one-hot).

    Args:
        num_classes: C >= 2, the number of classes (and of latent functions).
        one_hot: targets are one-hot rows ``(N, C)`` instead of class indices ``(N, 1)``.
    """

    log_concave = True  # log p(y | f) is concave in f for every y

    task = "classification"

    def __init__(self, num_classes: int, one_hot: bool = False):
        super().__init__()
        if int(num_classes) != num_classes or int(num_classes) < 2:
            raise ValueError(f"Softmax: num_classes must be an integer >= 2, got {num_classes!r}")
        self.num_classes = int(num_classes)
        self.one_hot = bool(one_hot)
        self.num_latent = self.num_classes
        self.output_dim = self.num_classes if self.one_hot else 1

    def class_index(self, y: Tensor) -> Tensor:
        """Class index in [0, C) of each row of ``y`` (shape ``(B, P)``): ``(B,)``, dtype long."""
        if self.one_hot:
            return y.argmax(dim=-1)
        return y[:, 0].round().long()

    def _log_prob(self, y: Tensor, f: Tensor) -> Tensor:
        """log p(y_n | f_n) = f_{n, y_n} - logsumexp(f_n).

        Args:
            y: labels, shape ``(B, 1)`` (indices) or ``(B, C)`` (one-hot).
            f: latent values, shape ``(..., B, C)``.

        Returns:
            shape ``(..., B)``.
        """
        idx = self.class_index(y).to(f.device).expand(f.shape[:-1]).unsqueeze(-1)
        return torch.gather(f, -1, idx).squeeze(-1) - torch.logsumexp(f, dim=-1)

    def class_probabilities(self, f: Tensor) -> Tensor:
        """p(y = c | f) for every class: ``f`` of shape ``(..., B, C)`` -> ``(..., B, C)``."""
        return torch.softmax(f, dim=-1)

    def conditional_moments(self, f: Tensor) -> tuple[Tensor, Tensor]:
        """E[y | f] and Var[y | f], each ``(..., B, P)``, for ``f`` of shape ``(..., B, C)``.

        One-hot targets: the class probabilities and their Bernoulli variances p (1 - p).
        Index targets (P = 1): the mean and variance of the class index under p(y | f), which is
        what E[y | f] means for that encoding; use :meth:`class_probabilities` for predictions.
        """
        p = self.class_probabilities(f)
        if self.one_hot:
            return p, p * (1 - p)
        c = torch.arange(self.num_classes, dtype=f.dtype, device=f.device)
        mean = (p * c).sum(dim=-1, keepdim=True)
        var = (p * (c - mean) ** 2).sum(dim=-1, keepdim=True)
        return mean, var

    def validate_targets(self, y: Tensor) -> None:
        """Raise ``ValueError`` unless ``y`` holds class indices ``(N, 1)`` in {0, ..., C-1} or, with
        ``one_hot=True``, one-hot rows ``(N, C)``; the message names the offending rows."""
        C = self.num_classes
        if not self.one_hot and y.dim() == 2 and y.shape[1] == C:
            raise ValueError(
                f"Softmax: expected class indices of shape (N, 1), got {tuple(y.shape)}; for one-hot "
                "targets construct Softmax(num_classes, one_hot=True)"
            )
        super().validate_targets(y)
        if self.one_hot:
            binary = (y == 0) | (y == 1)
            ok = binary.all(dim=1) & (y.sum(dim=1) == 1)
            msg = bad_rows_message(~ok, y, f"are not one-hot rows over {C} classes")
        else:
            v = y[:, 0]
            ok = torch.isfinite(v) & (v == torch.round(v)) & (v >= 0) & (v <= C - 1)
            msg = bad_rows_message(~ok, y, f"are not class indices in {{0, ..., {C - 1}}}")
        if msg:
            raise ValueError(f"Softmax likelihood: {msg}")

    def extra_repr(self) -> str:
        return f"num_classes={self.num_classes}, one_hot={self.one_hot}"
