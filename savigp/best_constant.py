"""The constant latent value that best explains the targets: where a constant prior mean starts
when the user gives none.

For each latent function j, the scalar c_j that maximizes the log-likelihood of the targets at a
constant latent function,

    c = argmax_c sum_n log p(y_n | f_n = c),   c in R^Q,

by coordinate ascent (each c_j in turn, the others held, twice over for Q > 1) with a 1-D search
on the likelihood's ``log_prob`` alone: a grid 0, +-2^k (k = -4, ..., 10) around 0, then six
uniform grids of 33 points, each 8 times narrower, around the best point (to about 1e-5 of the
first grid's gap). It needs values only
(no gradient, no closed form), so it works for any likelihood, a numpy black box included; a
value that is not finite counts as -inf, and a likelihood flat in c_j (it ignores f_j) keeps
c_j = 0. This is the maximum-likelihood constant (a type-II estimate of the prior mean with the
GP's variation left out), the start Bonilla et al. (2019, §7) leave to the user.

:class:`savigp.SAVIGP` uses it when ``prior_mean`` is not given (:data:`FAR`: only where the
constant is far from 0 for the prior).
"""
from __future__ import annotations

import warnings

import numpy as np
import torch
from torch import Tensor

#: the constant replaces a prior mean of 0 where abs(c_j) exceeds FAR prior standard deviations of f_j
FAR = 2.0
#: at most this many rows (evenly spaced) are read
MAX_ROWS = 2000
#: uniform grids after the geometric one, each 8 times narrower: the last step is 2^-17 of the first gap
ROUNDS = 6
_STEPS = torch.cat([torch.zeros(1), 2.0 ** torch.arange(-4.0, 11.0), -(2.0 ** torch.arange(-4.0, 11.0))])


def best_constant(likelihood, Y: Tensor) -> Tensor:
    """argmax over c ``(Q,)`` of sum_n log p(y_n | f_n = c) for the targets ``Y (N, P)`` (at most
    :data:`MAX_ROWS` of them, evenly spaced), float64 on Y's device; see the module docstring."""
    Y = Y.detach()
    N = Y.shape[0]
    rows = torch.linspace(0, N - 1, min(N, MAX_ROWS)).round().long().to(Y.device)
    y = Y[rows].to(torch.float64)
    Q = int(likelihood.num_latent)
    c = torch.zeros(Q, dtype=torch.float64, device=Y.device)
    for _ in range(2 if Q > 1 else 1):
        for j in range(Q):
            c[j] = _search(lambda v: _total(likelihood, y, c, j, v))
    return c


def _total(likelihood, y: Tensor, c: Tensor, j: int, values: Tensor) -> Tensor:
    """sum_n log p(y_n | f_n = c with c_j = v) for each v of ``values (G,)``: ``(G,)``, -inf where not finite."""
    f = c.expand(values.shape[0], y.shape[0], c.shape[0]).clone()  # (G, B, Q)
    f[..., j] = values[:, None]
    with torch.no_grad(), warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # a black box outside its comfortable range
        try:
            out = likelihood.log_prob(y, f.to(y.dtype)).sum(-1)
        except Exception:  # noqa: BLE001 - a black box that fails here is named by fit's first call
            return torch.full_like(values, -float("inf"))
    return torch.where(torch.isfinite(out), out, torch.full_like(out, -float("inf")))


def _search(total) -> float:
    """The best v of ``total(values (G,)) -> (G,)``: a geometric grid around 0, then ROUNDS uniform
    grids around the best point, each 8 times narrower (the first of equal values wins: 0 first)."""
    grid = _STEPS.to(torch.float64)
    values = total(grid)
    if not bool(torch.isfinite(values).any()):
        return 0.0
    best = float(grid[int(values.argmax())])
    gap = float((grid - best).abs().masked_fill(grid == best, float("inf")).min())
    uniform = torch.linspace(-1.0, 1.0, 33, dtype=torch.float64)
    for _ in range(ROUNDS):
        grid = torch.cat([torch.tensor([best], dtype=torch.float64), best + gap * uniform])
        values = total(grid)
        best = float(grid[int(values.argmax())])
        gap /= 8
    return best
