"""A test kit for mean heads (``mean_basis=``, Salimbeni et al. 2018): :func:`check_mean_head` runs on
any registered head (:data:`savigp.mean_heads.MEAN_HEADS`) the checks savigp runs on its own, with
the closed-form references they use (:func:`explicit_component_kl`, :func:`model_kl`).

    from savigp.testing.mean_heads import check_mean_head
    MEAN_HEADS.register("mine", MyHead)
    print(check_mean_head("mine"))     # raises CheckError listing every failure
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from .._choices import MEAN_HEADS
from .model_checks import marginals_device, marginals_dtype
from .report import FAILED, PASSED, SKIPPED, Report, run_checks


# ---------------------------------------------------------------------- references
def randomize(model, seed: int = 1, head_scale: float = 1.0):
    """Random posterior means, scales and weights and head coefficients a (``head_scale`` times
    standard normal), so that no check passes at the prior by accident. Returns ``model``."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        post = model.posterior
        post.mean.copy_(0.5 * torch.randn(post.mean.shape, generator=g, dtype=torch.float64))
        post.raw_scale.add_(0.2 * torch.randn(post.raw_scale.shape, generator=g, dtype=torch.float64))
        logits = post.weight_logits
        if logits is not None:
            logits.copy_(torch.randn(logits.shape, generator=g, dtype=torch.float64))
        for a in model.head.natural_parameters():  # (the coefficients a; none for the zero head)
            a.copy_(head_scale * torch.randn(a.shape, generator=g, dtype=torch.float64))
    return model


def explicit_component_kl(model, k: int, basis: Optional[str] = None) -> float:
    """KL(q_k || p) of component k from the joint Gaussian over P = [Z_j; gamma_j], summed over j
    (Salimbeni et al. 2018, App. A).

    q_k's mean at P is mu + K_PZ K_zz^-1 u_k + h(P), with u_k = L_zz m_k (whitened) or m_k
    (u-space), and h(P) = K_P,gamma a (HYBRID, DECOUPLED) or (K_P,gamma - K_PZ K_zz^-1 K_Z,gamma) a
    (orthogonal: ``basis="orthogonal"``, default the head's ``orthogonal`` flag); its covariance
    K_PP - K_PZ K_zz^-1 K_ZP + K_PZ K_zz^-1 S_u K_zz^-1 K_ZP; p = N(mu, K_PP). K_zz is the jittered
    L_zz L_zz^T the model uses. (With a = 0 pass a model whose head is zeroed.)
    """
    with torch.no_grad():
        kern, Z, head, post = model.kernel, model.inducing, model.mean_head, model.posterior
        orthogonal = (head if basis is None else MEAN_HEADS[MEAN_HEADS.canonical(basis)]).orthogonal
        Lzz = model.prior_factor()
        Kzz = Lzz @ Lzz.transpose(-1, -2)
        Kzg = kern(Z, head.gamma)  # blockwise, so that Z may be inducing features (savigp.kernels.fourier_features)
        KPP = torch.cat([torch.cat([Kzz, Kzg], -1), torch.cat([Kzg.transpose(-1, -2), kern(head.gamma, head.gamma)], -1)], -2)
        M = Z.shape[1]
        KPZ, KPg = KPP[:, :, :M], KPP[:, :, M:]
        if post.whitened:
            sc = post.scale()[k]
            S = torch.diag_embed(sc * sc) if post.diagonal else sc @ sc.transpose(-1, -2)
            Su = Lzz @ S @ Lzz.transpose(-1, -2)
            um = (Lzz @ post.mean[k].unsqueeze(-1)).squeeze(-1)
        else:  # the diagonal mixture over u: its m and s (held in prior-conditioned coordinates)
            u = post.u_parameters(Lzz=Lzz)
            Su, um = torch.diag_embed(u.sd[k] ** 2), u.mean[k]
        A = torch.linalg.solve(Kzz, KPZ.transpose(-1, -2)).transpose(-1, -2)  # K_PZ K_zz^-1
        hP = KPg - A @ KPg[:, :M, :] if orthogonal else KPg
        mean = (A @ um.unsqueeze(-1)).squeeze(-1) + (hP @ head.a.unsqueeze(-1)).squeeze(-1)
        cov = KPP - A @ KPZ.transpose(-1, -2) + A @ Su @ A.transpose(-1, -2)
        Lp = torch.linalg.cholesky(KPP)
        Lq = torch.linalg.cholesky(0.5 * (cov + cov.transpose(-1, -2)))
        tr = torch.cholesky_solve(cov, Lp).diagonal(dim1=-2, dim2=-1).sum(-1)
        maha = (torch.cholesky_solve(mean.unsqueeze(-1), Lp).squeeze(-1) * mean).sum(-1)
        logdet = 2 * (torch.log(Lp.diagonal(dim1=-2, dim2=-1)).sum(-1) - torch.log(Lq.diagonal(dim1=-2, dim2=-1)).sum(-1))
        return float((0.5 * (tr + maha - KPP.shape[-1] + logdet)).sum())


