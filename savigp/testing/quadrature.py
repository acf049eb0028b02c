"""Gauss-Hermite product quadrature of E_{N(f; m, diag v)}[h(f)], the reference the likelihood
checks compare Monte Carlo and closed forms with.

With the probabilists' Hermite nodes x_i and weights w_i (normalized to sum to one),

    E[h(f)] ~= sum_{i_1..i_Q} w_{i_1} ... w_{i_Q} h(m + sqrt(v) * (x_{i_1}, ..., x_{i_Q})),

exact for polynomials of degree < 2n in each coordinate. The error of an n-point rule is
estimated by the difference to the (n - 1)-point rule.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor

from likelihoods.quadrature import gauss_hermite_grid

#: the most grid points (n^Q) one quadrature uses
MAX_GRID = 20000
#: the most points per dimension
MAX_POINTS = 60


def points_per_dimension(Q: int) -> int:
    """The largest n <= MAX_POINTS with n^Q <= MAX_GRID (0 when even n = 3 does not fit)."""
    n = min(MAX_POINTS, int(math.floor(MAX_GRID ** (1.0 / Q) + 1e-9)))
    return n if n >= 3 else 0


def gauss_hermite(h: Callable[[Tensor], Tensor], mean: Tensor, var: Tensor, n: int) -> Tensor:
    """E_{N(f; mean, diag var)}[h(f)] by the n^Q-point product rule.

    Args:
        h: maps f of shape ``(G, B, Q)`` to values of shape ``(G, B, ...)``.
        mean, var: shape ``(B, Q)``.
        n: points per latent dimension.

    Returns:
        shape ``(B, ...)``, in the dtype and on the device of ``mean``.
    """
    Q = mean.shape[-1]
    nodes, weights = gauss_hermite_grid(n, Q, mean)  # (G, Q), (G,)
    values = h(mean + var.sqrt() * nodes[:, None, :])  # (G, B, ...)
    return torch.tensordot(weights, values, dims=1)


def expectation_with_error(h: Callable[[Tensor], Tensor], mean: Tensor, var: Tensor) -> tuple:
    """(E[h(f)] by the n-point rule, |n-point - (n-1)-point| as its error estimate), each ``(B, ...)``,
    with n from :func:`points_per_dimension`; ``None`` when Q is too large for a product rule."""
    n = points_per_dimension(mean.shape[-1])
    if n == 0:
        return None
    fine = gauss_hermite(h, mean, var, n)
    return fine, (fine - gauss_hermite(h, mean, var, n - 1)).abs()
