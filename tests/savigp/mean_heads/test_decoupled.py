"""Tests of the orthogonally decoupled mean head (Salimbeni et al. 2018) and the natural-gradient updates.

Closed forms are compared at float64 round-off; Monte Carlo estimates against 4 standard errors
computed from the draws themselves.
"""
from __future__ import annotations

import math

import pytest
import torch

from conftest import requires_cuda, sine_data
from likelihoods import Gaussian, Logistic, MultiGaussian
from savigp import SAVIGP, fit
from savigp.mean_heads.orthogonal_basis import kernel_matvec
from savigp.mean_heads.heads import OrthogonalMeanHead
from savigp.testing.mean_heads import check_mean_head, explicit_component_kl, randomize
from savigp.training.natural_gradients import (
    fit_orthnat,
    natural_gradient_step,
    natural_update,
)

cuda = pytest.mark.cuda


# ---------------------------------------------------------------------- helpers
def _collapsed_bound(model, y):
    """Titsias' collapsed bound for a Gaussian likelihood with targets y (N,), mean mu."""
    with torch.no_grad():
        Lzz = model.prior_factor()
        V = torch.linalg.solve_triangular(Lzz, model.kernel(model.inducing, model.train_x), upper=False)[0]
        s2 = model.likelihood.variance()
        N = y.shape[0]
        C = V.T @ V + s2 * torch.eye(N, dtype=V.dtype)
        r = y - model.prior_mean[0]
        Lc = torch.linalg.cholesky(C)
        alpha = torch.linalg.solve_triangular(Lc, r.unsqueeze(-1), upper=False).squeeze(-1)
        lml = -0.5 * (N * math.log(2 * math.pi) + 2 * torch.log(Lc.diagonal()).sum() + (alpha * alpha).sum())
        return float(lml - 0.5 / s2 * (model.kernel.diag(model.train_x)[0] - (V * V).sum(0)).sum())


def _head_shift(model, X):
    with torch.no_grad():
        Lzz = model.prior_factor()
        V = torch.linalg.solve_triangular(Lzz, model.kernel(model.inducing, X), upper=False)
        return model.mean_head.mean_shift(X, model.kernel, model.inducing, Lzz, V)


# ---------------------------------------------------------------------- a_gamma = 0 is the coupled model
@pytest.mark.parametrize("posterior,K,lik", [("full", 1, "gauss"), ("diag", 2, "logistic")])
def test_zero_head_equals_coupled_exactly(posterior, K, lik):
    X, Y = sine_data(80)
    if lik == "gauss":
        make_lik, est = (lambda: Gaussian(0.1)), "closed-form"
    else:
        Y = torch.sign(Y)
        make_lik, est = Logistic, "score"
    coupled = SAVIGP(X, Y, make_lik(), num_inducing=7, posterior=posterior, num_components=K)
    assert coupled.mean_head is None  # mean_basis_size = 0
    head = SAVIGP(X, Y, make_lik(), num_inducing=7, posterior=posterior, num_components=K, mean_basis_size=25)
    randomize(coupled, head_scale=0.0)
    head.load_state_dict(coupled.state_dict(), strict=False)
    assert float(head.mean_head.a.detach().abs().max()) == 0.0
    # the head's contributions are exact zeros ...
    Xs = torch.randn(30, 2, dtype=torch.float64)
    assert torch.equal(_head_shift(head, Xs), torch.zeros(1, 30, dtype=torch.float64))
    with torch.no_grad():
        assert float(head.mean_head.kl(head.kernel, head.inducing, head.prior_factor())) == 0.0
    # ... so the ELBO, its gradients and the predictions are the coupled model's. (Bitwise equality
    # is not asserted: MKL's results for the identical computation may differ in the last bit
    # with the memory alignment of the temporaries, 1e-16 here.)
    t0 = coupled.elbo(num_samples=50, estimator=est, generator=torch.Generator().manual_seed(3))
    t1 = head.elbo(num_samples=50, estimator=est, generator=torch.Generator().manual_seed(3))
    assert float(t1.elbo.detach()) == pytest.approx(float(t0.elbo.detach()), rel=1e-14, abs=1e-14)
    assert t1.mean_head_kl == 0.0
    t0.elbo.backward()
    t1.elbo.backward()
    for p0, p1 in [(coupled.posterior.mean, head.posterior.mean), (coupled.inducing, head.inducing),
                   (coupled.kernel.lengthscales.raw, head.kernel.lengthscales.raw)]:
        assert torch.allclose(p0.grad, p1.grad, rtol=1e-12, atol=1e-12)
    for a, b in zip(coupled.predict_latent(Xs), head.predict_latent(Xs)):
        assert torch.allclose(a, b, rtol=1e-14, atol=1e-15)
    p0, p1 = coupled.predict(Xs, num_samples=20), head.predict(Xs, num_samples=20)
    assert torch.allclose(p0.latent_mean, p1.latent_mean, rtol=1e-14, atol=1e-15)
    assert torch.allclose(coupled.log_predictive_density(Xs, torch.ones(30)),
                          head.log_predictive_density(Xs, torch.ones(30)), rtol=1e-12)


