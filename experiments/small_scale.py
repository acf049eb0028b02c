"""The small-scale suite of the SAVIGP paper (Bonilla et al. 2019, §9.3, figures 1-5 and 13).

One command per dataset::

    python -m experiments.small_scale DATASET [--quick] [--splits 1,2] [--posteriors fg,mog1,mog2]
        [--sparsity 0.1,0.2,0.5,1.0] [--out results/small_scale] [--data-dir ../shared/data]
        [--iterations N] [--lr LR] [--resume]

=========  ===============================  ============================================
dataset    likelihood                       metrics (test set)
=========  ===============================  ============================================
boston     Gaussian (+ exact GP baseline)   SSE, NLPD
abalone    warped Gaussian, 3 tanh terms    SSE, NLPD; exact GP and exact warped GP
creep      (+ ``--likelihoods`` gaussian)   baselines (Snelson et al.'s WGP)
wisconsin  logistic, labels in {-1, +1}     error rate, NLP; estimators "auto" (reparam.)
                                            and "score" (the likelihood as a black box)
usps       softmax over digits 4, 7, 9      error rate, NLP
mining     Poisson / LGCP, 811 bins         no test set: ELBO, training NLPD, the posterior
           (input: bin midpoint in years)   intensity over time with its 95% band; as in the
                                            paper's set-up the kernel (length-scale 37 years,
                                            variance 1) and offset (log mean rate) are fixed
=========  ===============================  ============================================

For every split x posterior (fg = full Gaussian K = 1, mog1 = diagonal K = 1, mog2 = diagonal
K = 2; opt-in: wmog1 / wmog2 = diagonal in whitened coordinates, fmog2 = two full Gaussians) x
sparsity factor SF (M = round(SF * N); SF = 1 is the dense model, Z = X fixed) the script trains
SAVIGP and writes, in ``--out/DATASET/``:

* ``results.csv``: one row per run (and per baseline), all metrics, iterations and wall time;
  rewritten after every run, so ``--resume`` continues an interrupted grid;
* ``summary.md``: mean and std over splits per setting, and notes on the paper's values;
* ``figure.png``: box plots over splits as in the paper's figures 1-4 (SSE / NLPD or error /
  NLP against SF, one box per posterior); for mining the intensity over time (figure 5).

Choices (the paper's where it states them, Bonilla et al. 2019 §9.2):

* Inducing inputs: nested random subsets of the training inputs (one permutation per split, so
  sparser models' inducing inputs are inside denser ones'), kept fixed (``--learn-inducing``
  learns them); squared-exponential ARD kernel.
* Inputs: the CSV files of boston, wisconsin and USPS are standardized already and are used as
  given; abalone and creep inputs are standardized with the training split's statistics.
  Regression targets (boston, abalone, creep) are standardized with training statistics for
  training, and every metric is reported on the original scale (prediction mapped back; the
  NLPD gets the log-Jacobian log std(y_train)).
* Optimization: all parameters jointly, full batch (the paper alternated L-BFGS over parameter
  groups). Closed-form ELLs (Gaussian, warped Gaussian, Poisson: a deterministic ELBO) use L-BFGS
  with strong-Wolfe line search, ``--iterations`` outer steps of 10 iterations; Monte Carlo ELLs
  (logistic, softmax) use Adam, ``--iterations`` steps. Training stops earlier when the ELBO
  averaged over the last window (100 Adam / 5 L-BFGS steps) improved by less than ``--tol``
  relative to the previous window: by default 1e-4 for Adam (a noisy ELBO) and 1e-9 for L-BFGS
  (a deterministic ELBO: it stops only once L-BFGS has converged, since a mixture can cross a
  plateau slowly and then improve by hundreds of nats). An L-BFGS stop is confirmed by a restart
  with a fresh curvature history (a stale one can stall L-BFGS far from the optimum); training
  ends when a restarted round makes no progress or the budget is spent.
* Mixture starts (``--mixture-starts``, default ``default,fg``): mog1 and mog2 are fitted twice, from
  the posterior's own initial state and from the full Gaussian fitted for the same split and SF
  (``savigp.warm_start``: its hyper-parameters, and q(u) from its moments), and the fit with the
  higher training ELBO is kept (never chosen on test metrics); ``results.csv`` records ``start``,
  ``elbo_default_start``, ``elbo_fg_start`` and the losing fit's test metrics. (Not for mining, whose
  kernel is fixed: its mixtures match fg from the default start.)
* Mixture hyper-parameters (``--mixture-hypers``, default ``joint,fg``): each mixture is fitted twice,
  once as in the paper (kernel, likelihood and q(u) on the mixture's own ELBO; rows "mog1", "mog2")
  and once at the kernel, likelihood and inducing inputs of the full Gaussian fitted for the same
  split and SF, learning only q(u) (rows "mog1@fg", "mog2@fg"). A factorized q's ELBO prefers
  hyper-parameters where the factorization is tight (``experiments/diagonal_gap.py``), which costs
  NLP(D) on dense models; the second fit takes them from the full Gaussian's tighter bound instead.
* Estimator: ``"auto"`` (closed form for Gaussian, warped Gaussian and Poisson; the
  reparameterization estimator for logistic and softmax). For wisconsin the grid is also run
  with ``estimator="score"`` (score function with control variates, the likelihood only
  evaluated), as the paper does for every likelihood.
"""
from __future__ import annotations

import argparse
import hashlib
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from experiments._common import (
    Identity, Standardizer, add_cli_options, add_data_argument, add_device_arguments, add_out_argument, add_threads_argument,
    available_splits, device_and_dtype, gaussian_log_density, grouped_boxplot, markdown_table, nested_subsets, pyplot,
    read_csv_matrix, read_csv_rows, read_split, resolve_data_dir, save_figure, sse as standardized_squared_error,
    summarize, uses_score_function, write_csv_atomic, write_text_atomic,
)
import likelihoods as L
import savigp
from likelihoods.densities import LOG_2PI

# The paper's three (fg, mog1, mog2: diagonal over u, Bonilla et al. 2019, §9.3) and, opt-in with --posteriors,
# the library's other mixture families: diagonal in whitened coordinates v = L_zz^-1 u (wmog1, wmog2) and a
# mixture of two full Gaussians (fmog2).
POSTERIORS = {"fg": ("full", 1), "mog1": ("diag-u", 1), "mog2": ("diag-u", 2),
              "wmog1": ("diag", 1), "wmog2": ("diag", 2), "fmog2": ("full", 2)}
PAPER_POSTERIORS = ("fg", "mog1", "mog2")
SPARSITY = (0.1, 0.2, 0.5, 1.0)

