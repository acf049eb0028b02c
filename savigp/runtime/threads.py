"""How many CPU threads torch uses for a fit: chosen from the problem's size and the machine's idle
cores unless the caller says (``fit(threads=T)``, ``savigp train --threads T``, or
``OMP_NUM_THREADS`` in the environment).

Why not torch's default (one thread per core): torch's CPU kernels split an operation over threads
that wait for each other at its end, so one thread descheduled by another process stalls them all.
Measured on the project's 2-core machine while other jobs kept it busy (load average 9.3-9.5),
with ``experiments/threads.py`` (docs/cli.md, "Threads"): 200 steps of the README's first example
(N = 500, M = 20, B = 100, a numpy likelihood, score estimator) took 1.56 s (median; 0.75-2.06)
with 1 thread against 15.9 s (12.0-51.9) with 2; 10 steps at M = 500, B = 1000, S = 20
(Gaussian, reparameterization) 1.60 s against 11.6 s (7.6-15.6). A second thread can at best
halve a step on an idle 2-core machine and multiplied these by 7-10 (up to 33) on a busy one;
small steps (a few milliseconds) gain nothing from threads even on an idle machine (issue 28
reports 1.6 s for those 200 steps with 1 or 2 threads on a quiet one). Hence the rule of :func:`choose_threads`:

* a small step, :func:`step_work` below :data:`SMALL_WORK` multiply-adds (about M = 300 at B = 1000
  for one latent function and component): **1 thread**;
* a larger one: torch's current setting, capped at the number of cores idle now (measured over
  :data:`IDLE_SAMPLE_S` seconds from ``/proc/stat``; elsewhere from the 1-minute load average),
  at least 1.
"""
from __future__ import annotations

import contextlib
import os
import time
from typing import Optional

#: multiply-adds per step below which one thread is used (module docstring)
SMALL_WORK = 1e8
#: seconds over which the idle cores are measured
IDLE_SAMPLE_S = 0.1


def step_work(model, batch_size: Optional[int], num_samples: int) -> float:
    """Multiply-adds of one step, roughly: Q K (B M^2 + M^3 / 3) for the marginals and K_zz's
    factor, plus S K B Q for the draws and likelihood values (B = ``batch_size`` or N)."""
    B = int(batch_size or model.num_data)
    M, Q, K = int(model.num_inducing), int(model.num_latent), int(model.posterior.num_components)
    return Q * K * (B * M * M + M ** 3 / 3) + int(num_samples) * K * B * Q


def _cpu_times() -> Optional[tuple]:
    try:
        with open("/proc/stat") as f:
            fields = [float(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    return sum(fields), idle


def idle_cores() -> float:
    """Cores idle now: the idle fraction of all CPU time over :data:`IDLE_SAMPLE_S` seconds times the
    cores this process may use (``/proc/stat``); else cores minus the 1-minute load average."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    first = _cpu_times()
    if first is not None:
        time.sleep(IDLE_SAMPLE_S)
        second = _cpu_times()
        if second is not None and second[0] > first[0]:
            total_cores = os.cpu_count() or cores
            idle = (second[1] - first[1]) / (second[0] - first[0]) * total_cores
            return max(0.0, min(float(cores), idle))
    try:
        return max(0.0, cores - os.getloadavg()[0])
    except (OSError, AttributeError):
        return float(cores)


def choose_threads(work: float, threads: Optional[int] = None) -> int:
    """The torch threads for a step of ``work`` multiply-adds (module docstring): ``threads`` when
    given; torch's current setting when ``OMP_NUM_THREADS`` is set; else the rule."""
    import torch

    if threads is not None:
        if int(threads) < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        return int(threads)
    if os.environ.get("OMP_NUM_THREADS"):
        return torch.get_num_threads()
    if work < SMALL_WORK:
        return 1
    return max(1, min(torch.get_num_threads(), int(idle_cores() + 0.5)))


@contextlib.contextmanager
def torch_threads(n: int):
    """Run the body with ``torch.set_num_threads(n)`` and restore the caller's setting after."""
    import torch

    old = torch.get_num_threads()
    if n != old:
        torch.set_num_threads(n)
    try:
        yield n
    finally:
        if torch.get_num_threads() != old:
            torch.set_num_threads(old)
