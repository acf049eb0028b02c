"""How much work to do at once: chunk sizes from the device's memory, not from CPU constants.

Work that could need more memory than is at hand -- the decoupled mean head's kernel
matrix-vector products, predictions at many test inputs, the score estimator's S x K x B x Q
buffers -- is done in chunks of rows whose temporary memory fits a *budget*:

* on CUDA, :data:`CUDA_FRACTION` of the free memory that ``torch.cuda.mem_get_info`` reports (a
  tenth: a chunk's few temporaries, autograd's saved tensors and the caching allocator's
  fragmentation stay well inside what is free), refreshed at most once a second and never while a
  CUDA graph is being captured;
* elsewhere, :data:`CPU_BUDGET_BYTES` (64 MiB: 2^23 float64 entries, the block size the CPU code
  was tuned with).

:func:`chunk_size` turns a budget and the bytes one row needs into rows per chunk. On an 80 GB GPU
the budget is up to 8 GB (a tenth of what is free), so the decoupled head at G = 20000, B = 10^4
takes its product in one piece instead of 2^23-entry checkpointed blocks.
"""
from __future__ import annotations

import time
from typing import Optional

import torch

CPU_BUDGET_BYTES = 64 << 20
CUDA_FRACTION = 0.1
_REFRESH_S = 1.0
_cache: dict = {}


def memory_budget(device) -> int:
    """Bytes one chunk of temporary work may take on ``device`` (see the module docstring)."""
    device = torch.device(device)
    if device.type != "cuda":
        return CPU_BUDGET_BYTES
    index = device.index if device.index is not None else torch.cuda.current_device()
    now = time.monotonic()
    hit = _cache.get(index)
    if hit is not None and (now - hit[1] < _REFRESH_S or torch.cuda.is_current_stream_capturing()):
        return hit[0]
    free, _total = torch.cuda.mem_get_info(index)
    budget = max(CPU_BUDGET_BYTES, int(CUDA_FRACTION * free))
    _cache[index] = (budget, now)
    return budget


def chunk_size(total: int, bytes_per_row: int, device=None, *, budget: Optional[int] = None) -> int:
    """Rows per chunk, between 1 and ``total``, so that a chunk's ``rows * bytes_per_row`` temporary
    bytes fit ``budget`` (default :func:`memory_budget` of ``device``)."""
    if budget is None:
        budget = memory_budget(device if device is not None else "cpu")
    rows = int(budget) // max(1, int(bytes_per_row))
    return max(1, min(int(total), rows))