# What the paper reports for each dataset. Its results are box plots (figures 1-5, 13) whose images are not
# part of the plain-text copy of the paper in ../shared/seeds (captions only), so no numbers could be read off
# them here; these notes quote what the text says, for comparison with our tables.
PAPER_NOTES = {
    "boston": (
        "Paper, figure 1 (values not readable here: the text copy of the paper has the captions only). Text "
        "(§9.3.1): 'sse increases slightly on sparser models. However, the sse of all the models (fg, mog1, mog2) "
        "across all sparsity factors are comparable to the performance of exact inference (gp). In terms of nlpd, "
        "as expected, the dense (SF=1) fg model performs exactly like the exact inference method (gp). In the sparse "
        "models, nlpd shows less variation in lower sparsity factors (especially for mog1 and mog2)'."
    ),
    "abalone": (
        "Paper, figure 2 (values not readable here: captions only). Text (§9.3.2): 'the performance is similar "
        "across all the models (fg, mog1 and mog2) and sparsity factors, and is comparable to the performance of "
        "the exact inference method for warped Gaussian processes (wgp)'; gp = exact GP with a Gaussian likelihood."
    ),
    "creep": (
        "Paper, figure 13 (values not readable here: captions only). Text (App. K.1): 'sse and nlpd are better in "
        "denser models. As expected, the performance of the dense (SF=1) fg model is identical to the performance "
        "of wgp. We also note that nlpd in gp has less variation compared to the other models'."
    ),
    "wisconsin": (
        "Paper, figure 3 (values not readable here: captions only). Text (§9.3.3): 'the error rate remains "
        "comparable across all models (fg, mog1, mog2) and sparsity factors, and is almost identical to the error "
        "rates obtained by inference using ep and vbo ... the nlp shows more variation and generally degrades as "
        "the number of inducing points is increased, especially for mog1 and mog2 models'. The paper's gradients "
        "are score-function ones (the likelihood as a black box): compare with the `score` rows."
    ),
    "usps": (
        "Paper, figure 4 (values not readable here: captions only). Text (§9.3.4): 'the error rates are slightly "
        "lower in denser fg models ... all versions of savigp achieve comparable error rates to vq's. Similarly to "
        "the binary classification case, nlp shows higher variation with higher sparsity factor, especially in mog1 "
        "and mog2 models'."
    ),
    "mining": (
        "Paper, figure 5 (values not readable here: captions only). Text (§9.3.5): 'the fg model provides similar "
        "results across all sparsity factors, which is also comparable to the results provided by hmc and ess. "
        "mog1 and mog2 models provide the same mean as the fg models, but tend to underestimate the posterior "
        "variance'. mog1 / mog2 here are the paper's family, diagonal over u (posterior='diag-u')."
    ),
}


# ======================================================================================= datasets
@dataclass
class Dataset:
    """How to read one of the paper's small-scale datasets and which models to run on it."""

    name: str
    folder: str
    target_cols: int
    task: str  # "regression" / "classification" / "lgcp"
    likelihoods: tuple = ()
    extra_likelihoods: tuple = ()  # allowed with --likelihoods, not run by default
    estimators: tuple = ("auto",)
    standardize_inputs: bool = False
    baselines: tuple = ()
    optimizer: str = "lbfgs"  # "lbfgs" (outer steps of 10 iterations, same draws) or "adam" (steps)
    iterations: int = 60
    lr: float = 1.0
    num_samples: int = 20
    ard: bool = False  # one length-scale per input (the original code's choice per dataset)
    lengthscale: Optional[float] = None  # initial length-scale; None: sqrt(D) x mean input std
    kernel_variance: float = 1.0


DATASETS = {
    # closed-form ELL (deterministic ELBO): full-batch L-BFGS
    "boston": Dataset("boston", "boston_housing", 1, "regression", ("gaussian",), baselines=("exact_gp",), ard=True),
    "abalone": Dataset("abalone", "abalone", 1, "regression", ("warped",), ("gaussian",), standardize_inputs=True,
                       baselines=("exact_gp", "exact_wgp")),
    "creep": Dataset("creep", "creep", 1, "regression", ("warped",), ("gaussian",), standardize_inputs=True,
                     baselines=("exact_gp", "exact_wgp"), ard=True),
    # the paper's LGCP set-up (Murray et al. 2010; the original code): kernel and offset fixed, only q(u) learned
    "mining": Dataset("mining", "mining", 1, "lgcp", ("poisson",)),
    # Monte Carlo ELL (reparameterization or score function): full-batch Adam
    "wisconsin": Dataset("wisconsin", "wisconsin_cancer", 1, "classification", ("logistic",),
                         estimators=("auto", "score"), optimizer="adam", iterations=500, lr=0.05, num_samples=20),
    "usps": Dataset("usps", "USPS", 3, "classification", ("softmax",), optimizer="adam", iterations=500, lr=0.05,
                    num_samples=10, lengthscale=4.0, kernel_variance=2.0),
}

MINING_BIN_DAYS = 50.0  # the 811 bins of mining/data.csv are 50 days wide (midpoints 25.5, 75.5, ...)
MINING_START_YEAR = 1851.2  # first disaster: 15 March 1851 (day 0 of the bins)
DAYS_PER_YEAR = 365.25
MINING_LENGTHSCALE_DAYS = 13516.0  # the original code's fixed RBF length-scale (37 years), variance 1
MINING_TOTAL_EVENTS, MINING_BINS = 191, 811  # fixed offset: log of the mean count per bin


def make_kernel(spec: Dataset, X: np.ndarray, num_latent: int, learn: bool = True):
    """Squared-exponential kernel (the paper's, §9.2), ARD or with one shared length-scale."""
    D = X.shape[1]
    if spec.lengthscale is not None:
        ls = spec.lengthscale
    else:
        ls = float(np.sqrt(D) * X.std(0).clip(min=1e-6).mean())
    lengthscale = np.full(D, ls) if spec.ard else ls
    return savigp.RBF(D, num_latent, lengthscale=lengthscale, variance=spec.kernel_variance, ard=spec.ard,
                      learn=learn)


def make_likelihood(kind: str, num_classes: int = 3):
    if kind == "gaussian":
        return L.Gaussian(variance=0.1)
    if kind == "warped":  # abalone's and creep's targets are integers: slopes bounded by their spacing
        return L.WarpedGaussian(num_tanh=3, variance=0.1, max_slope="data")
    if kind == "logistic":
        return L.Logistic()
    if kind == "softmax":
        return L.Softmax(num_classes, one_hot=True)
    if kind == "poisson":
        # lambda_n = w exp(f + m) with w the bin width in years: exp(f + m) is the intensity per year;
        # m fixed at log(mean events per year), as in the paper's set-up
        w = MINING_BIN_DAYS / DAYS_PER_YEAR
        return L.Poisson(bin_width=w, offset=math.log(MINING_TOTAL_EVENTS / MINING_BINS / w), learn_offset=False)
    raise ValueError(f"unknown likelihood {kind!r}")


