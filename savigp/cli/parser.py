"""The ``savigp`` command's argparse parser: the commands, their options, help and examples."""
from __future__ import annotations

import argparse
import math

from .._choices import (DEFAULT_ENTROPY, DTYPES, ENTROPY_ESTIMATES, ESTIMATORS, INDUCING_INITS, KERNELS,
                        LIKELIHOODS, MEAN_HEADS, OPTIMIZERS, PARAMETER_GROUPS, POSTERIORS)

#: the largest magnitude of a count option (steps, samples, sizes: a C int) and the seeds' range (what
#: torch's and numpy's generators take)
MAX_COUNT, SEEDS = 2 ** 31 - 1, (0, 2 ** 63 - 1)


def _bounded(lo: int, hi: int):
    def parse(text: str) -> int:
        value = int(text)  # (a ValueError: argparse's "invalid integer value")
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{text[:20]}{'...' if len(text) > 20 else ''} is out of range "
                                             f"({lo} to {hi})")
        return value

    parse.__name__ = "integer"
    return parse


#: an integer option's type: a count, at most 2^31 - 1 in magnitude (a 400-digit --iterations overflowed
#: a float later, an internal error; the sign is checked with the option), or a seed
_count, _seed = _bounded(-MAX_COUNT, MAX_COUNT), _bounded(*SEEDS)


def _finite(text: str) -> float:
    """A real option's type: a finite float64 (``--lr 1e400`` is inf, which trained to NaN)."""
    value = float(text)  # (a ValueError: argparse's "invalid number value")
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text[:20]}{'...' if len(text) > 20 else ''} is not a finite number")
    return value


_finite.__name__ = "number"

EPILOG_MAIN = """\
examples:
  savigp demo
  savigp train data.csv --targets y --likelihood gaussian --out model.pt
  savigp train data.csv --targets label --likelihood logistic --num-inducing 50 \\
      --batch-size 200 --iterations 2000 --out clf.pt
  savigp predict model.pt test.csv --out predictions.csv
  savigp evaluate model.pt test.csv --targets y --json
  savigp report model.pt data.csv --out report.html

exit status: 0 ok, 2 bad input (one line on stderr), 1 failure while running, 3 the likelihood
returned NaN or inf (the line names the function, the file lines and the f values), 130 interrupted.
run 'savigp COMMAND --help' for the options of each command.
"""

EPILOG_TRAIN = """\
examples:
  # regression; every column but 'y' is an input; standardized inputs and targets; trained until
  # the ELBO stops rising (no --iterations: at most 20000 steps; here at most 10 minutes of rounds)
  savigp train data.csv --targets y --standardize-inputs --standardize-targets --time-budget 600 --out model.pt
  # binary classification with labels in {0, 1} or {-1, +1}, mini-batches of 200
  savigp train data.csv --targets label --likelihood logistic --batch-size 200 \\
      --iterations 3000 --out clf.pt
  # 10 classes (labels 0..9), a mixture of 2 diagonal Gaussians as posterior (by default in two
  # stages: a full Gaussian's kernel and likelihood, then q(u); --hypers joint: the paper's way)
  savigp train usps.csv --targets 0 --likelihood softmax --num-classes 10 \\
      --posterior diag --components 2 --out usps.pt
  # your own log-likelihood log_lik(y, f) in numpy or torch, with Q = 2 latent functions
  savigp train data.csv --targets 3 --likelihood my_lik.py:log_lik --num-latent 2 --out m.pt
  # ... with a learned keyword parameter log_lik(y, f, r=...) and predictive means from mean(f)
  savigp train counts.csv --targets n --likelihood nb.py:log_lik --lik-param r=3.0:positive \\
      --mean-function nb.py:mean --out nb.pt
  # ... a classifier: class probabilities from log_lik at each label 0..3
  savigp train grades.csv --targets g --likelihood ordinal.py:log_lik --task classification \\
      --num-classes 4 --lik-param cut=-1,0,1 --out ord.pt
  # ... or a Likelihood subclass, constructor arguments as --lik-option
  savigp train data.csv --targets y --likelihood my_lik.py:MyLikelihood --lik-option scale=2 --out m.pt
  # a composite kernel: a smooth trend plus a yearly cycle whose shape drifts, on the column 'time'
  savigp train co2.csv --targets ppm --kernel "rbf + periodic(time, period=1) * rbf(time) + white" \\
      --standardize-inputs --out co2.pt
  # checkpoint every 100 steps; after a crash or Ctrl-C continue with --resume
  savigp train big.csv --targets y --iterations 5000 --checkpoint-every 100 --out big.pt
  savigp train big.csv --targets y --iterations 5000 --checkpoint-every 100 --out big.pt --resume
  # a full Gaussian, then a 2-component diagonal mixture that learns only q(u) at its hyper-parameters
  savigp train data.csv --targets y --posterior full --optimizer lbfgs --iterations 100 --out fg.pt
  savigp train data.csv --targets y --posterior diag --components 2 --optimizer lbfgs --iterations 100 \\
      --warm-start fg.pt --learn posterior --out mog2.pt

columns: comma-separated header names, 0-based indices (negative from the end) or ranges a:b.
checkpoints are written to OUT.ckpt; the finished model replaces OUT atomically.
"""

