"""Does a learned period survive the command line's defaults? (issue 57, item 3)

``savigp train`` on the first 80 % of statsmodels' ``elnino`` (monthly sea-surface temperatures,
time in years, 585 of 732 months) with ``--kernel "rbf(t) + periodic(t, period=1) * rbf(t)"
--standardize-targets`` and otherwise the command line's defaults, over seeds (``--seed``), against
the RBF alone (``--kernel "rbf(t)"``, same seeds); each model is scored by ``savigp evaluate`` on the
held-out last 147 months. Printed per seed: the learned period (years; the model file's, carried back
to years when the inputs were standardized), its relative error against 1 year, the steps and the
convergence the model file records, the test NLPD of both models, and whether the periodic model
beats the RBF alone. The issue's criterion: period within 1 % and a better NLPD than the RBF alone in
10/10 seeds.

    python -m experiments.learned_period --seeds 10                          # the defaults
    python -m experiments.learned_period --seeds 10 --extra "--iterations 500"   # a fixed run

Outputs in ``--out`` (default ``results/learned_period``): ``learned_period.md`` / ``.csv``, and each
run's model file and stderr.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

PERIODIC = "rbf(t) + periodic(t, period=1) * rbf(t)"


def _train(train_csv: str, kernel: str, seed: int, out: str, extra: list) -> tuple:
    """Run ``savigp train``; the model file's path and the seconds it took."""
    cmd = [sys.executable, "-m", "savigp", "train", train_csv, "--targets", "y", "--standardize-targets",
           "--kernel", kernel, "--seed", str(seed), "--threads", "1", "--out", out, *extra]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    Path(out).with_suffix(".stderr").write_text(done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"savigp train exited {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
    return out, seconds


def _nlpd(model_path: str, test_csv: str) -> float:
    done = subprocess.run([sys.executable, "-m", "savigp", "evaluate", model_path, test_csv, "--targets", "y", "--json"],
                          capture_output=True, text=True, check=True)
    return float(json.loads(done.stdout)["nlpd"])


def _period_years(model_path: str) -> float:
    """The periodic part's period in years (the model's units times the inputs' standard deviation
    when the run standardized them)."""
    from savigp.kernels import Periodic
    from savigp.model_files import load_model

    saved = load_model(model_path)[0]
    periods = [float(m.period().detach().reshape(-1)[0]) for m in saved.model.kernel.modules() if isinstance(m, Periodic)]
    inputs = (saved.config.get("standardize") or {}).get("inputs")
    return periods[0] * (float(inputs["std"][0]) if inputs else 1.0)


def _training(model_path: str) -> tuple:
    from savigp.model_files import load_model

    training = load_model(model_path)[0].config["training"]
    conv = training.get("convergence") or {}
    return training.get("iterations"), conv.get("converged")


def main(argv=None) -> int:
    from experiments._common import markdown_table, write_table
    from experiments.search_handover import _write, series

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--extra", default="", help="more arguments of both trainings, e.g. \"--iterations 500\"")
    p.add_argument("--out", default="results/learned_period")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    extra = shlex.split(args.extra)
    t, y = series("elnino")
    cut = int(0.8 * len(t))
    train_csv, test_csv = os.path.join(args.out, "elnino_train.csv"), os.path.join(args.out, "elnino_test.csv")
    _write(train_csv, t[:cut], y[:cut])
    _write(test_csv, t[cut:], y[cut:])
    rows = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        per, s_per = _train(train_csv, PERIODIC, seed, os.path.join(args.out, f"periodic_{seed}.pt"), extra)
        rbf, s_rbf = _train(train_csv, "rbf(t)", seed, os.path.join(args.out, f"rbf_{seed}.pt"), extra)
        period = _period_years(per)
        steps, converged = _training(per)
        row = {"seed": seed, "period": round(period, 5), "error_pct": round(100 * abs(period - 1.0), 3),
               "steps": steps, "converged": converged, "nlpd_periodic": round(_nlpd(per, test_csv), 3),
               "nlpd_rbf": round(_nlpd(rbf, test_csv), 3), "seconds": round(s_per + s_rbf, 1)}
        row["beats_rbf"] = row["nlpd_periodic"] < row["nlpd_rbf"]
        rows.append(row)
        print(row, file=sys.stderr, flush=True)
    head = ["seed", "period", "error_pct", "steps", "converged", "nlpd_periodic", "nlpd_rbf", "beats_rbf", "seconds"]
    write_table(rows, Path(args.out) / "learned_period", columns=head)
    print(markdown_table(rows, head), end="")
    kept = sum(r["error_pct"] <= 1.0 for r in rows)
    beats = sum(r["beats_rbf"] for r in rows)
    print(f"\nperiod within 1 %: {kept}/{len(rows)}; beats the RBF alone: {beats}/{len(rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
