"""Tests of the DECOUPLED and HYBRID mean bases (savigp.mean_heads; Cheng & Boots 2017,
Salimbeni et al. 2018, eq. (9)-(10)).

The KL is checked against an explicit joint Gaussian over [Z, gamma], and HYBRID against the
orthogonal head through the reparametrization that maps one onto the other; closed forms at
float64 round-off.
"""
from __future__ import annotations

import math
import warnings

import pytest
import torch

from conftest import minimal_file_config, requires_cuda, sine_data
from likelihoods import Gaussian, Logistic, MultiGaussian
from savigp import SAVIGP, fit
from savigp.mean_heads.heads import MEAN_HEADS, DecoupledMeanHead, HybridMeanHead, make_mean_head
from savigp.training.natural_gradients import fit_orthnat, natural_gradient_step
from savigp.model_files import SavedModel, load_model
from savigp.testing.mean_heads import explicit_component_kl, model_kl, randomize

_U = "diag-u"  # the paper's mixture over u (held in prior-conditioned coordinates, m = L_zz w)


def _model(basis, posterior="full", K=1, q=1, n=40, M=4, G=6, seed=2, lik=None):
    X, Y = sine_data(n, seed=seed, q=q)
    lik = lik or (Gaussian(0.1) if q == 1 else MultiGaussian(q, variance=0.1))
    model = SAVIGP(X, Y, lik, num_inducing=M, posterior=posterior, num_components=K, mean_basis_size=G,
                   mean_basis=basis)
    randomize(model, seed=seed + 3)
    if basis == "decoupled":
        with torch.no_grad():
            model.posterior.mean.zero_()
    return model


# ---------------------------------------------------------------------- the KL against the joint Gaussian
@pytest.mark.parametrize("basis", ["decoupled", "hybrid"])
@pytest.mark.parametrize("posterior", ["full", "diag", _U])
def test_kl_matches_explicit_joint_gaussian(basis, posterior):
    model = _model(basis, posterior, q=2)
    total, head_kl = model_kl(model)
    assert abs(head_kl) > 1e-2  # (HYBRID's cross term can make it negative)
    assert total == pytest.approx(explicit_component_kl(model, 0, basis), rel=1e-8, abs=1e-8)


@pytest.mark.parametrize("basis", ["decoupled", "hybrid"])
@pytest.mark.parametrize("posterior", ["full", "diag", _U])
def test_mixture_kl_terms_exact_per_component(basis, posterior):
    """A shared head shifts every component: component k's KL grows by 1/2 ||h||^2 + <h, mu_k>_H
    (HYBRID; <h, mu_k> = 0 for DECOUPLED), and the head's term is their pi-weighted sum."""
    model = _model(basis, posterior, K=2, seed=4)
    _, head_kl = model_kl(model)
    with_head = [explicit_component_kl(model, k, basis) for k in range(2)]
    a = model.mean_head.a.detach().clone()
    with torch.no_grad():
        model.mean_head.a.zero_()
    without = [explicit_component_kl(model, k, basis) for k in range(2)]
    with torch.no_grad():
        model.mean_head.a.copy_(a)
    diffs = [w - wo for w, wo in zip(with_head, without)]
    pi = model.posterior.weights().detach()
    assert float(pi[0] * diffs[0] + pi[1] * diffs[1]) == pytest.approx(head_kl, rel=1e-8)
    if basis == "hybrid":  # the components' means differ, so do their terms
        assert abs(diffs[0] - diffs[1]) > 1e-3
    else:
        assert diffs[0] == pytest.approx(diffs[1], rel=1e-10)


