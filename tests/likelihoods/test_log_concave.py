"""Likelihoods that declare ``log_concave`` are concave in f: the second difference of log p(y | f)
along random directions of f is <= 0 at every y tried (a fit skips the saddle test of a single
Gaussian's start for them, savigp.training.starts.explorable)."""
import pytest
import torch

import likelihoods

DECLARED = [name for name in ("Gaussian", "Poisson", "Logistic", "Probit", "Softmax")]


def _targets(lik, n, g):
    if isinstance(lik, likelihoods.Softmax):
        return torch.randint(0, lik.num_latent, (n, 1), generator=g).double()
    if isinstance(lik, likelihoods.Logistic):
        return torch.where(torch.rand(n, 1, generator=g, dtype=torch.float64) > 0.5, 1.0, -1.0)
    if isinstance(lik, likelihoods.Poisson):
        return torch.randint(0, 12, (n, 1), generator=g).double()
    return 3 * torch.randn(n, 1, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("name", DECLARED)
def test_a_declared_log_concave_likelihood_is_concave_in_f(name):
    cls = getattr(likelihoods, name)
    lik = cls(3) if name == "Softmax" else cls()
    assert lik.log_concave
    g = torch.Generator().manual_seed(0)
    n, Q = 200, lik.num_latent
    y = _targets(lik, n, g)
    f = 3 * torch.randn(n, Q, generator=g, dtype=torch.float64)
    d = torch.randn(n, Q, generator=g, dtype=torch.float64)
    h = 1e-3
    with torch.no_grad():
        second = (lik.log_prob(y, f + h * d) - 2 * lik.log_prob(y, f) + lik.log_prob(y, f - h * d)) / h ** 2
    assert float(second.max()) <= 1e-5, float(second.max())


def test_the_default_is_not_log_concave():
    assert likelihoods.CallableLikelihood(lambda y, f: -(y[:, 0] - f[..., 0]) ** 2).log_concave is False
