"""Warm starts (savigp.warm_start, Posterior.init_from_moments): every family set from a Gaussian
q(u) holds the moments it should (closed forms), and on a Gaussian-likelihood problem, where the
ELBO at fixed hyper-parameters is Titsias' (2009) bound less KL(q(u) || q*(u)), the full Gaussian
set to q* has that bound, a full model warm-started from it the same ELBO, and the diagonal families'
mean-field start is their own optimum (ELBO = bound - KL of the factorized projection, zero gradient)."""
import math

import pytest
import torch

import savigp
from likelihoods import Gaussian
from savigp.posteriors import DiagonalMixture, UDiagonalMixture

N, M, NOISE = 40, 10, 0.1


def _data():
    g = torch.Generator().manual_seed(3)
    X = torch.rand(N, 1, generator=g, dtype=torch.float64) * 4.0
    y = torch.sin(2.0 * X[:, 0]) + 0.3 * torch.randn(N, generator=g, dtype=torch.float64)
    return X, y[:, None]


def _model(posterior="full", K=1, lengthscale=0.7, variance=1.3, noise=NOISE):
    X, Y = _data()
    kernel = savigp.RBF(1, 1, lengthscale=lengthscale, variance=variance)
    return savigp.SAVIGP(X, Y, Gaussian(variance=noise), kernel, inducing_inputs=X[::4], learn_inducing=False,
                         posterior=posterior, num_components=K, seed=5)


def _optimum(model):
    """q*(u - mu) in closed form (whitened: Lambda = I + V V^T / s2, m = Lambda^-1 V y / s2; V = L_zz^-1 K_zx),
    its u-space mean (Q, M) and factor (Q, M, M), and Titsias' bound, all for the model's (jittered) prior."""
    with torch.no_grad():
        Lzz = model.prior_factor()[0]
        X, y = model.train_x, model.train_y[:, 0]
        V = torch.linalg.solve_triangular(Lzz, model.kernel(model.inducing, X)[0], upper=False)  # (M, N)
        s2 = float(model.likelihood.variance())
        Lam = torch.eye(M, dtype=V.dtype) + V @ V.T / s2
        Sv = torch.linalg.inv(Lam)
        mv = Sv @ V @ y / s2
        cov = V.T @ V + s2 * torch.eye(N, dtype=V.dtype)
        bound = (torch.distributions.MultivariateNormal(torch.zeros(N, dtype=V.dtype), cov).log_prob(y)
                 - (model.kernel.diag(X)[0].sum() - (V * V).sum()) / (2 * s2))
        mean, factor = Lzz @ mv, Lzz @ torch.linalg.cholesky(Sv)
        return mean[None], factor[None], float(bound), Lzz


def _elbo(model):
    return float(model.elbo(estimator="closed-form").elbo.detach())


def _fg_at_optimum():
    fg = _model()
    mean, factor, bound, Lzz = _optimum(fg)
    fg.posterior.init_from_moments(mean, factor, Lzz[None])
    return fg, mean, factor, bound


def test_full_gaussian_from_the_optimal_moments_has_titsias_bound_and_passes_it_on():
    fg, mean, factor, bound = _fg_at_optimum()
    assert _elbo(fg) == pytest.approx(bound, abs=1e-8)
    full = savigp.warm_start(_model(lengthscale=2.0, variance=0.5, noise=1.0), fg)  # other hyper-parameters
    Lzz = full.prior_factor()
    m, F = full.posterior.u_moments(Lzz)
    C, C_src = F @ F.transpose(-1, -2), factor @ factor.transpose(-1, -2)
    assert torch.allclose(m, mean, rtol=0, atol=1e-10) and torch.allclose(C, C_src, rtol=0, atol=1e-10)
    assert _elbo(full) == pytest.approx(_elbo(fg), abs=1e-9)
    # hyper-parameters, likelihood and inducing inputs are the source's
    for name, value in fg.kernel.state_dict().items():
        assert torch.equal(full.kernel.state_dict()[name], value), name
    assert float(full.likelihood.variance().detach()) == float(fg.likelihood.variance().detach())
    assert torch.equal(full.inducing, fg.inducing)


