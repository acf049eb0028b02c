"""The HTML reports of docs/report.md, written with ``savigp train`` and ``savigp report`` on two real
series, and their screenshots taken by a headless Chromium.

* Mauna Loa CO2 (``statsmodels.datasets.co2``, weekly ppm; :mod:`experiments.co2`'s loading and
  split: training weeks before 1991, every ``--every``-th week), a Gaussian likelihood and the kernel
  ``rbf + periodic(period=1, learn=false) * rbf + rbf`` (a long trend, a yearly cycle whose amplitude
  and shape drift, short wiggles), targets standardized, trained by L-BFGS. The period is held at one
  year, as scikit-learn's Mauna Loa example holds it (``periodicity_bounds="fixed"``): learned, L-BFGS's
  first 5 steps moved it to 1.05 years (every 4th week, M = 100), and this run's 60 steps ended at
  0.34 years with the season left to the noise (noise sd 2.06 ppm, ELBO 255.0);
* yearly sunspot numbers (``statsmodels.datasets.sunspots``, rounded to counts; :mod:`experiments.sunspots`'s
  split: the last 50 years held out) with the user's negative binomial of :mod:`experiments.sunspots`
  (``--likelihood experiments.sunspots:neg_binomial --lik-param r=5:positive``; a torch function, so
  ``--lik-option differentiable=True`` for the reparameterization estimator), the kernel
  ``periodic(period=11) * rbf + rbf`` and a learned constant prior mean at the log of the mean count,
  trained by Adam;
* breast cancer diagnoses (scikit-learn's ``load_breast_cancer``, Wolberg et al.'s Wisconsin
  diagnostic data, 569 tumours; ``malignant`` = 1 for malignant) against two of its 30 features, the
  ``mean radius`` and ``mean texture`` of the cell nuclei (columns ``radius``, ``texture``), split at
  random (seed 0) into :data:`CANCER_TRAIN` training and the rest test rows; a logistic likelihood and
  the kernel ``rbf(radius) + rbf(texture)`` (an additive part on each column, Duvenaud et al. 2011's
  additive GP), inputs standardized, trained by Adam.

Each report gets the test years with ``--test``; a model file already in ``--out`` is reused unless
``--retrain``. Screenshots: ``chromium --headless --screenshot=... --window-size=1200,HEIGHT``
(skipped, said on stderr, where no ``chromium`` is installed).

    python -m experiments.report_screenshots --figures docs/figures     # 72 s on 1 core (with --retrain)
    python -m experiments.report_screenshots --quick                     # M = 20, few steps: seconds

Outputs in ``--out`` (default ``results/report_screenshots``): ``co2_train.csv``, ``co2_test.csv``,
``co2.pt``, ``co2_report.html`` and the same for ``sunspots_*`` and ``cancer_*``, ``report_screenshots.json`` (the
commands run and their settings), and the screenshots ``report_co2.png``, ``report_sunspots.png``, ``report_cancer.png``
(in ``--figures``, default ``--out``).
"""
from __future__ import annotations

import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from experiments import _common as common
from experiments import co2, sunspots

#: each data set's ``savigp train`` options (full run; --quick: fewer steps and inducing points)
TRAIN = {
    "co2": ["--targets", "ppm", "--kernel",
            "rbf(lengthscale=50) + periodic(period=1, lengthscale=1, learn=false) * rbf(lengthscale=50, variance=0.1)"
            " + rbf(lengthscale=1, variance=0.01)",
            "--noise-variance", "0.01", "--standardize-targets", "--optimizer", "lbfgs"],
    "sunspots": ["--targets", "count", "--likelihood", "experiments.sunspots:neg_binomial",
                 "--lik-param", "r=5:positive", "--lik-option", "differentiable=True", "--kernel",
                 "periodic(period=11, lengthscale=1) * rbf(lengthscale=50) + rbf(lengthscale=20)",
                 "--learn-prior-mean", "--optimizer", "adam", "--lr", "0.03"],
    "cancer": ["--targets", "malignant", "--likelihood", "logistic", "--kernel", "rbf(radius) + rbf(texture)",
               "--standardize-inputs", "--optimizer", "adam", "--lr", "0.05"],
}
#: (M, steps) per data set, full and --quick
SIZES = {"co2": ((150, 60), (20, 5)), "sunspots": ((60, 4000), (20, 20)), "cancer": ((40, 2000), (20, 20))}
#: breast cancer: training rows (of 569; the rest are the test rows)
CANCER_TRAIN = 380
#: the screenshot's window (CSS pixels)
WIDTH, HEIGHT = 1200, 3400