def model_kl(model) -> tuple[float, float]:
    """(the model's KL: -(entropy + cross-entropy) + the head's KL, in the posterior's own
    coordinates (= the u-space KL), the head's KL)."""
    with torch.no_grad():
        post, Lzz = model.posterior, model.prior_factor()
        cross = post.cross_entropy() if post.whitened else post.cross_entropy(None, Lzz)
        head = model.mean_head.kl(model.kernel, model.inducing, Lzz, posterior=post)
        return -float(post.entropy(None, Lzz) + cross) + float(head), float(head)


# ---------------------------------------------------------------------- the kit
@dataclass
class _Problem:
    basis: str
    X: torch.Tensor
    Y: torch.Tensor
    G: int
    posterior: str
    reference: bool

    def model(self, dtype=torch.float64, device=None, seed: int = 2, head_scale: float = 1.0):
        from likelihoods import MultiGaussian

        from ..model import SAVIGP

        model = SAVIGP(self.X, self.Y, MultiGaussian(self.Y.shape[1], variance=0.1), num_inducing=4,
                       posterior=self.posterior, mean_basis_size=self.G, mean_basis=self.basis, seed=seed)
        randomize(model, seed=seed + 3, head_scale=head_scale)
        if not model.posterior.mean.requires_grad:  # a head that fixed the coupled mean (attach)
            with torch.no_grad():
                model.posterior.mean.zero_()
        return model.to(dtype=dtype, device=device)


