"""Cholesky factorization with jitter that grows only when a factorization fails."""
from __future__ import annotations

import warnings

import torch
from torch import Tensor


class CholeskyError(RuntimeError):
    """A kernel matrix could not be factorized even with the largest jitter."""


def base_jitter(dtype: torch.dtype) -> float:
    """The relative jitter always added to a kernel matrix's diagonal (tiny in float64)."""
    return 1e-8 if dtype == torch.float64 else 1e-5


def robust_cholesky(matrix: Tensor, name: str = "matrix", max_tries: int = 6, return_jitter: bool = False):
    """Lower Cholesky factor of a batch of symmetric positive (semi-)definite matrices.

    Args:
        matrix: shape ``(..., M, M)``.
        name: what the matrix is (used in warnings and errors, e.g. ``"K_zz"``).
        max_tries: how many times the jitter may grow tenfold after a failure.
        return_jitter: also return the relative jitter that was added (a float).

    A relative jitter ``base_jitter(dtype) * mean(diag)`` is always added. If the factorization
    still fails, the jitter grows tenfold per try with a ``RuntimeWarning``; after ``max_tries``
    failures a :class:`CholeskyError` names the matrix, its shape and the last jitter tried.
    """
    if not torch.isfinite(matrix).all():
        bad = (~torch.isfinite(matrix)).sum().item()
        raise CholeskyError(f"{name} of shape {tuple(matrix.shape)} has {bad} non-finite entries (NaN or inf)")
    diag_mean = matrix.diagonal(dim1=-2, dim2=-1).mean(-1, keepdim=True).abs().clamp_min(1e-30)
    eye = torch.eye(matrix.shape[-1], dtype=matrix.dtype, device=matrix.device)
    rel = base_jitter(matrix.dtype)
    for attempt in range(max_tries + 1):
        jittered = matrix + (rel * diag_mean).unsqueeze(-1) * eye
        chol, info = torch.linalg.cholesky_ex(jittered)
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
