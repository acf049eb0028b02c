"""The bases of Salimbeni et al. (2018)'s table 1 (and Azzimonti et al. (2020)'s ODVFF) at equal M: COUPLED, COUPLEDNAT, ORTH,
ORTHNAT, HYBRID, DECOUPLED (Salimbeni et al. 2018, §4; Cheng & Boots 2017; issues 5 and 20).

    python -m experiments.decoupled_comparison [--quick] [--out results/decoupled]
        [--data-dir ../shared/data] [--configs coupled,orth,...] [--datasets boston,creep,...]
        [--seeds 0,1] [--threads 1] [--no-timing]

Regression with a Gaussian likelihood on

* ``boston``: split 1 of ``boston_housing`` (300 train / 206 test, D = 13), full batch;
* ``creep``: split 1 of ``creep`` (800 / 1266, D = 30; inputs standardized), full batch;
* ``abalone``: split 5 of ``abalone`` (1000 / 3177, D = 10; inputs standardized), full batch;
* ``sarcos``: the offline SARCOS file (4449 rows, 21 inputs), torque of joint 1, a fixed random
  3449 / 1000 split, mini-batches of 512 (the 44,484-row training set is not available offline);
* ``gp-matern``: Azzimonti et al. 2020 §5.1's kind of data (its sizes and hyper-parameters are lost in the
  text extraction, so these are ours): a draw from a zero-mean GP with an ARD Matern-3/2 kernel
  (length-scales 0.3, 0.6, variance 1) on [0, 1]^2 plus noise of variance 0.01, 4000 points
  (3000 train / 1000 test), mini-batches of 512; as in Azzimonti et al. 2020, every model here has an
  additive Matern-3/2 kernel (one variance and length-scale per input), which ODVFF needs;
* ``synthetic``: generated points (D = 3, f(x) = sin(3 x1) + 0.6 cos(4 x2 + x3) + 0.4 sin(5 x1 x3),
  noise sd 0.1, x ~ U[-2, 2]^3), 90 % train, mini-batches of 512.

Configurations (Salimbeni et al. (2018)'s names), all with the same M (the covariance basis beta = Z), kernel,
initialization and data order; the decoupled ones add G = ``gamma_factor`` x M mean-basis inputs:

=============  ======================================================================
coupled        SAVIGP, Adam on everything (COUPLED; Salimbeni et al. (2018)'s COUPLED-dagger: same beta)
coupled-nat    natural-gradient steps on q(v), Adam on the rest (COUPLEDNAT-dagger)
orth           orthogonally decoupled basis (Salimbeni et al. 2018, eq. (11)), Adam on everything (ORTH)
orthnat        natural steps on q(v), Adam on a_gamma and the rest (Salimbeni et al.'s (2018) practical ORTHNAT)
hybrid         the hybrid basis (Salimbeni et al. 2018, eq. (10)), Adam on everything (HYBRID)
decoupled      the decoupled basis (Cheng & Boots 2017; Salimbeni et al. 2018, eq. (9)), Adam (DECOUPLED)
odvff          Azzimonti et al. 2020: Fourier features as the covariance basis (F = the largest with
               D (2F + 1) <= M), the orthogonal inducing-point mean basis, trained as orthnat;
               on the Matern set only (``savigp.kernels.fourier_features``)
orthnat-gn     natural steps on q(v), the Gauss-Newton-bounded preconditioned step for a_gamma
orthnat-eq16   natural steps on q(v), Salimbeni et al. 2018 eq. (16) for a_gamma with a fixed step (``--eq16-step``)
=============  ======================================================================

(The last two are not in the default set; ``odvff`` runs only where the kernel is Matern.) Targets are standardized with training statistics;
the Gaussian noise variance starts at 0.1 (Salimbeni et al. 2018, App. E). Metrics on the test set, on the
original target scale: MAE, test log-likelihood per point (``test_ll``, the exact Gaussian
predictive density log N(y; mu*, s*^2 + sigma^2) with the log-Jacobian of the target scaling)
and the standardized squared error SSE; plus the final training ELBO per point and CPU ms per
step (``time.process_time``, robust to other load). Each configuration runs once per seed in
``--seeds`` (initialization, gamma subset and mini-batch order change with the seed; the data do
not). Per dataset the configurations are ranked by their seed-mean MAE and test log-likelihood;
the summary gives average ranks over the datasets (with standard errors over datasets), next to
the ranks the same configurations get in Salimbeni et al. (2018)'s Tables 3 (test log-likelihood) and 4 (RMSE)
among themselves. Salimbeni et al.'s (2018) datasets (3droad, kin40k, ...) are not available offline: no
dataset here is one of theirs, so only the orderings can be compared.

Unless ``--no-timing``, a timing table follows: CPU ms per training step on generated data for
M in {200, 500, 1000} and B in {1000, 10000}, G = 4 M, for the coupled model, coupled + gamma with
the exact KL quadratic and with 64 sampled columns, and the ORTHNAT steps; and the cost of
predictions with and without the cached K_zz^-1 K(Z, gamma) a.

Outputs in ``--out``: ``comparison.csv`` (one row per dataset, configuration and seed),
``summary.csv``, ``ranks.csv``, ``timing.csv``, ``prediction_cache.csv`` and ``README.md`` (all
tables in Markdown).
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

from experiments._common import (
    Standardizer,
    add_cli_options,
    add_data_argument,
    add_device_arguments,
    add_out_argument,
    add_seeds_argument,
    add_threads_argument,
    device_and_dtype,
    gaussian_log_density,
    markdown_table,
    parse_ints,
    read_csv_matrix,
    read_csv_rows,
    read_split,
    resolve_data_dir,
    sse,
    summarize,
    write_csv_atomic,
    write_text_atomic,
)
from likelihoods import Gaussian
from savigp import SAVIGP, TrainingDiverged, TrainingHistory, fit
from savigp.kernels.fourier_features import AdditiveMatern
from savigp.odvff import odvff_model
from savigp.training.natural_gradients import fit_orthnat

CONFIGS = ("coupled", "coupled-nat", "orth", "orthnat", "hybrid", "decoupled", "odvff", "orthnat-gn", "orthnat-eq16")
DEFAULT_CONFIGS = ("coupled", "coupled-nat", "orth", "orthnat", "hybrid", "decoupled", "odvff")
#: configurations that need a Matern kernel (skipped elsewhere; ranked separately)
MATERN_ONLY = ("odvff",)
DATASETS = ("boston", "creep", "abalone", "sarcos", "gp-matern", "synthetic")
#: the mean basis each configuration uses (None: coupled, no gamma)
BASIS = {"coupled": None, "coupled-nat": None, "orth": "orthogonal", "orthnat": "orthogonal",
         "orthnat-gn": "orthogonal", "orthnat-eq16": "orthogonal", "hybrid": "hybrid", "decoupled": "decoupled",
         "odvff": "orthogonal"}

#: Salimbeni et al. 2018, Table 3 (test log-likelihood, higher is better) and Table 4 (test RMSE), the columns
#: that correspond to ours (COUPLED-dagger and COUPLEDNAT-dagger: the coupled bases with the same
#: beta = 300 as the decoupled ones). Table 4's HYBRID and DECOUPLED columns look swapped
#: relative to Table 1 (whose MAE ranks DECOUPLED last); they are copied as printed.
PAPER_ORDER = ("coupled", "coupled-nat", "orthnat", "orth", "hybrid", "decoupled")
PAPER_TEST_LL = {
    "3droad": (-0.7630, -0.7632, -0.5947, -0.6103, -0.7617, -0.9438),
    "houseelectric": (1.3130, 1.3563, 1.3899, 1.3719, 1.3092, 0.6032),
    "slice": (0.7816, 0.7868, 0.8776, 0.8701, 0.7852, 0.0655),
    "elevators": (-0.4475, -0.4455, -0.4479, -0.4441, -0.4585, -0.4966),
    "bike": (0.0059, 0.0135, 0.0271, 0.0317, -0.0318, -0.1783),
    "keggdirected": (1.0134, 1.0158, 1.0224, 1.0216, 1.0102, 0.8947),
    "pol": (0.0726, 0.0821, 0.1586, 0.1451, 0.0784, -0.2502),
    "keggundirected": (0.6984, 0.6999, 0.7007, 0.6967, 0.6878, 0.6374),
    "protein": (-0.9531, -0.9535, -0.9138, -0.9165, -0.9527, -1.0464),
    "song": (-1.1902, -1.1898, -1.1880, -1.1882, -1.1909, -1.2266),
    "buzz": (-0.0566, -0.0551, -0.0480, -0.0484, -0.0614, -0.2285),
    "kin40k": (0.0561, 0.1580, 0.1931, 0.1777, 0.1531, -0.3877),
}
PAPER_RMSE = {
    "3droad": (0.5166, 0.5163, 0.4332, 0.4395, 0.6179, 0.5150),
    "houseelectric": (0.0639, 0.0611, 0.0583, 0.0594, 0.1286, 0.0636),
    "slice": (0.0840, 0.0848, 0.0730, 0.0736, 0.2112, 0.0838),
    "elevators": (0.3767, 0.3760, 0.3770, 0.3752, 0.3973, 0.3812),
    "bike": (0.2342, 0.2324, 0.2293, 0.2282, 0.2848, 0.2438),
    "keggdirected": (0.0883, 0.0878, 0.0871, 0.0873, 0.0980, 0.0883),
    "pol": (0.2073, 0.2059, 0.1906, 0.1931, 0.2867, 0.2065),
    "keggundirected": (0.1200, 0.1196, 0.1194, 0.1202, 0.1304, 0.1223),
    "protein": (0.6207, 0.6216, 0.5963, 0.5972, 0.6868, 0.6209),
    "song": (0.7954, 0.7952, 0.7936, 0.7938, 0.8275, 0.7960),
    "buzz": (0.2601, 0.2606, 0.2574, 0.2576, 0.3106, 0.2617),
    "kin40k": (0.2087, 0.1885, 0.1740, 0.1776, 0.3501, 0.1887),
}


# ---------------------------------------------------------------------------------- data
def synthetic(n: int, seed: int = 0, d: int = 3):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, size=(n, d))
    f = np.sin(3 * X[:, 0]) + 0.6 * np.cos(4 * X[:, 1] + X[:, 2]) + 0.4 * np.sin(5 * X[:, 0] * X[:, 2])
    return X, (f + 0.1 * rng.standard_normal(n))[:, None]


def gp_matern(n: int, seed: int = 0, lengthscales=(0.3, 0.6), noise_var: float = 0.01):
    """A draw of a zero-mean GP with ARD Matern-3/2 kernel (variance 1) at n uniform points of
    [0, 1]^D, plus Gaussian noise (exact: Cholesky of the n x n covariance)."""
    rng = np.random.default_rng(seed)
    ell = np.asarray(lengthscales, dtype=float)
    X = rng.uniform(0.0, 1.0, size=(n, ell.size))
    r = np.sqrt(3.0) * np.sqrt((((X[:, None, :] - X[None, :, :]) / ell) ** 2).sum(-1))
    K = (1.0 + r) * np.exp(-r) + 1e-8 * np.eye(n)
    f = np.linalg.cholesky(K) @ rng.standard_normal(n)
    return X, (f + math.sqrt(noise_var) * rng.standard_normal(n))[:, None]


def _split(X, Y, n_test: int, seed: int):
    perm = np.random.default_rng(seed).permutation(X.shape[0])
    te, tr = perm[:n_test], perm[n_test:]
    return X[tr], Y[tr], X[te], Y[te]


def load(name: str, data_dir, quick: bool):
    """X_train, Y_train, X_test, Y_test (inputs ready to use, targets on the original scale)."""
    if name == "boston":
        return read_split(resolve_data_dir(data_dir) / "boston_housing", 1)
    if name in ("creep", "abalone"):
        Xtr, Ytr, Xte, Yte = read_split(resolve_data_dir(data_dir) / name, 1 if name == "creep" else 5)
        sx = Standardizer(Xtr)
        return sx(Xtr), Ytr, sx(Xte), Yte
    if name == "sarcos":
        A = read_csv_matrix(resolve_data_dir(data_dir) / "sarcos" / "test_all.csv")
        Xtr, Ytr, Xte, Yte = _split(A[:, 7:], A[:, :1], 1000, seed=0)
        sx = Standardizer(Xtr)
        return sx(Xtr), Ytr, sx(Xte), Yte
    if name == "gp-matern":
        X, Y = gp_matern(1_000 if quick else 4_000, seed=1)
        return _split(X, Y, X.shape[0] // 4, seed=0)
    if name == "synthetic":
        n = 2_000 if quick else 10_000
        X, Y = synthetic(n, seed=1)
        ntr = int(0.9 * n)
        return X[:ntr], Y[:ntr], X[ntr:], Y[ntr:]
    raise ValueError(f"unknown dataset {name!r}; choose from {DATASETS}")


def settings(name: str, quick: bool) -> dict:
    """M, gamma factor, batch size, iterations and kernel per dataset."""
    s = {"boston": dict(M=20, batch=None, iters=600),
         "creep": dict(M=20, batch=None, iters=400),
         "abalone": dict(M=20, batch=None, iters=400),
         "sarcos": dict(M=30, batch=512, iters=500),
         "gp-matern": dict(M=20, batch=512, iters=500, kernel="additive-matern32"),
         "synthetic": dict(M=30, batch=512, iters=500)}[name]
    s["gamma_factor"] = 5
    s.setdefault("kernel", "rbf")
    if quick:
        s["iters"], s["M"] = 15, 8
    return s


# ---------------------------------------------------------------------------------- one run
def build(Xtr, ytr, M: int, G: int, seed: int, basis=None, kernel: str = "rbf", dtype=torch.float64,
          config: str = "", device=None) -> SAVIGP:
    """The model of one configuration; ``kernel`` a savigp kernel name or ``"additive-matern32"``."""
    if kernel == "additive-matern32":
        D = Xtr.shape[1]
        std = np.maximum(Xtr.std(0), 1e-6)
        if config == "odvff":  # F: the largest with D (2F + 1) <= M
            return odvff_model(Xtr, ytr, Gaussian(0.1), nu=1.5, num_frequencies=max(0, (M // D - 1) // 2),
                               mean_basis_size=G, lengthscale=torch.as_tensor(std), variance=1.0 / D, seed=seed,
                               dtype=dtype, device=device)
        kernel = AdditiveMatern(D, 1, 1.5, lengthscale=torch.as_tensor(std), variance=1.0 / D)
    return SAVIGP(Xtr, ytr, Gaussian(0.1), kernel, num_inducing=M, mean_basis_size=G if basis else 0,
                  mean_basis=basis or "orthogonal", inducing_init="kmeans", seed=seed, dtype=dtype,
                  device=device)


def train(model: SAVIGP, config: str, iters: int, batch, lr: float, eq16_step: float, seed: int):
    full = batch is None
    nat_step = 1.0 if full else 0.1
    if config in ("coupled", "orth", "hybrid", "decoupled"):
        return fit(model, iterations=iters, batch_size=batch, lr=lr, seed=seed, progress=False)
    common = dict(batch_size=batch, natgrad_step=nat_step, hyper_lr=lr, seed=seed)
    if config == "coupled-nat":
        return fit_orthnat(model, iters, **common)
    if config in ("orthnat", "odvff"):
        return fit_orthnat(model, iters, gamma_update="adam", gamma_lr=lr, **common)
    if config == "orthnat-gn":
        return fit_orthnat(model, iters, gamma_update="precond", gamma_precond="gauss-newton", gamma_step=1.0, **common)
    if config == "orthnat-eq16":
        return fit_orthnat(model, iters, gamma_update="precond", gamma_precond="eq16", gamma_step=eq16_step, **common)
    raise ValueError(f"unknown configuration {config!r}; choose from {CONFIGS}")


@torch.no_grad()
def test_metrics(model: SAVIGP, Xte, Yte, ys: Standardizer) -> dict:
    """Test log-likelihood (exact Gaussian predictive density), MAE and SSE on the original scale."""
    mean, var, _ = model.predict_latent(torch.as_tensor(Xte))
    mu = mean[0, :, 0].cpu().numpy()
    s2 = (var[0, :, 0] + model.likelihood.variance()).cpu().numpy()
    z = ys(Yte)[:, 0]
    nlpd = -gaussian_log_density(z, mu, s2) + ys.log_scale
    pred = ys.inverse(mu[:, None])[:, 0]
    err = Yte[:, 0] - pred
    return {"test_ll": -float(nlpd.mean()), "mae": float(np.abs(err).mean()), "sse": sse(Yte[:, 0], pred)}


def run_dataset(name: str, configs, seeds, args, done=None) -> list[dict]:
    """One row per configuration and seed; rows in ``done`` (keyed by (dataset, config, seed), from
    ``--reuse``) are taken as they are instead of being run again."""
    done = done or {}
    Xtr, Ytr, Xte, Yte = load(name, args.data_dir, args.quick)
    ys = Standardizer(Ytr)
    ytr = ys(Ytr)
    st = settings(name, args.quick)
    M, batch, iters = st["M"], st["batch"], st["iters"]
    G = st["gamma_factor"] * M
    rows = []
    device, dtype = device_and_dtype(args)
    for seed in seeds:
        for config in configs:
            if config in MATERN_ONLY and "matern" not in st["kernel"]:
                continue
            if (name, config, seed) in done:
                rows.append(done[(name, config, seed)])
                continue
            basis = BASIS[config]
            torch.manual_seed(seed)
            model = build(Xtr, ytr, M, G, seed, basis, st["kernel"], config=config, dtype=dtype, device=device)
            c0, w0 = time.process_time(), time.perf_counter()
            try:
                hist = train(model, config, iters, batch, args.lr, args.eq16_step, seed)
                status = "ok"
            except TrainingDiverged as err:  # the model keeps its last good parameters
                hist = TrainingHistory(elbo=[float("nan")], steps=err.step + 1)
                status = "diverged"
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
            tail = hist.elbo[-min(50, len(hist.elbo)):]
            row = {"dataset": name, "config": config, "seed": seed, "N": int(Xtr.shape[0]), "D": int(Xtr.shape[1]),
                   "M": model.num_inducing, "G": G if basis else 0, "kernel": st["kernel"], "batch": batch or int(Xtr.shape[0]),
                   "steps": hist.steps, "elbo_per_n": float(np.mean(tail)) / Xtr.shape[0],
                   **test_metrics(model, Xte, Yte, ys),
                   "noise_var": float(model.likelihood.variance().detach()), "status": status,
                   "cpu_ms_per_step": 1000 * cpu / max(1, hist.steps),
                   "wall_ms_per_step": 1000 * wall / max(1, hist.steps)}
            rows.append(row)
            print(f"{name:9s} {config:12s} seed {seed} mae {row['mae']:.4f} test_ll {row['test_ll']:.4f} "
                  f"elbo/N {row['elbo_per_n']:.4f} {row['cpu_ms_per_step']:.1f} CPU ms/step", flush=True)
    return rows


def _ranks(values: dict, higher_is_better: bool) -> dict:
    """Rank (1 = best, ties averaged) of each key of ``values`` (finite values only)."""
    keys = [k for k, v in values.items() if math.isfinite(v)]
    order = sorted(keys, key=lambda k: -values[k] if higher_is_better else values[k])
    ranks = {}
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in order[i:j + 1]:
            ranks[k] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def rank_table(summary: list[dict], configs) -> list[dict]:
    """Average rank over datasets of each configuration (seed-mean MAE and test log-likelihood),
    with the standard error over datasets, and the ranks the seed gives the same configurations."""
    per = {c: {"mae": [], "test_ll": []} for c in configs}
    for ds in dict.fromkeys(r["dataset"] for r in summary):
        rows = {r["config"]: r for r in summary if r["dataset"] == ds and r["config"] in configs}
        for metric, hib in (("mae", False), ("test_ll", True)):
            for c, rk in _ranks({c: rows[c].get(f"{metric}_mean", float("nan")) for c in rows}, hib).items():
                per[c][metric].append(rk)
    paper = {}
    for table, hib, key in ((PAPER_TEST_LL, True, "paper_test_ll_rank"), (PAPER_RMSE, False, "paper_rmse_rank")):
        acc = {c: [] for c in PAPER_ORDER}
        for vals in table.values():
            for c, rk in _ranks(dict(zip(PAPER_ORDER, vals)), hib).items():
                acc[c].append(rk)
        paper[key] = {c: float(np.mean(v)) for c, v in acc.items()}
    out = []
    for c in configs:
        row = {"config": c}
        for metric in ("mae", "test_ll"):
            v = np.asarray(per[c][metric], dtype=float)
            row[f"{metric}_rank"] = float(v.mean()) if v.size else float("nan")
            row[f"{metric}_rank_se"] = float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else float("nan")
        for key, vals in paper.items():
            row[key] = vals.get(c, float("nan"))
        out.append(row)
    return out


def warm_up(configs, args) -> None:
    """A few steps of every configuration on a tiny problem, so that one-off costs (lazy imports,
    first kernel launches, allocator growth) are not charged to the first timed run."""
    X, Y = synthetic(200, seed=9)
    for config in configs:
        model = build(X, Y, 10, 20, 0, BASIS[config], "additive-matern32" if config in MATERN_ONLY else "rbf",
                      config=config)
        train(model, config, 3, None, args.lr, args.eq16_step, 0)


# ---------------------------------------------------------------------------------- timing
def time_steps(model, step_fn, reps: int) -> float:
    step_fn(1)  # warm-up
    c0 = time.process_time()
    step_fn(reps)
    return 1000 * (time.process_time() - c0) / reps


def timing_table(quick: bool, seed: int) -> list[dict]:
    grid = [(100, 1000)] if quick else [(200, 1000), (200, 10000), (500, 1000), (500, 10000),
                                                   (1000, 1000), (1000, 10000)]
    X, Y = synthetic(20_000 if not quick else 4_000, seed=2)
    rows = []
    for M, B in grid:
        reps = 5 if M * B <= 1_000_000 else 2
        G = 4 * M
        variants = [("coupled", 0, None, "fit"), ("orth (exact KL)", G, None, "fit"), ("orth (64 columns)", G, 64, "fit"),
                    ("orthnat (Adam a)", G, 64, "orthnat"), ("orthnat-gn", G, 64, "orthnat-gn")]
        for label, g, cols, kind in variants:
            torch.manual_seed(seed)
            model = SAVIGP(X, Y, Gaussian(0.1), num_inducing=M, mean_basis_size=g, inducing_init="subset", seed=seed)
            if model.mean_head is not None:
                model.mean_head.kl_columns = cols
            if kind == "fit":
                fn = lambda n: fit(model, iterations=n, batch_size=B, progress=False)  # noqa: E731
            elif kind == "orthnat":
                fn = lambda n: fit_orthnat(model, n, batch_size=B, natgrad_step=0.1, gamma_update="adam")  # noqa: E731
            else:
                fn = lambda n: fit_orthnat(model, n, batch_size=B, natgrad_step=0.1, gamma_precond="gauss-newton",  # noqa: E731
                                           gamma_step=1.0)
            ms = time_steps(model, fn, reps)
            rows.append({"M": M, "B": B, "G": g, "variant": label, "cpu_ms_per_step": ms, "reps": reps})
            print(f"timing M={M:5d} B={B:6d} G={g:5d} {label:20s} {ms:9.1f} CPU ms/step", flush=True)
            del model
    return rows


@torch.no_grad()
def prediction_cache_table(quick: bool, seed: int) -> list[dict]:
    """ms per predict_latent call of b test points, with the caller's ``model.prediction_state()``
    (K_zz's factor and the head's (b, w), computed once) and with them recomputed by every call."""
    X, Y = synthetic(4_000, seed=3)
    rows = []
    for M in ([100] if quick else [200, 500, 1000]):
        model = SAVIGP(X, Y, Gaussian(0.1), num_inducing=M, mean_basis_size=4 * M, inducing_init="subset", seed=seed)
        with torch.no_grad():
            model.mean_head.a.normal_()
        for b in ((1,) if quick else (1, 100)):
            Xs = torch.as_tensor(X[:b])
            calls = 200 if b == 1 else 50
            out = {}
            for mode in ("cached", "recomputed"):  # cached: the caller's model.prediction_state(), reused
                state = model.prediction_state() if mode == "cached" else None
                model.predict_latent(Xs, state=state)
                c0 = time.process_time()
                for _ in range(calls):
                    model.predict_latent(Xs, state=state)
                out[mode] = 1000 * (time.process_time() - c0) / calls
            rows.append({"M": M, "G": 4 * M, "points_per_call": b, "cached_ms": out["cached"],
                         "recomputed_ms": out["recomputed"], "speedup": out["recomputed"] / out["cached"]})
            print(f"predict M={M} G={4 * M} b={b}: cached {out['cached']:.3f} ms, recomputed {out['recomputed']:.3f} ms",
                  flush=True)
    return rows


# ---------------------------------------------------------------------------------- report
def report(out: Path, rows, summary, ranks, matern_ranks, timing, cache, args, seconds: float) -> None:
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("n/a",)
    lines = ["# Bases of the decoupled GP papers in SAVIGP (Salimbeni et al. 2018 table 1, Azzimonti et al. 2020)", "",
             f"Command: `python -m experiments.decoupled_comparison {' '.join(sys.argv[1:])}`  ",
             f"Machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
             f"{torch.get_num_threads()} thread(s), CPU only (no GPU available for this run); "
             f"load average at the end {tuple(round(x, 1) for x in load)}; total {seconds / 60:.1f} min.", "",
             "Gaussian likelihood, equal M (the covariance basis) per dataset, G = 5 M mean-basis inputs for the "
             "decoupled bases. Test MAE on the original target scale (lower is better) and test log-likelihood "
             "per point (higher is better), mean and standard error over the seeds; ELBO per training point "
             "(mean of the last 50 steps). CPU ms are process CPU time per step.", ""]
    if summary:
        cols = ["dataset", "config", "n", "mae_mean", "mae_se", "test_ll_mean", "test_ll_se", "elbo_per_n_mean",
                "cpu_ms_per_step_mean", "diverged"]
        lines += ["## Per dataset (mean over seeds)", "", markdown_table(summary, cols), ""]
    if ranks:
        lines += ["## Average ranks over the datasets", "",
                  "Ranks among the configurations run here (1 = best), per dataset on the seed-mean metric, then "
                  "averaged over datasets (se over datasets). The last two columns rank the same configurations "
                  "among themselves on Salimbeni et al. (2018)'s 12 UCI sets (its Tables 3 and 4: test log-likelihood and RMSE; "
                  "COUPLED and COUPLEDNAT with the same beta as the decoupled bases).", "",
                  markdown_table(ranks, ["config", "mae_rank", "mae_rank_se", "test_ll_rank", "test_ll_rank_se",
                                         "paper_test_ll_rank", "paper_rmse_rank"]), ""]
    if matern_ranks:
        lines += ["## The Matern set with ODVFF (Azzimonti et al. 2020)", "",
                  "The same ranks on the datasets with a Matern kernel only, ODVFF included (Azzimonti et al. 2020 ranks ODVFF "
                  "first on its synthetic data for small |gamma|).", "",
                  markdown_table(matern_ranks, ["config", "mae_rank", "test_ll_rank"]), ""]
    if rows:
        cols = ["dataset", "config", "seed", "N", "M", "G", "kernel", "batch", "steps", "mae", "test_ll", "sse",
                "elbo_per_n", "noise_var", "cpu_ms_per_step", "status"]
        lines += ["## Every run", "", markdown_table(rows, cols), ""]
    if timing:
        lines += ["## CPU ms per training step", "",
                  "Generated data (D = 3), G = 4 M, Gaussian likelihood, full Gaussian q(v). GPU: not available "
                  "for this task, so CPU only.", "", markdown_table(timing, ["M", "B", "G", "variant", "cpu_ms_per_step", "reps"]), ""]
    if cache:
        lines += ["## Predictions: cached K_zz^-1 K(Z, gamma) a", "",
                  markdown_table(cache, ["M", "G", "points_per_call", "cached_ms", "recomputed_ms", "speedup"]), ""]
    write_text_atomic(out / "README.md", "\n".join(lines))


def summarize_runs(rows: list[dict]) -> list[dict]:
    """Per dataset and configuration: seed means and standard errors of the metrics."""
    out = summarize(rows, ["dataset", "config", "kernel"], ["mae", "test_ll", "elbo_per_n", "cpu_ms_per_step"])
    for s in out:
        for m in ("mae", "test_ll"):
            if f"{m}_std" in s:
                s[f"{m}_se"] = s[f"{m}_std"] / math.sqrt(s["n"] - 1) if s["n"] > 1 else float("nan")
        s["diverged"] = sum(r["status"] != "ok" for r in rows if (r["dataset"], r["config"]) == (s["dataset"], s["config"]))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny settings (seconds; what the test suite runs)")
    add_out_argument(p, "results/decoupled")
    add_data_argument(p)
    p.add_argument("--configs", default=",".join(DEFAULT_CONFIGS), help=f"comma-separated, from {CONFIGS}")
    p.add_argument("--datasets", default=",".join(DATASETS), help=f"comma-separated, from {DATASETS}")
    add_seeds_argument(p, "0,1", help="comma-separated seeds (one run per seed and configuration)")
    add_cli_options(p, "--lr", defaults={"--lr": 0.01}, default_help={"--lr": "0.01, every Adam group's"})
    p.add_argument("--eq16-step", type=float, default=1e-3, help="step of Salimbeni et al. 2018 eq. (16) for orthnat-eq16")
    add_threads_argument(p, 1, help="torch CPU threads (1: reproducible CPU ms)")
    p.add_argument("--no-timing", action="store_true", help="skip the timing and prediction-cache tables")
    p.add_argument("--reuse", default=None, metavar="CSV",
                   help="a comparison.csv of an earlier (interrupted) run with the same settings: its rows are kept "
                        "and only the missing (dataset, configuration, seed) runs are made")
    add_device_arguments(p)  # the comparison runs; the CPU-time tables stay on the CPU
    args = p.parse_args(argv)
    device_and_dtype(args)  # a clear error for a device that is not here, before any work
    torch.set_num_threads(args.threads)
    configs = [c for c in args.configs.split(",") if c]
    datasets = [d for d in args.datasets.split(",") if d]
    bad = set(configs) - set(CONFIGS)
    if bad:
        p.error(f"unknown configs {sorted(bad)}; choose from {CONFIGS}")
    bad = set(datasets) - set(DATASETS)
    if bad:
        p.error(f"unknown datasets {sorted(bad)}; choose from {DATASETS}")
    seeds = parse_ints(p, args.seeds, "--seeds")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    done = {}
    if args.reuse:
        done = {(r["dataset"], r["config"], int(r["seed"])): r for r in read_csv_rows(args.reuse)}
    warm_up(configs, args)
    rows = []
    for name in datasets:
        rows += run_dataset(name, configs, seeds, args, done)
        write_csv_atomic(out / "comparison.csv", rows)
    summary = summarize_runs(rows)
    ranks = rank_table(summary, [c for c in configs if c not in MATERN_ONLY])
    matern = [r for r in summary if "matern" in str(r["kernel"])]
    matern_ranks = rank_table(matern, configs) if matern and set(configs) & set(MATERN_ONLY) else []
    write_csv_atomic(out / "summary.csv", summary)
    write_csv_atomic(out / "ranks.csv", ranks)
    for r in ranks:
        print(f"rank {r['config']:12s} mae {r['mae_rank']:.2f} test_ll {r['test_ll_rank']:.2f} "
              f"(Salimbeni et al. 2018: test_ll {r['paper_test_ll_rank']:.2f}, rmse {r['paper_rmse_rank']:.2f})", flush=True)
    timing, cache = [], []
    if not args.no_timing:
        cache = prediction_cache_table(args.quick, seeds[0])
        write_csv_atomic(out / "prediction_cache.csv", cache)
        timing = timing_table(args.quick, seeds[0])
        write_csv_atomic(out / "timing.csv", timing)
    report(out, rows, summary, ranks, matern_ranks, timing, cache, args, time.perf_counter() - t0)
    print(f"wrote {out}/README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