def test_hybrid_is_the_orthogonal_basis_reparametrized():
    """HYBRID with coupled mean m - c (c = L_zz^-1 K_Z,gamma a) is the orthogonal model with mean m:
    same marginals, same KL, same ELBO (Salimbeni et al. 2018, §3.2: (11) is (10) with a projection)."""
    X, Y = sine_data(60, seed=6, q=2)
    orth = randomize(SAVIGP(X, Y, MultiGaussian(2, variance=0.1), num_inducing=5, posterior="diag",
                             num_components=2, mean_basis_size=8), seed=7)
    hyb = SAVIGP(X, Y, MultiGaussian(2, variance=0.1), num_inducing=5, posterior="diag", num_components=2,
                 mean_basis_size=8, mean_basis="hybrid")
    hyb.load_state_dict(orth.state_dict())
    with torch.no_grad():
        c = orth.mean_head.coefficients(orth.kernel, orth.inducing, orth.prior_factor())  # (Q, M)
        hyb.posterior.mean.sub_(c)
    Xs = torch.randn(25, 2, dtype=torch.float64)
    for u, v in zip(orth.predict_latent(Xs), hyb.predict_latent(Xs)):
        assert torch.allclose(u, v, rtol=1e-10, atol=1e-12)
    e0, e1 = orth.elbo(), hyb.elbo()
    assert e1.mean_head_kl != pytest.approx(float(e0.mean_head_kl), rel=1e-3)  # the terms are split differently ...
    assert float(e1.elbo.detach()) == pytest.approx(float(e0.elbo.detach()), rel=1e-11)  # ... the total is not


# ---------------------------------------------------------------------- gradients (marginal means: test_decoupled.py)
@pytest.mark.parametrize("basis", ["decoupled", "hybrid"])
@pytest.mark.parametrize("posterior,K", [("full", 1), ("diag", 2), (_U, 2)])
def test_fused_and_reference_paths_agree(basis, posterior, K):
    """The fused path (L_zz without graph; HYBRID refactorizes with a graph for its cross term) and
    autograd through L_zz give the same ELBO and gradients for every parameter."""
    model = _model(basis, posterior, K=K, q=2, n=70, M=6, G=15, seed=30)
    params = [p for p in model.parameters() if p.requires_grad]
    fused = model.elbo()
    g_fused = torch.autograd.grad(fused.elbo, params)
    Lzz = model.prior_factor()
    mean, var = model.marginals(model.train_x, Lzz)
    per = model.likelihood.expected_log_prob(model.train_y, mean, var)
    post = model.posterior
    cross = post.cross_entropy() if post.whitened else post.cross_entropy(None, Lzz)
    ref = ((post.weights()[:, None] * per).sum() + post.entropy(None, Lzz) + cross
           - model.mean_head.kl(model.kernel, model.inducing, Lzz, posterior=post))
    g_ref = torch.autograd.grad(ref, params)
    assert float(fused.elbo.detach()) == pytest.approx(float(ref.detach()), rel=1e-11)
    for p, a, b in zip(params, g_fused, g_ref):
        scale = float(b.abs().max()) + 1e-300
        assert float((a - b).abs().max()) <= 1e-8 * scale, (tuple(p.shape), float((a - b).abs().max()), scale)


def test_joint_posterior_hybrid_kl_matches_factorized():
    """posterior="joint" (one Gaussian over all Q M values): with the same means, the HYBRID term
    is the factorized model's (it depends on the means only)."""
    X, Y = sine_data(40, seed=9, q=2)
    kw = dict(num_inducing=4, mean_basis_size=6, mean_basis="hybrid")
    full = randomize(SAVIGP(X, Y, MultiGaussian(2, variance=0.1), **kw), seed=10)
    joint = SAVIGP(X, Y, MultiGaussian(2, variance=0.1), posterior="joint", **kw)
    joint.load_state_dict({k: v for k, v in full.state_dict().items() if "raw_scale" not in k and "logits" not in k},
                          strict=False)
    t_full, t_joint = full.elbo(), joint.elbo()
    assert t_joint.mean_head_kl == pytest.approx(float(t_full.mean_head_kl), rel=1e-12)
    t_joint.elbo.backward()
    assert float(joint.posterior.mean.grad.abs().max()) > 0 and float(joint.mean_head.a.grad.abs().max()) > 0


