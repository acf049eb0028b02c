"""Checks shared by the kits that build a small model around the implementation they check
(:mod:`.posteriors`, :mod:`.mean_heads`): the problem's ``model(dtype=, device=)`` builds it."""
from __future__ import annotations

import torch

from .report import FAILED, PASSED, SKIPPED


def marginals_dtype(p):
    """A float32 model gives float32 marginal means and variances ``(K, B, Q)``."""
    model = p.model(dtype=torch.float32)
    with torch.no_grad():
        mean, var = model.marginals(model.train_x[:5])
    ok = mean.dtype == var.dtype == torch.float32
    return (PASSED, "") if ok else (FAILED, f"a float32 model gave marginals of {mean.dtype}, {var.dtype}")


def marginals_device(p):
    """A model on a CUDA device keeps its marginals there (skipped without one)."""
    if not torch.cuda.is_available():
        return SKIPPED, "no CUDA device"
    model = p.model(device="cuda")
    with torch.no_grad():
        mean, _ = model.marginals(model.train_x[:5])
    return (PASSED, "") if mean.is_cuda else (FAILED, f"a CUDA model gave marginals on {mean.device}")
