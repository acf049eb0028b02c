"""Marginals coupled across the latent functions (``posterior="joint"``, q(f_n) = N(b_n, C_n) with a full
Q x Q covariance) and a likelihood's closed form E_{N(f; b, diag v)}[log p(y | f)], which reads the per-latent
marginals only: exact for a log-density that is a sum of functions of one f_j each, and wrong by the dropped
cross-covariances for one that couples them (Bonilla et al. 2019, eq. (22)-(24)). The closed-form estimator
refuses the coupling case with a one-line error; ``"auto"`` routes it to an estimator that sees C_n."""
import math

import numpy as np
import pytest
import torch

import savigp
from likelihoods import Likelihood, MultiGaussian
from savigp.estimators import make_estimator
from savigp.posteriors.marginals import LatentMarginals

LOG_2PI = math.log(2 * math.pi)


class SumOfLatents(Likelihood):
    """y_n = f_n1 + f_n2 + N(0, 1) noise: the log-density couples the two latent functions, and its closed
    form below is exact only when they are independent under q (E[(f_1 + f_2)^2] loses 2 C_12)."""

    num_latent, output_dim = 2, 1

    def _log_prob(self, y, f):
        return -0.5 * (y[:, 0] - f[..., 0] - f[..., 1]) ** 2 - 0.5 * LOG_2PI

    def expected_log_prob(self, y, mean, var):
        return -0.5 * ((y[:, 0] - mean[..., 0] - mean[..., 1]) ** 2 + var[..., 0] + var[..., 1]) - 0.5 * LOG_2PI


def _coupled(B=6, rho=0.8, seed=0):
    """Coupled marginals ``(1, B, 2)`` with correlation ``rho`` and targets ``(B, 1)``."""
    g = torch.Generator().manual_seed(seed)
    mean = torch.randn(1, B, 2, generator=g, dtype=torch.float64)
    sd = 0.5 + torch.rand(1, B, 2, generator=g, dtype=torch.float64)
    cov = torch.empty(1, B, 2, 2, dtype=torch.float64)
    cov[..., 0, 0], cov[..., 1, 1] = sd[..., 0] ** 2, sd[..., 1] ** 2
    cov[..., 0, 1] = cov[..., 1, 0] = rho * sd[..., 0] * sd[..., 1]
    y = torch.randn(B, 1, generator=g, dtype=torch.float64)
    q = LatentMarginals(mean, cov.diagonal(dim1=-2, dim2=-1), torch.zeros(1, dtype=torch.float64), cov=cov)
    return y, q


def _exact(y, q):
    """sum_n E_{N(b_n, C_n)}[log p(y_n | f_n)] for :class:`SumOfLatents`, cross-covariances included."""
    b, C = q.mean[0], q.cov[0]
    spread = C[:, 0, 0] + C[:, 1, 1] + 2 * C[:, 0, 1]
    return float((-0.5 * ((y[:, 0] - b[:, 0] - b[:, 1]) ** 2 + spread) - 0.5 * LOG_2PI).sum())


def test_closed_form_refuses_coupled_marginals_of_a_likelihood_that_couples_its_latent_functions():
    y, q = _coupled()
    lik = SumOfLatents()
    with pytest.raises(ValueError, match=r"closed-form.*drop the cross-covariances.*SumOfLatents couples its latent functions") as err:
        make_estimator("closed-form", lik)(lik, y, q, num_samples=2)
    assert "\n" not in str(err.value)


def test_auto_routes_coupled_marginals_to_an_estimator_that_sees_the_cross_covariances():
    y, q = _coupled()
    lik = SumOfLatents()
    est = make_estimator("auto", lik, coupled=True)
    assert est.name == "reparam" and est.sees_coupled_marginals
    out = est(lik, y, q, num_samples=4000, generator=torch.Generator().manual_seed(1))
    exact = _exact(y, q)
    # the diagonal closed form is off by sum_n C_n12 (2.3 nats here): far outside 4 standard errors
    assert abs(float(out.value) - exact) < 4 * float(out.stderr), (float(out.value), exact, float(out.stderr))
    assert abs(float(q.cov[0, :, 0, 1].sum())) > 20 * float(out.stderr)


def test_a_model_with_the_joint_family_resolves_auto_past_the_closed_form_and_refuses_it_by_name():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (10, 1))
    model = savigp.SAVIGP(X, X.sum(1, keepdims=True), SumOfLatents(), num_inducing=3, posterior="joint", seed=0)
    assert model.resolved_estimator() == "reparam"
    with pytest.raises(ValueError, match="couples its latent functions"):
        model.resolved_estimator("closed-form")
    with pytest.raises(ValueError, match="couples its latent functions"):
        model.elbo(estimator="closed-form")
    diagonal = savigp.SAVIGP(X, X.sum(1, keepdims=True), SumOfLatents(), num_inducing=3, posterior="full", seed=0)
    assert diagonal.resolved_estimator() == "closed-form"  # factorized q: the closed form is exact


def test_closed_form_stays_exact_on_coupled_marginals_of_a_likelihood_separable_in_its_latent_functions():
    """MultiGaussian's log-density is a sum over outputs of functions of one f_j each: its expectation
    reads the per-latent marginals only, so the closed form is the exact value under coupled q too."""
    y, q = _coupled()
    lik = MultiGaussian(2, variance=[0.5, 2.0])
    y2 = torch.cat([y, -y], 1)
    est = make_estimator("auto", lik, coupled=True)
    assert est.name == "closed-form"
    value = float(est(lik, y2, q, num_samples=2).value.detach())
    expected = float(lik.expected_log_prob(y2, q.mean, q.var).sum())
    assert value == pytest.approx(expected, rel=1e-12)
