"""Reading a large numeric CSV file, and the start-up of ``savigp predict`` / ``evaluate``.

Reading: a file of ``--rows`` rows and ``--columns`` columns (a header, standard-normal numbers at
full precision: the shortest repr that reads back exactly, as ``savigp predict``'s output and
pandas' ``to_csv`` write them) is written once, then read by savigp's reader
(:func:`savigp.io.csv_data.read_csv`), ``numpy.loadtxt`` (numpy's compiled reader) and, when
installed, ``pandas.read_csv`` (not a dependency of savigp), each in its own process, one after the
other, ``--repeats`` rounds. Each row of the table: the median seconds (and range), the median
over rounds of the time divided by loadtxt's in the same round, the same two for the CPU time of
the read (on a busy machine the steadier measure), and the peak resident memory the
read added (``VmHWM`` of /proc/self/status after the read minus before it, the imports done:
Linux only) against the table's
bytes (float64). ``same`` says whether the values are bit for bit loadtxt's. The file is deleted at
the end.

Start-up (``--startup``): a small model (one input, M = 10) is trained, then ``python -c "import
torch"``, ``savigp predict`` and ``savigp evaluate`` on a 1000-row file run ``--repeats`` times,
interleaved; each row: the median wall and CPU seconds (user + system) and their ranges.

``--checkout DIR`` adds the same runs with the ``savigp`` package of another checkout (e.g. the
version before a change: ``git archive HEAD~1 savigp | tar -x -C DIR``), through ``PYTHONPATH``.

    python -m experiments.csv_read --rows 1000000 --repeats 5
    python -m experiments.csv_read --rows 10000000 --repeats 2
    python -m experiments.csv_read --rows 1000000 --block-sizes 18 20 22 24
    python -m experiments.csv_read --startup --repeats 7
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import numpy as np

from experiments._common import REPO_ROOT, add_out_argument, markdown_table, print_table, write_csv_atomic, write_text_atomic
_CHILD = r"""
import hashlib, json, sys, time
import numpy as np
reader, path, block = sys.argv[1], sys.argv[2], int(sys.argv[3])
def peak_kib():  # this process's peak resident memory (ru_maxrss would start from the parent's at the fork)
    with open("/proc/self/status") as fh:
        return int(next(l for l in fh if l.startswith("VmHWM:")).split()[1])
if reader == "pandas":
    import pandas as pd
    read = lambda: pd.read_csv(path).to_numpy()
elif reader == "loadtxt":
    read = lambda: np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
else:
    import savigp.io.csv_data as cd
    if block:
        cd.READ_CHUNK = block
    read = lambda: cd.read_csv(path).values
before = peak_kib()
t, c = time.perf_counter(), time.process_time()
a = read()
seconds, cpu = time.perf_counter() - t, time.process_time() - c
after = peak_kib()
digest = hashlib.sha256(np.ascontiguousarray(a, dtype=np.float64).tobytes()).hexdigest()
print(json.dumps({"seconds": seconds, "cpu": cpu, "added_kib": after - before, "nbytes": a.nbytes, "rows": a.shape[0],
                  "digest": digest}))
