"""Component surgery of MixturePosterior (issue 44): a start along given directions
(spread_along), a sign flip on part of the inputs (fold) and a birth (split)."""
import math

import pytest
import torch

import savigp
from savigp.posteriors.mixture import MixturePosterior


def _mixture(K, diagonal=False, Q=2, M=5, seed=0):
    post = MixturePosterior(K, Q, M, diagonal, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed + 1)
        post.mean.add_(0.3 * torch.randn(post.mean.shape, generator=g, dtype=torch.float64))
        post.logits.copy_(torch.linspace(-0.4, 0.4, K, dtype=torch.float64))
        noise = 0.2 * torch.randn(post.raw_scale.shape, generator=g, dtype=torch.float64)
        post.raw_scale.add_(noise if diagonal else noise.tril())
    return post


@pytest.mark.parametrize("K", [1, 2, 3, 4])
def test_spread_along_puts_the_means_on_a_polygon_around_the_weighted_centre(K):
    """K = 1: m = c +- d_1; K = 2: c +- d_1; K >= 3: a regular K-gon of radius |d| in the plane of
    d_1, d_2 (d_1 _|_ d_2, equal lengths), the offsets centred by the weights (K > 1, so the weighted
    centre stays); covariances and weights kept."""
    post = _mixture(K)
    w = post.weights().detach()
    c = (w.view(-1, 1, 1) * post.mean.detach()).sum(0)
    d = torch.zeros(2, 2, 5, dtype=torch.float64)
    d[0, 0, :] = 1.5
    d[1, 1, 2] = 1.5 * math.sqrt(5)  # (the same length as d_0, orthogonal to it)
    cov = post.covariance().detach().clone()
    post.spread_along(d, torch.Generator().manual_seed(3))
    m = post.mean.detach()
    torch.testing.assert_close(post.covariance().detach(), cov)
    torch.testing.assert_close(post.weights().detach(), w)
    if K == 1:
        off = m[0] - c
        assert min(float((off - d[0]).abs().max()), float((off + d[0]).abs().max())) < 1e-12
        return
    torch.testing.assert_close((w.view(-1, 1, 1) * m).sum(0), c)
    off = m - m.mean(0)  # (the polygon's own centre)
    radius = off.flatten(1).norm(dim=1)
    torch.testing.assert_close(radius, torch.full((K,), float(d[0].norm()), dtype=torch.float64))
    cosines = (off.flatten(1) @ off.flatten(1).T) / float(d[0].norm()) ** 2  # (K, K)
    angles = torch.tensor([[math.cos(2 * math.pi * (i - j) / K) for j in range(K)] for i in range(K)], dtype=torch.float64)
    torch.testing.assert_close(cosines, angles)
    with pytest.raises(ValueError, match="directions must have shape"):
        post.spread_along(d[:1, :, :4])


def test_fold_makes_each_latent_function_of_one_sign_and_leaves_one_signed_means_alone():
    """u = L_zz m of a component changes sign between inducing inputs (latent 0) or not (latent 1):
    the fold flips the minority sign's values of latent 0 (its mask), smooths them with the nugget
    (K_zz (K_zz + s I)^-1 of the flipped values, held as m = L_zz^T (K_zz + s I)^-1 u) and leaves
    latent 1 and the other component as they were."""
    M = 8
    Z = torch.linspace(0, 4, M, dtype=torch.float64)[:, None]
    kernel = savigp.RBF(1, 2, lengthscale=1.0, variance=1.0, learn=False)
    L = torch.linalg.cholesky(kernel(Z, Z) + 1e-8 * torch.eye(M, dtype=torch.float64)).detach()  # (Q, M, M)
    post = MixturePosterior(2, 2, M, False)
    u0 = torch.tensor([1.5, 1.6, 1.4, -1.3, -1.2, 1.5, 1.7, 1.6], dtype=torch.float64)
    u1 = torch.linspace(0.8, 1.8, M, dtype=torch.float64)
    with torch.no_grad():
        post.mean[0] = torch.linalg.solve_triangular(L, torch.stack([u0, u1]).unsqueeze(-1), upper=False).squeeze(-1)
    other = post.mean.detach()[1].clone()
    mask = post.fold(0, lambda: L, smoothing=0.1)
    assert mask[0].tolist() == [False, False, False, True, True, False, False, False] and not bool(mask[1].any())
    u = (L @ post.mean.detach()[0].unsqueeze(-1)).squeeze(-1)
    Kzz = L[0] @ L[0].T
    expect = Kzz @ torch.linalg.solve(Kzz + 0.1 * float(Kzz.diagonal().mean()) * torch.eye(M, dtype=torch.float64),
                                      u0.abs())
    torch.testing.assert_close(u[0], expect)
    assert bool((u[0] > 0.5).all())
    torch.testing.assert_close(u[1], u1)
    torch.testing.assert_close(post.mean.detach()[1], other)
    with pytest.raises(ValueError, match="smoothing"):
        post.fold(0, lambda: L, smoothing=0.0)