def _shapes(p: _Problem):
    model = p.model()
    Q, B = model.num_latent, 7
    X = torch.randn(B, model.input_dim, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    with torch.no_grad():
        Lzz = model.prior_factor()
        V = torch.linalg.solve_triangular(Lzz, model.kernel(model.inducing, X), upper=False)
        shift = model.mean_head.mean_shift(X, model.kernel, model.inducing, Lzz, V)
        kl = model.mean_head.kl(model.kernel, model.inducing, Lzz, posterior=model.posterior)
    if tuple(shift.shape) != (Q, B):
        return FAILED, f"mean_shift returned shape {tuple(shift.shape)}, expected (Q, B) = {(Q, B)}"
    if kl.dim() != 0:
        return FAILED, f"kl returned shape {tuple(kl.shape)}, expected a scalar"
    if not bool(torch.isfinite(shift).all()) or not bool(torch.isfinite(kl)):
        return FAILED, "mean_shift or kl is not finite"
    return PASSED, ""


def _zero_head(p: _Problem):
    """a = 0 adds nothing: mean shift and KL exact zeros."""
    model = p.model(head_scale=0.0)
    with torch.no_grad():
        Lzz = model.prior_factor()
        X = model.train_x[:5]
        V = torch.linalg.solve_triangular(Lzz, model.kernel(model.inducing, X), upper=False)
        shift = model.mean_head.mean_shift(X, model.kernel, model.inducing, Lzz, V)
        kl = model.mean_head.kl(model.kernel, model.inducing, Lzz, posterior=model.posterior)
    if float(shift.abs().max()) != 0.0 or float(kl) != 0.0:
        return FAILED, f"with a = 0 the head adds {float(shift.abs().max()):.3g} to the mean and {float(kl):.3g} to the KL"
    return PASSED, ""


def _explicit_state(p: _Problem):
    """The head's per-evaluation state (``evaluation_state``), passed to ``mean_shift`` and ``kl``,
    gives what they compute without it, and the head carries nothing from one call to the next:
    after an in-place change of its coefficients a, both see the new values."""
    model = p.model()
    head = model.mean_head
    with torch.no_grad():
        Lzz = model.prior_factor()
        X = model.train_x[:5]
        V = torch.linalg.solve_triangular(Lzz, model.kernel(model.inducing, X), upper=False)

        def both(state=None):
            return (head.mean_shift(X, model.kernel, model.inducing, Lzz, V, state=state),
                    head.kl(model.kernel, model.inducing, Lzz, posterior=model.posterior, state=state))

        state = head.evaluation_state(model.kernel, model.inducing, Lzz)
        (s1, k1), (s0, k0) = both(state), both()
        if float((s1 - s0).abs().max()) > 1e-12 * max(1.0, float(s0.abs().max())) or \
                abs(float(k1) - float(k0)) > 1e-12 * max(1.0, abs(float(k0))):
            return FAILED, "mean_shift / kl with the head's evaluation_state differ from them without it"
        head.a.mul_(2.0)
        try:
            (s2, k2), (s3, k3) = both(), both(head.evaluation_state(model.kernel, model.inducing, Lzz))
        finally:
            head.a.div_(2.0)
    if float((s2 - 2.0 * s0).abs().max()) > 1e-9 * max(1.0, float(s0.abs().max())) or \
            float((s3 - s2).abs().max()) > 1e-12 * max(1.0, float(s2.abs().max())) or abs(float(k2) - float(k3)) > 1e-9:
        return FAILED, "after a -> 2 a the mean shift is not doubled: the head kept terms from an earlier call"
    return PASSED, ""


def _kl_reference(p: _Problem):
    """The model's KL (posterior + head) equals the KL of the joint Gaussian over [Z, gamma]."""
    if not p.reference:
        return SKIPPED, "reference=False (the head is not of the orthogonal or unprojected form)"
    model = p.model()
    total, _ = model_kl(model)
    expected = explicit_component_kl(model, 0)
    if abs(total - expected) > 1e-7 * max(1.0, abs(expected)):
        return FAILED, f"KL {total!r}, the joint Gaussian over [Z, gamma] gives {expected!r}"
    return PASSED, ""


def _gradients(p: _Problem):
    model = p.model()
    terms = model.elbo(None, num_samples=4, generator=torch.Generator().manual_seed(1))
    terms.elbo.backward()
    bad = [n for n, t in model.mean_head.named_parameters() if t.grad is None or not bool(torch.isfinite(t.grad).all())]
    if bad or float(model.mean_head.a.grad.abs().max()) == 0.0:
        return FAILED, f"the ELBO's gradient in the head's parameters is missing, zero or not finite ({bad or ['a']})"
    return PASSED, ""


CHECKS = (
    ("shapes", _shapes, ()),
    ("zero_head", _zero_head, ("shapes",)),
    ("explicit_state", _explicit_state, ("shapes",)),
    ("kl_reference", _kl_reference, ("shapes",)),
    ("gradients", _gradients, ("shapes",)),
    ("dtype", marginals_dtype, ("shapes",)),
    ("device", marginals_device, ("shapes",)),
)


def check_mean_head(basis: str, *, posterior: str = "full", size: int = 5, reference: bool = True,
                    seed: int = 0, raise_on_failure: bool = True) -> Report:
    """Check the registered mean head ``basis`` on a small model (Q = 2, M = 4, G = ``size``,
    ``posterior``) the way savigp checks its own:

    * ``shapes``: ``mean_shift`` is ``(Q, B)``, ``kl`` a scalar, both finite;
    * ``explicit_state``: ``mean_shift`` and ``kl`` given the head's ``evaluation_state`` equal them
      without it, and the head keeps nothing between calls (a -> 2 a doubles the shift at once);
    * ``zero_head``: with a = 0 the head adds exact zeros to the mean and the KL;
    * ``kl_reference``: the model's KL equals :func:`explicit_component_kl` at 1e-7 (``reference=False``
      skips it for a head that is neither the orthogonal nor the unprojected basis);
    * ``gradients``: the ELBO's gradients in the head's parameters are finite and not all zero;
    * ``dtype``: a float32 model gives float32 marginals; ``device``: a CUDA model keeps them on
      the device (skipped without one).

    Returns the :class:`~savigp.testing.report.Report`; raises
    :class:`~savigp.testing.report.CheckError` listing the failures when ``raise_on_failure``.
    """
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(30, 2, generator=g, dtype=torch.float64)
    f = torch.sin(2.0 * X[:, :1]) + 0.5 * torch.cos(3.0 * X[:, 1:])
    Y = torch.cat([f, -f], 1) + 0.1 * torch.randn(30, 2, generator=g, dtype=torch.float64)
    problem = _Problem(basis, X, Y, int(size), posterior, reference)
    return run_checks(Report(repr(basis), kit="check_mean_head"), CHECKS, problem, raise_on_failure)
