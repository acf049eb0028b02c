"""The report's figures as PNG bytes, drawn with matplotlib's object API (no pyplot, no display):
each additive part's posterior mean with its 95% band, the predictive distribution with the data,
the quantile residuals (histogram against the standard normal, and against an input) and the ELBO
per step. matplotlib is an optional extra: without it every function raises
:class:`savigp.io.plotting.MissingExtra` naming ``pip install 'savigp[plots]'``."""
from __future__ import annotations

import io
from typing import Sequence

import numpy as np

#: figure width in inches (drawn at :data:`DPI`)
WIDTH, DPI = 10.0, 100


def _figure(nrows: int, height: float):
    from ..io.plotting import EXTRA, MissingExtra

    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingExtra(f"the report's figures need matplotlib, which is not installed: pip install "
                           f"'savigp[{EXTRA}]' (or pip install matplotlib)") from None
    fig = Figure(figsize=(WIDTH, height * nrows), layout="constrained")
    return fig, fig.subplots(nrows, 1, squeeze=False)[:, 0]


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def parts_png(x: np.ndarray, names: Sequence[str], mean: np.ndarray, var: np.ndarray, xname: str,
              captions: Sequence[str]) -> bytes:
    """One panel per additive part: its posterior mean and 95% band (+- 1.96 sd) against ``x (N,)``;
    ``mean``, ``var`` ``(N, J)``, ``names`` and ``captions`` J each."""
    order = np.argsort(x, kind="stable")
    fig, axes = _figure(len(names), 2.2)
    for j, ax in enumerate(axes):
        m, s = mean[order, j], 1.96 * np.sqrt(np.maximum(var[order, j], 0.0))
        ax.fill_between(x[order], m - s, m + s, color="C0", alpha=0.25, lw=0, label="95% band")
        ax.plot(x[order], m, color="C0", lw=1.2, label="posterior mean")
        ax.axhline(0.0, color="0.6", lw=0.6)
        ax.set_title(f"{names[j]}: {captions[j]}", fontsize=10, loc="left")
        ax.set_xlabel(xname)
    axes[0].legend(loc="upper right", fontsize=8)
    return _png(fig)


def total_png(x: np.ndarray, y: np.ndarray, bands: np.ndarray, xname: str, yname: str,
              x_test=None, y_test=None) -> bytes:
    """The predictive median and 95% interval of y (``bands (3, N)``: 2.5%, 50%, 97.5% quantiles)
    against ``x (N,)`` with the data ``y (N,)`` (and test data, if given, in another colour)."""
    order = np.argsort(x, kind="stable")
    fig, axes = _figure(1, 3.6)
    ax = axes[0]
    ax.fill_between(x[order], bands[0, order], bands[2, order], color="C0", alpha=0.25, lw=0,
                    label="95% predictive interval")
    ax.plot(x[order], bands[1, order], color="C0", lw=1.2, label="predictive median")
    ax.plot(x, y, ".", color="k", ms=3, label="training data")
    if x_test is not None:
        ax.plot(x_test, y_test, ".", color="C3", ms=3, label="test data")
    ax.set_xlabel(xname)
    ax.set_ylabel(yname)
    ax.legend(loc="best", fontsize=8)
    return _png(fig)


def residuals_png(r: np.ndarray, x: np.ndarray, xname: str) -> bytes:
    """The quantile residuals ``r (N,)``: their histogram with the standard normal density, and
    against the input ``x (N,)`` with the bands +- 1.96."""
    fig, axes = _figure(2, 2.8)
    ax = axes[0]
    edges = np.linspace(-4, 4, 33)
    ax.hist(np.clip(r, -4, 4), bins=edges, density=True, color="C0", alpha=0.6, label="quantile residuals")
    t = np.linspace(-4, 4, 200)
    ax.plot(t, np.exp(-0.5 * t * t) / np.sqrt(2 * np.pi), color="k", lw=1.2, label="standard normal")
    ax.set_xlabel("residual")
    ax.legend(loc="upper right", fontsize=8)
    ax = axes[1]
    ax.plot(x, r, ".", color="C0", ms=3)
    for level in (-1.96, 0.0, 1.96):
        ax.axhline(level, color="0.5", lw=0.7, ls="--" if level else "-")
    ax.set_xlabel(xname)
    ax.set_ylabel("residual")
    return _png(fig)


def trace_png(elbo: Sequence[float]) -> bytes:
    """The ELBO per step."""
    fig, axes = _figure(1, 2.8)
    ax = axes[0]
    ax.plot(np.arange(1, len(elbo) + 1), np.asarray(elbo, dtype=np.float64), color="C0", lw=1)
    ax.set_xlabel("step")
    ax.set_ylabel("ELBO")
    return _png(fig)
