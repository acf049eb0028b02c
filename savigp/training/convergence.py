"""Reading convergence from a stochastic fit: the smoothed ELBO, a full-data ELBO with its Monte Carlo
standard error, and whether the ELBO is still rising at the end.

Each step's ELBO that :func:`savigp.fit` records is one mini-batch's Monte Carlo estimate of the
ELBO (Bonilla et al. 2019, eq. (17) with the N / B scaling of eq. (33)): unbiased, but its spread
across steps hides the trend. Three readouts:

* :func:`window_stats` -- the mean and standard deviation of the last ``window`` estimates: the
  progress bar and the log lines show it (``elbo=MEAN sd=SD``);
* :func:`full_data_elbo` -- at the end, one pass over all N points in chunks with the training
  estimator (no gradients): L = sum_n E_q[log p(y_n | f_n)] + the KL terms, with the Monte Carlo
  standard error of the expected log-likelihood sum (the estimator's per-point sample variances,
  summed over the points: the points' draws are independent). Closed form and quadrature are
  deterministic (standard error 0);
* :func:`still_rising` -- the least-squares slope of the per-step estimates over the last fifth of
  the run and its standard error: the ELBO is "still rising" when the trend is above 3 standard
  errors *and* the rise it implies over that stretch is at least ``RISE_PER_POINT`` nats per data
  point (a full-batch deterministic fit has no noise, so the first condition alone would flag
  any rounding-level change). :func:`savigp.fit` then warns with :class:`ConvergenceWarning`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch

from .._choices import ESTIMATORS
from ..linalg import chunks as _chunks

#: a rise of the ELBO's trend over the last fifth of the run below this many nats per data point is
#: not worth more iterations (a change of NLPD in the third decimal)
RISE_PER_POINT = 1e-3
#: the trend must exceed this many of its standard errors
RISE_Z = 3.0
#: at least this many steps in the last stretch for a verdict
MIN_TREND_STEPS = 20


class ConvergenceWarning(UserWarning):
    """The ELBO was still rising when training stopped: more iterations would likely improve the fit."""


def window_stats(values: Sequence[float], window: int) -> tuple[float, float, int]:
    """``(mean, sd, n)`` of the last ``min(window, len(values))`` values (sd 0 for one value)."""
    tail = [float(v) for v in values[-max(1, int(window)):]]
    n = len(tail)
    if n == 0:
        return math.nan, math.nan, 0
    mean = sum(tail) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in tail) / (n - 1)) if n > 1 else 0.0
    return mean, sd, n


@dataclass
class Rising:
    """The trend of the last ``steps`` ELBO estimates: ``rise`` = slope * steps (nats) and ``z`` =
    slope / its standard error (inf without noise)."""

    steps: int
    rise: float
    z: float

    #: what to try, in fit's words
    ADVICE = "more iterations would likely improve the fit"

    def what(self) -> str:
        """The line without its advice."""
        z = "no noise" if math.isinf(self.z) else f"{self.z:.1f} standard errors of its trend"
        return f"the ELBO was still rising at the end (+{self.rise:.3g} nats over the last {self.steps} steps, {z})"

    def message(self) -> str:
        return f"{self.what()}: {self.ADVICE}"

    def note(self):
        """The :class:`~savigp.training.notes.Note` of fit's history (kind ``"still rising"``)."""
        from .notes import Note

        return Note("still rising", self.what(), self.ADVICE, ConvergenceWarning)


def trend(values: Sequence[float]) -> Optional[Rising]:
    """The least-squares trend of ``values`` (per-step estimates): its rise over them and its z, or
    None for fewer than 3 values or a non-finite one."""
    n = len(values)
    if n < 3:
        return None
    y = torch.tensor([float(v) for v in values], dtype=torch.float64)
    if not bool(torch.isfinite(y).all()):
        return None
    t = torch.arange(n, dtype=torch.float64)
    t = t - t.mean()
    slope = float((t * (y - y.mean())).sum() / (t * t).sum())
    resid = y - y.mean() - slope * t
    se = math.sqrt(float((resid * resid).sum()) / (n - 2) / float((t * t).sum()))
    z = slope / se if se > 0 else (math.inf if slope > 0 else 0.0)
    return Rising(n, slope * n, z)


