"""Composite kernels everywhere a kernel goes in the engine.

Each model is compared with a twin whose kernel computes the same covariance by its closed form,
entry by entry (:class:`_Naive`: no fused RBF backward, no distance cache, no batched periodic
product, no slicing of a KernelList's inputs): every posterior family (K = 1 and 2), a kernel shared by
the latent functions, a KernelList of composites, dense models, every mean head, fixed and learned
inducing inputs. The ELBO (closed form), its gradient in every parameter and the predictions must
agree to rounding. Besides: float32 models, warm starts, White's identity semantics (s I for
kernel(X, X) with the same tensor, 0 between different tensors) in the mean heads' bases, and the
kernels' dtype and device following.
"""
from __future__ import annotations

import copy
import math

import pytest
import torch

import savigp
from likelihoods import MultiGaussian
from savigp import _choices
from savigp.kernels import (RBF, Constant, KernelList, Linear, Matern52, Periodic, Product, RationalQuadratic,
                            Scale, Sum, White, build_kernel, parse_kernel)
from savigp.kernels.base import Kernel

DT = torch.float64
N, D, Q, M = 40, 2, 2, 6
#: every family, a product, a scale, active_dims (contiguous and not), the fast isotropic RBF, White
EXPRESSION = "rbf + scale(periodic(0, period=1.3) * rbf(0)) + linear(1) * matern52(ard=false) + rbf(ard=false) + white"


# ---------------------------------------------------------------- the closed-form twin
def _columns(k, x):
    return x if k.active_dims is None else x[..., list(k.active_dims)]


def _pairs(k, x1, x2):
    """x1_i - x2_j over the active columns, (Q or 1, N1, N2, d)."""
    a, b = _columns(k, x1), _columns(k, x2)
    return a.unsqueeze(-2) - b.unsqueeze(-3)


def _naive(k, x1, x2, same):
    """The Q kernel matrices (Q, N1, N2) of ``k`` by its closed form (Rasmussen & Williams 2006, §4.2;
    MacKay 1998; Duvenaud et al. 2013), for inputs (N, D) or (Q or 1, N, D)."""
    if isinstance(k, Sum):
        return sum(_naive(p, x1, x2, same) for p in k.parts)
    if isinstance(k, Product):
        return math.prod(_naive(p, x1, x2, same) for p in k.parts)
    if isinstance(k, Scale):
        return k.variance()[:, None, None] * _naive(k.base, x1, x2, same)
    if isinstance(k, KernelList):
        out, start = [], 0
        for part in k.parts:
            def rows(x):
                return x[start:start + part.num_latent] if x.dim() == 3 and x.shape[0] == k.num_latent > 1 else x
            out.append(_naive(part, rows(x1), rows(x2), same).expand(part.num_latent, x1.shape[-2], x2.shape[-2]))
            start += part.num_latent
        return torch.cat(out)
    s = k.variance()[:, None, None]
    n1, n2 = x1.shape[-2], x2.shape[-2]
    if isinstance(k, White):
        return s * torch.eye(n1, dtype=x1.dtype) if same else x1.new_zeros(k.num_latent, n1, n2)
    if isinstance(k, Constant):
        return s * x1.new_ones(k.num_latent, n1, n2)
    if isinstance(k, Linear):
        c = k.offset[:, None, :]
        return s * ((_columns(k, x1) - c) @ (_columns(k, x2) - c).transpose(-1, -2))
    if isinstance(k, Periodic):
        diff = _pairs(k, x1, x2)
        p, ls = k.period()[:, None, None, :], k.lengthscales()[:, None, None, :]
        return s * torch.exp(-2 * (torch.sin(math.pi * diff / p) / ls).square().sum(-1))
    r2 = (_pairs(k, x1, x2) / k.lengthscales()[:, None, None, :]).square().sum(-1)
    if isinstance(k, RBF):
        return s * torch.exp(-0.5 * r2)
    r = torch.sqrt(r2 + 1e-300)
    if isinstance(k, Matern52):
        return s * (1 + math.sqrt(5) * r + 5 * r2 / 3) * torch.exp(-math.sqrt(5) * r)
    if isinstance(k, RationalQuadratic):
        a = k.alpha()[:, None, None]
        return s * (1 + r2 / (2 * a)) ** (-a)
    raise TypeError(type(k).__name__)


