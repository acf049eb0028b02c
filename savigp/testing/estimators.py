"""A test kit for expected log-likelihood estimators (:mod:`savigp.estimators`, Bonilla et al.
2019, eq. (24)-(29)): :func:`check_estimator` builds a registered estimator by name
(:data:`savigp.ESTIMATORS`, :func:`savigp.estimators.make_estimator`), calls it as the model does
with a :class:`~savigp.posteriors.marginals.LatentMarginals`, and checks its value and its gradients in the
marginal means and variances against a likelihood's closed form, with tolerances from the Monte
Carlo standard error over independent replications.

    from savigp.testing.estimators import check_estimator
    print(check_estimator("score"))     # raises CheckError listing every failure
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .report import FAILED, PASSED, SKIPPED, Report, run_checks

#: Monte Carlo averages may differ from their reference by this many standard errors
Z = 4.0


@dataclass
class _Problem:
    estimator: str
    likelihood: object
    y: torch.Tensor  # (B, P)
    mean: torch.Tensor  # (K, B, Q)
    var: torch.Tensor  # (K, B, Q)
    weights: torch.Tensor  # (K,)
    num_samples: int
    replications: int
    seed: int
    scale: float = 3.0

    def estimate(self, rep: int, dtype=torch.float64, device=None):
        """One estimate (replication ``rep``) and its gradients in (mean, var)."""
        lik = self.likelihood.to(dtype=dtype, device=device)
        mean = self.mean.to(dtype=dtype, device=device).clone().requires_grad_(True)
        var = self.var.to(dtype=dtype, device=device).clone().requires_grad_(True)
        gen = torch.Generator(device=mean.device).manual_seed(self.seed + 7919 * rep)
        from ..estimators import make_estimator
        from ..posteriors.marginals import LatentMarginals

        q = LatentMarginals(mean, var, torch.log(self.weights.to(dtype=dtype, device=device)))
        est = make_estimator(self.estimator, lik)(lik, self.y.to(dtype=dtype, device=device), q,
                                                  num_samples=self.num_samples, scale=self.scale, generator=gen)
        gm, gv = torch.autograd.grad(est.value, (mean, var))
        self.likelihood.to(dtype=torch.float64, device="cpu")
        return est, gm, gv

    def exact(self):
        """The closed form: value and gradients of scale * sum_k pi_k sum_n E_qk[log p(y_n | f_n)]."""
        mean, var = self.mean.clone().requires_grad_(True), self.var.clone().requires_grad_(True)
        per = self.likelihood.expected_log_prob(self.y, mean, var)  # (K, B)
        value = self.scale * (self.weights[:, None] * per).sum()
        gm, gv = torch.autograd.grad(value, (mean, var))
        return float(value.detach()), gm, gv

    @property
    def monte_carlo(self) -> bool:
        from ..estimators import make_estimator

        return make_estimator(self.estimator, self.likelihood).monte_carlo


def _shapes(p: _Problem):
    est, gm, gv = p.estimate(0)
    K, B = p.mean.shape[:2]
    if est.value.dim() != 0 or tuple(est.per_component.shape) != (K, B):
        return FAILED, f"value has shape {tuple(est.value.shape)} and per_component {tuple(est.per_component.shape)}, " \
                       f"expected () and (K, B) = {(K, B)}"
    if gm.shape != p.mean.shape or gv.shape != p.var.shape:
        return FAILED, "gradients do not have the shapes of mean and var"
    weighted = p.scale * float((p.weights[:, None] * est.per_component).sum())
    if abs(weighted - float(est.value.detach())) > 1e-9 * max(1.0, abs(weighted)):
        return FAILED, f"value {float(est.value.detach())!r} is not scale * sum_k pi_k sum_n per_component = {weighted!r}"
    return PASSED, ""


def _replicate(p: _Problem):
    runs = [p.estimate(r) for r in range(p.replications if p.monte_carlo else 1)]
    values = torch.tensor([float(e.value.detach()) for e, _, _ in runs], dtype=torch.float64)
    gm = torch.stack([g for _, g, _ in runs])
    gv = torch.stack([g for _, _, g in runs])
    return values, gm, gv


def _against(name: str, got: torch.Tensor, want, monte_carlo: bool):
    """The worst z-score (Monte Carlo) or relative error of the replications' mean against ``want``."""
    mean = got.mean(0)
    want = torch.as_tensor(want, dtype=mean.dtype)
    if not monte_carlo:
        err = float((mean - want).abs().max() / want.abs().max().clamp_min(1.0))
        return None if err <= 1e-6 else f"{name}: relative error {err:.3g} against the closed form"
    se = got.std(0) / math.sqrt(got.shape[0])
    z = ((mean - want).abs() / se.clamp_min(1e-12 * max(1.0, float(want.abs().max()))))
    worst = float(z.max())
    return None if worst <= Z else f"{name}: {worst:.1f} standard errors from the closed form"


