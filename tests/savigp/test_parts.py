"""Issue 53: the posterior of each additive part of the kernel (savigp.predict_parts) against exact
GP regression, per posterior family, and its bookkeeping (the parts add up to the prediction)."""
import math

import pytest
import torch

import savigp
from likelihoods import Gaussian, Poisson

NOISE = 0.05


def _data(N=30, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.linspace(0, 3, N, dtype=torch.float64)[:, None]
    Y = (torch.sin(2 * math.pi * X) + 0.5 * X + 0.2 * torch.randn(N, 1, generator=g, dtype=torch.float64))
    return X, Y


def _kernel():
    """rbf + periodic * rbf + linear, hyper-parameters fixed."""
    return (savigp.RBF(1, 1, lengthscale=0.8, variance=0.5, learn=False)
            + savigp.Periodic(1, 1, lengthscale=0.7, period=1.0, learn=False) * savigp.RBF(1, 1, lengthscale=2.0, learn=False)
            + savigp.Linear(1, 1, variance=0.3, learn=False))


def _set_optimum(model, Y):
    """q(u) at its closed-form optimum for a Gaussian likelihood (Titsias 2009): with
    A = K_zz + K_zx K_xz / s, m = K_zz A^-1 K_zx y / s and S = K_zz A^-1 K_zz (the family's own
    optimum: a factorized family keeps the mean-field variances of this Gaussian)."""
    with torch.no_grad():
        Lzz = model.prior_factor()
        Kzz = (Lzz @ Lzz.transpose(-1, -2))[0]
        Kzx = model.kernel(model.kernel_inducing(), model.train_x)[0]
        A = Kzz + Kzx @ Kzx.T / NOISE
        m = Kzz @ torch.linalg.solve(A, Kzx @ Y) / NOISE  # (M, 1)
        S = Kzz @ torch.linalg.solve(A, Kzz)
        S = 0.5 * (S + S.T)
        post = model.posterior
        if post.function_moments:
            post.init_from_moments(m.T, torch.linalg.cholesky(S)[None], Lzz, variances="mean-field", spread=0.0)
        else:  # the joint family: whitened v = L_zz^-1 u
            L = Lzz[0]
            mv = torch.linalg.solve_triangular(L, m, upper=False)
            B = torch.linalg.solve_triangular(L, torch.linalg.cholesky(S), upper=False)
            post.set_full(mv.T, torch.linalg.cholesky(B @ B.T))


def _exact_parts(X, Y, Xs, kernel):
    """Each term's exact posterior at Xs: mean K_j(Xs, X) (K + s I)^-1 y and covariance
    k_j(Xs, Xs) - K_j(Xs, X) (K + s I)^-1 K_l(X, Xs) between terms j and l (diagonal in Xs)."""
    from savigp.kernels.terms import additive_terms

    with torch.no_grad():
        terms = additive_terms(kernel)
        K = kernel(X, X)[0] + NOISE * torch.eye(X.shape[0], dtype=X.dtype)
        Ks = [t(Xs, X)[0] for t in terms]  # (Ns, N)
        mean = torch.stack([k @ torch.linalg.solve(K, Y)[:, 0] for k in Ks], dim=-1)
        J = len(terms)
        cov = torch.zeros(Xs.shape[0], J, J, dtype=X.dtype)
        for j in range(J):
            for l in range(J):
                cov[:, j, l] = -(Ks[j] * torch.linalg.solve(K, Ks[l].T).T).sum(-1)
            cov[:, j, j] += terms[j].diag(Xs)[0]
        return mean, cov


FAMILIES = [("full", 1), ("diag", 1), ("diag-u", 1), ("joint", 1), ("full", 2)]


@pytest.mark.parametrize("family,K", FAMILIES)
def test_dense_parts_equal_the_exact_gp_posterior_of_each_part(family, K):
    """The issue's acceptance test: Gaussian likelihood, Z = X (dense), hyper-parameters fixed, q(u)
    at its optimum: each part's mean is the exact GP's K_j (K + s I)^-1 y to 1e-6 for every family
    (a factorized q(u)'s optimum has the exact mean: Bishop 2006, §10.1.2); its covariances with the
    other parts are exact for the families that hold S whole (full, joint, a mixture of identical
    full components), and a factorized family's are those of its own S (checked against the
    closed form with S from its moments over u)."""
    X, Y = _data()
    Xs = torch.cat([X, torch.linspace(-0.5, 3.5, 9, dtype=torch.float64)[:, None]])  # the data and beyond
    model = savigp.SAVIGP(X, Y, Gaussian(NOISE, learn_variance=False), _kernel(), dense=True,
                          posterior=family, num_components=K)
    _set_optimum(model, Y)
    model.zero_grad()
    model.elbo(estimator="closed-form").elbo.backward()  # the optimum: no gradient in q(u)
    grads = torch.cat([p.grad.flatten() for p in model.posterior.parameters() if p.grad is not None])
    assert float(grads.abs().max()) < 1e-6
    parts = savigp.predict_parts(model, Xs, covariance=True, components=True)
    assert parts.names == [["rbf", "periodic * rbf", "linear"]]
    mean, cov = _exact_parts(X, Y, Xs, model.kernel)
    assert float((parts.mean[0] - mean).abs().max()) < 1e-6
    if model.posterior.diagonal:
        cov = _own_covariance(model, Xs)
    assert float((parts.cov[0] - cov).abs().max()) < 1e-6
    assert torch.equal(parts.var[0], parts.cov[0].diagonal(dim1=-2, dim2=-1))
    for k in range(K):  # identical components: each is the mixture
        assert float((parts.component_mean[0][k] - mean).abs().max()) < 1e-6
        assert float((parts.component_cov[0][k] - cov).abs().max()) < 1e-6


def _own_covariance(model, Xs):
    """The parts' covariances under the model's own q(u) = N(m, S) (one component), from the closed
    form -K_j(x, Z) K_zz^-1 K_l(Z, x) + K_j(x, Z) K_zz^-1 S K_zz^-1 K_l(Z, x) (+ k_j(x, x) on j = l)."""
    from savigp.kernels.terms import additive_terms

    with torch.no_grad():
        Lzz = model.prior_factor()
        _, F = model.posterior.u_moments(Lzz)
        S = (F @ F.transpose(-1, -2))[0, 0]
        Kzz = (Lzz @ Lzz.transpose(-1, -2))[0]
        Z = model.kernel_inducing()
        terms = additive_terms(model.kernel)
        A = [torch.linalg.solve(Kzz, t(Z, Xs)[0]) for t in terms]  # K_zz^-1 K_j(Z, x), (M, Ns)
        Kj = [t(Z, Xs)[0] for t in terms]
        J = len(terms)
        cov = torch.zeros(Xs.shape[0], J, J, dtype=Xs.dtype)
        for j in range(J):
            for l in range(J):
                cov[:, j, l] = -(Kj[j] * A[l]).sum(0) + (A[j] * (S @ A[l])).sum(0)
            cov[:, j, j] += terms[j].diag(Xs)[0]
        return cov


def _moved(model, seed=0):
    """Every posterior and mean-head parameter moved off its start (a fitted model's stand-in)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in list(model.posterior.parameters()) + list(model.head.parameters()):
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


@pytest.mark.parametrize("family,K,basis,head", [("full", 2, 0, "orthogonal"), ("diag-u", 2, 0, "orthogonal"),
                                                  ("full", 1, 6, "orthogonal"), ("diag", 1, 6, "orthogonal"),
                                                  ("full", 1, 6, "decoupled"), ("full", 1, 6, "hybrid")])
def test_the_parts_add_up_to_the_latent_prediction(family, K, basis, head):
    """Any likelihood (Poisson here), a prior mean, a mean head (orthogonal basis) or a mixture of
    two distinct components: the parts' means, the "mean" part included, add up to
    model.predict(X).latent_mean to 1e-10, and the parts' covariances to its latent_var."""
    from conftest import sine_data

    X, Y = sine_data(n=40, d=2)
    Y = (Y.abs() * 3).round()
    kernel = "rbf(0) * periodic(0) + (rbf(1) + linear(1)) * rbf(0)"
    model = _moved(savigp.SAVIGP(X, Y, Poisson(), kernel, num_inducing=12, posterior=family, num_components=K,
                                 prior_mean=0.4, mean_basis_size=basis, mean_basis=head))
    Xs = torch.randn(17, 2, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    parts = model.predict_parts(Xs, covariance=True)
    assert parts.names == [["rbf(0) * periodic(0)", "rbf(1) * rbf(0)", "linear(1) * rbf(0)", "mean"]]
    assert parts.active_dims == [[(0,), (0, 1), (0, 1), ()]]
    pred = model.predict(Xs)
    assert float((parts.mean[0].sum(-1) - pred.latent_mean[:, 0]).abs().max()) < 1e-10
    assert float((parts.cov[0].sum((-1, -2)) - pred.latent_var[:, 0]).abs().max()) < 1e-10
    assert float(parts.cov[0][:, -1].abs().max()) == 0.0  # the mean part is not random
    assert float(parts.var[0][:, :-1].min()) > 0


def test_a_model_without_prior_mean_or_head_has_only_the_kernels_parts():
    X, Y = _data()
    model = savigp.SAVIGP(X, Y, Gaussian(NOISE), "rbf + linear", num_inducing=8)
    parts = savigp.predict_parts(model, X, columns=["time"])
    assert parts.names == [["rbf", "linear"]] and parts.cov is None and parts.component_mean is None
    assert parts.mean[0].shape == (30, 2) and parts.var[0].shape == (30, 2)


def test_a_kernel_per_latent_function_gives_each_its_own_parts():
    """A KernelList (Q = 2): latent function q's parts are its own kernel's; a part repeated in one
    expression is numbered."""
    from likelihoods import MultiGaussian

    X, Y = _data()
    Y2 = torch.cat([Y, -Y], 1)
    kernel = savigp.KernelList([savigp.RBF(1) + savigp.Linear(1), savigp.RBF(1) + savigp.RBF(1) + savigp.Periodic(1)])
    model = _moved(savigp.SAVIGP(X, Y2, MultiGaussian(2), kernel, num_inducing=8))
    parts = model.predict_parts(X, covariance=True)
    assert parts.names == [["rbf", "linear"], ["rbf", "rbf #2", "periodic"]]
    pred = model.predict(X)
    for q in range(2):
        assert float((parts.mean[q].sum(-1) - pred.latent_mean[:, q]).abs().max()) < 1e-10
        assert float((parts.cov[q].sum((-1, -2)) - pred.latent_var[:, q]).abs().max()) < 1e-10


def test_a_kernel_shared_by_the_latent_functions_gives_each_the_same_parts():
    from likelihoods import MultiGaussian

    X, Y = _data()
    model = _moved(savigp.SAVIGP(X, torch.cat([Y, 2 * Y], 1), MultiGaussian(2), "rbf + linear", shared_kernel=True,
                                 num_inducing=8))
    parts = model.predict_parts(X, covariance=True)
    assert parts.names == [["rbf", "linear"], ["rbf", "linear"]]
    pred = model.predict(X)
    for q in range(2):
        assert float((parts.mean[q].sum(-1) - pred.latent_mean[:, q]).abs().max()) < 1e-10
        assert float((parts.cov[q].sum((-1, -2)) - pred.latent_var[:, q]).abs().max()) < 1e-10


def test_inputs_of_the_wrong_shape_are_refused_naming_both_shapes():
    X, Y = _data()
    model = savigp.SAVIGP(X, Y, Gaussian(NOISE), "rbf + linear", num_inducing=8)
    with pytest.raises(ValueError, match=r"X must have shape \(N, 1\).*got \(5, 2\)"):
        savigp.predict_parts(model, torch.zeros(5, 2, dtype=torch.float64))


def test_sparse_parts_are_within_the_bounds_own_error_of_the_exact_parts():
    """Sparse (M = 25 < N = 60), q(u) at its optimum: the ELBO's gap to the exact evidence is
    KL(q || p(. | y)) over the whole process (Matthews et al. 2016), and also over the parts (q of
    the parts is p(parts | u) q(u), so the same identity holds with the parts as the latent
    process); a part's marginal at x is a linear functional of them, and a marginal's KL is at most
    the joint's. For one-dimensional Gaussians KL(N(a, v1) || N(b, v2)) =
    (v1/v2 - 1 - log(v1/v2) + (a - b)^2 / v2) / 2, so each part's mean is within sqrt(2 v2 gap) of
    the exact part's and r - 1 - log r <= 2 gap for its variance ratio r: the tolerance is the
    bound's own error, not a number chosen."""
    from conftest import exact_gp

    X, Y = _data(N=60, seed=1)
    Z = torch.linspace(0, 3, 25, dtype=torch.float64)[:, None]
    model = savigp.SAVIGP(X, Y, Gaussian(NOISE, learn_variance=False), _kernel(), inducing_inputs=Z,
                          learn_inducing=False)
    _set_optimum(model, Y)
    logml, _, _ = exact_gp(X, Y, model.kernel, NOISE)
    with torch.no_grad():
        gap = logml - float(model.elbo(estimator="closed-form").elbo)
    assert 0 < gap < 10  # measured 7.23 nats: a bound that is not tight (M = 30: 0.92), but informative
    Xs = torch.linspace(-0.2, 3.2, 25, dtype=torch.float64)[:, None]
    parts = savigp.predict_parts(model, Xs)
    mean, cov = _exact_parts(X, Y, Xs, model.kernel)
    v2 = cov.diagonal(dim1=-2, dim2=-1)
    slack = 1e-6  # K_zz's jitter (1e-8 of its mean diagonal)
    assert bool(((parts.mean[0] - mean) ** 2 <= 2 * v2 * (gap + slack)).all())
    r = parts.var[0] / v2
    assert bool((r - 1 - torch.log(r) <= 2 * (gap + slack)).all())
    # and the bound is not vacuous here: the sparse parts do differ from the exact ones
    assert float((parts.mean[0] - mean).abs().max()) > 1e-4


@pytest.mark.parametrize("prior_mean", [0.0, 0.7])
def test_transformed_parts_are_those_of_the_scaled_and_shifted_function(prior_mean):
    """b + a f: every part's mean (and each component's) times a, (co)variances times a^2, b in the
    "mean" part (appended when the model has none), so the parts still add up."""
    X, Y = _data()
    model = _moved(savigp.SAVIGP(X, Y, Gaussian(NOISE), "rbf + linear", num_inducing=8, num_components=2,
                                 prior_mean=prior_mean))
    parts = model.predict_parts(X, covariance=True, components=True)
    out = parts.transformed([3.0], [100.0])
    assert out.names == [["rbf", "linear", "mean"]] and out.active_dims == [[None, None, ()]]
    assert torch.allclose(out.mean[0].sum(-1), 100.0 + 3.0 * parts.mean[0].sum(-1), rtol=1e-12)
    assert torch.allclose(out.mean[0][:, :2], 3.0 * parts.mean[0][:, :2], rtol=1e-12)
    assert torch.allclose(out.cov[0][:, :2, :2], 9.0 * parts.cov[0][:, :2, :2], rtol=1e-12)
    assert torch.allclose(out.component_var[0][..., :2], 9.0 * parts.component_var[0][..., :2], rtol=1e-12)
    assert torch.allclose(out.component_mean[0].sum(-1), 100.0 + 3.0 * parts.component_mean[0].sum(-1), rtol=1e-12)
    assert float(out.cov[0][:, -1].abs().max()) == 0.0 and float(out.component_var[0][..., -1].abs().max()) == 0.0
    with pytest.raises(ValueError, match=r"scale and shift must be \(1,\)"):
        parts.transformed([1.0, 2.0], [0.0])


def test_parts_predicted_in_chunks_of_rows_are_the_same(monkeypatch):
    """Rows go in chunks that fit the device's memory budget (as SAVIGP.predict's): a budget of a
    few rows gives the same parts as one pass, to rounding."""
    X, Y = _data(N=50)
    model = _moved(savigp.SAVIGP(X, Y, Gaussian(NOISE), "rbf + linear + periodic", num_inducing=8, num_components=2))
    whole = savigp.predict_parts(model, X, covariance=True, components=True)
    monkeypatch.setattr(savigp.linalg.chunks, "memory_budget", lambda device: 1000)  # 1 row per chunk
    chunked = savigp.predict_parts(model, X, covariance=True, components=True)
    for field in ("mean", "var", "cov", "component_mean", "component_var", "component_cov"):
        a, b = getattr(whole, field)[0], getattr(chunked, field)[0]
        assert a.shape == b.shape and float((a - b).abs().max()) < 1e-10, field
