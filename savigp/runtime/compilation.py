"""Optional ``torch.compile`` of the step's elementwise work (``SAVIGP_COMPILE=1``).

Eager PyTorch makes one pass over memory per elementwise operation; a few chains of them run on
every training step over arrays of S x K x B x Q samples (the score estimator's control variates)
or M x B entries (the variance terms of the marginals). Compiled, each chain is one fused loop.
Measured on the 2-core development machine (float64, S = 100, B = 1000, K = Q = 1, 2 threads, the
allocator tuned, torch 2.13): the score estimator's chain takes 0.21 ms compiled against 0.92 ms
eager. On the
whole step it has made no measurable difference since the fused moments took most of the elementwise
work (ratios to GPyTorch 0.590 and 0.605 compiled against 0.603 and 0.612 eager at M = 500,
``python -m experiments.benchmark --targets --only "M=500 B=1000 S=100" --rounds 21 [--compile]``,
torch 2.13, 2026-11-21).

Off by default: the first call of each compiled function compiles for a few seconds (3-4 s here,
again for each new pattern of shapes) and needs a C++ compiler, which only long runs repay. Turn it
on with the environment variable ``SAVIGP_COMPILE=1`` or :func:`set_compile`. Any compilation
failure switches it off with a warning and the eager code runs instead (same results up to
rounding).
"""
from __future__ import annotations

import warnings
from typing import Callable

import torch

from .. import settings

_state = {"enabled": settings.compile_enabled()}  # SAVIGP_COMPILE, read once at import
_compiled: dict = {}


def set_compile(enabled: bool = True) -> None:
    """Turn the compiled elementwise kernels on or off for this process."""
    _state["enabled"] = bool(enabled)


def compile_enabled() -> bool:
    return _state["enabled"]


def call(fn: Callable, *args):
    """``fn(*args)``, through ``torch.compile`` when enabled (compiled once per function)."""
    if _state["enabled"]:
        try:
            compiled = _compiled.get(fn)
            if compiled is None:
                compiled = _compiled[fn] = torch.compile(fn, dynamic=True)
            return compiled(*args)
        except Exception as exc:  # no compiler, unsupported platform, ...: stay correct, eager
            _state["enabled"] = False
            warnings.warn(f"torch.compile of {fn.__name__} failed ({type(exc).__name__}: {exc}); using eager mode",
                          RuntimeWarning, stacklevel=2)
    return fn(*args)
