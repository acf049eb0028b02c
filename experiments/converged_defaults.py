"""fit's defaults on real data: 500 fixed steps against the run to convergence (issue 57, item 1).

For each data set, a model with the library's defaults (the data's own likelihood, an RBF kernel with
a length-scale per column, M = min(N, 100) inducing inputs from k-means, full batches, Adam at
lr = 0.01, the estimator "auto") is fitted twice from the same start: ``savigp.fit(model,
iterations=500)`` (the old fixed default) and ``savigp.fit(model)`` (until the ELBO has stopped rising,
:mod:`savigp.training.until_converged`). The table gives, per data set and run: the steps, the
seconds, whether the run ended converged (for the fixed run: whether fit said the ELBO was still
rising), and the full-data ELBO (the estimator's, with its standard error).

Data (all read offline): statsmodels ``elnino`` (monthly sea temperatures, t in years standardized),
``co2`` (monthly means), ``sunspots`` (yearly counts, Poisson), ``heart`` (log survival days against
age, Gaussian: censoring ignored), scikit-learn ``breast_cancer`` (logistic, 30 standardized
features) and ``wine`` (softmax, 3 classes, 13 standardized features), and the shipped UCI split 1 of
``boston_housing`` (Gaussian, 13 inputs standardized; ``../shared/data``), split 5 of ``abalone``
(Gaussian, 10 inputs standardized) and ``mining`` (coal-mining disasters per bin, Poisson, the bin's
day standardized).

    python -m experiments.converged_defaults                  # every data set (minutes on one core)
    python -m experiments.converged_defaults --sets elnino    # one
    python -m experiments.converged_defaults --sets breast_cancer --further 4 2500   # and 4 x 2500 more steps

Outputs in ``--out`` (default ``results/converged_defaults``): ``converged_defaults.md`` and ``.csv``.
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from pathlib import Path
import warnings

import numpy as np


def _standardize(a: np.ndarray) -> np.ndarray:
    s = a.std(0)
    return (a - a.mean(0)) / np.where(s > 0, s, 1.0)


def load(name: str) -> tuple:
    """``(X (N, D), Y (N, P), likelihood)`` of a data set, in the model's units."""
    import likelihoods

    if name in ("elnino", "co2", "sunspots"):
        from experiments.search_handover import series

        t, y = series(name)
        if name == "sunspots":  # (series() gives square roots; the counts themselves here)
            y = np.round(y ** 2)
            return _standardize(t[:, None]), y[:, None], likelihoods.Poisson()
        return _standardize(t[:, None]), _standardize(y[:, None]), likelihoods.Gaussian(1.0)
    if name == "heart":
        import statsmodels.api as sm

        d = sm.datasets.heart.load_pandas().data
        return _standardize(d[["age"]].to_numpy(float)), _standardize(np.log(d[["survival"]].to_numpy(float))), \
            likelihoods.Gaussian(1.0)
    if name in ("breast_cancer", "wine"):
        from sklearn import datasets

        data = datasets.load_breast_cancer() if name == "breast_cancer" else datasets.load_wine()
        X = _standardize(data.data.astype(float))
        if name == "breast_cancer":
            return X, data.target.astype(float)[:, None], likelihoods.Logistic()
        return X, data.target.astype(float)[:, None], likelihoods.Softmax(3)
    if name in ("boston", "abalone"):
        from experiments._common import read_split, resolve_data_dir

        folder, split = ("boston_housing", 1) if name == "boston" else ("abalone", 5)
        X, Y, _, _ = read_split(resolve_data_dir(None, folder), split)
        return _standardize(X), _standardize(Y), likelihoods.Gaussian(1.0)
    if name == "mining":  # counts of coal-mining disasters per bin against the bin's midpoint (days)
        from experiments._common import read_csv_matrix, resolve_data_dir

        d = read_csv_matrix(Path(resolve_data_dir(None, "mining")) / "data.csv")
        return _standardize(d[:, 1:2]), d[:, :1], likelihoods.Poisson()
    raise ValueError(f"unknown data set {name!r}")


def further(model, rounds: int, steps: int, seed: int) -> list:
    """The full-data ELBO (2000 draws a point where it is a Monte Carlo estimate) of ``model`` as it
    stands and after each of ``rounds`` more fits of ``steps`` Adam steps (fit's defaults otherwise):
    how far short of what more steps reach the run to convergence stopped."""
    import savigp
    from savigp.training.convergence import full_data_elbo

    def score():
        return round(full_data_elbo(model, num_samples=2000, estimator=model.resolved_estimator("auto"), seed=123)[0], 2)

    out = [score()]
    for k in range(rounds):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            savigp.fit(model, iterations=steps, progress=False, seed=seed + 10 + k, threads=1, final_elbo=False)
        out.append(score())
    return out


def run(name: str, seed: int = 0, more: tuple = (0, 0)) -> list:
    import savigp
    from savigp.training.convergence import ConvergenceWarning

    X, Y, lik = load(name)
    base = savigp.SAVIGP(X, Y, lik, seed=seed)
    rows = []
    for label, options in (("fixed 500", {"iterations": 500}), ("to convergence", {})):
        model = copy.deepcopy(base)
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConvergenceWarning)
            h = savigp.fit(model, progress=False, seed=seed, threads=1, **options)
        seconds = time.perf_counter() - t0
        rising = any(issubclass(w.category, ConvergenceWarning) for w in caught)
        conv = h.convergence
        rows.append({"data": name, "N": X.shape[0], "D": X.shape[1], "run": label, "steps": len(h.elbo) if conv is None
                     else conv.steps, "seconds": seconds, "ended": ("still rising" if rising else "not rising")
                     if conv is None else ("converged" if conv.converged else f"not converged ({conv.ended})"),
                     "polished": None if conv is None else conv.polished, "elbo": h.final_elbo,
                     "elbo_se": h.final_elbo_stderr, "estimator": h.estimator})
        if more[0] and label == "to convergence":
            rows[-1]["further"] = further(model, more[0], more[1], seed)
        print(f"{name} {label}: {rows[-1]['steps']} steps, {seconds:.1f} s, {rows[-1]['ended']}, ELBO {h.final_elbo:.2f}",
              file=sys.stderr)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sets", default="elnino,co2,sunspots,heart,breast_cancer,wine,boston,abalone,mining")
    from experiments._common import add_seeds_argument, parse_ints

    add_seeds_argument(p)
    p.add_argument("--out", default="results/converged_defaults")
    p.add_argument("--further", type=int, nargs=2, default=(0, 0), metavar=("ROUNDS", "STEPS"),
                   help="after the run to convergence, ROUNDS more fits of STEPS Adam steps each; the full-data ELBO "
                        "(2000 draws a point) before and after each, in the column 'further'")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    rows = [r for seed in parse_ints(p, args.seeds) for name in args.sets.split(",") if name.strip()
            for r in run(name.strip(), seed, tuple(args.further))]
    head = ["data", "N", "D", "run", "steps", "seconds", "ended", "polished", "elbo", "elbo_se", "estimator"]
    if args.further[0]:
        head.append("further")
    from experiments._common import markdown_table, write_table

    write_table(rows, Path(args.out) / "converged_defaults", columns=head)
    print(markdown_table(rows, head), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