class _Naive(Kernel):
    """The same covariance as ``inner`` (whose parameters it holds), computed by :func:`_naive`."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self._set_inputs(inner.input_dim, inner.num_latent, None)

    def forward(self, x1, x2):
        self._check(x1, "x1"), self._check(x2, "x2")
        return _naive(self.inner, x1, x2, x1 is x2).expand(self.num_latent, x1.shape[-2], x2.shape[-2])

    def diag(self, x):
        return self(x, x).diagonal(dim1=-2, dim2=-1)


# ---------------------------------------------------------------- models and their twins
def _data(n=N, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = 3 * torch.rand(n, D, generator=g, dtype=DT)
    Y = torch.stack([torch.sin(3 * X[:, 0]), X[:, 1] * torch.cos(2 * X[:, 0])], -1) + 0.1 * torch.randn(n, Q, generator=g, dtype=DT)
    return X, Y


def _twins(kernel=EXPRESSION, n=N, **options):
    """A model with ``kernel`` and its twin with the closed-form kernel, q(u) moved off the prior alike."""
    X, Y = _data(n)
    a = savigp.SAVIGP(X, Y, MultiGaussian(Q, 0.3), kernel=kernel, num_inducing=M, seed=0, **options)
    with torch.no_grad():  # move the hyper-parameters and q(u) off their starts
        g = torch.Generator().manual_seed(1)
        for name, p in a.named_parameters():
            if not name.startswith("inducing"):
                p.add_(0.2 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    b = savigp.SAVIGP(X, Y, MultiGaussian(Q, 0.3), kernel=_Naive(copy.deepcopy(a.kernel)), num_inducing=M, seed=0,
                      **options)
    b.load_state_dict({(k.replace("kernel.", "kernel.inner.", 1) if k.startswith("kernel.") else k): v
                       for k, v in a.state_dict().items()})
    return a, b


def _gradients(model):
    model.zero_grad()
    model.elbo(estimator="closed-form").elbo.backward()
    return {n.replace("kernel.inner.", "kernel."): p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _assert_twins_agree(a, b, rtol=1e-9):
    ea, eb = a.elbo(estimator="closed-form").elbo.detach(), b.elbo(estimator="closed-form").elbo.detach()
    assert torch.isfinite(ea) and abs(float(ea - eb)) <= rtol * abs(float(eb)), (float(ea), float(eb))
    ga, gb = _gradients(a), _gradients(b)
    assert set(ga) == set(gb)
    moved = [n for n in ga if n.startswith("kernel.") and float(ga[n].abs().max()) > 0]
    assert len(moved) == sum(1 for n, _ in a.kernel.named_parameters()), ("kernel parameters without gradient", moved)
    for n in ga:
        torch.testing.assert_close(ga[n], gb[n], rtol=0, atol=rtol * max(1.0, float(gb[n].abs().max())), msg=n)
    Xt = _data(9, seed=5)[0]
    for x, y in zip(a.predict_latent(Xt), b.predict_latent(Xt)):
        torch.testing.assert_close(x, y, rtol=0, atol=rtol * max(1.0, float(y.abs().max())))
    pa, pb = a.predict(Xt), b.predict(Xt)
    torch.testing.assert_close(pa.mean, pb.mean, rtol=rtol, atol=rtol)
    torch.testing.assert_close(pa.variance, pb.variance, rtol=rtol, atol=rtol)
    Yt = _data(9, seed=5)[1]
    torch.testing.assert_close(a.log_predictive_density(Xt, Yt), b.log_predictive_density(Xt, Yt), rtol=rtol, atol=rtol)


def test_the_twin_is_the_kernel():
    """The closed-form twin itself against the composite (so the twins below test the engine)."""
    X, _ = _data()
    kernel = build_kernel(parse_kernel(EXPRESSION, input_dim=D), D, Q, lengthscale=lambda dims, ard: 0.8)
    twin = _Naive(kernel)
    for x1, x2 in ((X, X), (X[:7], X[3:12]), (X.expand(Q, N, D), X.expand(Q, N, D)[:, :5])):
        torch.testing.assert_close(kernel(x1, x2), twin(x1, x2), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(kernel.diag(X), twin.diag(X), rtol=1e-12, atol=1e-12)
    with torch.no_grad():
        assert float(kernel(X, X.clone()).diagonal(dim1=-2, dim2=-1).sub(kernel.diag(X)).abs().min()) > 0.1  # White


COMPOSITES = {
    "expression": EXPRESSION,
    "gathered-columns": "matern52(2, 0) * periodic(2, period=0.7) + rq(0) + white(0)",
    "scaled-list": {"list": [{"num_latent": 1, "kernel": {"scale": parse_kernel("rbf(ard=false) * linear(2) + white", input_dim=3)}},
                             {"num_latent": 1, "kernel": parse_kernel("periodic(0, 2) + matern12(1)", input_dim=3)}]},
}


@pytest.mark.parametrize("name", COMPOSITES)
def test_the_kernel_kit_passes_on_composites(name):
    """Shapes, diagonal, symmetry, PSD, rows, active_dims, stationarity, gradcheck (float64), dtype and
    device following, for composites built from expressions and specs (D = 3, Q = 2)."""
    from savigp.testing import check_kernel

    spec = COMPOSITES[name]
    spec = parse_kernel(spec, input_dim=3) if isinstance(spec, str) else spec
    kernel = build_kernel(spec, 3, Q, lengthscale=lambda dims, ard: 0.9)
    report = check_kernel(kernel, X1=1.5 * _data(8, seed=3)[0].repeat(1, 2)[:, :3], X2=_data(5, seed=4)[0].repeat(1, 2)[:, :3])
    assert report["gradients"].status == "passed" and report["positive_semidefinite"].status == "passed"
    if name == "gathered-columns":  # column 1 unread
        assert report["active_dims"].status == "passed" and report["stationary"].status == "passed"


FAMILIES = [(kind, K) for kind in _choices.POSTERIORS.names() for K in (1, 2) if not (kind == "joint" and K == 2)]


@pytest.mark.parametrize("kind, K", FAMILIES)
@pytest.mark.parametrize("learn_inducing", [True, False], ids=["learned-Z", "fixed-Z"])
def test_every_posterior_family_with_a_composite_kernel(kind, K, learn_inducing):
    a, b = _twins(posterior=kind, num_components=K, learn_inducing=learn_inducing)
    _assert_twins_agree(a, b)


@pytest.mark.parametrize("kind", [n for n in savigp.posteriors.POSTERIORS.names() if savigp.posteriors.POSTERIORS[n].shared_kernel])
def test_a_composite_kernel_shared_by_the_latent_functions(kind):
    a, b = _twins(posterior=kind, shared_kernel=True, learn_inducing=False)
    assert a.shared_kernel and a.kernel.num_latent == 1 and a.inducing.shape[0] == 1
    _assert_twins_agree(a, b)


def test_a_kernel_list_of_composites():
    spec = {"list": [{"num_latent": 1, "kernel": parse_kernel("rbf + periodic(0) * rbf(0) + white", input_dim=D)},
                     {"num_latent": 1, "kernel": parse_kernel("linear(1) * rbf(ard=false) + constant", input_dim=D)}]}
    for learn in (True, False):
        a, b = _twins(spec, learn_inducing=learn)
        assert isinstance(a.kernel, KernelList)
        _assert_twins_agree(a, b)


@pytest.mark.parametrize("kind", ["full", "diag-u"])
def test_dense_models_with_a_composite_kernel(kind):
    a, b = _twins(n=15, dense=True, posterior=kind)
    assert a.num_inducing == 15
    _assert_twins_agree(a, b)


@pytest.mark.parametrize("basis", _choices.MEAN_HEADS.names())
def test_every_mean_head_with_a_composite_kernel(basis):
    a, b = _twins(mean_basis_size=5, mean_basis=basis)
    _assert_twins_agree(a, b)


# ---------------------------------------------------------------- White in the mean heads' bases
def _white_head(basis="orthogonal", G=12):
    X, Y = _data()
    model = savigp.SAVIGP(X, Y, MultiGaussian(Q, 0.3), kernel="rbf + white(variance=0.5)", num_inducing=M,
                          mean_basis_size=G, mean_basis=basis, seed=0)
    with torch.no_grad():
        model.mean_head.a.copy_(torch.randn(model.mean_head.a.shape, generator=torch.Generator().manual_seed(2), dtype=DT))
    return model


def test_white_in_a_chunked_kernel_vector_product():
    """K(gamma, gamma) a holds White's s a (the same tensor twice) whether or not the product is formed
    in blocks of columns; K(X, gamma) a (different tensors) holds none."""
    from savigp.mean_heads.orthogonal_basis import kernel_matvec

    model = _white_head()
    kernel, gamma, a = model.kernel, model.mean_head.gamma, model.mean_head.a
    want = _Naive(kernel)(gamma, gamma) @ a.unsqueeze(-1)
    for max_entries in (None, Q * 12 * 5, Q * 12):  # whole, blocks of 5 columns, of 1
        torch.testing.assert_close(kernel_matvec(kernel, gamma, gamma, a, max_entries=max_entries), want.squeeze(-1),
                                   rtol=1e-12, atol=1e-12)
    X = model.train_x[:7]
    torch.testing.assert_close(kernel_matvec(kernel, X, gamma, a, max_entries=Q * 7 * 5),
                               (_Naive(kernel)(X, gamma) @ a.unsqueeze(-1)).squeeze(-1), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("basis", _choices.MEAN_HEADS.names())
def test_white_in_the_sampled_kl_columns(basis):
    """Every column sampled once (a permutation of all G), the column-sampled quadratic a^T K_gamma a
    and the residual estimate equal the exact ones, White's s |a|^2 included."""
    model = _white_head(basis)
    head, kernel = model.mean_head, model.kernel
    G = head.size
    idx = torch.stack([torch.randperm(G, generator=torch.Generator().manual_seed(q)) for q in range(Q)])
    with torch.no_grad():
        exact = head.quadratic(kernel)
        assert float(exact - _naive(kernel, head.gamma, head.gamma, False).mul(head.a.unsqueeze(-2)).mul(
            head.a.unsqueeze(-1)).sum()) == pytest.approx(0.5 * float(head.a.square().sum()), rel=1e-10)
        torch.testing.assert_close(head._sampled_kernel_quadratic(kernel, idx), exact, rtol=1e-12, atol=0)
        if head.orthogonal:
            Z, Lzz = model.inducing, model.prior_factor()
            kl = head.kl(kernel, Z, Lzz, columns=None)
            w = head.basis_terms(kernel, Z, Lzz).w
            torch.testing.assert_close(0.5 * head._sampled_residual_quadratic(kernel, Z, w, idx), kl, rtol=1e-10, atol=0)


