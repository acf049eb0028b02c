"""savigp.inducing.kmeans (torch k-means for inducing inputs) against brute force and known clusters."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from savigp.inducing import initial_inducing_inputs, kmeans, kmeans_inertia


def _blobs(n_per=200, k=8, d=5, spread=0.05, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-5, 5, size=(k, d))
    X = np.concatenate([c + spread * rng.standard_normal((n_per, d)) for c in centres])
    return torch.as_tensor(X), centres


def test_kmeans_recovers_separated_clusters():
    X, true = _blobs()
    C = kmeans(X, 8, seed=1).numpy()
    # every true centre has exactly one estimated centre within 3 standard errors of a cluster mean
    # (spread / sqrt(200) = 0.0035 per coordinate; k-means++ cannot miss a blob 5 units away)
    dist = np.sqrt(((C[:, None, :] - true[None, :, :]) ** 2).sum(-1))
    assert sorted(dist.argmin(1).tolist()) == list(range(8))
    assert dist.min(1).max() < 3 * 0.05 / np.sqrt(200) * np.sqrt(5)


def test_kmeans_is_a_lloyd_fixed_point_by_brute_force():
    """At convergence every centre is the mean of the rows nearest to it (brute-force distances in
    numpy, float64), and the inertia is the brute-force one."""
    rng = np.random.default_rng(3)
    Xn = rng.standard_normal((600, 4))
    C, inertia = kmeans(torch.as_tensor(Xn), 12, iterations=200, tol=0.0, seed=2, return_inertia=True)
    C = C.numpy()
    d = ((Xn[:, None, :] - C[None, :, :]) ** 2).sum(-1)
    lab = d.argmin(1)
    assert np.bincount(lab, minlength=12).min() > 0
    means = np.stack([Xn[lab == m].mean(0) for m in range(12)])
    np.testing.assert_allclose(C, means, atol=1e-10)
    np.testing.assert_allclose(kmeans_inertia(torch.as_tensor(Xn), torch.as_tensor(C)), d.min(1).sum(), rtol=1e-10)
    # a local optimum at least as good as scipy's k-means on the same data (best of 5 seeds there)
    from scipy.cluster.vq import kmeans2

    best = min(((Xn[:, None] - kmeans2(Xn, 12, minit="++", seed=s, iter=100)[0][None]) ** 2).sum(-1).min(1).sum()
               for s in range(5))
    assert d.min(1).sum() < 1.05 * best


def test_kmeans_no_empty_or_duplicate_centres_and_dtype():
    # many repeated rows: centres must stay distinct rows/means, never NaN
    X = torch.cat([torch.zeros(50, 3), torch.ones(50, 3), torch.randn(20, 3, generator=torch.Generator().manual_seed(0))])
    C = kmeans(X.float(), 10, seed=0)
    assert C.dtype == torch.float32 and C.shape == (10, 3) and torch.isfinite(C).all()
    assert torch.unique(C, dim=0).shape[0] == 10
    # reproducible
    torch.testing.assert_close(C, kmeans(X.float(), 10, seed=0))


def test_kmeans_beats_random_subset_on_mnist_like_data():
    g = torch.Generator().manual_seed(0)
    X = torch.rand(2000, 30, generator=g, dtype=torch.float64) ** 3
    C = kmeans(X, 50, seed=0)
    R = X[torch.randperm(2000, generator=g)[:50]]
    assert kmeans_inertia(X, C) < 0.85 * kmeans_inertia(X, R)


def test_kmeans_torch_inducing_init_and_errors():
    X, _ = _blobs(n_per=30, k=4, d=2)
    Z = initial_inducing_inputs(X, 4, method="kmeans-torch", seed=0)
    assert Z.shape == (4, 2) and Z.dtype == X.dtype
    with pytest.raises(ValueError, match="kmeans-torch"):
        initial_inducing_inputs(X, 4, method="kmeans++")
    with pytest.raises(ValueError, match=r"between 1 and N=120.*\(120, 2\)"):
        kmeans(X, 121)
    with pytest.raises(ValueError, match=r"\(N, D\).*\(120,\)"):
        kmeans(X[:, 0], 3)
    with pytest.raises(ValueError, match="NaN"):
        kmeans(torch.full((5, 2), float("nan")), 2)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_kmeans_on_cuda_matches_cpu():
    X, _ = _blobs()
    C_cpu = kmeans(X, 8, seed=1)
    C_gpu = kmeans(X.cuda(), 8, seed=1)
    assert C_gpu.device.type == "cuda"
    torch.testing.assert_close(C_gpu.cpu(), C_cpu, atol=1e-8, rtol=1e-8)
