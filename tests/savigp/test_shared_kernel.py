"""A kernel shared by the Q latent functions (``SAVIGP(..., kernel with num_latent=1)`` or
``shared_kernel=True``): K_zz ``(1, M, M)`` is factorized and K_zx ``(1, M, B)`` solved once.

The reference is the same model with Q copies of that kernel and of the inducing inputs: its ELBO
(Bonilla et al. 2019, eq. (17)) is the same function of the parameters, so with one generator the
two ELBOs, the posterior's gradients and the predictions agree to rounding, and the shared
hyper-parameters' (and inducing inputs') gradient is the sum of the Q copies' gradients (the chain
rule through the tied copies)."""
from __future__ import annotations

import pytest
import torch

import savigp
from likelihoods import Softmax
from savigp import SAVIGP
from savigp.kernels import RBF
from savigp.posteriors import _autograd

from conftest import requires_cuda

N, D, Q, M = 120, 4, 3, 12


@pytest.fixture(scope="module")
def data():
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(N, D, generator=gen, dtype=torch.float64)
    Y = torch.randint(0, Q, (N, 1), generator=gen).double()
    return X, Y


def _pair(data, learn_kernel=True, **options):
    """(shared-kernel model, the model with Q equal kernels and inducing inputs), equal parameters."""
    X, Y = data
    kern = dict(ard=True, lengthscale=torch.tensor([1.5, 2.0, 2.5, 3.0]), variance=1.3, learn=learn_kernel)
    shared = SAVIGP(X, Y, Softmax(Q), RBF(D, 1, **kern), num_inducing=M, **options)
    copies = SAVIGP(X, Y, Softmax(Q), RBF(D, Q, **kern), num_inducing=M, **options)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in shared.named_parameters():
            if not name.startswith(("kernel", "inducing")):
                p.add_(0.2 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
        if options.get("learn_inducing"):  # inducing inputs off the k-means centres, the same in both
            shared.inducing.add_(0.1 * torch.randn(shared.inducing.shape, generator=gen, dtype=torch.float64))
    state = {k: v for k, v in shared.state_dict().items() if not k.startswith(("kernel", "inducing"))}
    copies.load_state_dict(state, strict=False)
    with torch.no_grad():
        copies.inducing.copy_(shared.inducing.expand_as(copies.inducing))
    return shared, copies


def _elbo(model, B):
    model.zero_grad()
    terms = model.elbo(torch.arange(B), num_samples=7, generator=torch.Generator().manual_seed(3))
    terms.elbo.backward()
    return terms


@pytest.mark.parametrize("posterior", ["full", "diag"])
@pytest.mark.parametrize("K", [1, 2])
@pytest.mark.parametrize("learn_inducing", [False, True])
@pytest.mark.parametrize("B", [5, 100])  # full: B = 5 takes the A form, B = 100 the P form of the moments
def test_shared_kernel_is_the_model_with_q_equal_kernels(data, posterior, K, learn_inducing, B):
    shared, copies = _pair(data, posterior=posterior, num_components=K, learn_inducing=learn_inducing)
    assert tuple(shared.inducing.shape) == (1, M, D) and tuple(copies.inducing.shape) == (Q, M, D)
    a, b = _elbo(shared, B), _elbo(copies, B)
    for field in ("elbo", "ell", "entropy", "cross_entropy"):
        torch.testing.assert_close(getattr(a, field), getattr(b, field), rtol=1e-10, atol=1e-9)
    for (name, pa), (_, pb) in zip(shared.named_parameters(), copies.named_parameters()):
        if name.startswith("kernel") or name == "inducing":  # tied copies: the gradients add up
            torch.testing.assert_close(pa.grad, pb.grad.sum(0, keepdim=pa.grad.dim() == pb.grad.dim()),
                                       rtol=1e-8, atol=1e-9, msg=name)
        elif pa.grad is not None:
            torch.testing.assert_close(pa.grad, pb.grad, rtol=1e-8, atol=1e-10, msg=name)
    X = data[0][:30]
    pa, pb = shared.predict(X, num_samples=50), copies.predict(X, num_samples=50)
    for field in ("latent_mean", "latent_var", "probabilities"):
        torch.testing.assert_close(getattr(pa, field), getattr(pb, field), rtol=1e-10, atol=1e-12, msg=field)


@pytest.mark.parametrize("posterior", ["full", "diag"])
@pytest.mark.parametrize("B", [5, 100])
def test_a_fixed_shared_kernel_gives_the_same_posterior_gradients(data, posterior, B):
    """No gradient wanted for K_zz (fixed hyper-parameters and inducing inputs): every moment form
    still returns the posterior's gradients of the model with Q copies."""
    shared, copies = _pair(data, learn_kernel=False, posterior=posterior, learn_inducing=False)
    a, b = _elbo(shared, B), _elbo(copies, B)
    torch.testing.assert_close(a.elbo, b.elbo, rtol=1e-10, atol=1e-9)
    grads = [(pa.grad, pb.grad) for pa, pb in zip(shared.posterior.parameters(), copies.posterior.parameters())]
    assert grads and all(ga is not None for ga, _ in grads)
    for ga, gb in grads:
        torch.testing.assert_close(ga, gb, rtol=1e-8, atol=1e-10)


def test_the_backward_pass_solves_once_for_all_latent_functions(data, monkeypatch):
    """The adjoints of K_zx and K_zz are linear in dF/dV: summed over the Q latent functions before
    the triangular solves, which then see a batch of one."""
    shared, _ = _pair(data, posterior="diag")
    batches = []
    real = _autograd.solve_lower

    def spy(L, B, transpose=False):
        batches.append((tuple(L.shape), tuple(B.shape)))
        return real(L, B, transpose=transpose)

    monkeypatch.setattr(_autograd, "solve_lower", spy)
    _elbo(shared, 50)
    assert batches, "the whitened moments did not run"
    assert all(b[1][0] == 1 for b in batches), batches


def test_a_shared_kernel_trains_and_round_trips_through_a_model_file(data, tmp_path):
    X, Y = data
    model = SAVIGP(X, Y, Softmax(Q), "rbf", shared_kernel=True, num_inducing=M, posterior="diag")
    assert model.kernel.num_latent == 1 and model.config["shared_kernel"]
    hist = savigp.fit(model, iterations=30, batch_size=40, num_samples=5, lr=0.05, progress=False)
    assert hist.steps == 30
    path = tmp_path / "shared.savigp"
    savigp.save(model, str(path))
    saved = savigp.load(str(path))
    loaded = saved.model
    assert loaded.kernel.num_latent == 1 and tuple(loaded.inducing.shape) == (1, M, D)
    torch.testing.assert_close(saved.predict(X[:10], num_samples=20).probabilities,
                               model.predict(X[:10], num_samples=20).probabilities)


def test_warm_start_between_shared_kernel_models_keeps_the_elbo(data):
    """A full Gaussian with a shared kernel started from another (:func:`savigp.warm_start`) has its
    ELBO; a diagonal one started from it has the source's means (the moments pass through the
    ``(1, M, M)`` prior factor)."""
    source, _ = _pair(data, posterior="full", learn_inducing=True)
    X, Y = data
    target = SAVIGP(X, Y, Softmax(Q), RBF(D, 1), num_inducing=M, posterior="full", seed=5)
    savigp.warm_start(target, source)
    torch.testing.assert_close(_elbo(target, 60).elbo, _elbo(source, 60).elbo, rtol=1e-10, atol=1e-8)
    diag = SAVIGP(X, Y, Softmax(Q), RBF(D, 1), num_inducing=M, posterior="diag", seed=5)
    savigp.warm_start(diag, source)
    torch.testing.assert_close(diag.posterior.mean, source.posterior.mean, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("options, words", [
    (dict(posterior="diag-u"), "posterior='diag-u'"),
    (dict(posterior="joint"), "posterior='joint'"),
    (dict(posterior="full", mean_basis_size=20), "mean_basis_size=20"),
])
def test_families_without_a_shared_prior_are_refused_by_name(data, options, words):
    X, Y = data
    with pytest.raises(ValueError, match="num_latent=1") as err:
        SAVIGP(X, Y, Softmax(Q), RBF(D, 1), num_inducing=M, **options)
    assert words in str(err.value) and f"num_latent={Q}" in str(err.value)


def test_a_family_alias_is_taken_as_its_family(data):
    X, Y = data
    model = SAVIGP(X, Y, Softmax(Q), RBF(D, 1), num_inducing=M, posterior="diag-whitened")
    assert model.shared_kernel and model.posterior.kind == "diag"


def test_shape_errors_name_the_shared_layout(data):
    X, Y = data
    with pytest.raises(ValueError, match=r"\(1, M, 4\).*shared.*got \(3, 12, 4\)"):
        SAVIGP(X, Y, Softmax(Q), RBF(D, 1), inducing_inputs=torch.zeros(Q, M, D), posterior="diag")
    with pytest.raises(ValueError, match="num_latent=2.*Q=3"):
        SAVIGP(X, Y, Softmax(Q), RBF(D, 2), num_inducing=M)
    with pytest.raises(ValueError, match="shared_kernel=True"):
        SAVIGP(X, Y, Softmax(Q), RBF(D, Q), shared_kernel=True, num_inducing=M)


def test_fit_orthnat_refuses_a_shared_kernel_by_name(data):
    X, Y = data
    model = SAVIGP(X, Y, Softmax(Q), RBF(D, 1), num_inducing=M, posterior="full")
    with pytest.raises(ValueError, match="fit_orthnat.*shared.*num_latent=3"):
        savigp.fit_orthnat(model, 2, batch_size=40, natgrad_step=0.1, num_samples=5, progress=False)


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("posterior", ["full", "diag"])
def test_shared_kernel_on_cuda_is_the_model_with_q_equal_kernels(data, posterior):
    """On CUDA (float64) the shared model's ELBO and gradients are those of the model with Q copies:
    the summed backward solves and the ``(1, M, M)`` factor run on the device."""
    shared, copies = _pair(data, posterior=posterior, learn_inducing=True)
    shared, copies = shared.to("cuda"), copies.to("cuda")
    out = []
    for model in (shared, copies):
        model.zero_grad()
        terms = model.elbo(torch.arange(60, device="cuda"), num_samples=7,
                           generator=torch.Generator(device="cuda").manual_seed(3))
        terms.elbo.backward()
        out.append(terms)
    assert out[0].elbo.device.type == "cuda"
    torch.testing.assert_close(out[0].elbo, out[1].elbo, rtol=1e-10, atol=1e-9)
    for (name, pa), (_, pb) in zip(shared.named_parameters(), copies.named_parameters()):
        if name.startswith("kernel") or name == "inducing":
            torch.testing.assert_close(pa.grad, pb.grad.sum(0, keepdim=pa.grad.dim() == pb.grad.dim()),
                                       rtol=1e-8, atol=1e-9, msg=name)
        elif pa.grad is not None:
            torch.testing.assert_close(pa.grad, pb.grad, rtol=1e-8, atol=1e-10, msg=name)


@pytest.mark.cuda
@requires_cuda
def test_a_shared_kernel_trains_in_a_captured_step_on_cuda(data):
    """float32 on CUDA, as experiments/mnist.py's setting: the step is captured (fit says so) and
    the captured and eager runs agree."""
    X, Y = data
    out = []
    for graphs in (False, True):
        model = SAVIGP(X, Y, Softmax(Q), RBF(D, 1), num_inducing=M, posterior="diag", learn_inducing=True,
                       device="cuda", dtype=torch.float32)
        h = savigp.fit(model, iterations=12, batch_size=40, lr=0.01, num_samples=8, progress=False,
                       cuda_graphs=graphs, log_every=4, seed=5)
        assert h.cuda_graph == graphs
        out.append(torch.cat([p.detach().flatten().cpu() for p in model.parameters()]))
    torch.testing.assert_close(out[0], out[1], rtol=1e-4, atol=1e-5)
