"""Checks that do not stop the device: failures recorded as device-side flags, read later.

On a GPU, every ``bool(tensor)``, ``float(tensor)`` or ``.item()`` inside a training step waits for
all queued kernels to finish and leaves the device idle while Python catches up; a step with a
few dozen of them is bound by Python and launch latency, not by the device. Inside
:func:`deferred`, the model's checks do not read their results back: a Cholesky factorization
that failed (``torch.linalg.cholesky_ex``'s ``info``) and log-likelihood values that are NaN or
infinite are OR-ed into the boolean tensors of a :class:`StepFlags`, on the model's device, and a
failed factor is replaced by NaN so that the step's ELBO is non-finite rather than wrong.
:func:`savigp.fit` reads the flags every ``log_every`` steps and reacts then (see
:mod:`savigp.training.step`). Outside :func:`deferred` (``model.elbo`` called directly) the checks raise
at once, as before.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Optional

import torch
from torch import Tensor

_active: dict = {"flags": None}


class StepFlags:
    """Device-side booleans, set when something failed since the last :meth:`reset`.

    Attributes:
        cholesky: a K_zz factorization failed (``info != 0``) at the jitter in use.
        log_prob: the likelihood returned NaN or inf for some sample.
    """

    NAMES = ("cholesky", "log_prob")

    def __init__(self, device: torch.device):
        for name in self.NAMES:
            setattr(self, name, torch.zeros((), dtype=torch.bool, device=device))

    def note(self, name: str, bad: Tensor) -> None:
        """OR ``bad.any()`` into flag ``name`` in place (no host read; graph-capturable)."""
        flag = getattr(self, name)
        flag.logical_or_(bad.any().to(flag.device))

    def reset(self) -> None:
        for name in self.NAMES:
            getattr(self, name).zero_()


@contextmanager
def deferred(flags: StepFlags) -> Iterator[StepFlags]:
    """Within this block, the model's checks record into ``flags`` instead of raising."""
    previous = _active["flags"]
    _active["flags"] = flags
    try:
        yield flags
    finally:
        _active["flags"] = previous


def active() -> Optional[StepFlags]:
    """The flags of the enclosing :func:`deferred` block, or None (checks raise at once)."""
    return _active["flags"]


def nan_where_failed(L: Tensor, info: Tensor) -> Tensor:
    """``L`` ``(..., M, M)`` with a NaN diagonal in every factor whose ``info`` ``(...)`` is non-zero,
    in place (a failed factorization leaves a partial factor that would give finite, wrong values;
    a NaN diagonal makes every solve with the factor and its log-determinant NaN, at O(M) cost)."""
    nan = torch.where(info != 0, float("nan"), 0.0).to(L.dtype).unsqueeze(-1)
    if L.requires_grad:  # autograd saved L: out of place
        return L + torch.diag_embed(nan.expand(L.shape[:-1]))
    L.diagonal(dim1=-2, dim2=-1).add_(nan)
    return L


def cholesky(matrix: Tensor, flag: Optional[str] = "cholesky") -> Tensor:
    """Lower Cholesky factor of ``matrix`` ``(..., M, M)``, with no host read inside a
    :func:`deferred` block.

    ``torch.linalg.cholesky`` reads the factorization's status back to raise, a host
    synchronization that a CUDA graph capture cannot contain (the capture is invalidated). Inside a
    :func:`deferred` block this factorizes with ``cholesky_ex``, records a failure in the flag
    ``flag`` (None: record nothing, the NaN factor makes the step's terms non-finite, which the step
    flags as a bad step) and sets the failed factors' diagonals to NaN (:func:`nan_where_failed`).
    Outside one it is ``torch.linalg.cholesky``, which raises at once.
    """
    flags = active()
    if flags is None:
        return torch.linalg.cholesky(matrix)
    L, info = torch.linalg.cholesky_ex(matrix)
    if flag is not None:
        flags.note(flag, info != 0)
    return nan_where_failed(L, info)
