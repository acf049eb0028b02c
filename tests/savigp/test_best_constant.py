"""The constant prior mean's start when none is given (issue 54): the targets' best constant latent
value, from a 1-D search on the likelihood's values, replaces 0 where it lies more than 2 prior
standard deviations away (log-survival times near 5 cost nats when f starts at 0)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import savigp
from likelihoods import CallableLikelihood, Gaussian, Poisson
from savigp.best_constant import best_constant
from savigp.testing.examples import censored_lognormal_numpy


def test_the_best_constant_is_the_maximum_likelihood_constant():
    """Gaussian: the mean of y; Poisson: log of the mean count; a numpy black box: its own optimum."""
    rng = np.random.default_rng(0)
    y = torch.as_tensor(7.3 + rng.standard_normal((200, 1)))
    assert float(best_constant(Gaussian(0.5), y)[0]) == pytest.approx(float(y.mean()), abs=1e-3)
    counts = torch.as_tensor(rng.poisson(30.0, (200, 1)).astype(float))
    assert float(best_constant(Poisson(), counts)[0]) == pytest.approx(float(np.log(counts.mean())), abs=1e-3)
    t = np.exp(5.0 + 0.8 * rng.standard_normal(300))
    days = torch.as_tensor(np.column_stack([t, np.ones(300)]))  # no censoring: the mean of log t
    lik = CallableLikelihood(censored_lognormal_numpy, output_dim=2, params={"s": 1.0}, constraints={"s": "positive"})
    assert float(best_constant(lik, days)[0]) == pytest.approx(float(np.log(t).mean()), abs=1e-3)
    # a likelihood that ignores f keeps 0
    flat = CallableLikelihood(lambda y, f: 0.0 * f[..., 0] - y[:, 0] ** 2)
    assert float(best_constant(flat, y)[0]) == 0.0


def test_a_model_without_a_prior_mean_starts_it_where_the_targets_are_only_when_far_from_zero():
    rng = np.random.default_rng(1)
    X = rng.uniform(-2, 2, (60, 1))
    far = 6.0 + np.sin(X) + 0.1 * rng.standard_normal((60, 1))
    model = savigp.SAVIGP(X, far, Gaussian(0.1), num_inducing=8)
    assert float(model.prior_mean[0]) == pytest.approx(float(far.mean()), abs=1e-3)
    assert model.prior_mean_from_targets == [pytest.approx(float(far.mean()), abs=1e-3)]
    near = far - 6.0 + 1.5  # best constant about 1.5: within 2 prior sd (variance 1) of 0
    model = savigp.SAVIGP(X, near, Gaussian(0.1), num_inducing=8)
    assert float(model.prior_mean[0]) == 0.0 and model.prior_mean_from_targets is None
    given = savigp.SAVIGP(X, far, Gaussian(0.1), num_inducing=8, prior_mean=0.0)
    assert float(given.prior_mean[0]) == 0.0 and given.prior_mean_from_targets is None
    # the start is where the data are: the ELBO at the start is far above prior mean 0's
    elbos = [float(m.elbo(num_samples=50).elbo) for m in (model, given)]
    assert elbos[0] > elbos[1] + 100
