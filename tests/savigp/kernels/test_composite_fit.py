"""Data drawn from a composite kernel (a trend, a drifting season, white noise in the kernel) against exact
GP regression with the same fixed kernel (Rasmussen & Williams 2006, eq. (2.25)-(2.30)):

* a dense model (Z = X) holding the optimal q(u) (the exact posterior p(f | y) but for the model's jitter):
  its closed-form ELBO equals the exact log marginal likelihood, its black-box (score-function) ELBO estimate equals it within 4 Monte
  Carlo standard errors, and its predictive mean and variance at new inputs are exact GP's;
* the same model trained from the prior by L-BFGS on q(u) alone reaches the log marginal likelihood.

White in the kernel is s I on kernel(X, X) and 0 on kernel(Z, X) for Z another tensor (GPflow's
convention): a dense model then sees it as noise in u that f does not share, so the exact reference
here has no White term; `test_dense_white_is_the_titsias_bound` checks that case against its own
closed form, the collapsed bound of Titsias (2009).
"""
from __future__ import annotations

import math

import pytest
import torch

import savigp
from likelihoods import Gaussian
from savigp.kernels import RBF, Periodic, Scale, White

DT = torch.float64
NOISE = 0.05


def _kernel(white=False):
    """rbf(l=2) + scale(periodic(period=1, l=0.8) * rbf(l=4)), fixed (+ white(0.1))."""
    k = RBF(1, 1, lengthscale=2.0, variance=1.0, learn=False) + Scale(
        Periodic(1, 1, lengthscale=0.8, period=1.0, learn=False) * RBF(1, 1, lengthscale=4.0, learn=False),
        variance=0.7, learn=False)
    return k + White(1, 1, variance=0.1, learn=False) if white else k


def _draw(n=50, seed=0):
    """Inputs on [0, 6], f from the composite's prior, y = f + noise."""
    g = torch.Generator().manual_seed(seed)
    X = torch.sort(6 * torch.rand(n, 1, generator=g, dtype=DT), dim=0).values
    K = _kernel()(X, X)[0]
    f = torch.linalg.cholesky(K + 1e-10 * torch.eye(n, dtype=DT)) @ torch.randn(n, 1, generator=g, dtype=DT)
    return X, f + math.sqrt(NOISE) * torch.randn(n, 1, generator=g, dtype=DT)


def _exact(kernel, X, Y, Xt):
    """Exact GP regression: log p(y), and the predictive mean and variance of f at Xt."""
    with torch.no_grad():
        n = X.shape[0]
        K = kernel(X, X)[0]
        L = torch.linalg.cholesky(K + NOISE * torch.eye(n, dtype=DT))
        alpha = torch.cholesky_solve(Y, L)
        logml = -0.5 * float((Y * alpha).sum()) - float(torch.log(L.diagonal()).sum()) - 0.5 * n * math.log(2 * math.pi)
        Kt = kernel(X, Xt)[0]
        V = torch.linalg.solve_triangular(L, Kt, upper=False)
        return logml, (Kt.T @ alpha)[:, 0], kernel.diag(Xt)[0] - (V * V).sum(0), K, L


def _dense(X, Y, kernel, posterior="full"):
    return savigp.SAVIGP(X, Y, Gaussian(NOISE, learn_variance=False), kernel, dense=True, posterior=posterior)


def _set_optimal_posterior(model, K):
    """The optimal q(u) of a dense model (Z = X) whose prior factor is L (K plus the model's jitter):
    in whitened coordinates v = L^-1 u, f = A v with A = K L^-T, so q(v) = N(S A^T y / s2, S) with
    S = (I + A^T A / s2)^-1, and the ELBO is Titsias's (2009) collapsed bound
    log N(y | 0, A A^T + s2 I) - tr(K - A A^T) / (2 s2), returned."""
    with torch.no_grad():
        L = model.prior_factor()[0]
        A = torch.linalg.solve_triangular(L, K, upper=False).T
        n, y = K.shape[0], model.train_y
        P = torch.eye(n, dtype=DT) + A.T @ A / NOISE
        S = torch.cholesky_inverse(torch.linalg.cholesky(P))
        mv = (S @ A.T @ y)[:, 0] / NOISE
        model.posterior.init_from_moments((L @ mv)[None], (L @ torch.linalg.cholesky(S))[None], L[None])
        return _collapsed_bound(A @ A.T, K, y)