# ---------------------------------------------------------------- float32, warm starts, fitting
def test_a_float32_model_with_a_composite_kernel():
    """Every parameter, K_zz and the predictions in float32, the ELBO within float32 rounding of the
    float64 model's; a few training steps stay finite and float32."""
    X, Y = _data()
    models = {dt: savigp.SAVIGP(X, Y, MultiGaussian(Q, 0.3), kernel=EXPRESSION, num_inducing=M, seed=0, dtype=dt,
                                mean_basis_size=4) for dt in (torch.float32, DT)}
    m32, m64 = models[torch.float32], models[DT]
    with torch.no_grad():  # q(u) and the head's coefficients off their starts, alike
        g = torch.Generator().manual_seed(1)
        for name, p in m64.named_parameters():
            if name.startswith(("posterior", "mean_head.a")):
                p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    m32.load_state_dict(m64.state_dict())
    assert {p.dtype for p in m32.parameters()} == {torch.float32}
    assert m32.prior_factor().dtype == torch.float32
    e32, e64 = (float(m.elbo(estimator="closed-form").elbo.detach()) for m in (m32, m64))
    assert abs(e32 - e64) < 1e-4 * abs(e64), (e32, e64)
    Xt = _data(9, seed=5)[0]
    assert m32.predict(Xt).mean.dtype == torch.float32
    for a, b in zip(m32.predict_latent(Xt), m64.predict_latent(Xt)):  # (predict draws differ by dtype)
        assert a.dtype == torch.float32
        torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-5)
    savigp.fit(m32, iterations=5, lr=0.01, progress=False, seed=0)
    assert {p.dtype for p in m32.parameters()} == {torch.float32}
    assert all(bool(torch.isfinite(p).all()) for p in m32.parameters())


