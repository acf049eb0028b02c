"""The test problem every likelihood check reads: the likelihood (a float64 copy), valid targets,
a Gaussian N(f; mean, diag var) over the latent values, draws from it, and the formatting helpers
the checks share."""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np
import torch
from torch import Tensor

from likelihoods.base import Likelihood


@dataclass
class Problem:
    """What the checks run on.

    Attributes:
        likelihood: a float64 copy of the user's likelihood, initialized from ``y`` (the original
            is never modified); the float32 and device checks copy it again.
        y: valid targets, shape ``(B, P)``, float64.
        mean, var: the Gaussian over f at each row, shape ``(B, Q)``, float64, var > 0.
        num_samples: S, the Monte Carlo draws of the expectation checks.
        seed: seeds every draw.
        bad_targets: ``[(y_bad (N, P), row), ...]``: targets ``validate_targets`` must reject
            naming ``row <row>``.
        support: what the user declared of the support of y (``check_likelihood(support=)``), or
            None (then the likelihood's ``support`` attribute, else inferred: :mod:`.density_checks`).
        report: called with a short line on what a running check is doing (a round of Monte Carlo
            or of quadrature); :mod:`.report`'s ``Progress`` decides whether to show it.
    """

    likelihood: Likelihood
    y: Tensor
    mean: Tensor
    var: Tensor
    num_samples: int
    seed: int
    bad_targets: Sequence = ()
    support: object = None
    report: Optional[Callable[[str], None]] = None

    def say(self, line: str) -> None:
        """Tell the progress reporter what the running check is doing now."""
        if self.report is not None:
            self.report(line)

    @property
    def num_latent(self) -> int:
        return self.mean.shape[-1]

    def generator(self, offset: int = 0) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed + offset)

    def draws(self, lead: tuple, rows: Optional[int] = None, offset: int = 0,
              generator: Optional[torch.Generator] = None) -> Tensor:
        """f ~ N(mean, diag var) of shape ``lead + (rows, Q)`` (the first ``rows`` rows; all by
        default), from ``generator`` (drawing on in rounds) or a fresh one seeded with ``seed + offset``."""
        m, v = self.mean[:rows], self.var[:rows]
        gen = self.generator(offset) if generator is None else generator
        eps = torch.randn(lead + tuple(m.shape), generator=gen, dtype=m.dtype).to(m.device)
        return m + v.sqrt() * eps

    def log_prob(self, f: Tensor, rows: Optional[int] = None) -> Tensor:
        """The likelihood's public ``log_prob`` at the first ``rows`` targets."""
        return self.likelihood.log_prob(self.y[:rows], f)


def as_float64(value, name: str, device) -> Tensor:
    """``value`` (array-like or tensor) as a float64 tensor on ``device``."""
    if isinstance(value, Tensor):
        return value.detach().to(device=device, dtype=torch.float64)
    try:
        return torch.as_tensor(np.asarray(value, dtype=np.float64), device=device)
    except (TypeError, ValueError) as err:
        raise TypeError(f"check_likelihood: {name} must be an array of numbers, got {type(value).__name__}: {err}")


def copy_to(lik: Likelihood, dtype: torch.dtype, device=None) -> Likelihood:
    """A deep copy of ``lik`` with floating parameters and buffers in ``dtype`` (on ``device``)."""
    out = copy.deepcopy(lik)
    return out.to(dtype=dtype) if device is None else out.to(device=device, dtype=dtype)


def likelihood_device(lik: Likelihood) -> torch.device:
    for t in list(lik.parameters()) + list(lik.buffers()):
        return t.device
    return torch.device("cpu")


def worst(got: Tensor, expected: Tensor, excess: Tensor, what: str, limit: int = 3) -> str:
    """A message naming the entries where ``excess`` (same shape) is largest: index, got, expected."""
    flat = excess.detach().reshape(-1)
    order = torch.argsort(flat, descending=True)[:limit]
    shape = tuple(excess.shape)
    parts = []
    for i in order.tolist():
        idx = tuple(int(k) for k in np.unravel_index(i, shape)) if shape else ()
        parts.append(f"at {idx}: got {float(got.reshape(-1)[i]):.6g}, expected {float(expected.reshape(-1)[i]):.6g}")
    return f"{what}; " + "; ".join(parts)
