"""What :func:`savigp.tune_cpu_allocator` does to a training loop: ms per ``savigp.fit`` step with
``tune_allocator=True`` and ``False``, each in a fresh process (the setting is process-wide and
cannot be undone), alternating, so that machine noise hits both.

The model is the benchmark's Bernoulli target: N = 50k, D = 8, float64, full Cholesky q(u), a
logistic likelihood as a black box (score estimator, S samples), mini-batches of B, M inducing
inputs; the per-step time is the median of the gaps between ``fit``'s callbacks after warm-up.

    python -m experiments.allocator_effect                  # M = 500, B = 1000, 3 pairs
    python -m experiments.allocator_effect --M 1000 --pairs 5
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from experiments._common import REPO_ROOT, add_threads_argument


def one_run(M: int, B: int, S: int, steps: int, warmup: int, threads: int, tune: bool) -> float:
    """Median ms per fit step in this process."""
    import torch

    from experiments import benchmark as bm
    import savigp

    torch.set_num_threads(threads)
    data = bm.Data(50_000, 8, 10, 0, torch.float64, torch.device("cpu"))
    cfg = bm.Config(lik="bernoulli", M=M, B=B, S=S, K=1, Q=1, posterior="full", sweep="M")
    model = bm.SavigpStep(cfg, data, data.inducing(M, 0)).model
    stamps = []
    savigp.fit(model, iterations=warmup + steps, batch_size=B, lr=0.01, num_samples=S, estimator="score",
               progress=False, tune_allocator=tune, callback=lambda step, terms: stamps.append(time.perf_counter()))
    gaps = [b - a for a, b in zip(stamps[warmup:-1], stamps[warmup + 1:])]
    return 1000.0 * statistics.median(gaps)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--M", type=int, default=500)
    p.add_argument("--B", type=int, default=1000)
    p.add_argument("--S", type=int, default=100)
    p.add_argument("--steps", type=int, default=60, help="timed steps per run")
    p.add_argument("--warmup", type=int, default=5)
    add_threads_argument(p, 2)
    p.add_argument("--pairs", type=int, default=3, help="alternating (tuned, default) process pairs")
    p.add_argument("--child", choices=["tuned", "default"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        ms = one_run(args.M, args.B, args.S, args.steps, args.warmup, args.threads, args.child == "tuned")
        print(json.dumps({"ms": ms}))
        return {"ms": ms}
    results: dict = {"tuned": [], "default": []}
    for _ in range(args.pairs):
        for mode in ("tuned", "default"):
            cmd = [sys.executable, "-m", "experiments.allocator_effect", "--child", mode] + [
                f"--{k}={getattr(args, k)}" for k in ("M", "B", "S", "steps", "warmup", "threads")]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True,
                                 cwd=REPO_ROOT).stdout.strip().splitlines()[-1]
            results[mode].append(json.loads(out)["ms"])
            print(f"{mode:8s} {results[mode][-1]:7.2f} ms/step", flush=True)
    for mode in ("tuned", "default"):
        print(f"{mode}: median {statistics.median(results[mode]):.2f} ms/step over {args.pairs} processes "
              f"(M={args.M}, B={args.B}, S={args.S}, {args.threads} threads)")
    return results


if __name__ == "__main__":
    main()