def _collapsed_bound(Qnn, Knn, y):
    """log N(y | 0, Q + s2 I) - tr(K - Q) / (2 s2) (Titsias 2009)."""
    n = len(Qnn)
    Lq = torch.linalg.cholesky(Qnn + NOISE * torch.eye(n, dtype=DT))
    fit = -0.5 * float((y * torch.cholesky_solve(y, Lq)).sum()) - float(torch.log(Lq.diagonal()).sum()) \
        - 0.5 * n * math.log(2 * math.pi)
    return fit - float(torch.trace(Knn - Qnn)) / (2 * NOISE)


def test_the_optimal_posterior_of_a_composite_kernel_has_the_exact_evidence():
    """The closed-form ELBO equals the collapsed bound at the model's jittered prior (1e-9), which is
    log p(y) but for the jitter (1e-8 of the mean variance: 1e-4 nats); the black-box ELBO estimate
    equals log p(y) within 4 Monte Carlo standard errors; the predictions are exact GP's."""
    X, Y = _draw()
    Xt = torch.linspace(-0.5, 6.5, 23, dtype=DT)[:, None]
    model = _dense(X, Y, _kernel())
    logml, mean, var, K, _ = _exact(model.kernel, X, Y, Xt)
    bound = _set_optimal_posterior(model, K)
    elbo = float(model.elbo(estimator="closed-form").elbo.detach())
    assert abs(elbo - bound) < 1e-9 * abs(bound), (elbo, bound)
    assert abs(bound - logml) < 1e-4, (bound, logml)
    gen = torch.Generator().manual_seed(0)
    terms = model.elbo(estimator="score", num_samples=2000, generator=gen)
    assert terms.ell_stderr > 0
    assert abs(float(terms.elbo.detach()) - logml) < 4 * terms.ell_stderr, (float(terms.elbo), logml, terms.ell_stderr)
    pm, pv, _ = model.predict_latent(Xt)
    torch.testing.assert_close(pm[0, :, 0], mean, rtol=0, atol=1e-5)  # the jitter moves them by 2.7e-6
    torch.testing.assert_close(pv[0, :, 0], var, rtol=0, atol=1e-5)


@pytest.mark.parametrize("posterior", ["full", "diag-u"])
def test_training_q_from_the_prior_reaches_the_evidence(posterior):
    """L-BFGS on q(u) alone, the composite fixed: the full Gaussian reaches log p(y) (1e-4 relative); the
    factorized family (mean-field over 40 strongly correlated values) climbs but stays below it."""
    X, Y = _draw(40, seed=1)
    model = _dense(X, Y, _kernel(), posterior)
    logml = _exact(model.kernel, X, Y, X)[0]
    start = float(model.elbo(estimator="closed-form").elbo.detach())
    savigp.fit(model, iterations=20, optimizer="lbfgs", lr=1.0, lbfgs_max_iter=50, estimator="closed-form",
               progress=False)
    elbo = float(model.elbo(estimator="closed-form").elbo.detach())
    assert start < elbo <= logml + 1e-6 * abs(logml), (start, elbo, logml)
    if posterior == "full":
        assert (logml - elbo) < 1e-4 * abs(logml), (elbo, logml)


def test_dense_white_is_the_titsias_bound():
    """With White in the kernel, K_zz = K + s I and K_zx = K (Z and X are different tensors): the optimal
    q(u) gives the collapsed bound log N(y | 0, Q + s2 I) - tr(K + s I - Q) / (2 s2), Q = K (K + s I)^-1 K
    (Titsias 2009), strictly below the evidence of K + s I."""
    X, Y = _draw(30, seed=2)
    model = _dense(X, Y, _kernel(white=True))
    with torch.no_grad():
        Kw = model.kernel(X, X)[0]  # K + s I
        Kx = model.kernel(X, X.clone())[0]  # K
        bound = _collapsed_bound(Kx @ torch.linalg.solve(Kw, Kx), Kw, Y)
        evidence = _exact(model.kernel, X, Y, X)[0]
    savigp.fit(model, iterations=20, optimizer="lbfgs", lr=1.0, lbfgs_max_iter=50, estimator="closed-form",
               progress=False)
    elbo = float(model.elbo(estimator="closed-form").elbo.detach())
    assert abs(elbo - bound) < 1e-4 * abs(bound), (elbo, bound)
    assert bound < evidence - 1.0
