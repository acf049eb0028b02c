"""The isotropic RBF keeps the distances of fixed inputs (K_zz of fixed inducing inputs) between
calls (``RBF._fixed_sqdist``). The kept matrix must never be used for other inputs: not after an
in-place edit, not for a new tensor that takes a freed tensor's address, not after a change of
dtype; and a kernel holding it must still copy, pickle and save."""
import copy
import pickle

import pytest
import torch

from savigp.kernels.stationary import RBF

DT = torch.float64


def _uncached(kern, Z):
    """K(Z, Z) through the path without the cache (x1 is not x2)."""
    return kern(Z, Z.clone())


def _kernel():
    return RBF(3, 2, lengthscale=torch.tensor([[0.8], [1.7]]), variance=torch.tensor([0.5, 2.0]), ard=False)


def test_cached_distances_give_the_same_kernel_and_gradients():
    gen = torch.Generator().manual_seed(0)
    Z = torch.randn(1, 9, 3, dtype=DT, generator=gen)
    kern = _kernel().to(DT)
    w = torch.randn(2, 9, 9, dtype=DT, generator=gen)
    ref = _uncached(kern, Z)
    g_ref = torch.autograd.grad((w * ref).sum(), list(kern.parameters()))
    for _ in range(2):  # the first call fills the cache, the second reads it
        k = kern(Z, Z)
        assert torch.allclose(k, ref, rtol=1e-14, atol=0)
        g = torch.autograd.grad((w * k).sum(), list(kern.parameters()))
        for a, b in zip(g, g_ref):
            assert torch.allclose(a, b, rtol=1e-12, atol=1e-14)
    first = kern._fixed_sqdist(Z[:1])  # a new view object of the same memory: a hit
    assert kern._fixed_sqdist(Z[:1]) is first
    assert kern._fixed_sqdist(Z) is first


def test_an_in_place_edit_or_a_new_dtype_recomputes_the_distances():
    gen = torch.Generator().manual_seed(1)
    Z = torch.randn(1, 7, 3, dtype=DT, generator=gen)
    kern = _kernel().to(DT)
    kern(Z, Z)
    with torch.no_grad():
        Z[0, 3].add_(0.7)  # in place: the version counter moves
    assert torch.allclose(kern(Z, Z), _uncached(kern, Z), rtol=1e-14, atol=0)
    Z.copy_(torch.randn(1, 7, 3, dtype=DT, generator=gen))
    assert torch.allclose(kern(Z, Z), _uncached(kern, Z), rtol=1e-14, atol=0)
    kern32, Z32 = kern.to(torch.float32), Z.float()
    assert kern32(Z32, Z32).dtype == torch.float32
    assert torch.allclose(kern32(Z32, Z32), _uncached(kern32, Z32), rtol=1e-6, atol=0)


def test_a_new_tensor_at_a_freed_address_never_reads_the_old_distances():
    """A temporary is freed and the next one of the same size, made at once, usually gets its
    address back with the same version (0): the weak reference to the owner tells them apart."""
    kern = _kernel().to(DT)
    gen = torch.Generator().manual_seed(2)
    reused = 0
    Z = torch.randn(1, 6, 3, dtype=DT, generator=gen)
    for _ in range(20):
        expected = _uncached(kern, Z)
        assert torch.allclose(kern(Z, Z), expected, rtol=1e-14, atol=0)
        address = Z.data_ptr()
        del Z
        Z = torch.randn(1, 6, 3, dtype=DT, generator=gen)
        reused += Z.data_ptr() == address
    assert reused > 0  # else the test has not met the case it is about (glibc reuses freed chunks)


def test_inputs_that_need_a_gradient_are_not_cached():
    Z = torch.randn(1, 5, 3, dtype=DT, requires_grad=True)
    kern = _kernel().to(DT)
    k = kern(Z, Z)
    assert not hasattr(kern, "_sqdist_cache")
    (g,) = torch.autograd.grad(k.sum(), [Z])
    assert torch.isfinite(g).all() and float(g.abs().max()) > 0


def test_inference_tensors_are_computed_without_the_cache():
    kern = _kernel().to(DT)
    with torch.inference_mode():
        Z = torch.randn(1, 5, 3, dtype=DT)
        k = kern(Z, Z)
    assert torch.allclose(k, _uncached(kern, Z), rtol=1e-14, atol=0)


def test_a_kernel_holding_the_cache_copies_and_pickles():
    Z = torch.randn(1, 5, 3, dtype=DT)
    kern = _kernel().to(DT)
    k = kern(Z, Z)
    for other in (copy.deepcopy(kern), pickle.loads(pickle.dumps(kern))):
        assert not hasattr(other, "_sqdist_cache")
        assert torch.allclose(other(Z, Z), k, rtol=1e-14, atol=0)


@pytest.mark.parametrize("learn_inducing", [False, True])
def test_model_with_fixed_inducing_inputs_trains_and_copies(learn_inducing):
    """End to end: a model whose K_zz uses the cache trains, and a deep copy (a new buffer: the
    cache is not carried over) gives the same ELBO."""
    import savigp
    from likelihoods import Probit

    gen = torch.Generator().manual_seed(3)
    X = torch.randn(60, 3, dtype=DT, generator=gen)
    Y = (X[:, :1] > 0).to(DT)
    model = savigp.SAVIGP(X, Y, Probit(), RBF(3, 1, lengthscale=1.0, ard=False), inducing_inputs=X[:8],
                          learn_inducing=learn_inducing, seed=0)
    savigp.fit(model, iterations=5, batch_size=30, optimizer="adam", lr=0.05, estimator="quadrature", seed=0,
               final_elbo=False)
    assert hasattr(model.kernel, "_sqdist_cache") is not learn_inducing
    e1 = model.elbo(estimator="quadrature").elbo.detach()
    twin = copy.deepcopy(model)
    assert not hasattr(twin.kernel, "_sqdist_cache")
    assert torch.allclose(twin.elbo(estimator="quadrature").elbo.detach(), e1, rtol=1e-12)
    with torch.no_grad():  # an edit of the model's buffer reaches the kernel
        model.inducing.mul_(1.5)
    assert not torch.allclose(model.elbo(estimator="quadrature").elbo.detach(), e1, rtol=1e-6)
