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
        columns: the role of each of the P target columns (:data:`COLUMN_ROLES`), a tuple of P;
            all ``"outcome"`` unless ``check_likelihood(columns=)`` says otherwise.
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
    columns: tuple = ()

    @property
    def outcomes(self) -> list:
        """The indices of the columns integrated over (``"outcome"``), in order."""
        roles = self.columns or ("outcome",) * self.y.shape[1]
        return [j for j, role in enumerate(roles) if role == "outcome"]

    @property
    def indicator(self) -> Optional[tuple]:
        """``(column, event value, censored value)`` of the censoring indicator, or None."""
        for j, role in enumerate(self.columns):
            if role in INDICATORS:
                return (j, 1.0, 0.0) if role == "event" else (j, 0.0, 1.0)
        return None

    def as_event(self, y: Tensor, event: bool = True) -> Tensor:
        """``y (N, P)`` with the censoring indicator (if any) set to "the event was seen at the
        outcome" (``event=False``: "censored there"); the other columns as given."""
        ind = self.indicator
        if ind is None:
            return y
        out = y.clone()
        out[:, ind[0]] = ind[1] if event else ind[2]
        return out

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


#: the roles of target columns (``check_likelihood(columns=)``): ``"outcome"`` is a value of y the
#: density is over (integrated by ``normalization``); ``"event"`` a 0/1 right-censoring indicator
#: (1: the event was seen at the row's outcome, 0: the row was censored there, the event came
#: later), ``"censored"`` the same indicator coded the other way (1: censored); ``"fixed"`` a
#: covariate the likelihood reads from y but does not describe (an exposure, a number of trials),
#: held at each row's value
COLUMN_ROLES = ("outcome", "event", "censored", "fixed")
INDICATORS = ("event", "censored")
#: other names of the roles: ``"indicator"`` an event indicator (1: the event seen), ``"exposure"``,
#: ``"trials"`` and ``"covariate"`` fixed columns
ROLE_ALIASES = {"indicator": "event", "exposure": "fixed", "trials": "fixed", "covariate": "fixed"}


def parse_columns(columns, y: Tensor) -> tuple:
    """The role of each column of ``y (B, P)`` from ``check_likelihood(columns=)``: None (every
    column an outcome) or a sequence of P names of :data:`COLUMN_ROLES` (or :data:`ROLE_ALIASES`,
    returned as the role they name) with at least one
    ``"outcome"`` and at most one indicator; with an indicator exactly one outcome (the censored
    term is a tail of that outcome's density), and the indicator's values 0 or 1. A ValueError
    names the argument, the column and the row."""
    P = y.shape[1]
    if columns is None:
        return ("outcome",) * P
    if isinstance(columns, str):
        columns = (columns,)
    roles = tuple(ROLE_ALIASES.get(r, r) if isinstance(r, str) else r for r in columns)
    if len(roles) != P or not all(isinstance(r, str) and r in COLUMN_ROLES for r in roles):
        raise ValueError(f"columns must name the role of each of the {P} columns of y, each one of "
                         f"{', '.join(COLUMN_ROLES)} (or {', '.join(ROLE_ALIASES)}); got {columns!r}")
    indicators = [j for j, r in enumerate(roles) if r in INDICATORS]
    outcomes = [j for j, r in enumerate(roles) if r == "outcome"]
    if not outcomes:
        raise ValueError(f"columns {roles!r} name no 'outcome': at least one column must be what the density is over")
    if len(indicators) > 1:
        raise ValueError(f"columns {roles!r} name {len(indicators)} censoring indicators; at most one is checked")
    if indicators and len(outcomes) != 1:
        raise ValueError(f"columns {roles!r}: with a censoring indicator exactly one column is the 'outcome' "
                         f"(the censored term is a tail of its density), got {len(outcomes)}")
    for j in indicators:
        bad = ~((y[:, j] == 0) | (y[:, j] == 1))
        if bool(bad.any()):
            i = int(bad.nonzero()[0, 0])
            raise ValueError(f"columns: column {j} is the indicator {roles[j]!r} (0 or 1), but row {i} holds "
                             f"{float(y[i, j]):g}")
    return roles


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
