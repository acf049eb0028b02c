"""Gauss-Hermite rules for expectations under a standard normal, the one place they are built.

With the probabilists' Hermite nodes x_i and weights w_i of an n-point rule, normalised to sum to
one (the raw weights sum to sqrt(2 pi)),

    E_{N(z; 0, 1)}[g(z)] ~= sum_i w_i g(x_i),

exact for polynomials of degree < 2n (Abramowitz & Stegun 1964, 25.4.46). The Q-dimensional
product rule takes every Q-tuple of nodes with the product of their weights:

    E_{N(z; 0, I_Q)}[g(z)] ~= sum_{i_1..i_Q} w_{i_1} ... w_{i_Q} g(x_{i_1}, ..., x_{i_Q}).

An expectation under N(m, v) follows from f = m + sqrt(v) z. The nodes and weights are computed in
float64 by numpy and only then cast, so every caller sees the same values.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def _rule(num_points: int) -> tuple[np.ndarray, np.ndarray]:
    if int(num_points) != num_points or num_points < 1:
        raise ValueError(f"num_points must be a positive integer, got {num_points!r}")
    x, w = np.polynomial.hermite_e.hermegauss(int(num_points))
    return x, w / w.sum()


def gauss_hermite(num_points: int, like: Tensor) -> tuple[Tensor, Tensor]:
    """The n-point rule for N(0, 1): nodes ``(n,)`` and weights ``(n,)`` summing to one, in the
    dtype and on the device of ``like``."""
    x, w = _rule(num_points)
    return (torch.as_tensor(x, dtype=like.dtype, device=like.device),
            torch.as_tensor(w, dtype=like.dtype, device=like.device))


def gauss_hermite_grid(num_points: int, dims: int, like: Tensor) -> tuple[Tensor, Tensor]:
    """The n^Q-point product rule for N(0, I_Q): nodes ``(n^Q, Q)`` (the last coordinate varying
    fastest) and weights ``(n^Q,)`` summing to one, in the dtype and on the device of ``like``."""
    if int(dims) != dims or dims < 1:
        raise ValueError(f"dims must be a positive integer, got {dims!r}")
    x, w = _rule(num_points)
    grid = np.meshgrid(*([x] * dims), indexing="ij")
    nodes = np.stack([g.ravel() for g in grid], -1)
    weights = np.prod(np.meshgrid(*([w] * dims), indexing="ij"), axis=0).ravel()
    return (torch.as_tensor(nodes, dtype=like.dtype, device=like.device),
            torch.as_tensor(weights, dtype=like.dtype, device=like.device))
