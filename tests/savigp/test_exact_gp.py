"""Issue 2, check 1: dense full Gaussian + Gaussian likelihood against exact GP regression."""
import scipy.stats
import torch

import savigp
from likelihoods import Gaussian

from conftest import exact_gp


def _trained_dense(X, Y, learn_hypers=True):
    lik = Gaussian(0.05, learn_variance=learn_hypers)
    kernel = savigp.RBF(2, 1, lengthscale=[1.5, 1.2], learn=learn_hypers)
    model = savigp.SAVIGP(X, Y, lik, kernel, dense=True)
    savigp.fit(model, iterations=30, optimizer="lbfgs", lr=1.0, lbfgs_max_iter=50, progress=False)
    return model


def test_dense_full_gaussian_matches_exact_gp_closed_form(regression_data):
    """Hyper-parameters learned too: at convergence the ELBO equals the exact log marginal
    likelihood at the learned hyper-parameters (0.1%), and the posterior mean matches (1e-3)."""
    X, Y = regression_data
    model = _trained_dense(X, Y)
    logml, mean, var = exact_gp(X, Y, model.kernel, model.likelihood.variance())
    elbo = float(model.elbo(estimator="closed-form").elbo.detach())
    assert elbo <= logml + 1e-6 * abs(logml)  # a lower bound
    assert abs(elbo - logml) / abs(logml) < 1e-3
    pm, pv, _ = model.predict_latent(X)
    assert float((pm[0, :, 0] - mean).abs().max() / mean.abs().max()) < 1e-3
    assert float((pv[0, :, 0] - var).abs().max() / var.max()) < 1e-2


def test_black_box_path_has_the_exact_posterior_as_its_fixed_point(regression_data):
    """Through the black-box (score-function) path, at the exact optimum:
    the ELBO estimate equals the log marginal likelihood within 4 Monte Carlo standard errors,
    and the gradient w.r.t. every posterior parameter is zero within 4 standard errors."""
    X, Y = regression_data
    model = _trained_dense(X, Y, learn_hypers=False)
    logml, _, _ = exact_gp(X, Y, model.kernel, model.likelihood.variance())
    gen = torch.Generator().manual_seed(0)
    terms = model.elbo(estimator="score", num_samples=4000, generator=gen)
    assert abs(float(terms.elbo.detach()) - logml) < 4 * terms.ell_stderr + 1e-4 * abs(logml)

    R = 200
    grads = []
    for _ in range(R):
        model.zero_grad()
        model.elbo(estimator="score", num_samples=200, generator=gen).elbo.backward()
        grads.append(model.posterior.mean.grad.flatten().clone())
    G = torch.stack(grads)  # (R, p) independent replications of the p = 40 gradient entries
    z = G.mean(0) / (G.std(0) / R ** 0.5)
    # every entry within 4.5 SE (Bonferroni over 40 entries: false alarm ~4e-4)
    assert float(z.abs().max()) < 4.5
    # jointly (the entries are correlated): Hotelling's T^2 of a zero mean,
    # (R - p) / (p (R - 1)) T^2 ~ F(p, R - p) under the null; false alarm 1e-3
    p = G.shape[1]
    mean = G.mean(0)
    T2 = R * float(mean @ torch.linalg.solve(torch.cov(G.T), mean))
    F = (R - p) / (p * (R - 1)) * T2
    assert F < scipy.stats.f.ppf(0.999, p, R - p), F


def test_black_box_training_reaches_the_exact_posterior(regression_data):
    """End to end: trained only through likelihood values (score function, Adam), the posterior
    mean comes within a quarter of a posterior standard deviation of exact GP's and the exact
    (closed-form) ELBO of the learned q within 1% of the log marginal likelihood."""
    X, Y = regression_data
    lik = Gaussian(0.05, learn_variance=False)
    model = savigp.SAVIGP(X, Y, lik, savigp.RBF(2, 1, lengthscale=[1.5, 1.2], learn=False), dense=True)
    savigp.fit(model, iterations=1500, lr=0.01, estimator="score", num_samples=200, progress=False)
    logml, mean, var = exact_gp(X, Y, model.kernel, lik.variance())
    pm, _, _ = model.predict_latent(X)
    assert float(((pm[0, :, 0] - mean).abs() / var.sqrt()).max()) < 0.25
    gap = (logml - float(model.elbo(estimator="closed-form").elbo.detach())) / abs(logml)
    assert 0 <= gap < 0.01


def test_sparse_model_elbo_is_below_exact_and_close(regression_data):
    """Sparse (M < N) with learned inducing inputs: the ELBO is a lower bound of the exact log
    marginal likelihood at the same hyper-parameters, and tight for a smooth function."""
    X, Y = regression_data
    lik = Gaussian(0.05, learn_variance=False)
    kernel = savigp.RBF(2, 1, lengthscale=[1.5, 1.2], learn=False)
    model = savigp.SAVIGP(X, Y, lik, kernel, num_inducing=15)
    savigp.fit(model, iterations=20, optimizer="lbfgs", lr=1.0, lbfgs_max_iter=50, progress=False)
    logml, _, _ = exact_gp(X, Y, kernel, lik.variance())
    elbo = float(model.elbo().elbo.detach())
    assert elbo <= logml + 1e-8
    assert (logml - elbo) / abs(logml) < 0.05
