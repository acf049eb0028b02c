"""Every mixture the command line offers, with its default handling of the hyper-parameters,
against the full Gaussian, on the paper's small-scale sets (Bonilla et al. 2019, §9.3).

    python -m experiments.cli_mixtures DATASET [--splits 1,2,3,4,5] [--sparsity 0.5,1]
        [--rows fg,fmog2,mog1,mog2,wmog1,wmog2] [--hypers default|joint] [--out results/cli_mixtures]

Each row is one ``savigp train`` command (run in this process through :func:`savigp.cli.main`) on
the shared split files as they are (header-less, the targets in the first column(s)), then
``savigp evaluate --json`` on the test file. Rows: fg = ``--posterior full`` (K = 1), fmog2 =
``--posterior full --components 2``, mog1 / mog2 = ``--posterior diag-u`` (the paper's diagonal
mixture over u) with K = 1 / 2, wmog1 / wmog2 = ``--posterior diag`` (diagonal in whitened
coordinates; ``diag-whitened`` before); nothing else is passed about the hyper-parameters, so the
factorized rows use the command's default, the two-stage fit (``--hypers joint``: the paper's
joint learning instead). SF = 1 is ``--dense``; SF < 1 is ``--num-inducing round(SF N)
--inducing-init subset --fixed-inducing`` (the paper's fixed subset of the training inputs).
Per dataset:

* boston: ``--standardize-targets --optimizer lbfgs --iterations 60`` (closed-form ELBO); SSE,
  NLPD and the coverage of the central 90% predictive interval (:func:`savigp.metrics.interval_coverage`);
* wisconsin: ``--likelihood logistic --optimizer adam --lr 0.05 --iterations 500 --samples 20``
  (the small-scale suite's settings); error rate and NLP.

Writes ``results.csv`` (one row per command, rewritten after each) and ``summary.md`` (mean over the
splits, fg's standard deviation, and for each row whether it is within fg's spread: |mean - fg's
mean| <= fg's standard deviation over the splits in both metrics, and coverage within 0.02 of fg's)
in ``--out/DATASET``, and prints the summary.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import tempfile
import time
from pathlib import Path

from savigp._choices import POSTERIORS
from experiments._common import (
    add_data_argument, add_out_argument, parse_ints, read_csv_matrix, read_csv_rows, resolve_data_dir, summarize,
    write_csv_atomic, write_text_atomic,
)

#: row name -> (--posterior, --components)
ROWS = {"fg": ("full", 1), "fmog2": ("full", 2), "mog1": ("diag-u", 1), "mog2": ("diag-u", 2),
        "wmog1": ("diag", 1), "wmog2": ("diag", 2)}
#: dataset -> (folder, train options, metrics (error, density[, coverage]))
DATASETS = {
    "boston": ("boston_housing", ["--standardize-targets", "--optimizer", "lbfgs", "--iterations", "60"],
               ("sse", "nlpd", "coverage90")),
    "wisconsin": ("wisconsin_cancer", ["--likelihood", "logistic", "--optimizer", "adam", "--lr", "0.05",
                                       "--iterations", "500", "--samples", "20"], ("error_rate", "nlp")),
}
#: the largest coverage difference from fg's that counts as "within"
COVERAGE_TOLERANCE = 0.02


def train_command(dataset: str, row: str, split: int, sf: float, n_train: int, data: Path, out: Path,
                  hypers: str, fg_file=None) -> list:
    """The ``savigp train`` arguments of one row (``hypers``: "default" passes no --hypers). With
    ``fg_file`` (the fg row's model file of the same split and SF) a factorized row's default
    two-stage fit is given its stage 1 as ``--warm-start fg_file --learn posterior``: the same
    model file as the default command, which fits that full Gaussian itself
    (``tests/savigp/cli/test_cli_two_stage.py``), without fitting it again."""
    folder, options, _ = DATASETS[dataset]
    posterior, K = ROWS[row]
    argv = ["train", str(data / folder / f"train_{split}.csv"), "--targets", "0", "--no-header",
            "--posterior", posterior, "--components", str(K), "--seed", str(split), "--quiet", "--out", str(out)]
    argv += ["--dense"] if sf >= 1.0 else ["--num-inducing", str(max(1, round(sf * n_train))),
                                           "--inducing-init", "subset", "--fixed-inducing"]
    factorized = bool(POSTERIORS[POSTERIORS.canonical(posterior)].diagonal)  # the family's declared capability
    if hypers != "default" and factorized:
        argv += ["--hypers", hypers]
    elif fg_file is not None and factorized:
        argv += ["--warm-start", str(fg_file), "--learn", "posterior"]
    return argv + options


def run(argv: list) -> str:
    """``savigp.cli.main(argv)``; its standard output (raises on a non-zero exit status)."""
    from savigp.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        status = main(argv)
    if status != 0:
        raise RuntimeError(f"savigp {' '.join(argv)}: exit status {status}")
    return buf.getvalue()


def summary(dataset: str, rows: list) -> str:
    """The Markdown summary: per SF and row, the means over splits; fg's standard deviation; within?"""
    metrics = DATASETS[dataset][2]
    out = [f"# {dataset}: savigp train's mixtures by default against fg (means over splits; fg: its sd)", "",
           "| SF | row | splits | " + " | ".join(metrics) + " | within fg's spread |",
           "| --- | --- | --- | " + " | ".join("---" for _ in metrics) + " | --- |"]
    groups = {(g["sf"], g["row"]): g for g in summarize(rows, ["sf", "row"], list(metrics))}
    for (sf, row), g in groups.items():
        fg = groups.get((sf, "fg"))
        cells, within = [], []
        for m in metrics:
            mean = g.get(f"{m}_mean")
            if row == "fg":
                cells.append(f"{mean:.3f} ({g.get(f'{m}_std', float('nan')):.3f})")
                continue
            cells.append(f"{mean:.3f}")
            if fg is not None:
                tol = COVERAGE_TOLERANCE if m.startswith("coverage") else fg[f"{m}_std"]
                within.append(abs(mean - fg[f"{m}_mean"]) <= tol + 1e-12)
        verdict = "" if row == "fg" or fg is None else ("yes" if all(within) else "no: " + ", ".join(
            m for m, ok in zip(metrics, within) if not ok))
        out.append(f"| {sf:g} | {row} | {g['n']} | " + " | ".join(cells) + f" | {verdict} |")
    return "\n".join(out) + "\n"


def run_row(args, data: Path, split: int, sf: float, n_train: int, row: str, fg_file, keep: Path) -> dict:
    """Train and evaluate one row; its results.csv row. ``fg_file``: the fg row's model file of this
    split and SF for a factorized row's stage 1 (or None); the fg row's model is kept as ``keep``."""
    import torch

    folder = DATASETS[args.dataset][0]
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model.pt"
        t0 = time.perf_counter()
        train = train_command(args.dataset, row, split, sf, n_train, data, model, args.hypers, fg_file or None)
        run(train)
        seconds = time.perf_counter() - t0
        metrics = json.loads(run(["evaluate", str(model), str(data / folder / f"test_{split}.csv"), "--targets", "0",
                                  "--no-header", "--json", "--seed", str(split), "--threads", "1"]))
        config = torch.load(model, weights_only=True)["config"]
        if row == "fg":
            keep.parent.mkdir(exist_ok=True)
            keep.write_bytes(model.read_bytes())
    training = config["training"]
    hypers = training.get("hypers") or ("two-stage (stage 1: fg row)" if "--warm-start" in train else "")
    print(f"  split {split} SF {sf:g} {row:6s} {hypers or '-':9s} " + " ".join(
        f"{k} {metrics[k]:.4f}" for k in DATASETS[args.dataset][2] if k in metrics) + f"  {seconds:.0f} s", flush=True)
    return {"split": split, "sf": sf, "row": row, "hypers": hypers, "seconds": round(seconds, 1),
            "elbo": config.get("elbo"), "elbo_stderr": training.get("elbo_stderr"),
            **{k: v for k, v in metrics.items() if isinstance(v, (int, float))},
            "command": "savigp " + " ".join(train[:1] + ["TRAIN.csv"] + train[2:])}


def main(argv=None) -> str:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dataset", choices=sorted(DATASETS))
    p.add_argument("--splits", default="1,2,3,4,5")
    p.add_argument("--sparsity", default="0.5,1")
    p.add_argument("--rows", default=",".join(ROWS))
    p.add_argument("--hypers", choices=("default", "joint", "two-stage"), default="default",
                   help="what the factorized rows pass (default: nothing, the command's default)")
    add_out_argument(p, "results/cli_mixtures")
    add_data_argument(p)
    p.add_argument("--resume", action="store_true", help="keep the rows of an existing results.csv")
    p.add_argument("--stage1", choices=("reuse", "refit"), default="reuse",
                   help="factorized rows by default: take stage 1 from the fg row's file (reuse, default: "
                        "the same model, see train_command) or let each command fit it again (refit)")
    args = p.parse_args(argv)
    data = resolve_data_dir(args.data_dir)
    out_dir = Path(args.out) / args.dataset
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path = out_dir / "results.csv"
    rows = read_csv_rows(csv_path) if args.resume and csv_path.is_file() else []
    done = {(int(r["split"]), float(r["sf"]), r["row"]) for r in rows}
    names = args.rows.split(",")
    reuse = args.stage1 == "reuse" and args.hypers == "default"
    if reuse and "fg" in names:
        names = ["fg"] + [n for n in names if n != "fg"]
    for split in parse_ints(p, args.splits, "--splits"):
        n_train = read_csv_matrix(data / DATASETS[args.dataset][0] / f"train_{split}.csv").shape[0]
        for sf in [float(s) for s in args.sparsity.split(",")]:
            fg_file = out_dir / "models" / f"fg_split{split}_sf{sf:g}.pt"
            for row in names:
                if (split, sf, row) not in done:
                    rows.append(run_row(args, data, split, sf, n_train, row,
                                        fg_file if reuse and fg_file.is_file() else None, fg_file))
                    write_csv_atomic(csv_path, rows)
    text = summary(args.dataset, rows)
    write_text_atomic(out_dir / "summary.md", text)
    print(text)
    return text


if __name__ == "__main__":
    main()