@pytest.mark.parametrize("diagonal", [False, True])
def test_split_keeps_the_parents_moments_and_the_other_components(diagonal):
    """Component 1 of a K = 3 mixture split in two: K = 4, halves at m +- a with S - a a^T and weight
    pi_1 / 2 each (the new one last), so the pair's mean and covariance are the parent's; the other
    components, the entropy term and which parameters are trained are kept; the original is unchanged."""
    post = _mixture(3, diagonal)
    post.entropy_estimate = "mc"
    post.logits.requires_grad_(False)
    before = [t.detach().clone() for t in (post.mean, post.covariance(), post.weights())]
    new = post.split(1)
    assert new.num_components == 4 and post.num_components == 3 and new.entropy_estimate == "mc"
    assert not new.logits.requires_grad and new.mean.requires_grad
    mean, cov, w = new.mean.detach(), new.covariance().detach(), new.weights().detach()
    torch.testing.assert_close(w[[0, 2]], before[2][[0, 2]])
    torch.testing.assert_close(w[1], before[2][1] / 2), torch.testing.assert_close(w[3], before[2][1] / 2)
    torch.testing.assert_close(mean[[0, 2]], before[0][[0, 2]])
    torch.testing.assert_close((mean[1] + mean[3]) / 2, before[0][1])
    a = (mean[1] - mean[3]) / 2
    assert float(a.norm()) > 0.01
    outer = a * a if diagonal else a.unsqueeze(-1) * a.unsqueeze(-2)
    torch.testing.assert_close((cov[1] + cov[3]) / 2 + outer, before[1][1])
    for t, b in zip((post.mean, post.covariance(), post.weights()), before):
        torch.testing.assert_close(t.detach(), b)
    with pytest.raises(ValueError, match="positive definite|standard deviations"):
        post.split(0, shift=torch.full((2, 5), 10.0, dtype=torch.float64))


def test_transform_maps_a_component_through_the_latent_functions():
    """transform(source, target, A): u_target - mu = A (u_source - mu) at every inducing input (a swap of
    the two latent functions, a rotation of them, with per-latent kernels), the source's covariance
    and the two weights shared; reflect is transform(-I)."""
    M = 4
    Z = torch.linspace(0, 3, M, dtype=torch.float64)[:, None]
    kernel = savigp.RBF(1, 2, lengthscale=[[1.0], [0.7]], variance=1.0, learn=False)
    L = torch.linalg.cholesky(kernel(Z, Z) + 1e-9 * torch.eye(M, dtype=torch.float64)).detach()  # (2, M, M)
    a = 2 * math.pi / 3
    for A in (torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=torch.float64),
              torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], dtype=torch.float64)):
        post = _mixture(3, Q=2, M=M)
        w = post.weights().detach().clone()
        post.transform(2, 0, A, lambda: L)
        u = (L @ post.mean.detach().unsqueeze(-1)).squeeze(-1)  # (K, Q, M)
        torch.testing.assert_close(u[0], A @ u[2])
        torch.testing.assert_close(post.raw_scale.detach()[0], post.raw_scale.detach()[2])
        w1 = post.weights().detach()
        torch.testing.assert_close(w1, torch.stack([(w[0] + w[2]) / 2, w[1], (w[0] + w[2]) / 2]))
    one, two = _mixture(2, Q=2, M=M), _mixture(2, Q=2, M=M)
    one.reflect(0, 1)
    two.transform(0, 1, -torch.eye(2, dtype=torch.float64), lambda: L)
    torch.testing.assert_close(one.mean.detach(), two.mean.detach())
    with pytest.raises(ValueError, match="matrix must have shape"):
        two.transform(0, 1, torch.eye(3, dtype=torch.float64), lambda: L)