# ---------------------------------------------------------------------- DECOUPLED: the coupled mean stays zero
def test_decoupled_keeps_the_coupled_mean_at_zero_in_every_trainer():
    X, Y = sine_data(80, seed=11)
    model = SAVIGP(X, Y, Gaussian(0.1), num_inducing=6, mean_basis_size=12, mean_basis="decoupled")
    post = model.posterior
    assert not post.mean.requires_grad and float(post.mean.abs().max()) == 0.0
    h0 = fit(model, iterations=30, lr=0.05, progress=False)
    assert float(post.mean.abs().max()) == 0.0 and h0.elbo[-1] > h0.elbo[0]
    assert float(model.mean_head.a.detach().abs().max()) > 0.01
    natural_gradient_step(model, step=1.0)
    h1 = fit_orthnat(model, 10, natgrad_step=0.5, gamma_step=1.0, batch_size=40)
    assert float(post.mean.abs().max()) == 0.0 and all(math.isfinite(v) for v in h1.elbo)
    with pytest.raises(ValueError, match="needs the posterior"):
        make_mean_head("decoupled", X, 1, 4)
    with pytest.raises(ValueError, match="mean_basis must be one of"):
        make_mean_head("coupled", X, 1, 4)
    with pytest.raises(ValueError, match="mean_basis_size > 0"):
        SAVIGP(X, Y, Gaussian(0.1), num_inducing=6, mean_basis="hybrid")


def test_natural_step_is_exact_for_each_basis():
    """Gaussian likelihood, tau = 1: one natural step reaches the optimal q(v) given a, for HYBRID
    (whose KL is linear in m through the cross term) and for DECOUPLED (S alone, m = 0): the ELBO
    gradient in the posterior parameters vanishes."""
    for basis in ("hybrid", "decoupled"):
        model = _model(basis, "full", n=100, M=8, G=20, seed=16)
        post = model.posterior
        wrt = [p for p in (post.mean, post.raw_scale) if p.requires_grad]
        g0 = torch.autograd.grad(model.elbo().elbo, wrt)
        natural_gradient_step(model, step=1.0)
        g1 = torch.autograd.grad(model.elbo().elbo, wrt)
        for a, b in zip(g0, g1):
            assert float(b.abs().max()) < 1e-7 * float(a.abs().max()), basis


@pytest.mark.parametrize("basis", ["decoupled", "hybrid"])
def test_preconditioner_without_projection(basis):
    """For the unprojected bases the KL curvature in a is K_gamma: eq. (16)'s diagonal is diag K_gamma."""
    model = _model(basis, "full", n=60, M=5, G=10, seed=17)
    with torch.no_grad():
        P = model.mean_head.natural_preconditioner(model.kernel, model.inducing, model.prior_factor(), jitter=0.0)
        assert torch.allclose(P, model.kernel.diag(model.mean_head.gamma), rtol=1e-12)


# ---------------------------------------------------------------------- estimators, black boxes, files
@pytest.mark.parametrize("basis", ["decoupled", "hybrid"])
@pytest.mark.parametrize("posterior,K,estimator", [("full", 1, "score"), ("diag", 2, "reparam"), (_U, 2, "quadrature"),
                                                   ("joint", 1, "auto")])
def test_black_box_training_improves(basis, posterior, K, estimator):
    """Logistic likelihood through every estimator (the score function sees values of log p only)."""
    X, Y = sine_data(120, seed=40)
    Y = torch.sign(Y)
    model = SAVIGP(X, Y, Logistic(), num_inducing=6, posterior=posterior, num_components=K, mean_basis_size=20,
                   mean_basis=basis)
    est = "quadrature" if posterior != "joint" else "auto"
    start = float(model.elbo(estimator=est).elbo.detach())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        fit(model, iterations=40, lr=0.05, estimator=estimator, num_samples=20, progress=False)
    end = float(model.elbo(estimator=est).elbo.detach())
    assert math.isfinite(end) and end > start + 5, (start, end)
    assert float(model.mean_head.a.detach().abs().max()) > 0.01


