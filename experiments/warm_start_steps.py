"""A warm start's first steps from a fitted optimum, without and with fit's learning-rate warm-up
(issue 57, item 2; :mod:`savigp.training.warmup`).

For each data set and seed, a source model is fitted to an optimum (1000 Adam steps at the library's
defaults, then 20 outer L-BFGS steps on fixed draws), a new model of the same configuration is
started from it by :func:`savigp.warm_start`, and :func:`savigp.fit` takes 100 steps from there
twice, with ``warmup=False`` (a fresh Adam at lr from its first step: the old behaviour) and with
the default (the first :data:`~savigp.training.warmup.WARMUP_STEPS` steps at rates rising
geometrically from lr / 100, 100 of them). The table gives the start's full-data ELBO and its Monte Carlo
standard error (:func:`savigp.training.convergence.full_data_elbo`, S = 100, as
:func:`savigp.training.until_converged.round_gain` reads it), and for each run the mean of the 50
per-step ELBO estimates (full batches: each is a full-data estimate at the parameters the step
started from), its distance from the start in standard errors (``z``; the done criterion of the
issue: z >= -3), the same of the next 50 steps (``z2``: after the warm-up's middle, at a tenth of
lr and up) and the estimate after the first step.

Data (offline): statsmodels ``elnino`` (monthly sea temperatures, time in years from the series'
middle, targets standardized, ``rbf + periodic(0, period=1) * rbf``: the sharp optimum of the
issue) and the shipped UCI split 1 of ``boston_housing`` (13 standardized inputs, an RBF with a
length-scale per column; ``../shared/data``), both Gaussian; ``wisconsin`` (split 1 of
``wisconsin_cancer``, logistic) on request. The estimator is ``reparam`` by default so that the
start has a Monte Carlo error (``--estimator auto`` takes the closed form on the Gaussian sets,
whose standard error is 0: z is then not defined and the drop is read in nats).

    python -m experiments.warm_start_steps                      # elnino and boston, seeds 0-2
    python -m experiments.warm_start_steps --sets elnino --seeds 0

Outputs in ``--out`` (default ``results/warm_start_steps``): ``warm_start_steps.md`` and ``.csv``.
"""
from __future__ import annotations

import copy
import sys
import time
import warnings
from pathlib import Path

import numpy as np

#: the steps the issue's criterion reads (the mean of the first 50); each warm start takes twice as many
STEPS = 50
#: the source's fit: Adam steps, then L-BFGS outer steps on fixed draws
ADAM_STEPS, LBFGS_STEPS = 1000, 20


def load(name: str) -> tuple:
    """``(X, Y, likelihood, kernel)`` of a data set, in the model's units."""
    import likelihoods

    from experiments.converged_defaults import _standardize, load as load_set

    if name == "elnino":
        from experiments.search_handover import series

        t, y = series("elnino")
        return (t - t.mean())[:, None], _standardize(y[:, None]), likelihoods.Gaussian(1.0), \
            "rbf + periodic(0, period=1) * rbf"
    if name == "wisconsin":
        from experiments._common import read_split, resolve_data_dir

        X, Y, _, _ = read_split(resolve_data_dir(None, "wisconsin_cancer"), 1)
        return X, Y, likelihoods.Logistic(), None
    X, Y, lik = load_set(name)
    return X, Y, lik, None


def run(name: str, seed: int, estimator: str) -> dict:
    import savigp
    from savigp.training.convergence import ConvergenceWarning, full_data_elbo

    X, Y, lik, kernel = load(name)

    def model():
        return savigp.SAVIGP(X, Y, copy.deepcopy(lik), kernel, seed=seed)

    t0 = time.perf_counter()
    source = model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        savigp.fit(source, iterations=ADAM_STEPS, estimator=estimator, seed=seed, progress=False, threads=1)
        savigp.fit(source, optimizer="lbfgs", iterations=LBFGS_STEPS, estimator=estimator, seed=seed, progress=False,
                   threads=1)
    row = {"data": name, "N": X.shape[0], "seed": seed}
    for label, warmup in (("off", False), ("on", None)):
        warm = savigp.warm_start(model(), source)
        start, se = full_data_elbo(warm, num_samples=100, estimator=estimator, seed=seed + 11)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # (50 steps: still rising, or not)
            h = savigp.fit(warm, iterations=2 * STEPS, estimator=estimator, seed=seed + 1, progress=False, threads=1,
                           warmup=warmup, final_elbo=False)
        mean = float(np.mean(h.elbo[:STEPS]))
        row.update(estimator=h.estimator, start=start, se=se)
        row[f"mean50_{label}"] = mean
        later = float(np.mean(h.elbo[STEPS:2 * STEPS]))
        row[f"z_{label}"] = (mean - start) / se if se > 0 else None
        row[f"z2_{label}"] = (later - start) / se if se > 0 else None
        row[f"later_{label}"] = later
        row[f"step1_{label}"] = h.elbo[1]
    row["seconds"] = time.perf_counter() - t0
    print(f"{name} seed {seed}: start {start:.2f} +- {se:.2f}; mean of {STEPS} steps {row['mean50_off']:.2f} without "
          f"the warm-up, {row['mean50_on']:.2f} with it ({row['seconds']:.0f} s)", file=sys.stderr)
    return row


def main(argv=None) -> int:
    from experiments._common import (add_cli_options, add_seeds_argument, markdown_table, out_dir, parse_ints,
                                     script_parser, write_table)

    p = script_parser(__doc__, "warm_start_steps")
    p.add_argument("--sets", default="elnino,boston", help="comma-separated: elnino, boston, wisconsin (default elnino,boston)")
    add_cli_options(p, "--estimator", defaults={"--estimator": "reparam"},
                    default_help={"--estimator": "reparam: the start has a Monte Carlo error"})
    add_seeds_argument(p, default="0,1,2")
    args = p.parse_args(argv)
    rows = [run(name.strip(), seed, args.estimator) for name in args.sets.split(",") if name.strip()
            for seed in parse_ints(p, args.seeds)]
    head = ["data", "N", "estimator", "seed", "start", "se", "mean50_off", "z_off", "z2_off", "step1_off", "mean50_on",
            "z_on", "z2_on", "step1_on", "seconds"]
    write_table(rows, out_dir(args.out, "warm_start_steps") / "warm_start_steps", columns=head)
    print(markdown_table(rows, head), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
