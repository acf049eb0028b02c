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
    """A tensor is freed and a new one takes its address, with the same shape, strides and version
    (0): the weak reference to the owner tells them apart. The address is reused for certain here:
    both tensors wrap one numpy buffer, rewritten by numpy (no torch version counter moves), so the
    test does not depend on the allocator handing a freed chunk back."""
    import numpy as np

    kern = _kernel().to(DT)
    rng = np.random.default_rng(2)
    buf = np.empty(18)
    for _ in range(3):
        buf[:] = rng.standard_normal(18)
        Z = torch.from_numpy(buf).view(1, 6, 3)
        address, version = Z.data_ptr(), Z._version
        expected = _uncached(kern, Z)
        assert torch.allclose(kern(Z, Z), expected, rtol=1e-14, atol=0)
        assert kern._sqdist_cache is not None  # filled: the next tensor could read it
        del Z, expected
        buf[:] = rng.standard_normal(18)
        Z = torch.from_numpy(buf).view(1, 6, 3)
        assert (Z.data_ptr(), Z._version) == (address, version)  # the case this test is about
        assert torch.allclose(kern(Z, Z), _uncached(kern, Z), rtol=1e-14, atol=0)
        del Z


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


@pytest.mark.parametrize("shared", [False, True])
def test_an_isotropic_kernel_survives_save_and_load(tmp_path, shared):
    """Model files record whether the kernel has one length-scale per input (``kernel_ard``): an
    isotropic RBF (the MNIST experiment's) used to come back as an ARD kernel whose length-scales
    did not fit the file. Loaded, the model gives the same ELBO and predictions."""
    import savigp
    from likelihoods import Probit, Softmax

    gen = torch.Generator().manual_seed(5)
    X = torch.randn(50, 4, dtype=DT, generator=gen)
    if shared:
        lik, Y, kern = Softmax(3), torch.randint(0, 3, (50, 1), generator=gen).to(DT), RBF(4, 1, ard=False)
    else:
        lik, Y, kern = Probit(), (X[:, :1] > 0).to(DT), RBF(4, 1, lengthscale=1.3, ard=False)
    model = savigp.SAVIGP(X, Y, lik, kern, inducing_inputs=X[:6], learn_inducing=False, seed=0)
    savigp.fit(model, iterations=3, batch_size=25, optimizer="adam", lr=0.05, num_samples=20, seed=0,
               final_elbo=False)
    path = tmp_path / "iso.savigp"
    savigp.save(model, str(path))
    loaded = savigp.load(str(path)).model
    assert loaded.kernel.ard is False
    for a, b in zip(model.state_dict().values(), loaded.state_dict().values()):
        assert torch.equal(a, b)
    assert torch.allclose(loaded.predict(X[:10]).latent_mean, model.predict(X[:10]).latent_mean, rtol=1e-12)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_a_captured_cuda_graph_computes_the_distances_itself():
    """A CUDA graph replays without Python, so nothing it captured may come from the cache: an
    in-place edit of the fixed inputs between replays reaches the replayed kernel matrix."""
    kern = _kernel().to(device="cuda", dtype=torch.float32)
    Z = torch.randn(1, 16, 3, device="cuda")
    kern(Z, Z)  # fills the cache outside the capture
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.no_grad():
        for _ in range(2):
            kern(Z, Z)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        out = kern(Z, Z)
    with torch.no_grad():
        Z.mul_(1.7)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.allclose(out, _uncached(kern, Z).detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dims", [[1, 2], [3, 0, 2]], ids=["contiguous", "gathered"])
def test_the_cache_hits_for_an_rbf_inside_a_sum_and_with_active_dims(dims):
    """K(Z, Z) of fixed Z through rbf(active_dims, ard=False) + periodic: the second call reads the kept
    distances (the same tensor), keyed on the Z given (a gathered copy of its columns is a new tensor
    every call), and both calls equal the closed form over the active columns."""
    from savigp.kernels import Periodic

    gen = torch.Generator().manual_seed(3)
    Z = torch.randn(1, 8, 4, dtype=DT, generator=gen)
    rbf = RBF(4, 2, lengthscale=torch.tensor([[0.9], [1.4]]), ard=False, active_dims=dims)
    kern = rbf + Periodic(4, 2, active_dims=[0])
    sub = Z[0][:, dims]
    want = rbf.variance()[:, None, None] * torch.exp(-0.5 * torch.cdist(sub, sub).square() / rbf.lengthscales()[:, :, None] ** 2)
    K1 = kern(Z, Z)
    kept = rbf._sqdist_cache[2]
    K2 = kern(Z, Z)
    assert rbf._sqdist_cache[2] is kept  # a hit: not recomputed
    for K in (K1, K2):
        torch.testing.assert_close(K - kern.parts[1](Z, Z), want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(K2, _uncached(kern, Z), rtol=1e-13, atol=0)
    with torch.no_grad():
        Z[0, 2, dims[0]] += 0.5  # an edit of an active column: recomputed
    assert torch.allclose(kern(Z, Z), _uncached(kern, Z), rtol=1e-13, atol=0) and rbf._sqdist_cache[2] is not kept


def test_a_model_with_fixed_inducing_inputs_reads_the_kept_distances_of_a_composite():
    import savigp
    from likelihoods import Gaussian

    gen = torch.Generator().manual_seed(4)
    X = torch.randn(30, 3, dtype=DT, generator=gen)
    model = savigp.SAVIGP(X, X[:, :1], Gaussian(0.1), kernel="rbf(1, 2, ard=false) + periodic(0) * rbf(0)",
                          num_inducing=6, learn_inducing=False)
    rbf = model.kernel.parts[0]
    model.elbo(estimator="closed-form").elbo.backward()
    kept = rbf._sqdist_cache[2]
    model.elbo(estimator="closed-form").elbo.backward()
    assert rbf._sqdist_cache[2] is kept