EPILOG_PREDICT = """\
examples:
  savigp predict model.pt test.csv --out predictions.csv
  savigp predict model.pt test.csv --inputs x1,x2 --latent --out - | head
  savigp predict model.pt data.csv --parts --plot parts.png --out parts.csv

output columns: mean_<target>, var_<target> (predictive mean and variance of y, in the
original units; a user function has them with --mean-function, var_ only when it returns
the pair E[y|f], Var[y|f]), prob_<label> and predicted_<target> for classification, and
latent_mean_<j>, latent_var_<j> with --latent (or when the likelihood has no predictive
moments), part_mean_<term>, part_var_<term> with --parts (part_mean_<j>_<term> when Q > 1).
--plot FIT.png draws the fit for 1-D and 2-D inputs; with --parts, each part on its columns.
"""

EPILOG_REPORT = """\
examples:
  savigp report model.pt train.csv --out report.html
  savigp report model.pt train.csv --test test.csv --out report.html --samples 2000

the page holds: the model in words (each additive part of the kernel from its fitted values, the
likelihood), each part's share of the latent variance and its figure, the fit with the data, the
kernel search's table (when the model file keeps it), the training trace (when stored) and checks
of fit for any likelihood: randomized quantile residuals, the coverage of the 50/80/95% predictive
intervals (and on --test), and for discrete targets simulated against observed statistics.
Figures are embedded PNGs (needs matplotlib); the file opens offline. See docs/report.md.
"""

EPILOG_EVALUATE = """\
examples:
  savigp evaluate model.pt test.csv --targets y
  savigp evaluate clf.pt test.csv --targets label --json

metrics (Bonilla et al. 2019, sec. 9.1): regression: SSE (MSE / variance of the test targets), NLPD
(mean negative log predictive density, in the targets' original units); classification:
error rate and NLP (mean negative log probability of the true labels).
"""


def _add_csv_options(p) -> None:
    p.add_argument("--header", action=argparse.BooleanOptionalAction, default=None,
                   help="the first row is (--header) or is not (--no-header) a header (default: auto-detect)")
    p.add_argument("--delimiter", default=",", type=_delimiter,
                   help="field separator, one character (default ','; '\\t' or tab: a tab)")


def _delimiter(text: str) -> str:
    """``--delimiter``: one character; ``\\t`` (as typed, backslash and t) or ``tab`` is a tab."""
    text = "\t" if text in ("\\t", "tab") else text
    if len(text) != 1 or text in "\n\r\"":
        raise argparse.ArgumentTypeError(f"expected one character (a tab: '\\t'), not a line end or a quote, "
                                         f"got {text!r}")
    return text


def _add_column_options(p) -> None:
    p.add_argument("--positional", action="store_true",
                   help="take the model's columns by position when the file's names differ or it has no header "
                        "(default: by the training column names; a missing name is an error)")


def _add_model_and_data(p) -> None:
    """predict, evaluate: the model file and the CSV file, positional."""
    p.add_argument("model", metavar="MODEL.pt")
    p.add_argument("data", metavar="DATA.csv")


def _add_saved_input_options(p) -> None:
    """predict, evaluate: which columns are the saved model's inputs, and how the CSV file is read."""
    p.add_argument("--inputs", metavar="COLS", help="input columns (default: the training header names)")
    _add_column_options(p)
    _add_csv_options(p)


