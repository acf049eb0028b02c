"""The targets' periodogram against an input column: where a periodic part's period starts, and a
check of a period a user gives.

* :func:`periodogram_peaks` -- the strongest peaks of the Lomb-Scargle periodogram (Lomb 1976;
  Scargle 1982), the starting periods of the kernel search's periodic parts
  (:mod:`savigp.selection.kernel_search`);
* :func:`period_warnings` -- a period given in a kernel expression or spec, checked against the
  targets' own peaks: a period in other units than its column's (12 for a yearly season of a column
  in years) trained silently to no season (issue 57); now the model says so
  (:class:`PeriodWarning`).
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from .._choices import KERNELS

#: a given period is near a peak P when within this factor of P, 2P or P/2 (harmonics: a periodic
#: kernel of period 2P holds functions of period P, and a season's strongest peak is often a harmonic)
NEAR = 1.10
#: the peaks a given period is compared with
PEAKS = 3
#: the check reads at most this many rows (a seeded subset)
MAX_ROWS = 5000


class PeriodWarning(UserWarning):
    """A period given for a periodic part is far from every strong peak of the targets' periodogram
    on its column (or outside the periods the data can show): perhaps a period in other units."""


def periodogram_peaks(X: np.ndarray, Y: np.ndarray, dims, count: int = 3,
                       weights: Optional[np.ndarray] = None, detrend: bool = False) -> list:
    """Starting periods for a periodic part, whose ELBO is multimodal in the period: the strongest
    peak of the Lomb-Scargle periodogram (Lomb 1976; Scargle 1982; with ``weights`` ``(N,)``, the
    weighted, floating-mean form of Zechmeister and Kuerster 2009, scipy's) of the first target column
    against the input column ``dims[0]`` (or the first), between twice the median spacing of the
    inputs and half their range, twice that period, then the next strongest peaks; ``count`` in all.
    ``detrend``: of the targets less their least-squares line in that column (the targets' own
    periodogram: a trend's power at long periods hid the season of Mauna Loa CO2, whose peaks were
    11.1, 22.2 and 8.2 years, and 1.0, 2.0 and 14.0 years without the line)."""
    from scipy.signal import lombscargle

    x = X[:, (dims or [0])[0]]
    y = Y[:, 0]
    ok = np.isfinite(x) & np.isfinite(y)
    if weights is not None:
        ok &= np.isfinite(weights) & (weights > 0)
    x, y = x[ok], y[ok]
    w = None if weights is None else weights[ok]
    if detrend and np.unique(x).size > 2:
        y = y - np.polyval(np.polyfit(x, y, 1, w=None if w is None else np.sqrt(w)), x)
    y = y - (y.mean() if w is None else np.average(y, weights=w))
    xs = np.unique(x)
    if xs.size < 8 or not np.any(y):
        return []
    spacing = float(np.median(np.diff(xs)))
    span = float(xs[-1] - xs[0])
    if spacing <= 0 or span <= 0:
        return []
    freqs = 2 * np.pi / np.geomspace(span / 2, 2 * spacing, 2000)  # angular
    if w is None:
        power = lombscargle(x, y, freqs)
    else:
        power = lombscargle(x, y, freqs, weights=w / w.sum(), floating_mean=True)
    peaks = [i for i in range(1, len(power) - 1) if power[i] >= power[i - 1] and power[i] >= power[i + 1]]
    peaks.sort(key=lambda i: -power[i])
    best = [float(2 * np.pi / freqs[i]) for i in peaks[:count]]
    # a periodic kernel of period 2 p holds functions of period p too, and the strongest peak of a
    # draw from one (MacKay's kernel has harmonics) is often its second harmonic: twice the strongest
    # peak is the second start
    return (best[:1] + [2 * best[0]] + best[1:])[:count] if best and 2 * best[0] <= span else best[:count]


def period_warnings(spec, X: np.ndarray, Y: np.ndarray, columns=None) -> list:
    """One line per periodic leaf of ``spec`` (a kernel spec, :mod:`savigp.kernels.spec`) whose
    ``period`` was given and is far from the targets' periodogram on its input column: outside the
    periods the inputs can show (below twice their median spacing, or above their range), or not
    within :data:`NEAR` of one of the :data:`PEAKS` strongest peaks of the detrended first target
    column nor of their harmonics (x2, /2). Empty where nothing is to be said (no given
    period, too few distinct inputs for a periodogram).

    Args:
        spec: the kernel's spec (the leaves' ``period`` and ``active_dims``).
        X: inputs ``(N, D)`` in the units of the periods; Y: targets ``(N, P)`` (the first column is read).
        columns: the D input columns' names, for the lines (default their indices).
    """
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64).reshape(X.shape[0], -1)
    if not _periodic_leaves(spec):
        return []
    if X.shape[0] > MAX_ROWS:  # (a seeded subset: the periodogram costs rows x frequencies)
        rows = np.sort(np.random.default_rng(0).choice(X.shape[0], MAX_ROWS, replace=False))
        X, Y = X[rows], Y[rows]
    out = []
    for leaf in _periodic_leaves(spec):
        if leaf.get("period") is None:
            continue
        dims = leaf.get("active_dims") or [0]
        given = [float(v) for v in np.atleast_1d(np.asarray(leaf["period"], dtype=np.float64)).reshape(-1)]
        x = X[:, dims[0]]
        xs = np.unique(x[np.isfinite(x)])
        if xs.size < 8:
            continue
        spacing, span = float(np.median(np.diff(xs))), float(xs[-1] - xs[0])
        name = f"periodic({columns[dims[0]] if columns is not None else dims[0]})"
        peaks = periodogram_peaks(X, Y, dims, count=PEAKS + 1, detrend=True)
        for p in given:
            if not (p > 0 and math.isfinite(p)):
                continue
            if p < 2 * spacing or p > span:
                out.append(f"{name}: its period starts at {p:.4g}, outside the periods the inputs can show "
                           f"({2 * spacing:.4g} to {span:.4g}, twice their spacing to their range): a period in "
                           "other units than the column's?")
                continue
            if peaks and not _near(p, peaks):
                shown = ", ".join(f"{q:.4g}" for q in peaks[:PEAKS + 1])
                out.append(f"{name}: its period starts at {p:.4g}, far from the strongest peaks of the targets' "
                           f"periodogram on that column ({shown}) and their harmonics: a period in other units "
                           "than the column's, or no such season in the data? (the ELBO is multimodal in a "
                           "period: a fit stays near where it starts)")
    return out


def _near(p: float, peaks: list) -> bool:
    return any(abs(math.log(p / (k * q))) < math.log(NEAR) for q in peaks for k in (1, 2, 0.5))


def _periodic_leaves(spec) -> list:
    """The leaves of ``spec`` whose family declares ``has_period`` (through sums, products, scales and lists)."""
    if isinstance(spec, str) or not isinstance(spec, dict):
        return []
    if "sum" in spec or "product" in spec:
        return [leaf for part in spec.get("sum", spec.get("product")) for leaf in _periodic_leaves(part)]
    if "scale" in spec:
        return _periodic_leaves(spec["scale"])
    if "list" in spec:
        return [leaf for part in spec["list"] for leaf in _periodic_leaves(part.get("kernel"))]
    family = KERNELS.get(spec["kernel"]) if isinstance(spec.get("kernel"), str) else None
    return [spec] if family is not None and family.has_period else []