@pytest.mark.parametrize("kind, K", [("full", 2), ("diag", 1), ("diag-u", 2)])
def test_warm_start_copies_a_composite_kernel(kind, K):
    """The composite's every hyper-parameter comes from the source; a full K = 1 target holds the
    source's q(u) and has its ELBO."""
    X, Y = _data()
    source = savigp.SAVIGP(X, Y, MultiGaussian(Q, 0.3), kernel=EXPRESSION, num_inducing=M, seed=0)
    savigp.fit(source, iterations=5, lr=0.05, progress=False, seed=0, estimator="closed-form")
    for target_kind, target_K in ((kind, K), ("full", 1)):
        model = savigp.SAVIGP(X, Y, MultiGaussian(Q, 0.3), kernel=EXPRESSION, num_inducing=M, seed=1,
                              posterior=target_kind, num_components=target_K)
        savigp.warm_start(model, source)
        for (name, p), (_, q) in zip(model.kernel.named_parameters(), source.kernel.named_parameters()):
            assert torch.equal(p, q), name
    e, want = (float(m.elbo(estimator="closed-form").elbo.detach()) for m in (model, source))
    assert abs(e - want) < 1e-9 * abs(want), (e, want)


def test_a_product_fuses_its_exponential_factors_and_multiplies_the_rest():
    """periodic * linear * scale(rbf): the periodic and scaled-RBF factors as one fused exponential
    (Kernel.exp_features), the linear one multiplied in; values and gradients equal the factors' own
    product (1e-12), on inputs shared by the latent functions and per latent function."""
    X = _data(9, seed=6)[0]
    p, lin, r = Periodic(D, Q, period=[0.8, 1.7]), Linear(D, Q, active_dims=[1], offset=0.3), Scale(RBF(D, Q), variance=[0.5, 2.0])
    kernel = p * lin * r
    from savigp.kernels.fused import joined_features
    assert len(joined_features(kernel.parts, X, X, Q)[1]) == 1  # the fused seam: linear is the one left out
    assert (p * r).exp_features(X, X) is not None and kernel.exp_features(X, X) is None
    for x1, x2 in ((X, X), (X[:4], X[2:]), (X.expand(Q, 9, D), X.expand(Q, 9, D)[:, :3])):
        got = kernel(x1, x2)
        want = p(x1, x2) * lin(x1, x2) * r(x1, x2)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        W = torch.randn(got.shape, generator=torch.Generator().manual_seed(0), dtype=DT)
        g1 = torch.autograd.grad((W * got).sum(), list(kernel.parameters()))
        g2 = torch.autograd.grad((W * want).sum(), list(kernel.parameters()))
        for a, b in zip(g1, g2):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