"""


def write_table(path: Path, rows: int, columns: int, unique: int = 1_000_000, seed: int = 0) -> None:
    """``rows`` rows of ``columns`` standard-normal numbers (shortest repr) with a header ``x0, ..., y``;
    the first ``unique`` rows are drawn afresh, the rest repeat them (the parse costs the same per byte)."""
    rng = np.random.default_rng(seed)
    header = ",".join([f"x{j}" for j in range(columns - 1)] + ["y"]) + "\n"
    parts, made = [], 0
    while made < min(rows, unique):
        n = min(100_000, min(rows, unique) - made)
        parts.append("".join(",".join(map(repr, r)) + "\n" for r in rng.standard_normal((n, columns)).tolist()).encode())
        made += n
    with open(path, "wb") as fh:
        fh.write(header.encode())
        left = rows
        while left > 0:
            for part in parts:
                if left <= 0:
                    break
                k = part.count(b"\n")
                if k > left:  # the first `left` lines of it
                    end = -1
                    for _ in range(left):
                        end = part.find(b"\n", end + 1)
                    part, k = part[:end + 1], left
                fh.write(part)
                left -= k


def _env(pythonpath: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}  # the commands' own rule decides
    env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    return env


def read_once(reader: str, path: Path, pythonpath: str, block: int = 0) -> dict:
    """One read in a fresh process: ``{"seconds", "added_kib", "nbytes", "rows", "digest"}``."""
    out = subprocess.run([sys.executable, "-c", _CHILD, reader, str(path), str(block)], env=_env(pythonpath),
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{reader} failed on {path}: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _have_pandas() -> bool:
    try:
        import pandas  # noqa: F401
    except ImportError:
        return False
    return True


def reading(args) -> list:
    """The reading table: one row per (rows, reader)."""
    readers = [("loadtxt", "loadtxt", str(REPO_ROOT), 0), ("savigp", "savigp", str(REPO_ROOT), 0)]
    readers += [(f"savigp, blocks of 2^{b} B", "savigp", str(REPO_ROOT), 2 ** b) for b in args.block_sizes]
    if args.checkout:
        readers.append((f"savigp ({args.checkout})", "savigp", str(Path(args.checkout).resolve()), 0))
    if _have_pandas() and not args.no_pandas:
        readers.append(("pandas", "pandas", str(REPO_ROOT), 0))
    table = []
    for rows in args.rows:
        with tempfile.TemporaryDirectory(prefix="savigp-csv-", dir=args.folder) as folder:
            path = Path(folder) / f"table_{rows}x{args.columns}.csv"
            t0 = time.perf_counter()
            write_table(path, rows, args.columns)
            size = path.stat().st_size
            print(f"{rows} rows x {args.columns} columns: {size / 2 ** 20:.0f} MiB written in "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
            runs: dict = {name: [] for name, *_ in readers}
            for r in range(args.repeats):
                for name, reader, pythonpath, block in readers:
                    runs[name].append(read_once(reader, path, pythonpath, block))
                    print(f"  round {r + 1} {name}: {runs[name][-1]['seconds']:.2f} s", flush=True)
        base = runs["loadtxt"]
        for name, *_ in readers:
            rs = runs[name]
            secs = [x["seconds"] for x in rs]
            nbytes = rs[0]["nbytes"]
            added = max(x["added_kib"] for x in rs) * 1024
            table.append({
                "rows": rows, "columns": args.columns, "file_mib": round(size / 2 ** 20, 1), "reader": name,
                "median_s": statistics.median(secs), "range_s": f"{min(secs):.2f}-{max(secs):.2f}",
                "x_loadtxt": statistics.median(x["seconds"] / b["seconds"] for x, b in zip(rs, base)),
                "cpu_s": statistics.median(x["cpu"] for x in rs),
                "cpu_x_loadtxt": statistics.median(x["cpu"] / b["cpu"] for x, b in zip(rs, base)),
                "added_mib": added / 2 ** 20, "x_table": added / nbytes,
                "same": "yes" if all(x["digest"] == base[0]["digest"] for x in rs) else "no",
            })
    return table


def _timed(cmd: list, env: dict) -> tuple:
    """(wall seconds, CPU seconds of the child) of one run of ``cmd``, which must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def startup(args) -> list:
    """The start-up table: one row per command (and per checkout)."""
    rng = np.random.default_rng(0)
    trees = [("", str(REPO_ROOT))] + ([(f" ({args.checkout})", str(Path(args.checkout).resolve()))]
                                      if args.checkout else [])
    with tempfile.TemporaryDirectory(prefix="savigp-start-", dir=args.folder) as folder:
        train, test, model = (os.path.join(folder, n) for n in ("train.csv", "test.csv", "m.pt"))
        for path, n in ((train, 300), (test, args.startup_rows)):
            x = rng.uniform(-3, 3, n)
            with open(path, "w") as fh:
                fh.write("x,y\n" + "".join(f"{a!r},{b!r}\n" for a, b in zip(x.tolist(), (np.sin(x) + 0.1 * rng.standard_normal(n)).tolist())))
        cli = [sys.executable, "-m", "savigp.cli"]
        subprocess.run(cli + ["train", train, "--targets", "y", "--num-inducing", "10", "--iterations", "50",
                              "--out", model, "--quiet", "--threads", "1"], env=_env(trees[-1][1]),
                       check=True)  # by --checkout when given: an older model file format, which both read
        commands = [("python -c 'import torch'", [sys.executable, "-c", "import torch"], str(REPO_ROOT))]
        for suffix, tree in trees:
            commands += [(f"savigp predict{suffix}", cli + ["predict", model, test, "--out", os.path.join(folder, "p.csv"),
                                                            "--quiet"], tree),
                         (f"savigp evaluate{suffix}", cli + ["evaluate", model, test, "--targets", "y"], tree)]
        runs: dict = {name: [] for name, *_ in commands}
        for _ in range(args.repeats):
            for name, cmd, tree in commands:
                runs[name].append(_timed(cmd, _env(tree)))
    table = []
    for name, rs in runs.items():
        wall, cpu = [w for w, _ in rs], [c for _, c in rs]
        table.append({"command": name, "rows": args.startup_rows, "wall_s": statistics.median(wall),
                      "wall_range": f"{min(wall):.2f}-{max(wall):.2f}", "cpu_s": statistics.median(cpu),
                      "cpu_range": f"{min(cpu):.2f}-{max(cpu):.2f}", "runs": len(rs)})
    return table


def main(argv: Optional[list] = None) -> list:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000], help="rows of each file (default 1000000)")
    ap.add_argument("--columns", type=int, default=9)
    ap.add_argument("--repeats", type=int, default=3, help="rounds (default 3)")
    ap.add_argument("--block-sizes", type=int, nargs="*", default=[], metavar="LOG2",
                    help="also savigp with READ_CHUNK = 2^LOG2 bytes")
    ap.add_argument("--no-pandas", action="store_true", help="leave pandas out even when it is installed")
    ap.add_argument("--checkout", help="also the savigp package found in this folder (PYTHONPATH)")
    ap.add_argument("--folder", default=None, help="where the files are written (default: the system's temporary folder)")
    ap.add_argument("--startup", action="store_true", help="time the start-up of predict and evaluate instead")
    ap.add_argument("--startup-rows", type=int, default=1000)
    add_out_argument(ap, None, "folder for csv_read.csv and csv_read.md (default: print only)")
    args = ap.parse_args(argv)
    load = os.getloadavg()[0]
    table = startup(args) if args.startup else reading(args)
    columns = list(table[0])
    print(f"\nload average before: {load:.1f}, after: {os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs")
    print_table(table, columns)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        write_csv_atomic(out / "csv_read.csv", table, columns)
        write_text_atomic(out / "csv_read.md", markdown_table(table, columns))
    return table


if __name__ == "__main__":
    main()
