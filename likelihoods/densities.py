"""The Gaussian log-density, written once for the likelihoods that use it.

    log N(y; m, s) = -1/2 log(2 pi s) - (y - m)^2 / (2 s)

and its expectation under an uncertain mean, m ~ N(mu, v) (the closed-form expected
log-likelihood of a Gaussian observation model, Bonilla et al. 2019, §9.3.1):

    E[log N(y; m, s)] = -1/2 log(2 pi s) - ((y - mu)^2 + v) / (2 s).
"""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

LOG_2PI = math.log(2 * math.pi)


def gaussian_log_density(y: Tensor, mean: Tensor, variance: Tensor, mean_variance: Optional[Tensor] = None) -> Tensor:
    """log N(y; mean, variance), or its expectation over mean ~ N(mean, mean_variance).

    Args:
        y, mean: broadcastable tensors (e.g. targets ``(B,)`` and latent values ``(..., B)``).
        variance: the observation variance s > 0, broadcastable to them.
        mean_variance: v >= 0, the variance of the mean, or None (the plain density).

    Returns:
        the elementwise log-density, of the broadcast shape; no reduction over outputs.
    """
    sq = (y - mean) ** 2
    if mean_variance is not None:
        sq = sq + mean_variance
    return -0.5 * (LOG_2PI + torch.log(variance)) - 0.5 * sq / variance