# ---------------------------------------------------------------------- the KL against the joint Gaussian
@pytest.mark.parametrize("posterior", ["full", "diag"])
def test_kl_matches_explicit_joint_gaussian(posterior):
    X, Y = sine_data(40, seed=2, q=2)
    model = SAVIGP(X, Y, MultiGaussian(2, variance=0.1), num_inducing=4, posterior=posterior, mean_basis_size=6)
    randomize(model, seed=5)
    Lzz = model.prior_factor()
    head_kl = float(model.mean_head.kl(model.kernel, model.inducing, Lzz).detach())
    model_kl = -float((model.posterior.entropy() + model.posterior.cross_entropy()).detach()) + head_kl  # v-space KL = u-space KL
    explicit = explicit_component_kl(model, 0)
    assert head_kl > 1e-2  # the head contributes
    assert model_kl == pytest.approx(explicit, rel=1e-8, abs=1e-8)
    # the head term alone, against the explicit a^T (K_gamma - K_gamma,Z K_zz^-1 K_Z,gamma) a / 2
    with torch.no_grad():
        h = model.mean_head
        Kg = model.kernel(h.gamma, h.gamma)
        Kzg = model.kernel(model.inducing, h.gamma)
        Kzz = Lzz @ Lzz.transpose(-1, -2)
        R = Kg - Kzg.transpose(-1, -2) @ torch.linalg.solve(Kzz, Kzg)
        direct = 0.5 * float((h.a.unsqueeze(-2) @ R @ h.a.unsqueeze(-1)).sum())
    assert head_kl == pytest.approx(direct, rel=1e-10)


def test_head_kl_is_exact_for_each_mixture_component():
    """One head shared by all components adds the same exact KL to every component (DESIGN §7)."""
    X, Y = sine_data(40, seed=4)
    model = SAVIGP(X, Y, Gaussian(0.1), num_inducing=4, posterior="full", num_components=2, mean_basis_size=5)
    randomize(model, seed=7)
    head_kl = float(model.mean_head.kl(model.kernel, model.inducing, model.prior_factor()).detach())
    with_head = [explicit_component_kl(model, k) for k in range(2)]
    a = model.mean_head.a.detach().clone()
    with torch.no_grad():
        model.mean_head.a.zero_()
    without = [explicit_component_kl(model, k) for k in range(2)]
    with torch.no_grad():
        model.mean_head.a.copy_(a)
    for k in range(2):
        assert with_head[k] - without[k] == pytest.approx(head_kl, rel=1e-8)


@pytest.mark.parametrize("basis", ["orthogonal", "decoupled", "hybrid"])
def test_marginal_means_match_definition(basis):
    """r(x) = (k(x, gamma) - k(x, Z) K_zz^-1 K(Z, gamma)) a (orthogonal) or k(x, gamma) a (HYBRID,
    DECOUPLED, savigp.mean_heads), added to every component's mean (DECOUPLED: coupled mean 0)."""
    X, Y = sine_data(50, seed=6, q=2)
    model = SAVIGP(X, Y, MultiGaussian(2, variance=0.1), num_inducing=5, posterior="diag", num_components=2,
                   mean_basis_size=9, mean_basis=basis)
    randomize(model, seed=8)
    if basis == "decoupled":
        with torch.no_grad():
            model.posterior.mean.zero_()
    Xs = torch.randn(17, 2, dtype=torch.float64)
    with torch.no_grad():
        mean, var = model.marginals(Xs)
        h, k = model.mean_head, model.kernel
        Lzz = model.prior_factor()
        Kzz = Lzz @ Lzz.transpose(-1, -2)
        Kxz = k(Xs, model.inducing)
        Kxg = k(Xs, h.gamma)
        if basis == "orthogonal":
            Kxg = Kxg - Kxz @ torch.linalg.solve(Kzz, k(model.inducing, h.gamma))
        r = (Kxg @ h.a.unsqueeze(-1)).squeeze(-1)
        u = (Lzz.unsqueeze(0) @ model.posterior.mean.unsqueeze(-1)).squeeze(-1)  # (K, Q, M)
        coupled = (Kxz.unsqueeze(0) @ torch.linalg.solve(Kzz, u.unsqueeze(-1))).squeeze(-1)  # (K, Q, B)
        expected = (coupled + r).transpose(-1, -2)
    assert torch.allclose(mean, expected, rtol=1e-9, atol=1e-10)
    assert float(r.abs().max()) > 1e-2
    assert (float(coupled.abs().max()) == 0.0) == (basis == "decoupled")


