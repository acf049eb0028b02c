"""Data-parallel scaling of ``savigp.fit`` on torch.distributed (gloo, CPU): training points per
second at 1, 2, 4, 8 ranks.

* *strong* scaling: a fixed global mini-batch (``--batch``, default 8000 points) split over R ranks;
* *weak* scaling: a fixed per-rank batch (``--rank-batch``, default 2000), global batch R times it.

Every configuration is a fresh group of R processes (``torch.multiprocessing``, gloo, rendezvous on
127.0.0.1) that run :func:`savigp.fit` exactly as a user's script under ``torchrun`` would, on the
same synthetic data (N x D inputs, a logistic-link Bernoulli likelihood treated as a black box:
score-function estimator with S samples and control variates, M inducing inputs, full Cholesky
q(u)). Rank 0 times ``--steps`` optimizer steps after ``--warmup`` steps (fit's own loop time:
batch selection, ELBO, backward, gradient all-reduce, Adam). Points per second = global batch /
seconds per step. Rows:

* ``1 process``: fit with no process group (the baseline), at the same threads per rank;
* ``R ranks``: fit under a process group of R ranks, gradients summed by the explicit bucketed
  all-reduce (``allreduce``) or by DistributedDataParallel (``ddp``; ``--sync allreduce,ddp``);
  R = 1 measures what the distributed path adds to one process.

Besides wall-clock points per second, every rank measures its CPU time over the timed steps:
*CPU us/point* is the CPU time of all ranks together per training point, and *CPU efficiency* the
1-process figure over it (1 = the ranks together do no more work than one process; what the
split costs in extra work, replicated M^3 terms and communication). On a machine shared with other
jobs the wall-clock figures depend on the CPU share the scheduler gives each process; the CPU
figures much less so.

The configurations alternate within each of ``--rounds`` rounds and the table reports the median
over rounds, so that ratios survive the noise of a shared machine. Ranks beyond the machine's
cores are skipped unless ``--oversubscribe``.

Usage::

    python -m experiments.scaling                      # ranks 1, 2, 4, 8 as the cores allow
    python -m experiments.scaling --ranks 1,2 --threads 1 --rounds 3 --sync allreduce,ddp
    python -m experiments.scaling --quick              # small sizes, one round (a smoke run)

Outputs in ``--out`` (default ``results/scaling``): ``scaling.csv``, ``scaling.md``, ``scaling.png``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from experiments._common import (
    REPO_ROOT, add_cli_options, add_out_argument, add_threads_argument, markdown_table, pyplot, read_csv_rows, save_figure,
    write_csv_atomic,
    write_json_atomic, write_text_atomic,
)


def _model(cfg: dict):
    import savigp
    from likelihoods import Logistic

    rng = np.random.default_rng(0)
    X = rng.standard_normal((cfg["N"], cfg["D"]))
    w = rng.standard_normal(cfg["D"])
    Y = np.where(X @ w + 0.5 * rng.standard_normal(cfg["N"]) > 0, 1.0, -1.0)[:, None]
    return savigp.SAVIGP(X, Y, Logistic(), inducing_inputs=X[:cfg["M"]], seed=0)


def _worker(rank: int, world: int, port: int, cfg: dict, out: str) -> None:
    import savigp

    torch.set_num_threads(cfg["threads"])
    os.environ["SAVIGP_GRAD_SYNC"] = cfg["sync"]
    if cfg["group"]:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
        dist.init_process_group("gloo", rank=rank, world_size=world)
    model = _model(cfg)
    common = dict(batch_size=cfg["batch"], estimator="score", num_samples=cfg["S"], lr=0.01, progress=False)
    savigp.fit(model, iterations=cfg["warmup"], seed=1, **common)
    cpu0 = time.process_time()
    history = savigp.fit(model, iterations=cfg["steps"], seed=2, **common)
    cpu = time.process_time() - cpu0
    write_json_atomic(out.format(rank=rank), {"seconds": history.seconds, "cpu_seconds": cpu})
    if cfg["group"]:
        dist.destroy_process_group()


def run_config(cfg: dict) -> dict:
    """Start ``cfg["ranks"]`` processes for one configuration and return rank 0's timing."""
    from savigp.training.distributed import free_loopback_port

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rank{rank}.json")
        mp.spawn(_worker, args=(cfg["ranks"], free_loopback_port(), cfg, out), nprocs=cfg["ranks"], join=True)
        res = [json.loads(Path(out.format(rank=r)).read_text()) for r in range(cfg["ranks"])]
    ms = 1000.0 * res[0]["seconds"] / cfg["steps"]
    cpu_ms = 1000.0 * sum(r["cpu_seconds"] for r in res) / cfg["steps"]
    return {"ms_per_step": ms, "points_per_s": cfg["batch"] / (ms / 1000.0), "cpu_ms_per_step": cpu_ms}


