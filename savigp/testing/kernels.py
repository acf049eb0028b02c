"""A test kit for kernels: :func:`check_kernel` runs on any :class:`savigp.kernels.Kernel` the checks
savigp runs on its own (shapes, the diagonal, symmetry and positive semi-definiteness, gradients
against finite differences, dtype and device following, a closed form when given).

    from savigp.testing.kernels import check_kernel
    print(check_kernel(MyKernel(input_dim=2, num_latent=3)))   # raises CheckError listing failures
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from .report import FAILED, PASSED, SKIPPED, Report, run_checks


@dataclass
class _Problem:
    kernel: torch.nn.Module
    X1: torch.Tensor  # (N1, D)
    X2: torch.Tensor  # (N2, D)
    reference: Optional[Callable]

    def copy(self, dtype=torch.float64, device=None):
        return copy.deepcopy(self.kernel).to(dtype=dtype, device=device)


def _shapes(p: _Problem):
    k = p.kernel
    Q, (N1, D), N2 = k.num_latent, p.X1.shape, p.X2.shape[0]
    with torch.no_grad():
        got = {"kernel(X1, X2)": (tuple(k(p.X1, p.X2).shape), (Q, N1, N2)),
               "kernel(X1 per latent, X2)": (tuple(k(p.X1.expand(Q, N1, D), p.X2).shape), (Q, N1, N2)),
               "kernel.diag(X1)": (tuple(k.diag(p.X1).shape), (Q, N1))}
    bad = [f"{what} has shape {a}, expected {b}" for what, (a, b) in got.items() if a != b]
    return (FAILED, "; ".join(bad)) if bad else (PASSED, "")


def _diagonal(p: _Problem):
    with torch.no_grad():
        full, diag = p.kernel(p.X1, p.X1), p.kernel.diag(p.X1)
    err = float((full.diagonal(dim1=-2, dim2=-1) - diag).abs().max())
    tol = 1e-10 * max(1.0, float(diag.abs().max()))
    return (PASSED, "") if err <= tol else (FAILED, f"diag(X) differs from the diagonal of kernel(X, X) by {err:.3g}")


def _positive_semidefinite(p: _Problem):
    with torch.no_grad():
        K = p.kernel(p.X1, p.X1)
    asym = float((K - K.transpose(-1, -2)).abs().max())
    scale = max(1.0, float(K.abs().max()))
    if asym > 1e-12 * scale:
        return FAILED, f"kernel(X, X) is not symmetric (largest difference {asym:.3g})"
    low = float(torch.linalg.eigvalsh(K).min())
    if low < -1e-9 * scale:
        return FAILED, f"kernel(X, X) has eigenvalue {low:.3g} < 0"
    return PASSED, ""


class _Both(torch.nn.Module):
    """``kernel(a, b)`` and ``kernel.diag(a)`` as one forward (for :func:`torch.func.functional_call`)."""

    def __init__(self, kernel):
        super().__init__()
        self.kernel = kernel

    def forward(self, a, b):
        return self.kernel(a, b), self.kernel.diag(a)


def _gradients(p: _Problem):
    """torch.autograd.gradcheck (central differences, float64) in both inputs and every parameter."""
    both = _Both(p.copy())
    named = [(n, t) for n, t in both.named_parameters() if t.requires_grad]
    names = [n for n, _ in named]
    x1, x2 = p.X1[:4].clone().requires_grad_(True), p.X2[:3].clone().requires_grad_(True)
    values = [t.detach().clone().requires_grad_(True) for _, t in named]

    def value(a, b, *vs):
        return torch.func.functional_call(both, dict(zip(names, vs)), (a, b))

    try:
        torch.autograd.gradcheck(value, (x1, x2, *values), eps=1e-6, atol=1e-6, rtol=1e-4)
    except RuntimeError as err:
        return FAILED, f"gradients in (x1, x2, {', '.join(names)}) differ from finite differences: {str(err)[:300]}"
    return PASSED, ""


def _dtype(p: _Problem):
    k = p.copy(torch.float32)
    out = k(p.X1.float(), p.X2.float())
    return (PASSED, "") if out.dtype == torch.float32 else (FAILED, f"float32 inputs gave {out.dtype}")


def _device(p: _Problem):
    if not torch.cuda.is_available():
        return SKIPPED, "no CUDA device"
    k = p.copy(device="cuda")
    out = k(p.X1.cuda(), p.X2.cuda())
    return (PASSED, "") if out.is_cuda else (FAILED, f"CUDA inputs gave a result on {out.device}")


def _closed_form(p: _Problem):
    if p.reference is None:
        return SKIPPED, "no reference given"
    with torch.no_grad():
        got, want = p.kernel(p.X1, p.X2), p.reference(p.kernel, p.X1, p.X2)
    err = float((got - want).abs().max())
    tol = 1e-10 * max(1.0, float(want.abs().max()))
    return (PASSED, "") if err <= tol else (FAILED, f"kernel(X1, X2) differs from the reference by {err:.3g}")


CHECKS = (
    ("shapes", _shapes, ()),
    ("diagonal", _diagonal, ("shapes",)),
    ("positive_semidefinite", _positive_semidefinite, ("shapes",)),
    ("gradients", _gradients, ("shapes",)),
    ("dtype", _dtype, ("shapes",)),
    ("device", _device, ("shapes",)),
    ("closed_form", _closed_form, ("shapes",)),
)


def check_kernel(kernel, X1=None, X2=None, *, reference: Optional[Callable] = None, seed: int = 0,
                 raise_on_failure: bool = True) -> Report:
    """Check a kernel (Q = ``kernel.num_latent`` sets of hyper-parameters over D = ``kernel.input_dim``
    inputs) the way savigp checks its own:

    * ``shapes``: ``kernel(X1, X2)`` is ``(Q, N1, N2)`` for X1 ``(N1, D)`` or ``(Q, N1, D)``,
      ``kernel.diag(X1)`` is ``(Q, N1)``;
    * ``diagonal``: ``diag(X)`` is the diagonal of ``kernel(X, X)``;
    * ``positive_semidefinite``: ``kernel(X, X)`` symmetric, no eigenvalue below -1e-9 of its scale;
    * ``gradients``: :func:`torch.autograd.gradcheck` in X1, X2 and every learnable parameter;
    * ``dtype``: float32 inputs and parameters give float32; ``device``: CUDA stays on CUDA (skipped
      without a device);
    * ``closed_form``: ``kernel(X1, X2)`` equals ``reference(kernel, X1, X2)`` (when given).

    ``X1 (N1, D)``, ``X2 (N2, D)``: the inputs (default 8 and 5 standard normal rows, float64).
    Returns the :class:`~savigp.testing.report.Report`; raises
    :class:`~savigp.testing.report.CheckError` listing the failures when ``raise_on_failure``.
    """
    g = torch.Generator().manual_seed(seed)
    D = int(kernel.input_dim)
    X1 = torch.randn(8, D, generator=g, dtype=torch.float64) if X1 is None else torch.as_tensor(X1, dtype=torch.float64)
    X2 = torch.randn(5, D, generator=g, dtype=torch.float64) if X2 is None else torch.as_tensor(X2, dtype=torch.float64)
    problem = _Problem(copy.deepcopy(kernel).double(), X1, X2, reference)
    return run_checks(Report(type(kernel).__name__, kit="check_kernel"), CHECKS, problem, raise_on_failure)
