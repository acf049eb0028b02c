"""``check_likelihood``'s density checks (issue 43): ``normalization`` integrates exp(log p(y | f))
over y (quadrature on an interval or the real line, a sum over counts or labels) and
``moments_of_density`` compares the mean function with the moments of the same integral; each
fault of the issue is caught and named (a von Mises without its normaliser, a zero-inflated
negative binomial whose mean function forgets the zero inflation, a Gaussian whose variance is
wrong). The kit draws its Monte Carlo in rounds, makes a call of the likelihood per round of
adaptive quadrature, and says what a slow check is doing."""
from __future__ import annotations

import math
import time

import numpy as np
import pytest
import torch
from scipy import special, stats

from likelihoods import CallableLikelihood, Gaussian, Likelihood, Poisson
from likelihoods.callable import parse_support
from savigp.testing import LikelihoodCheckError, check_likelihood
from savigp.testing import report as report_module
from savigp.testing.examples import nb_numpy
from savigp.testing.quadrature import gauss_kronrod

B = 8
KAPPA = dict(params={"kappa": 2.0}, constraints={"kappa": "positive"})
ZINB = dict(params={"r": 2.5, "pi": 0.3}, constraints={"r": "positive", "pi": "unit_interval"})


def _angles(seed=0):
    return np.random.default_rng(seed).uniform(-3.0, 3.0, (B, 1))


def von_mises(y, f, kappa):
    """log p(y | f) = kappa cos(y - f) - log(2 pi I_0(kappa)), with I_0 scaled for large kappa."""
    return kappa * (np.cos(y[:, 0] - f[..., 0]) - 1) - np.log(2 * np.pi * special.i0e(kappa))


def von_mises_without_normaliser(y, f, kappa):
    return kappa * np.cos(y[:, 0] - f[..., 0])


def zinb(y, f, r, pi):
    """Zero-inflated negative binomial: a zero with probability pi, else NB(mean exp(f), r)."""
    nb = nb_numpy(y, f, r)
    return np.where(y[:, 0] == 0, np.logaddexp(np.log(pi), np.log1p(-pi) + nb), np.log1p(-pi) + nb)


def zinb_mean(f, r, pi):
    mu = np.exp(f)
    return (1 - pi) * mu, (1 - pi) * mu * (1 + mu / r) + pi * (1 - pi) * mu * mu


def zinb_mean_without_zero_inflation(f, r, pi):
    mu = np.exp(f)
    return mu, mu * (1 + mu / r)


def _counts(seed=0):
    y = np.random.default_rng(seed).poisson(2.0, (B, 1)).astype(float)
    y[:3] = 0.0
    return y


def _failure(lik, y, check, **kw):
    with pytest.raises(LikelihoodCheckError) as err:
        check_likelihood(lik, y, **kw)
    result = err.value.report[check]
    assert result.status == "failed", str(err.value.report)
    return result.message


# ---------------------------------------------------------------------------- normalization
@pytest.mark.parametrize("support", [None, "circle"])
def test_a_von_mises_integrates_to_one_over_the_circle(support):
    report = check_likelihood(CallableLikelihood(von_mises, support=support, **KAPPA), _angles())
    check = report["normalization"]
    assert check.status == "passed" and "over the circle [-3.142, 3.142]" in check.message, check.message
    assert ("inferred from y" in check.message) == (support is None)
    assert "3 parameter settings" in check.message  # kappa as given, and its raw value x and / 1.3


def test_a_von_mises_without_its_normaliser_is_caught_and_named():
    message = _failure(CallableLikelihood(von_mises_without_normaliser, support="circle", **KAPPA), _angles(),
                       "normalization")
    assert "over the circle" in message and "not 1" in message and "is the normaliser missing?" in message
    assert "f = (" in message and "kappa = " in message and "(row " in message
    value = float(message.split("integrates to ")[1].split(" ")[0])
    kappa = float(message.split("kappa = ")[1].split(" ")[0])
    assert value == pytest.approx(2 * math.pi * special.i0(kappa), rel=1e-3)  # int exp(kappa cos) = 2 pi I_0


def test_without_a_declared_support_every_candidate_is_reported():
    message = _failure(CallableLikelihood(von_mises_without_normaliser, **KAPPA), _angles(), "normalization")
    assert "does not decay over the real line" in message and "over the circle" in message
    assert "declare it with check_likelihood(support=...)" in message


def test_a_gaussian_with_a_wrong_normaliser_is_caught():
    class SigmaForVariance(Gaussian):
        def _log_prob(self, y, f):  # -0.5 log(2 pi sigma) instead of -0.5 log(2 pi sigma^2)
            v = self.variance().to(f)
            return -0.5 * (y[:, 0] - f[..., 0]) ** 2 / v - 0.5 * torch.log(2 * math.pi * v.sqrt())

    message = _failure(SigmaForVariance(0.3), np.random.default_rng(1).standard_normal((B, 1)), "normalization")
    value = float(message.split("over the real line")[-2].split("integrates to ")[-1].strip())
    assert "not 1" in message and value != pytest.approx(1.0, abs=1e-3)


