"""Pictures of a fit: latent functions and predictions over 1-D or 2-D inputs, and the ELBO curve.

    from savigp.io.plotting import plot_fit, plot_elbo
    fig = plot_fit(model, X, Y)          # a SAVIGP model, or a loaded model file (SavedModel)
    fig.savefig("fit.png")
    plot_elbo(history.elbo).savefig("elbo.png")

1-D inputs: one panel per latent function (the mean of q(f*) with a band of +-2 standard
deviations), then the predictive mean of y with its central 95% predictive interval (the 2.5% and
97.5% quantiles of y* sampled from q(f*) and the likelihood's ``sample``, so that the band stays in
the support of y: counts >= 0, a probability in (0, 1)); a likelihood that cannot sample (a
user's ``log p(y | f)`` alone) with one output gets the same interval read off its predictive
density E_q[p(y* | f*)] on a grid of y* values (integers for integer targets), where ``log_prob``
is -inf or not finite outside the support; only where neither works is the band mean +- 2
predictive sd, labelled so (it may leave the support). A likelihood with no mean function either
(angles, survival times: a ``log p(y | f)`` alone) gets its y panel all the same: the predictive
median and 95% interval read off that density, on a grid over the data's range and the
likelihood's declared ``support`` (:func:`density_grid`); with several target columns, its outcome
column (:func:`target_columns`): a survival time with a censoring indicator draws the median
survival time and its 95% interval, events and censored rows marked apart. The data are overlaid
(regression), or the class probabilities are drawn with the labels marked (classification).
2-D inputs: mean and standard-deviation maps of each latent function, and the predictive mean map
(regression) or one probability map per class (classification), with the data overlaid in a
marker and colour per class, white-edged so that every class shows on light and dark maps, and a
legend naming the classes.

matplotlib is an optional extra (``pip install 'savigp[plots]'``); without it, every function here
raises :class:`MissingExtra` with that one line. Figures are built without pyplot (no global
state, no display needed); the ``save_*`` helpers write files atomically.
"""
from __future__ import annotations

import math
import os
from typing import Optional, Sequence

import numpy as np

#: the extra that provides matplotlib
EXTRA = "plots"
#: grid points along each input axis
GRID_1D, GRID_2D = 200, 60
#: at most this many class-probability maps in 2-D (more classes: one map of the most probable class)
MAX_CLASS_MAPS = 6
#: the central predictive interval of y drawn in 1-D (lower and upper quantile levels)
INTERVAL = (0.025, 0.975)
#: draws of y per grid point for that interval (the standard error of a 2.5% quantile is then
#: about 0.02 predictive sd: a smooth band)
QUANTILE_SAMPLES = 2000
#: y* values and draws of f* per component for the predictive density of a likelihood that cannot sample
GRID_Y, GRID_DRAWS = 200, 100
#: points of the geometric grid of a survival time (:func:`target_columns`; heart's 1 to 1775 days: steps of 3%)
SURVIVAL_GRID = 400
#: data markers per class (cycled), drawn in tab10 colours with white edges
CLASS_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")


class MissingExtra(RuntimeError):
    """matplotlib is not installed; ``str(err)`` says which extra to install."""


