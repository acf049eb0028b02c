"""The report's checks of fit: randomized quantile residuals (Dunn & Smyth 1996) are uniform for a
well-specified model and catch a misspecified one; the predictive draws of a likelihood that cannot
sample (read on a grid of y) agree with its sampler's; interval coverage and simulated statistics
read what they claim. Statistical tests at fixed seeds, tolerances from the standard errors."""
import math

import numpy as np
import pytest
import torch
from scipy.stats import kstest

import savigp
from likelihoods import CallableLikelihood, Gaussian, Poisson
from savigp.reports.coverage import interval_coverage
from savigp.reports.predictive_draws import predictive_draws
from savigp.reports.residuals import quantile_residuals
from savigp.reports.statistics import simulated_statistics

N = 150


def _gp_draw(seed: int):
    """Inputs ``(N, 1)`` on [0, 10] and a draw ``(N, 1)`` of a GP with an RBF kernel (length-scale 1.5)."""
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(N, 1, generator=g, dtype=torch.float64) * 10
    K = torch.exp(-0.5 * (X - X.T) ** 2 / 1.5 ** 2) + 1e-8 * torch.eye(N, dtype=torch.float64)
    return X, torch.linalg.cholesky(K) @ torch.randn(N, 1, generator=g, dtype=torch.float64), g


def _fitted(X, Y, likelihood):
    model = savigp.SAVIGP(X, Y, likelihood, num_inducing=30)
    savigp.fit(model, iterations=60, optimizer="lbfgs", progress=False)
    return model


@pytest.fixture(scope="module")
def gaussian_fit():
    torch.set_default_dtype(torch.float64)
    X, f, g = _gp_draw(0)
    Y = f + 0.3 * torch.randn(N, 1, generator=g, dtype=torch.float64)
    return _fitted(X, Y, Gaussian()), X.numpy(), Y.numpy()


@pytest.fixture(scope="module")
def overdispersed_counts():
    """Negative binomial counts (dispersion 0.5: variance mu + 2 mu^2) fitted by a Poisson likelihood."""
    torch.set_default_dtype(torch.float64)
    X, f, g = _gp_draw(1)
    lam = torch.exp(2.0 + f)
    torch.manual_seed(1)
    Y = torch.poisson(torch.distributions.Gamma(0.5, 0.5 / lam).sample(), generator=g)
    return _fitted(X, Y, Poisson()), X.numpy(), Y.numpy()


def test_quantile_residuals_are_exactly_uniform_when_the_observation_is_one_more_draw():
    # discrete values with many ties: the rank with its randomization is Uniform(0, 1) for any S
    rng = np.random.default_rng(0)
    draws = rng.poisson(1.5, size=(50, 2000, 1)).astype(float)
    Y = rng.poisson(1.5, size=(2000, 1)).astype(float)
    u, r = quantile_residuals(draws, Y, seed=1)
    assert kstest(u[:, 0], "uniform").pvalue > 0.01
    assert np.all((u > 0) & (u < 1)) and np.all(np.isfinite(r))
    # without the randomization (u = F(y)) the same values are far from uniform
    F = ((draws <= Y[None]).sum(0) + 1) / 51
    assert kstest(F[:, 0], "uniform").pvalue < 1e-6


def test_quantile_residuals_name_both_shapes():
    with pytest.raises(ValueError, match=r"draws \(10, 5, 1\) and Y \(4, 1\)"):
        quantile_residuals(np.zeros((10, 5, 1)), np.zeros((4, 1)))


def test_residuals_of_a_well_specified_gaussian_model_are_uniform(gaussian_fit):
    model, X, Y = gaussian_fit
    u, r = quantile_residuals(predictive_draws(model, X, Y, num_samples=1000, seed=0), Y, seed=0)
    assert kstest(u[:, 0], "uniform").pvalue > 0.01
    assert abs(r.var() - 1) < 4 * math.sqrt(2 / N)  # the sample variance's standard error under N(0, 1)


def test_residuals_catch_overdispersed_counts_under_a_poisson_likelihood(overdispersed_counts):
    model, X, Y = overdispersed_counts
    draws = predictive_draws(model, X, Y, num_samples=1000, seed=0)
    _, r = quantile_residuals(draws, Y, seed=0)
    assert r.var() > 1 + 4 * math.sqrt(2 / N)  # too spread: the Poisson's intervals are too narrow
    stats = {s["name"]: s for s in simulated_statistics(draws, Y)}
    assert stats["variance"]["p_value"] < 0.01 and stats["variance"]["observed"] > stats["variance"]["high"]
    assert stats["mean"]["p_value"] > 0.05  # the mean is reproduced