def rises(found: Rising, num_data: int) -> bool:
    """Is the trend ``found`` still rising: above :data:`RISE_Z` of its standard errors and by at least
    :data:`RISE_PER_POINT` nats per data point over its steps?"""
    return found.z > RISE_Z and found.rise > RISE_PER_POINT * num_data


def still_rising(elbo: Sequence[float], num_data: int, *, fraction: float = 0.2,
                 steps: Optional[int] = None) -> Optional[Rising]:
    """The trend of the last ``fraction`` of ``elbo`` (per-step estimates; or of its last ``steps``)
    when it is still rising (module docstring), else None (also for fewer than
    :data:`MIN_TREND_STEPS` steps there)."""
    n = int(len(elbo) * fraction) if steps is None else min(int(steps), len(elbo))
    if n < MIN_TREND_STEPS:
        return None
    found = trend(elbo[-n:])
    return found if found is not None and rises(found, num_data) else None


@torch.no_grad()
def full_data_elbo(model, *, num_samples: int = 100, estimator: str = "auto", seed: int = 0,
                   chunk_size: Optional[int] = None, shard: tuple = (0, 1),
                   reduce: Optional[Callable[[torch.Tensor], torch.Tensor]] = None) -> tuple[float, float]:
    """The ELBO of ``model`` on all N training points and the Monte Carlo standard error of it.

    L = sum_n E_q[log p(y_n | f_n)] + H[q] + E_q[log p(u)] (- the mean head's KL) (Bonilla et al.
    2019, eq. (17)), the expected log-likelihood summed over chunks of rows with ``estimator`` and
    ``num_samples`` draws per point (seeded by ``seed``; shared by a mixture's components, so that
    estimates of models with different K but the same components, from one ``seed``, share their
    Monte Carlo error while their chunks are the same, e.g. one chunk each: up to about 7000 rows
    at S = 100, K = 2, Q = 1 on the CPU; see :func:`savigp.estimators.sampling.factorized_draws`), the KL terms averaged over
    the chunks (they are exact except for a Monte Carlo entropy). The standard error is that of the
    expected log-likelihood sum: sqrt(sum over chunks of their squared standard errors).

    Args:
        chunk_size: rows per chunk (default: what the device's memory budget allows).
        shard: ``(rank, world)``: this process evaluates chunks ``rank, rank + world, ...``; ``reduce``
            (e.g. an all-reduce sum across the ranks) then adds up the partial sums ``(4,)``.

    Returns:
        ``(elbo, stderr)`` as floats.
    """
    N = int(model.num_data)
    if chunk_size is None:
        S = int(num_samples) if ESTIMATORS[estimator].monte_carlo else 1
        K, Q, M = model.posterior.num_components, model.num_latent, model.num_inducing
        row = 8 * (6 * S * K * Q + 4 * Q * (M + K))
        chunk_size = _chunks.chunk_size(N, row, model.device)
    gen = torch.Generator(device="cpu" if model.device.type == "cpu" else model.device).manual_seed(seed)
    rank, world = shard
    starts = list(range(0, N, int(chunk_size)))
    acc = torch.zeros(4, dtype=torch.float64)  # sum of ell, sum of squared stderr, sum of KL parts, chunks
    for i in starts[rank::world]:
        idx = torch.arange(i, min(i + int(chunk_size), N), device=model.device)
        terms = model.elbo(idx, num_samples=num_samples, estimator=estimator, generator=gen)
        w = idx.numel() / N  # the chunk's terms are scaled by N / B_c
        row = torch.stack([torch.as_tensor(v, dtype=torch.float64).detach().cpu().reshape(())
                           for v in (terms.ell, terms.ell_stderr, terms.elbo - terms.ell)])
        acc += torch.stack([w * row[0], (w * row[1]) ** 2, row[2], torch.ones((), dtype=torch.float64)])
    if reduce is not None:
        acc = reduce(acc)
    ell, var, kl, chunks = acc.tolist()
    return ell + kl / max(chunks, 1.0), math.sqrt(var)
