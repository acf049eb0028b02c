"""References for E_{N(f; m, diag v)}[h(f)], the expectation the likelihood checks compare Monte
Carlo and closed forms with, right for smooth and for non-smooth or discontinuous h.

**Gauss-Hermite product quadrature.** With the probabilists' Hermite nodes x_i and weights w_i
(normalized to sum to one),

    E[h(f)] ~= sum_{i_1..i_Q} w_{i_1} ... w_{i_Q} h(m + sqrt(v) * (x_{i_1}, ..., x_{i_Q})),

exact for polynomials of degree < 2n in each coordinate and converging geometrically in n for an
analytic h, but slowly and erratically for a kink or a jump (a hard-threshold classifier,
abs(y - f), a censoring point): a node moving across a jump changes the sum by its weight times the
jump. The rule is therefore computed at n, n - 1 and about n / 2 points per dimension; when the
three agree to ``SMOOTH_RTOL`` (relative), h is smooth enough at this scale and the n-point value
is the reference with the largest of the two differences as its error.

**Non-smooth h.** Otherwise Gauss-Hermite is no reference, and

* Q = 1: adaptive Gauss-Kronrod quadrature (``scipy.integrate.quad_vec``) of
  phi(x) h(m + sqrt(v) x) over x in [-``TAIL``, ``TAIL``] (the normal mass outside is 1.5e-23),
  every row at once, bisecting where the local error estimate is largest, i.e. around the jumps;
  its error estimate is the reference's error;
* Q > 1 (or where the adaptive rule does not converge): Monte Carlo with many draws (25 times
  those of the check, in chunks of that size) and its standard error, which a check adds to its
  own in quadrature, sqrt(se_1^2 + se_2^2).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import torch
from torch import Tensor

from likelihoods.quadrature import gauss_hermite_grid

#: the most grid points (n^Q) one quadrature uses
MAX_GRID = 20000
#: the most points per dimension
MAX_POINTS = 60
#: Gauss-Hermite rules of n, n - 1 and ~n / 2 points agreeing to this (relative) make h smooth
SMOOTH_RTOL = 1e-6
#: the adaptive rule integrates the standard normal variable over [-TAIL, TAIL]
TAIL = 10.0
#: absolute and relative accuracy asked of the adaptive rule (finer targets make quad_vec chase
#: rounding at the jumps without converging: measured on a 3-class hard-threshold likelihood)
ADAPTIVE_TOL = 1e-6
#: Monte Carlo references use this many times the draws of the check they serve
DRAWS_FACTOR = 25


@dataclass
class Reference:
    """A reference value of E[h(f)] per row.

    Attributes:
        value: shape ``(B,)``.
        error: a deterministic error estimate of ``value`` (quadrature), ``(B,)``; zeros for
            Monte Carlo.
        se: the standard error of ``value`` (Monte Carlo), ``(B,)``; zeros for quadrature.
        sd: the standard deviation of h(f) under N(mean, diag var), ``(B,)``: a Monte Carlo check
            of S draws has standard error sd / sqrt(S) even where its own S draws show no spread
            (a jump of h crossed with probability ~1 / S).
        method: how it was computed, for messages.
    """

    value: Tensor
    error: Tensor
    se: Tensor
    sd: Tensor
    method: str


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


def expectation_with_error(h: Callable[[Tensor], Tensor], mean: Tensor, var: Tensor) -> Optional[tuple]:
    """(E[h(f)] by the n-point rule, its error estimate max(abs(GH_n - GH_{n-1}), abs(GH_n - GH_{~n/2}))),
    each ``(B, ...)``, with n from :func:`points_per_dimension`; ``None`` when Q is too large for
    a product rule."""
    n = points_per_dimension(mean.shape[-1])
    if n == 0:
        return None
    fine = gauss_hermite(h, mean, var, n)
    coarser = sorted({n - 1, max(2, (n + 1) // 2)} - {n})
    error = torch.stack([(fine - gauss_hermite(h, mean, var, k)).abs() for k in coarser]).amax(0)
    return fine, error


def reference_expectation(h: Callable[[Tensor], Tensor], mean: Tensor, var: Tensor, *, draws: int,
                          generator: torch.Generator) -> Reference:
    """A reference for E_{N(f; mean, diag var)}[h(f)] that is right for smooth and for
    discontinuous h (module docstring): Gauss-Hermite where its rules of three orders agree,
    else adaptive quadrature (Q = 1) or Monte Carlo with ``DRAWS_FACTOR * draws`` draws.

    Args:
        h: maps f of shape ``(..., B, Q)`` to ``(..., B)`` (a likelihood's ``log_prob`` at B rows).
        mean, var: shape ``(B, Q)``, var > 0.
        draws: the Monte Carlo draws of the check this reference serves.
        generator: seeds the Monte Carlo reference (a CPU generator).

    Returns:
        a :class:`Reference` with values of shape ``(B,)``.
    """
    def moments(f: Tensor) -> Tensor:
        values = h(f)
        return torch.stack([values, values * values], dim=-1)  # (..., B, 2)

    gh = expectation_with_error(moments, mean, var)
    if gh is not None:
        (value, second), error = gh[0].unbind(-1), gh[1][..., 0]
        if bool(torch.isfinite(value).all()) and bool((error <= SMOOTH_RTOL * (1 + value.abs())).all()):
            n = points_per_dimension(mean.shape[-1])
            return Reference(value, error, torch.zeros_like(value), _sd(value, second),
                             f"Gauss-Hermite quadrature (n = {n} per dimension)")
    if mean.shape[-1] == 1:
        adaptive = adaptive_quadrature(h, mean, var)
        if adaptive is not None:
            return adaptive
    return monte_carlo(h, mean, var, DRAWS_FACTOR * draws, chunk=draws, generator=generator)


def _sd(value: Tensor, second: Tensor) -> Tensor:
    """sqrt(E[h^2] - E[h]^2), clamped at 0 against rounding."""
    return (second - value * value).clamp_min(0).sqrt()


def adaptive_quadrature(h: Callable[[Tensor], Tensor], mean: Tensor, var: Tensor) -> Optional[Reference]:
    """Q = 1: E[h(f)] = int phi(x) h(mean + sqrt(var) x) dx over [-TAIL, TAIL] by adaptive
    Gauss-Kronrod quadrature (``scipy.integrate.quad_vec``, all rows at once, error in the max
    norm over rows); ``None`` when it does not converge to ``ADAPTIVE_TOL`` or is not finite."""
    from scipy.integrate import quad_vec

    sd, B = var.sqrt(), mean.shape[0]

    def integrand(x: float) -> np.ndarray:
        values = h(mean + sd * x).detach().cpu().numpy()  # (B,)
        return np.concatenate([values, values * values]) * (math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi))

    out, error, info = quad_vec(integrand, -TAIL, TAIL, epsabs=ADAPTIVE_TOL, epsrel=ADAPTIVE_TOL, norm="max",
                                limit=200, full_output=True)
    if not info.success or not np.isfinite(out).all() or not np.isfinite(error):
        return None
    out = torch.as_tensor(out, dtype=mean.dtype, device=mean.device)
    value, second = out[:B], out[B:]
    return Reference(value, torch.full_like(value, float(error)), torch.zeros_like(value), _sd(value, second),
                     f"adaptive quadrature ({info.intervals.shape[0]} intervals; the integrand is not smooth)")


def monte_carlo(h: Callable[[Tensor], Tensor], mean: Tensor, var: Tensor, draws: int, *, chunk: int,
                generator: torch.Generator) -> Reference:
    """E[h(f)] by the mean over ``draws`` draws f ~ N(mean, diag var) (evaluated ``chunk`` at a
    time), with its standard error; values ``(B,)``."""
    value = torch.zeros(mean.shape[:-1], dtype=mean.dtype, device=mean.device)
    m2 = torch.zeros_like(value)  # sum of squared deviations, merged chunk by chunk (Chan et al. 1979)
    done = 0
    while done < draws:
        k = min(chunk, draws - done)
        eps = torch.randn((k,) + tuple(mean.shape), generator=generator, dtype=mean.dtype).to(mean.device)
        values = h(mean + var.sqrt() * eps)  # (k, B)
        chunk_mean = values.mean(0)
        delta = chunk_mean - value
        m2 += ((values - chunk_mean) ** 2).sum(0) + delta * delta * done * k / (done + k)
        value = value + delta * k / (done + k)
        done += k
    spread = m2 / (draws - 1)
    return Reference(value, torch.zeros_like(value), (spread / draws).sqrt(), spread.sqrt(),
                     f"Monte Carlo (S = {draws}; the integrand is not smooth)")
