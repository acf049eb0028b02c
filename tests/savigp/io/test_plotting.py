"""Plots of a fit (issue 28): the 1-D predictive band is a central 95% interval of y sampled from
the likelihood, so it stays in the support of y (counts >= 0) where mean +- 2 sd does not; a
likelihood that cannot sample is read on a grid of y (its log_prob); 2-D class maps carry a legend and
a marker per class."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import likelihoods
import savigp

pytest.importorskip("matplotlib")
from savigp.io.plotting import GRID_DRAWS, plot_fit, predictive_quantiles  # noqa: E402


def _model(lik, Y, X, iterations=5):
    model = savigp.SAVIGP(X, Y, lik, num_inducing=6)
    savigp.fit(model, iterations=iterations, lr=0.05, num_samples=5, progress=False)
    return model


def test_poisson_quantiles_are_counts_where_mean_minus_two_sd_is_negative():
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (40, 1))
    Y = rng.poisson(0.5, (40, 1)).astype(float)  # small counts: mean - 2 sd < 0
    model = _model(likelihoods.Poisson(), Y, X)
    q = predictive_quantiles(model, X[:10], num_samples=500)
    assert q.shape == (2, 10, 1)
    assert (q >= 0).all() and np.array_equal(q, np.round(q)) and (q[0] <= q[1]).all()
    pred = model.predict(X[:10], num_samples=500).numpy()
    assert (pred["mean"] - 2 * np.sqrt(pred["variance"]) < 0).any()  # the band the plot drew before
    fig = plot_fit(model, X, Y, num_samples=50)
    assert "95% predictive interval of y" in fig.axes[1].get_legend_handles_labels()[1]


def test_gaussian_quantiles_match_the_normal_predictive():
    """y* ~ N(m, v + sigma^2): the 2.5% and 97.5% quantiles of 4000 draws within 4 standard errors
    of m -+ 1.96 sd (the SE of a sample p-quantile: sqrt(p (1 - p) / S) / phi(z_p) sd)."""
    rng = np.random.default_rng(1)
    X = rng.uniform(-2, 2, (30, 1))
    Y = np.sin(X) + 0.3 * rng.standard_normal((30, 1))
    model = _model(likelihoods.Gaussian(0.1), Y, X)
    S = 4000
    q = predictive_quantiles(model, X[:5], num_samples=S, seed=3)[:, :, 0]
    m, v = model.predict_latent(X[:5])[:2]
    sd = np.sqrt(v[0, :, 0].numpy() + float(model.likelihood.variance().detach()))
    z, p = 1.959964, 0.025
    se = math.sqrt(p * (1 - p) / S) / (math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)) * sd
    assert np.all(np.abs(q[0] - (m[0, :, 0].numpy() - z * sd)) < 4 * se)
    assert np.all(np.abs(q[1] - (m[0, :, 0].numpy() + z * sd)) < 4 * se)


def test_a_likelihood_that_cannot_sample_is_read_on_a_grid_of_y():
    """A user's log p(y | f) with no sampler: without a grid no quantiles; on a grid of y the
    quantiles of E_q[p(y* | f*)] match the normal predictive m -+ 1.96 sd within the grid's step
    plus 4 Monte Carlo standard errors (F^(y) averages Phi((y - f_s) / sigma) over S draws: its
    sd is at most phi(0) sqrt(v) / (sigma sqrt(S)), divided by the density at the quantile)."""
    sigma2 = 0.1

    def gauss(y, f):
        return -0.5 * math.log(2 * math.pi * sigma2) - 0.5 * (y[:, 0] - f[..., 0]) ** 2 / sigma2

    def mean(f):
        return f, torch.full_like(f, sigma2)

    rng = np.random.default_rng(2)
    X = rng.uniform(-2, 2, (20, 1))
    model = _model(likelihoods.CallableLikelihood(gauss, mean_fn=mean), np.sin(X), X, iterations=2)
    assert predictive_quantiles(model, X[:3]) is None
    grid = np.linspace(-4, 4, 801)
    q = predictive_quantiles(model, X[:5], y_grid=grid)[:, :, 0]
    m, v = (t[0, :, 0].numpy() for t in model.predict_latent(X[:5])[:2])
    sd = np.sqrt(v + sigma2)
    z = 1.959964
    se_F = 0.3989 * np.sqrt(v) / (math.sqrt(sigma2) * math.sqrt(GRID_DRAWS))
    tol = (grid[1] - grid[0]) + 4 * se_F / (math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi) / sd)
    assert np.all(np.abs(q[0] - (m - z * sd)) < tol) and np.all(np.abs(q[1] - (m + z * sd)) < tol)
    labels = plot_fit(model, X, np.sin(X), num_samples=20).axes[1].get_legend_handles_labels()[1]
    assert "95% predictive interval of y" in labels


def test_a_zero_inflated_poisson_without_a_sampler_keeps_its_band_on_the_counts():
    """The issue's case: a numpy zero-inflated Poisson (no sampler) with small counts, where
    mean - 2 sd < 0: the band is read on the integers and never goes below 0."""
    from scipy.special import gammaln

    def zip_ll(y, f):
        r, yy = np.exp(f[..., 0]), y[:, 0]
        return np.where(yy == 0, np.logaddexp(np.log(0.3), np.log(0.7) - r),
                        np.log(0.7) + yy * f[..., 0] - r - gammaln(yy + 1))

    def zip_mean(f):
        r = np.exp(f)
        return 0.7 * r, 0.7 * (r + r * r) - (0.7 * r) ** 2

    rng = np.random.default_rng(4)
    X = rng.uniform(-2, 2, (40, 1))
    Y = np.where(rng.uniform(size=(40, 1)) < 0.3, 0, rng.poisson(0.8, (40, 1))).astype(float)
    model = _model(likelihoods.CallableLikelihood(zip_ll, mean_fn=zip_mean), Y, X)
    pred = model.predict(X, num_samples=200).numpy()
    assert (pred["mean"] - 2 * np.sqrt(pred["variance"]) < 0).any()  # the sd band would leave the support
    fig = plot_fit(model, X, Y, num_samples=50)
    band = fig.axes[1].collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() >= 0 and np.array_equal(band, np.round(band))


def test_class_maps_have_a_legend_naming_every_class():
    rng = np.random.default_rng(3)
    X = rng.uniform(-2, 2, (45, 2))
    Y = np.repeat([0.0, 1.0, 2.0], 15)[:, None]
    model = _model(likelihoods.Softmax(3), Y, X, iterations=2)
    fig = plot_fit(model, X, Y, num_samples=10)
    maps = [ax for ax in fig.axes if ax.get_title().startswith("p(y = ")]
    assert len(maps) == 3
    for ax in maps:
        legend = ax.get_legend()
        assert legend is not None and [t.get_text() for t in legend.get_texts()] == ["y = 0", "y = 1", "y = 2"]
        edges = [c.get_edgecolor()[0][:3] for c in ax.collections[1:]]  # the scatters after the map
        assert len(edges) == 3 and all(np.allclose(e, 1.0) for e in edges)  # white-edged: visible on dark cells


def _von_mises(y, f, kappa):
    from scipy.special import i0e

    return kappa * (np.cos(y[:, 0] - f[..., 0]) - 1) - np.log(2 * np.pi * i0e(kappa))


def _angles_model(iterations=60, support="circle"):
    rng = np.random.default_rng(5)
    X = rng.uniform(0, 6, (60, 1))
    Y = np.angle(np.exp(1j * (1.5 * np.sin(X) + rng.vonmises(0, 4.0, X.shape))))
    lik = likelihoods.CallableLikelihood(_von_mises, params={"kappa": 2.0}, constraints={"kappa": "positive"},
                                         support=support)
    return _model(lik, Y, X, iterations=iterations), X, Y


def test_a_likelihood_without_a_mean_function_gets_its_y_panel_from_the_density():
    """Issue 43: angles (a von Mises log p(y | f), no mean function, no sampler) drew the latent
    function alone, without the data; now the y panel has the data and the median and 95% interval
    read off E_q[p(y* | f*)] on a grid over the declared circle, inside [-pi, pi]."""
    model, X, Y = _angles_model()
    assert model.predict(X[:3]).numpy()["mean"] is None
    fig = plot_fit(model, X, Y, num_samples=20)
    assert len(fig.axes) == 2
    labels = fig.axes[1].get_legend_handles_labels()[1]
    assert labels == ["95% predictive interval of y (from the density)", "predictive median (from the density)", "data"]
    band = fig.axes[1].collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() > -math.pi and band.max() < math.pi
    median = fig.axes[1].lines[0].get_ydata()
    assert np.all(median >= band.min()) and np.all(median <= band.max())
    data = fig.axes[1].lines[1]
    np.testing.assert_array_equal(data.get_ydata(), Y[:, 0])


def test_the_density_grid_follows_the_support_and_the_data():
    from savigp.io.plotting import density_grid

    model, X, Y = _angles_model(iterations=1)
    grid = density_grid(model, None)  # a bounded support needs no data
    assert grid.min() > -math.pi and grid.max() < math.pi and grid.size == 200
    model, X, Y = _angles_model(iterations=1, support=None)
    assert density_grid(model, None) is None  # nothing to place a grid by: the plot says so and draws f only
    assert len(plot_fit(model, X, None, num_samples=5).axes) == 1
    grid = density_grid(model, Y)  # undeclared, but log p is periodic in y: one turn, not the data's range + 25%
    assert -math.pi < grid.min() < Y.min() and Y.max() < grid.max() < math.pi
    assert density_grid(model, 1.5 * Y).max() > 1.5 * Y.max()  # beyond one turn: the data's range
    model.likelihood.support = "positive"
    grid = density_grid(model, np.abs(Y))
    assert grid.min() > 0 and grid.max() > np.abs(Y).max()


def test_the_elbo_plots_running_median_follows_the_steep_start_and_smooths_the_noise():
    """An ELBO that rises from -1000 to about 0 within its first 60 steps, then Monte Carlo noise of
    sd 5 for 940 steps: the smoothed line stays within 1% of the rise of the curve where it rises
    (before, a trailing mean of 50 steps drawn at step 50 averaged in the start: -376 against a
    curve at -86), and on the plateau its spread is a fraction of the noise's."""
    from savigp.io.plotting import plot_elbo

    steps = np.arange(1000)
    curve = -1000 * np.exp(-steps / 20)
    elbo = curve + 5 * np.random.default_rng(0).standard_normal(1000) * (steps >= 60)
    line = plot_elbo(elbo, start=100).axes[0].lines[1]
    x, y = np.asarray(line.get_xdata()), np.asarray(line.get_ydata())
    at = x - 101  # the steps (0-based) the smoothed values are drawn at
    rising = at < 50
    assert rising.any() and np.abs(y[rising] - curve[at[rising]]).max() < 10
    plateau = at > 200
    assert y[plateau].std() < 0.5 * 5 and abs(y[plateau].mean()) < 1.5