def _unbiased(p: _Problem):
    if not getattr(p.likelihood, "has_closed_form_ell", False):
        return SKIPPED, "the likelihood has no closed-form expected_log_prob"
    values, gm, gv = _replicate(p)
    value, em, ev = p.exact()
    bad = [m for m in (_against("value", values, value, p.monte_carlo), _against("d/d mean", gm, em, p.monte_carlo),
                       _against("d/d var", gv, ev, p.monte_carlo)) if m]
    return (FAILED, "; ".join(bad)) if bad else (PASSED, "")


def _stderr(p: _Problem):
    """The reported standard error agrees with the spread of the replications (within a factor 2)."""
    if not p.monte_carlo:
        return SKIPPED, "a deterministic estimator"
    runs = [p.estimate(r)[0] for r in range(p.replications)]
    spread = float(torch.tensor([float(e.value.detach()) for e in runs]).std())
    reported = float(torch.tensor([float(e.stderr) for e in runs]).mean())
    if not 0.5 <= reported / max(spread, 1e-300) <= 2.0:
        return FAILED, f"reported standard error {reported:.3g}, replications spread {spread:.3g}"
    return PASSED, ""


def _dtype(p: _Problem):
    est, gm, _ = p.estimate(0, dtype=torch.float32)
    if est.value.dtype != torch.float32 or gm.dtype != torch.float32:
        return FAILED, f"float32 marginals gave a {est.value.dtype} value and {gm.dtype} gradients"
    return PASSED, ""


def _device(p: _Problem):
    if not torch.cuda.is_available():
        return SKIPPED, "no CUDA device"
    est, gm, _ = p.estimate(0, device="cuda")
    return (PASSED, "") if est.value.is_cuda and gm.is_cuda else (FAILED, "CUDA marginals gave results off the device")


CHECKS = (
    ("shapes", _shapes, ()),
    ("unbiased", _unbiased, ("shapes",)),
    ("stderr", _stderr, ("shapes",)),
    ("dtype", _dtype, ("shapes",)),
    ("device", _device, ("shapes",)),
)


def check_estimator(estimator: str, likelihood=None, y=None, *, num_components: int = 2, num_samples: int = 64,
                    replications: int = 40, seed: int = 0, raise_on_failure: bool = True) -> Report:
    """Check the expected log-likelihood estimator ``estimator`` (a name of
    :data:`savigp.ESTIMATORS`) on ``likelihood`` (default ``likelihoods.Gaussian(0.5)``) and targets
    ``y (B, P)`` (default 3 rows), at K = ``num_components`` random marginals:

    * ``shapes``: the value is a scalar equal to scale * sum_k pi_k sum_n ``per_component (K, B)``,
      gradients have the shapes of the means and variances ``(K, B, Q)``;
    * ``unbiased``: the value and its gradients in the means and variances, averaged over
      ``replications`` independent draws of ``num_samples``, lie within 4 standard errors of the
      likelihood's closed form ``expected_log_prob`` (deterministic estimators: within 1e-6; skipped
      without a closed form);
    * ``stderr``: the estimate's reported standard error is within a factor 2 of the replications' spread;
    * ``dtype``: float32 marginals give float32; ``device``: CUDA stays on CUDA (skipped without one).

    Returns the :class:`~savigp.testing.report.Report`; raises
    :class:`~savigp.testing.report.CheckError` listing the failures when ``raise_on_failure``.
    """
    if likelihood is None:
        from likelihoods import Gaussian

        likelihood = Gaussian(variance=0.5)
    likelihood = likelihood.double()
    g = torch.Generator().manual_seed(seed)
    Q, K = int(likelihood.num_latent), int(num_components)
    y = torch.randn(3, int(likelihood.output_dim), generator=g, dtype=torch.float64) if y is None \
        else torch.as_tensor(y, dtype=torch.float64)
    B = y.shape[0]
    mean = torch.randn(K, B, Q, generator=g, dtype=torch.float64)
    var = 0.2 + torch.rand(K, B, Q, generator=g, dtype=torch.float64)
    weights = torch.softmax(torch.randn(K, generator=g, dtype=torch.float64), 0)
    problem = _Problem(estimator, likelihood, y, mean, var, weights, int(num_samples), int(replications), seed)
    return run_checks(Report(f"{estimator!r} on {type(likelihood).__name__}", kit="check_estimator"), CHECKS,
                      problem, raise_on_failure)


__all__ = ["check_estimator", "Z"]
