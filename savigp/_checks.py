"""Input validation at the public boundary: shapes and finiteness, with errors that name the
argument, its shape and the offending rows."""
from __future__ import annotations

import math
import reprlib
from typing import Optional

import numpy as np
import torch
from torch import Tensor


def writable(x):
    """``x`` as ``torch.as_tensor`` may take it: an array-like numpy marks read-only (pandas 3's
    ``DataFrame.values`` and ``np.asarray(frame)`` under copy-on-write, a read-only memory map) as a
    copy of it -- ``torch.as_tensor`` would share the read-only memory and warn "The given NumPy
    array is not writable" -- and anything else (a tensor, a list, a writable array) unchanged."""
    if isinstance(x, Tensor) or not hasattr(x, "__array__"):
        return x
    a = np.asarray(x)
    return a if a.flags.writeable else a.copy()


def _to_tensor(x, name: str, dtype, device) -> Tensor:
    if isinstance(x, Tensor):
        t = x.detach()
    else:
        try:
            t = torch.as_tensor(writable(np.asarray(x, dtype=np.float64)))
        except (TypeError, ValueError) as err:
            raise TypeError(f"{name} must be a numeric array or tensor, got {type(x).__name__}: {err}") from None
    if not (t.is_floating_point() or t.dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)):
        raise TypeError(f"{name} must be numeric, got dtype {t.dtype}")
    return t.to(dtype=dtype, device=device if device is not None else t.device)


def _check_finite(t: Tensor, name: str) -> None:
    bad = ~torch.isfinite(t)
    if bool(bad.any()):
        rows = torch.nonzero(bad.any(1)).flatten()
        cols = torch.nonzero(bad.any(0)).flatten()
        shown = ", ".join(f"row {int(r)}" for r in rows[:5])
        raise ValueError(
            f"{name} of shape {tuple(t.shape)} contains {int(bad.sum())} NaN/inf value(s) at {shown}"
            f"{' and more' if rows.numel() > 5 else ''} (columns {cols[:10].tolist()})"
        )


#: float32 keeps 24 bits (eps 1.2e-7): inputs offset from zero by more than this many standard
#: deviations are rounded by more than 0.1% of their spread (an offset of 1e8 with a spread of 1
#: loses all of it; 1e4 with a spread of 1.7, 6e-4 of it, fits as the centred data do: tests/savigp/kernels/test_kernel_offsets.py)
FLOAT32_MAX_OFFSET = 1e4


def finite_number(value) -> bool:
    """Whether ``value`` is a number (an int or a float, not a bool) that a float64 holds finitely:
    an integer of more than about 308 digits is not (``float`` of it overflows), nor NaN or inf.
    For numbers read from data (a model file, a kernel expression), whose ints are unbounded."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 3, 40, 40, 40


def short_repr(value, limit: int = 60) -> str:
    """``repr(value)`` for a one-line message about data read from elsewhere, at most ``limit``
    characters, at a cost bounded whatever the value: three levels of nesting and a few items
    shown (a value nested 100,000 deep or holding millions of items costs no recursion and no
    time), an int past Python's 4300-digit conversion limit by its bits."""
    try:
        text = _SHORT.repr(value)
    except ValueError:  # (an int of more than 4300 digits)
        return f"an integer of {value.bit_length()} bits"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def input_offset(X: Tensor) -> float:
    """max_d |mean_d| / std_d over the columns of ``X (N, D)`` that vary (0 when none does): how
    far the inputs sit from zero in units of their spread."""
    X = X.detach().to(torch.float64)
    if X.shape[0] < 2:
        return 0.0
    std, mean = X.std(0), X.mean(0)
    varies = std > 0
    return float((mean.abs()[varies] / std[varies]).max()) if bool(varies.any()) else 0.0


def as_inputs(x, name: str, dtype=torch.float64, device=None, input_dim: Optional[int] = None) -> Tensor:
    """Inputs as a finite ``(N, D)`` tensor (a 1-D array is one input dimension)."""
    t = _to_tensor(x, name, dtype, device)
    if t.dim() == 1:
        t = t.unsqueeze(-1) if input_dim in (None, 1) else t.unsqueeze(0)
    if t.dim() != 2:
        raise ValueError(f"{name} must have shape (N, D), got {tuple(t.shape)}")
    if t.shape[0] == 0:
        raise ValueError(f"{name} has no rows (shape {tuple(t.shape)})")
    if input_dim is not None and t.shape[1] != input_dim:
        raise ValueError(f"{name} must have shape (N, {input_dim}) to match the model, got {tuple(t.shape)}")
    _check_finite(t, name)
    return t


def as_targets(y, name: str, num_rows: int, dtype=torch.float64, device=None) -> Tensor:
    """Targets as a finite ``(N, P)`` tensor whose N matches ``num_rows``."""
    t = _to_tensor(y, name, dtype, device)
    if t.dim() == 1:
        t = t.unsqueeze(-1)
    if t.dim() != 2:
        raise ValueError(f"{name} must have shape (N, P) or (N,), got {tuple(t.shape)}")
    if t.shape[0] != num_rows:
        raise ValueError(f"{name} has {t.shape[0]} rows (shape {tuple(t.shape)}) but the inputs have {num_rows} rows")
    _check_finite(t, name)
    return t