def test_a_likelihood_that_cannot_sample_is_drawn_on_a_grid_as_its_sampler_draws(overdispersed_counts):
    model, X, Y = overdispersed_counts
    by_sampler = predictive_draws(model, X, Y, num_samples=400, seed=0)
    poisson = model.likelihood

    def log_lik(y, f):  # the fitted Poisson's log p(y | f), as a user writes it (no sample method)
        rate = poisson.log_rate(f).detach()
        return y[:, 0] * rate - torch.exp(rate) - torch.lgamma(y[:, 0] + 1.0)

    model.likelihood = CallableLikelihood(log_lik, backend="torch")
    try:
        by_grid = predictive_draws(model, X, Y, num_samples=400, seed=0)
    finally:
        model.likelihood = poisson
    assert np.all(by_grid == np.round(by_grid)) and by_grid.min() >= 0  # counts
    a, b = by_sampler.mean(0), by_grid.mean(0)  # per row: means of 400 draws each
    se = np.sqrt((by_sampler.var(0) + by_grid.var(0)) / 400)
    z = (a - b) / se
    assert abs(z.mean()) < 4 / math.sqrt(N) and np.mean(np.abs(z) > 3.5) < 0.02


def test_coverage_is_the_level_for_calibrated_draws_and_less_for_too_narrow_ones():
    rng = np.random.default_rng(3)
    draws = rng.normal(size=(2000, 4000, 1))
    for c in interval_coverage(draws, rng.normal(size=(4000, 1))):
        assert abs(c["covered"] - c["level"]) < 4 * c["stderr"]
    for c in interval_coverage(draws, 2 * rng.normal(size=(4000, 1))):
        assert c["covered"] < c["level"] - 4 * c["stderr"]


def test_a_classifiers_draws_are_class_indices_and_its_residuals_uniform():
    # labels drawn from the logistic of a GP draw, fitted by a logistic likelihood; and three classes
    from likelihoods import Logistic, Softmax
    from savigp.reports.predictive_draws import observed_classes

    torch.set_default_dtype(torch.float64)
    X, f, g = _gp_draw(2)
    Y = torch.bernoulli(torch.sigmoid(2 * f), generator=g)
    model = _fitted(X, Y, Logistic())
    draws = predictive_draws(model, X.numpy(), Y.numpy(), num_samples=500, seed=0)
    assert set(np.unique(draws)) <= {0.0, 1.0}
    u, _ = quantile_residuals(draws, observed_classes(model, Y.numpy()), seed=0)
    assert kstest(u[:, 0], "uniform").pvalue > 0.01
    labels = torch.floor(X / 3.4).clamp(0, 2)
    model = savigp.SAVIGP(X, labels, Softmax(3), num_inducing=10)
    draws = predictive_draws(model, X.numpy(), labels.numpy(), num_samples=50, seed=0)
    assert draws.shape == (50, N, 1) and set(np.unique(draws)) <= {0.0, 1.0, 2.0}


def test_reliability_of_calibrated_class_probabilities_is_the_diagonal_and_of_overconfident_ones_is_not():
    """Rows with P(class 1) = p_n drawn uniform; outcomes ~ Bernoulli(p_n) and draws of the same p_n:
    every bin's observed share is within 3 binomial standard errors of its mean prediction; draws of
    sharpened probabilities (p^4 / (p^4 + (1-p)^4)) leave the extreme bins off by more."""
    from savigp.reports.calibration import reliability, scored_probability

    rng = np.random.default_rng(0)
    B, S = 4000, 400
    p = rng.uniform(size=B)
    y = (rng.uniform(size=B) < p).astype(np.float64)[:, None]
    for q, calibrated in ((p, True), (p ** 4 / (p ** 4 + (1 - p) ** 4), False)):
        draws = (rng.uniform(size=(S, B)) < q).astype(np.float64)[:, :, None]
        pred, o, correct = scored_probability(draws, y)
        assert np.all(o == y[:, 0]) and abs(pred - q).max() < 5 * 0.5 / math.sqrt(S)
        z = [abs(b["observed"] - b["predicted"]) / b["stderr"] for b in reliability(pred, o)]
        assert (max(z) < 3) == calibrated, z
    with pytest.raises(ValueError, match=r"p and o must both be \(B,\), got \(3,\) and \(2,\)"):
        reliability(np.zeros(3), np.zeros(2))