def configurations(args) -> list:
    cores = os.cpu_count() or 1
    ranks = [r for r in args.ranks if args.oversubscribe or r * args.threads <= max(cores, args.threads)]
    skipped = sorted(set(args.ranks) - set(ranks))
    if skipped:
        print(f"skipping {skipped} ranks: {cores} cores for {args.threads} thread(s) per rank "
              "(--oversubscribe to run them anyway)", file=sys.stderr)
    base = dict(N=args.N, D=args.D, M=args.M, S=args.samples, threads=args.threads, warmup=args.warmup,
                steps=args.steps)
    cfgs = []
    for mode in ("strong", "weak"):
        bases = [("1 process", 1, False, "none")]
        bases += [(f"{r} ranks", r, True, s) for r in ranks for s in args.sync]
        for label, r, group, sync in bases:
            batch = args.batch if mode == "strong" else args.rank_batch * r
            cfgs.append(dict(base, mode=mode, label=label, ranks=r, group=group, sync=sync, batch=batch))
    return cfgs


def plot(rows: list, path: Path) -> None:
    plt = pyplot()

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    ax = axes[2]
    for mode, color in (("strong", "C0"), ("weak", "C1")):
        for sync, style in (("allreduce", "-o"), ("ddp", "--s")):
            pts = sorted((r["ranks"], r["cpu_efficiency"]) for r in rows if r["mode"] == mode and r["sync"] == sync)
            if pts:
                ax.plot(*zip(*pts), style, color=color, label=f"{mode}, {sync}")
    ax.axhline(1.0, color="k", lw=1, ls=":")
    ax.set_xlabel("ranks")
    ax.set_ylabel("CPU efficiency vs 1 process")
    ax.set_title("work added by the split (less sensitive to CPU share)")
    ax.set_xticks(sorted({r["ranks"] for r in rows}))
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    for ax, mode in zip(axes, ("strong", "weak")):
        mine = [r for r in rows if r["mode"] == mode]
        one = next((r["points_per_s"] for r in mine if r["label"] == "1 process"), None)
        for sync, marker in (("allreduce", "o"), ("ddp", "s")):
            pts = sorted((r["ranks"], r["points_per_s"]) for r in mine if r["sync"] == sync)
            if pts:
                ax.plot(*zip(*pts), marker=marker, label=f"{sync}")
        if one is not None:
            rs = sorted({r["ranks"] for r in mine})
            ax.plot(rs, [one * r for r in rs], "k--", lw=1, label="ideal (1 process x R)")
            ax.plot([1], [one], "k*", ms=10, label="1 process")
        ax.set_xlabel("ranks")
        ax.set_ylabel("training points / s")
        size = mine[0]["batch"] if mode == "strong" else mine[0]["batch"] // mine[0]["ranks"]
        ax.set_title(f"{mode} scaling (B = {size} {'global' if mode == 'strong' else 'per rank'})")
        ax.set_xticks(sorted({r["ranks"] for r in mine}))
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    save_figure(fig, path)


