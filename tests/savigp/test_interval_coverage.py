"""``savigp.metrics.interval_coverage``: the fraction of test targets inside the central predictive
interval, against the closed form of a Gaussian likelihood (the predictive distribution of y* is
the mixture sum_k pi_k N(m_k, v_k + s2), whose CDF is exact)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import likelihoods as L
import savigp
from savigp.metrics import interval_coverage

S = 2000  # draws per component: the Monte Carlo CDF's standard deviation is at most 0.5 / sqrt(S) = 0.011


def _model(K: int) -> savigp.SAVIGP:
    """A 1-D Gaussian regression with K components started apart (antithetic means), not fitted."""
    gen = np.random.default_rng(0)
    X = gen.uniform(-2, 2, size=(30, 1))
    model = savigp.SAVIGP(X, np.sin(2 * X), L.Gaussian(variance=0.05), savigp.RBF(1, 1, lengthscale=0.7),
                          num_inducing=8, posterior="full", num_components=K, seed=0)
    with torch.no_grad():
        model.posterior.mean.add_(0.8 * torch.randn(model.posterior.mean.shape, generator=torch.Generator().manual_seed(1),
                                                    dtype=model.posterior.mean.dtype))
    return model


def _exact_cdf(model, X, Y) -> torch.Tensor:
    """P(y* <= y_n) under the model's predictive mixture, ``(B,)``."""
    with torch.no_grad():
        q = model._latent_chunks(model.as_model_inputs(X, "X"))
        mean, var = q.mean, q.var[..., 0] + model.likelihood.variance()  # (K, B)
        pi = model.posterior.log_weights().exp()
        z = (torch.as_tensor(Y[:, 0]) - mean[..., 0]) / var.sqrt()
        return (pi[:, None] * 0.5 * (1 + torch.erf(z / math.sqrt(2)))).sum(0)


@pytest.mark.parametrize("K", [1, 2])
def test_coverage_matches_the_exact_predictive_cdf(K):
    """Each target's indicator of lying in the central 90% interval agrees with the exact CDF's, except
    for targets whose exact CDF is within 5 Monte Carlo standard deviations (sqrt(u (1 - u) / (S K))) of
    a boundary, which the estimate may place on either side; so the coverage is within their share."""
    model = _model(K)
    gen = np.random.default_rng(2)
    X = gen.uniform(-2.5, 2.5, size=(400, 1))
    Y = np.sin(2 * X) + gen.normal(0.0, 2.0, size=X.shape)  # targets spread across and beyond the intervals
    u = _exact_cdf(model, X, Y)
    inside = ((u >= 0.05) & (u <= 0.95)).double()
    band = 5 * math.sqrt(0.05 * 0.95 / S)  # (each component has S draws; the mixture's error is smaller)
    near = ((u - 0.05).abs() < band) | ((u - 0.95).abs() < band)
    got = interval_coverage(model, X, Y, level=0.9, num_samples=S, seed=3)
    assert 0.2 < float(inside.mean()) < 0.9  # the test discriminates: many targets on either side
    assert abs(got - float(inside.mean())) <= float(near.double().mean()) + 1e-12, (got, float(inside.mean()))


def test_targets_drawn_from_the_predictive_are_covered_at_the_level():
    """Targets drawn from the model's own predictive distribution fall inside the central 90% interval
    with probability 0.9: within 4 binomial standard errors over 2000 targets."""
    model = _model(2)
    gen = torch.Generator().manual_seed(4)
    X = torch.linspace(-2.5, 2.5, 2000, dtype=torch.float64)[:, None]
    with torch.no_grad():
        q = model._latent_chunks(X)  # (K, B, 1) marginals of every component
        mean, sd = q.mean, (q.var + model.likelihood.variance()).sqrt()
        k = torch.multinomial(model.posterior.log_weights().exp(), X.shape[0], replacement=True, generator=gen)
        rows = torch.arange(X.shape[0])
        y = mean[k, rows] + sd[k, rows] * torch.randn(X.shape, generator=gen, dtype=X.dtype)  # (B, 1), independent
    got = interval_coverage(model, X, y, num_samples=S, seed=6)
    assert abs(got - 0.9) <= 4 * math.sqrt(0.9 * 0.1 / X.shape[0]), got


def test_evaluate_reports_coverage_only_where_the_likelihood_draws_y():
    """``evaluate`` has ``coverage90`` for a Gaussian likelihood, none for classification; a level outside
    (0, 1) is refused."""
    model = _model(1)
    X = np.linspace(-2, 2, 20)[:, None]
    assert 0.0 <= savigp.evaluate(model, X, np.sin(2 * X), num_samples=200)["coverage90"] <= 1.0
    with pytest.raises(ValueError, match="level must be in"):
        interval_coverage(model, X, np.sin(2 * X), level=1.0)
