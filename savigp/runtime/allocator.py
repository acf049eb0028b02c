"""Keep freed CPU memory in the process between training steps (glibc ``mallopt``).

A training step allocates and frees a few dozen tensors of M x B or M x M doubles (4 MB each at
M = 500, B = 1000). With glibc's default settings, freed memory at the top of the heap beyond
``M_TRIM_THRESHOLD`` is returned to the operating system and large blocks are served by ``mmap``;
every step then pays for fresh pages (page faults, zeroing) in the operations that allocate.
:func:`tune_cpu_allocator` raises the trim threshold and the top pad, and sets the ``mmap``
threshold to glibc's maximum (32 MiB), so blocks are reused instead. Measured on the 2-core
development machine (float64, M = 500, B = 1000, S = 100, Bernoulli as a black box, 2 threads,
``python -m experiments.allocator_effect``): a ``savigp.fit`` step took 29.6 ms tuned against
33.5 ms with glibc's defaults (medians over 3 fresh processes each; torch 2.13, code of 2026-11-21).

The cost: memory the process has freed is kept for reuse rather than returned to the operating
system, so its resident size stays near its peak (as PyTorch's CUDA caching allocator does for GPU
memory). :func:`savigp.fit` calls this once unless ``tune_allocator=False``. Other C libraries
(musl, macOS, Windows) are left alone. The settings are process-wide, so code that runs in the
same process afterwards (another library's training loop, say) benefits from them too.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import platform

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
_TRIM_THRESHOLD = 1 << 30  # keep up to 1 GiB of free memory at the top of the heap
_TOP_PAD = 64 << 20  # grow the heap in 64 MiB steps
_MMAP_THRESHOLD = 32 << 20  # glibc's largest accepted value: blocks below 32 MiB come from the heap

_state: dict = {"tuned": None}


def tune_cpu_allocator() -> bool:
    """Set glibc's ``M_MMAP_THRESHOLD`` (32 MiB), ``M_TRIM_THRESHOLD`` (1 GiB) and ``M_TOP_PAD``
    (64 MiB) for this process, once. Returns True when the settings are in effect (glibc), False
    where they do not apply (another C library, or ``mallopt`` refused them)."""
    if _state["tuned"] is not None:
        return _state["tuned"]
    ok = False
    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            ok = all(libc.mallopt(opt, val) == 1 for opt, val in (
                (_M_MMAP_THRESHOLD, _MMAP_THRESHOLD), (_M_TRIM_THRESHOLD, _TRIM_THRESHOLD), (_M_TOP_PAD, _TOP_PAD)))
        except (OSError, AttributeError):
            ok = False
    _state["tuned"] = ok
    return ok


def cpu_allocator_tuned() -> bool | None:
    """Whether :func:`tune_cpu_allocator` has run in this process and took effect (None: not run)."""
    return _state["tuned"]
