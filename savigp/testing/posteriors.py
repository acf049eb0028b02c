"""A test kit for posterior families (:mod:`savigp.posteriors`): :func:`check_posterior` runs on any
registered family (:data:`savigp.posteriors.POSTERIORS`) the checks savigp runs on its own, through
a small model: the protocol's shapes (its marginals a :class:`~savigp.posteriors.marginals.LatentMarginals`), the fused against the autograd path, the marginals and the KL
terms against the Gaussian formulas over u (Bonilla et al. 2019, eq. (18)-(19), (22)-(23)), draws
against the marginals, finite gradients, dtype and device following.

    from savigp.testing.posteriors import check_posterior
    POSTERIORS.register("mine", MyFamily)
    print(check_posterior("mine", num_components=2))    # raises CheckError listing every failure
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .model_checks import marginals_device, marginals_dtype
from .report import FAILED, PASSED, SKIPPED, Report, run_checks

Q, M, N, B = 2, 4, 30, 5


@dataclass
class _Problem:
    kind: str
    K: int
    seed: int

    def model(self, dtype=torch.float64, device=None):
        """A MultiGaussian model (Q = 2, M = 4, N = 30) whose posterior is moved off its start."""
        from likelihoods import MultiGaussian

        from ..model import SAVIGP

        g = torch.Generator().manual_seed(self.seed)
        X = torch.randn(N, 2, generator=g, dtype=torch.float64)
        Y = torch.randn(N, Q, generator=g, dtype=torch.float64)
        model = SAVIGP(X, Y, MultiGaussian(Q), num_inducing=M, posterior=self.kind, num_components=self.K,
                       prior_mean=[0.5, -1.0], seed=self.seed)
        with torch.no_grad():
            for p in model.posterior.parameters():
                p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
        return model.to(dtype=dtype, device=device)

    def u_gaussians(self, model):
        """Per component: the mean ``(Q M,)`` and covariance ``(Q M, Q M)`` of q_k(u), the weights and L_zz
        (from :meth:`~savigp.posteriors.Posterior.u_moments`), or None when the family gives none."""
        with torch.no_grad():
            L = model.prior_factor()
            try:
                mean, factor = model.posterior.u_moments(L)  # (K, Q, M), (K, Q, M, M)
            except NotImplementedError:
                return None
            mu = model.prior_mean.repeat_interleave(M)
            means = mean.reshape(mean.shape[0], -1) + mu
            covs = torch.stack([torch.block_diag(*(F @ F.transpose(-1, -2)).unbind(0)) for F in factor])
            return means, covs, model.posterior.weights(), L


def _shapes(p: _Problem):
    model = p.model()
    X = model.train_x[:B]
    mean, var = model.marginals(X)
    if mean.shape != (p.K, B, Q) or var.shape != (p.K, B, Q):
        return FAILED, f"marginals have shapes {tuple(mean.shape)}, {tuple(var.shape)}, expected (K, B, Q) = {(p.K, B, Q)}"
    w = model.posterior.weights()
    if w.shape != (p.K,) or abs(float(w.detach().sum()) - 1.0) > 1e-12:
        return FAILED, f"weights have shape {tuple(w.shape)} and sum {float(w.detach().sum())}, expected ({p.K},) summing to 1"
    if not bool((var.detach() > 0).all()) or not math.isfinite(float(model.elbo().elbo.detach())):
        return FAILED, "variances not positive or the ELBO not finite"
    from ..posteriors.marginals import LatentMarginals
    from ..posteriors.base import InducingPrior

    with torch.no_grad():  # the protocol's marginals: the fixed contract the estimators read
        q = model.posterior.marginals(InducingPrior(model.prior_factor()), model.kernel(model.inducing, X),
                                      model.kernel.diag(X))
    if not isinstance(q, LatentMarginals):
        return FAILED, f"Posterior.marginals returned a {type(q).__name__}, expected a LatentMarginals"
    if q.cov is not None and float((q.cov.diagonal(dim1=-2, dim2=-1) - q.var).abs().max()) > 1e-12:
        return FAILED, "the marginals' var is not the diagonal of their cov"
    if float((q.log_weights - model.posterior.log_weights().detach()).abs().max()) > 1e-12:
        return FAILED, "the marginals' log_weights are not the family's log_weights()"
    return PASSED, ""


def _fused_path(p: _Problem):
    """``marginals(X)`` (the family's fused path) and ``marginals(X, L_zz with graph)``: same values
    and gradients for every parameter."""
    model = p.model()
    X = model.train_x[:B]
    params = [t for t in model.parameters() if t.requires_grad]
    out = []
    for Lzz in (None, model.prior_factor()):
        mean, var = model.marginals(X, Lzz)
        loss = (mean * torch.linspace(-1, 1, Q, dtype=mean.dtype)).sum() + var.sqrt().sum()
        out.append((mean.detach(), var.detach(), torch.autograd.grad(loss, params, allow_unused=True)))
    (m0, v0, g0), (m1, v1, g1) = out
    err = max(float((m0 - m1).abs().max()), float((v0 - v1).abs().max()))
    if err > 1e-9:
        return FAILED, f"the fused and autograd marginals differ by {err:.3g}"
    for t, a, b in zip(params, g0, g1):
        if (a is None) != (b is None) or (a is not None and float((a - b).abs().max()) > 1e-6 * max(1.0, float(b.abs().max()))):
            return FAILED, f"the gradients of a parameter of shape {tuple(t.shape)} differ between the two paths"
    return PASSED, ""


def _marginals_over_u(p: _Problem):
    """b_knj = mu_j + a_jn^T m_kj and s2_knj = k_j(x_n, x_n) - k_jn^T K_zz^-1 k_jn + a_jn^T C_kj a_jn,
    a_jn = K_zz^-1 k_jn, from q(u) (eq. (22)-(23))."""
    model = p.model()
    u = p.u_gaussians(model)
    if u is None:
        return SKIPPED, "the family gives no moments over u (u_moments)"
    means, covs, _, L = u
    X = model.train_x[:B]
    with torch.no_grad():
        Kzx = model.kernel(model.inducing, X)  # (Q, M, B)
        Kzz = L @ L.transpose(-1, -2)
        A = torch.linalg.solve(Kzz, Kzx)  # (Q, M, B)
        mean, var = model.marginals(X)
        for k in range(p.K):
            for j in range(Q):
                m = means[k, j * M:(j + 1) * M] - model.prior_mean[j]
                C = covs[k, j * M:(j + 1) * M, j * M:(j + 1) * M]
                b = model.prior_mean[j] + A[j].T @ m
                s2 = model.kernel.diag(X)[j] - (Kzx[j] * A[j]).sum(0) + ((C @ A[j]) * A[j]).sum(0)
                err = max(float((mean[k, :, j] - b).abs().max()), float((var[k, :, j] - s2).abs().max()))
                if err > 1e-8:
                    return FAILED, f"component {k}, latent {j}: the marginals differ from q(u)'s by {err:.3g}"
    return PASSED, ""


def _kl_terms(p: _Problem):
    """K = 1: entropy = 1/2 log|2 pi e C| and cross-entropy = E_q[log N(u; mu, K_zz)] (eq. (18)-(19))."""
    if p.K != 1:
        return SKIPPED, "K > 1: the entropy is an estimate (see the mixture tests)"
    model = p.model()
    u = p.u_gaussians(model)
    if u is None:
        return SKIPPED, "the family gives no moments over u (u_moments)"
    means, covs, _, L = u
    with torch.no_grad():
        Kzz = torch.block_diag(*(L @ L.transpose(-1, -2)).unbind(0))
        n, d, C = Q * M, means[0] - model.prior_mean.repeat_interleave(M), covs[0]
        entropy = 0.5 * (n * math.log(2 * math.pi * math.e) + float(torch.logdet(C)))
        cross = -0.5 * (n * math.log(2 * math.pi) + float(torch.logdet(Kzz)) + float(d @ torch.linalg.solve(Kzz, d))
                        + float(torch.trace(torch.linalg.solve(Kzz, C))))
        terms = model.elbo()
    bad = [f"{name} {float(got)!r}, the Gaussian formula gives {want!r}"
           for name, got, want in (("entropy", terms.entropy, entropy), ("cross-entropy", terms.cross_entropy, cross))
           if abs(float(got) - want) > 1e-8 * max(1.0, abs(want))]
    return (FAILED, "; ".join(bad)) if bad else (PASSED, "")


def _draws(p: _Problem):
    """The sample means of 4000 draws lie within 4.5 standard errors of the marginal means."""
    model = p.model()
    S = 4000
    f, _, mean, var = model.draws(model.train_x[:3], S, seed=1)
    if f.shape != (S, p.K, 3, Q):
        return FAILED, f"draws have shape {tuple(f.shape)}, expected (S, K, B, Q) = {(S, p.K, 3, Q)}"
    z = float(((f.mean(0) - mean).abs() / (var / S).sqrt()).max())
    return (PASSED, "") if z < 4.5 else (FAILED, f"the draws' means are {z:.1f} standard errors from the marginals")


def _gradients(p: _Problem):
    model = p.model()
    model.elbo(None, num_samples=4, generator=torch.Generator().manual_seed(1)).elbo.backward()
    bad = [n for n, t in model.posterior.named_parameters()
           if t.requires_grad and (t.grad is None or not bool(torch.isfinite(t.grad).all()))]
    if bad or all(float(t.grad.abs().max()) == 0.0 for t in model.posterior.parameters() if t.requires_grad):
        return FAILED, f"the ELBO's gradient in the posterior's parameters is missing, zero or not finite ({bad})"
    return PASSED, ""


CHECKS = (
    ("shapes", _shapes, ()),
    ("fused_path", _fused_path, ("shapes",)),
    ("marginals_over_u", _marginals_over_u, ("shapes",)),
    ("kl_terms", _kl_terms, ("shapes",)),
    ("draws", _draws, ("shapes",)),
    ("gradients", _gradients, ("shapes",)),
    ("dtype", marginals_dtype, ("shapes",)),
    ("device", marginals_device, ("shapes",)),
)


def check_posterior(kind: str, num_components: int = 1, *, seed: int = 0, raise_on_failure: bool = True) -> Report:
    """Check the registered posterior family ``kind`` with K = ``num_components`` on a small model
    (Q = 2, M = 4, N = 30, its parameters moved off their start) the way savigp checks its own:

    * ``shapes``: marginals ``(K, B, Q)`` with positive variances, weights ``(K,)`` summing to 1,
      a finite ELBO;
    * ``fused_path``: the family's fused marginals and the autograd path through L_zz agree in
      values and in the gradients of every parameter;
    * ``marginals_over_u``: the marginals are those of q(u) (eq. (22)-(23), from ``u_moments``;
      skipped for a family without it);
    * ``kl_terms``: for K = 1 the ELBO's entropy and cross-entropy are the Gaussian formulas over u
      (eq. (18)-(19));
    * ``draws``: ``model.draws`` are ``(S, K, B, Q)`` with the marginal means within 4.5 standard errors;
    * ``gradients``: the ELBO's gradients in the family's parameters are finite and not all zero;
    * ``dtype``: a float32 model gives float32 marginals; ``device``: a CUDA model keeps them on
      the device (skipped without one).

    Returns the :class:`~savigp.testing.report.Report`; raises
    :class:`~savigp.testing.report.CheckError` listing the failures when ``raise_on_failure``.
    """
    problem = _Problem(kind, int(num_components), int(seed))
    return run_checks(Report(f"{kind!r}, K={num_components}", kit="check_posterior"), CHECKS, problem,
                      raise_on_failure)
