"""Randomized quantile (probability-integral-transform) residuals of any likelihood (Dunn & Smyth
1996): a check of fit that reads the same for Gaussian, count, binary or survival data.

With F the posterior predictive CDF of y_n,

    u_n = F(y_n-) + V_n (F(y_n) - F(y_n-)),   V_n ~ Uniform(0, 1),   r_n = Phi^-1(u_n),

(u_n = F(y_n) for continuous y). Under a well-specified model u_n is Uniform(0, 1) and r_n standard
normal. F is estimated from S draws y_sn of the predictive (:mod:`.predictive_draws`) by the
observation's rank among them,

    F(y-) ~ #{s: y_sn < y_n} / (S + 1),   F(y) ~ (#{s: y_sn <= y_n} + 1) / (S + 1),

so that u_n is exactly Uniform(0, 1) when y_n and its S draws are exchangeable (the observation
drawn from the model), for any S, and never 0 or 1 (r_n finite).
"""
from __future__ import annotations

import numpy as np

from .predictive_draws import checked_draws


def quantile_residuals(draws: np.ndarray, Y: np.ndarray, *, seed: int = 0) -> tuple:
    """The randomized PIT values and quantile residuals of observed targets.

    Args:
        draws: predictive draws ``(S, B, P)``.
        Y: observed targets ``(B, P)``.
        seed: seeds the randomization V.

    Returns:
        ``(u, r)``, each ``(B, P)``: u in (0, 1) and r = Phi^-1(u).

    Raises:
        ValueError: ``draws`` and ``Y`` do not match in shape (both shapes named).
    """
    from scipy.special import ndtri

    draws, Y = checked_draws(draws, Y, "quantile_residuals")
    S = draws.shape[0]
    below = (draws < Y[None]).sum(axis=0)
    ties = (draws == Y[None]).sum(axis=0)
    V = np.random.default_rng(seed).uniform(size=Y.shape)
    u = (below + V * (ties + 1)) / (S + 1)
    return u, ndtri(u)
