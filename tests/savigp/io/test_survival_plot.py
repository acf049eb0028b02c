"""The 1-D plot of a likelihood with several target columns and no mean function (issue 54): a
survival time with a right-censoring indicator gets the median survival time with its 95% band
(read off the event-time density), events and censored rows marked apart; other multi-column
targets get their outcome column. Before, only the latent panel was drawn."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import savigp
from likelihoods import CallableLikelihood
from savigp.testing.examples import censored_lognormal_numpy

pytest.importorskip("matplotlib")
from savigp.io.plotting import GRID_DRAWS, SURVIVAL_GRID, plot_fit, target_columns  # noqa: E402

S_LOG = 0.5


def _survival(seed=0, n=50):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, 1))
    t = np.exp(4 + np.sin(X[:, 0]) + S_LOG * rng.standard_normal(n))
    c = np.exp(rng.uniform(3.5, 6.0, n))  # censoring times
    return X, np.column_stack([np.minimum(t, c), (t <= c).astype(float)])


def _fit(fn, X, Y):
    lik = CallableLikelihood(fn, output_dim=Y.shape[1], params={"s": S_LOG}, constraints={"s": "fixed"})
    model = savigp.SAVIGP(X, Y, lik, num_inducing=6)
    savigp.fit(model, iterations=5, lr=0.05, num_samples=5, progress=False)
    return model


def test_a_survival_target_draws_the_median_time_with_events_and_censored_rows_apart():
    """The median of E_q[LogNormal(t; f, s)] with q(f) = N(m, v) is exp(m): the drawn median is
    within one grid step (geometric: the grid's ratio) plus 4 standard errors of the S draws' mean
    of f (sqrt(v / S)) of it, in log t."""
    X, Y = _survival()
    model = _fit(censored_lognormal_numpy, X, Y)
    fig = plot_fit(model, X, Y, num_samples=50)
    assert len(fig.axes) == 2
    ax = fig.axes[1]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert {"predictive median survival time", "event seen (y1 = 1)", "censored (y1 = 0): event later"} <= set(lines)
    assert ax.get_yscale() == ("log" if Y[:, 0].max() > 100 * Y[:, 0].min() else "linear")
    assert len(lines["censored (y1 = 0): event later"].get_xdata()) == int((Y[:, 1] == 0).sum())
    g = lines["predictive median survival time"].get_xdata()
    median = lines["predictive median survival time"].get_ydata()
    m, v = (a[0, :, 0].numpy() for a in model.predict_latent(g[:, None])[:2])
    step = math.log(Y[:, 0].max() * 100 / Y[:, 0].min()) / (SURVIVAL_GRID - 1)
    assert np.all(np.abs(np.log(median) - m) <= step + 4 * np.sqrt(v / GRID_DRAWS) + 1e-9)


def test_the_indicator_coded_one_for_censored_is_recognized():
    X, Y = _survival(seed=1)
    flipped = np.column_stack([Y[:, 0], 1 - Y[:, 1]])

    def censored_is_one(y, f, s):
        return censored_lognormal_numpy(np.column_stack([y[:, 0], 1 - y[:, 1]]), f, s)

    model = _fit(censored_is_one, X, flipped)
    columns = target_columns(model, flipped)
    assert (columns.outcome, columns.indicator, columns.event) == (0, 1, 0.0)
    assert "events and the censored rows marked apart" in columns.describe()
    assert target_columns(_fit(censored_lognormal_numpy, X, Y), Y).event == 1.0


def test_other_multi_column_targets_draw_their_outcome_column():
    """Counts out of n trials, y = (k, n): the panel of k, n held at the nearest row's value."""
    rng = np.random.default_rng(2)
    X = rng.uniform(-2, 2, (40, 1))
    n = rng.integers(5, 30, 40).astype(float)
    Y = np.column_stack([rng.binomial(n.astype(int), 1 / (1 + np.exp(-np.sin(X[:, 0])))), n])

    def binomial(y, f):
        from scipy import stats
        return stats.binom.logpmf(y[:, 0], y[:, 1], 1 / (1 + np.exp(-f[..., 0])))

    model = savigp.SAVIGP(X, Y, CallableLikelihood(binomial, output_dim=2), num_inducing=6)
    columns = target_columns(model, Y)
    assert (columns.outcome, columns.indicator) == (0, None)
    fig = plot_fit(model, X, Y, num_samples=20)
    labels = fig.axes[1].get_legend_handles_labels()[1]
    assert "predictive median y0" in labels and "data" in labels
    median = {line.get_label(): line for line in fig.axes[1].get_lines()}["predictive median y0"].get_ydata()
    assert np.all(median >= 0) and np.all(median <= n.max())


def test_a_zero_one_covariate_is_not_taken_for_a_censoring_indicator():
    """y = (time, group): a log-normal whose median doubles in group 1; neither group's term is a
    survival function, so the time is drawn with the group at the nearest row's value."""
    X, Y = _survival(seed=3)
    group = np.column_stack([Y[:, 0], np.arange(len(Y)) % 2])

    def two_groups(y, f, s):
        z = (np.log(y[:, 0]) - f[..., 0] - np.log(2) * y[:, 1]) / s
        return -np.log(y[:, 0]) - np.log(s) - 0.5 * np.log(2 * np.pi) - 0.5 * z ** 2

    columns = target_columns(_fit(two_groups, X, group), group)
    assert (columns.outcome, columns.indicator) == (0, None)
