"""The natural-gradient update of a single Gaussian q(v_j) = N(m_j, S_j) with prior N(0, I), the step
the families that support it take (:meth:`savigp.posteriors.Posterior.natural_step`; driven by
:func:`savigp.fit_orthnat`, whose module :mod:`savigp.training.natural_gradients` derives it):
Salimbeni et al. 2018, eq. (15b)-(15c), carried to the whitened coordinates,

    Lambda' = (1 - tau) Lambda + tau (I - 2 g_S),
    theta1' = (1 - tau) Lambda m + tau (g_m - 2 g_S m),       m' = Lambda'^-1 theta1',

with Lambda = S^-1 and g_m = d ELL / dm, g_S = d ELL / dS the gradients of the expected
log-likelihood alone (the KL to N(0, I) is analytic and already in the formula). A diagonal S takes
the same update restricted to the diagonal.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class NaturalPoint:
    """Where a natural-gradient step starts: q(v) = N(m, S) of a family with one component, with the
    autograd leaves the step differentiates the expected log-likelihood in.

    Attributes:
        mean: m ``(Q, M)``, a leaf that requires grad.
        cov: S ``(Q, M, M)`` (full) or its diagonal ``(Q, M)``, a leaf that requires grad.
        start_mean: m ``(Q, M)`` without graph; start_scale: the Cholesky factors of S
            ``(Q, M, M)`` or the standard deviations ``(Q, M)`` without graph.
        diagonal: whether S is diagonal.
    """

    mean: Tensor
    cov: Tensor
    start_mean: Tensor
    start_scale: Tensor
    diagonal: bool


def natural_update(mean: Tensor, scale: Tensor, g_m: Tensor, g_S: Tensor, step: float, diagonal: bool,
                   max_halvings: int = 20) -> tuple[Tensor, Tensor, float]:
    """One natural-gradient ascent step for q(v_j) = N(m_j, S_j), prior N(0, I) (module docstring).

    Args:
        mean: m ``(Q, M)``; scale: Cholesky factors L ``(Q, M, M)`` of S (or standard deviations
            ``(Q, M)`` when ``diagonal``).
        g_m, g_S: gradients of the expected log-likelihood alone (not the KL) with respect to m and
            S (``(Q, M, M)`` symmetric, or its diagonal ``(Q, M)``).
        step: tau in (0, 1]; tau = 1 is the exact conjugate update.

    Returns:
        new mean, new scale (same layout) and the step actually taken (halved, with a warning,
        until the new precision is positive definite).
    """
    tau = float(step)
    if not 0.0 < tau <= 1.0:
        raise ValueError(f"natural-gradient step must be in (0, 1], got {step}")
    new_mean, new_scale, taken = _natural_update(mean, scale, g_m, g_S, tau, diagonal, max_halvings)
    if taken < tau:
        warnings.warn(f"natural-gradient step {tau:g} gave an indefinite precision; took {taken:g} instead",
                      RuntimeWarning, stacklevel=2)
    return new_mean, new_scale, taken


def _natural_update(mean, scale, g_m, g_S, tau, diagonal, max_halvings):
    if diagonal:
        prec = scale.pow(-2)
        t1_old = prec * mean
        t1_lik = g_m - 2.0 * g_S * mean
        for _ in range(max_halvings + 1):
            new_prec = (1.0 - tau) * prec + tau * (1.0 - 2.0 * g_S)
            if bool((new_prec > 0).all()) and bool(torch.isfinite(new_prec).all()):
                theta1 = (1.0 - tau) * t1_old + tau * t1_lik
                return theta1 / new_prec, new_prec.rsqrt(), tau
            tau *= 0.5
        raise FloatingPointError("natural-gradient step: the precision stays indefinite even for tiny steps")
    M = mean.shape[-1]
    eye = torch.eye(M, dtype=mean.dtype, device=mean.device)
    prec = torch.cholesky_inverse(scale)  # S^-1 from its Cholesky factor
    t1_old = torch.cholesky_solve(mean.unsqueeze(-1), scale).squeeze(-1)  # S^-1 m
    t1_lik = g_m - 2.0 * (g_S @ mean.unsqueeze(-1)).squeeze(-1)
    lik_prec = eye - 2.0 * g_S
    for attempt in range(max_halvings + 1):
        new_prec = (1.0 - tau) * prec + tau * lik_prec
        new_prec = 0.5 * (new_prec + new_prec.transpose(-1, -2))
        Lp, info = torch.linalg.cholesky_ex(new_prec)
        if not bool((info > 0).any()) and bool(torch.isfinite(Lp).all()):
            theta1 = (1.0 - tau) * t1_old + tau * t1_lik
            new_mean = torch.cholesky_solve(theta1.unsqueeze(-1), Lp).squeeze(-1)
            new_cov = torch.cholesky_inverse(Lp)
            new_cov = 0.5 * (new_cov + new_cov.transpose(-1, -2))
            new_scale, info2 = torch.linalg.cholesky_ex(new_cov)
            if not bool((info2 > 0).any()):
                return new_mean, new_scale, tau
        tau *= 0.5
    raise FloatingPointError("natural-gradient step: the precision stays indefinite even for tiny steps")