# ======================================================================================= training
LBFGS_INNER = 10  # L-BFGS iterations per outer step (fit's `iterations` counts outer steps)
# Early stop's relative tolerance per optimizer. L-BFGS's is near machine precision on purpose: at 1e-4 (the
# former default) mog1 / mog2 on abalone split 5 SF 0.1 stopped after 20 outer steps on a plateau at ELBO
# -937 / -964 (test NLPD 1.975); run on, they reach -674 / -694 (NLPD 1.657). Boston's mog runs stopped at 35-45.
DEFAULT_TOL = {"adam": 1e-4, "lbfgs": 1e-9}
# --q-warmup N: a mixture (K > 1) under L-BFGS first fits q and the likelihood for N outer steps at the initial
# kernel, then everything. Off by default. A mixture starts with its component means spread to the amplitude of
# prior draws (m_k = L_zz w_k, |w_k| ~ sqrt(M)), far from the data; learned jointly from there, the first line
# searches of creep split 1, SF 1, mog2 raise the noise and shrink the kernel until the signal variance is
# exp(-15) (5 outer steps), a pure-noise fit where the gradient in w vanishes (SSE 1.006, NLPD 5.87). With
# --q-warmup 5: SSE 0.105, NLPD 4.37 (mog1 0.096 / 4.35). Not the default because it costs elsewhere: abalone
# split 5 mog2 ELBO -894 / -1052 at SF 0.1 / 0.2 against -727 / -961 without it (q alone instead of q and the
# likelihood: SF 0.5 falls into the same pure-noise fit, SSE 1.009).
Q_WARMUP_GROUPS = ["posterior", "likelihood"]
# --mixture-starts: a mixture (mog1, mog2) is fitted from each start and the fit with the higher training ELBO
# is kept (selection on the training objective only). "default": the posterior's own initial state at the initial
# hyper-parameters; "fg": savigp.warm_start from the full Gaussian fitted for the same split, likelihood,
# estimator and SF (the one of this run, else fitted first with the same settings).
MIXTURE_STARTS = ("default", "fg")
# --mixture-hypers: "joint" (the paper's method) learns a mixture's kernel and likelihood on its own ELBO. A
# factorized q's ELBO prefers hyper-parameters where the factorization is tight (shorter length-scales, smaller
# noise: experiments/diagonal_gap.py), which costs NLP(D) on dense models. "fg" learns only q(u), at the kernel,
# likelihood and inducing inputs of the full Gaussian fitted for the same split and SF (a two-stage fit:
# hyper-parameters from the full Gaussian's tighter bound, then the mixture over u). The default runs both, each
# mixture row labelled by variant() ("mog1" / "mog1@fg"); mining's kernel is fixed, so there it is "joint" only.
MIXTURE_HYPERS = ("joint", "fg")

class _EarlyStop:
    """fit() callback: stop when the mean ELBO of the last ``window`` steps improved by less than
    ``tol`` x |mean| over the previous window (checked every ``window`` steps)."""

    def __init__(self, window: int = 100, tol: float = 1e-4):
        self.window, self.tol = window, tol
        self.values: list[float] = []
        self.stopped_at: Optional[int] = None

    def __call__(self, step: int, terms) -> bool:
        self.values.append(float(terms.elbo.detach()))
        n, w = len(self.values), self.window
        if self.tol > 0 and n >= 2 * w and n % w == 0:
            last = float(np.mean(self.values[-w:]))
            prev = float(np.mean(self.values[-2 * w:-w]))
            if last - prev < self.tol * abs(last):
                self.stopped_at = n
                return True
        return False


def build_model(X: np.ndarray, Y: np.ndarray, likelihood, kernel, posterior: str, sf: float,
                inducing_idx: Optional[np.ndarray], learn_inducing: bool, seed: int,
                placement: Optional[dict] = None) -> savigp.SAVIGP:
    kind, K = POSTERIORS[posterior]
    if sf >= 1.0:
        where = dict(dense=True)
    else:
        where = dict(inducing_inputs=X[inducing_idx], learn_inducing=learn_inducing)
    return savigp.SAVIGP(X, Y, likelihood, kernel, posterior=kind, num_components=K, seed=seed, **where,
                         **(placement or {}))  # device and dtype (--device, --dtype)


def train(model, args, estimator: str, num_samples: int, seed: int, groups=None) -> dict:
    """Train for ``args.iterations`` steps or until the early stop. Under L-BFGS a stop is checked
    by a restart: a fresh L-BFGS (its curvature history dropped) runs on from the stopping point, and
    training ends only when a round ends without improving on where it began. An L-BFGS whose history
    no longer gives a descent direction stalls for good (abalone split 5, SF 0.2, mog1: ELBO -1021
    after 30 outer steps); restarted, the same run reaches -734 (fg: -736). With ``--q-warmup N`` a mixture
    (K > 1) first fits q and the likelihood for N outer steps (counted in the budget), then everything."""
    lbfgs = args.optimizer == "lbfgs"
    t0 = time.perf_counter()
    steps, elbo, restarts, stopped, estimator_used = 0, [], 0, False, estimator
    warmup = lbfgs and args.q_warmup > 0 and groups is None and model.posterior.num_components > 1
    if warmup:  # q and the likelihood first (--q-warmup), within the budget
        hist = savigp.fit(model, iterations=min(args.q_warmup, args.iterations), lr=args.lr, optimizer="lbfgs",
                          num_samples=num_samples, estimator=estimator, seed=seed, progress=False,
                          groups=Q_WARMUP_GROUPS, lbfgs_max_iter=LBFGS_INNER)
        steps = hist.steps  # (its ELBOs, at the initial hyper-parameters, are left out of the reported mean)
    while steps < args.iterations:
        stop = _EarlyStop(window=5 if lbfgs else 100, tol=args.tol)
        hist = savigp.fit(model, iterations=args.iterations - steps, lr=args.lr, optimizer=args.optimizer,
                          num_samples=num_samples, estimator=estimator, seed=seed, progress=False, callback=stop,
                          groups=groups, lbfgs_max_iter=LBFGS_INNER)
        steps, elbo, estimator_used = steps + hist.steps, elbo + list(hist.elbo), hist.estimator
        if stop.stopped_at is None:
            break
        improved = len(hist.elbo) > 1 and hist.elbo[-1] - hist.elbo[0] > args.tol * abs(hist.elbo[-1])
        if not (lbfgs and improved):
            stopped = True
            break
        restarts += steps < args.iterations
    seconds = time.perf_counter() - t0
    return {"iterations": steps, "train_seconds": seconds, "elbo": float(np.mean(elbo[-20:])),
            "estimator_used": estimator_used, "early_stopped": stopped, "lbfgs_restarts": restarts,
            "q_warmup_steps": min(args.q_warmup, args.iterations) if warmup else 0}


