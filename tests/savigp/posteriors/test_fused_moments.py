"""Hand-written backward passes. The whitened marginal moments (``posteriors.whitened_moments``)
against autograd through the Cholesky factor, in both algebraic forms (A = L_k^T V and the middle
matrix P = S_k - I with R = L^-T P), for full and diagonal scales and one or two components."""
import shutil

import pytest
import torch

from savigp.linalg import triangular as _triangular
from savigp.posteriors import whitened_moments

DT = torch.float64


def _kernel(a, b, ls):
    return torch.exp(-0.5 * ((a.unsqueeze(-2) - b.unsqueeze(-3)) ** 2).sum(-1) / ls ** 2)


@pytest.mark.parametrize("block", [0, 3])
@pytest.mark.parametrize("K", [1, 2])
@pytest.mark.parametrize("middle", [False, True])
@pytest.mark.parametrize("diagonal", [False, True])
def test_fused_moments_match_autograd_through_cholesky(monkeypatch, block, K, middle, diagonal):
    """``block = 3`` splits the M = 13 rows into 4 blocks (the blocked triangular products);
    ``block = 0`` disables blocking (dense products)."""
    monkeypatch.setattr(_triangular, "TRIANGULAR_BLOCK", block)
    gen = torch.Generator().manual_seed(3 + 2 * K + int(middle))
    Q, M, B = 2, 13, 17
    Z = torch.randn(Q, M, 3, dtype=DT, generator=gen)
    X = torch.randn(B, 3, dtype=DT, generator=gen)
    ls = torch.tensor(1.3, dtype=DT, requires_grad=True)
    mean = torch.randn(K, Q, M, dtype=DT, generator=gen).requires_grad_()
    if diagonal:
        scale = (torch.rand(K, Q, M, dtype=DT, generator=gen) + 0.3).requires_grad_()
    else:
        scale = (0.5 * torch.randn(K, Q, M, M, dtype=DT, generator=gen).tril() + torch.eye(M, dtype=DT)).requires_grad_()
    g_mean = torch.randn(K, Q, B, dtype=DT, generator=gen)
    g_var = torch.randn(K, Q, B, dtype=DT, generator=gen)

    def run(fused: bool):
        Kzz = _kernel(Z, Z, ls) + 1e-6 * torch.eye(M, dtype=DT)
        Kzx = _kernel(Z, X.expand(Q, B, 3), ls)
        if fused:
            fm, dv = whitened_moments(Kzz, Kzx, torch.linalg.cholesky(Kzz.detach()), mean, scale, diagonal,
                                      None, middle=middle)
        else:
            V = torch.linalg.solve_triangular(torch.linalg.cholesky(Kzz), Kzx, upper=False)
            fm = torch.einsum("kqm,qmb->kqb", mean, V)
            S = torch.diag_embed(scale ** 2) if diagonal else scale @ scale.transpose(-1, -2)
            dv = torch.einsum("qmb,kqmn,qnb->kqb", V, S, V) - (V * V).sum(-2)
        F = (fm * g_mean).sum() + (dv * g_var).sum()
        grads = list(torch.autograd.grad(F, [ls, mean, scale]))
        if not diagonal:
            grads[2] = grads[2].tril()  # the scale is lower triangular: only that part is a parameter
        return [F.detach()] + grads

    for name, a, b in zip(["value", "d_lengthscale", "d_mean", "d_scale"], run(True), run(False)):
        tol = 1e-10 * float(b.abs().max()) + 1e-300
        assert float((a - b).abs().max()) <= tol, (name, float((a - b).abs().max()), tol)


@pytest.mark.parametrize("block", [0, 3, 5, 8])
def test_blocked_triangular_products_match_dense_products(monkeypatch, block):
    """Each blocked product of ``savigp.linalg.triangular`` against the dense expression it replaces,
    for 1 to 8 blocks (M = 23) and a batch of two; the zero parts must be exactly zero."""
    monkeypatch.setattr(_triangular, "TRIANGULAR_BLOCK", block)
    gen = torch.Generator().manual_seed(11 + block)
    M, N = 23, 9
    L = torch.randn(2, M, M, dtype=DT, generator=gen).tril() + 3.0 * torch.eye(M, dtype=DT)
    X = torch.randn(2, M, M, dtype=DT, generator=gen)
    S = X + X.transpose(-1, -2)
    Y = torch.randn(2, M, N, dtype=DT, generator=gen)
    cases = {
        "lower_factor_gram": (_triangular.lower_factor_gram(L), L @ L.transpose(-1, -2)),
        "lower_of_sym_times_lower": (_triangular.lower_of_sym_times_lower(S, L), torch.tril(S @ L)),
        "lower_mm": (_triangular.lower_mm(L, Y), L @ Y),
        "upper_t_mm": (_triangular.upper_t_mm(L, Y), L.transpose(-1, -2) @ Y),
        "lower_of_product": (_triangular.lower_of_product(X, S), torch.tril(X @ S.transpose(-1, -2))),
        "lower_of_product symmetric": (_triangular.lower_of_product(X, X, symmetric=True), X @ X.transpose(-1, -2)),
        "solve_lower": (_triangular.solve_lower(L, Y), torch.linalg.solve(L, Y)),
        "solve_lower transpose": (_triangular.solve_lower(L, Y, transpose=True),
                                  torch.linalg.solve(L.transpose(-1, -2), Y)),
    }
    # the mixture entropy (K > 1) differentiates through lower_factor_gram: with a graph to record
    # it must take a path that records one (bmm(out=...) does not)
    Lg = L.clone().requires_grad_()
    W = torch.randn(2, M, M, dtype=DT, generator=gen)
    got_grad, = torch.autograd.grad((_triangular.lower_factor_gram(Lg) * W).sum(), Lg)
    want_grad, = torch.autograd.grad(((Lg @ Lg.transpose(-1, -2)) * W).sum(), Lg)
    # (only the lower triangle is a gradient: the entries above the diagonal of L are not variables)
    cases["lower_factor_gram gradient"] = (got_grad.tril(), want_grad.tril())
    for name, (got, want) in cases.items():
        assert got.shape == want.shape, (name, got.shape, want.shape)
        err = float((got - want).abs().max())
        assert err <= 1e-12 * float(want.abs().max()), (name, err)
        if name in ("lower_of_sym_times_lower", "lower_of_product"):
            assert bool((got.triu(1) == 0).all()), f"{name}: nonzero entries above the diagonal"


