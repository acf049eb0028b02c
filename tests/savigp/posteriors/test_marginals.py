"""LatentMarginals: the fixed shape contract between the posterior families and the estimators."""
import pytest
import torch

from savigp.posteriors.marginals import LatentMarginals


def _parts(K=2, B=3, Q=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    mean = torch.randn(K, B, Q, generator=g, dtype=torch.float64)
    A = torch.randn(K, B, Q, Q, generator=g, dtype=torch.float64)
    cov = A @ A.transpose(-1, -2) + 0.1 * torch.eye(Q, dtype=torch.float64)
    return mean, cov, torch.log_softmax(torch.randn(K, generator=g, dtype=torch.float64), 0)


def test_shapes_are_checked_at_construction_naming_both():
    mean, cov, logw = _parts()
    var = cov.diagonal(dim1=-2, dim2=-1)
    with pytest.raises(ValueError, match=r"var must have the shape of mean \(2, 3, 2\), got \(2, 3\)"):
        LatentMarginals(mean, var[..., 0], logw)
    with pytest.raises(ValueError, match=r"log_weights must be \(K,\) = \(2,\) for mean \(2, 3, 2\), got \(3,\)"):
        LatentMarginals(mean, var, torch.zeros(3, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"cov must be \(K, B, Q, Q\) = \(2, 3, 2, 2\) for mean \(2, 3, 2\), got \(3, 2, 2\)"):
        LatentMarginals(mean, var, logw, cov=cov[0])
    with pytest.raises(ValueError, match=r"mean must be \(K, B, Q\), got shape \(3, 2\)"):
        LatentMarginals(mean[0], var[0], logw)
    q = LatentMarginals(mean, var, logw, cov=cov)
    assert q.shape == (2, 3, 2) and q.coupled and torch.allclose(q.weights().sum(), torch.ones((), dtype=torch.float64))


def test_shift_sample_and_cat():
    mean, cov, logw = _parts()
    var = cov.diagonal(dim1=-2, dim2=-1)
    q = LatentMarginals(mean, var, logw, cov=cov)
    shifted = q.shifted(torch.tensor([1.0, -2.0], dtype=torch.float64))
    assert torch.equal(shifted.mean, mean + torch.tensor([1.0, -2.0], dtype=torch.float64))
    assert shifted.cov is cov and shifted.var is var
    eps = torch.randn(5, 2, 1, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    f = q.sample(eps)  # coupled: the Cholesky factor of each point's covariance
    L = torch.linalg.cholesky(cov)
    assert f.shape == (5, 2, 3, 2)
    torch.testing.assert_close(f, mean + (L @ eps.unsqueeze(-1)).squeeze(-1), rtol=1e-12, atol=1e-12)
    factorized = LatentMarginals(mean, var, logw)
    torch.testing.assert_close(factorized.sample(eps), mean + var.sqrt() * eps, rtol=0, atol=0)
    both = LatentMarginals.cat([LatentMarginals(mean[:, :1], var[:, :1], logw, cov=cov[:, :1]),
                                LatentMarginals(mean[:, 1:], var[:, 1:], logw, cov=cov[:, 1:])])
    assert torch.equal(both.mean, mean) and torch.equal(both.var, var) and torch.equal(both.cov, cov)
