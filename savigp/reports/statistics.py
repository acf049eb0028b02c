"""Simulated against observed statistics of the data (a posterior predictive check, Gelman, Meng &
Stern 1996): each of S replicated data sets y_s (row n's draw s of the predictive,
:mod:`.predictive_draws`) gives a mean, a variance, a share of zeros and a maximum; the observed
data's value is placed among them by its two-sided predictive p-value

    p = 2 min(P(T(y_rep) >= T(y)), P(T(y_rep) <= T(y))),

small (< 0.05) where the model does not reproduce the statistic (over-dispersed counts under a
Poisson likelihood: variance and maximum too high, p near 0)."""
from __future__ import annotations

import numpy as np

from .predictive_draws import checked_draws

#: the statistics, by name, as functions of data ``(..., B)`` -> ``(...)``
STATISTICS = {
    "mean": lambda y: y.mean(axis=-1),
    "variance": lambda y: y.var(axis=-1),
    "share of zeros": lambda y: (y == 0).mean(axis=-1),
    "max": lambda y: y.max(axis=-1),
}


def simulated_statistics(draws: np.ndarray, Y: np.ndarray, column: int = 0) -> list:
    """The statistics of :data:`STATISTICS` of the observed targets and of the replicated data sets.

    Args:
        draws: predictive draws ``(S, B, P)``.
        Y: observed targets ``(B, P)``.
        column: which of the P outputs.

    Returns:
        one dict per statistic: ``name``, ``observed``, ``simulated_mean``, ``low`` and ``high``
        (the 2.5% and 97.5% quantiles over replicates), ``p_value`` (two-sided, as above).

    Raises:
        ValueError: the shapes do not match (both named).
    """
    draws, Y = checked_draws(draws, Y, "simulated_statistics")
    rep, obs = draws[:, :, column], Y[:, column]
    rows = []
    for name, stat in STATISTICS.items():
        t_rep, t_obs = stat(rep), float(stat(obs))
        p = 2 * min(float((t_rep >= t_obs).mean()), float((t_rep <= t_obs).mean()))
        rows.append({"name": name, "observed": t_obs, "simulated_mean": float(t_rep.mean()),
                     "low": float(np.quantile(t_rep, 0.025)), "high": float(np.quantile(t_rep, 0.975)),
                     "p_value": min(1.0, p)})
    return rows
