"""A test kit for kernels: :func:`check_kernel` runs on any :class:`savigp.kernels.Kernel` the checks
savigp runs on its own, and catches the mistakes a kernel written by hand is prone to: a matrix that
is not symmetric or not positive semi-definite (a "kernel" such as cos(r) in two dimensions, a product
or sum that is not a product or sum of kernels), a ``diag`` that is not the diagonal, gradients that
differ from finite differences (a hand-written backward), columns read that ``active_dims`` excludes,
results that depend on which other rows are in the batch or their order (statistics of the batch
inside the kernel), tensors created in float64 or on the CPU whatever the inputs, and a kernel that
claims to be stationary (a :class:`~savigp.kernels.Stationary` subclass) but is not.

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
    Xpsd: torch.Tensor  # (N, D): X1, X2 and rows at three scales, for the eigenvalues
    reference: Optional[Callable]
    generator: torch.Generator

    def copy(self, dtype=torch.float64, device=None):
        return copy.deepcopy(self.kernel).to(dtype=dtype, device=device)


def _scale(t: torch.Tensor) -> float:
    return max(1.0, float(t.detach().abs().max()))


def _differs(got: torch.Tensor, want: torch.Tensor, tol: float = 1e-10) -> float:
    """The largest difference of ``got`` and ``want`` when above ``tol`` times their scale, else 0."""
    err = float((got - want).detach().abs().max())
    return err if err > tol * _scale(want) else 0.0


def _shapes(p: _Problem):
    k = p.kernel
    Q, (N1, D), N2 = k.num_latent, p.X1.shape, p.X2.shape[0]
    with torch.no_grad():
        got = {"kernel(X1, X2)": (tuple(k(p.X1, p.X2).shape), (Q, N1, N2)),
               "kernel(X1, X1)": (tuple(k(p.X1, p.X1).shape), (Q, N1, N1)),
               "kernel(X1 per latent, X2)": (tuple(k(p.X1.expand(Q, N1, D), p.X2).shape), (Q, N1, N2)),
               "kernel.diag(X1)": (tuple(k.diag(p.X1).shape), (Q, N1))}
    bad = [f"{what} has shape {a}, expected {b}" for what, (a, b) in got.items() if a != b]
    return (FAILED, "; ".join(bad)) if bad else (PASSED, "")


def _diagonal(p: _Problem):
    with torch.no_grad():
        full, diag = p.kernel(p.X1, p.X1).detach(), p.kernel.diag(p.X1).detach()
    err = float((full.diagonal(dim1=-2, dim2=-1) - diag).abs().max())
    tol = 1e-10 * max(1.0, float(diag.abs().max()))
    return (PASSED, "") if err <= tol else (FAILED, f"diag(X) differs from the diagonal of kernel(X, X) by {err:.3g}")


def _symmetric(p: _Problem):
    """k(x, x') = k(x', x): kernel(X, X) symmetric and kernel(X1, X2) the transpose of kernel(X2, X1)."""
    with torch.no_grad():
        K = p.kernel(p.Xpsd, p.Xpsd)
        K12, K21 = p.kernel(p.X1, p.X2), p.kernel(p.X2, p.X1)
    bad = []
    err = _differs(K, K.transpose(-1, -2), 1e-12)
    if err:
        bad.append(f"kernel(X, X) is not symmetric (largest difference {err:.3g})")
    err = _differs(K12, K21.transpose(-1, -2), 1e-12)
    if err:
        bad.append(f"kernel(X1, X2) is not the transpose of kernel(X2, X1) (largest difference {err:.3g})")
    return (FAILED, "; ".join(bad)) if bad else (PASSED, "")


def _positive_semidefinite(p: _Problem):
    """No eigenvalue of kernel(X, X) below -1e-9 of its scale, X of ``len(Xpsd)`` rows at several
    scales (a non-PSD function of the distance shows at some scale; 8 points can miss it)."""
    with torch.no_grad():
        K = p.kernel(p.Xpsd, p.Xpsd)
    K = 0.5 * (K + K.transpose(-1, -2))
    low = float(torch.linalg.eigvalsh(K).min())
    if low < -1e-9 * _scale(K):
        return FAILED, f"kernel(X, X) of {K.shape[-1]} inputs has eigenvalue {low:.3g} < 0: not a covariance"
    return PASSED, ""


def _rows_independent(p: _Problem):
    """Entry (i, j) depends on x_i and x'_j alone: permuting the rows of X1 and X2 permutes the matrix,
    a subset of rows gives the subset of the matrix, and ``diag`` permutes with its rows."""
    g = p.generator
    N1, N2 = p.X1.shape[0], p.X2.shape[0]
    p1, p2 = torch.randperm(N1, generator=g), torch.randperm(N2, generator=g)
    k = p.kernel
    with torch.no_grad():
        K12, K11, d = k(p.X1, p.X2), k(p.X1, p.X1), k.diag(p.X1)
        X1p = p.X1[p1]
        cases = {
            "kernel(X1[perm], X2[perm'])": (k(X1p, p.X2[p2]), K12[:, p1][:, :, p2]),
            "kernel(X1[perm], X1[perm]) (the same tensor twice)": (k(X1p, X1p), K11[:, p1][:, :, p1]),
            "kernel(X1[:3], X2)": (k(p.X1[:3], p.X2), K12[:, :3]),
            "kernel(X1, X2[:2])": (k(p.X1, p.X2[:2]), K12[:, :, :2]),
            "diag(X1[perm])": (k.diag(X1p), d[:, p1]),
        }
    bad = [f"{what} differs from the same rows of the whole matrix by {err:.3g}"
           for what, (got, want) in cases.items() if (err := _differs(got, want))]
    if bad:
        return FAILED, "the kernel mixes rows (batch statistics?): " + "; ".join(bad)
    return PASSED, ""


def _read_columns(kernel, D: int) -> set:
    """The input columns a kernel may read: its ``active_dims``, else its parts' (sums, products,
    scales, lists), else all D."""
    from ..kernels import Kernel

    if getattr(kernel, "active_dims", None) is not None:
        return set(kernel.active_dims)
    parts = [m for m in kernel.children() if isinstance(m, Kernel)]
    parts += [m for c in kernel.children() if isinstance(c, torch.nn.ModuleList) for m in c if isinstance(m, Kernel)]
    if not parts:
        return set(range(D))
    return set().union(*(_read_columns(m, D) for m in parts))


def _active_dims(p: _Problem):
    """Columns outside ``active_dims`` (of the kernel or of all its parts) do not change anything."""
    D = p.X1.shape[1]
    read = _read_columns(p.kernel, D)
    unread = sorted(set(range(D)) - read)
    if not unread:
        return SKIPPED, "the kernel reads every input column"
    g = p.generator
    k = p.kernel

    def moved(x):
        y = x.clone()
        y[:, unread] += 3.0 * torch.randn(x.shape[0], len(unread), generator=g, dtype=x.dtype)
        return y

    Y1, Y2 = moved(p.X1), moved(p.X2)
    with torch.no_grad():
        cases = {"kernel(X1, X2)": (k(Y1, Y2), k(p.X1, p.X2)), "kernel(X1, X1)": (k(Y1, Y1), k(p.X1, p.X1)),
                 "diag(X1)": (k.diag(Y1), k.diag(p.X1))}
    bad = [f"{what} changes by {err:.3g}" for what, (got, want) in cases.items() if (err := _differs(got, want))]
    if bad:
        return FAILED, f"columns {unread} are outside active_dims but " + "; ".join(bad)
    return PASSED, ""


def _claims_stationary(kernel) -> bool:
    """A kernel whose family declares ``stationary`` (:class:`~savigp.kernels.Stationary`, periodic,
    constant and white kernels), or savigp's sums, products, scales and lists of those."""
    from ..kernels import Kernel, KernelList, Product, Scale, Sum

    if isinstance(kernel, Kernel) and kernel.stationary:
        return True
    if type(kernel) in (Sum, Product, KernelList):
        return all(_claims_stationary(m) for m in kernel.parts)
    return type(kernel) is Scale and _claims_stationary(kernel.base)