def main(argv=None) -> list:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", default="1,2,4,8", help="rank counts (default 1,2,4,8)")
    add_threads_argument(p, 2, help="torch threads per rank (default 2)")
    p.add_argument("--sync", default="allreduce", help="gradient synchronization(s): allreduce, ddp (comma-separated)")
    p.add_argument("--batch", type=int, default=8000, help="strong scaling: global batch (default 8000)")
    p.add_argument("--rank-batch", type=int, default=2000, help="weak scaling: batch per rank (default 2000)")
    p.add_argument("--N", type=int, default=64000)
    p.add_argument("--D", type=int, default=8)
    p.add_argument("--M", type=int, default=500)
    add_cli_options(p, "--samples")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--oversubscribe", action="store_true", help="also run rank counts beyond the cores")
    p.add_argument("--quick", action="store_true", help="N=4000, M=100, B=1000/250 per rank, 1 round, 3 steps")
    add_out_argument(p, str(REPO_ROOT / "results" / "scaling"))
    p.add_argument("--replot", action="store_true", help="only redraw scaling.png from OUT/scaling.csv")
    args = p.parse_args(argv)
    if args.replot:
        rows = read_csv_rows(Path(args.out) / "scaling.csv")
        for r in rows:
            r["ranks"], r["batch"] = int(r["ranks"]), int(r["batch"])
        plot(rows, Path(args.out) / "scaling.png")
        return rows
    args.ranks = [int(r) for r in args.ranks.split(",")]
    args.sync = [s.strip() for s in args.sync.split(",")]
    if args.quick:
        args.N, args.M, args.batch, args.rank_batch, args.rounds, args.steps, args.warmup = 4000, 100, 1000, 250, 1, 3, 1
    cfgs = configurations(args)
    times: dict = {}
    cpu: dict = {}
    for rnd in range(args.rounds):
        for i, cfg in enumerate(cfgs):
            res = run_config(cfg)
            times.setdefault(i, []).append(res["ms_per_step"])
            cpu.setdefault(i, []).append(res["cpu_ms_per_step"])
            print(f"round {rnd + 1}/{args.rounds}: {cfg['mode']:6s} {cfg['label']:9s} {cfg['sync']:9s} "
                  f"B={cfg['batch']:6d}: {res['ms_per_step']:8.1f} ms/step, {res['points_per_s']:9.0f} points/s, "
                  f"CPU {res['cpu_ms_per_step']:8.1f} ms/step (all ranks)",
                  flush=True)
    rows = []
    for i, cfg in enumerate(cfgs):
        ms = statistics.median(times[i])
        rows.append({"mode": cfg["mode"], "label": cfg["label"], "ranks": cfg["ranks"], "sync": cfg["sync"],
                     "threads_per_rank": cfg["threads"], "batch": cfg["batch"], "M": cfg["M"],
                     "ms_per_step": ms, "ms_min": min(times[i]), "ms_max": max(times[i]),
                     "points_per_s": cfg["batch"] / (ms / 1000.0),
                     "cpu_us_per_point": 1000.0 * statistics.median(cpu[i]) / cfg["batch"]})
    for r in rows:
        one = next(x for x in rows if x["mode"] == r["mode"] and x["label"] == "1 process")
        r["speedup"] = r["points_per_s"] / one["points_per_s"]
        r["cpu_efficiency"] = one["cpu_us_per_point"] / r["cpu_us_per_point"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_csv_atomic(out / "scaling.csv", rows)
    cols = ["mode", "label", "sync", "threads_per_rank", "batch", "ms_per_step", "ms_min", "ms_max", "points_per_s",
            "speedup", "cpu_us_per_point", "cpu_efficiency"]
    table = markdown_table(rows, cols, ["mode", "run", "gradient sync", "threads/rank", "global B", "ms/step (median)",
                                        "min", "max", "points/s", "speedup vs 1 process", "CPU us/point (all ranks)",
                                        "CPU efficiency vs 1 process"], digits=4)
    header = (f"savigp.fit data-parallel scaling: N={args.N}, D={args.D}, M={args.M}, S={args.samples}, "
              f"score estimator, float64, gloo on 127.0.0.1, {os.cpu_count()} cores, torch {torch.__version__}; "
              f"median of {args.rounds} round(s) of {args.steps} steps after {args.warmup} warm-up steps.\n\n")
    write_text_atomic(out / "scaling.md", header + table)
    try:
        plot(rows, out / "scaling.png")
    except ImportError:
        print("matplotlib is not installed: no plot", file=sys.stderr)
    print(header + table)
    return rows


if __name__ == "__main__":
    main()