def _add_sampling_options(p, samples: int) -> None:
    """predict, evaluate: Monte Carlo samples (default ``samples``), seed and device."""
    p.add_argument("--samples", type=_count, default=samples, help=f"Monte Carlo samples (default {samples})")
    p.add_argument("--seed", type=_seed, default=0)
    p.add_argument("--device", default=None)
    _add_memory_option(p)


def _add_memory_option(p) -> None:
    p.add_argument("--max-memory", type=_finite, metavar="GIB",
                   help="refuse a model whose estimated memory exceeds this many GiB (default 8, or "
                        "SAVIGP_MAX_MODEL_BYTES bytes); see savigp.cost")


def _add_trust_options(p) -> None:
    p.add_argument("--likelihood", metavar="FILE.py[:FN]",
                   help="for a model trained with your own likelihood: run this file's function (also where the file "
                        "is now, if it moved; without :FN the recorded name). A model file never runs code by itself")
    p.add_argument("--mean-function", metavar="FILE.py[:FN]",
                   help="for a model trained with --mean-function in another file than the likelihood: run this one "
                        "(also where it is now; without :FN the recorded name)")
    p.add_argument("--trust-code", action="store_true",
                   help="run the user code the model file names (and a file changed since training)")


def _add_threads_option(p, default=None, chosen="1 for a small problem, else torch's capped at the cores idle now") -> None:
    p.add_argument("--threads", type=_count, default=default, metavar="T",
                   help=f"CPU threads for torch (default: {default}; see docs/cli.md, Threads)" if default else
                   f"CPU threads for torch (default: {chosen}; OMP_NUM_THREADS in the environment is respected; "
                   "see docs/cli.md, Threads)")


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of the ``savigp`` command (``args.command`` names the command)."""
    from .. import __version__

    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="savigp", formatter_class=fmt, epilog=EPILOG_MAIN,
        description="Scalable automated variational inference for Gaussian-process models with any likelihood (SAVIGP).")
    parser.add_argument("--version", action="version", version=f"savigp {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    # ---------------------------------------------------------------- train
    t = sub.add_parser("train", formatter_class=fmt, epilog=EPILOG_TRAIN, help="train a model on a CSV file",
                       description="Train a SAVIGP model on a CSV file and write it to --out.")
    t.add_argument("data", metavar="DATA.csv", help="training data, one row per point")
    t.add_argument("--targets", required=True, metavar="COLS", help="target column(s)")
    t.add_argument("--inputs", metavar="COLS", help="input columns (default: every non-target column)")
    _add_csv_options(t)
    t.add_argument("--out", required=True, metavar="MODEL.pt", help="model file to write")
    g = t.add_argument_group("likelihood")
    g.add_argument("--likelihood", default="gaussian", metavar="LIK",
                   help="built-in: " + ", ".join(LIKELIHOODS)
                   + "; or a function log_lik(y, f) as package.module:function or path/to/file.py:function "
                     "(default gaussian)")
    g.add_argument("--num-latent", type=_count, metavar="Q", help="latent functions read by a user function (default 1)")
    g.add_argument("--num-classes", type=_count, metavar="C", help="softmax, or a user function with --task classification: classes, labels 0..C-1 "
                        "(default: softmax: largest label + 1; user function: the distinct target values)")
    g.add_argument("--one-hot", action="store_true", help="softmax: targets are C one-hot columns")
    g.add_argument("--num-outputs", type=_count, metavar="P", help="multi-gaussian, gprn: outputs (default: target columns)")
    g.add_argument("--num-nodes", type=_count, metavar="Q'", help="gprn: latent node functions (default 1)")
    g.add_argument("--num-layers", type=_count, metavar="P", help="seismic: layers (default: target columns)")
    g.add_argument("--num-tanh", type=_count, metavar="I", help="warped: tanh terms of the warping (default 3)")
    g.add_argument("--df", type=_finite, help="student-t: degrees of freedom (default 4)")
    g.add_argument("--bin-width", type=_finite, help="poisson: width of each count's bin (default 1)")
    g.add_argument("--noise-variance", type=_finite, help="initial noise variance (gaussian, multi-gaussian, gprn, warped)")
    g.add_argument("--lik-option", action="append", metavar="KEY=VALUE",
                   help="any other constructor argument of the likelihood, e.g. depth_scale=10, or "
                        "differentiable=True for a torch user function (repeatable)")
    g.add_argument("--task", choices=("regression", "classification"),
                   help="user function: regression (default) or classification (labels: --num-classes C gives "
                        "0..C-1, else the distinct target values; class probabilities from the function)")
    g.add_argument("--mean-function", metavar="FILE.py:FN",
                   help="user function: E[y | f] as mean(f) (or the pair E[y | f], Var[y | f]) for predictive "
                        "means, SSE and MSE")
    g.add_argument("--lik-param", action="append", metavar="NAME=VALUE[:positive|:unit_interval|:fixed]",
                   help="user function: a keyword parameter of log_lik learned with the model (VALUE: a number or "
                        "comma-separated numbers; :positive keeps it > 0, :unit_interval in (0, 1), :fixed holds "
                        "it) (repeatable)")
    g.add_argument("--min-log-prob", type=_finite, metavar="L",
                   help="user function: replace -inf and values below L by L (for simulators whose density underflows)")
    g = t.add_argument_group("model")
    g.add_argument("--kernel", default="rbf", metavar="EXPR",
                   help="covariance: a family (" + ", ".join(KERNELS) + ") or an expression of them, e.g. "
                        "\"rbf + periodic(time, period=1) * rbf(time) + white\": + adds, * multiplies, scale(...) "
                        "learns a variance, a kernel reads the input columns it names (header names or 0-based "
                        "indices among the inputs; all when it names none), options are in the units of your "
                        "columns (docs/cli.md, Kernels); default rbf (ARD); search: the structure chosen by the "
                        "ELBO (savigp.search_kernels, Duvenaud et al. 2013), then trained")
    g.add_argument("--search-base", default="rbf,periodic,linear", metavar="NAMES",
                   help="--kernel search: the base families it combines (default rbf,periodic,linear)")
    g.add_argument("--search-max-terms", type=_count, default=3, metavar="N",
                   help="--kernel search: the most base kernels in an expression (default 3)")
    g.add_argument("--search-budget", type=_finite, default=600.0, metavar="SECONDS",
                   help="--kernel search: no candidate is started after this many seconds (default 600)")
    g.add_argument("--search-iterations", type=_count, default=500, metavar="STEPS",
                   help="--kernel search: Adam steps per candidate, extended while its ELBO rises (default 500)")
    g.add_argument("--fourier-features", type=_count, metavar="F",
                   help="inducing variables: the variational Fourier features of --kernel additive-matern (Hensman "
                        "et al. 2018), F frequencies per input (M = D (2F + 1)); with --mean-basis-size G: ODVFF "
                        "(Azzimonti et al. 2020)")
    g.add_argument("--shared-kernel", action="store_true",
                   help="one kernel and one set of inducing inputs for all latent functions (K_zz factorized once "
                        "per step instead of Q times; posterior full or diag)")
    g.add_argument("--num-inducing", type=_count, metavar="M", help="inducing points per latent function (default min(N, 100))")
    g.add_argument("--inducing-init", choices=INDUCING_INITS, default="kmeans", help="initial inducing inputs")
    g.add_argument("--dense", action="store_true", help="inducing inputs = all training inputs, fixed (small N only)")
    g.add_argument("--fixed-inducing", action="store_true", help="do not learn the inducing inputs")
    g.add_argument("--posterior", choices=POSTERIORS, type=POSTERIORS.resolve, default="full",
                   help="full Gaussian components; diag: diagonal in whitened coordinates (as GPflow's q_diag and "
                        "GPyTorch's mean field; intervals as the full Gaussian's; diag-whitened before); diag-u: the "
                        "paper's diagonal components over u (mog; diag before; mean-field variances, narrower "
                        "intervals on dense models); joint: one Gaussian coupled across the latent functions (K = 1; "
                        "for likelihoods that couple them, moderate Q * M)")
    g.add_argument("--components", type=_count, default=1, metavar="K", help="mixture components (default 1)")
    g.add_argument("--hypers", choices=("two-stage", "joint"),
                   help="diag, diag-u: how the kernel and likelihood are learned. two-stage (the default): "
                        "fit a full Gaussian (--posterior full, K = 1) with the same options first, then the "
                        "factorized q(u) at its kernel, likelihood and inducing inputs; joint: with the factorized "
                        "q(u) on its own ELBO (the paper's mog; biased towards a worse fit, see docs/mixtures.md)")
    g.add_argument("--max-components", type=_count, metavar="KMAX",
                   help="choose K up to KMAX by the full-data ELBO (savigp.choose_components: starting from "
                        "--components, K grows while the ELBO gains more than 2 Monte Carlo standard errors; a birth "
                        "and two restarts per K, each trained with the run's options); prints the ELBO per K. Not "
                        "with --resume, --checkpoint-every or --nproc")
    g.add_argument("--entropy", choices=ENTROPY_ESTIMATES, default=DEFAULT_ENTROPY,
                   help="entropy term of a mixture with K > 1: pairwise (default: Kolchinsky & Tracey's "
                        "Bhattacharyya bound, exact for coinciding and for separate components, so ELBOs of "
                        "different K compare), bound (the paper's eq. (18), 0.153 Q M nats loose) or mc "
                        "(Monte Carlo, unbiased)")
    g.add_argument("--prior-mean", metavar="MU", help="constant prior mean: one number or Q comma-separated")
    g.add_argument("--learn-prior-mean", action="store_true", help="learn the prior means")
    g.add_argument("--mean-basis-size", type=_count, default=0, metavar="G",
                   help="orthogonally decoupled mean basis per latent function (Salimbeni et al. 2018; 0 = off)")
    g.add_argument("--mean-basis", choices=MEAN_HEADS, default="orthogonal",
                   help="how the mean basis of --mean-basis-size enters (savigp.mean_heads): orthogonal (Salimbeni et al. 2018), "
                        "decoupled (Cheng & Boots 2017) or hybrid (Salimbeni et al. 2018, eq. (10))")
    g.add_argument("--standardize-inputs", action="store_true", help="train on standardized inputs (undone at prediction)")
    g.add_argument("--standardize-targets", action="store_true",
                   help="train on standardized targets; means, variances and densities are reported in the original units")
    g.add_argument("--dtype", choices=DTYPES, default="float64")
    g.add_argument("--device", default=None, help="cpu, cuda, cuda:1, ... (default cpu)")
    g.add_argument("--seed", type=_seed, default=0, help="seeds initialization, mini-batches and Monte Carlo draws")
    g = t.add_argument_group("training")
    g.add_argument("--iterations", type=_count,
                   help="a fixed run of this many optimizer steps (default: train until the ELBO has stopped "
                        "rising, at most 20000 steps; see --until-converged)")
    g.add_argument("--epochs", type=_finite, help="alternatively, a fixed run of this many passes over the data")
    g.add_argument("--until-converged", action="store_true",
                   help="train until the ELBO has stopped rising (its trend over the last quarter of the path "
                        "and its full-data gain over the last round within their Monte Carlo noise; savigp.fit "
                        "without iterations), at most --iterations steps (default 20000), then a deterministic "
                        "L-BFGS polish where the data fit in memory. The default when neither --iterations nor "
                        "--epochs is given; with --iterations N it makes N the cap instead of the run's length")
    g.add_argument("--time-budget", type=_finite, metavar="SECONDS",
                   help="a run to convergence: start no further round of steps after this many seconds (the "
                        "model is saved, still rising, and the summary line says so); not with a fixed "
                        "--iterations or --epochs")
    g.add_argument("--batch-size", type=_count, metavar="B", help="mini-batch size (default all rows; lbfgs: all rows)")
    g.add_argument("--optimizer", choices=OPTIMIZERS, default="adam")
    g.add_argument("--lr", type=_finite, help="learning rate (default: adam 0.01, adadelta 1, lbfgs 1)")
    g.add_argument("--samples", type=_count, default=100, metavar="S", help="Monte Carlo samples per point (default 100)")
    g.add_argument("--estimator", choices=ESTIMATORS, default="auto",
                   help="expected log-likelihood estimator (default auto: closed form, else reparam, else score)")
    g.add_argument("--warm-start", metavar="SOURCE.pt",
                   help="start from this fitted model file (a full or diag posterior, K = 1): its kernel, likelihood, "
                        "inducing inputs and prior mean, and q(u) from its moments; it must have the same likelihood, "
                        "columns and --standardize-* choices (its statistics are reused); M is the source's, and "
                        "--num-inducing or --dense, if given, must agree with it. The file never runs code by "
                        "itself (a user likelihood runs from this run's --likelihood)")
    g.add_argument("--learn", metavar="GROUPS",
                   help="train only these comma-separated parameter groups: " + ", ".join(PARAMETER_GROUPS)
                        + " (default all); e.g. --warm-start fg.pt --learn posterior learns q(u) at the source's "
                          "kernel, likelihood and inducing inputs")
    g.add_argument("--checkpoint-every", type=_count, metavar="N", help="write OUT.ckpt every N steps")
    g.add_argument("--resume", action="store_true", help="continue from OUT.ckpt (or OUT) with the same options")
    g.add_argument("--trust-code", action="store_true",
                   help="with --resume or --warm-start: run the --likelihood (and --mean-function) file even though "
                        "it changed since the checkpoint (the source) was trained")
    g.add_argument("--quiet", action="store_true", help="no progress bar (the one-line summary is still printed)")
    g.add_argument("--plot", metavar="ELBO.png", help="draw the ELBO per step to this image (needs matplotlib)")
    g.add_argument("--nproc", type=_count, metavar="R",
                   help="train data-parallel on R processes of this machine (started as torchrun would; see docs/cli.md)")
    g.add_argument("--dist-timeout", type=_finite, metavar="SEC",
                   help="data-parallel: seconds a rank waits for the others before failing (default 300)")
    _add_memory_option(g)
    _add_threads_option(g)

    # ---------------------------------------------------------------- predict
    p = sub.add_parser("predict", formatter_class=fmt, epilog=EPILOG_PREDICT, help="predict at the rows of a CSV file",
                       description="Write predictive means and variances (and class probabilities) for each row.")
    _add_model_and_data(p)
    p.add_argument("--out", default="-", metavar="PRED.csv", help="output CSV (default '-': standard output)")
    _add_saved_input_options(p)
    p.add_argument("--latent", action="store_true", help="also write the latent functions' means and variances")
    p.add_argument("--parts", action="store_true",
                   help="also write the posterior mean and variance of each additive part of the kernel (its terms, "
                        "part_mean_<term>, part_var_<term>); with --plot, draw the parts instead of the fit (any "
                        "number of inputs)")
    _add_sampling_options(p, samples=500)
    p.add_argument("--quiet", action="store_true")
    _add_trust_options(p)
    p.add_argument("--plot", metavar="FIT.png",
                   help="draw the fit (1-D or 2-D inputs; the file's targets overlaid when it has them; needs matplotlib)")
    _add_threads_option(p)

    # ---------------------------------------------------------------- evaluate
    e = sub.add_parser("evaluate", formatter_class=fmt, epilog=EPILOG_EVALUATE, help="the paper's metrics on a CSV file",
                       description="Evaluate a model on labelled data: SSE and NLPD, or error rate and NLP.")
    _add_model_and_data(e)
    e.add_argument("--targets", metavar="COLS", help="target column(s) (default: the training target names)")
    _add_saved_input_options(e)
    e.add_argument("--json", action="store_true", help="print a JSON object instead of a table")
    _add_sampling_options(e, samples=1000)
    _add_trust_options(e)
    _add_threads_option(e)

    # ---------------------------------------------------------------- report
    r = sub.add_parser("report", formatter_class=fmt, epilog=EPILOG_REPORT,
                       help="an HTML report of a fitted model on its data",
                       description="Write one self-contained HTML page describing a fitted model on its training data: "
                                   "the model in words, its parts, the fit and checks of fit.")
    _add_model_and_data(r)
    r.add_argument("--out", required=True, metavar="REPORT.html", help="the HTML file to write")
    r.add_argument("--targets", metavar="COLS", help="target column(s) (default: the training target names)")
    r.add_argument("--test", metavar="TEST.csv", help="test data (same columns): their intervals' coverage too")
    r.add_argument("--title", help="the page's title (default: the model's kernel)")
    _add_saved_input_options(r)
    _add_sampling_options(r, samples=1000)
    r.add_argument("--quiet", action="store_true")
    _add_trust_options(r)
    _add_threads_option(r)

    # ---------------------------------------------------------------- demo
    d = sub.add_parser("demo", formatter_class=fmt, help="train two small models on generated data",
                       description="Train and evaluate a 1-D Gaussian regression and a 2-D logistic classification "
                                   "on generated data (a few seconds each), through the same CSV/model-file path "
                                   "as train and evaluate.",
                       epilog="example:\n  savigp demo\n  savigp demo --dir demo_files   # keep the CSVs and models\n")
    d.add_argument("--dir", help="folder for the generated CSVs and models (default: a temporary folder)")
    d.add_argument("--seed", type=_seed, default=0)
    d.add_argument("--quiet", action="store_true", help="no progress bars")
    _add_threads_option(d, default=1)
    return parser