def _stationary(p: _Problem):
    """A kernel that claims stationarity gives the same matrices for inputs shifted alike."""
    if not _claims_stationary(p.kernel):
        return SKIPPED, "the kernel does not claim to be stationary"
    shift = 0.7 + 1.3 * torch.arange(p.X1.shape[1], dtype=p.X1.dtype)
    k = p.kernel
    with torch.no_grad():
        Y1, Y2 = p.X1 + shift, p.X2 + shift
        cases = {"kernel(X1, X2)": (k(Y1, Y2), k(p.X1, p.X2)), "kernel(X1, X1)": (k(Y1, Y1), k(p.X1, p.X1)),
                 "diag(X1)": (k.diag(Y1), k.diag(p.X1))}
    bad = [f"{what} changes by {err:.3g}" for what, (got, want) in cases.items() if (err := _differs(got, want, 1e-9))]
    if bad:
        return FAILED, "a stationary kernel (it subclasses Stationary) changes when both inputs move alike: " + "; ".join(bad)
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


def _outputs(k, x1, x2) -> dict:
    with torch.no_grad():
        return {"kernel(X1, X2)": k(x1, x2), "kernel(X1, X1)": k(x1, x1), "kernel.diag(X1)": k.diag(x1)}


def _dtype(p: _Problem):
    """float32 inputs and parameters give float32 (and float64 give float64), close to the float64 values."""
    bad = []
    ref = _outputs(p.kernel, p.X1, p.X2)
    bad += [f"float64 inputs gave {out.dtype} for {what}" for what, out in ref.items() if out.dtype != torch.float64]
    got = _outputs(p.copy(torch.float32), p.X1.float(), p.X2.float())
    bad += [f"float32 inputs gave {out.dtype} for {what}" for what, out in got.items() if out.dtype != torch.float32]
    if not bad:
        bad += [f"float32 {what} differs from float64 by {err:.3g}" for what, out in got.items()
                if (err := _differs(out.double(), ref[what], 1e-4))]
    return (FAILED, "; ".join(bad)) if bad else (PASSED, "")