def _figure(nrows: int, ncols: int, size: tuple):
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingExtra(f"plots need matplotlib, which is not installed: pip install 'savigp[{EXTRA}]' "
                           "(or pip install matplotlib)") from None
    fig = Figure(figsize=size, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def require_matplotlib() -> None:
    """Raise :class:`MissingExtra` now (before a long run) if plots cannot be drawn."""
    _figure(1, 1, (1, 1))


def _predict(model, X: np.ndarray, num_samples: int, seed: int) -> dict:
    pred = model.predict(X, num_samples=num_samples, seed=seed)
    return pred.numpy() if hasattr(pred, "numpy") else pred


def _likelihood(model):
    return model.model.likelihood if hasattr(model, "model") else model.likelihood


def predictive_quantiles(model, X, levels: Sequence[float] = INTERVAL, *, num_samples: int = 200,
                         seed: int = 0, y_grid: Optional[np.ndarray] = None) -> Optional[np.ndarray]:
    """Quantiles of the predictive distribution p(y* | x*) = E_q(f*)[p(y* | f*)] by sampling:
    f* from the posterior (every mixture component, weighted by pi_k), then y* from the
    likelihood's ``sample``. Each quantile is a value y* can take, so the band lies in its support.

    Args:
        model: a :class:`~savigp.model.SAVIGP` or a loaded model file (raw inputs; quantiles in the
            targets' original units).
        X: inputs ``(B, D)``.
        levels: quantile levels in (0, 1).
        num_samples: draws of f* per mixture component (one y* per draw).
        y_grid: for a likelihood that cannot sample (a user's ``log p(y | f)`` alone) with one
            output, the values of y* ``(G,)`` (in the targets' original units) at which the
            predictive density E_q[p(y* | f*)] is evaluated from ``log_prob``; the quantiles are
            read off its cumulative sum over the grid (:func:`_grid_quantiles`).

    Returns:
        ``(len(levels), B, P)``, or None when the likelihood can neither sample nor be read on a
        grid (or is not loaded).
    """
    import torch

    saved = hasattr(model, "transform_inputs")
    inner = model.model if saved else model
    lik = inner.likelihood
    if saved and not getattr(model, "likelihood_loaded", True):
        return None
    with torch.no_grad():
        f, log_w, _, _ = inner.draws(model.transform_inputs(X) if saved else X, num_samples, seed)  # (S, K, B, Q)
        try:
            y = lik.sample(f, torch.Generator(device=f.device).manual_seed(seed + 1))  # (S, K, B, P)
        except NotImplementedError:
            if y_grid is None or lik.output_dim != 1:
                return None
            return _grid_quantiles(model, lik, f, log_w, np.asarray(y_grid, dtype=np.float64), levels)
    y = y.detach().cpu().to(torch.float64).numpy()
    stats = getattr(model, "target_stats", None) if saved else None
    if stats is not None:
        y = np.asarray(stats["mean"]) + np.asarray(stats["std"]) * y
    S, K = y.shape[:2]
    w = np.repeat(np.exp(log_w.detach().cpu().double().numpy())[None, :], S, axis=0).reshape(-1) / S
    y = y.reshape(S * K, *y.shape[2:])  # (S K, B, P)
    order = np.argsort(y, axis=0, kind="stable")
    ys = np.take_along_axis(y, order, axis=0)
    cw = np.cumsum(w[order], axis=0)  # weights in sorted order, per (row, output)
    out = []
    for level in levels:
        idx = (cw < level * cw[-1:]).sum(0)  # the first sorted draw with cumulative weight >= level
        out.append(np.take_along_axis(ys, np.minimum(idx, S * K - 1)[None], axis=0)[0])
    return np.stack(out)


def _grid_quantiles(model, lik, f, log_w, y_grid: np.ndarray, levels: Sequence[float]) -> Optional[np.ndarray]:
    """Quantiles of p(y* | x*) = sum_k pi_k mean_s p(y* | f*_sk) read off a grid of y* values
    ``y_grid (G,)``: the density is evaluated by the likelihood's ``log_prob`` at every grid value
    (values where it is not finite, outside the support, count as 0), weighted by the grid's cell
    widths (1 for an integer grid: a probability mass function), normalized over the grid and
    inverted. Each quantile is a grid value, so the band keeps to the support the likelihood gives
    y. ``f`` ``(S, K, B, Q)``, ``log_w`` ``(K,)``; returns ``(len(levels), B, 1)`` or None when no
    grid value has positive density."""
    import torch

    f = f[:GRID_DRAWS]
    S, K, B, Q = f.shape
    G = y_grid.shape[0]
    stats = getattr(model, "target_stats", None) if hasattr(model, "transform_inputs") else None
    y_model = y_grid if stats is None else (y_grid - float(np.asarray(stats["mean"]).reshape(-1)[0])) / float(
        np.asarray(stats["std"]).reshape(-1)[0])
    yy = torch.as_tensor(np.tile(y_model, B)[:, None], dtype=f.dtype, device=f.device)  # (B G, 1): row b, value g
    ff = f.repeat_interleave(G, dim=2)  # (S, K, B G, Q)
    with torch.no_grad():
        lp = lik.log_prob(yy, ff).reshape(S, K, B, G)
    lp = torch.where(torch.isfinite(lp), lp, torch.full_like(lp, -torch.inf))
    log_dens = torch.logsumexp(lp, dim=0) - math.log(S)  # (K, B, G)
    log_dens = torch.logsumexp(log_w.to(lp).view(K, 1, 1) + log_dens, dim=0)  # (B, G)
    dens = log_dens.exp().cpu().double().numpy()
    widths = np.gradient(y_grid) if G > 1 else np.ones(1)
    mass = dens * np.abs(widths)[None, :]
    total = mass.sum(1, keepdims=True)
    if not np.all(total > 0):
        return None
    cdf = np.cumsum(mass / total, axis=1)  # (B, G)
    out = [y_grid[np.minimum((cdf < level).sum(1), G - 1)] for level in levels]
    return np.stack(out)[:, :, None]


def _target_grid(Y: Optional[np.ndarray], mean: np.ndarray, sd: Optional[np.ndarray], n: int = GRID_Y) -> np.ndarray:
    """The y* values :func:`_grid_quantiles` reads the predictive density at: the integers over the
    data's range (plus a margin) when every target is an integer (counts, ordinal values), else
    ``n`` values over the data's and the predictive mean +- 4 sd's range, a quarter wider."""
    lo, hi = [], []
    if Y is not None and Y.size:
        lo.append(np.nanmin(Y)), hi.append(np.nanmax(Y))
    m = mean[np.isfinite(mean)]
    if m.size:
        s = sd[np.isfinite(sd)] if sd is not None else np.zeros(0)
        spread = 4 * float(s.max()) if s.size else 0.0
        lo.append(float(m.min()) - spread), hi.append(float(m.max()) + spread)
    if not lo:
        return np.linspace(-1.0, 1.0, n)
    a, b = min(lo), max(hi)
    margin = 0.25 * (b - a) if b > a else 1.0
    if Y is not None and Y.size and np.all(np.isfinite(Y)) and np.all(Y == np.round(Y)):
        a0 = np.floor(a - margin)
        if np.nanmin(Y) >= 0:
            a0 = max(a0, 0.0)
        return np.arange(a0, np.ceil(b + margin) + 1.0)
    return np.linspace(a - margin, b + margin, n)


def density_grid(model, Y: Optional[np.ndarray], n: int = GRID_Y) -> Optional[np.ndarray]:
    """The y* values at which the 1-D plot reads the predictive density of a likelihood with no
    mean function (one output), ``(G,)``, or None when there is nothing to place them by. The
    likelihood's ``support`` (``CallableLikelihood(support=)``) decides first: the integers from 0
    for counts; ``n`` values inside a bounded interval or the circle; otherwise the targets' range,
    a quarter wider on each side and kept inside a half-bounded support (integers for integer
    targets). Targets within [-pi, pi] (or [0, 2 pi]) of a likelihood without a declared support
    whose log_prob is periodic in y with period 2 pi (an angle: checked at the targets, f = 0 and
    f = 1) get one turn. Without targets and without a bounded support: None."""
    from likelihoods.callable import parse_support

    lik = _likelihood(model)
    try:
        support = parse_support(getattr(lik, "support", None), 1)
    except ValueError:
        support = None
    kind, lo, hi, _ = support[0] if support else ("interval", -math.inf, math.inf, ())
    Y = None if Y is None else np.asarray(Y, dtype=np.float64)[:, 0]
    Y = None if Y is None else Y[np.isfinite(Y)]
    have = Y is not None and Y.size > 0
    if support is None and have and _periodic(model, lik, Y):  # an angle: one turn, where the targets lie
        lo = -math.pi if Y.min() < 0 else 0.0
        kind, hi = "circle", lo + 2 * math.pi
    if kind != "counts" and math.isfinite(lo) and math.isfinite(hi):
        step = (hi - lo) / n
        return np.linspace(lo + step / 2, hi - step / 2, n)
    if not have:
        return None
    a, b = float(Y.min()), float(Y.max())
    margin = 0.25 * (b - a) if b > a else 1.0
    if kind == "counts" or np.all(Y == np.round(Y)):
        start = max(np.floor(a - margin), 0.0) if kind == "counts" or a >= 0 else np.floor(a - margin)
        return np.arange(start, np.ceil(b + margin) + 1.0)
    a, b = max(a - margin, lo), min(b + margin, hi)
    step = (b - a) / n
    return np.linspace(a + step / 2 if a == lo else a, b - step / 2 if b == hi else b, n)


def _periodic(model, lik, Y: np.ndarray) -> bool:
    """True when the targets ``Y (N,)`` lie within [-pi, pi] or [0, 2 pi] and log p(y | f) =
    log p(y + 2 pi | f) at up to 8 of them for f = 0 and f = 1 (to 1e-9 relative)."""
    import torch

    if not ((Y.min() >= -math.pi and Y.max() <= math.pi) or (Y.min() >= 0 and Y.max() <= 2 * math.pi)):
        return False
    stats = getattr(model, "target_stats", None) if hasattr(model, "transform_inputs") else None
    if stats is not None:
        return False  # standardized targets: no angle
    inner = model.model if hasattr(model, "model") else model
    like = next(iter(inner.parameters()), torch.zeros((), dtype=torch.float64))
    y = torch.as_tensor(Y[:8, None], dtype=like.dtype, device=like.device)
    Q = int(getattr(lik, "num_latent", 1))
    try:
        with torch.no_grad():
            for value in (0.0, 1.0):
                f = torch.full((y.shape[0], Q), value, dtype=like.dtype, device=like.device)
                a, b = lik.log_prob(y, f), lik.log_prob(y + 2 * math.pi, f)
                if not bool(torch.isfinite(a).all()) or not bool(torch.isclose(a, b, rtol=1e-9, atol=1e-9).all()):
                    return False
    except Exception:  # noqa: BLE001 - a likelihood that rejects y + 2 pi is not periodic
        return False
    return True


def _class_labels(model, C: int) -> list:
    cfg = getattr(model, "config", None)
    labels = cfg.get("class_labels") if isinstance(cfg, dict) else None
    if labels is None:
        lik = model.model.likelihood if hasattr(model, "model") else model.likelihood
        labels = getattr(lik, "classes", None)
    labels = list(labels) if labels is not None else list(range(C))
    return [str(int(v)) if float(v) == int(v) else str(v) for v in labels]


def _target_names(model, P: int) -> list:
    cfg = getattr(model, "config", None)
    names = ((cfg.get("columns") or {}).get("targets") if isinstance(cfg, dict) else None) or []
    return list(names) if len(names) == P else [f"y{p}" if P > 1 else "y" for p in range(P)]


def _is_classifier(model) -> bool:
    lik = model.model.likelihood if hasattr(model, "model") else model.likelihood
    return getattr(lik, "task", "regression") == "classification"


def plot_fit(model, X, Y=None, *, num_samples: int = 200, seed: int = 0, input_names: Optional[Sequence[str]] = None):
    """A matplotlib Figure of the fit over the range of ``X``.

    Args:
        model: a :class:`~savigp.model.SAVIGP` (inputs in its units) or a loaded model file
            (:class:`~savigp.model_files.SavedModel`, raw inputs; predictions in original units).
        X: inputs ``(N, D)`` with D = 1 or 2 (their range sets the plotting grid; drawn as data).
        Y: optional targets ``(N, P)`` (or labels ``(N, 1)``) overlaid on the prediction panels.
        num_samples: Monte Carlo samples per grid point for the predictions.

    Returns:
        ``matplotlib.figure.Figure``.
    """
    X = np.asarray(X, dtype=np.float64)
    X = X[:, None] if X.ndim == 1 else X
    if X.ndim != 2 or X.shape[1] not in (1, 2) or X.shape[0] < 1:
        raise ValueError(f"plot_fit draws 1-D or 2-D inputs: X must have shape (N, 1) or (N, 2), got {X.shape}")
    if Y is not None:
        Y = np.asarray(Y, dtype=np.float64)
        Y = Y[:, None] if Y.ndim == 1 else Y
        if Y.shape[0] != X.shape[0]:
            raise ValueError(f"plot_fit: Y has {Y.shape[0]} rows but X has {X.shape[0]} (Y shape {Y.shape}, X shape {X.shape})")
    names = list(input_names) if input_names else [f"x{d + 1}" if X.shape[1] > 1 else "x" for d in range(X.shape[1])]
    if X.shape[1] == 1:
        return _plot_1d(model, X, Y, num_samples, seed, names[0])
    return _plot_2d(model, X, Y, num_samples, seed, names)


def _axis_grid(x: np.ndarray, n: int) -> np.ndarray:
    lo, hi = float(x.min()), float(x.max())
    pad = 0.05 * (hi - lo) if hi > lo else 1.0
    return np.linspace(lo - pad, hi + pad, n)


def _plot_1d(model, X, Y, num_samples, seed, xname):
    g = _axis_grid(X[:, 0], GRID_1D)
    pred = _predict(model, g[:, None], num_samples, seed)
    Q = pred["latent_mean"].shape[1]
    classifier = _is_classifier(model) and pred["probabilities"] is not None
    outputs = 1 if classifier else (pred["mean"].shape[1] if pred["mean"] is not None else 0)
    density_only = None  # no mean function: y read off the density on this grid
    columns = None  # no mean function and several target columns: the outcome column's panel
    if not classifier and pred["mean"] is None and not _is_classifier(model) and getattr(model, "likelihood_loaded", True) \
            and int(getattr(_likelihood(model), "output_dim", 0)) == 1:
        density_only = density_grid(model, None if Y is None else Y[:, :1])
        outputs = 1 if density_only is not None else 0
    elif not classifier and pred["mean"] is None and getattr(model, "likelihood_loaded", True):
        columns = target_columns(model, Y)
        outputs = 1 if columns is not None else 0
    panels = Q + outputs
    fig, axes = _figure(panels, 1, (7, 2.4 * panels))
    for j in range(Q):
        ax = axes[j, 0]
        m, s = pred["latent_mean"][:, j], np.sqrt(np.maximum(pred["latent_var"][:, j], 0))
        ax.plot(g, m, color="C0", label="mean of q(f)")
        ax.fill_between(g, m - 2 * s, m + 2 * s, color="C0", alpha=0.25, label="+-2 sd of f")
        ax.set_ylabel(f"latent f{j}")
        ax.legend(loc="best", fontsize="small")
    if classifier:
        ax = axes[Q, 0]
        P = pred["probabilities"]
        labels = _class_labels(model, P.shape[1])
        for c in range(P.shape[1]):
            ax.plot(g, P[:, c], color=f"C{c % 10}", label=f"p(y = {labels[c]})")
        if Y is not None:
            for c, lab in enumerate(labels):
                hit = np.isclose(Y[:, 0], float(lab))
                ax.plot(X[hit, 0], np.full(hit.sum(), 1.03 + 0.02 * c), "|", color=f"C{c % 10}", ms=8)
        ax.set_ylim(-0.02, 1.03 + 0.02 * P.shape[1])
        ax.set_ylabel("class probability")
        ax.legend(loc="best", fontsize="small")
    elif density_only is not None:
        _density_panel(axes[Q, 0], model, g, X, Y, density_only, num_samples, seed, _target_names(model, 1)[0])
    elif columns is not None:
        _outcome_panel(axes[Q, 0], model, g, X, Y, columns, num_samples, seed)
    else:
        tnames = _target_names(model, outputs) if outputs else []
        y_grid = None
        if outputs == 1 and pred["mean"] is not None:
            sd = np.sqrt(np.maximum(pred["variance"][:, 0], 0)) if pred["variance"] is not None else None
            y_grid = _target_grid(None if Y is None else Y[:, :1], pred["mean"][:, 0], sd)
        quantiles = predictive_quantiles(model, g[:, None], num_samples=max(num_samples, QUANTILE_SAMPLES), seed=seed,
                                         y_grid=y_grid) if outputs else None
        for p in range(outputs):
            ax = axes[Q + p, 0]
            m = pred["mean"][:, p]
            ax.plot(g, m, color="C1", label="predictive mean")
            if quantiles is not None:
                ax.fill_between(g, quantiles[0, :, p], quantiles[-1, :, p], color="C1", alpha=0.25,
                                label="95% predictive interval of y")
            elif pred["variance"] is not None:
                s = np.sqrt(np.maximum(pred["variance"][:, p], 0))
                ax.fill_between(g, m - 2 * s, m + 2 * s, color="C1", alpha=0.25,
                                label="mean +- 2 sd of y (no sampler: may leave the support)")
            if Y is not None and p < Y.shape[1]:
                ax.plot(X[:, 0], Y[:, p], ".", color="k", ms=3, label="data")
            ax.set_ylabel(tnames[p])
            ax.legend(loc="best", fontsize="small")
    axes[-1, 0].set_xlabel(xname)
    return fig


def _density_panel(ax, model, g, X, Y, grid, num_samples, seed, tname) -> None:
    """The y panel of a likelihood with no mean function: the predictive median and central 95%
    interval read off E_q[p(y* | f*)] on ``grid`` (:func:`predictive_quantiles` with ``y_grid``),
    and the data."""
    levels = (INTERVAL[0], 0.5, INTERVAL[1])
    q = predictive_quantiles(model, g[:, None], levels, num_samples=max(num_samples, GRID_DRAWS), seed=seed,
                             y_grid=grid)
    if q is not None:
        ax.fill_between(g, q[0, :, 0], q[2, :, 0], color="C1", alpha=0.25,
                        label="95% predictive interval of y (from the density)")
        ax.plot(g, q[1, :, 0], color="C1", label="predictive median (from the density)")
    if Y is not None:
        ax.plot(X[:, 0], Y[:, 0], ".", color="k", ms=3, label="data")
    ax.set_ylabel(tname)
    ax.legend(loc="best", fontsize="small")


class TargetColumns:
    """What the y panel of a likelihood with several target columns and no mean function draws:
    ``outcome`` the column whose predictive median and 95% interval are drawn, ``indicator`` a
    right-censoring indicator column (or None) with ``event`` its value for "the event was seen at
    the outcome" (the other value: censored there, the event later), ``grid`` the outcome's values
    ``(G,)`` at which the predictive density is read, and ``names`` the target columns' names."""

    def __init__(self, outcome: int, indicator: Optional[int], event: float, grid: np.ndarray, names: list):
        self.outcome, self.indicator, self.event, self.grid, self.names = outcome, indicator, event, grid, names

    def describe(self) -> str:
        """One line for the command's note: what the panel shows."""
        y = self.names[self.outcome]
        if self.indicator is None:
            return (f"the plot draws {y}'s predictive median and 95% interval read off the density "
                    f"exp(log p(y | f)) on a grid of {y}, the other target columns at the nearest row's values")
        return (f"the plot draws the median {y} with its 95% interval, read off the density of {y} when the event "
                f"is seen ({self.names[self.indicator]} = {_number(self.event)}), with the events and the censored rows "
                "marked apart (a censored row's event comes later)")


def target_columns(model, Y: Optional[np.ndarray]) -> Optional[TargetColumns]:
    """For a likelihood with P > 1 target columns and no mean function, which column the 1-D plot
    draws, given the targets ``Y (N, P)`` (None without them: nothing to place a grid by):

    * a column holding only 0 and 1 next to one positive column is a right-censoring indicator
      when, at the prior mean, exp(log p) with one of its values looks like a survival function
      P(T > t | f) of the outcome over the grid -- at most 1, non-increasing, above 1/2 a factor
      10 below the smallest outcome -- (that value means "censored") and with the other it does
      not (a density: the event seen at t). The outcome's grid is geometric over its range, a
      factor of 10 wider each side (survival times spread over orders of magnitude);
    * otherwise (a 0/1 column that is a covariate, a treatment group) the first column that is
      not 0/1 is the outcome, read on :func:`density_grid`'s grid with the other columns held at
      the nearest row's values (an exposure, trials, a group).
    """
    lik = _likelihood(model)
    P = int(getattr(lik, "output_dim", 1))
    if Y is None or P < 2 or Y.ndim != 2 or Y.shape[1] != P or not np.all(np.isfinite(Y)):
        return None
    names = _target_names(model, P)
    binary = [bool(np.all((Y[:, p] == 0) | (Y[:, p] == 1))) for p in range(P)]
    positive = [p for p in range(P) if not binary[p] and bool(np.all(Y[:, p] > 0))]
    if P == 2 and sum(binary) == 1 and len(positive) == 1:
        outcome, indicator = positive[0], binary.index(True)
        t = Y[:, outcome]
        grid = np.geomspace(float(t.min()) / 10, float(t.max()) * 10, SURVIVAL_GRID)
        event = _event_value(model, lik, grid, outcome, indicator)
        if event is not None:
            return TargetColumns(outcome, indicator, event, grid, names)
    outcome = next((p for p in range(P) if not binary[p]), None)
    if outcome is None:
        return None
    grid = density_grid(model, Y[:, outcome:outcome + 1])
    return None if grid is None else TargetColumns(outcome, None, 1.0, grid, names)


def _number(v: float) -> str:
    return str(int(v)) if float(v) == int(v) else str(v)


def _event_value(model, lik, grid: np.ndarray, outcome: int, indicator: int) -> Optional[float]:
    """The indicator's value for an event seen at the outcome (:func:`target_columns`): the other
    value's exp(log p) over ``grid`` at the prior mean is a survival function and its own is not;
    None when that does not single one out (not a censoring indicator)."""
    import torch

    inner = model.model if hasattr(model, "model") else model
    mu = inner.prior_mean.detach().to(torch.float64).cpu()
    looks_censored = []
    for value in (0.0, 1.0):
        y = torch.zeros(grid.size, 2, dtype=torch.float64)
        y[:, outcome], y[:, indicator] = torch.as_tensor(grid), value
        f = mu.expand(grid.size, mu.shape[0]).to(dtype=next(inner.parameters()).dtype)
        try:
            with torch.no_grad(), np.errstate(all="ignore"):
                p = lik.log_prob(y.to(f), f).double().exp().cpu().numpy()
        except Exception:  # noqa: BLE001 - a likelihood that refuses a value: no evidence either way
            looks_censored.append(False)
            continue
        looks_censored.append(bool(np.all(np.isfinite(p)) and np.all(p <= 1 + 1e-9) and p[0] > 0.5
                                   and np.all(np.diff(p) <= 1e-12 * (1 + p[:-1]))))
    if looks_censored == [True, False]:
        return 1.0
    if looks_censored == [False, True]:
        return 0.0
    return None


class _OneColumn:
    """A likelihood read as a function of one target column: ``log_prob(yy (R G, 1), f (..., R G, Q))``
    with row r g (r = 0..R-1 the rows of ``rest (R, P)``, g = 0..G-1) is log p at ``rest[r]`` with
    column ``column`` set to ``yy`` -- the shape :func:`_grid_quantiles` calls ``log_prob`` with."""

    def __init__(self, lik, rest, column: int):
        self.lik, self.rest, self.column = lik, rest, column

    def log_prob(self, yy, f):
        rows = self.rest.repeat_interleave(yy.shape[0] // self.rest.shape[0], dim=0).clone()
        rows[:, self.column] = yy[:, 0]
        return self.lik.log_prob(rows.to(f), f)


def _outcome_panel(ax, model, g, X, Y, columns: TargetColumns, num_samples, seed) -> None:
    """The y panel of :func:`target_columns`: the outcome's predictive median and central 95%
    interval read off E_q[p(y* | f*)] on ``columns.grid`` with the indicator at "event" (the
    distribution of the event time) or the other columns at the nearest row's values, and the data:
    events as dots, censored rows as upward triangles (their event comes later); a log axis for a
    positive outcome spread over more than two orders of magnitude."""
    import torch

    saved = hasattr(model, "transform_inputs")
    inner = model.model if saved else model
    nearest = np.abs(X[:, 0][None, :] - g[:, None]).argmin(1)  # (B,): the training row nearest each grid point
    rest = torch.as_tensor(Y[nearest], dtype=torch.float64)
    if columns.indicator is not None:
        rest[:, columns.indicator] = columns.event
    lik = _OneColumn(inner.likelihood, rest, columns.outcome)
    levels = (INTERVAL[0], 0.5, INTERVAL[1])
    with torch.no_grad():
        f, log_w, _, _ = inner.draws(model.transform_inputs(g[:, None]) if saved else g[:, None],
                                     max(num_samples, GRID_DRAWS), seed)
        q = _grid_quantiles(model, lik, f, log_w, columns.grid, levels)
    y = columns.names[columns.outcome]
    if q is not None:
        what = "survival time" if columns.indicator is not None else y
        ax.fill_between(g, q[0, :, 0], q[2, :, 0], color="C1", alpha=0.25, label=f"95% predictive interval of {what}")
        ax.plot(g, q[1, :, 0], color="C1", label=f"predictive median {what}")
    t = Y[:, columns.outcome]
    if columns.indicator is None:
        ax.plot(X[:, 0], t, ".", color="k", ms=3, label="data")
    else:
        d = columns.names[columns.indicator]
        seen = Y[:, columns.indicator] == columns.event
        ax.plot(X[seen, 0], t[seen], "o", color="k", ms=3.5, label=f"event seen ({d} = {_number(columns.event)})")
        ax.plot(X[~seen, 0], t[~seen], "^", mfc="none", color="C3", ms=5,
                label=f"censored ({d} = {_number(1 - columns.event)}): event later")
    if bool(np.all(t > 0)) and t.max() > 100 * t.min():
        ax.set_yscale("log")
    ax.set_ylabel(y)
    ax.legend(loc="best", fontsize="small")


def _plot_2d(model, X, Y, num_samples, seed, names):
    a, b = _axis_grid(X[:, 0], GRID_2D), _axis_grid(X[:, 1], GRID_2D)
    A, B = np.meshgrid(a, b)
    G = np.column_stack([A.ravel(), B.ravel()])
    pred = _predict(model, G, num_samples, seed)
    Q = pred["latent_mean"].shape[1]
    maps = []  # (title, values (GRID, GRID), cmap, overlay: False, True (values) or "classes")
    labels: list = []
    for j in range(Q):
        maps.append((f"latent f{j}: mean", pred["latent_mean"][:, j], "viridis", False))
        maps.append((f"latent f{j}: sd", np.sqrt(np.maximum(pred["latent_var"][:, j], 0)), "magma", False))
    if _is_classifier(model) and pred["probabilities"] is not None:
        P = pred["probabilities"]
        labels = _class_labels(model, P.shape[1])
        if P.shape[1] <= MAX_CLASS_MAPS:
            for c in range(P.shape[1]):
                maps.append((f"p(y = {labels[c]})", P[:, c], "Greys", "classes"))  # neutral: every class colour shows
        else:
            maps.append(("most probable class", P.argmax(1).astype(float), "tab10", "classes"))
    elif pred["mean"] is not None:
        for p, t in enumerate(_target_names(model, pred["mean"].shape[1])):
            maps.append((f"predictive mean of {t}", pred["mean"][:, p], "viridis", True))
            if pred["variance"] is not None:
                maps.append((f"predictive sd of {t}", np.sqrt(np.maximum(pred["variance"][:, p], 0)), "magma", False))
    ncols = 2
    nrows = (len(maps) + 1) // 2
    fig, axes = _figure(nrows, ncols, (9, 3.6 * nrows))
    for i, (title, values, cmap, overlay) in enumerate(maps):
        ax = axes[i // 2, i % 2]
        scale = dict(vmin=-0.5, vmax=9.5) if cmap == "tab10" else {}  # class c in colour C<c>, as its data
        im = ax.pcolormesh(A, B, values.reshape(A.shape), cmap=cmap, shading="auto", **scale)
        fig.colorbar(im, ax=ax)
        if overlay == "classes" and Y is not None:  # a marker and colour per class, white-edged, in a legend
            _scatter_classes(ax, X, Y[:, 0], labels)
        elif overlay:
            if Y is not None:
                ax.scatter(X[:, 0], X[:, 1], c=Y[:, 0], s=10, cmap="coolwarm", edgecolors="k", linewidths=0.3)
            else:
                ax.plot(X[:, 0], X[:, 1], ".", color="w", ms=2)
        ax.set_title(title, fontsize="medium")
        ax.set_xlabel(names[0])
        ax.set_ylabel(names[1])
    if len(maps) % 2:
        axes[-1, -1].set_visible(False)
    return fig


def _scatter_classes(ax, X: np.ndarray, y: np.ndarray, labels: list) -> None:
    """The data of each class in its own marker and tab10 colour with a white edge (visible on the
    dark end of any map) and a legend entry ``y = <label>``."""
    for c, lab in enumerate(labels):
        try:
            hit = np.isclose(y, float(lab))
        except ValueError:
            hit = y.astype(str) == lab
        ax.scatter(X[hit, 0], X[hit, 1], s=18, marker=CLASS_MARKERS[c % len(CLASS_MARKERS)], color=f"C{c % 10}",
                   edgecolors="w", linewidths=0.6, label=f"y = {lab}")
    ax.legend(loc="best", fontsize="small", framealpha=0.8, title="data")


def plot_elbo(elbo: Sequence[float], start: int = 0, title: str = "ELBO per step"):
    """A Figure of the ELBO estimate after each optimizer step (steps ``start + 1, ...``) and, from
    20 steps, its running median over a centred window of w steps (w odd, about a twentieth of the
    run): it shows the trend under the Monte Carlo noise, and where the ELBO rises steeply (the
    first steps) it follows the curve, since the median of a window over a monotone stretch is its
    centre's value (a trailing mean there averages in the start and runs far below the curve)."""
    elbo = np.asarray(elbo, dtype=np.float64)
    fig, axes = _figure(1, 1, (7, 3.2))
    ax = axes[0, 0]
    ax.plot(np.arange(start + 1, start + 1 + elbo.size), elbo, color="C0", lw=1)
    if elbo.size >= 20:
        w = max(5, elbo.size // 20) | 1
        smooth = np.median(np.lib.stride_tricks.sliding_window_view(elbo, w), axis=-1)
        centre = start + 1 + w // 2  # (the step of the first window's centre)
        ax.plot(np.arange(centre, centre + smooth.size), smooth, color="C3", lw=1.5,
                label=f"median of {w} steps (centred)")
        ax.legend(loc="lower right", fontsize="small")
        lo = np.percentile(elbo, 5)
        ax.set_ylim(lo - 0.1 * (elbo.max() - lo), elbo.max() + 0.05 * (elbo.max() - lo) + 1e-12)
    ax.set_xlabel("step")
    ax.set_ylabel("ELBO")
    ax.set_title(title, fontsize="medium")
    return fig


def _save(fig, path: str) -> None:
    """``fig.savefig(path)`` atomically (:func:`savigp.io.atomic_files.atomic_write`; the format from
    the extension)."""
    from .atomic_files import atomic_write

    fmt = os.path.splitext(path)[1].lstrip(".") or "png"
    with atomic_write(path, "wb") as fh:
        fig.savefig(fh, dpi=110, format=fmt)


def save_fit_plot(model, X, path: str, Y=None, **kwargs) -> None:
    """:func:`plot_fit` written to ``path`` (format from the extension: .png, .pdf, .svg)."""
    _save(plot_fit(model, X, Y, **kwargs), path)


def save_elbo_plot(elbo: Sequence[float], path: str, **kwargs) -> None:
    """:func:`plot_elbo` written to ``path``."""
    _save(plot_elbo(elbo, **kwargs), path)


# ---------------------------------------------------------------------------------- additive parts
#: a 2-D part's heat map: grid points along each of its two columns
GRID_PARTS_2D = 50
#: above this many data points the data are drawn as small translucent dots
MANY_POINTS = 500


def plot_parts(model, X, Y=None, parts=None, path: Optional[str] = None, *,
               input_names: Optional[Sequence[str]] = None):
    """One panel per additive part of the kernel (:func:`savigp.predict_parts`) on the data's inputs,
    each with its central 95% band (mean +- 1.96 sd of the part), after a panel of their total (the
    latent function) with the data on it when the likelihood's mean is f itself (a Gaussian
    likelihood), else a panel of the predictive mean of y with the data (the outcome scale). A part
    that is one number everywhere with no variance (the ``"mean"`` part of a constant prior mean or
    of standardized targets' mean) gets no panel: its value is in the total's title.

    A part that reads one input column is drawn against it; one that reads two is a heat map of its
    mean over them (the other columns at their medians: the part does not depend on them); one that
    reads more (or all of D > 2 columns) is the data's inputs on its first two columns coloured by
    its mean. With D > 1 the total (and the outcome) are drawn over the data's rows sorted by their
    mean, the data at the same rows: a rising curve with its band, the data about it.

    Args:
        model: a :class:`~savigp.model.SAVIGP` (inputs in its units) or a loaded model file
            (:class:`~savigp.model_files.SavedModel`: raw inputs, parts in the targets' units where
            its ``predict_parts`` can).
        X: the data's inputs ``(N, D)``.
        Y: optional targets ``(N, P)`` overlaid.
        parts: a :class:`~savigp.parts.PartsPrediction` at ``X`` (default: computed here, with covariances).
        path: also write the figure there (format from the extension), atomically.
        input_names: the D columns' names (default: a model file's recorded names, else x1, x2, ...).

    Returns:
        ``matplotlib.figure.Figure``.
    """
    X = np.asarray(X, dtype=np.float64)
    X = X[:, None] if X.ndim == 1 else X
    if X.ndim != 2 or X.shape[0] < 1:
        raise ValueError(f"plot_parts: X must have shape (N, D), got {X.shape}")
    N, D = X.shape
    if Y is not None:
        Y = np.asarray(Y, dtype=np.float64)
        Y = Y[:, None] if Y.ndim == 1 else Y
        if Y.shape[0] != N:
            raise ValueError(f"plot_parts: Y has {Y.shape[0]} rows but X has {N} (Y shape {Y.shape}, X shape {X.shape})")
    if parts is None:
        parts = model.predict_parts(X, covariance=True)
    if parts.mean[0].shape[0] != N:
        raise ValueError(f"plot_parts: parts were predicted at {parts.mean[0].shape[0]} inputs but X has {N} rows")
    names = _input_names(model, D, input_names)
    Q = parts.num_latent
    lik = _likelihood(model)
    from likelihoods.base import mean_is_latent

    data_on_total = Y is not None and Y.shape[1] == Q and getattr(model, "likelihood_loaded", True) and mean_is_latent(lik)
    outcome = None
    if Y is not None and not data_on_total and not _is_classifier(model) and getattr(model, "likelihood_loaded", True):
        outcome = _predict(model, X, 200, 0)["mean"]  # (N, P) or None
    panels, constants = [], {}
    for q in range(Q):
        panels.append((q, None))
        for j in range(len(parts.names[q])):
            value = _constant(_host(parts.mean[q][:, j]), _host(parts.var[q][:, j]))
            if value is None:
                panels.append((q, j))
            else:  # a constant (the prior mean, the targets' mean): said in the total's title, no panel
                constants.setdefault(q, []).append(f"{parts.names[q][j]} = {value:.6g}")
    extra = 1 if outcome is not None else 0
    fig, axes = _figure(len(panels) + extra, 1, (10, 2.1 * (len(panels) + extra) + 0.4))
    ranks = np.arange(N, dtype=np.float64)
    rows_by = "the data's rows, in the order of the {}"

    def along(values: np.ndarray):  # the order and x values of a total's panel: by x in 1-D, else by the values
        o = np.argsort(X[:, 0] if D == 1 else values, kind="stable")
        return o, (X[o, 0] if D == 1 else ranks)

    many = N > MANY_POINTS
    dot = dict(ms=1.5 if many else 3, alpha=0.5 if many else 1.0, color="k", lw=0)
    for i, (q, j) in enumerate(panels):
        ax = axes[i, 0]
        tag = f"f{q}: " if Q > 1 else ""
        if j is None:  # the total
            m = _host(parts.mean[q].sum(-1))
            s = None if parts.cov is None else np.sqrt(np.maximum(_host(parts.cov[q].sum((-1, -2))), 0))
            order, xs = along(m)
            if data_on_total:  # beneath the total's line
                ax.plot(xs, Y[order, q], ".", label="data", **dot)
            _band(ax, xs, m[order], None if s is None else s[order], "C0", "latent total (95%)")
            ax.set_title(f"{tag}total: " + " + ".join(parts.names[q])
                         + (f"   ({', '.join(constants[q])})" if q in constants else ""), fontsize="small", loc="left")
            ax.legend(loc="upper left", fontsize="x-small", markerscale=3)
            ax.set_xlabel(names[0] if D == 1 else rows_by.format("total's mean"), fontsize="small")
            continue
        m = _host(parts.mean[q][:, j])
        s = np.sqrt(np.maximum(_host(parts.var[q][:, j]), 0))
        dims = parts.active_dims[q][j]
        cols = list(range(D)) if dims is None else list(dims)
        title = f"{tag}{parts.names[q][j]}"
        if D == 1 or len(cols) <= 1:
            c = cols[0] if cols else 0
            o = np.argsort(X[:, c], kind="stable")
            _band(ax, X[o, c], m[o], s[o], f"C{(j + 1) % 10}", "part (95%)")
            ax.set_xlabel(names[c], fontsize="small")
            ax.set_title(title, fontsize="small", loc="left")
        elif len(cols) == 2:
            _part_map(fig, ax, model, X, parts, q, j, cols, names, title)
        else:
            sc = ax.scatter(X[:, cols[0]], X[:, cols[1]], c=m, s=4 if many else 12, cmap="viridis")
            fig.colorbar(sc, ax=ax, label="mean")
            ax.set_xlabel(names[cols[0]], fontsize="small")
            ax.set_ylabel(names[cols[1]], fontsize="small")
            ax.set_title(f"{title} (reads {len(cols)} columns: the data's inputs on two, coloured by its mean)",
                         fontsize="small", loc="left")
    if outcome is not None:
        ax = axes[-1, 0]
        for p in range(min(outcome.shape[1], Y.shape[1])):
            order, xs = along(outcome[:, p])
            ax.plot(xs, Y[order, p], ".", label="data", **dot)
            ax.plot(xs, outcome[order, p], color=f"C{p}", lw=1, label="predictive mean of y")
        ax.set_title("the outcome: " + ", ".join(_target_names(model, Y.shape[1])), fontsize="small", loc="left")
        ax.set_xlabel(names[0] if D == 1 else rows_by.format("predictive mean"), fontsize="small")
        ax.legend(loc="upper left", fontsize="x-small", markerscale=3)
    if path is not None:
        _save(fig, path)
    return fig


def _host(t) -> np.ndarray:
    """A tensor of a prediction (on any device, any float dtype) as a float64 NumPy array."""
    return t.detach().cpu().double().numpy()


def _constant(mean: np.ndarray, var: np.ndarray) -> Optional[float]:
    """The value of a part that is one number at every input with no variance, else None."""
    scale = max(float(np.abs(mean).max()), 1e-300)
    if float(var.max()) > 0 or float(mean.max() - mean.min()) > 1e-12 * scale:
        return None
    return float(mean[0])


def _input_names(model, D: int, given: Optional[Sequence[str]]) -> list:
    """The D inputs' names: ``given``, else a model file's recorded ones, else x1, x2, ... (x for D = 1)."""
    if given:
        return list(given)
    cfg = getattr(model, "config", None)
    names = ((cfg.get("columns") or {}).get("inputs") if isinstance(cfg, dict) else None) or []
    return list(names) if len(names) == D else [f"x{d + 1}" if D > 1 else "x" for d in range(D)]


def _band(ax, x: np.ndarray, m: np.ndarray, s: Optional[np.ndarray], color: str, label: str) -> None:
    """A mean line with its mean +- 1.96 sd band (no band when ``s`` is None)."""
    ax.plot(x, m, color=color, lw=0.9, label=label if s is not None else label.replace(" (95%)", ""))
    if s is not None:
        ax.fill_between(x, m - 1.96 * s, m + 1.96 * s, color=color, alpha=0.3, lw=0)


def _part_map(fig, ax, model, X: np.ndarray, parts, q: int, j: int, cols: list, names: list, title: str) -> None:
    """Part j of latent function q as a heat map of its mean over its two columns ``cols`` (the
    other columns at their medians), the data's inputs dotted on it, the sd's range in the title."""
    ga, gb = (_axis_grid(X[:, c], GRID_PARTS_2D) for c in cols)
    A, B = np.meshgrid(ga, gb)
    G = np.repeat(np.median(X, axis=0)[None, :], A.size, axis=0)
    G[:, cols[0]], G[:, cols[1]] = A.ravel(), B.ravel()
    grid = model.predict_parts(G)
    k = grid.names[q].index(parts.names[q][j])
    m = _host(grid.mean[q][:, k]).reshape(A.shape)
    s = np.sqrt(np.maximum(_host(grid.var[q][:, k]), 0))
    mesh = ax.pcolormesh(A, B, m, shading="auto", cmap="viridis")
    fig.colorbar(mesh, ax=ax, label="mean")
    ax.plot(X[:, cols[0]], X[:, cols[1]], ".", color="w", ms=1.5, alpha=0.6)
    ax.set_xlabel(names[cols[0]], fontsize="small")
    ax.set_ylabel(names[cols[1]], fontsize="small")
    ax.set_title(f"{title} (sd {s.min():.3g} to {s.max():.3g})", fontsize="small", loc="left")
