"""Predictions of the binary likelihoods without Monte Carlo: the logistic likelihood's
log E[sigmoid(f)] by the trapezoidal rule around the integrand's mode and the probit's closed form
Phi(mu / sqrt(1 + sigma^2)) (Rasmussen & Williams 2006, eq. (3.80)), each against scipy's adaptive
quadrature, far into the tails (log p down to about -1e3) and for latent standard deviations from
1e-4 to 50; and the model's predictions and log predictive densities that use them, against Monte
Carlo over the posterior mixture within its standard error."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate, optimize, special, stats

import savigp
from likelihoods import Logistic, Probit
from likelihoods.logistic import _log_expected_sigmoid
from savigp.kernels.stationary import RBF

MEANS = np.concatenate([np.linspace(-30.0, 30.0, 13), [-1000.0, -200.0, 200.0, 1000.0]])
SDS = np.array([1e-4, 0.01, 0.3, 1.0, 3.0, 8.0, 20.0, 50.0])


def _reference_log_expectation(log_link, m: float, sd: float) -> float:
    """log int phi(z) link(m + sd z) dz by scipy's adaptive quadrature, scaled by the integrand's
    maximum (on a grid of step 0.01, then by a bounded scalar search next to it) so that tails of
    exp(-1000) do not underflow."""
    def log_g(z):
        return stats.norm.logpdf(z) + log_link(m + sd * z)

    grid = np.linspace(-1500.0, 1500.0, 300001)  # (the probit's mode is near -m sd / (1 + sd^2) in the far tail)
    z0 = grid[np.argmax(log_g(grid))]
    mode = optimize.minimize_scalar(lambda z: -log_g(z), bounds=(z0 - 0.01, z0 + 0.01), method="bounded",
                                    options={"xatol": 1e-12}).x
    top = log_g(mode)
    value, _ = integrate.quad(lambda z: math.exp(log_g(z) - top), mode - 40.0, mode + 40.0, points=[mode],
                              limit=1000, epsabs=0.0, epsrel=1e-13)
    return math.log(value) + top


@pytest.mark.filterwarnings("ignore::scipy.integrate.IntegrationWarning")  # (the reference's roundoff at 1e-13)
@pytest.mark.parametrize("name, log_link, method", [
    ("logistic", special.log_expit, lambda m, v: _log_expected_sigmoid(m, v)),
    ("probit", special.log_ndtr, lambda m, v: Probit()._log_predictive(m, v)),
])
def test_log_predictive_against_adaptive_quadrature(name, log_link, method):
    m, sd = np.meshgrid(MEANS, SDS, indexing="ij")
    got = method(torch.as_tensor(m), torch.as_tensor(sd ** 2)).numpy()
    ref = np.array([[_reference_log_expectation(log_link, a, b) for b in SDS] for a in MEANS])
    # absolute in log p: 1e-10 of a log-density of -1000 is still 1e-13 relative
    err = np.abs(got - ref)
    assert err.max() < 1e-10 * max(1.0, np.abs(ref).max() / 100), (name, err.max(), np.unravel_index(err.argmax(), err.shape))
    assert ref.min() < -500 and ref.max() > -1e-12  # the grid reaches both tails


def test_logistic_quadrature_in_float32_and_degenerate_variances():
    m = torch.linspace(-12.0, 12.0, 49, dtype=torch.float64)[:, None]
    v = torch.tensor([0.0, 1e-8, 0.5, 4.0, 25.0], dtype=torch.float64)
    exact64 = _log_expected_sigmoid(m, v)
    assert exact64.shape == (49, 5)
    # variance zero: the link itself
    assert torch.allclose(exact64[:, 0], torch.nn.functional.logsigmoid(m[:, 0]), rtol=1e-13, atol=1e-13)
    got32 = _log_expected_sigmoid(m.float(), v.float())
    assert got32.dtype == torch.float32
    assert torch.allclose(got32.double(), exact64, rtol=1e-5, atol=1e-6)
    assert _log_expected_sigmoid(torch.zeros(0, 1), torch.ones(0, 1)).shape == (0, 1)


@pytest.mark.parametrize("cls", [Logistic, Probit])
def test_predictive_methods_agree_with_each_other_and_with_labels(cls):
    lik = cls()
    rng = np.random.default_rng(0)
    mean = torch.as_tensor(rng.normal(0.0, 3.0, (2, 7, 1)))  # (K, B, Q)
    var = torch.as_tensor(rng.uniform(0.01, 9.0, (2, 7, 1)))
    probs = lik.predictive_class_probabilities(mean, var)
    assert probs.shape == (2, 7, 2)
    assert torch.allclose(probs.sum(-1), torch.ones(2, 7), atol=1e-13)
    p, v = lik.predictive_moments(mean, var)
    assert p.shape == v.shape == (2, 7, 1)
    assert torch.allclose(p[..., 0], probs[..., 1], atol=1e-15) and torch.allclose(v, p * (1 - p))
    for labels in ([0.0, 1.0], [-1.0, 1.0]):
        y = torch.as_tensor(rng.choice(labels, (7, 1)))
        lp = lik.predictive_log_prob(y, mean, var)
        assert lp.shape == (2, 7)
        idx = lik.class_index(y)
        assert torch.allclose(lp.exp(), probs.gather(-1, idx.expand(2, 7)[..., None])[..., 0], rtol=1e-12)


def _mixture_model(lik, seed=0):
    torch.manual_seed(seed)
    X = torch.randn(120, 2)
    Y = (torch.sin(2 * X[:, :1]) + 0.3 * torch.randn(120, 1) > 0).double()
    model = savigp.SAVIGP(X, Y, lik, RBF(2, 1, variance=4.0), num_inducing=15, num_components=2, seed=seed)
    with torch.no_grad():  # a posterior away from its start, two distinct components
        model.posterior.mean.add_(torch.randn_like(model.posterior.mean))
        model.posterior.logits.copy_(torch.tensor([0.3, -0.4]))
    Xs = 1.5 * torch.randn(400, 2)
    Ys = (torch.sin(2 * Xs[:, :1]) > 0).double()
    return model, Xs, Ys


@pytest.mark.parametrize("cls", [Logistic, Probit])
def test_model_predictions_match_monte_carlo_over_the_mixture(cls):
    """log p(y* | x*) and p(y* = c | x*) of a K = 2 mixture against the Monte Carlo mean over
    S = 20000 draws of every component (independent of the model's own draws), within 5 standard
    errors at each of 400 test points."""
    lik = cls()
    model, Xs, Ys = _mixture_model(lik)
    lpd = model.log_predictive_density(Xs, Ys, num_samples=3)  # (the draws are not used)
    pred = model.predict(Xs, num_samples=3)
    mean, var, pi = model.predict_latent(Xs)
    assert not torch.allclose(mean[0], mean[1], atol=0.1) and abs(pi[0] - pi[1]) > 0.1
    S = 20000
    gen = torch.Generator().manual_seed(7)
    f = mean + var.sqrt() * torch.randn((S,) + tuple(mean.shape), generator=gen)  # (S, K, B, 1)
    lik_f = torch.einsum("k,skb->sb", pi, lik.log_prob(Ys, f).exp())  # p(y* | f) mixed over components
    mc, se = lik_f.mean(0), lik_f.std(0) / math.sqrt(S)
    assert ((lpd.exp() - mc).abs() <= 5 * se + 1e-12).all(), float(((lpd.exp() - mc).abs() / se).max())
    p1 = torch.einsum("k,skb->sb", pi, lik.class_probabilities(f)[..., 1])
    mc1, se1 = p1.mean(0), p1.std(0) / math.sqrt(S)
    assert ((pred.probabilities[:, 1] - mc1).abs() <= 5 * se1 + 1e-12).all()
    assert torch.allclose(pred.mean[:, 0], pred.probabilities[:, 1], atol=1e-14)
    # a deterministic answer: the seed and the number of draws no longer matter
    assert torch.equal(lpd, model.log_predictive_density(Xs, Ys, num_samples=50, seed=3))
    # the metrics use it: error rate and NLP from the same numbers
    ev = savigp.metrics.evaluate(model, Xs, Ys, num_samples=5)
    assert ev["nlp"] == pytest.approx(-float(lpd.mean()), rel=1e-12)


class _NaNPredictive(Logistic):
    """NaN at the sixth row of the second chunk it is called on."""

    calls = 0

    def predictive_log_prob(self, y, mean, var):
        out = super().predictive_log_prob(y, mean, var)
        type(self).calls += 1
        if type(self).calls == 2:
            out[:, 5] = float("nan")
        return out


def test_a_nan_predictive_density_names_the_test_row():
    model, Xs, Ys = _mixture_model(_NaNPredictive())
    with pytest.raises(ValueError, match=r"_NaNPredictive.predictive_log_prob returned NaN or \+inf at 1 test row\(s\), "
                                         r"the first at row\(s\) \[105\]"):
        model.log_predictive_density(Xs, Ys, chunk_size=100)
