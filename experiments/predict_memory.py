"""Peak memory of ``savigp predict`` and ``savigp evaluate`` on a large CSV file (default 1M rows).

A small Gaussian-regression model (D = 2, M = 20) is trained on 500 rows and saved; a test CSV
of ``--rows`` rows is written; then each command runs in its own process and its peak resident
memory (``ru_maxrss`` of the child) and wall time are printed. Monte Carlo arrays are chunked to
``savigp.model.PREDICT_MEMORY_BUDGET`` (256 MiB), so the peak is the CSV table and the outputs,
not S x rows samples.

    python -m experiments.predict_memory                 # 1M rows, default samples
    python -m experiments.predict_memory --rows 200000 --samples 100
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

from experiments._common import REPO_ROOT as REPO, add_cli_options, add_threads_argument


def run_child(args: list, env: dict) -> tuple:
    """(exit status, peak RSS of this child in MiB, seconds)."""
    cmd = [sys.executable, "-c", "import resource, subprocess, sys; "
           "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL); "
           "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)", *args]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout.split()
    return int(out[0]), int(out[1]) / 1024.0, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    add_cli_options(ap, "--samples", command="predict", defaults={"--samples": None},
                    default_help={"--samples": "each command's own, for predict and for evaluate"})
    add_threads_argument(ap, 1)
    a = ap.parse_args()

    import numpy as np

    from savigp.io.csv_data import write_csv

    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "OMP_NUM_THREADS": str(a.threads)}
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="savigp-mem-") as folder:
        train, test, model = (os.path.join(folder, n) for n in ("train.csv", "test.csv", "m.pt"))
        X = rng.uniform(-3, 3, (500, 2))
        write_csv(train, ["x1", "x2", "y"], np.column_stack([X, np.sin(X[:, 0]) + 0.1 * rng.standard_normal(500)]))
        cli = [sys.executable, "-m", "savigp.cli"]
        subprocess.run(cli + ["train", train, "--targets", "y", "--num-inducing", "20", "--iterations", "50",
                              "--out", model, "--quiet", "--threads", str(a.threads)], env=env, check=True)
        Xt = rng.uniform(-3, 3, (a.rows, 2))
        write_csv(test, ["x1", "x2", "y"], np.column_stack([Xt, np.sin(Xt[:, 0])]))
        size = os.path.getsize(test) / 2 ** 20
        samples = ["--samples", str(a.samples)] if a.samples else []
        print(f"{a.rows} rows ({size:.0f} MiB CSV), {a.threads} thread(s)")
        baseline = run_child([sys.executable, "-c", "import savigp.cli, torch"], env)
        print(f"  python + torch import        peak {baseline[1]:7.0f} MiB")
        for name, args in (("predict", ["predict", model, test, "--out", os.path.join(folder, "p.csv"), "--quiet"]),
                           ("evaluate", ["evaluate", model, test, "--json"])):
            code, peak, secs = run_child(cli + args + samples + ["--threads", str(a.threads)], env)
            print(f"  savigp {name:<22} peak {peak:7.0f} MiB  {secs:6.1f} s  exit {code}")


if __name__ == "__main__":
    main()