@pytest.mark.parametrize("basis", MEAN_HEADS.names())
def test_model_file_round_trip(basis, tmp_path):
    X, Y = sine_data(30, seed=12)
    model = _model(basis, "full", n=30, M=4, G=5, seed=12)
    saved = SavedModel(model, minimal_file_config())
    assert model.config["mean_basis"] == basis
    path = str(tmp_path / "m.pt")
    saved.save(path)
    loaded, _ = load_model(path)
    head = loaded.model.mean_head
    assert type(head) is type(model.mean_head)
    assert isinstance(head, (DecoupledMeanHead, HybridMeanHead)) == (basis != "orthogonal")
    assert loaded.model.posterior.mean.requires_grad == (basis != "decoupled")
    Xs = torch.randn(7, 2, dtype=torch.float64)
    for u, v in zip(model.predict_latent(Xs), loaded.model.predict_latent(Xs)):
        assert torch.allclose(u, v, rtol=1e-13, atol=1e-14)


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("basis", ["decoupled", "hybrid"])
def test_cuda_matches_cpu(basis):
    cpu = _model(basis, "diag", K=2, n=80, M=6, G=10, seed=28)
    X, Y = sine_data(80, seed=28)
    gpu = SAVIGP(X, Y, Gaussian(0.1), num_inducing=6, posterior="diag", num_components=2, mean_basis_size=10,
                 mean_basis=basis, device="cuda")
    gpu.load_state_dict(cpu.state_dict())
    assert float(gpu.elbo().elbo.detach()) == pytest.approx(float(cpu.elbo().elbo.detach()), rel=1e-10)
    fit(gpu, iterations=3, lr=0.01, progress=False)
    assert gpu.mean_head.a.device.type == "cuda" and torch.isfinite(gpu.predict_latent(X[:5])[0]).all()


def test_a_model_without_a_basis_holds_the_zero_head():
    """SAVIGP.head: the model's mean head, or the zero head (no shift, no KL, no parameters, nothing to
    precondition) -- the model and the trainers call it the same way and ask it no questions."""
    from savigp.mean_heads import ZERO_HEAD, MeanHead

    X, Y = sine_data(30, seed=3)
    model = SAVIGP(X, Y, Gaussian(0.1), num_inducing=4)
    assert model.mean_head is None and model.head is ZERO_HEAD and isinstance(ZERO_HEAD, MeanHead)
    assert model.head.size == 0 and model.head.natural_parameters() == [] and not model.head.fixes_mean
    assert list(ZERO_HEAD.parameters()) == [] and model.head.graph_obstacle() is None
    Lzz = model.prior_factor()
    assert float(model.head.kl(model.kernel, model.inducing, Lzz)) == 0.0
    m = torch.ones(1, 4, dtype=torch.float64)
    assert float(model.head.mean_coupling(model.kernel, model.inducing, Lzz, m)) == 0.0
    with pytest.raises(ValueError, match="no mean head"):
        model.head.natural_preconditioner(model.kernel, model.inducing, Lzz)
    with_head = SAVIGP(X, Y, Gaussian(0.1), num_inducing=4, mean_basis_size=6)
    assert with_head.head is with_head.mean_head and with_head.head.natural_parameters() == [with_head.mean_head.a]
    with_head.mean_head.kl_columns = 3
    assert with_head.head.graph_obstacle() == "the mean head samples its KL columns on the host (kl_columns=3)"
    assert SAVIGP(X, Y, Gaussian(0.1), num_inducing=4, mean_basis_size=6, mean_basis="decoupled").head.fixes_mean
