"""Torch threads for a fit: ``fit(threads=None)`` (the rule of :mod:`savigp.runtime.threads`) against 1 and
2 threads, interleaved in one process, on two problems:

* ``readme``: the README's first example (N = 500, M = 20, B = 100, a numpy Laplace likelihood,
  score estimator), ``--steps`` steps;
* ``large``: a Gaussian likelihood, N = 5000, M = 500, B = 1000, S = 20, reparameterization.

It prints the median and range of each setting over ``--repeats`` runs, the threads the rule
picked, the machine's load average, and the time of one full-data ELBO pass
(:func:`savigp.training.full_data_elbo`). ``OMP_NUM_THREADS`` is removed from the environment so
that the rule decides. docs/cli.md ("Threads") has the figures:

    python -m experiments.threads readme --steps 200 --repeats 3
    python -m experiments.threads large --steps 10 --repeats 2
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.pop("OMP_NUM_THREADS", None)  # before torch is imported: the rule decides

import numpy as np  # noqa: E402
import torch  # noqa: E402

import savigp  # noqa: E402
from likelihoods import CallableLikelihood, Gaussian  # noqa: E402
from savigp.runtime.threads import torch_threads  # noqa: E402


def problem(which: str):
    rng = np.random.default_rng(0)
    if which == "readme":
        def laplace_log_lik(y, f):
            return -np.log(2 * 0.3) - np.abs(y[:, 0] - f[..., 0]) / 0.3

        X = rng.random((500, 1)) * 6
        Y = np.sin(X) + 0.3 * rng.laplace(size=X.shape)
        model = savigp.SAVIGP(X, Y, CallableLikelihood(laplace_log_lik, num_latent=1), num_inducing=20)
        return model, dict(batch_size=100, lr=0.02)
    X = rng.random((5000, 2)) * 6
    Y = np.sin(X[:, :1]) + 0.3 * rng.normal(size=(5000, 1))
    model = savigp.SAVIGP(X, Y, Gaussian(), num_inducing=500)
    return model, dict(batch_size=1000, lr=0.01, estimator="reparam", num_samples=20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("problem", choices=("readme", "large"))
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    model, kw = problem(args.problem)
    savigp.fit(model, iterations=3, progress=False, final_elbo=False, **kw)  # warm-up
    times: dict = {None: [], 1: [], 2: []}
    used: dict = {}
    for _ in range(args.repeats):
        for t in times:
            t0 = time.perf_counter()
            h = savigp.fit(model, iterations=args.steps, progress=False, final_elbo=False, threads=t, **kw)
            times[t].append(time.perf_counter() - t0)
            used[t] = h.threads
    with torch_threads(used[None]):  # as fit runs it: on the threads the rule picked
        t0 = time.perf_counter()
        value, se = savigp.training.full_data_elbo(model, num_samples=kw.get("num_samples", 100),
                                                   estimator=kw.get("estimator", "auto"))
        full = time.perf_counter() - t0
    print(f"{args.problem}: {args.steps} steps, torch's threads {torch.get_num_threads()}, "
          f"load average {os.getloadavg()[0]:.1f}")
    for t, ts in times.items():
        print(f"  threads={t} (ran on {used[t]}): median {statistics.median(ts):.2f} s, "
              f"range {min(ts):.2f}-{max(ts):.2f} ({len(ts)} runs)")
    print(f"  full-data ELBO pass on {used[None]} thread(s): {full:.2f} s (ELBO {value:.1f} +- {se:.2f})")


if __name__ == "__main__":
    main()