@pytest.mark.parametrize("posterior,K", [("full", 1), ("diag", 2), ("diag-u", 2)])
def test_fused_and_reference_paths_agree(posterior, K):
    """The model's fused path (L_zz without graph, K_zz adjoint by hand) and autograd through L_zz
    give the same ELBO and the same gradients for every parameter, the head's included; ``"diag-u"``
    (the paper's mixture over u) checks the u-space hand-written backward passes."""
    X, Y = sine_data(70, seed=30, q=2)
    model = randomize(SAVIGP(X, Y, MultiGaussian(2, variance=0.2), num_inducing=6, posterior=posterior,
                              num_components=K, mean_basis_size=15), seed=31)
    params = [p for p in model.parameters() if p.requires_grad]
    fused = model.elbo()
    g_fused = torch.autograd.grad(fused.elbo, params)
    Lzz = model.prior_factor()  # with graph: the reference path
    assert Lzz.requires_grad
    mean, var = model.marginals(model.train_x, Lzz)
    per = model.likelihood.expected_log_prob(model.train_y, mean, var)
    cross = model.posterior.cross_entropy() if model.posterior.whitened else model.posterior.cross_entropy(None, Lzz)
    ref = ((model.posterior.weights()[:, None] * per).sum() + model.posterior.entropy(None, Lzz) + cross
           - model.mean_head.kl(model.kernel, model.inducing, Lzz))
    g_ref = torch.autograd.grad(ref, params)
    assert float(fused.elbo.detach()) == pytest.approx(float(ref.detach()), rel=1e-11)
    for p, a, b in zip(params, g_fused, g_ref):
        scale = float(b.abs().max()) + 1e-300
        assert float((a - b).abs().max()) <= 1e-8 * scale, (tuple(p.shape), float((a - b).abs().max()), scale)


# ---------------------------------------------------------------------- column-sampled quadratic
def _sampling_model(G=60, seed=9):
    X, Y = sine_data(200, seed=seed)
    model = SAVIGP(X, Y, Gaussian(0.1), num_inducing=6, mean_basis_size=G)
    randomize(model, seed=seed)
    return model


