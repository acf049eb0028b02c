"""The model ``savigp train --kernel search`` saves, against the search's own best (issue 57).

For each real series, the command line is run as a user runs it (``savigp train DATA --kernel search
--search-budget SECONDS``, targets standardized, inputs in their own units); the search's table is
read back from the model file (``config["training"]["kernel_search"]``), and the saved model's
full-data ELBO (closed form, Gaussian) is compared with the search's best candidate's, then
``savigp evaluate`` scores the held-out tail. Before the fix the command kept only the kernel's
values and retrained the rest: on elnino the search's best was ELBO -439 and the saved model -939.5.

Series (statsmodels' data sets, read offline; the last fifth of each held out):

* ``elnino``: monthly sea-surface temperatures 1950-2010 (732 months);
* ``co2``: Mauna Loa CO2, monthly means of the weekly series 1958-2001 (526 months);
* ``sunspots``: yearly mean sunspot numbers 1700-2008 (309 years), Gaussian on their square roots.

    python -m experiments.search_handover --budget 300        # about 3 x 6 minutes on one core
    python -m experiments.search_handover --quick             # 30 s budgets, 2 terms: a smoke run

Outputs in ``--out`` (default ``results/search_handover``): ``search_handover.md`` / ``.csv`` (one row
per series) and each run's model file and stderr.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def series(name: str) -> tuple:
    """``(t (n,), y (n,))`` of a statsmodels data set."""
    import statsmodels.api as sm

    if name == "elnino":
        d = sm.datasets.elnino.load_pandas().data
        months = d.columns[1:]
        t = np.array([year + (i + 0.5) / 12 for year in d["YEAR"] for i in range(len(months))])
        return t, d[months].to_numpy(dtype=float).reshape(-1)
    if name == "co2":
        d = sm.datasets.co2.load_pandas().data["co2"].resample("MS").mean().dropna()
        t = np.array([ts.year + (ts.month - 0.5) / 12 for ts in d.index])
        return t, d.to_numpy(dtype=float)
    if name == "sunspots":
        d = sm.datasets.sunspots.load_pandas().data
        return d["YEAR"].to_numpy(dtype=float), np.sqrt(d["SUNACTIVITY"].to_numpy(dtype=float))
    raise ValueError(f"unknown series {name!r}")


def _write(path: str, t: np.ndarray, y: np.ndarray) -> None:
    np.savetxt(path, np.column_stack([t, y]), delimiter=",", header="t,y", comments="", fmt="%.8g")


def run_one(name: str, out: str, budget: float, max_terms: int, iterations: int) -> dict:
    """Run the command line on one series; the search's best and the saved model's ELBO and test scores."""
    from savigp.model_files import load_model
    from savigp.training.convergence import full_data_elbo

    t, y = series(name)
    cut = int(0.8 * len(t))
    train, test = os.path.join(out, f"{name}_train.csv"), os.path.join(out, f"{name}_test.csv")
    _write(train, t[:cut], y[:cut])
    _write(test, t[cut:], y[cut:])
    model_path = os.path.join(out, f"{name}.pt")
    cmd = [sys.executable, "-m", "savigp", "train", train, "--targets", "y", "--standardize-targets", "--kernel", "search",
           "--search-budget", str(budget), "--search-max-terms", str(max_terms), "--search-iterations", str(iterations),
           "--threads", "1", "--out", model_path]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    with open(os.path.join(out, f"{name}.stderr"), "w") as f:
        f.write(done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"{name}: savigp train exited {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
    saved = load_model(model_path)[0]
    record = saved.config["training"]["kernel_search"]
    ranked = [r for r in record["table"] if not r.get("failed") and r["elbo"] is not None]
    best = max(ranked, key=lambda r: r["elbo"])
    chosen = [r for r in record["table"] if r["chosen"]][-1]
    st = saved.config["standardize"]["targets"]
    Ym = (y[:cut, None] - np.asarray(st["mean"])) / np.asarray(st["std"])
    model = load_model(model_path, X=t[:cut, None], Y=Ym)[0].model
    elbo, _ = full_data_elbo(model, estimator="closed-form")
    evaluated = subprocess.run([sys.executable, "-m", "savigp", "evaluate", model_path, test, "--targets", "y", "--json"],
                               capture_output=True, text=True, check=True)
    import json

    scores = json.loads(evaluated.stdout)
    return {"series": name, "rows": len(t), "train": cut, "chosen": record["expression"],
            "search_best_elbo": best["elbo"], "search_best": best["expression"], "chosen_elbo": chosen["elbo"],
            "saved_elbo": elbo, "test_nlpd": scores.get("nlpd"), "test_mse": scores.get("mse"),
            "seconds": seconds, "complete": record["complete"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--series", default="elnino,co2,sunspots")
    p.add_argument("--budget", type=float, default=300.0)
    p.add_argument("--max-terms", type=int, default=3)
    p.add_argument("--search-iterations", type=int, default=300, help="savigp train's --search-iterations")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default="results/search_handover")
    args = p.parse_args(argv)
    if args.quick:
        args.budget, args.max_terms, args.search_iterations = 30.0, 2, 100
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for name in [s.strip() for s in args.series.split(",") if s.strip()]:
        row = run_one(name, args.out, args.budget, args.max_terms, args.search_iterations)
        rows.append(row)
        print(f"{name}: chosen {row['chosen']}, search's best ELBO {row['search_best_elbo']:.2f} "
              f"({row['search_best']}), saved model {row['saved_elbo']:.2f}, test NLPD {row['test_nlpd']}, "
              f"{row['seconds']:.0f} s", file=sys.stderr)
    head = ["series", "rows", "chosen", "search_best_elbo", "chosen_elbo", "saved_elbo", "test_nlpd", "test_mse",
            "seconds", "complete"]
    from experiments._common import markdown_table, write_table

    write_table(rows, Path(args.out) / "search_handover", columns=head)
    print(markdown_table(rows, head), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
