"""Every kernel family, sums, products, scales and active_dims against GPyTorch's values to 1e-10
(float64), and the input gradients of a composite against GPyTorch's autograd. Skipped without GPyTorch.

Parametrizations that differ: GPyTorch's ``PeriodicKernel`` lengthscale is savigp's l^2 (savigp/kernels/
periodic.py); its ``LinearKernel`` is savigp's Linear with offset 0; its kernels have no variance of
their own (a ``ScaleKernel`` gives one), so a savigp leaf with variance s is ``ScaleKernel`` with
outputscale s. The Q latent functions are GPyTorch's ``batch_shape=(Q,)``.
"""
from __future__ import annotations

import pytest
import torch

gpytorch = pytest.importorskip("gpytorch")
from gpytorch import kernels as gk  # noqa: E402

from savigp.kernels import (RBF, Constant, Linear, Matern12, Matern32, Matern52, Periodic,  # noqa: E402
                            RationalQuadratic, Scale)

DT = torch.float64
Q, D = 2, 3
LS = torch.tensor([[0.7, 1.3, 2.0], [1.1, 0.5, 0.9]], dtype=DT)
VAR = torch.tensor([1.5, 0.4], dtype=DT)
PERIOD = torch.tensor([[1.0, 2.5, 0.7], [3.0, 1.2, 1.9]], dtype=DT)
ALPHA = torch.tensor([0.6, 3.0], dtype=DT)
TOL = 1e-10


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    return 1.5 * torch.randn(7, D, generator=g, dtype=DT) + 0.3, 1.5 * torch.randn(5, D, generator=g, dtype=DT)


def _theirs(kernel, x1, x2):
    with gpytorch.settings.lazily_evaluate_kernels(False), torch.no_grad():
        out = kernel(x1, x2)
        return (out.to_dense() if hasattr(out, "to_dense") else out).expand(Q, x1.shape[0], x2.shape[0])


def _set(module, **values):
    """Set GPyTorch hyper-parameters (through their constraints) and return the values they took."""
    for name, v in values.items():
        setattr(module, name, v)
    return {name: getattr(module, name).detach().clone() for name in values}


def _scaled(base, variance=VAR):
    k = gk.ScaleKernel(base, batch_shape=torch.Size([Q])).double()
    s = _set(k, outputscale=variance)["outputscale"]
    return k, s


def _rbf(ard_dims=D, active_dims=None, ls=LS):
    base = gk.RBFKernel(ard_num_dims=ard_dims, batch_shape=torch.Size([Q]), active_dims=active_dims).double()
    return base, _set(base, lengthscale=ls.reshape(Q, 1, -1))["lengthscale"].reshape(Q, -1)


def _periodic(active_dims=None, ls=LS, period=PERIOD):
    d = ls.shape[-1]
    base = gk.PeriodicKernel(ard_num_dims=d, batch_shape=torch.Size([Q]), active_dims=active_dims).double()
    got = _set(base, lengthscale=ls.reshape(Q, 1, d).square(), period_length=period.reshape(Q, 1, d))
    return base, got["lengthscale"].reshape(Q, d).sqrt(), got["period_length"].reshape(Q, d)


def _assert_same(ours, theirs, x1, x2):
    """kernel(X1, X2), kernel(X1, X1) (the same object twice) and diag against GPyTorch's."""
    with torch.no_grad():
        for a, b in ((x1, x2), (x1, x1)):
            want = _theirs(theirs, a, b)
            got = ours(a, b)
            assert got.shape == want.shape
            err = float((got - want).abs().max())
            assert err <= TOL * max(1.0, float(want.abs().max())), err
        torch.testing.assert_close(ours.diag(x1), _theirs(theirs, x1, x1).diagonal(dim1=-2, dim2=-1), rtol=0, atol=TOL)


def test_rbf_ard_and_isotropic():
    x1, x2 = _inputs()
    base, ls = _rbf()
    theirs, s = _scaled(base)
    _assert_same(RBF(D, Q, lengthscale=ls, variance=s), theirs, x1, x2)
    base, ls = _rbf(ard_dims=None, ls=torch.tensor([[0.8], [1.9]], dtype=DT))
    theirs, s = _scaled(base)
    _assert_same(RBF(D, Q, lengthscale=ls, variance=s, ard=False), theirs, x1, x2)  # the fused isotropic path


@pytest.mark.parametrize("nu, cls", [(0.5, Matern12), (1.5, Matern32), (2.5, Matern52)])
def test_matern(nu, cls):
    x1, x2 = _inputs(1)
    base = gk.MaternKernel(nu=nu, ard_num_dims=D, batch_shape=torch.Size([Q])).double()
    ls = _set(base, lengthscale=LS.reshape(Q, 1, D))["lengthscale"].reshape(Q, D)
    theirs, s = _scaled(base)
    _assert_same(cls(D, Q, lengthscale=ls, variance=s), theirs, x1, x2)


def test_rational_quadratic():
    x1, x2 = _inputs(2)
    base = gk.RQKernel(ard_num_dims=D, batch_shape=torch.Size([Q])).double()
    got = _set(base, lengthscale=LS.reshape(Q, 1, D), alpha=ALPHA.reshape(Q, 1))
    theirs, s = _scaled(base)
    _assert_same(RationalQuadratic(D, Q, lengthscale=got["lengthscale"].reshape(Q, D), variance=s,
                                   alpha=got["alpha"].reshape(Q)), theirs, x1, x2)


