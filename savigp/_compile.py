"""Optional ``torch.compile`` of the step's elementwise work (``SAVIGP_COMPILE=1``).

Eager PyTorch makes one pass over memory per elementwise operation; a few chains of them run on
every training step over arrays of S x K x B x Q samples (the score estimator's control variates)
or M x B entries (the variance terms of the marginals). Compiled, each chain is one fused loop.
Measured on the 2-core development machine (float64, S = 100, B = 1000, K = Q = 1): the score
estimator's part took 0.18 ms compiled against 0.94 ms eager. On a whole step at M = 500
(``python experiments/benchmark.py --targets --only bernoulli --compile``, 7 runs, 5 of them with the
moments' chains compiled too, against 6 without,
interleaved) the savigp/GPyTorch ratio was 0.60-0.66 compiled and 0.62-0.71 eager: a gain of about
a millisecond, of the order of the machine's run-to-run noise.

Off by default: the first call of each compiled function compiles for a few seconds (3-4 s here,
again for each new pattern of shapes) and needs a C++ compiler, which only long runs repay. Turn it
on with the environment variable ``SAVIGP_COMPILE=1`` or :func:`set_compile`. Any compilation
failure switches it off with a warning and the eager code runs instead (same results up to
rounding).
"""
from __future__ import annotations

import os
import warnings
from typing import Callable

import torch

_state = {"enabled": os.environ.get("SAVIGP_COMPILE", "").strip() not in ("", "0")}
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