def test_rbf_hand_written_backward_matches_finite_differences():
    """The RBF kernel's fused forward (augmented product) and backward pass (``kernels._ScaledRBF``):
    values against the formula, gradients against finite differences (torch.autograd.gradcheck)."""
    from savigp.kernels.fused import ScaledRBF as _ScaledRBF

    gen = torch.Generator().manual_seed(11)
    a = torch.randn(2, 5, 3, dtype=DT, generator=gen).requires_grad_()
    b = torch.randn(2, 4, 3, dtype=DT, generator=gen).requires_grad_()
    log_var = torch.randn(2, dtype=DT, generator=gen).requires_grad_()
    k = _ScaledRBF.apply(a, b, log_var)
    ref = torch.exp(log_var[:, None, None] - 0.5 * ((a[:, :, None, :] - b[:, None, :, :]) ** 2).sum(-1))
    assert torch.allclose(k, ref, rtol=1e-13, atol=0)
    assert torch.autograd.gradcheck(_ScaledRBF.apply, (a, b, log_var))
    # K_zz = k(Z, Z): the same tensor as both arguments, its gradient the sum of both
    assert torch.autograd.gradcheck(lambda z, lv: _ScaledRBF.apply(z, z, lv), (a, log_var))
    # at coincident inputs the value is never above the variance (r^2 clamped at 0)
    kk = _ScaledRBF.apply(a, a, log_var).detach()
    assert bool((kk.diagonal(dim1=-2, dim2=-1) <= log_var.detach().exp()[:, None]).all())


def test_compiled_elementwise_chains_match_eager():
    """SAVIGP_COMPILE / set_compile: the compiled score estimator and middle-form variance chains give
    the eager ELBO and gradients (up to rounding); a compilation failure falls back to eager code."""
    import savigp
    from likelihoods import Logistic
    from savigp.runtime import compilation as _compile

    gen = torch.Generator().manual_seed(5)
    X = torch.randn(60, 2, dtype=DT, generator=gen)
    Y = (X[:, :1] > 0).to(DT)
    model = savigp.SAVIGP(X, Y, Logistic(), num_inducing=8)  # B = 60 >= 1.5 M: the middle form
    with torch.no_grad():
        model.posterior.mean.normal_(generator=gen)
    params = [p for p in model.parameters() if p.requires_grad]

    def run():
        terms = model.elbo(estimator="score", num_samples=20, generator=torch.Generator().manual_seed(0))
        return [terms.elbo.detach()] + list(torch.autograd.grad(terms.elbo, params))

    before = _compile.compile_enabled()
    try:
        _compile.set_compile(False)
        eager = run()
        _compile.set_compile(True)
        compiled = run()
        still_on = _compile.compile_enabled()  # False: compilation failed and the eager code ran
    finally:
        _compile.set_compile(before)
    for a, b in zip(compiled, eager):
        assert torch.allclose(a, b, rtol=1e-9, atol=1e-12), float((a - b).abs().max())
    if shutil.which("g++") or shutil.which("c++"):
        assert still_on, "torch.compile failed although a C++ compiler is present"