# ======================================================================================= exact baselines
def exact_gp_baseline(kernel, Xtr, ytr, Xte, yte, warped: bool, max_iter: int = 300, lr: float = 1.0) -> dict:
    """Exact GP regression (``warped=False``) or Snelson et al.'s exact warped GP (``warped=True``)
    on standardized targets, hyper-parameters (RBF ARD, noise, warping) by maximizing the exact
    log marginal likelihood with L-BFGS. Returns test SSE and NLPD on the *standardized* scale
    (the caller maps NLPD back) and the predictive mean."""
    X = torch.as_tensor(Xtr, dtype=torch.float64)
    y = torch.as_tensor(ytr[:, 0], dtype=torch.float64)
    Xs = torch.as_tensor(Xte, dtype=torch.float64)
    ys = torch.as_tensor(yte[:, 0], dtype=torch.float64)
    N, D = X.shape
    lik = L.WarpedGaussian(num_tanh=3, variance=0.1) if warped else L.Gaussian(variance=0.1)
    lik.to(torch.float64)
    kernel.to(torch.float64)
    lik.initialize_from_data(y[:, None])
    params = list(kernel.parameters()) + list(lik.parameters())
    eye = torch.eye(N, dtype=torch.float64)

    def chol(K):
        # Cholesky with escalating jitter: L-BFGS line searches may try nearly singular hyper-parameters
        for jitter in (1e-8, 1e-6, 1e-4, 1e-2):
            Lc, info = torch.linalg.cholesky_ex(K + jitter * eye)
            if int(info) == 0:
                return Lc
        raise FloatingPointError("exact GP: kernel matrix not positive definite even with jitter 1e-2")

    def neg_log_ml():
        t, dt = lik.warp(y) if warped else (y, None)
        Kxx = kernel(X, X)[0] + lik.variance() * eye
        Lc = chol(Kxx)
        alpha = torch.cholesky_solve(t[:, None], Lc)[:, 0]
        nll = 0.5 * (t * alpha).sum() + torch.log(torch.diagonal(Lc)).sum() + 0.5 * N * LOG_2PI
        if warped:
            nll = nll - torch.log(dt).sum()
        return nll / N

    opt = torch.optim.LBFGS(params, lr=lr, max_iter=max_iter, history_size=50, line_search_fn="strong_wolfe",
                            tolerance_grad=1e-7, tolerance_change=1e-10)
    t0 = time.perf_counter()

    def closure():
        opt.zero_grad()
        loss = neg_log_ml()
        loss.backward()
        return loss

    opt.step(closure)
    if not all(bool(torch.isfinite(p).all()) for p in params):
        raise FloatingPointError("exact GP: hyper-parameters became non-finite during L-BFGS")
    with torch.no_grad():
        t, _ = lik.warp(y) if warped else (y, None)
        noise = lik.variance()
        Lc = chol(kernel(X, X)[0] + noise * eye)
        alpha = torch.cholesky_solve(t[:, None], Lc)[:, 0]
        Ksx = kernel(Xs, X)[0]
        mf = Ksx @ alpha
        V = torch.linalg.solve_triangular(Lc, Ksx.T, upper=False)
        vf = (kernel.diag(Xs)[0] - (V * V).sum(0)).clamp_min(1e-12)
        if warped:
            ts, dts = lik.warp(ys)
            lpd = gaussian_log_density(ts, mf, vf + noise) + torch.log(dts)
            ymean, _ = lik.predictive_moments(mf[:, None], vf[:, None])
            ymean = ymean[:, 0]
        else:
            lpd = gaussian_log_density(ys, mf, vf + noise)
            ymean = mf
        return {"sse": standardized_squared_error(ys, ymean), "nlpd": float(-lpd.mean()),
                "train_seconds": time.perf_counter() - t0, "elbo": float(-neg_log_ml() * N), "ymean": ymean.numpy()}


# ======================================================================================= mixture starts
#: draws per point and component for the final ELBO of a Monte Carlo estimator (at least the training's)
FINAL_ELBO_SAMPLES = 1000


def final_elbo(model, estimator: str, num_samples: int, seed: int) -> tuple[float, float]:
    """The training ELBO of the fitted model and its Monte Carlo standard error: full batch, at least
    :data:`FINAL_ELBO_SAMPLES` draws from a generator seeded with ``seed`` (exact, standard error 0,
    for closed-form likelihoods): the figure the mixture starts are compared by."""
    gen = torch.Generator(device=model.device).manual_seed(seed)
    with torch.no_grad():
        terms = model.elbo(num_samples=max(num_samples, FINAL_ELBO_SAMPLES), estimator=estimator, generator=gen)
    value = float(terms.elbo)
    return (value if math.isfinite(value) else -math.inf), float(terms.ell_stderr)


def fit_from(model, args, estimator: str, num_samples: int, seed: int, groups=None) -> tuple[object, dict]:
    """:func:`train` ``model`` (only ``groups``, default all); a divergence is recorded (the last good
    parameters are kept)."""
    try:
        info = train(model, args, estimator, num_samples, seed, groups=groups)
    except savigp.TrainingDiverged as e:
        info = {"diverged": str(e)[:200]}
    info["elbo_final"], info["elbo_final_stderr"] = final_elbo(model, estimator, num_samples, seed)
    return model, info


def fit_mixture(make_model, fg_source, args, estimator: str, num_samples: int, seed: int,
                test_metrics, hypers: str = "joint") -> tuple[object, dict]:
    """Fit a mixture from each of ``args.mixture_starts`` and keep the fit with the higher training
    ELBO (:func:`final_elbo`). ``make_model()`` builds the mixture at its default start; ``fg_source()``
    gives the fitted full Gaussian of the same setting. The row records ``start`` (the winner),
    ``elbo_<start>_start`` for every start and, for the record only (never for the choice), the
    losing fits' test metrics ``<metric>_<start>_start`` from ``test_metrics(model)``. With
    ``hypers="fg"`` (:data:`MIXTURE_HYPERS`) every start has fg's hyper-parameters and only q(u) is
    learned, so the ELBOs compared are at the same kernel and likelihood."""
    fits = {}
    frozen = hypers == "fg"
    for start in args.mixture_starts:
        model = make_model()
        if start == "fg":
            savigp.warm_start(model, fg_source(), seed=seed)
        elif frozen:  # the default q(u), at fg's kernel, likelihood and inducing inputs
            savigp.warm_start(model, fg_source(), moments=False)
        fits[start] = fit_from(model, args, estimator, num_samples, seed, groups=["posterior"] if frozen else None)
    best = max(fits, key=lambda k: fits[k][1]["elbo_final"])
    model, info = fits[best]
    info = dict(info, start=best, **{f"elbo_{k}_start": fits[k][1]["elbo_final"] for k in fits})
    for k in fits:
        if k != best:
            info.update({f"{name}_{k}_start": value for name, value in test_metrics(fits[k][0]).items()})
    return model, info


