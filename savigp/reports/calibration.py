"""A classifier's checks of fit read off its predictive draws of class indices: each row's predicted
probability p_n of the class it scores (for two classes the positive class, index 1; for more the
most drawn class), the accuracy, the Brier score mean_n (p_n - o_n)^2 with o_n = 1 when the row is
of that class (Brier 1950), and the reliability table: rows binned by p_n, each bin's mean p_n
against its observed share of o_n = 1 with the binomial standard error sqrt(p (1 - p) / n) of a
calibrated model (DeGroot & Fienberg 1983's reliability diagram)."""
from __future__ import annotations

import numpy as np

from .predictive_draws import checked_draws

#: the reliability table's bins of predicted probability
BINS = 5


def scored_probability(draws: np.ndarray, classes: np.ndarray) -> tuple:
    """``(p (B,), o (B,), correct (B,))``: each row's probability of its scored class from the draws
    ``(S, B, 1)`` of class indices, whether the observed index ``classes (B, 1)`` is that class, and
    whether the most drawn class is the observed one.

    Raises:
        ValueError: the shapes do not match (both named).
    """
    draws, classes = checked_draws(draws, classes, "scored_probability")
    d, y = draws[:, :, 0].astype(np.int64), classes[:, 0].astype(np.int64)
    C = int(max(d.max(), y.max())) + 1
    counts = np.stack([(d == c).sum(axis=0) for c in range(max(C, 2))], axis=1)  # (B, C)
    share = counts / d.shape[0]
    best = counts.argmax(axis=1)
    scored = np.ones_like(best) if share.shape[1] == 2 else best
    p = share[np.arange(len(y)), scored]
    return p, (y == scored).astype(np.float64), (best == y).astype(np.float64)


def reliability(p: np.ndarray, o: np.ndarray, bins: int = BINS) -> list:
    """The reliability table of predicted probabilities ``p (B,)`` and outcomes ``o (B,)`` (0/1):
    one dict per non-empty bin of [0, 1] (``low``, ``high``, ``n``, ``predicted`` the bin's mean p,
    ``observed`` its share of o = 1, ``stderr`` sqrt(predicted (1 - predicted) / n))."""
    p, o = np.asarray(p, dtype=np.float64), np.asarray(o, dtype=np.float64)
    if p.shape != o.shape or p.ndim != 1:
        raise ValueError(f"reliability: p and o must both be (B,), got {p.shape} and {o.shape}")
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, bins - 1)
    out = []
    for b in range(bins):
        keep = which == b
        n = int(keep.sum())
        if n:
            m = float(p[keep].mean())
            out.append({"low": float(edges[b]), "high": float(edges[b + 1]), "n": n, "predicted": m,
                        "observed": float(o[keep].mean()), "stderr": float(np.sqrt(m * (1 - m) / n))})
    return out