@pytest.mark.parametrize("posterior", ["diag-u", "diag"])
def test_mean_field_start_is_the_diagonal_familys_optimum(posterior):
    """ELBO(q) = bound - KL(q || q*) at fixed hyper-parameters; the factorized q minimizing the KL
    (in the family's coordinates x, precision P of q*(x)) has variances 1 / P_mm and
    KL = 1/2 (sum_m log P_mm - log|P|). The "marginal" start (diag of the covariance) is worse."""
    fg, mean, factor, bound = _fg_at_optimum()
    Lzz = fg.prior_factor()[0]
    F = factor[0] if posterior == "diag-u" else torch.linalg.solve_triangular(Lzz, factor[0], upper=False)
    P = torch.linalg.inv(F @ F.T)
    kl = 0.5 * float(torch.log(P.diagonal()).sum() - torch.logdet(P))
    assert kl > 1.0  # the inducing values are correlated under q*: the projection costs something
    model = savigp.warm_start(_model(posterior), fg)
    assert _elbo(model) == pytest.approx(bound - kl, abs=1e-7)
    elbo = model.elbo(estimator="closed-form").elbo
    grads = torch.autograd.grad(elbo, [model.posterior.mean, model.posterior.raw_scale])
    assert max(float(g.abs().max()) for g in grads) < 1e-6  # a stationary point in q
    marginal = savigp.warm_start(_model(posterior), fg, variances="marginal")
    assert _elbo(marginal) < bound - kl - 1.0


@pytest.mark.parametrize("posterior,K", [("diag-u", 1), ("diag-u", 2), ("diag", 2), ("full", 2)])
@pytest.mark.parametrize("variances", ["mean-field", "marginal"])
def test_components_hold_the_sources_moments(posterior, K, variances):
    """Each component's variances (in its family's coordinates: u for "diag-u", whitened v otherwise)
    are the rule's diagonal of the source covariance (full components: the covariance itself); the
    means are spread symmetrically (the mixture's mean is the source's); equal weights."""
    fg, mean, factor, _ = _fg_at_optimum()
    model = savigp.warm_start(_model(posterior, K), fg, variances=variances, seed=11)
    with torch.no_grad():
        Lzz = model.prior_factor()
    post = model.posterior
    A = torch.eye(M, dtype=torch.float64) if posterior == "diag-u" else torch.linalg.inv(Lzz[0])
    G = A @ factor[0] @ factor[0].T @ A.T  # the source covariance in the family's coordinates
    target = G.diagonal() if variances == "marginal" else 1.0 / torch.linalg.inv(G).diagonal()
    m, F = post.u_moments(Lzz)  # (K, 1, M), (K, 1, M, M)
    comp = A @ F[:, 0] @ F[:, 0].transpose(-1, -2) @ A.T  # (K, M, M)
    for k in range(K):
        if posterior == "full":
            assert torch.allclose(comp[k], G, rtol=1e-9, atol=1e-11)
        else:
            assert torch.allclose(comp[k].diagonal(), target, rtol=1e-9, atol=1e-12)
    assert torch.allclose(post.weights(), torch.full((K,), 1.0 / K, dtype=torch.float64))
    assert torch.allclose(m.mean(0), mean, rtol=0, atol=1e-9)
    if K > 1:  # x_k = x + B_k z_k (B_k: the component's factor, or its standard deviations), |z_k| = sqrt(M)
        step = A @ (m[0, 0] - mean[0])
        z = (torch.linalg.solve_triangular(torch.linalg.cholesky(G), step[:, None], upper=False)[:, 0]
             if posterior == "full" else step / comp[0].diagonal().sqrt())
        assert float(z.norm()) == pytest.approx(math.sqrt(M), rel=1e-8)


