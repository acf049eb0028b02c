"""Coupled vs orthogonally decoupled (coupled + gamma) SAVIGP at equal M (seed 003, §4; issue 5).

    python experiments/decoupled_comparison.py [--quick] [--out results/decoupled]
        [--data-dir ../shared/data] [--configs coupled,orth,...] [--datasets boston,creep,synthetic]
        [--threads 1] [--no-timing]

Regression with a Gaussian likelihood on

* ``boston``: split 1 of ``boston_housing`` (300 train / 206 test, D = 13, inputs standardized
  already), full batch;
* ``creep``: split 1 of ``creep`` (800 / 1266, D = 30; inputs standardized with the training
  statistics), full batch;
* ``synthetic``: 50,000 generated points (45,000 train / 5,000 test, D = 3,
  f(x) = sin(3 x1) + 0.6 cos(4 x2 + x3) + 0.4 sin(5 x1 x3), noise sd 0.1, x ~ U[-2, 2]^3),
  mini-batches of 1024 (``--quick``: 5,000 points).

Configurations (seed 003's names), all with the same M, kernel (RBF ARD), initialization and
data order:

=============  ======================================================================
coupled        SAVIGP, Adam on everything (seed 003's COUPLED)
orth           coupled + gamma (G = ``gamma_factor`` x M), Adam on everything (ORTH)
coupled-nat    natural-gradient steps on q(v), Adam on the rest (COUPLEDNAT)
orthnat        natural steps on q(v), Adam on a_gamma (the seed's practical ORTHNAT), Adam on the rest
orthnat-gn     natural steps on q(v), the Gauss-Newton-bounded preconditioned step for a_gamma
               (tau = 1, ``savigp.natural_gradients``), Adam on the rest
orthnat-eq16   natural steps on q(v), seed 003 eq. (16) for a_gamma with a fixed step (``--eq16-step``)
=============  ======================================================================

Targets are standardized with training statistics; the Gaussian noise variance starts at 0.1
(seed 003, App. E). Metrics on the test set, on the original target scale: NLPD (exact Gaussian
predictive density, log N(y; mu*, s*^2 + sigma^2), with the log-Jacobian of the target scaling),
MAE, and the standardized squared error SSE; plus the final training ELBO per data point, CPU
milliseconds per training step (``time.process_time`` of the process, so other load on the
machine does not inflate it) and wall milliseconds per step.

Unless ``--no-timing``, a timing table follows: CPU ms per training step on generated data for
M in {200, 500, 1000} and B in {1000, 10000}, G = 4 M, for the coupled model, coupled + gamma with
the exact KL quadratic and with 64 sampled columns, and the ORTHNAT steps; and the cost of
predictions with and without the cached K_zz^-1 K(Z, gamma) a.

Outputs in ``--out``: ``comparison.csv``, ``timing.csv``, ``prediction_cache.csv`` and
``README.md`` (all tables in Markdown).
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

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments._common import (  # noqa: E402
    Standardizer,
    markdown_table,
    read_split,
    resolve_data_dir,
    write_csv_atomic,
    write_text_atomic,
)
from experiments._common import add_device_arguments, device_and_dtype  # noqa: E402
from likelihoods import Gaussian  # noqa: E402
from savigp import SAVIGP, TrainingDiverged, TrainingHistory, fit  # noqa: E402
from savigp.natural_gradients import fit_orthnat  # noqa: E402

CONFIGS = ("coupled", "orth", "coupled-nat", "orthnat", "orthnat-gn", "orthnat-eq16")
DATASETS = ("boston", "creep", "synthetic")


# ---------------------------------------------------------------------------------- data
def synthetic(n: int, seed: int = 0, d: int = 3):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, size=(n, d))
    f = np.sin(3 * X[:, 0]) + 0.6 * np.cos(4 * X[:, 1] + X[:, 2]) + 0.4 * np.sin(5 * X[:, 0] * X[:, 2])
    return X, (f + 0.1 * rng.standard_normal(n))[:, None]


def load(name: str, data_dir, quick: bool):
    """X_train, Y_train, X_test, Y_test (inputs ready to use, targets on the original scale)."""
    if name == "boston":
        return read_split(resolve_data_dir(data_dir) / "boston_housing", 1)
    if name == "creep":
        Xtr, Ytr, Xte, Yte = read_split(resolve_data_dir(data_dir) / "creep", 1)
        sx = Standardizer(Xtr)
        return sx(Xtr), Ytr, sx(Xte), Yte
    if name == "synthetic":
        n = 5_000 if quick else 50_000
        X, Y = synthetic(n, seed=1)
        ntr = int(0.9 * n)
        return X[:ntr], Y[:ntr], X[ntr:], Y[ntr:]
    raise ValueError(f"unknown dataset {name!r}; choose from {DATASETS}")


def settings(name: str, quick: bool) -> dict:
    """M, gamma factor, batch size and iterations per dataset."""
    s = {"boston": dict(M=20, batch=None, iters=1500),
         "creep": dict(M=30, batch=None, iters=1500),
         "synthetic": dict(M=100, batch=1024, iters=2000)}[name]
    s["gamma_factor"] = 5
    if quick:
        s["iters"] = {"boston": 100, "creep": 60, "synthetic": 80}[name]
    return s


# ---------------------------------------------------------------------------------- one run
def build(Xtr, ytr, M: int, G: int, seed: int, dtype=torch.float64, device=None) -> SAVIGP:
    return SAVIGP(Xtr, ytr, Gaussian(0.1), num_inducing=M, mean_basis_size=G, inducing_init="kmeans",
                  seed=seed, dtype=dtype, device=device)


def train(model: SAVIGP, config: str, iters: int, batch, lr: float, eq16_step: float, seed: int):
    full = batch is None
    nat_step = 1.0 if full else 0.1
    if config in ("coupled", "orth"):
        return fit(model, iterations=iters, batch_size=batch, lr=lr, seed=seed, progress=False)
    common = dict(batch_size=batch, natgrad_step=nat_step, hyper_lr=lr, seed=seed)
    if config == "coupled-nat":
        return fit_orthnat(model, iters, **common)
    if config == "orthnat":
        return fit_orthnat(model, iters, gamma_update="adam", gamma_lr=lr, **common)
    if config == "orthnat-gn":
        return fit_orthnat(model, iters, gamma_update="precond", gamma_precond="gauss-newton", gamma_step=1.0, **common)
    if config == "orthnat-eq16":
        return fit_orthnat(model, iters, gamma_update="precond", gamma_precond="seed", gamma_step=eq16_step, **common)
    raise ValueError(f"unknown configuration {config!r}; choose from {CONFIGS}")


@torch.no_grad()
def test_metrics(model: SAVIGP, Xte, Yte, ys: Standardizer) -> dict:
    """NLPD (exact Gaussian predictive density), MAE and SSE on the original target scale."""
    mean, var, _ = model.predict_latent(torch.as_tensor(Xte))
    mu = mean[0, :, 0].cpu().numpy()
    s2 = (var[0, :, 0] + model.likelihood.variance()).cpu().numpy()
    z = ys(Yte)[:, 0]
    nlpd = 0.5 * np.log(2 * np.pi * s2) + 0.5 * (z - mu) ** 2 / s2 + ys.log_scale
    pred = ys.inverse(mu[:, None])[:, 0]
    err = Yte[:, 0] - pred
    return {"nlpd": float(nlpd.mean()), "mae": float(np.abs(err).mean()),
            "sse": float((err ** 2).mean() / Yte[:, 0].var())}


def run_dataset(name: str, configs, args) -> list[dict]:
    Xtr, Ytr, Xte, Yte = load(name, args.data_dir, args.quick)
    ys = Standardizer(Ytr)
    ytr = ys(Ytr)
    st = settings(name, args.quick)
    M, batch, iters = st["M"], st["batch"], st["iters"]
    G = st["gamma_factor"] * M
    rows = []
    for config in configs:
        head = config.startswith("orth")
        torch.manual_seed(args.seed)
        device, dtype = device_and_dtype(args)
        model = build(Xtr, ytr, M, G if head else 0, args.seed, dtype=dtype, device=device)
        c0, w0 = time.process_time(), time.perf_counter()
        try:
            hist = train(model, config, iters, batch, args.lr, args.eq16_step, args.seed)
            status = "ok"
        except TrainingDiverged as err:  # the model keeps its last good parameters
            hist = TrainingHistory(elbo=[float("nan")], steps=int(str(err).split("step ")[1].split(":")[0]) + 1)
            status = "diverged"
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        tail = hist.elbo[-min(50, len(hist.elbo)):]
        row = {"dataset": name, "config": config, "N": int(Xtr.shape[0]), "D": int(Xtr.shape[1]), "M": M,
               "G": G if head else 0, "batch": batch or int(Xtr.shape[0]), "steps": hist.steps,
               "elbo_per_n": float(np.mean(tail)) / Xtr.shape[0],
               **test_metrics(model, Xte, Yte, ys),
               "noise_var": float(model.likelihood.variance().detach()), "status": status,
               "cpu_ms_per_step": 1000 * cpu / max(1, hist.steps), "wall_ms_per_step": 1000 * wall / max(1, hist.steps)}
        rows.append(row)
        print(f"{name:9s} {config:12s} nlpd {row['nlpd']:.4f} mae {row['mae']:.4f} elbo/N {row['elbo_per_n']:.4f} "
              f"{row['cpu_ms_per_step']:.1f} CPU ms/step", flush=True)
    return rows


def warm_up(configs, args) -> None:
    """A few steps of every configuration on a tiny problem, so that one-off costs (lazy imports,
    first kernel launches, allocator growth) are not charged to the first timed run."""
    X, Y = synthetic(200, seed=9)
    for config in configs:
        model = build(X, Y, 10, 20 if config.startswith("orth") else 0, args.seed)
        train(model, config, 3, None, args.lr, args.eq16_step, args.seed)


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
    """ms per predict_latent call of b test points, with the cached (b, w) and with it cleared."""
    X, Y = synthetic(4_000, seed=3)
    rows = []
    for M in ([100] if quick else [200, 500, 1000]):
        model = SAVIGP(X, Y, Gaussian(0.1), num_inducing=M, mean_basis_size=4 * M, inducing_init="subset", seed=seed)
        with torch.no_grad():
            model.mean_head.a.normal_()
        h = model.mean_head
        for b in ((1,) if quick else (1, 100)):
            Xs = torch.as_tensor(X[:b])
            calls = 200 if b == 1 else 50
            out = {}
            for mode in ("cached", "recomputed"):
                model.predict_latent(Xs)
                c0 = time.process_time()
                for _ in range(calls):
                    if mode == "recomputed":
                        h.clear_cache()
                    model.predict_latent(Xs)
                out[mode] = 1000 * (time.process_time() - c0) / calls
            rows.append({"M": M, "G": 4 * M, "points_per_call": b, "cached_ms": out["cached"],
                         "recomputed_ms": out["recomputed"], "speedup": out["recomputed"] / out["cached"]})
            print(f"predict M={M} G={4 * M} b={b}: cached {out['cached']:.3f} ms, recomputed {out['recomputed']:.3f} ms",
                  flush=True)
    return rows


# ---------------------------------------------------------------------------------- report
def report(out: Path, rows, timing, cache, args, seconds: float) -> None:
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("n/a",)
    lines = ["# Coupled vs orthogonally decoupled SAVIGP (seed 003)", "",
             f"Command: `python experiments/decoupled_comparison.py {' '.join(sys.argv[1:])}`  ",
             f"Machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
             f"{torch.get_num_threads()} thread(s), CPU only (no GPU available for this run); "
             f"load average at the end {tuple(round(x, 1) for x in load)}; total {seconds / 60:.1f} min.", "",
             "Gaussian likelihood, RBF ARD kernel, equal M per dataset, G = 5 M for the decoupled runs. "
             "Test NLPD and MAE on the original target scale (lower is better); ELBO per training point "
             "(mean of the last 50 steps). CPU ms are process CPU time per step, robust to other load.", ""]
    if rows:
        cols = ["dataset", "config", "N", "M", "G", "batch", "steps", "nlpd", "mae", "sse", "elbo_per_n",
                "cpu_ms_per_step", "wall_ms_per_step", "status"]
        lines += ["## Comparison", "", markdown_table(rows, cols), ""]
    if timing:
        lines += ["## CPU ms per training step", "",
                  "Generated data (D = 3), G = 4 M, Gaussian likelihood, full Gaussian q(v). GPU: not available "
                  "for this task, so CPU only.", "", markdown_table(timing, ["M", "B", "G", "variant", "cpu_ms_per_step", "reps"]), ""]
    if cache:
        lines += ["## Predictions: cached K_zz^-1 K(Z, gamma) a", "",
                  markdown_table(cache, ["M", "G", "points_per_call", "cached_ms", "recomputed_ms", "speedup"]), ""]
    write_text_atomic(out / "README.md", "\n".join(lines))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="small settings (under a minute)")
    p.add_argument("--out", default="results/decoupled")
    p.add_argument("--data-dir", default=None, help="folder with boston_housing/ and creep/ (default ../shared/data)")
    p.add_argument("--configs", default="coupled,orth,coupled-nat,orthnat,orthnat-gn,orthnat-eq16")
    p.add_argument("--datasets", default=",".join(DATASETS))
    p.add_argument("--lr", type=float, default=0.01, help="Adam learning rate (all Adam groups)")
    p.add_argument("--eq16-step", type=float, default=1e-3, help="step of seed 003 eq. (16) for orthnat-eq16")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: reproducible CPU ms)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-timing", action="store_true", help="skip the timing and prediction-cache tables")
    add_device_arguments(p)  # the comparison runs; the CPU-time tables stay on the CPU
    args = p.parse_args(argv)
    device_and_dtype(args)  # a clear error for a device that is not here, before any work
    torch.set_num_threads(args.threads)
    configs = [c for c in args.configs.split(",") if c]
    bad = set(configs) - set(CONFIGS)
    if bad:
        p.error(f"unknown configs {sorted(bad)}; choose from {CONFIGS}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    warm_up(configs, args)
    rows = []
    for name in [d for d in args.datasets.split(",") if d]:
        rows += run_dataset(name, configs, args)
        write_csv_atomic(out / "comparison.csv", rows)
    timing, cache = [], []
    if not args.no_timing:
        cache = prediction_cache_table(args.quick, args.seed)
        write_csv_atomic(out / "prediction_cache.csv", cache)
        timing = timing_table(args.quick, args.seed)
        write_csv_atomic(out / "timing.csv", timing)
    report(out, rows, timing, cache, args, time.perf_counter() - t0)
    print(f"wrote {out}/README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
