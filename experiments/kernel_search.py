"""Does :func:`savigp.search_kernels` recover a known kernel structure? (issue 42, item 7;
docs/experiments.md, "Kernel structure search").

For each seed, latent functions are drawn from a GP with a known composite kernel (default
``rbf + periodic``: a smooth trend plus a season, l = 2, period 1.3, periodic length-scale 0.8) at N
inputs uniform on [0, 10], and targets from a likelihood:

* ``gaussian``: y = f + N(0, 0.1^2);
* ``poisson``: y ~ Poisson(exp(f + 1)) (a count likelihood whose ELBO has no closed-form marginal
  likelihood to compare against).

The search (base kernels rbf, periodic, linear; at most ``--max-terms`` of them) runs on each, and a
seed counts as *recovered* when the chosen structure equals the generating one up to the order of
sums and products. Printed: per likelihood the recovered count, the median search time and the
structures chosen; written to ``--out``: ``kernel_search.json`` and ``kernel_search.md``.

    OMP_NUM_THREADS=1 python -m experiments.kernel_search --seeds 0,1,2,3,4,5,6,7,8,9
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from experiments._common import add_cli_options, add_out_argument, add_seeds_argument, markdown_table, parse_ints, print_table, write_json_atomic, \
    write_text_atomic
import savigp
from likelihoods import Gaussian, Poisson
from savigp.kernels import build_kernel, parse_kernel
from savigp.selection.kernel_proposals import canonical_key, terms_of

TRUTH = "rbf + periodic"
TRUTH_VALUES = {"sum": [{"kernel": "rbf", "lengthscale": 2.0, "variance": 1.0},
                        {"kernel": "periodic", "period": 1.3, "lengthscale": 0.8, "variance": 1.0}]}


def draw(likelihood: str, seed: int, n: int):
    """Inputs ``(n, 1)`` and targets ``(n, 1)`` from the generating kernel and ``likelihood``."""
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(0, 10, (n, 1)), 0)
    k = build_kernel(TRUTH_VALUES, 1, 1)
    with torch.no_grad():
        K = k(torch.as_tensor(X), torch.as_tensor(X))[0] + 1e-8 * torch.eye(n, dtype=torch.float64)
        f = (torch.linalg.cholesky(K) @ torch.as_tensor(rng.normal(size=(n, 1)))).numpy()
    if likelihood == "gaussian":
        return X, f + 0.1 * rng.normal(size=(n, 1)), Gaussian()
    return X, rng.poisson(np.exp(f + 1.0)).astype(np.float64), Poisson()


def structure(spec: dict) -> tuple:
    return canonical_key(terms_of(spec))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    add_seeds_argument(parser, default="0,1,2,3,4,5,6,7,8,9")
    add_out_argument(parser, default="results/kernel_search")
    parser.add_argument("--likelihoods", default="gaussian,poisson", help="comma-separated: gaussian, poisson")
    parser.add_argument("--n", type=int, default=150, help="training inputs per seed (default 150)")
    add_cli_options(parser, "--num-inducing", "--iterations", defaults={"--num-inducing": 50, "--iterations": 300},
                    default_help={"--num-inducing": "50, every candidate's", "--iterations": "300 per candidate"})
    parser.add_argument("--max-terms", type=int, default=3, help="the most base kernels in an expression (default 3)")
    parser.add_argument("--time-budget", type=float, default=None, help="seconds per search (default none)")
    args = parser.parse_args(argv)
    seeds = parse_ints(parser, args.seeds)
    truth = structure(parse_kernel(TRUTH, input_dim=1))
    rows, records = [], []
    for lik_name in args.likelihoods.split(","):
        found, times = [], []
        for seed in seeds:
            X, Y, lik = draw(lik_name, seed, args.n)
            result = savigp.search_kernels(X, Y, lik, num_inducing=args.num_inducing, iterations=args.iterations,
                                           max_terms=args.max_terms, time_budget=args.time_budget, seed=seed,
                                           progress=False)
            ok = structure(result.spec) == truth
            found.append(ok)
            times.append(result.seconds)
            records.append({"likelihood": lik_name, "seed": seed, "chosen": result.expression, "recovered": ok,
                            "seconds": result.seconds, "complete": result.complete, "table": result.table})
            print(f"{lik_name} seed {seed}: {result.expression} ({'recovered' if ok else 'not recovered'}, "
                  f"{result.seconds:.0f} s, {len(result.table)} fits)", flush=True)
        rows.append({"likelihood": lik_name, "recovered": f"{sum(found)}/{len(found)}",
                     "median s": f"{statistics.median(times):.0f}", "max s": f"{max(times):.0f}"})
    columns = ["likelihood", "recovered", "median s", "max s"]
    print(f"generating structure: {TRUTH}; N = {args.n}, M = {args.num_inducing}, {args.iterations} steps per candidate")
    print_table(rows, columns)
    out = Path(args.out)
    write_json_atomic(out / "kernel_search.json", {"truth": TRUTH, "args": vars(args), "runs": records})
    write_text_atomic(out / "kernel_search.md", markdown_table(rows, columns))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
