"""What fit's sync-free step costs on the CPU against the per-step-checked step it replaced.

Two steps of the same model, alternating in one process (so that a shared machine's load hits both
alike), each timed over ``--steps`` steps per round:

* ``checked``: the loop of savigp.fit before the sync-free step, ``savigp.training.GradientStep`` in
  one process (what L-BFGS and data-parallel training still use) -- zero the gradients, the ELBO,
  backward and Adam only if the ELBO is finite (a host read), then every term and parameter read
  back and checked, and a copy of every parameter as the last good state;
* ``sync-free``: ``savigp.training.StepRunner.run`` (the on-device bookkeeping: a finite-flag per step,
  a conditional snapshot, zeroed gradients after a bad step) followed by fit's read of the flags,
  every step as on the CPU by default.

Prints the ATen operator calls and host reads per step of each (torch.profiler), and the median
wall-clock and process-CPU ms per step of each (CPU time, all threads, is less
sensitive to other processes on a shared machine), the fastest round's, and their ratios over
``--rounds`` rounds.

    python -m experiments.step_overhead                  # M = 500, B = 1000, S = 100, Bernoulli, score
    python -m experiments.step_overhead --M 1000 --rounds 11
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from experiments._common import add_threads_argument
from experiments import benchmark as bm
from savigp.training import GradientStep


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--M", type=int, default=500)
    p.add_argument("--B", type=int, default=1000)
    p.add_argument("--S", type=int, default=100)
    p.add_argument("--lik", default="bernoulli", choices=["bernoulli", "gaussian"])
    p.add_argument("--rounds", type=int, default=11)
    p.add_argument("--steps", type=int, default=3)
    add_threads_argument(p, 2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    from savigp import tune_cpu_allocator

    tune_cpu_allocator()
    cfg = bm.Config(args.lik, args.M, args.B, S=args.S)
    data = bm.Data(50_000, 8, 10, 0, torch.float64, torch.device("cpu"))
    Z = data.inducing(cfg.M, 0)

    old = bm.SavigpStep(cfg, data, Z)  # its model and optimizer; stepped the old way below
    rule = GradientStep(old.model, old.opt, num_samples=cfg.S, estimator=cfg.estimator,
                        generator=torch.Generator().manual_seed(0))
    counter = {"step": 0}

    def checked(batch):
        rule.step(batch, counter["step"])
        check = rule.check()
        if check.bad is not None:
            raise FloatingPointError(f"the checked step diverged at step {check.bad.step}")
        counter["step"] += 1
        return check.rows[-1]["elbo"]

    new = bm.SavigpStep(cfg, data, Z)

    runs = {"checked": checked, "sync-free": new}
    g = torch.Generator().manual_seed(1)
    times = {k: [] for k in runs}
    cpu = {k: [] for k in runs}
    for r in range(args.rounds + 1):
        batches = [torch.randint(0, data.N, (cfg.B,), generator=g) for _ in range(args.steps)]
        for name, run in (runs.items() if r % 2 == 0 else reversed(list(runs.items()))):
            t, c = time.perf_counter(), time.process_time()
            for b in batches:
                run(b)
            if r:  # round 0 warms up
                times[name].append(1e3 * (time.perf_counter() - t) / args.steps)
                cpu[name].append(1e3 * (time.process_time() - c) / args.steps)
    med = {k: statistics.median(v) for k, v in times.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    print(f"{cfg.label}, {args.threads} threads, {args.rounds} rounds x {args.steps} steps: wall "
          + ", ".join(f"{k} {v:.1f} ms" for k, v in med.items())
          + f" (sync-free / checked = {med['sync-free'] / med['checked']:.3f}); process CPU "
          + ", ".join(f"{k} {v:.1f} ms" for k, v in med_cpu.items())
          + f" (ratio {med_cpu['sync-free'] / med_cpu['checked']:.3f}); fastest round: "
          + ", ".join(f"{k} {min(v):.1f} ms" for k, v in times.items())
          + f" (ratio {min(times['sync-free']) / min(times['checked']):.3f})")
    ops = {}
    for name, run in runs.items():  # a count that the machine's load cannot blur
        ops[name] = bm.profile_steps(run, [torch.randint(0, data.N, (cfg.B,), generator=g) for _ in range(2)],
                                     "cpu")
    print("per step: " + ", ".join(f"{k} {v['ops']:.0f} ATen calls, {v['reads']:.0f} host reads" for k, v in ops.items()))
    return {"wall": med, "cpu": med_cpu, "profile": ops}


if __name__ == "__main__":
    main()
