"""Tests of the variational Fourier features for additive Matern kernels and ODVFF
(savigp.kernels.fourier_features; Hensman et al. 2018, Azzimonti et al. 2020).

K_uu and K_uf are checked against Gauss-Legendre quadrature of the RKHS inner products on [a, b]
(derivatives by autograd), whose correctness is itself checked by the reproducing property
<phi, k(x, .)> = phi(x) inside the interval; the model against Titsias' collapsed bound and the
exact marginal likelihood.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from likelihoods import Gaussian
from savigp.kernels.fourier_features import AdditiveMatern, FeatureIndices, FourierFeatureKernel
from savigp.odvff import odvff_model
from savigp.training.natural_gradients import fit_orthnat, natural_gradient_step

A, B = -1.0, 2.0
NUS = (0.5, 1.5, 2.5)


def _derivs(fun, t, n):
    t = t.clone().requires_grad_(True)
    out = [fun(t)]
    for _ in range(n):
        out.append(torch.autograd.grad(out[-1].sum(), t, create_graph=True)[0])
    return [o.detach() for o in out]


def _matern(nu, r, lam, var):
    u = lam * r
    P = {0.5: 1 + 0 * u, 1.5: 1 + u, 2.5: 1 + u + u ** 2 / 3}[nu]
    return var * torch.exp(-u) * P


def _inner(f, g, nu, lam, var, cuts=(), nodes=120):
    """<f, g> in the RKHS of the Matern-nu kernel on [A, B] (Durrande et al. 2016; Hensman et al.
    2018), the integral by Gauss-Legendre on the pieces between ``cuts`` (kinks of g)."""
    p = int(nu - 0.5)
    pts = [A, *sorted(cuts), B]
    xs, ws = np.polynomial.legendre.leggauss(nodes)
    total = 0.0
    for lo, hi in zip(pts[:-1], pts[1:]):
        t = torch.tensor(0.5 * (hi - lo) * xs + 0.5 * (hi + lo))
        w = torch.tensor(0.5 * (hi - lo) * ws)
        df, dg = _derivs(f, t, p + 1), _derivs(g, t, p + 1)
        Lf = sum(math.comb(p + 1, k) * lam ** (p + 1 - k) * df[k] for k in range(p + 2))
        Lg = sum(math.comb(p + 1, k) * lam ** (p + 1 - k) * dg[k] for k in range(p + 2))
        total += float((w * Lf * Lg).sum())
    c = {0: 1 / (2 * lam * var), 1: 1 / (4 * lam ** 3 * var), 2: 3 / (16 * lam ** 5 * var)}[p]
    fa = [float(v) for v in _derivs(f, torch.tensor([A]), 2)]
    ga = [float(v) for v in _derivs(g, torch.tensor([A]), 2)]
    if p == 0:
        bd = fa[0] * ga[0] / var
    elif p == 1:
        bd = fa[0] * ga[0] / var + fa[1] * ga[1] / (lam ** 2 * var)
    else:
        bd = (9 * fa[0] * ga[0] / (8 * var) + 9 * fa[2] * ga[2] / (8 * lam ** 4 * var)
              + 3 / (lam ** 2 * var) * (fa[1] * ga[1] + (fa[2] * ga[0] + fa[0] * ga[2]) / 8))
    return c * total + bd


def _features(F):
    om = [2 * math.pi * m / (B - A) for m in range(F + 1)]
    return ([lambda t, w=w: torch.cos(w * (t - A)) for w in om]
            + [lambda t, w=w: torch.sin(w * (t - A)) for w in om[1:]])


@pytest.mark.parametrize("nu", NUS)
def test_inner_product_reproduces_the_kernel(nu):
    """The quadrature inner product used below is the RKHS one: <phi, k(x, .)> = phi(x) inside."""
    lam, var = math.sqrt(2 * nu) / 0.7, 1.3
    for phi in _features(2)[1:]:
        for x in (-0.6, 1.7):
            g = lambda t: _matern(nu, (t - x).abs(), lam, var)  # noqa: E731
            assert _inner(phi, g, nu, lam, var, cuts=(x,)) == pytest.approx(float(phi(torch.tensor(x))), abs=1e-10)


@pytest.mark.parametrize("nu", NUS)
def test_kuu_and_kuf_match_quadrature(nu):
    F, ell, var = 3, 0.7, 1.3
    lam = math.sqrt(2 * nu) / ell
    k = FourierFeatureKernel(1, 1, nu, lower=A, upper=B, num_frequencies=F, lengthscale=ell, variance=var)
    Z = k.placeholder()
    xs = [-2.2, -1.05, 0.3, 1.99, 2.6]  # below, inside, above the interval
    with torch.no_grad():
        Kuu, Kuf = k(Z, Z)[0], k(Z, torch.tensor(xs)[:, None])[0]
    feats = _features(F)
    Kq = torch.tensor([[_inner(f, g, nu, lam, var) for g in feats] for f in feats])
    assert torch.allclose(Kuu, Kq, rtol=1e-10, atol=1e-10 * float(Kq.abs().max()))
    for j, x in enumerate(xs):
        g = lambda t: _matern(nu, (t - x).abs(), lam, var)  # noqa: E731
        cuts = (x,) if A < x < B else ()
        q = torch.tensor([_inner(f, g, nu, lam, var, cuts) for f in feats])
        assert torch.allclose(Kuf[:, j], q, rtol=1e-9, atol=1e-11), (x, Kuf[:, j], q)
    # the transposed call, the diagonal, and the marker surviving .to()
    assert torch.allclose(k(torch.tensor(xs)[:, None], Z)[0], Kuf.T)
    assert isinstance(Z.to(torch.float32), FeatureIndices)


@pytest.mark.parametrize("nu", NUS)
def test_additive_features_give_a_valid_nystrom_approximation(nu):
    """D = 2, Q = 2: K_uu block diagonal over inputs, K_ff - K_fu K_uu^-1 K_uf positive semi-definite
    (the features are valid inducing variables) and its trace falls with F."""
    g = torch.Generator().manual_seed(0)
    X = torch.rand(60, 2, generator=g, dtype=torch.float64) * 3 - 1
    traces = []
    for F in (1, 4, 12):
        k = FourierFeatureKernel(2, 2, nu, lower=[-1.5, -1.2], upper=[2.5, 2.2], num_frequencies=F,
                                 lengthscale=[[0.5, 0.9], [0.8, 0.4]], variance=[[1.0, 0.5], [0.3, 0.7]])
        with torch.no_grad():
            Z = k.placeholder()
            Kuu, Kuf, Kff = k(Z, Z), k(Z, X), k(X, X)
            n = 2 * F + 1
            assert float(Kuu[:, :n, n:].abs().max()) == 0.0
            R = Kff - Kuf.transpose(-1, -2) @ torch.linalg.solve(Kuu, Kuf)
            assert float(torch.linalg.eigvalsh(R).min()) > -1e-9 * float(Kff.abs().max())
            traces.append(float(R.diagonal(dim1=-2, dim2=-1).sum()))
    assert traces[0] > traces[1] > traces[2] > 0
    # the point kernel is the additive Matern
    base = AdditiveMatern(2, 2, nu, lengthscale=[[0.5, 0.9], [0.8, 0.4]], variance=[[1.0, 0.5], [0.3, 0.7]])
    assert torch.allclose(base(X, X), Kff)
    lam = math.sqrt(2 * nu) / 0.9
    r = (X[:5, None, 1] - X[None, :5, 1]).abs()
    assert torch.allclose(Kff[0, :5, :5], _matern(nu, (X[:5, None, 0] - X[None, :5, 0]).abs(), math.sqrt(2 * nu) / 0.5, 1.0)
                          + _matern(nu, r, lam, 0.5))


def test_errors():
    with pytest.raises(ValueError, match="nu must be one of"):
        AdditiveMatern(1, 1, nu=1.0)
    with pytest.raises(ValueError, match="lower < upper"):
        FourierFeatureKernel(2, 1, 1.5, lower=[0.0, 1.0], upper=[1.0, 1.0], num_frequencies=2)
    with pytest.raises(ValueError, match="lengthscale"):
        AdditiveMatern(2, 1, lengthscale=[1.0, 2.0, 3.0])


def _gp_data(n=150, seed=3):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 2, generator=g, dtype=torch.float64)
    Y = torch.sin(6 * X[:, :1]) + 0.5 * torch.cos(4 * X[:, 1:]) + 0.1 * torch.randn(n, 1, generator=g, dtype=torch.float64)
    return X, Y


def test_odvff_optimal_q_is_titsias_bound_below_the_evidence():
    """Gaussian likelihood, a = 0: one natural step (tau = 1) reaches Titsias' collapsed bound with
    Q_ff = K_fu K_uu^-1 K_uf from the Fourier features, which lies below the exact log evidence of
    the additive Matern GP."""
    X, Y = _gp_data()
    model = odvff_model(X, Y, Gaussian(0.05), nu=1.5, num_frequencies=4, mean_basis_size=10)
    assert isinstance(model.inducing, FeatureIndices) and model.num_inducing == 18
    natural_gradient_step(model, step=1.0)
    elbo = float(model.elbo().elbo.detach())
    with torch.no_grad():
        k, s2, y, N = model.kernel, model.likelihood.variance(), model.train_y[:, 0], X.shape[0]
        Z = model.inducing
        Lzz = model.prior_factor()[0]
        Kuu = Lzz @ Lzz.T  # K_uu with the model's jitter
        Kuf = k(Z, X)[0]
        Qff = Kuf.T @ torch.linalg.solve(Kuu, Kuf)
        kff = k.diag(X)[0]

        def lml(C):
            L = torch.linalg.cholesky(C + s2 * torch.eye(N, dtype=C.dtype))
            alpha = torch.linalg.solve_triangular(L, y[:, None], upper=False)[:, 0]
            return float(-0.5 * (N * math.log(2 * math.pi) + 2 * torch.log(L.diagonal()).sum() + alpha @ alpha))

        titsias = lml(Qff) - 0.5 / float(s2) * float((kff - Qff.diagonal()).sum())
        exact = lml(k(X, X)[0])
    assert elbo == pytest.approx(titsias, rel=1e-7)
    assert titsias < exact


@pytest.mark.parametrize("basis", ["orthogonal", "hybrid"])
def test_odvff_kl_matches_explicit_joint_gaussian(basis):
    """The mean head's KL with Fourier features as the covariance basis, against the joint Gaussian
    over [u, f(gamma)] (u the features)."""
    from savigp.testing.mean_heads import explicit_component_kl, model_kl, randomize

    X, Y = _gp_data(60, seed=5)
    model = randomize(odvff_model(X, Y, Gaussian(0.1), nu=1.5, num_frequencies=2, mean_basis_size=7,
                                   mean_basis=basis), seed=6)
    total, head_kl = model_kl(model)
    assert abs(head_kl) > 1e-2
    assert total == pytest.approx(explicit_component_kl(model, 0, basis), rel=1e-7)


def test_odvff_trains_and_predicts():
    X, Y = _gp_data(200, seed=4)
    model = odvff_model(X, Y, Gaussian(0.1), nu=2.5, num_frequencies=3, mean_basis_size=30)
    h = fit_orthnat(model, 30, natgrad_step=1.0, gamma_update="adam", gamma_lr=0.05, hyper_lr=0.02)
    assert h.elbo[-1] > h.elbo[0] + 20 and all(math.isfinite(v) for v in h.elbo)
    assert float(model.mean_head.a.detach().abs().max()) > 0.01
    mean, var, _ = model.predict_latent(X[:20])
    assert float((mean[0, :, 0] - Y[:20, 0]).abs().mean()) < 0.25 and bool((var > 0).all())
    # float32 and the other heads run too
    m32 = odvff_model(X, Y, Gaussian(0.1), nu=0.5, num_frequencies=2, mean_basis_size=8, dtype=torch.float32,
                      mean_basis="hybrid")
    assert isinstance(m32.inducing, FeatureIndices) and m32.inducing.dtype == torch.float32
    assert math.isfinite(float(m32.elbo().elbo.detach()))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_odvff_cuda_matches_cpu():
    X, Y = _gp_data(80, seed=7)
    cpu = odvff_model(X, Y, Gaussian(0.1), nu=2.5, num_frequencies=2, mean_basis_size=6)
    gpu = odvff_model(X, Y, Gaussian(0.1), nu=2.5, num_frequencies=2, mean_basis_size=6, device="cuda")
    gpu.load_state_dict(cpu.state_dict())
    assert isinstance(gpu.inducing, FeatureIndices) and gpu.inducing.device.type == "cuda"
    assert float(gpu.elbo().elbo.detach()) == pytest.approx(float(cpu.elbo().elbo.detach()), rel=1e-10)
