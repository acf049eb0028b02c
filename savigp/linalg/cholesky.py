"""Cholesky factorization with jitter that grows only when a factorization fails.

Every jitter the package adds to a matrix it factorizes is :func:`jittered`'s
rel * mean(diag A) I: the kernel matrices K_zz (:func:`robust_cholesky`, and the model's first try
at the jitter its training has settled on) and the per-point marginal covariances of a coupled
posterior (:func:`point_cholesky`).
"""
from __future__ import annotations

import warnings
from typing import Optional

import torch
from torch import Tensor


class CholeskyError(RuntimeError):
    """A kernel matrix could not be factorized even with the largest jitter."""


def base_jitter(dtype: torch.dtype) -> float:
    """The relative jitter always added to a kernel matrix's diagonal (tiny in float64)."""
    return 1e-8 if dtype == torch.float64 else 1e-5


def jittered(matrix: Tensor, rel) -> Tensor:
    """``matrix + rel * mean(diag matrix) I`` for a batch ``(..., M, M)``; ``rel`` a float or a tensor
    ``(...)`` (one relative jitter per matrix). Differentiable when ``matrix`` carries a graph (the
    jitter follows mean(diag matrix), and so does its gradient); otherwise a new tensor written in place."""
    diag = matrix.diagonal(dim1=-2, dim2=-1)
    jitter = (rel * diag.mean(-1).abs().clamp_min(1e-30)).unsqueeze(-1)  # (..., 1)
    if matrix.requires_grad and torch.is_grad_enabled():
        return matrix + torch.diag_embed(jitter.expand_as(diag))
    out = matrix.clone()
    out.diagonal(dim1=-2, dim2=-1).add_(jitter)
    return out


def robust_cholesky(matrix: Tensor, name: str = "matrix", max_tries: int = 6, return_jitter: bool = False,
                    initial_jitter: Optional[float] = None):
    """Lower Cholesky factor of a batch of symmetric positive (semi-)definite matrices.

    Args:
        matrix: shape ``(..., M, M)``.
        name: what the matrix is (used in warnings and errors, e.g. ``"K_zz"``).
        max_tries: how many times the jitter may grow tenfold after a failure.
        return_jitter: also return the relative jitter that was added (a float).
        initial_jitter: the relative jitter of the first try when larger than ``base_jitter(dtype)``
            (e.g. one that training already found necessary); never less is added.

    A relative jitter ``base_jitter(dtype) * mean(diag)`` is always added. If the factorization
    still fails, the jitter grows tenfold per try with a ``RuntimeWarning``; after ``max_tries``
    failures a :class:`CholeskyError` names the matrix, its shape and the last jitter tried.
    """
    if not torch.isfinite(matrix).all():
        bad = (~torch.isfinite(matrix)).sum().item()
        raise CholeskyError(f"{name} of shape {tuple(matrix.shape)} has {bad} non-finite entries (NaN or inf)")
    rel = max(base_jitter(matrix.dtype), float(initial_jitter or 0.0))
    for attempt in range(max_tries + 1):
        chol, info = torch.linalg.cholesky_ex(jittered(matrix, rel))
        if not bool((info > 0).any()):
            if attempt > 0:
                warnings.warn(
                    f"{name} of shape {tuple(matrix.shape)} needed relative jitter {rel:.1e} to factorize",
                    RuntimeWarning,
                    stacklevel=3,
                )
            return (chol, rel) if return_jitter else chol
        rel *= 10.0
    raise CholeskyError(
        f"{name} of shape {tuple(matrix.shape)} is not positive definite even with relative jitter "
        f"{rel / 10:.1e} on its diagonal; check for duplicated inducing inputs, extreme length-scales "
        "or non-finite inputs"
    )


def point_cholesky(cov: Tensor) -> Tensor:
    """Lower Cholesky factors of per-point covariances ``(B, Q, Q)`` (the marginals q(f_n) of a
    posterior coupled across latent functions). A factorization that fails (a point with a
    numerically singular covariance) is retried with relative jitter 1e-10, 1e-8, 1e-6, 1e-4
    (:func:`jittered`; silent: these are sampling factors, not a kernel matrix); a ``ValueError``
    names the batch rows that still fail."""
    L, info = torch.linalg.cholesky_ex(cov)
    if bool((info == 0).all()):
        return L
    for rel in (1e-10, 1e-8, 1e-6, 1e-4):
        L, info = torch.linalg.cholesky_ex(jittered(cov, rel))
        if bool((info == 0).all()):
            return L
    bad = torch.nonzero(info != 0).flatten()[:10].tolist()
    raise ValueError(f"the marginal covariance of q(f_n) is not positive definite at batch rows {bad} "
                     f"(even with jitter 1e-4 of its diagonal)")