def test_warm_start_and_init_from_moments_reject_what_does_not_fit():
    fg, mean, factor, _ = _fg_at_optimum()
    Lzz = fg.prior_factor()
    post = UDiagonalMixture(1, M)
    with pytest.raises(ValueError, match=r"mean must have shape \(1, 10\).*got \(1, 11\)"):
        post.init_from_moments(torch.zeros(1, M + 1, dtype=torch.float64), factor, Lzz)
    with pytest.raises(ValueError, match=r"factor must have shape \(1, 10, 10\).*got \(10, 10\)"):
        DiagonalMixture(1, M).init_from_moments(mean, factor[0], Lzz)
    with pytest.raises(ValueError, match="variances must be one of"):
        post.init_from_moments(mean, factor, Lzz, variances="diag")
    X, Y = _data()
    other = savigp.SAVIGP(X, Y, Gaussian(variance=NOISE), savigp.RBF(1, 1), inducing_inputs=X[::5],
                          learn_inducing=False)
    with pytest.raises(ValueError, match=r"shape \(1, 8, 1\).*the model's \(1, 10, 1\)"):
        savigp.warm_start(_model("diag-u"), other)
    with pytest.raises(ValueError, match="one component"):
        savigp.warm_start(_model("diag-u"), _model("full", 2))
    matern = savigp.SAVIGP(X, Y, Gaussian(variance=NOISE), savigp.Matern52(1, 1), inducing_inputs=X[::4],
                           learn_inducing=False)
    with pytest.raises(TypeError, match="kernel is a RBF, the source's a Matern52"):
        savigp.warm_start(_model("diag-u"), matern)
    with pytest.raises(ValueError, match="the source has posterior='joint'"):
        savigp.warm_start(_model("diag-u"), _model("joint"))
    with pytest.raises(ValueError, match="the model has posterior='joint'"):
        savigp.warm_start(_model("joint"), _model("full"))


@pytest.mark.parametrize("source_kind,K", [("full", 2), ("joint", 1)])
def test_moments_false_copies_the_hyper_parameters_and_keeps_q(source_kind, K):
    """``moments=False``: the kernel, likelihood, inducing inputs and prior mean are the source's (any
    source, a mixture or a joint Gaussian too), q(u) stays the model's own, bit for bit."""
    source = _model(source_kind, K, lengthscale=1.9, variance=0.4, noise=0.05)
    model = _model("diag-u", 2)
    before = {k: v.clone() for k, v in model.posterior.state_dict().items()}
    savigp.warm_start(model, source, moments=False)
    for name in ("kernel", "likelihood"):
        ours, theirs = getattr(model, name).state_dict(), getattr(source, name).state_dict()
        assert all(torch.equal(ours[k], theirs[k]) for k in theirs), name
    assert torch.equal(model.inducing, source.inducing) and torch.equal(model.prior_mean, source.prior_mean)
    after = model.posterior.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert float(model.kernel.lengthscales().mean()) == pytest.approx(1.9)


def test_a_family_without_moments_over_u_is_refused_by_its_capability():
    """warm_start reads the family's function_moments, not its name: a registered family that declares
    none (here a diagonal mixture that opts out) is refused as the joint Gaussian is, by its own name."""
    from savigp.posteriors import POSTERIORS

    class OptedOut(DiagonalMixture):
        kind = "diag-opted-out"
        function_moments = False

    POSTERIORS.register("diag-opted-out", OptedOut)
    try:
        with pytest.raises(ValueError, match="the model has posterior='diag-opted-out', which has no moments over u"):
            savigp.warm_start(_model("diag-opted-out"), _model("full"))
        model = _model("diag-opted-out")
        assert savigp.warm_start(model, _model("full"), moments=False) is model  # (hyper-parameters only: fine)
    finally:
        POSTERIORS.unregister("diag-opted-out")
