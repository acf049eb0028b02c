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

* Q = 1: adaptive Gauss-Kronrod quadrature (:func:`gauss_kronrod`) of
  phi(x) h(m + sqrt(v) x) over x in [-``TAIL``, ``TAIL``] (the normal mass outside is 1.5e-23),
  every row at once, bisecting where the local error estimate is largest, i.e. around the jumps,
  each round's nodes in one call of h; its error estimate is the reference's error;
* Q > 1 (or where the adaptive rule does not converge): Monte Carlo in rounds of the check's draws
  (:func:`monte_carlo`), until its standard error is a third of the one the check aims at (or 25
  times the check's draws), with its standard error, which a check adds to its own in quadrature,
  sqrt(se_1^2 + se_2^2).
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
#: absolute and relative accuracy asked of the adaptive rule (finer targets chase rounding at the
#: jumps without converging: measured with scipy's quad_vec on a 3-class hard-threshold likelihood)
ADAPTIVE_TOL = 1e-6
#: Monte Carlo references use at most this many times the draws of the check they serve
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
                          generator: torch.Generator, resolution: float = 0.0,
                          progress: Optional[Callable[[str], None]] = None) -> Reference:
    """A reference for E_{N(f; mean, diag var)}[h(f)] that is right for smooth and for
    discontinuous h (module docstring): Gauss-Hermite where its rules of three orders agree,
    else adaptive quadrature (Q = 1) or Monte Carlo with at most ``DRAWS_FACTOR * draws`` draws.

    Args:
        h: maps f of shape ``(..., B, Q)`` to ``(..., B)`` (a likelihood's ``log_prob`` at B rows).
        mean, var: shape ``(B, Q)``, var > 0.
        draws: the Monte Carlo draws of the check this reference serves.
        generator: seeds the Monte Carlo reference (a CPU generator).
        resolution: the Monte Carlo reference stops drawing once its standard error is a third of
            the larger of ``resolution * (1 + abs(value))`` and sd / sqrt(draws) (the check's own
            standard error at most), after at least ``2 * draws`` draws.
        progress: told about each round of adaptive quadrature or Monte Carlo.

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
        adaptive = adaptive_quadrature(h, mean, var, progress=progress)
        if adaptive is not None:
            return adaptive
    return monte_carlo(h, mean, var, DRAWS_FACTOR * draws, chunk=draws, generator=generator,
                       resolution=resolution, check_draws=draws, progress=progress)


def _sd(value: Tensor, second: Tensor) -> Tensor:
    """sqrt(E[h^2] - E[h]^2), clamped at 0 against rounding."""
    return (second - value * value).clamp_min(0).sqrt()


def adaptive_quadrature(h: Callable[[Tensor], Tensor], mean: Tensor, var: Tensor,
                        progress: Optional[Callable[[str], None]] = None) -> Optional[Reference]:
    """Q = 1: E[h(f)] = int phi(x) h(mean + sqrt(var) x) dx over [-TAIL, TAIL] by adaptive
    Gauss-Kronrod quadrature (:func:`gauss_kronrod`: every row at once, each round's nodes in one
    call of h), error in the max norm over rows; ``None`` when it does not converge to
    ``ADAPTIVE_TOL`` or is not finite."""
    sd, B = var.sqrt(), mean.shape[0]

    def integrand(x: Tensor) -> Tensor:  # x (N,) -> (N, 2 B): phi(x) h and phi(x) h^2
        values = h(mean + sd * x[:, None, None])  # (N, B)
        phi = torch.exp(-0.5 * x * x)[:, None] / math.sqrt(2 * math.pi)
        return torch.cat([values, values * values], dim=-1) * phi

    out = gauss_kronrod(integrand, -TAIL, TAIL, abs_tol=ADAPTIVE_TOL, rel_tol=ADAPTIVE_TOL, like=mean,
                        progress=progress)
    value, second = out.value[:B], out.value[B:]
    error = float(out.error[:B].max()) if B else 0.0
    tol = ADAPTIVE_TOL * max(1.0, float(value.abs().max()) if B else 0.0)
    if not out.converged or not bool(torch.isfinite(out.value).all()) or not error <= tol:
        return None
    return Reference(value, torch.full_like(value, error), torch.zeros_like(value), _sd(value, second),
                     f"adaptive quadrature ({out.intervals} intervals; the integrand is not smooth)")


#: Gauss-Kronrod 15-point nodes (non-negative half, the last one 0) and weights, and the weights
#: of the embedded 7-point Gauss rule at the odd-indexed nodes (Piessens et al. 1983, QUADPACK qk15)
_XK = (0.991455371120812639206854697526329, 0.949107912342758524526189684047851,
       0.864864423359769072789712788640926, 0.741531185599394439863864773280788,
       0.586087235467691130294144845693013, 0.405845151377397166906606412076961,
       0.207784955007898467600689403773245, 0.0)
_WK = (0.022935322010529224963732008058970, 0.063092092629978553290700663189204,
       0.104790010322250183839876322541518, 0.140653259715525918745189590510238,
       0.169004726639267902826583426598550, 0.190350578064785409913256402421014,
       0.204432940075298892414161999234649, 0.209482141084727828012999174891714)
_WG = (0.129484966168869693270611432679082, 0.279705391489276667901467771423780,
       0.381830050505118944950369775488975, 0.417959183673469387755102040816327)


def _kronrod_rule() -> tuple:
    """The 15 nodes on [-1, 1], their Kronrod weights and the Gauss weights (0 off the Gauss nodes)."""
    x = np.concatenate([-np.asarray(_XK[:-1]), np.asarray(_XK[::-1])])
    wk = np.concatenate([np.asarray(_WK[:-1]), np.asarray(_WK[::-1])])
    half = np.zeros(8)
    half[1::2] = _WG
    wg = np.concatenate([half[:-1], half[::-1]])
    return x, wk, wg


@dataclass
class Integral:
    """The result of :func:`gauss_kronrod`: ``value`` and ``error`` (its estimate, the sum over
    intervals of abs(Kronrod - Gauss)) of shape ``(M,)``, whether every column ``converged``, the
    number of ``intervals`` and of ``rounds`` (calls of the integrand)."""

    value: Tensor
    error: Tensor
    converged: bool
    intervals: int
    rounds: int


def gauss_kronrod(g: Callable[[Tensor], Tensor], a: float, b: float, *, abs_tol: float, rel_tol: float,
                  like: Tensor, initial: int = 16, max_rounds: int = 40, max_intervals: int = 4000,
                  progress: Optional[Callable[[str], None]] = None) -> Integral:
    """int_a^b g(x) dx for a vector-valued g by adaptive Gauss-Kronrod (7/15-point) quadrature
    with one partition shared by the M columns, evaluated a round at a time: every node of every
    new interval goes to ``g`` in one call, so a slow integrand costs a call per round (at most
    ``max_rounds``), not one per node as with ``scipy.integrate.quad_vec``.

    Each interval's error is abs(K15 - G7) (per column; pessimistic for smooth integrands); while a
    column's total error exceeds max(abs_tol, rel_tol * abs(value)), the intervals whose error
    exceeds their share of that column's tolerance are bisected (Piessens et al. 1983).

    Args:
        g: maps x ``(N,)`` to values ``(N, M)``.
        a, b: finite limits, a < b.
        like: dtype and device of x.

    Returns:
        an :class:`Integral`.
    """
    xs, wk, wg = (torch.as_tensor(t, dtype=like.dtype, device=like.device) for t in _kronrod_rule())
    edges = torch.linspace(a, b, initial + 1, dtype=like.dtype, device=like.device)
    lo, hi = edges[:-1], edges[1:]
    kron = gauss = None
    rounds, converged = 0, False
    todo = torch.ones(lo.shape[0], dtype=torch.bool, device=like.device)
    while True:
        new_lo, new_hi = lo[todo], hi[todo]
        mid, half = 0.5 * (new_lo + new_hi), 0.5 * (new_hi - new_lo)
        x = (mid[:, None] + half[:, None] * xs).reshape(-1)  # (I 15,)
        values = g(x)
        values = values.reshape(new_lo.shape[0], xs.shape[0], -1)  # (I, 15, M)
        k_new = half[:, None] * torch.einsum("n,inm->im", wk, values)
        g_new = half[:, None] * torch.einsum("n,inm->im", wg, values)
        if kron is None:
            kron, gauss = k_new, g_new
        else:
            kron, gauss = torch.cat([kron[~todo], k_new]), torch.cat([gauss[~todo], g_new])
            lo, hi = torch.cat([lo[~todo], new_lo]), torch.cat([hi[~todo], new_hi])
        rounds += 1
        err_i = (kron - gauss).abs()  # (I, M)
        value, error = kron.sum(0), err_i.sum(0)
        allowed = torch.maximum(torch.full_like(value, abs_tol), rel_tol * value.abs())
        bad = ~(error <= allowed)  # NaN counts as not converged
        converged = not bool(bad.any())
        if progress is not None:
            progress(f"adaptive Gauss-Kronrod, round {rounds}: {lo.shape[0]} intervals")
        if converged or rounds >= max_rounds or lo.shape[0] >= max_intervals or not bool(torch.isfinite(value).all()):
            break
        share = allowed / lo.shape[0]
        split = ((err_i > share) & bad).any(-1) | ~torch.isfinite(err_i).all(-1)
        if not bool(split.any()):
            break
        s_lo, s_hi = lo[split], hi[split]
        s_mid = 0.5 * (s_lo + s_hi)
        keep = ~split
        lo = torch.cat([lo[keep], s_lo, s_mid])
        hi = torch.cat([hi[keep], s_mid, s_hi])
        kron = torch.cat([kron[keep], kron.new_zeros(2 * s_lo.shape[0], kron.shape[1])])
        gauss = torch.cat([gauss[keep], gauss.new_zeros(2 * s_lo.shape[0], gauss.shape[1])])
        todo = torch.cat([torch.zeros(int(keep.sum()), dtype=torch.bool, device=like.device),
                          torch.ones(2 * s_lo.shape[0], dtype=torch.bool, device=like.device)])
    return Integral(value, error, converged, int(lo.shape[0]), rounds)


def monte_carlo(h: Callable[[Tensor], Tensor], mean: Tensor, var: Tensor, draws: int, *, chunk: int,
                generator: torch.Generator, resolution: float = 0.0, check_draws: int = 1,
                progress: Optional[Callable[[str], None]] = None) -> Reference:
    """E[h(f)] by the mean over draws f ~ N(mean, diag var), ``chunk`` at a time (:func:`draw_rounds`),
    with its standard error; values ``(B,)``. Drawing stops at ``draws`` draws, or once every row's
    standard error is at most a third of max(``resolution`` (1 + abs(mean)), sd / sqrt(``check_draws``))
    -- a third of the standard error of a check of ``check_draws`` draws, which the reference's then
    raises by at most 5.4% (sqrt(1 + 1 / 9)) -- after at least 2 ``check_draws``."""
    def draw(k: int) -> Tensor:
        eps = torch.randn((k,) + tuple(mean.shape), generator=generator, dtype=mean.dtype).to(mean.device)
        return h(mean + var.sqrt() * eps)  # (k, B)

    def enough(values: Tensor) -> bool:
        n = values.shape[0]
        sd = values.std(0)
        target = torch.maximum(resolution * (1 + values.mean(0).abs()), sd / math.sqrt(check_draws)) / 3
        return n >= 2 * check_draws and bool((sd / math.sqrt(n) <= target).all())

    values = draw_rounds(draw, first=chunk, step=chunk, cap=draws, enough=enough, progress=progress,
                         what="Monte Carlo reference")
    n = values.shape[0]
    value, spread = values.mean(0), values.std(0)
    return Reference(value, torch.zeros_like(value), spread / math.sqrt(n), spread,
                     f"Monte Carlo (S = {n}; the integrand is not smooth)")


def draw_rounds(draw: Callable[[int], Tensor], *, first: int, step: int, cap: int, enough: Callable[[Tensor], bool],
                progress: Optional[Callable[[str], None]] = None, what: str = "Monte Carlo") -> Tensor:
    """Monte Carlo in rounds: ``draw(k)`` gives the values of k new draws ``(k, ...)``; the first
    round has ``first`` draws, each later one ``step``, until ``enough(values so far)`` or ``cap``
    draws. Returns every value drawn, ``(n, ...)`` with n <= cap."""
    parts, n = [], 0
    while n < cap:
        k = min(first if n == 0 else step, cap - n)
        parts.append(draw(k))
        n += k
        values = torch.cat(parts) if len(parts) > 1 else parts[0]
        if progress is not None:
            progress(f"{what}: {n} of at most {cap} draws")
        if n < cap and enough(values):
            break
    return torch.cat(parts) if len(parts) > 1 else parts[0]