@pytest.mark.parametrize("K", [1, 2])
def test_fused_u_space_parameters_match_autograd_through_cholesky(K):
    """The diagonal mixture over u's prior-dependent terms (m = L_zz w, log c = -1/2 log diag K_zz^-1,
    log|K_zz|) by the hand-written backward (posteriors._u_space, no second factorization) against
    autograd through a Cholesky factorization of the same jittered K_zz: equal values, and gradients
    for the kernel, the inducing inputs and w, d to 1e-10 of their size."""
    import savigp
    from likelihoods import Logistic

    gen = torch.Generator().manual_seed(11 + K)
    X = torch.randn(40, 2, dtype=DT, generator=gen)
    model = savigp.SAVIGP(X, (X[:, :1] > 0).double(), Logistic(), num_inducing=9, posterior="diag-u",
                          num_components=K)
    with torch.no_grad():
        for p in model.posterior.parameters():
            p.add_(0.4 * torch.randn(p.shape, dtype=p.dtype, generator=gen))
    weights = [torch.randn(s, dtype=DT, generator=gen) for s in ((K, 1, 9), (K, 1, 9), (1, 9), (1,))]
    params = list(model.kernel.parameters()) + [model.inducing, model.posterior.mean, model.posterior.raw_scale]

    def run(fused: bool):
        Kzz, Lzz, rel = model._prior_parts()
        u = model.posterior.u_parameters(Kzz, Lzz if fused else None, rel)
        F = sum((w * t).sum() for w, t in zip(weights, (u.mean, u.sd, u.log_cond_sd, u.logdet)))
        return [u.mean.detach(), u.sd.detach(), u.logdet.detach()] + list(torch.autograd.grad(F, params))

    for i, (a, b) in enumerate(zip(run(True), run(False))):
        tol = 1e-10 * float(b.abs().max()) + 1e-300
        assert float((a - b).abs().max()) <= tol, (i, float((a - b).abs().max()), tol)


def test_isotropic_rbf_shares_distances_and_matches_the_ard_path():
    """``RBF(ard=False)`` on inputs shared by the latent functions (``kernels._IsotropicRBF``): one
    distance matrix for all Q. Values and gradients equal the per-latent (ARD) path's; gradients of
    the inputs, length-scales and variances against finite differences (gradcheck)."""
    from savigp.kernels.stationary import RBF, _IsotropicRBF

    gen = torch.Generator().manual_seed(12)
    x1 = torch.randn(6, 3, dtype=DT, generator=gen).requires_grad_()
    x2 = torch.randn(5, 3, dtype=DT, generator=gen).requires_grad_()
    lv = torch.randn(3, dtype=DT, generator=gen).requires_grad_()
    c = (-0.5 / (0.5 + torch.rand(3, dtype=DT, generator=gen))).requires_grad_()
    assert torch.autograd.gradcheck(_IsotropicRBF.apply, (x1, x2, lv, c))
    assert torch.autograd.gradcheck(lambda z, v, cc: _IsotropicRBF.apply(z, z, v, cc), (x1, lv, c))
    kern = RBF(3, 3, lengthscale=torch.tensor([[0.7], [1.3], [2.1]]), variance=torch.tensor([0.5, 1.0, 2.0]), ard=False)
    k_iso = kern(x1, x2)  # (Q, N1, N2) from one distance matrix
    k_ard = kern(x1.unsqueeze(0).expand(3, 6, 3), x2.unsqueeze(0).expand(3, 5, 3))  # the per-latent path
    assert torch.allclose(k_iso, k_ard, rtol=1e-12, atol=1e-14)
    w = torch.randn(3, 6, 5, dtype=DT, generator=gen)
    params = [x1, x2] + list(kern.parameters())
    g_iso = torch.autograd.grad((w * k_iso).sum(), params)
    g_ard = torch.autograd.grad((w * k_ard).sum(), params)
    for a, b in zip(g_iso, g_ard):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)


def test_model_computes_kernels_once_for_shared_fixed_inducing_inputs():
    """``SAVIGP.kernel_inducing``: fixed inducing inputs equal for every latent function go to the
    kernel as one ``(1, M, D)`` set; the ELBO and its gradients equal those of the per-latent
    ``(Q, M, D)`` path; after one latent function's inputs change in place, all Q sets are used."""
    import savigp
    from likelihoods import Softmax
    from savigp.kernels.stationary import RBF

    gen = torch.Generator().manual_seed(4)
    X = torch.randn(40, 3, dtype=DT, generator=gen)
    Y = torch.randint(0, 3, (40, 1), generator=gen).to(DT)
    model = savigp.SAVIGP(X, Y, Softmax(3), RBF(3, 3, lengthscale=1.5, ard=False), inducing_inputs=X[:7],
                          learn_inducing=False, seed=0)
    assert tuple(model.kernel_inducing().shape) == (1, 7, 3)

    def elbo_and_grads():
        terms = model.elbo(num_samples=20, estimator="reparam", generator=torch.Generator().manual_seed(1))
        params = [p for p in model.parameters() if p.requires_grad]
        return terms.elbo.detach(), torch.autograd.grad(terms.elbo, params)

    shared = elbo_and_grads()
    full = model.inducing
    model.kernel_inducing = lambda: full  # the per-latent path
    per_latent = elbo_and_grads()
    del model.kernel_inducing
    assert torch.allclose(shared[0], per_latent[0], rtol=1e-12)
    for a, b in zip(shared[1], per_latent[1]):
        assert torch.allclose(a, b, rtol=1e-9, atol=1e-11)
    with torch.no_grad():
        model.inducing[1, 0, 0] += 0.5
    assert tuple(model.kernel_inducing().shape) == (3, 7, 3)
