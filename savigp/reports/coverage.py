"""Coverage of central predictive intervals: the share of observed targets inside the interval
between the (1 - a)/2 and (1 + a)/2 quantiles of the posterior predictive, for each level a.
A calibrated model covers about a of them (binomial standard error sqrt(a (1 - a) / N)); fewer
means intervals too narrow, more too wide."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .predictive_draws import checked_draws

#: the central interval levels the report checks
LEVELS = (0.5, 0.8, 0.95)


def interval_coverage(draws: np.ndarray, Y: np.ndarray, levels: Sequence[float] = LEVELS) -> list:
    """Coverage of the central predictive intervals read off draws.

    Args:
        draws: predictive draws ``(S, B, P)`` (:mod:`.predictive_draws`).
        Y: observed targets ``(B, P)``.
        levels: interval levels in (0, 1).

    Returns:
        one dict per level: ``level``, ``covered`` (the share of the B P targets inside, ends
        included, which counts discrete values at an end as inside), ``n`` and ``stderr`` (the
        binomial standard error of a calibrated model's share, sqrt(a (1 - a) / n)).

    Raises:
        ValueError: the shapes do not match (both named).
    """
    draws, Y = checked_draws(draws, Y, "interval_coverage")
    out = []
    for a in levels:
        lo, hi = np.quantile(draws, [(1 - a) / 2, (1 + a) / 2], axis=0, method="inverted_cdf")
        inside = (Y >= lo) & (Y <= hi)
        n = int(inside.size)
        out.append({"level": float(a), "covered": float(inside.mean()), "n": n,
                    "stderr": float(np.sqrt(a * (1 - a) / n))})
    return out