def _device(p: _Problem):
    if not torch.cuda.is_available():
        return SKIPPED, "no CUDA device"
    got = _outputs(p.copy(device="cuda"), p.X1.cuda(), p.X2.cuda())
    bad = [f"CUDA inputs gave {what} on {out.device}" for what, out in got.items() if not out.is_cuda]
    if not bad:
        ref = _outputs(p.kernel, p.X1, p.X2)
        bad += [f"{what} on CUDA differs from the CPU's by {err:.3g}" for what, out in got.items()
                if (err := _differs(out.cpu(), ref[what], 1e-9))]
    return (FAILED, "; ".join(bad)) if bad else (PASSED, "")


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
    ("symmetric", _symmetric, ("shapes",)),
    ("positive_semidefinite", _positive_semidefinite, ("shapes", "symmetric")),
    ("rows_independent", _rows_independent, ("shapes",)),
    ("active_dims", _active_dims, ("shapes",)),
    ("stationary", _stationary, ("shapes",)),
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
    * ``symmetric``: ``kernel(X, X)`` symmetric and ``kernel(X1, X2)`` the transpose of ``kernel(X2, X1)``;
    * ``positive_semidefinite``: no eigenvalue of ``kernel(X, X)`` below -1e-9 of its scale, for X
      of X1, X2 and 32 more rows at scales 0.3 and 3;
    * ``rows_independent``: entry (i, j) depends on rows i and j alone (permuted or fewer rows give
      the permuted or fewer entries: no statistics of the batch inside the kernel);
    * ``active_dims``: the columns outside ``active_dims`` (of the kernel, or of every part of a
      composite) change nothing (skipped when it reads every column);
    * ``stationary``: a kernel that claims stationarity (a :class:`~savigp.kernels.Stationary`
      subclass, periodic, constant, white, or an algebra of those) does not change when both
      inputs move alike (skipped otherwise);
    * ``gradients``: :func:`torch.autograd.gradcheck` in X1, X2 and every learnable parameter;
    * ``dtype``: float32 inputs and parameters give float32, float64 give float64, for
      ``kernel(X1, X2)``, ``kernel(X1, X1)`` and ``diag``, the float32 values within 1e-4 of the
      float64 ones; ``device``: CUDA stays on CUDA with the CPU's values (skipped without a device);
    * ``closed_form``: ``kernel(X1, X2)`` equals ``reference(kernel, X1, X2)`` (when given).

    Tolerances: 1e-10 of the matrices' scale (1e-12 for symmetry, 1e-9 for a shift of the inputs).

    Args:
        kernel: the kernel to check (a deep copy in float64 is checked; it is not changed).
        X1, X2: the inputs ``(N1, D)``, ``(N2, D)`` (default 8 and 5 standard normal rows, float64).
        reference: ``reference(kernel, X1, X2) -> (Q, N1, N2)``, the closed form.
        seed: of the default inputs, the extra rows and the permutations.

    Returns the :class:`~savigp.testing.report.Report`; raises
    :class:`~savigp.testing.report.CheckError` listing the failures when ``raise_on_failure``.
    """
    g = torch.Generator().manual_seed(seed)
    D = int(kernel.input_dim)
    X1 = torch.randn(8, D, generator=g, dtype=torch.float64) if X1 is None else torch.as_tensor(X1, dtype=torch.float64)
    X2 = torch.randn(5, D, generator=g, dtype=torch.float64) if X2 is None else torch.as_tensor(X2, dtype=torch.float64)
    if X1.dim() != 2 or X1.shape[1] != D or X2.dim() != 2 or X2.shape[1] != D:
        raise ValueError(f"check_kernel: X1 and X2 must have shape (N, {D}) (the kernel's input_dim), "
                         f"got {tuple(X1.shape)} and {tuple(X2.shape)}")
    extra = torch.randn(32, D, generator=g, dtype=torch.float64) * torch.tensor([0.3, 3.0], dtype=torch.float64).repeat(16)[:, None]
    Xpsd = torch.cat([X1, X2, extra])
    problem = _Problem(copy.deepcopy(kernel).double(), X1, X2, Xpsd, reference, g)
    return run_checks(Report(type(kernel).__name__, kit="check_kernel"), CHECKS, problem, raise_on_failure)