# ======================================================================================= one dataset
def fit_cases(args) -> list[tuple[str, str]]:
    """(posterior, mixture hyper-parameters) pairs to fit, fg first (the mixtures' warm start and,
    with ``--mixture-hypers fg``, their hyper-parameters): fg once ("joint"), each mixture once per
    ``args.mixture_hypers``."""
    posts = sorted(args.posteriors, key=lambda p: p != "fg")
    return [(p, h) for p in posts for h in (["joint"] if p == "fg" else args.mixture_hypers)]


def variant(r: dict) -> str:
    """A row's label in tables and figures: the posterior, with "@fg" when a mixture took fg's
    hyper-parameters (``--mixture-hypers fg``)."""
    return f"{r['posterior']}@fg" if r.get("mixture_hypers") == "fg" else str(r["posterior"])


def split_digest(*arrays: np.ndarray) -> str:
    """A short SHA-1 of a split's arrays (training and test inputs and targets, as read)."""
    h = hashlib.sha1()
    for a in arrays:
        h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
    return "sha1:" + h.hexdigest()[:12]  # the prefix keeps the CSV reader from taking "12e4..." for a number


def identical_splits_note(rows: list[dict]) -> list[str]:
    """Markdown lines naming splits that hold byte-identical data (the shared abalone and creep
    files: every split is the same 1000 / 800 training points), whose spread is then over seeds and
    inducing subsets only."""
    by_digest: dict = {}
    for r in rows:
        if r.get("data_digest"):
            by_digest.setdefault(r["data_digest"], set()).add(int(float(r["split"])))
    same = [sorted(v) for v in by_digest.values() if len(v) > 1]
    if not same:
        return []
    names = "; ".join("splits " + ", ".join(map(str, g)) for g in same)
    return [f"Identical data: {names} hold the same training and test points, so their spread is over the "
            "seed (initialization, inducing subset, Monte Carlo draws) only.", ""]


def run_key(r: dict) -> tuple:
    return (str(r.get("method")), str(r.get("likelihood")), str(r.get("estimator")), int(float(r.get("split", 0))),
            str(r.get("posterior")), f"{float(r.get('sf', 0)):.4g}", str(r.get("mixture_hypers") or "joint"))


def run_grid(spec: Dataset, args, out_dir: Path) -> list[dict]:
    data_dir = resolve_data_dir(args.data_dir) / spec.folder
    splits = args.splits or available_splits(data_dir)
    rows: list[dict] = []
    done = set()
    csv_path = out_dir / "results.csv"
    if args.resume and csv_path.is_file():  # keep finished rows; rows without metrics (failures) run again
        rows = [r for r in read_csv_rows(csv_path) if isinstance(r.get("nlpd", r.get("nlp")), float)]
        done = {run_key(r) for r in rows}
    liks = args.likelihoods or spec.likelihoods
    ests = args.estimators or spec.estimators

    def record(row):
        rows.append(row)
        done.add(run_key(row))
        write_csv_atomic(csv_path, rows)

    for split in splits:
        Xtr, Ytr, Xte, Yte = read_split(data_dir, split, spec.target_cols)
        xs = Standardizer(Xtr) if spec.standardize_inputs else Identity(Xtr.shape[1])
        Xtr, Xte = xs(Xtr), xs(Xte)
        ys = Standardizer(Ytr) if spec.task == "regression" else None
        ytr, yte = (ys(Ytr), ys(Yte)) if ys is not None else (Ytr, Yte)
        log_sd = ys.log_scale if ys is not None else 0.0
        N = Xtr.shape[0]
        base = {"dataset": spec.name, "split": split, "n_train": N, "n_test": Xte.shape[0],
                "data_digest": split_digest(Xtr, Ytr, Xte, Yte)}
        # ---- exact baselines (regression)
        # --quick skips the exact baselines on the larger sets (an O(N^3) L-BFGS fit each, ~1 min for N = 1000)
        skip_baselines = args.no_baselines or (args.quick and N > 500)
        for b in (() if skip_baselines else spec.baselines):
            row = dict(base, method=b, likelihood="warped" if b == "exact_wgp" else "gaussian", estimator="exact",
                       posterior="-", sf=1.0, M=N)
            if run_key(row) in done:
                continue
            res = None
            for lr in (1.0, 0.1):  # a first L-BFGS step of 1.0 can reach singular hyper-parameters (creep WGP)
                try:
                    res = exact_gp_baseline(make_kernel(spec, Xtr, 1), Xtr, ytr, Xte, yte, warped=(b == "exact_wgp"),
                                            max_iter=60 if args.quick else 300, lr=lr)
                    row["baseline_lr"] = lr
                    row.pop("diverged", None)  # an earlier step size failed, this one did not
                    break
                except (FloatingPointError, RuntimeError) as e:  # e.g. a failed Cholesky: record it
                    row.update(diverged=f"L-BFGS lr {lr}: {str(e)[:200]}")
            if res is None:
                record(row)
                continue
            row.update(sse=res["sse"], nlpd=res["nlpd"] + log_sd, elbo=res["elbo"], elbo_original_scale=res["elbo"] - N * log_sd,
                       iterations="", train_seconds=res["train_seconds"], seconds=res["train_seconds"])
            record(row)
            _log(args, row)
        # ---- SAVIGP grid
        sizes = {sf: max(1, int(round(sf * N))) for sf in args.sparsity}
        subsets = nested_subsets(N, [m for sf, m in sizes.items() if sf < 1.0], seed=split)
        for lik_kind in liks:
            for est in ests:
                fg_fits: dict = {}  # sf -> the fitted fg model of this split, likelihood and estimator
                for post, hypers in fit_cases(args):  # fg first: the mixtures' warm start
                    for sf in args.sparsity:
                        M = N if sf >= 1.0 else sizes[sf]
                        row = dict(base, method="savigp", likelihood=lik_kind, estimator=est, posterior=post, sf=sf,
                                   M=M, mixture_hypers=hypers)
                        if run_key(row) in done:
                            continue
                        seed = 1000 * split + 7
                        num_samples = args.num_samples or (100 if uses_score_function(est) else spec.num_samples)

                        def make_model(post=post, sf=sf, M=M):
                            torch.manual_seed(seed)
                            lik = make_likelihood(lik_kind, num_classes=spec.target_cols)
                            kernel = make_kernel(spec, Xtr, lik.num_latent)
                            return build_model(Xtr, ytr, lik, kernel, post, sf, subsets.get(M), args.learn_inducing,
                                               seed, args.placement)

                        def fg_source(sf=sf, make=make_model):
                            if sf not in fg_fits:  # fg not run here (--posteriors, --resume): fit it first
                                fg_fits[sf] = fit_from(make(post="fg"), args, est, num_samples, seed)[0]
                            return fg_fits[sf]

                        def test_metrics(model):
                            metrics = savigp.evaluate(model, Xte, yte, seed=split)
                            if spec.task != "regression":
                                return dict(error_rate=metrics["error_rate"], nlp=metrics["nlp"])
                            sd = float(np.exp(log_sd))
                            return dict(sse=metrics["sse"], nlpd=metrics["nlpd"] + log_sd,
                                        mse=metrics["mse"] * sd * sd, mae=metrics["mae"] * sd)

                        t0 = time.perf_counter()
                        if post != "fg" and (args.mixture_starts != ["default"] or hypers == "fg"):
                            model, info = fit_mixture(make_model, fg_source, args, est, num_samples, seed, test_metrics,
                                                      hypers=hypers)
                        else:
                            model, info = fit_from(make_model(), args, est, num_samples, seed)
                        if post == "fg":
                            fg_fits[sf] = model
                        row.update(info)
                        row["num_samples"] = num_samples
                        row.update(test_metrics(model))
                        if spec.task == "regression":
                            row["elbo_original_scale"] = row.get("elbo", float("nan")) - N * log_sd
                        row["seconds"] = time.perf_counter() - t0
                        record(row)
                        _log(args, row)
    return rows


