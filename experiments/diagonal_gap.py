"""Is the diagonal family's test NLP(D) at SF = 1 the family's or the optimizer's?

The small-scale suite (``experiments/small_scale.py``) finds the diagonal posteriors (mog1 / mog2,
diagonal over u, Bonilla et al. 2019, §9.3) as accurate as the full Gaussian (fg) in error rate /
SSE at every sparsity factor, but worse in NLP / NLPD on dense models. This script separates the
two candidate causes on one dataset and split, at a given SF:

* ``fg`` and ``mog1``: the suite's runs (all parameters learned jointly, the suite's defaults);
* ``mog1@fg``: the diagonal family with the kernel and likelihood frozen at fg's learned values,
  only q(u) optimized (same optimizer and budget): the best diagonal q at fg's hyper-parameters;
* ``fg@mog1``: the full Gaussian at mog1's learned hyper-parameters.

If ``mog1@fg`` is as poor as ``mog1`` while ``fg@mog1`` is as good as ``fg``, the gap is the family's
(a diagonal q over strongly correlated u must keep s_m^2 <= 1 / Lambda_mm, Lambda = K_uu^-1 + the
likelihood's curvature, and so under-estimates the predictive variance) and not the hyper-parameters'.
For a Gaussian likelihood at SF = 1 (u = f(X)) the best diagonal q is known in closed form: its mean
is the exact posterior mean K (K + sigma^2 I)^-1 y and s_m^2 = 1 / [K^-1 + I / sigma^2]_mm
(Bonilla et al. 2019, §3, the diagonal family's stationary point); the row ``closed-form diag@fg``
evaluates it, a check on ``mog1@fg``'s optimization.

    python -m experiments.diagonal_gap boston --splits 1,2,3,4,5 [--sf 1.0] [--out FILE.csv]
    python -m experiments.diagonal_gap abalone --splits 5 --sf 0.5   # warped Gaussian, slopes bounded
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from experiments._common import (
    Identity, Standardizer, add_data_argument, add_threads_argument, gaussian_log_density, nested_subsets, read_split,
    resolve_data_dir, sse, write_csv_atomic,
)
import savigp
from experiments import small_scale as ss


def closed_form_diagonal_nlpd(model, ytr: np.ndarray, Xte: np.ndarray, yte: np.ndarray) -> dict:
    """``ytr``: training targets ``(N, 1)``, ``Xte`` ``(T, D)``, ``yte`` ``(T, 1)`` (standardized).
    Test SSE / NLPD (standardized targets) of the best diagonal q(u) for a dense model with a
    Gaussian likelihood, at the model's kernel and noise variance: m = K (K + s2 I)^-1 y,
    S = diag(1 / [K^-1 + I / s2]_mm); f* | q ~ N(k*^T K^-1 m, k** - k*^T K^-1 k* + k*^T K^-1 S K^-1 k*)."""
    with torch.no_grad():
        X = model.inducing.detach()[0]  # dense model: u = f(X), Z = X, (N, D)
        y = torch.as_tensor(ytr[:, 0], dtype=X.dtype)
        K = model.kernel(X, X)[0]
        s2 = model.likelihood.variance().reshape(()).to(X.dtype)
        M = K.shape[0]
        eye = torch.eye(M, dtype=K.dtype)
        Lk = model.prior_factor()[0]  # the model's own factor of K_zz (its jitter, grown only on failure)
        Kinv = torch.cholesky_inverse(Lk)
        m = K @ torch.cholesky_solve(y[:, None], torch.linalg.cholesky(K + s2 * eye))[:, 0]
        s = 1.0 / (Kinv.diagonal() + 1.0 / s2)
        Xs = torch.as_tensor(Xte, dtype=K.dtype)
        Ksx = model.kernel(Xs, X)[0]  # (T, M)
        A = Ksx @ Kinv  # (T, M)
        mean = A @ m
        var = model.kernel.diag(Xs)[0] - (A * Ksx).sum(1) + (A * A * s).sum(1) + s2
        ys = torch.as_tensor(yte[:, 0], dtype=K.dtype)
        return {"sse": sse(ys, mean), "nlpd": float(-gaussian_log_density(ys, mean, var).mean())}


def _hyper_parameters(model) -> dict:
    """Signal variance, geometric mean length-scale and (Gaussian likelihood) noise variance."""
    with torch.no_grad():
        out = {"signal_variance": float(model.kernel.variance().mean()),
               "lengthscale_gmean": float(model.kernel.lengthscales().log().mean().exp())}
        if hasattr(model.likelihood, "variance"):
            out["noise_variance"] = float(model.likelihood.variance().mean())
    return out


def _fit(spec, args, Xtr, ytr, post, sf, subset, seed, frozen_from=None):
    lik = ss.make_likelihood(spec.likelihoods[0], num_classes=spec.target_cols)
    kernel = ss.make_kernel(spec, Xtr, lik.num_latent)
    torch.manual_seed(seed)
    model = ss.build_model(Xtr, ytr, lik, kernel, post, sf, subset, False, seed, args.placement)
    groups = None
    if frozen_from is not None:  # hyper-parameters of another run, kept fixed: only q(u) is learned
        savigp.warm_start(model, frozen_from, moments=False)
        groups = ["posterior"]
    num_samples = spec.num_samples
    res = ss.train(model, args, "auto", num_samples, seed, groups=groups)
    return model, res


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dataset", choices=("boston", "wisconsin", "abalone", "creep"))
    p.add_argument("--splits", type=ss._ints, default=[1])
    p.add_argument("--sf", type=float, default=1.0)
    p.add_argument("--out", default=None, help="CSV file for the rows (default: print only)")
    add_threads_argument(p, 1)
    add_data_argument(p)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    spec = ss.DATASETS[args.dataset]
    args.optimizer, args.iterations, args.lr = spec.optimizer, spec.iterations, spec.lr
    args.tol = ss.DEFAULT_TOL[spec.optimizer]
    args.q_warmup = 0  # ss.train's option (off, the suite's default)
    args.placement = {"device": None, "dtype": torch.float64}
    data_dir = resolve_data_dir(args.data_dir, spec.folder)
    rows = []
    for split in args.splits:
        Xtr, Ytr, Xte, Yte = read_split(data_dir, split, spec.target_cols)
        xs = Standardizer(Xtr) if spec.standardize_inputs else Identity(Xtr.shape[1])
        Xtr, Xte = xs(Xtr), xs(Xte)
        regression = spec.task == "regression"
        ys = Standardizer(Ytr) if regression else None
        ytr, yte = (ys(Ytr), ys(Yte)) if regression else (Ytr, Yte)
        log_sd = ys.log_scale if regression else 0.0
        N = Xtr.shape[0]
        M = N if args.sf >= 1 else max(1, int(round(args.sf * N)))
        subset = None if args.sf >= 1 else nested_subsets(N, [M], seed=split)[M]
        seed = 1000 * split + 7
        fg, r_fg = _fit(spec, args, Xtr, ytr, "fg", args.sf, subset, seed)
        mog, r_mog = _fit(spec, args, Xtr, ytr, "mog1", args.sf, subset, seed)
        mog_at_fg, r1 = _fit(spec, args, Xtr, ytr, "mog1", args.sf, subset, seed, frozen_from=fg)
        fg_at_mog, r2 = _fit(spec, args, Xtr, ytr, "fg", args.sf, subset, seed, frozen_from=mog)
        cases = [("fg", fg, r_fg), ("mog1", mog, r_mog), ("mog1@fg", mog_at_fg, r1), ("fg@mog1", fg_at_mog, r2)]
        for name, model, res in cases:
            met = savigp.evaluate(model, Xte, yte, seed=split)
            row = {"dataset": args.dataset, "split": split, "sf": args.sf, "case": name, "elbo": res["elbo"],
                   "iterations": res["iterations"], **_hyper_parameters(model)}
            if regression:
                row.update(sse=met["sse"], nlpd=met["nlpd"] + log_sd)
            else:
                row.update(error_rate=met["error_rate"], nlp=met["nlp"])
            rows.append(row)
        if spec.likelihoods[0] == "gaussian" and args.sf >= 1:  # the closed form needs a Gaussian likelihood
            cf = closed_form_diagonal_nlpd(fg, ytr, Xte, yte)
            rows.append({"dataset": args.dataset, "split": split, "sf": args.sf, "case": "closed-form diag@fg",
                         "sse": cf["sse"], "nlpd": cf["nlpd"] + log_sd})
        for r in rows[-5:]:
            if r["split"] == split:
                print("  " + " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()),
                      flush=True)
        if args.out:
            write_csv_atomic(Path(args.out), rows)
    return rows


if __name__ == "__main__":
    main()