def _load_cancer():
    """Breast cancer's ``(X (569, 2): mean radius, mean texture; y (569,): 1 = malignant)``, split at
    random (seed 0) into ``(Xtr, Ytr, Xte, Yte)`` with :data:`CANCER_TRAIN` training rows."""
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    names = list(data.feature_names)
    X = data.data[:, [names.index("mean radius"), names.index("mean texture")]]
    y = (data.target == list(data.target_names).index("malignant")).astype(np.float64)
    order = np.random.default_rng(0).permutation(len(y))
    train, test = np.sort(order[:CANCER_TRAIN]), np.sort(order[CANCER_TRAIN:])
    return X[train], y[train], X[test], y[test]


def _write_data(out, name: str, every: int):
    """The training and test CSV files of ``name``; returns their paths and the training mean."""
    if name == "cancer":
        Xtr, Ytr, Xte, Yte = _load_cancer()
        header = ("radius", "texture", "malignant")
    elif name == "co2":
        t, y, _ = co2.load_co2()
        Xtr, Ytr, Xte, Yte = co2.split(t, y, every)
        header = ("year", "ppm")
    else:
        years, counts = sunspots.load_sunspots()
        Xtr, Ytr, Xte, Yte = sunspots.split(years, counts)
        header = ("year", "count")
    paths = []
    for part, X, Y in (("train", Xtr, Ytr), ("test", Xte, Yte)):
        path = out / f"{name}_{part}.csv"
        X = np.asarray(X, dtype=np.float64).reshape(len(np.ravel(Y)), -1)
        rows = [{**{h: float(x) for h, x in zip(header[:-1], xs)}, header[-1]: float(v)}
                for xs, v in zip(X, np.ravel(Y))]
        common.write_csv_atomic(path, rows, header)
        paths.append(path)
    return paths[0], paths[1], float(np.mean(Ytr))


def _run(argv: list) -> None:
    from savigp.cli import main

    print("[report] savigp " + " ".join(argv), file=sys.stderr, flush=True)
    code = main(argv)
    if code != 0:
        raise SystemExit(f"savigp {argv[0]} exited with status {code}")


def _screenshot(html, png) -> bool:
    """A headless Chromium's screenshot of ``html`` at :data:`WIDTH` x :data:`HEIGHT`; False without one."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("[report] no chromium installed: no screenshot", file=sys.stderr)
        return False
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={png}", f"--window-size={WIDTH},{HEIGHT}", html.resolve().as_uri()],
                   check=True, capture_output=True, timeout=120)
    return True


def one(out, name: str, args) -> dict:
    """Train (unless a model file is there) and report on ``name``; the commands and settings."""
    train, test, mean = _write_data(out, name, args.every)
    model, html = out / f"{name}.pt", out / f"{name}_report.html"
    png = (args.figures or out) / f"report_{name}.png"
    M, steps = SIZES[name][1 if args.quick else 0]
    options = TRAIN[name] + ["--num-inducing", str(M), "--iterations", str(steps), "--seed", str(args.seed), "--quiet"]
    if name == "sunspots":
        options += ["--prior-mean", repr(math.log(mean))]
    commands = [["train", str(train), *options, "--out", str(model)]]
    commands.append(["report", str(model), str(train), "--test", str(test), "--out", str(html), "--samples",
                     str(args.samples), "--seed", str(args.seed), "--quiet"]
                    + (["--trust-code"] if name == "sunspots" else []))
    if args.retrain or not model.exists():
        _run(commands[0])
    _run(commands[1])
    shot = _screenshot(html, png)
    return {"name": name, "M": M, "steps": steps, "commands": [" ".join(c) for c in commands],
            "screenshot": str(png) if shot else None}


def parse(argv=None):
    p = common.script_parser(__doc__, "report_screenshots", quick_help="M = 20, a few steps (seconds)")
    p.add_argument("--every", type=int, default=2, help="CO2: keep every k-th week (default 2)")
    common.add_cli_options(p, "--samples", command="report")  # the report's predictive draws per row
    p.add_argument("--retrain", action="store_true", help="train again even where the model file exists")
    p.add_argument("--only", choices=tuple(TRAIN), help="one data set only")
    p.add_argument("--figures", type=Path, help="where the screenshots go (default --out)")
    common.add_seed_argument(p)
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse(argv)
    out = common.out_dir(args.out, "report_screenshots")
    rows = [one(out, name, args) for name in TRAIN if args.only in (None, name)]
    common.write_json_atomic(out / "report_screenshots.json", {"runs": rows, "argv": list(argv or sys.argv[1:])})
    return {"runs": rows}


if __name__ == "__main__":
    main()
