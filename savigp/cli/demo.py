"""``savigp demo``: train and evaluate two small models on generated data, through the same
CSV and model-file path as ``train`` and ``evaluate``."""
from __future__ import annotations

import os
import tempfile
import time

import numpy as np

from ..io.csv_data import write_csv
from .errors import EXIT_OK, CLIError
from .parser import build_parser
from .plan import DemoPlan
from .predict import cmd_evaluate
from .train import cmd_train


#: every file the demo keeps in its folder (its CSVs and its models)
FILES = ("regression_train.csv", "regression_test.csv", "regression.pt",
         "classification_train.csv", "classification_test.csv", "classification.pt")
#: and every file it writes there, checked before it writes any: also what ``train --out M.pt`` writes
#: beside each model while it runs and then removes (its checkpoint M.pt.ckpt, its lock M.pt.lock)
WRITTEN = FILES + tuple(name + extra for name in FILES if name.endswith(".pt") for extra in (".ckpt", ".lock"))


def cmd_demo(args) -> int:
    """``savigp demo``: train and evaluate two small models on generated data, via CSV files.
    ``args``: the parsed command line, read once into a :class:`~savigp.cli.plan.DemoPlan`.

    Raises:
        CLIError: ``--dir`` is not a folder, or already holds a file (or link) named as one of
            :data:`WRITTEN` -- the demo never replaces a file it did not write in this run.
    """
    plan = DemoPlan.from_args(args)
    if plan.dir:
        if os.path.lexists(plan.dir) and not os.path.isdir(plan.dir):
            raise CLIError(f"--dir {plan.dir}: is not a folder; give a new or empty folder for the demo's files")
        taken = [name for name in WRITTEN if os.path.lexists(os.path.join(plan.dir, name))]
        if taken:
            raise CLIError(f"--dir {plan.dir}: already holds {', '.join(taken)}, which the demo would overwrite; "
                           "remove them or give a new or empty folder")
        os.makedirs(plan.dir, exist_ok=True)
        return _demo(plan, plan.dir)
    with tempfile.TemporaryDirectory(prefix="savigp-demo-") as folder:
        return _demo(plan, folder)


def _demo(plan: DemoPlan, folder: str) -> int:
    rng = np.random.default_rng(plan.seed)
    quiet = ["--quiet"] if plan.quiet else []

    def write(name, header, values):
        write_csv(os.path.join(folder, name), header, values)
        return name

    def run(title, train_csv, test_csv, model, train_opts, targets):
        print(f"== {title}", flush=True)
        cmd = ["train", train_csv, "--targets", targets, "--out", model] + train_opts
        ev = ["evaluate", model, test_csv, "--targets", targets]
        print("   savigp " + " ".join(cmd) + "\n   savigp " + " ".join(ev), flush=True)
        here = [os.path.join(folder, a) if a.endswith((".csv", ".pt")) else a for a in cmd + quiet]
        code = cmd_train(build_parser().parse_args(here))
        if code != EXIT_OK:
            return code
        return cmd_evaluate(build_parser().parse_args([os.path.join(folder, a) if a.endswith((".csv", ".pt")) else a
                                                       for a in ev]))

    t0 = time.perf_counter()
    # 1-D regression, Gaussian likelihood: its ELBO is in closed form, a smooth deterministic function
    # of all 200 points, so full-batch L-BFGS (Bonilla et al. 2019, §9.2) takes it to its optimum: 12
    # steps end within 0.011 nats of 60 (12.398 against 12.409), where 250 Adam steps at lr 0.05 in
    # the same time ended 1.08 nats below, still rising (savigp demo before)
    x = rng.uniform(-3, 3, 300)
    y = np.sin(2 * x) + 0.3 * x + 0.2 * rng.standard_normal(300)
    data = np.stack([x, y], 1)
    code = run("1-D regression, Gaussian likelihood (200 training / 100 test points)",
               write("regression_train.csv", ["x", "y"], data[:200]),
               write("regression_test.csv", ["x", "y"], data[200:]), "regression.pt",
               ["--likelihood", "gaussian", "--num-inducing", "15", "--optimizer", "lbfgs", "--iterations", "12"], "y")
    if code != EXIT_OK:
        return code
    # 2-D binary classification, logistic likelihood: Monte Carlo gradients (20 draws a point) with
    # Adam. Labels of P(y = 1) = sigmoid(2 g(x)): a latent function of finite scale, which 250 steps
    # at lr 0.1 reach (0.6 nats below 1500 steps at lr 0.05, data seeds 0 and 1); with
    # sigmoid(4 g(x)) the optimum's kernel variance grows without bound and the ELBO was still rising
    X = rng.standard_normal((300, 2))
    p = 1 / (1 + np.exp(-2 * (np.sin(2 * X[:, 0]) + X[:, 1])))
    lab = (rng.uniform(size=300) < p).astype(float)
    data = np.column_stack([X, lab])
    code = run("2-D binary classification, logistic likelihood (200 training / 100 test points)",
               write("classification_train.csv", ["x1", "x2", "label"], data[:200]),
               write("classification_test.csv", ["x1", "x2", "label"], data[200:]), "classification.pt",
               ["--likelihood", "logistic", "--num-inducing", "15", "--iterations", "250", "--lr", "0.1",
                "--samples", "20"], "label")
    if code != EXIT_OK:
        return code
    kept = f"; files in {folder}" if plan.dir else ""
    print(f"demo finished in {time.perf_counter() - t0:.1f} s{kept}")
    return EXIT_OK