def test_densities_on_a_half_line_and_an_interval_pass():
    def weibull(y, f):  # shape 0.7 (a density infinite at 0), scale exp(f): survival times
        return stats.weibull_min.logpdf(y[:, 0], 0.7, scale=np.exp(f[..., 0]))

    def beta(y, f):  # mean sigmoid(f), precision 10: a proportion, infinite at an end for some f
        m = special.expit(f[..., 0])
        return stats.beta.logpdf(y[:, 0], 10 * m, 10 * (1 - m))

    rng = np.random.default_rng(2)
    times = rng.weibull(0.7, (B, 1)) + 0.1
    check = check_likelihood(CallableLikelihood(weibull), times)["normalization"]
    assert check.status == "passed" and "over (0, inf)" in check.message, check.message
    check = check_likelihood(CallableLikelihood(beta, support="unit_interval"), rng.uniform(0.05, 0.95, (B, 1)))
    assert check["normalization"].status == "passed" and "over (0, 1)" in check["normalization"].message


def test_counts_and_labels_are_summed():
    assert "over the counts" in check_likelihood(Poisson(), _counts())["normalization"].message

    def unnormalized(y, f):  # a logistic classifier whose negative class forgot log(1 - p)
        p = special.expit(f[..., 0])
        return np.where(y[:, 0] > 0.5, np.log(p), 0.0)

    lik = CallableLikelihood(unnormalized, task="classification", num_classes=2)
    with pytest.warns(RuntimeWarning, match="renormalized"):
        message = _failure(lik, np.tile([[0.0], [1.0]], (B // 2, 1)), "normalization")
    assert "sums to" in message and "over the labels" in message and "is the normaliser missing?" in message


def test_a_density_that_does_not_factor_over_outputs_is_skipped_with_the_reason():
    class Correlated(Likelihood):
        num_latent, output_dim = 2, 2

        def _log_prob(self, y, f):  # a bivariate normal with correlation 0.6
            r = y - f
            return -(r[..., 0] ** 2 - 1.2 * r[..., 0] * r[..., 1] + r[..., 1] ** 2) / (2 * 0.64) - math.log(
                2 * math.pi * 0.8)

    report = check_likelihood(Correlated(), np.random.default_rng(3).standard_normal((B, 2)))
    assert report["normalization"].status == "skipped"
    assert "not a sum of one term per output" in report["normalization"].message


def test_a_wrong_normaliser_of_one_output_of_several_is_caught():
    class HalfNormaliser(Likelihood):
        num_latent, output_dim = 2, 2

        def _log_prob(self, y, f):  # output 1 forgets its -0.5 log(2 pi)
            r = y - f
            return -0.5 * (r ** 2).sum(-1) - 0.5 * math.log(2 * math.pi)

    message = _failure(HalfNormaliser(), np.random.default_rng(4).standard_normal((B, 2)), "normalization")
    assert "integrates to 2.507" in message  # sqrt(2 pi)


# ---------------------------------------------------------------------------- moments
def test_a_zero_inflated_nb_passes_with_its_mean_function():
    report = check_likelihood(CallableLikelihood(zinb, mean_fn=zinb_mean, **ZINB), _counts(), mean=np.full((B, 1), 0.5))
    assert report["normalization"].status == report["moments_of_density"].status == "passed"
    assert "E[y | f] and Var[y | f]" in report["moments_of_density"].message


def test_a_mean_function_that_forgets_the_zero_inflation_is_caught_and_named():
    lik = CallableLikelihood(zinb, mean_fn=zinb_mean_without_zero_inflation, **ZINB)
    message = _failure(lik, _counts(), "moments_of_density", mean=np.full((B, 1), 0.5))
    assert "E[y | f] = " in message and "pi = 0.3" in message and "f = (" in message
    assert f"{1 / 0.7:.4g} times the density's mean" in message and "zero-inflation" in message


def test_a_gaussian_whose_variance_is_wrong_is_caught_and_named():
    class SdForVariance(Gaussian):
        def conditional_moments(self, f):
            mean, var = super().conditional_moments(f)
            return mean, var.sqrt()

    message = _failure(SdForVariance(0.3), np.random.default_rng(5).standard_normal((B, 1)), "moments_of_density")
    assert "Var[y | f] = 0.5477" in message and "the density's is 0.3" in message
    assert "the variance given is the standard deviation" in message


def test_every_regression_builtin_with_moments_is_compared():
    rng = np.random.default_rng(6)
    for lik, y in ((Gaussian(0.3), rng.standard_normal((B, 1))), (Poisson(bin_width=0.5, offset=0.3), _counts())):
        check = check_likelihood(lik, y)["moments_of_density"]
        assert check.status == "passed" and "Var[y | f]" in check.message, check.message


# ---------------------------------------------------------------------------- support declarations
def test_support_declarations_are_checked():
    assert parse_support("circle", 2) == (("circle", -math.pi, math.pi, ()),) * 2
    assert parse_support([(0, None), "counts"], 2) == (("interval", 0.0, math.inf, ()), ("counts", 0.0, math.inf, ()))
    assert parse_support({"support": "positive", "atoms": [0]}, 1) == (("interval", 0.0, math.inf, (0.0,)),)
    with pytest.raises(ValueError, match="atoms must be finite values within"):
        parse_support({"support": "positive", "atoms": [-1]}, 1)
    with pytest.raises(ValueError, match="support must be one of"):
        CallableLikelihood(von_mises, support="angles", **KAPPA)
    with pytest.raises(ValueError, match=r"needs lo < hi, got \(1, 0\)"):
        CallableLikelihood(von_mises, support=(1, 0), **KAPPA)
    with pytest.raises(ValueError, match="support applies to task='regression'"):
        CallableLikelihood(von_mises, task="classification", num_classes=2, support="real")
    with pytest.raises(ValueError, match="check_likelihood: support lists 2 entries but there are 1 outputs"):
        check_likelihood(Gaussian(), np.zeros((B, 1)), support=["real", "real"])
    lik = CallableLikelihood(von_mises, support=(0, math.inf), **KAPPA)
    kwargs = lik.spec()["kwargs"]
    assert kwargs["support"] == [0.0, None]  # plain values for the model file
    assert CallableLikelihood(von_mises, **kwargs).support == [0.0, None]


# ---------------------------------------------------------------------------- cost and progress
def test_adaptive_gauss_kronrod_takes_a_call_per_round():
    calls = []

    def g(x):
        calls.append(x.shape[0])
        return torch.stack([torch.exp(-x * x), (x > 0.3).to(x.dtype), (x - 0.1).abs()], dim=-1)

    out = gauss_kronrod(g, -5.0, 5.0, abs_tol=1e-9, rel_tol=1e-9, like=torch.zeros(()))
    exact = torch.tensor([math.sqrt(math.pi) * math.erf(5.0), 4.7, 0.5 * (5.1 ** 2 + 4.9 ** 2)])
    assert out.converged and len(calls) == out.rounds <= 40
    assert bool(((out.value - exact).abs() <= out.error + 1e-14).all()), (out.value - exact, out.error)


def test_a_non_smooth_likelihood_costs_few_calls():
    """Issue 43: a kinked numpy likelihood made the kit call it 1007 times (scipy's quad_vec asked
    for one node at a time); each round of adaptive quadrature is now one call."""
    calls = []

    def laplace(y, f):
        calls.append(f.shape)
        return -np.abs(y[:, 0] - f[..., 0]) / 0.7 - np.log(2 * 0.7)

    report = check_likelihood(CallableLikelihood(laplace, backend="numpy"), np.random.default_rng(7).standard_normal((B, 1)))
    assert "adaptive quadrature" in report["monte_carlo_expectation"].message
    assert len(calls) < 100, len(calls)


def test_monte_carlo_stops_once_the_standard_error_is_small_enough():
    """log p hardly varies over q(f) for a very wide Gaussian noise: 4 standard errors fall below
    1% of 1 + |E log p| after the first round of num_samples / 8 draws."""
    report = check_likelihood(Gaussian(100.0), np.random.default_rng(8).standard_normal((B, 1)))
    assert report["monte_carlo_expectation"].message.startswith("S = 500 draws"), report["monte_carlo_expectation"]
    report = check_likelihood(Gaussian(0.01), np.random.default_rng(8).standard_normal((B, 1)))
    assert report["monte_carlo_expectation"].message.startswith("S = 4000 draws")  # at the cap


def test_a_slow_check_says_what_it_is_doing(monkeypatch, capsys):
    def slow_gauss(y, f):
        time.sleep(0.02)
        return -0.5 * (y[:, 0] - f[..., 0]) ** 2 / 0.3 - 0.5 * np.log(2 * np.pi * 0.3)

    y = np.random.default_rng(9).standard_normal((B, 1))
    check_likelihood(Gaussian(0.3), y)
    assert capsys.readouterr().err == ""  # quick checks say nothing
    monkeypatch.setattr(report_module, "SLOW_SECONDS", 0.05)
    check_likelihood(CallableLikelihood(slow_gauss, backend="numpy"), y)
    err = capsys.readouterr().err
    assert "check_likelihood: normalization is running (" in err and "check_likelihood: normalization passed in " in err
    lines = []
    check_likelihood(CallableLikelihood(slow_gauss, backend="numpy"), y, verbose=True, progress=lines.append)
    assert capsys.readouterr().err == ""  # to the callback instead
    assert "check_likelihood: shapes ..." in lines and any("Monte Carlo of log p: 500 of at most 4000" in s for s in lines)
    check_likelihood(CallableLikelihood(slow_gauss, backend="numpy"), y, verbose=False)
    assert capsys.readouterr().err == ""