def _log(args, row: dict) -> None:
    keys = ("split", "method", "likelihood", "estimator", "posterior", "sf", "M", "iterations", "seconds", "sse",
            "nlpd", "error_rate", "nlp", "elbo", "start", "elbo_default_start", "elbo_fg_start")
    print("  " + " ".join(f"{k}={row[k]:.4g}" if isinstance(row.get(k), float) else f"{k}={row.get(k)}"
                          for k in keys if k in row and row.get(k) != ""), flush=True)


# ======================================================================================= mining (LGCP)
def load_mining(data_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """Inputs: bin midpoints in calendar years ``(811, 1)``; targets: disaster counts ``(811, 1)``."""
    arr = read_csv_matrix(data_dir / "mining" / "data.csv")
    years = MINING_START_YEAR + arr[:, 1:2] / DAYS_PER_YEAR
    return years, arr[:, 0:1]


def mixture_normal_quantiles(means: np.ndarray, sds: np.ndarray, weights: np.ndarray, levels) -> np.ndarray:
    """Quantiles of a per-point Gaussian mixture sum_k w_k N(means[k, b], sds[k, b]^2) by bisection on
    its CDF (exact to ~1e-10): ``(L, B)`` for ``levels`` of length L."""
    from scipy.special import ndtr

    lo = (means - 10 * sds).min(0)
    hi = (means + 10 * sds).max(0)
    out = []
    for p in np.atleast_1d(levels):
        a, b = lo.copy(), hi.copy()
        for _ in range(60):
            mid = 0.5 * (a + b)
            cdf = (weights[:, None] * ndtr((mid[None] - means) / sds)).sum(0)
            a = np.where(cdf < p, mid, a)
            b = np.where(cdf < p, b, mid)
        out.append(0.5 * (a + b))
    return np.stack(out)


def intensity_band(model, X: np.ndarray) -> dict:
    """Posterior of the intensity lambda(x) = exp(f(x) + m) (events per year) at X under the mixture
    q(f): its mean sum_k pi_k exp(mu_k + v_k / 2 + m), and its 2.5%, 50% and 97.5% quantiles (exact:
    lambda is monotone in f, so its quantiles are exp of the mixture's quantiles)."""
    mean, var, w = model.predict_latent(X)  # (K, B, 1)
    offset = float(model.likelihood.offset.detach())
    mu, sd, w = (t.detach().double().cpu().numpy() for t in (mean[..., 0], var[..., 0].sqrt(), w))
    lam_mean = (w[:, None] * np.exp(mu + 0.5 * sd ** 2 + offset)).sum(0)
    q = np.exp(mixture_normal_quantiles(mu, sd, w, [0.025, 0.5, 0.975]) + offset)
    return {"mean": lam_mean, "lo": q[0], "median": q[1], "hi": q[2], "log_mean": (w[:, None] * mu).sum(0) + offset,
            "K": mu.shape[0]}


def run_mining(spec: Dataset, args, out_dir: Path) -> tuple[list[dict], dict]:
    X, Y = load_mining(resolve_data_dir(args.data_dir))
    N = X.shape[0]
    rows, bands = [], {}
    csv_path = out_dir / "results.csv"
    sizes = {sf: max(1, int(round(sf * N))) for sf in args.sparsity}
    subsets = nested_subsets(N, [m for sf, m in sizes.items() if sf < 1.0], seed=1)
    early = X[:, 0] < 1890
    late = X[:, 0] >= 1900
    for post in args.posteriors:
        for sf in args.sparsity:
            M = N if sf >= 1.0 else sizes[sf]
            seed = 1007
            torch.manual_seed(seed)
            t0 = time.perf_counter()
            kernel = savigp.RBF(1, 1, lengthscale=MINING_LENGTHSCALE_DAYS / DAYS_PER_YEAR, variance=1.0, learn=False)
            model = build_model(X, Y, make_likelihood("poisson"), kernel, post, sf, subsets.get(M), args.learn_inducing,
                                seed, args.placement)
            row = {"dataset": "mining", "split": 1, "n_train": N, "method": "savigp", "likelihood": "poisson",
                   "estimator": "auto", "posterior": post, "sf": sf, "M": M}
            try:
                row.update(train(model, args, "auto", spec.num_samples, seed,
                                 groups=["posterior", "inducing"] if args.learn_inducing else ["posterior"]))
            except savigp.TrainingDiverged as e:
                row.update(diverged=str(e)[:200])
            lpd = model.log_predictive_density(X, Y, num_samples=1000, seed=0)
            band = intensity_band(model, X)
            bands[(post, sf)] = band
            row.update(train_nlpd=float(-lpd.mean()),
                       intensity_before_1890=float(band["mean"][early].mean()),
                       intensity_after_1900=float(band["mean"][late].mean()),
                       band_width_mean=float((band["hi"] - band["lo"]).mean()))
            row["seconds"] = time.perf_counter() - t0
            rows.append(row)
            write_csv_atomic(csv_path, rows)
            _log(args, row)
    ref = bands.get(("fg", 1.0))
    if ref is not None:
        for r in rows:
            b = bands[(r["posterior"], r["sf"])]
            r["rms_log_intensity_vs_fg_dense"] = float(np.sqrt(np.mean((b["log_mean"] - ref["log_mean"]) ** 2)))
            r["band_width_ratio_vs_fg_dense"] = float((b["hi"] - b["lo"]).mean() / (ref["hi"] - ref["lo"]).mean())
        write_csv_atomic(csv_path, rows)
    return rows, {"X": X, "Y": Y, "bands": bands}


# ======================================================================================= outputs
def regression_or_classification_metrics(spec: Dataset) -> tuple[str, str]:
    return ("sse", "nlpd") if spec.task == "regression" else ("error_rate", "nlp")


def write_summary(spec: Dataset, rows: list[dict], out_dir: Path, command: str, optimizer: str = "adam") -> str:
    if spec.task == "lgcp":
        metrics = ["train_nlpd", "elbo", "intensity_before_1890", "intensity_after_1900", "band_width_mean",
                   "band_width_ratio_vs_fg_dense", "rms_log_intensity_vs_fg_dense", "iterations", "seconds"]
    else:
        metrics = list(regression_or_classification_metrics(spec)) + ["elbo", "iterations", "seconds"]
    keys = ["method", "likelihood", "estimator", "posterior", "sf"]
    rows = [dict(r, posterior=variant(r)) if r.get("method") == "savigp" else r for r in rows]  # mog1@fg etc.
    summ = summarize(rows, keys, metrics)
    cols, heads = list(keys) + ["n"], list(keys) + ["splits"]
    for m in metrics:
        if any(f"{m}_mean" in s for s in summ):
            cols += [f"{m}_mean", f"{m}_std"]
            heads += [f"{m} mean", f"{m} std"]
    total = sum(float(r.get("seconds") or 0) for r in rows)
    steps = (f"L-BFGS outer steps ({LBFGS_INNER} iterations each, strong-Wolfe line search)" if optimizer == "lbfgs"
             else "Adam steps")
    if spec.task == "lgcp":
        what = ("No test set (as in the paper): ELBO and NLPD of the 811 training bins; intensities in events per "
                "year, `band_width_mean` the mean width of the 95% band; `*_vs_fg_dense` compare with the dense fg "
                "posterior.")
    else:
        what = ("Mean and standard deviation (population) over splits; test-set metrics in the targets' original "
                "units" + ("; `elbo` on the standardized training targets." if spec.task == "regression" else "."))
    lines = [f"# Small-scale suite: {spec.name} (Bonilla et al. 2019, §9.3)\n", f"Command: `{command}`\n",
             f"Runs: {len(rows)}; total wall time {total:.0f} s (sum over runs, one CPU thread each, shared machine).\n",
             what + f" `iterations`: {steps}, full batch; `seconds`: wall time per run including evaluation.\n",
             markdown_table(summ, cols, heads), "", PAPER_NOTES.get(spec.name, ""), ""]
    if spec.task != "lgcp":
        lines += per_split_table(rows, keys, regression_or_classification_metrics(spec))
    lines += identical_splits_note(rows)
    if any("diverged" in r and r.get("diverged") for r in rows):
        lines.append("Runs that diverged (parameters of the last finite step kept): "
                     + "; ".join(f"split {r['split']} {r['posterior']} SF {r['sf']}" for r in rows if r.get("diverged")))
    text = "\n".join(lines)
    write_text_atomic(out_dir / "summary.md", text)
    return text


def per_split_table(rows: list[dict], keys: list[str], metrics: tuple[str, str]) -> list[str]:
    """Markdown lines: one row per setting, one column per split, cells '<metric1> / <metric2>'."""
    splits = sorted({int(float(r["split"])) for r in rows})
    table, index = [], {}
    for r in rows:
        k = tuple(r.get(c) for c in keys)
        if k not in index:
            index[k] = dict(zip(keys, k))
            table.append(index[k])
        a, b = (r.get(m) for m in metrics)
        cell = "-" if not isinstance(a, float) else f"{a:.4g} / {b:.4g}"
        index[k][f"split {int(float(r['split']))}"] = cell
    cols = list(keys) + [f"split {s}" for s in splits]
    return [f"Per split: {metrics[0]} / {metrics[1]}.\n", markdown_table(table, cols), ""]


def plot_grid(spec: Dataset, rows: list[dict], out_dir: Path) -> Path:
    plt = pyplot()

    m1, m2 = regression_or_classification_metrics(spec)
    sav = [r for r in rows if r.get("method") == "savigp"]
    variants = sorted({(r["likelihood"], r["estimator"]) for r in sav})
    labels = {variant(r) for r in sav}
    posts = [v for p in POSTERIORS for v in (p, f"{p}@fg") if v in labels]
    sfs = sorted({float(r["sf"]) for r in sav})
    base_rows = [r for r in rows if r.get("method") != "savigp"]
    fig, axes = plt.subplots(max(1, len(variants)), 2, figsize=(11, 3.6 * max(1, len(variants))),
                             squeeze=False, sharey="col")
    for vi, (lik, est) in enumerate(variants or [("", "")]):
        for ci, metric in enumerate((m1, m2)):
            data = {}
            for r in sav:
                if (r["likelihood"], r["estimator"]) == (lik, est):
                    data.setdefault((float(r["sf"]), variant(r)), []).append(r.get(metric))
            baselines = {}
            for r in base_rows:
                baselines.setdefault(str(r["method"]).replace("exact_", ""), []).append(r.get(metric))
            ax = axes[vi, ci]
            grouped_boxplot(ax, data, sfs, posts, ylabel=metric.upper().replace("_", " "), xlabel="sparsity factor SF",
                            baselines=baselines, group_label=lambda s: f"{s:g}")
            ax.set_title(f"{spec.name}: {lik} likelihood, estimator {est}", fontsize="medium")
    return save_figure(fig, out_dir / "figure.png", dpi=110)


def plot_mining(rows: list[dict], extra: dict, out_dir: Path) -> Path:
    plt = pyplot()

    X, Y, bands = extra["X"][:, 0], extra["Y"][:, 0], extra["bands"]
    posts = [p for p in POSTERIORS if any(k[0] == p for k in bands)]
    fig, axes = plt.subplots(1 + len(posts), 1, figsize=(10, 2.6 * (1 + len(posts))), sharex=True)
    axes = np.atleast_1d(axes)
    ax = axes[0]
    ax.vlines(X, 0, Y, color="k", lw=0.8)
    ax.set_ylabel("disasters per 50-day bin")
    ax.set_title("coal-mining disasters (Jarrett 1979), 811 bins")
    colors = {0.1: "#1f77b4", 0.2: "#ff7f0e", 0.5: "#2ca02c", 1.0: "#d62728"}
    for ax, post in zip(axes[1:], posts):
        for (p, sf), b in sorted(bands.items()):
            if p != post:
                continue
            c = colors.get(sf, None)
            ax.plot(X, b["mean"], color=c, lw=1.3, label=f"SF {sf:g}")
            ax.fill_between(X, b["lo"], b["hi"], color=c, alpha=0.15)
        ax.set_ylabel("intensity (events / year)")
        ax.set_title(f"posterior intensity, {post}: mean and 95% band", fontsize="medium")
        ax.legend(fontsize="small", ncol=4)
    axes[-1].set_xlabel("year")
    return save_figure(fig, out_dir / "figure.png", dpi=110)


# ======================================================================================= CLI
def _floats(s: str) -> list[float]:
    return [float(v) for v in s.split(",") if v.strip()]


def _ints(s: str) -> list[int]:
    return [int(v) for v in s.split(",") if v.strip()]


def _names(s: str) -> list[str]:
    return [v.strip() for v in s.split(",") if v.strip()]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset", choices=sorted(DATASETS))
    p.add_argument("--quick", action="store_true",
                   help="one split, fg at SF 0.2, few iterations (a smoke test, well under a minute)")
    p.add_argument("--splits", type=_ints, default=None, help="comma-separated split numbers (default: all)")
    p.add_argument("--posteriors", type=_names, default=list(PAPER_POSTERIORS),
                   help="comma-separated, among " + ",".join(POSTERIORS) + " (default: the paper's fg,mog1,mog2; "
                        "wmog1 / wmog2: diagonal in whitened coordinates, K = 1 / 2; fmog2: two full Gaussians)")
    p.add_argument("--sparsity", type=_floats, default=list(SPARSITY), help="sparsity factors M/N (1.0 = dense)")
    p.add_argument("--likelihoods", type=_names, default=None,
                   help="likelihoods to run (abalone/creep: warped and/or gaussian; default warped)")
    p.add_argument("--estimators", type=_names, default=None, help="ELL estimators (default: auto; wisconsin: auto,score)")
    p.add_argument("--optimizer", choices=("lbfgs", "adam"), default=None,
                   help="default: lbfgs for closed-form likelihoods (boston, abalone, creep, mining), adam otherwise")
    add_cli_options(p, "--iterations", "--lr", helps={
        "--iterations": f"maximum Adam steps, or L-BFGS outer steps of {LBFGS_INNER} iterations (default per dataset)",
        "--lr": "learning rate (default per dataset; L-BFGS: 1.0)"})
    p.add_argument("--q-warmup", type=int, default=0, metavar="N",
                   help="L-BFGS: a mixture (mog2) first fits q and the likelihood for N outer steps at the initial "
                        "kernel (default 0: off; 5 avoids creep SF 1 mog2's pure-noise fit, see Q_WARMUP_GROUPS)")
    p.add_argument("--mixture-starts", type=_names, default=list(MIXTURE_STARTS),
                   help="starts a mixture (mog1, mog2) is fitted from; the fit with the higher training ELBO is kept "
                        "(default: default,fg; 'default' alone: the mixture's own initial state only)")
    p.add_argument("--mixture-hypers", type=_names, default=list(MIXTURE_HYPERS),
                   help="how a mixture gets its hyper-parameters, comma-separated, each a row of its own: joint (the "
                        "paper's method: kernel, likelihood and q(u) learned on the mixture's own ELBO), fg (the full "
                        "Gaussian's fitted kernel, likelihood and inducing inputs; only q(u) learned; rows labelled "
                        "mog1@fg etc.). Default joint,fg; see MIXTURE_HYPERS")
    p.add_argument("--tol", type=float, default=None,
                   help="early stop: relative improvement of the mean ELBO between successive windows of 100 Adam "
                        f"/ 5 L-BFGS steps (0 disables; default {DEFAULT_TOL['adam']:g} for Adam, "
                        f"{DEFAULT_TOL['lbfgs']:g} for L-BFGS, i.e. until converged)")
    p.add_argument("--num-samples", type=int, default=None,
                   help="Monte Carlo samples per point for training (default: 100 for score, per dataset otherwise)")
    p.add_argument("--learn-inducing", action="store_true", help="learn the inducing inputs (default: fixed subset)")
    p.add_argument("--no-baselines", action="store_true", help="skip the exact GP / WGP baselines")
    p.add_argument("--resume", action="store_true", help="keep the rows of an existing results.csv, run the rest")
    add_out_argument(p, None, "output folder (default results/small_scale, quick: results/small_scale_quick)")
    add_data_argument(p)
    add_threads_argument(p, 1, "torch threads (default 1)")
    add_device_arguments(p)
    args = p.parse_args(argv)
    device, dtype = device_and_dtype(args)
    args.placement = {"device": device, "dtype": dtype}
    spec = DATASETS[args.dataset]
    bad = set(args.posteriors) - set(POSTERIORS)
    if bad:
        p.error(f"unknown posterior(s) {sorted(bad)}; choose from {list(POSTERIORS)}")
    if any(not 0 < s <= 1 for s in args.sparsity):
        p.error(f"sparsity factors must lie in (0, 1], got {args.sparsity}")
    if not args.mixture_hypers or set(args.mixture_hypers) - set(MIXTURE_HYPERS):
        p.error(f"--mixture-hypers must be among {list(MIXTURE_HYPERS)}, got {args.mixture_hypers}")
    if not args.mixture_starts or set(args.mixture_starts) - set(MIXTURE_STARTS):
        p.error(f"--mixture-starts must be among {list(MIXTURE_STARTS)}, got {args.mixture_starts}")
    allowed = set(spec.likelihoods) | set(spec.extra_likelihoods)
    if args.likelihoods and set(args.likelihoods) - allowed:
        p.error(f"{args.dataset}: likelihoods must be among {sorted(allowed)}")
    if args.estimators and set(args.estimators) - set(savigp.ESTIMATORS):
        p.error(f"estimators must be among {list(savigp.ESTIMATORS)}")
    args.optimizer = args.optimizer or spec.optimizer
    args.tol = DEFAULT_TOL[args.optimizer] if args.tol is None else args.tol
    if args.quick:
        args.splits = args.splits[:1] if args.splits else None
        args.posteriors, args.sparsity = ["fg"], [0.2]
        args.estimators = args.estimators or ["auto"]
        args.iterations = args.iterations or (10 if args.optimizer == "lbfgs" else 150)
        args.tol = 0.0
    if args.optimizer != spec.optimizer and args.lr is None:
        args.lr = 1.0 if args.optimizer == "lbfgs" else 0.05
    args.iterations = args.iterations or spec.iterations
    args.lr = args.lr or spec.lr
    args.out = args.out or ("results/small_scale_quick" if args.quick else "results/small_scale")
    return args


def main(argv=None) -> dict:
    """Run one dataset; returns ``{"rows": [...], "out_dir": Path, "figure": Path, "summary": str}``."""
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    spec = DATASETS[args.dataset]
    out_dir = Path(args.out) / args.dataset
    out_dir.mkdir(parents=True, exist_ok=True)
    command = "python -m experiments.small_scale " + " ".join(sys.argv[1:] if argv is None else list(argv))
    t0 = time.perf_counter()
    if spec.task == "lgcp":
        rows, extra = run_mining(spec, args, out_dir)
        fig = plot_mining(rows, extra, out_dir)
    else:
        if args.quick and args.splits is None:
            args.splits = available_splits(resolve_data_dir(args.data_dir) / spec.folder)[:1]
        rows = run_grid(spec, args, out_dir)
        fig = plot_grid(spec, rows, out_dir)
    summary = write_summary(spec, rows, out_dir, command, args.optimizer)
    print(summary)
    print(f"wrote {out_dir / 'results.csv'}, {out_dir / 'summary.md'}, {fig} in {time.perf_counter() - t0:.0f} s")
    return {"rows": rows, "out_dir": out_dir, "figure": fig, "summary": summary}


if __name__ == "__main__":
    main()
