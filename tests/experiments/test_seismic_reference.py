"""Tests of the HMC reference of the seismic experiment (experiments/seismic_reference.py).

* the diagnostics (ESS, R-hat) on draws with known autocorrelation;
* the sampler against a closed form: a linear-Gaussian likelihood y_n = A f_n + eps over GP priors,
  whose posterior is Gaussian (GP regression with mixed outputs); means and stds must agree within
  a few Monte Carlo standard errors computed from the sampler's own ESS;
* the seismic reference with x in metres (sites a-priori independent) against self-normalized
  importance sampling from the prior at a few sites, within the two methods' combined MC error.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from conftest import DATA  # ../shared/data (tests/conftest.py runs torch on one thread)
from experiments import seismic_reference as ref


def test_ess_and_rhat_on_known_chains():
    rng = np.random.default_rng(0)
    C, S, D = 4, 4000, 3
    iid = rng.standard_normal((C, S, D))
    assert np.all(np.abs(ref.ess(iid) / (C * S) - 1) < 0.1)
    assert np.all(ref.rhat(iid) < 1.01)
    # AR(1) with coefficient 0.9: ESS = C S (1 - rho) / (1 + rho)
    rho, x = 0.9, np.empty((C, S, D))
    x[:, 0] = rng.standard_normal((C, D))
    for t in range(1, S):
        x[:, t] = rho * x[:, t - 1] + math.sqrt(1 - rho ** 2) * rng.standard_normal((C, D))
    assert np.all(np.abs(ref.ess(x) / (C * S * (1 - rho) / (1 + rho)) - 1) < 0.25)
    # chains centred at different places: R-hat far above 1
    shifted = iid + np.arange(C)[:, None, None]
    assert np.all(ref.rhat(shifted) > 1.5)


def _exact_linear_gaussian(mu, sd, K, A, noise_var, Y):
    """Posterior of f (N, Q) under f_q ~ N(mu_q, sd_q^2 K), y_n = A f_n + eps, eps ~ N(0, diag noise_var):
    mean, std and the std of the best Gaussian factorized across the Q functions, each (N, Q).
    Coordinates ordered (q, n)."""
    N, Q = K.shape[0], len(mu)
    prior_prec = np.zeros((N * Q, N * Q))
    Kinv = np.linalg.inv(K)
    for q in range(Q):
        prior_prec[q * N:(q + 1) * N, q * N:(q + 1) * N] = Kinv / sd[q] ** 2
    B = A.T @ np.diag(1 / noise_var)  # (Q, P)
    prec = prior_prec + np.kron(B @ A, np.eye(N))
    rhs = prior_prec @ np.repeat(mu, N) + np.kron(B, np.eye(N)) @ Y.T.reshape(-1)
    cov = np.linalg.inv(prec)
    mean = cov @ rhs
    # the best Gaussian factorized across latent functions: covariance (prec_qq)^-1 per function
    fact = np.stack([np.sqrt(np.diag(np.linalg.inv(prec[q * N:(q + 1) * N, q * N:(q + 1) * N]))) for q in range(Q)], 1)
    return mean.reshape(Q, N).T, np.sqrt(np.diag(cov)).reshape(Q, N).T, fact


def test_hmc_matches_gaussian_posterior():
    from likelihoods import MultiGaussian

    rng = np.random.default_rng(3)
    N, Q = 15, 2
    x = np.sort(rng.uniform(0, 4, N))
    mu, sd = np.array([1.0, -2.0]), np.array([1.5, 0.7])
    A = np.array([[1.0, 0.6], [-0.4, 1.2]])  # mixes the two latent functions in each output
    noise_var = np.array([0.3, 0.5]) ** 2
    L = ref.prior_cholesky(x, x_unit=1.0)
    K = (L @ L.T).numpy()  # the jittered correlation the sampler whitens with
    f_true = mu + sd * (np.linalg.cholesky(K) @ rng.standard_normal((N, Q)))
    Y = f_true @ A.T + np.sqrt(noise_var) * rng.standard_normal((N, 2))
    lik = MultiGaussian(2, variance=noise_var.tolist(), learn_variance=False)
    Yt, At = torch.tensor(Y), torch.tensor(A)

    log_lik = lambda f: lik.log_prob(Yt, f @ At.T).sum(-1)  # noqa: E731
    res = ref.whitened_hmc(log_lik, mu, sd, L, chains=4, draws=1000, warmup=400, seed=1, keep_draws=True)
    m, s, fact = _exact_linear_gaussian(mu, sd, K, A, noise_var, Y)
    d = res.diagnostics
    assert d["divergences"] == 0 and d["rhat_max"] < 1.02, d
    assert 0.6 < d["acceptance"] < 0.99, d
    # the sampler's own MC standard errors (from its ESS); for a Gaussian mcse_std ~ s / sqrt(2 ESS_sq)
    z_mean = (res.mean - m) / res.mcse_mean
    z_std = (res.std - s) / res.mcse_std
    assert np.abs(z_mean).max() < 4.0, z_mean
    assert np.abs(z_std).max() < 4.0, z_std
    # the test has power: the MC errors are small against the posterior's own spread,
    # and against the prior (the data move the posterior by many standard errors)
    assert res.ess_bulk.min() > 400
    assert np.abs((mu - m) / res.mcse_mean).max() > 20
    # factorized_std is exact here (constant Hessian), and below the joint posterior's stds
    np.testing.assert_allclose(ref.factorized_std(log_lik, res.draws, sd, L), fact, rtol=1e-8)
    assert np.all(fact < s)


def _importance_sampling(y, prior_mean, prior_std, noise_std, S, rng):
    """Self-normalized IS from the prior for one site: mean, std (8,) and their MC standard errors
    (delta method: se(mean) = sqrt(sum w^2 (f - mean)^2), se(var) = sqrt(sum w^2 ((f - mean)^2 - var)^2))."""
    f = prior_mean + prior_std * rng.standard_normal((S, 8))
    dep, vel = f[:, :4], f[:, 4:]
    g = 2 * np.cumsum(np.diff(dep, axis=1, prepend=0) / vel, axis=1)
    lw = -0.5 * (((y - g) / noise_std) ** 2).sum(1)
    w = np.exp(lw - lw.max())
    w /= w.sum()
    mean = w @ f
    dev2 = (f - mean) ** 2
    var = w @ dev2
    se_mean = np.sqrt((w ** 2) @ dev2)
    se_var = np.sqrt((w ** 2) @ (dev2 - var) ** 2)
    return mean, np.sqrt(var), se_mean, se_var / (2 * np.sqrt(var)), 1 / (w ** 2).sum()


@pytest.mark.skipif(not DATA.is_dir(), reason=f"shared data not found at {DATA}")
def test_seismic_reference_in_metres_matches_importance_sampling():
    Y, X, _, _ = ref.seismic_model.load(DATA)
    sites = [0, 56, 112]
    res = ref.hmc_reference(Y[sites], X[sites], x_unit=1.0, chains=4, draws=1000, warmup=400, seed=0)
    assert res.diagnostics["rhat_max"] < 1.02 and res.diagnostics["divergences"] == 0, res.diagnostics
    prior_mean, prior_std = ref.seismic_model.prior()
    rng = np.random.default_rng(0)
    noise_std = np.array(ref.seismic_model.NOISE_STD)
    for i, n in enumerate(sites):
        m, s, se_m, se_s, ess_is = _importance_sampling(Y[n], prior_mean, prior_std, noise_std, 1_000_000, rng)
        assert ess_is > 5000, ess_is
        z_mean = (res.mean[i] - m) / np.sqrt(se_m ** 2 + res.mcse_mean[i] ** 2)
        z_std = (res.std[i] - s) / np.sqrt(se_s ** 2 + res.mcse_std[i] ** 2)
        assert np.abs(z_mean).max() < 4.0, (n, z_mean)
        assert np.abs(z_std).max() < 4.0, (n, z_std)


def test_bad_arguments():
    L = torch.eye(3, dtype=torch.float64)
    ll = lambda f: -(f ** 2).sum((1, 2))  # noqa: E731
    with pytest.raises(ValueError, match="chains"):
        ref.whitened_hmc(ll, [0.0], [1.0], L, chains=0)
    with pytest.raises(ValueError, match="prior_std"):
        ref.whitened_hmc(ll, [0.0, 1.0], [1.0, -1.0], L)
    with pytest.raises(ValueError, match="one value per chain"):
        ref.whitened_hmc(lambda f: f.sum(), [0.0], [1.0], L, chains=2, draws=4, warmup=0)
    with pytest.raises(ValueError, match="x_unit"):
        ref.prior_cholesky(np.arange(3.0), x_unit=0.0)
    with pytest.raises(ValueError, match=r"\(N, 4\)"):
        ref.hmc_reference(np.zeros((3, 3)), np.arange(3.0))


def test_cli_help(capsys):
    with pytest.raises(SystemExit) as exc:
        ref.parse(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--x-unit" in out and "reference_x" in out