def test_periodic_with_lengthscale_squared():
    x1, x2 = _inputs(3)
    base, ls, period = _periodic()
    theirs, s = _scaled(base)
    _assert_same(Periodic(D, Q, lengthscale=ls, period=period, variance=s), theirs, x1, x2)


def test_linear_with_zero_offset():
    x1, x2 = _inputs(4)
    theirs = gk.LinearKernel(batch_shape=torch.Size([Q])).double()
    s = _set(theirs, variance=VAR.reshape(Q, 1, 1))["variance"].reshape(Q)
    _assert_same(Linear(D, Q, variance=s, offset=0.0), theirs, x1, x2)


def test_constant():
    x1, x2 = _inputs(5)
    theirs = gk.ConstantKernel(batch_shape=torch.Size([Q])).double()
    s = _set(theirs, constant=VAR.reshape(Q, 1))["constant"].reshape(Q)
    _assert_same(Constant(D, Q, variance=s), theirs, x1, x2)


def test_scale_of_a_product_plus_a_scaled_rbf():
    """The benchmark's composite: ScaleKernel(RBF) + ScaleKernel(Periodic * RBF), both as savigp's leaf
    variances and as savigp's Scale of a product of unit-variance leaves."""
    x1, x2 = _inputs(6)
    b1, ls1 = _rbf()
    bp, lsp, period = _periodic()
    b2, ls2 = _rbf(ls=LS.flip(-1))
    t1, s1 = _scaled(b1)
    t2, s2 = _scaled(gk.ProductKernel(bp, b2), VAR.flip(-1))
    theirs = t1 + t2
    ours = RBF(D, Q, lengthscale=ls1, variance=s1) + Periodic(D, Q, lengthscale=lsp, period=period, variance=s2) \
        * RBF(D, Q, lengthscale=ls2)
    _assert_same(ours, theirs, x1, x2)
    scaled = RBF(D, Q, lengthscale=ls1, variance=s1) + Scale(Periodic(D, Q, lengthscale=lsp, period=period)
                                                            * RBF(D, Q, lengthscale=ls2), variance=s2)
    _assert_same(scaled, theirs, x1, x2)


def test_active_dims_contiguous_and_permuted():
    """RBF on column 0 times a periodic kernel on columns (2, 1) in that order (the length-scales and
    periods follow the order of active_dims in both libraries), plus a Matern 3/2 on columns 1, 2."""
    x1, x2 = _inputs(7)
    b1, ls1 = _rbf(ard_dims=1, active_dims=[0], ls=LS[:, :1])
    bp, lsp, period = _periodic(active_dims=[2, 1], ls=LS[:, 1:], period=PERIOD[:, :2])
    bm = gk.MaternKernel(nu=1.5, ard_num_dims=2, batch_shape=torch.Size([Q]), active_dims=[1, 2]).double()
    lsm = _set(bm, lengthscale=LS[:, :2].reshape(Q, 1, 2))["lengthscale"].reshape(Q, 2)
    t1, s1 = _scaled(gk.ProductKernel(b1, bp))
    t2, s2 = _scaled(bm, VAR.flip(-1))
    ours = RBF(D, Q, lengthscale=ls1, variance=s1, active_dims=[0]) \
        * Periodic(D, Q, lengthscale=lsp, period=period, active_dims=[2, 1]) \
        + Matern32(D, Q, lengthscale=lsm, variance=s2, active_dims=[1, 2])
    _assert_same(ours, t1 + t2, x1, x2)


def test_input_gradients_of_a_composite_equal_gpytorch_autograd():
    """d/dX1, d/dX2 of sum(W * K) through savigp's fused RBF backward and the composite, against
    GPyTorch's autograd (float64, 1e-10)."""
    x1, x2 = _inputs(8)
    b1, ls1 = _rbf()
    bp, lsp, period = _periodic(active_dims=[0], ls=LS[:, :1], period=PERIOD[:, :1])
    b2, ls2 = _rbf(ard_dims=1, active_dims=[0], ls=LS[:, 2:])
    t1, s1 = _scaled(b1)
    t2, s2 = _scaled(gk.ProductKernel(bp, b2), VAR.flip(-1))
    ours = RBF(D, Q, lengthscale=ls1, variance=s1) + Periodic(D, Q, lengthscale=lsp, period=period, variance=s2,
                                                              active_dims=[0]) * RBF(D, Q, lengthscale=ls2, active_dims=[0])
    W = torch.randn(Q, 7, 5, generator=torch.Generator().manual_seed(9), dtype=DT)
    grads = []
    for k in (ours, t1 + t2):
        a, b = x1.clone().requires_grad_(True), x2.clone().requires_grad_(True)
        with gpytorch.settings.lazily_evaluate_kernels(False):
            K = k(a, b)
        K = K.to_dense() if hasattr(K, "to_dense") else K
        grads.append(torch.autograd.grad((W * K).sum(), (a, b)))
    for g, want in zip(*grads):
        torch.testing.assert_close(g, want, rtol=0, atol=TOL * max(1.0, float(want.abs().max())))