@pytest.mark.parametrize("sampling", ["kernel", "residual"])
def test_column_sampled_quadratic_is_unbiased(sampling):
    model = _sampling_model()
    h, kern, Z = model.mean_head, model.kernel, model.inducing
    h.kl_sampling = sampling
    gen = torch.Generator().manual_seed(11)
    direction = torch.randn(h.a.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    with torch.no_grad():
        exact_quad = float(h.quadratic(kern))
        Lzz = model.prior_factor()
    a = h.a
    exact_kl = h.kl(kern, Z, Lzz, columns=None)
    exact_dir = float((torch.autograd.grad(exact_kl, a)[0] * direction).sum())
    draws, dirs, quads = [], [], []
    n = 1500
    for _ in range(n):
        est = h.kl(kern, Z, Lzz, columns=8, generator=gen)
        draws.append(float(est.detach()))
        dirs.append(float((torch.autograd.grad(est, a, retain_graph=False)[0] * direction).sum()))
        if sampling == "kernel":
            with torch.no_grad():
                quads.append(float(h.quadratic(kern, columns=8, generator=gen)))
    for values, exact in [(draws, float(exact_kl.detach())), (dirs, exact_dir)] + ([(quads, exact_quad)] if quads else []):
        t = torch.tensor(values, dtype=torch.float64)
        se = float(t.std() / math.sqrt(n))
        assert se > 0  # it is random
        assert abs(float(t.mean()) - exact) < 4 * se, (float(t.mean()), exact, se)


def test_residual_sampling_has_lower_variance():
    model = _sampling_model()
    h = model.mean_head
    Lzz = model.prior_factor().detach()
    out = {}
    with torch.no_grad():
        for sampling in ("kernel", "residual"):
            h.kl_sampling = sampling
            gen = torch.Generator().manual_seed(12)
            out[sampling] = torch.tensor([float(h.kl(model.kernel, model.inducing, Lzz, columns=8, generator=gen))
                                          for _ in range(400)]).var()
    assert out["residual"] < out["kernel"]


def test_kl_columns_in_the_elbo_is_unbiased():
    model = _sampling_model(G=40, seed=13)
    with torch.no_grad():
        exact = float(model.elbo().elbo.detach())
        model.mean_head.kl_columns = 5
        vals = torch.tensor([float(model.elbo().elbo.detach()) for _ in range(600)])
    se = float(vals.std() / math.sqrt(len(vals)))
    assert se > 0 and abs(float(vals.mean()) - exact) < 4 * se
    with pytest.raises(ValueError):
        model.mean_head.kl_columns = 0
    with pytest.raises(ValueError):
        model.mean_head.kl_sampling = "rows"


def test_kernel_matvec_blocks_match_dense():
    model = _sampling_model(G=50)
    h, kern = model.mean_head, model.kernel
    X = model.train_x[:37]
    dense = kernel_matvec(kern, X, h.gamma, h.a)
    (gd,) = torch.autograd.grad(dense.sum(), h.gamma)
    blocked = kernel_matvec(kern, X, h.gamma, h.a, max_entries=37 * 7)
    (gb,) = torch.autograd.grad(blocked.sum(), h.gamma)
    assert torch.allclose(dense, blocked, rtol=1e-12, atol=1e-12)
    assert torch.allclose(gd, gb, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------- natural gradients
def test_natural_marginals_match_model():
    """The family's marginals at its natural point (m and S as autograd leaves, what the natural
    step differentiates) equal the model's, mean head included, and give gradients in m and S."""
    from savigp.posteriors.base import InducingPrior

    X, Y = sine_data(60, seed=14)
    for posterior in ("full", "diag"):
        model = randomize(SAVIGP(X, Y, Gaussian(0.1), num_inducing=6, posterior=posterior, mean_basis_size=8), seed=15)
        point = model.posterior.natural_point()
        assert point.diagonal == (posterior == "diag") and point.mean.requires_grad and point.cov.requires_grad
        Lzz = model.prior_factor().detach()
        b = model.latent(X, InducingPrior(Lzz), point=point)
        with torch.no_grad():
            a = model.marginals(X, Lzz)
        assert torch.allclose(a[0], b.mean, rtol=1e-12, atol=1e-12)
        assert torch.allclose(a[1], b.var, rtol=1e-10, atol=1e-12)
        g_m, g_S = torch.autograd.grad((b.mean * b.var).sum(), [point.mean, point.cov])
        assert g_m.shape == point.mean.shape and g_S.shape == point.cov.shape and float(g_S.abs().max()) > 0
    with pytest.raises(ValueError, match="K=2 components"):
        SAVIGP(X, Y, Gaussian(0.1), num_inducing=6, num_components=2).posterior.natural_point()


@pytest.mark.parametrize("with_head", [False, True])
def test_one_natural_step_reaches_the_conjugate_optimum(with_head):
    X, Y = sine_data(100, seed=16)
    model = SAVIGP(X, Y, Gaussian(0.05), num_inducing=10, mean_basis_size=20 if with_head else 0, prior_mean=0.3)
    randomize(model, seed=17)  # a random start, far from the optimum
    start = float(model.elbo().elbo.detach())
    tau = natural_gradient_step(model, step=1.0)
    assert tau == 1.0
    after = float(model.elbo().elbo.detach())
    target = model.train_y[:, 0]
    head_kl = 0.0
    if with_head:
        target = target - _head_shift(model, model.train_x)[0]
        head_kl = float(model.mean_head.kl(model.kernel, model.inducing, model.prior_factor()).detach())
    optimum = _collapsed_bound(model, target) - head_kl
    assert after - start > 10.0
    assert after == pytest.approx(optimum, rel=1e-9)
    natural_gradient_step(model, step=1.0)  # a fixed point
    assert float(model.elbo().elbo.detach()) == pytest.approx(optimum, rel=1e-9)


def test_natural_update_formula_for_diagonal_matches_full_restricted():
    g = torch.Generator().manual_seed(18)
    Q, M = 2, 5
    m = torch.randn(Q, M, generator=g, dtype=torch.float64)
    sd = 0.5 + torch.rand(Q, M, generator=g, dtype=torch.float64)
    g_m = torch.randn(Q, M, generator=g, dtype=torch.float64)
    g_S = -torch.rand(Q, M, generator=g, dtype=torch.float64)
    m1, sd1, _ = natural_update(m, sd, g_m, g_S, 0.3, diagonal=True)
    m2, L2, _ = natural_update(m, torch.diag_embed(sd), g_m, torch.diag_embed(g_S), 0.3, diagonal=False)
    assert torch.allclose(m1, m2, rtol=1e-12)
    assert torch.allclose(torch.diag_embed(sd1), L2, rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError):
        natural_update(m, sd, g_m, g_S, 1.5, diagonal=True)


def test_natural_step_improves_nonconjugate_elbo():
    """Logistic likelihood, deterministic quadrature ELL: small natural steps increase the ELBO."""
    X, Y = sine_data(80, seed=19)
    Y = torch.sign(Y)
    for posterior in ("full", "diag"):
        model = SAVIGP(X, Y, Logistic(), num_inducing=8, posterior=posterior, mean_basis_size=10)
        values = [float(model.elbo(estimator="quadrature").elbo.detach())]
        for _ in range(5):
            natural_gradient_step(model, step=0.5, estimator="quadrature")
            values.append(float(model.elbo(estimator="quadrature").elbo.detach()))
        assert all(b > a for a, b in zip(values, values[1:])), values


def test_natural_gradients_need_a_single_gaussian():
    X, Y = sine_data(30)
    model = SAVIGP(X, Y, Gaussian(0.1), num_inducing=4, posterior="diag", num_components=2)
    with pytest.raises(ValueError, match="single Gaussian"):
        natural_gradient_step(model)
    with pytest.raises(ValueError, match="single Gaussian"):
        fit_orthnat(model, 1)


# ---------------------------------------------------------------------- the preconditioned step for a_gamma
def _optimum_model(seed=20):
    """Gaussian likelihood, fixed hyper-parameters; returns the model and its decoupled optimum
    (Salimbeni et al. 2018, App. D: a over alpha = [Z, gamma], S as in the coupled case), set into a copy."""
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(150, 1, generator=g, dtype=torch.float64) * 6
    Y = torch.sin(3 * X) + 0.1 * torch.randn(150, 1, generator=g, dtype=torch.float64)
    from savigp import RBF

    model = SAVIGP(X, Y, Gaussian(0.05), RBF(1, lengthscale=0.7), num_inducing=6, mean_basis_size=24,
                   inducing_init="subset")
    best = SAVIGP(X, Y, Gaussian(0.05), RBF(1, lengthscale=0.7), num_inducing=6, mean_basis_size=24,
                  inducing_init="subset")
    with torch.no_grad():
        k, Z, gam, x, y = best.kernel, best.inducing, best.mean_head.gamma, best.train_x, best.train_y[:, 0]
        s2 = best.likelihood.variance()
        Lzz = best.prior_factor()[0]
        M = Z.shape[1]
        A = torch.cat([Z, gam], 1)
        KA = k(A, A)[0]
        KA[:M, :M] = Lzz @ Lzz.T
        KAX = k(A, x)[0]
        alpha = torch.linalg.solve(KAX @ KAX.T + s2 * KA, KAX @ y)
        aZ, ag = alpha[:M], alpha[M:]
        a_beta = aZ + torch.cholesky_solve((k(Z, gam)[0] @ ag)[:, None], Lzz)[:, 0]
        V = torch.linalg.solve_triangular(Lzz, k(Z, x)[0], upper=False)
        prec = torch.eye(M, dtype=V.dtype) + V @ V.T / s2
        S = torch.cholesky_inverse(torch.linalg.cholesky(prec))
        best.posterior.set_full((Lzz.T @ a_beta)[None, None], torch.linalg.cholesky(S)[None, None])
        best.mean_head.a.copy_(ag[None])
    return model, best


def test_decoupled_optimum_is_a_stationary_point():
    """Appendix D's closed-form optimum has zero ELBO gradient in (m, a_gamma): checks the head's mean
    shift and KL (and their gradients) together."""
    model, best = _optimum_model()
    t = best.elbo()
    ga, gm = torch.autograd.grad(t.elbo, [best.mean_head.a, best.posterior.mean])
    randomize(model, seed=21)
    t0 = model.elbo()
    ga0, gm0 = torch.autograd.grad(t0.elbo, [model.mean_head.a, model.posterior.mean])
    assert float(ga.abs().max()) < 1e-7 * float(ga0.abs().max())
    assert float(gm.abs().max()) < 1e-7 * float(gm0.abs().max())
    assert float(t.elbo.detach()) > float(t0.elbo.detach())


def test_preconditioner_matches_explicit_residual_diagonal_and_bounds_curvature():
    model, _ = _optimum_model()
    randomize(model, seed=22)
    with torch.no_grad():
        h, k, Z = model.mean_head, model.kernel, model.inducing
        Lzz = model.prior_factor()
        Kzz = Lzz @ Lzz.transpose(-1, -2)
        Kzg = k(Z, h.gamma)
        R = k(h.gamma, h.gamma) - Kzg.transpose(-1, -2) @ torch.linalg.solve(Kzz, Kzg)
        D = R.diagonal(dim1=-2, dim2=-1)
        P = h.natural_preconditioner(k, Z, Lzz, jitter=1e-3)
        assert torch.allclose(P, D + 1e-3 * k.diag(h.gamma), rtol=1e-8, atol=1e-12)
        # Gauss-Newton row-sum bound: lambda_max(P^-1 H) <= 1 for the Gaussian likelihood, with H the
        # full Hessian of -ELBO in a_gamma (data part R_gamma,X R_X,gamma / sigma^2 plus KL part R)
        X = model.train_x
        s2 = model.likelihood.variance()
        lam = torch.full((1, X.shape[0]), float(1 / s2), dtype=X.dtype)
        Pgn = h.natural_preconditioner(k, Z, Lzz, jitter=0.0, kind="gauss-newton", X=X, curvature=lam)
        Rx = k(X, h.gamma) - k(X, Z) @ torch.linalg.solve(Kzz, Kzg)  # (1, N, G)
        for H in (Rx.transpose(-1, -2) @ Rx / s2 + R, R):
            d = Pgn.rsqrt() if H is not R else h.natural_preconditioner(k, Z, Lzz, jitter=0.0, kind="gauss-newton", X=X,
                                                                       curvature=0 * lam).rsqrt()
            eig = torch.linalg.eigvalsh(d.unsqueeze(-1) * H * d.unsqueeze(-2))
            assert float(eig.max()) <= 1.0 + 1e-9
            assert float(eig.max()) > 0.05  # and it is not vacuous
        # while eq. (16)'s diagonal alone is exceeded by the KL part: tau = 1 is not safe there
        d = (D + 1e-12).rsqrt()
        assert float(torch.linalg.eigvalsh(d.unsqueeze(-1) * R * d.unsqueeze(-2)).max()) > 2.0


def test_orthnat_with_fixed_hyperparameters_approaches_the_optimum():
    model, best = _optimum_model()
    optimum = float(best.elbo().elbo.detach())
    start = float(model.elbo().elbo.detach())
    h = fit_orthnat(model, 40, natgrad_step=1.0, gamma_precond="gauss-newton", gamma_step=1.0, hyper_lr=0.0)
    end = float(model.elbo().elbo.detach())
    assert end <= optimum + 1e-6 * abs(optimum)
    assert optimum - end < 0.2 * (optimum - start)
    # and the head mattered: better than the coupled optimum (one natural step, a = 0)
    coupled, _ = _optimum_model()
    natural_gradient_step(coupled, step=1.0)
    assert end > float(coupled.elbo().elbo.detach())
    assert all(math.isfinite(v) for v in h.elbo)


@pytest.mark.parametrize("gamma_update,precond,step", [("precond", "eq16", 3e-4), ("precond", "gauss-newton", 1.0),
                                                       ("adam", "eq16", 0.0)])
def test_orthnat_variants_improve(gamma_update, precond, step):
    model, _ = _optimum_model()
    h = fit_orthnat(model, 30, natgrad_step=1.0, gamma_update=gamma_update, gamma_precond=precond,
                    gamma_step=step, gamma_lr=0.05, hyper_lr=0.01, batch_size=64, seed=1)
    assert h.elbo[-1] > h.elbo[0]
    assert float(model.mean_head.a.detach().abs().max()) > 0


def test_orthnat_black_box_likelihood_is_stable_with_unit_gamma_step():
    """Logistic likelihood through the score-function estimator (values of log p only): the default
    ORTHNAT step (Gauss-Newton row-sum preconditioner, tau_gamma = 1) improves the ELBO and stays
    finite where the preconditioner without the KL row sums diverged."""
    X, Y = sine_data(200, seed=40)
    Y = torch.sign(Y)
    model = SAVIGP(X, Y, Logistic(), num_inducing=10, mean_basis_size=40)
    start = float(model.elbo(estimator="quadrature").elbo.detach())
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # natural steps halved on noisy score gradients
        fit_orthnat(model, 40, natgrad_step=0.3, natgrad_warmup=10, estimator="score", num_samples=50, batch_size=100)
    end = float(model.elbo(estimator="quadrature").elbo.detach())
    assert math.isfinite(end) and end > start + 30, (start, end)
    assert 0.1 < float(model.mean_head.a.detach().abs().max()) < 100


# ---------------------------------------------------------------------- training, prediction cache, dtypes
def test_adam_fit_trains_the_head_and_beats_coupled():
    g = torch.Generator().manual_seed(23)
    X = torch.rand(300, 1, generator=g, dtype=torch.float64) * 8
    Y = torch.sin(4 * X) + 0.05 * torch.randn(300, 1, generator=g, dtype=torch.float64)
    elbos = {}
    from savigp import RBF

    for G in (0, 40):
        # a length-scale short enough for sin(4x): 6 inducing points cannot follow it, the head can
        model = SAVIGP(X, Y, Gaussian(0.1), RBF(1, lengthscale=0.4, learn=False), num_inducing=6, mean_basis_size=G)
        h = fit(model, iterations=150, lr=0.05, progress=False)
        elbos[G] = h.elbo[-1]
        if G:
            assert float(model.mean_head.a.detach().abs().max()) > 0.1
    assert elbos[40] > elbos[0] + 10, elbos


def test_prediction_computes_the_head_terms_once_and_keeps_nothing(monkeypatch):
    """The head's (b, w) are computed once per prediction and handed to every chunk of rows
    (``model.head_state``), and the head holds no state between calls: after an optimizer step, an
    in-place edit, ``load_state_dict`` or a fused optimizer (which writes parameters without bumping
    their version counters) a prediction equals one from a fresh copy of the model."""
    import copy

    X, Y = sine_data(60, seed=24)
    model = randomize(SAVIGP(X, Y, Gaussian(0.1), num_inducing=5, mean_basis_size=12), seed=25)
    h = model.mean_head
    Xs = torch.randn(20, 2, dtype=torch.float64)
    calls = []
    original = type(h)._basis_terms
    monkeypatch.setattr(type(h), "_basis_terms", lambda self, *a: calls.append(1) or original(self, *a))

    def fresh():  # the same parameters in a model that never predicted
        return copy.deepcopy(model).predict_latent(Xs)[0]

    def same(x, y):  # identical computations; only BLAS blocking (chunk sizes) may touch the last bits
        return torch.allclose(x, y, rtol=1e-13, atol=1e-14)

    ref = model.predict_latent(Xs)[0]
    del calls[:]
    again = model.predict_latent(Xs, chunk_size=3)[0]  # 7 chunks, (b, w) computed once
    assert len(calls) == 1 and same(ref, again)
    state = model.prediction_state()  # the caller's, for many predictions at these parameters
    del calls[:]
    assert torch.equal(model.predict_latent(Xs, state=state)[0], ref) and not calls
    assert not hasattr(h, "_stash") and not hasattr(h, "clear_cache")
    fit(model, iterations=1, lr=0.1, progress=False)
    after = model.predict_latent(Xs)[0]
    assert same(after, fresh()) and not torch.allclose(after, ref, rtol=1e-4)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    before = model.predict_latent(Xs)[0]
    with torch.no_grad():
        h.a.mul_(2.0)
    doubled = model.predict_latent(Xs)[0]
    assert same(doubled, fresh()) and not torch.allclose(doubled, before, rtol=1e-4)
    model.load_state_dict(state)
    assert same(model.predict_latent(Xs)[0], before)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=0.1, fused=True)
    (-model.elbo().elbo).backward()
    opt.step()
    stepped = model.predict_latent(Xs)[0]
    assert same(stepped, fresh()) and not torch.allclose(stepped, before, rtol=1e-4)


def test_a_training_step_computes_the_head_terms_once(monkeypatch):
    """The model computes the orthogonal head's (b, w) once per ELBO evaluation and passes them to
    the mean shift and to the KL (no hidden hand-over between the two calls)."""
    X, Y = sine_data(40, seed=28)
    model = randomize(SAVIGP(X, Y, Gaussian(0.1), num_inducing=5, mean_basis_size=8), seed=29)
    calls = []
    original = type(model.mean_head)._basis_terms
    monkeypatch.setattr(type(model.mean_head), "_basis_terms", lambda self, *a: calls.append(1) or original(self, *a))
    terms = model.elbo()
    assert len(calls) == 1 and float(terms.mean_head_kl) > 0
    terms.elbo.backward()
    assert model.mean_head.a.grad is not None and float(model.mean_head.a.grad.abs().sum()) > 0


def test_float32_training_step():
    X, Y = sine_data(64, seed=26)
    model = SAVIGP(X, Y, Gaussian(0.1), num_inducing=6, mean_basis_size=12, dtype=torch.float32)
    assert model.mean_head.a.dtype == torch.float32 and model.mean_head.gamma.dtype == torch.float32
    model.mean_head.kl_columns = 4
    fit(model, iterations=3, lr=0.01, progress=False)
    fit_orthnat(model, 3, natgrad_step=0.5, gamma_precond="gauss-newton", gamma_step=0.5, batch_size=32)
    fit_orthnat(model, 2, natgrad_step=0.5, gamma_precond="eq16", gamma_step=1e-4, batch_size=32)
    pred = model.predict(X[:5].float(), num_samples=10)
    assert pred.latent_mean.dtype == torch.float32 and torch.isfinite(pred.latent_mean).all()


def test_head_errors():
    X, _ = sine_data(20)
    with pytest.raises(ValueError, match="gamma_inputs"):
        OrthogonalMeanHead(X, 1, 5, gamma_inputs=torch.zeros(4, 2))
    head = OrthogonalMeanHead(X, 2, 30)  # G > N: all rows plus perturbed extra rows
    assert head.gamma.shape == (2, 30, 2) and torch.unique(head.gamma[0], dim=0).shape[0] == 30


# ---------------------------------------------------------------------- CUDA
@cuda
@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cuda_training_step(dtype):
    X, Y = sine_data(256, seed=27)
    model = SAVIGP(X, Y, Gaussian(0.1), num_inducing=16, mean_basis_size=64, dtype=dtype, device="cuda")
    h = model.mean_head
    assert h.a.device.type == "cuda" and h.a.dtype == dtype
    h.kl_columns = 16
    fit(model, iterations=5, lr=0.01, batch_size=64, progress=False)
    for precond in ("eq16", "gauss-newton"):
        fit_orthnat(model, 3, natgrad_step=0.5, gamma_precond=precond, gamma_step=1e-3, batch_size=64)
    fit_orthnat(model, 2, natgrad_step=0.5, gamma_update="adam", batch_size=64)
    Xs = torch.randn(50, 2, dtype=dtype, device="cuda")
    m1 = model.predict_latent(Xs)[0]
    assert torch.equal(m1, model.predict_latent(Xs)[0])
    assert m1.device.type == "cuda" and torch.isfinite(m1).all()


@cuda
@requires_cuda
def test_cuda_matches_cpu_float64():
    X, Y = sine_data(80, seed=28)
    cpu = randomize(SAVIGP(X, Y, Gaussian(0.1), num_inducing=6, mean_basis_size=10), seed=29)
    gpu = SAVIGP(X, Y, Gaussian(0.1), num_inducing=6, mean_basis_size=10, device="cuda")
    gpu.load_state_dict(cpu.state_dict())
    assert float(gpu.elbo().elbo.detach()) == pytest.approx(float(cpu.elbo().elbo.detach()), rel=1e-10)
    natural_gradient_step(cpu, step=1.0)
    natural_gradient_step(gpu, step=1.0)
    assert float(gpu.elbo().elbo.detach()) == pytest.approx(float(cpu.elbo().elbo.detach()), rel=1e-9)


def test_predictions_carry_no_graph():
    """predict_latent, predict and draws run without autograd (also with a caller's prediction_state)."""
    X, Y = sine_data(30, seed=30)
    model = SAVIGP(X, Y, Gaussian(0.1), num_inducing=5, mean_basis_size=6)
    Xs = torch.randn(4, 2, dtype=torch.float64)
    for state in (None, model.prediction_state()):
        outputs = list(model.predict_latent(Xs, state=state)) + list(model.draws(Xs, 3, state=state))
        outputs += [model.predict(Xs, num_samples=3, state=state).latent_mean]
        assert not any(t.requires_grad for t in outputs)
