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


def _figure(nrows: int, height: float, ncols: int = 1):
    from ..io.plotting import EXTRA, MissingExtra

    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingExtra(f"the report's figures need matplotlib, which is not installed: pip install "
                           f"'savigp[{EXTRA}]' (or pip install matplotlib)") from None
    fig = Figure(figsize=(WIDTH, height * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes[:, 0] if ncols == 1 else axes[0]


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def parts_png(xs: Sequence[np.ndarray], names: Sequence[str], mean: np.ndarray, var: np.ndarray,
              xnames: Sequence[str], yname: str, captions: Sequence[str]) -> bytes:
    """One panel per additive part: its posterior mean and 95% band (+- 1.96 sd) against its input
    column ``xs[j] (N,)`` (named ``xnames[j]``); ``mean``, ``var`` ``(N, J)``, ``names`` and
    ``captions`` J each; ``yname`` labels the values."""
    fig, axes = _figure(len(names), 2.0)
    for j, ax in enumerate(axes):
        x = xs[j]
        order = np.argsort(x, kind="stable")
        m, s = mean[order, j], 1.96 * np.sqrt(np.maximum(var[order, j], 0.0))
        ax.fill_between(x[order], m - s, m + s, color="C0", alpha=0.25, lw=0, label="95% band")
        ax.plot(x[order], m, color="C0", lw=1.2, label="posterior mean")
        ax.axhline(0.0, color="0.6", lw=0.6)
        ax.set_title(f"{names[j]}: {captions[j]}", fontsize=10, loc="left")
        ax.set_xlabel(xnames[j])
        ax.set_ylabel(yname, fontsize=8)
    axes[0].legend(loc="upper right", fontsize=8)
    return _png(fig)


def total_png(x: np.ndarray, y: np.ndarray, bands: np.ndarray, xname: str, yname: str,
              x_test=None, y_test=None, test_bands=None) -> bytes:
    """The predictive median and 95% interval of y (``bands (3, N)``: 2.5%, 50%, 97.5% quantiles)
    against ``x (N,)`` with the data ``y (N,)``, and the test data with their own bands (``(3, N*)``)
    in another colour, if given."""
    fig, axes = _figure(1, 3.4)
    ax = axes[0]
    for xs, ys, b, colour, what in ((x, y, bands, "C0", "training"), (x_test, y_test, test_bands, "C3", "test")):
        if xs is None:
            continue
        order = np.argsort(xs, kind="stable")
        ax.fill_between(xs[order], b[0, order], b[2, order], color=colour, alpha=0.2, lw=0,
                        label=f"95% predictive interval ({what})")
        ax.plot(xs[order], b[1, order], color=colour, lw=1.2, label=f"predictive median ({what})")
        ax.plot(xs, ys, ".", color="k" if what == "training" else colour, ms=3, label=f"{what} data")
    ax.set_xlabel(xname)
    ax.set_ylabel(yname)
    ax.legend(loc="best", fontsize=8)
    return _png(fig)


def residuals_png(r: np.ndarray, xs: Sequence[np.ndarray], xnames: Sequence[str]) -> bytes:
    """The quantile residuals ``r (N,)``: their histogram with the standard normal density, then
    against each input ``xs[k] (N,)`` (named ``xnames[k]``) with the bands +- 1.96, side by side."""
    fig, axes = _figure(1, 3.0, ncols=1 + len(xs))
    ax = axes[0]
    edges = np.linspace(-4, 4, 33)
    ax.hist(np.clip(r, -4, 4), bins=edges, density=True, color="C0", alpha=0.6, label="quantile residuals")
    t = np.linspace(-4, 4, 200)
    ax.plot(t, np.exp(-0.5 * t * t) / np.sqrt(2 * np.pi), color="k", lw=1.2, label="standard normal")
    ax.set_xlabel("residual")
    ax.legend(loc="upper right", fontsize=8)
    for ax, x, xname in zip(axes[1:], xs, xnames):
        ax.plot(x, r, ".", color="C0", ms=3)
        for level in (-1.96, 0.0, 1.96):
            ax.axhline(level, color="0.5", lw=0.7, ls="--" if level else "-")
        ax.set_xlabel(xname)
        ax.set_ylabel("residual")
    return _png(fig)


def reliability_png(tables: dict, what: str) -> bytes:
    """A reliability diagram: for each data set's table (``tables[name]``: the dicts of
    :func:`savigp.reports.calibration.reliability`) the observed share of ``what`` against the mean
    predicted probability per bin, with +- 1.96 binomial standard errors about the diagonal."""
    fig, axes = _figure(1, 3.4, ncols=1)
    ax = axes[0]
    ax.plot([0, 1], [0, 1], color="0.5", lw=0.8, ls="--", label="calibrated")
    for k, (name, rows) in enumerate(tables.items()):
        pred = np.array([b["predicted"] for b in rows])
        err = 1.96 * np.array([b["stderr"] for b in rows])
        ax.errorbar(pred, [b["observed"] for b in rows], yerr=err, fmt="o-", color=f"C{3 * k}", ms=4, lw=1,
                    capsize=3, label=f"{name} (bars: +-1.96 se of a calibrated model)")
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel(f"predicted probability of {what}")
    ax.set_ylabel("observed share")
    ax.set_title(f"predicted against observed: {what}", fontsize=10, loc="left")
    ax.legend(loc="upper left", fontsize=8)
    return _png(fig)


def probability_map_png(gx: np.ndarray, gy: np.ndarray, prob: np.ndarray, X: np.ndarray, classes: np.ndarray,
                        xnames: Sequence[str], what: str) -> bytes:
    """A binary classifier's predicted probability ``prob (len(gy), len(gx))`` on the grid of
    ``gx``, ``gy`` as filled contours with its 50% contour, and the rows ``X (N, 2)`` marked by
    their class ``classes (N,)`` (0 or 1)."""
    fig, axes = _figure(1, 4.2, ncols=1)
    ax = axes[0]
    filled = ax.contourf(gx, gy, prob, levels=np.linspace(0, 1, 11), cmap="RdBu_r", alpha=0.8)
    ax.contour(gx, gy, prob, levels=[0.5], colors="k", linewidths=1.2)
    for c, marker, colour in ((0, "o", "C0"), (1, "^", "C3")):
        keep = classes == c
        ax.plot(X[keep, 0], X[keep, 1], marker, mfc=colour, mec="k", mew=0.4, ms=4, ls="",
                label=("positive" if c else "negative") + " class (training)")
    fig.colorbar(filled, ax=ax, label=f"predicted probability")
    ax.set_title(f"predicted probability of {what}", fontsize=10, loc="left")
    ax.set_xlabel(xnames[0])
    ax.set_ylabel(xnames[1])
    ax.legend(loc="upper right", fontsize=8)
    return _png(fig)


def trace_png(elbo: Sequence[float]) -> bytes:
    """The ELBO per step."""
    fig, axes = _figure(1, 2.4)
    ax = axes[0]
    ax.plot(np.arange(1, len(elbo) + 1), np.asarray(elbo, dtype=np.float64), color="C0", lw=1)
    ax.set_xlabel("step")
    ax.set_ylabel("ELBO")
    return _png(fig)
