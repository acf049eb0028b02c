"""The ``savigp`` command line: ``train``, ``predict``, ``evaluate`` and ``demo``.

    savigp train DATA.csv --targets y --likelihood gaussian --out model.pt
    savigp predict model.pt TEST.csv --out predictions.csv
    savigp evaluate model.pt TEST.csv --targets y [--json]
    savigp demo

Exit status: 0 success; 2 bad input (files, columns, labels, options; one line on stderr naming
the file, line and column); 1 a failure while running (e.g. training diverged); 3 the likelihood
returned NaN or inf (a model problem: the line names the function, the data file's lines and the
f values); 130 interrupted (Ctrl-C; ``train`` first writes a checkpoint that ``--resume``
continues from).

Model files are written atomically (a temporary file in the same folder, fsync, ``os.replace``),
so a failed or interrupted run never truncates or overwrites an existing model. Checkpoints go to
``MODEL.ckpt`` next to ``--out MODEL``; the finished model replaces ``MODEL`` and the checkpoint is
removed. See docs/cli.md.
"""
from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import math
import os
import re
import signal
import sys
import tempfile
import time
from typing import Optional

import numpy as np

from .output_paths import check_output_path, remove_orphaned_temporaries
from .csv_data import (DataError, Table, columns_by_name, data_checksum, read_csv, resolve_columns, split_columns,
                       write_csv)
from .cli_user import file_lines_in_errors
from .user_likelihood import USER_KINDS

EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
#: the likelihood returned NaN or inf (a model problem, not bad input)
EXIT_NON_FINITE = 3

#: environment variable (tests only): after this many completed steps, ``train`` sends itself
#: SIGINT, exactly as a Ctrl-C would.
TEST_SIGINT_ENV = "SAVIGP_CLI_TEST_SIGINT_AFTER"

#: built-in likelihood names -> (class in :mod:`likelihoods`, module file defining it)
LIKELIHOODS = {
    "gaussian": ("Gaussian", "gaussian"),
    "logistic": ("Logistic", "logistic"),
    "softmax": ("Softmax", "softmax"),
    "poisson": ("Poisson", "poisson"),
    "warped": ("WarpedGaussian", "warped"),
    "student-t": ("StudentT", "student_t"),
    "gprn": ("GPRN", "gprn"),
    "seismic": ("Seismic", "seismic"),
    "multi-gaussian": ("MultiGaussian", "multi_gaussian"),
}
#: likelihoods whose targets may be standardized (real-valued, location-scale)
STANDARDIZABLE = ("gaussian", "student-t", "warped", "multi-gaussian", "gprn")
#: likelihood-specific options -> the likelihoods they apply to
LIKELIHOOD_OPTIONS = {
    "num_latent": ("callable",),
    "num_classes": ("softmax", "callable"),
    "task": ("callable",),
    "mean_function": ("callable",),
    "lik_param": ("callable",),
    "min_log_prob": ("callable",),
    "one_hot": ("softmax",),
    "num_outputs": ("multi-gaussian", "gprn"),
    "num_nodes": ("gprn",),
    "num_layers": ("seismic",),
    "num_tanh": ("warped",),
    "df": ("student-t",),
    "bin_width": ("poisson",),
    "noise_variance": ("gaussian", "multi-gaussian", "gprn", "warped"),
}
#: options of ``train`` that a resumed run must repeat unchanged (iterations/epochs may grow)
RESUME_KEYS = (
    "likelihood", "num_latent", "num_classes", "one_hot", "num_outputs", "num_nodes",
    "num_layers", "num_tanh", "df", "bin_width", "noise_variance", "lik_option", "task", "mean_function",
    "lik_param", "min_log_prob", "kernel", "num_inducing",
    "inducing_init", "dense", "fixed_inducing", "posterior", "components", "prior_mean", "learn_prior_mean",
    "mean_basis_size", "mean_basis", "standardize_inputs", "standardize_targets", "dtype", "seed", "batch_size", "optimizer",
    "lr", "samples", "estimator",
)
DEFAULT_LR = {"adam": 0.01, "adadelta": 1.0, "lbfgs": 1.0}
#: why ``train`` used an estimator (printed with its name)
ESTIMATOR_WHY = {
    "closed-form": "the likelihood's exact expected log-likelihood",
    "reparam": "gradients through f: the likelihood is differentiable",
    "score": "values of the likelihood only, with control variates",
    "score-nocv": "values of the likelihood only, no control variates",
    "quadrature": "Gauss-Hermite quadrature of the likelihood's values",
}


class CLIError(ValueError):
    """A bad command line or input; reported as one line, exit status 2."""


class UserCodeExit(RuntimeError):
    """User code (a likelihood function) called ``sys.exit`` or raised ``KeyboardInterrupt`` itself:
    a failure of that function (exit status 1), not the end of the command."""


# ====================================================================== helpers
def _one_line(err: BaseException) -> str:
    msg = " ".join(str(err).split()) or type(err).__name__
    return msg


def _available_likelihoods() -> list:
    """Built-in names whose module exists in the installed :mod:`likelihoods` package."""
    spec = importlib.util.find_spec("likelihoods")
    folders = list(spec.submodule_search_locations or []) if spec else []
    return [name for name, (_, mod) in LIKELIHOODS.items()
            if any(os.path.exists(os.path.join(f, mod + ".py")) for f in folders)]


def _parse_floats(text: Optional[str], option: str):
    if text is None:
        return None
    try:
        vals = [float(v) for v in str(text).split(",")]
    except ValueError:
        raise CLIError(f"{option}: expected a number or comma-separated numbers, got {text!r}") from None
    if not all(math.isfinite(v) for v in vals):
        raise CLIError(f"{option}: values must be finite, got {text!r}")
    return vals[0] if len(vals) == 1 else vals


def _parse_lik_options(items) -> dict:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key.isidentifier():
            raise CLIError(f"--lik-option: expected KEY=VALUE (e.g. depth_scale=10), got {item!r}")
        try:
            out[key] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            out[key] = value.strip()
    return out


def _output_path(path: str, inputs: list, quiet: bool, allow_stdout: bool = False) -> str:
    """``--out`` checked (see :mod:`savigp.output_paths`); a symlink's target, said on stderr."""
    target = check_output_path(path, "--out", inputs=inputs, allow_stdout=allow_stdout)
    if target != "-" and os.path.islink(path) and not quiet:
        print(f"note: --out {path} is a symbolic link; writing to its target {target}", file=sys.stderr)
    return target


def _check_plot_option(path: Optional[str], inputs: list, outputs: list) -> Optional[str]:
    """``--plot PATH`` checked as ``--out`` is (see :mod:`savigp.output_paths`; never one of the
    command's ``inputs`` nor its other ``outputs``), and matplotlib installed, before any long
    work; the path to write (a symlink's target)."""
    if not path:
        return None
    target = check_output_path(path, "--plot", inputs=inputs)
    if target in outputs:
        raise CLIError(f"--plot {path}: is also where --out writes ({target}); give the picture its own file")
    from .plotting import MissingExtra, require_matplotlib

    try:
        require_matplotlib()
    except MissingExtra as err:
        raise CLIError(f"--plot: {err}") from None
    return target


def _check_device(device: Optional[str]) -> None:
    import torch

    if device:
        try:
            torch.device(device)
        except (RuntimeError, ValueError) as err:
            raise CLIError(f"--device {device!r}: not a device ({_one_line(err).split(':')[0]}); use cpu, cuda, "
                           "cuda:1, ...") from None
    if device and str(device).startswith("cuda") and not torch.cuda.is_available():
        raise CLIError(f"--device {device}: CUDA is not available on this machine")


def _check_samples(samples: int) -> None:
    if samples < 1:
        raise CLIError(f"--samples must be >= 1, got {samples}")


def _is_builtin(name: str) -> bool:
    return name in LIKELIHOODS


def _likelihood_spec(args, Y: np.ndarray) -> dict:
    """The ``config["likelihood"]`` entry for ``--likelihood`` and its options (plain values)."""
    from .serialization import canonical_import_path

    name = args.likelihood
    is_callable = not _is_builtin(name)
    kind = "callable" if is_callable else name
    if is_callable and ":" not in name:
        raise CLIError(f"--likelihood {name!r}: not a built-in likelihood ({', '.join(_available_likelihoods())}) "
                       "nor a user function 'package.module:function' or 'path/to/file.py:function'")
    for opt, applies in LIKELIHOOD_OPTIONS.items():
        value = getattr(args, opt, None)
        if value not in (None, False) and kind not in applies:
            raise CLIError(f"--{opt.replace('_', '-')} does not apply to --likelihood {name} "
                           f"(it is for: {', '.join(applies)})")
    P = Y.shape[1]
    extra = _parse_lik_options(args.lik_option)
    if is_callable:
        from .cli_user import user_likelihood_spec

        return user_likelihood_spec(args, Y, canonical_import_path(name), extra)
    cls_name = LIKELIHOODS[name][0]
    kwargs: dict = {}
    if args.noise_variance is not None:
        kwargs["variance"] = float(args.noise_variance)
    if name == "softmax":
        if args.num_classes is not None:
            C = int(args.num_classes)
        elif args.one_hot:
            C = P
        else:
            labels = Y[:, 0]
            ints = labels[(labels >= 0) & (labels == np.round(labels))]
            C = max(2, int(ints.max()) + 1) if ints.size else 2
        kwargs.update(num_classes=C, one_hot=bool(args.one_hot))
    elif name in ("multi-gaussian", "gprn"):
        kwargs["num_outputs"] = int(args.num_outputs) if args.num_outputs is not None else P
        if name == "gprn" and args.num_nodes is not None:
            kwargs["num_nodes"] = int(args.num_nodes)
    elif name == "seismic":
        kwargs["num_layers"] = int(args.num_layers) if args.num_layers is not None else P
    elif name == "warped" and args.num_tanh is not None:
        kwargs["num_tanh"] = int(args.num_tanh)
    elif name == "student-t" and args.df is not None:
        kwargs["df"] = float(args.df)
    elif name == "poisson" and args.bin_width is not None:
        kwargs["bin_width"] = float(args.bin_width)
    kwargs.update(extra)
    return {"name": name, "class": cls_name, "kwargs": kwargs}


def _make_likelihood(spec: dict):
    """Construct the likelihood; a constructor's complaint becomes a one-line CLIError."""
    import likelihoods

    from .serialization import make_likelihood

    if spec["name"] not in USER_KINDS and getattr(likelihoods, spec["class"], None) is None:
        raise CLIError(f"--likelihood {spec['name']}: class likelihoods.{spec['class']} is not available in this "
                       f"installation (available: {', '.join(_available_likelihoods())})")
    try:
        return make_likelihood(spec)
    except TypeError as err:
        raise CLIError(f"--likelihood {spec['name']}: bad option(s) {spec.get('kwargs')}: {_one_line(err)}") from None
    except ValueError as err:
        if type(err).__name__ == "LikelihoodImportError":
            raise
        raise CLIError(f"--likelihood {spec['name']}: {_one_line(err)}") from None


def _code_paths(spec: dict) -> dict:
    """What a likelihood spec runs: its name, import path and those of its ``code_kwargs``."""
    return {"name": spec.get("name"), "import_path": spec.get("import_path"),
            "code": {k: (v or {}).get("import_path") for k, v in (spec.get("code_kwargs") or {}).items()}}


def _describe_code(spec: dict) -> str:
    text = spec.get("import_path") or spec.get("name")
    mean = ((spec.get("code_kwargs") or {}).get("mean_fn") or {}).get("import_path")
    return f"{text} (--mean-function {mean})" if mean else str(text)


def _validate_targets(likelihood, Y, table: Table, tcols: list) -> None:
    """``likelihood.validate_targets(Y)``, re-raised as a DataError naming the first bad line.

    ``Y`` is the tensor ``(N, P)`` given to the model; rows are in file order, so the first bad
    row is found by bisection on prefixes (O(log N) validations), and "row k" in the likelihood's
    message is rewritten as the file's line number.
    """
    try:
        likelihood.validate_targets(Y)
        return
    except ValueError as err:
        msg = _one_line(err)
    lo, hi = 0, Y.shape[0]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            likelihood.validate_targets(Y[:mid])
            lo = mid
        except ValueError:
            hi = mid
    N = Y.shape[0]
    msg = re.sub(r"\brow (\d+)\b",
                 lambda m: f"line {int(table.lines[int(m.group(1))])}" if int(m.group(1)) < N else m.group(0), msg)
    raise DataError(f"{table.where(hi - 1, tcols)}: {msg}")


def _probe_callable(likelihood, Y, spec: dict) -> None:
    """Call a user likelihood once on 3 rows and 2 samples; a failure or wrong shape -> CLIError."""
    import torch

    y = Y[:3]
    Q = likelihood.num_latent
    f = 0.1 * torch.randn(2, y.shape[0], Q, generator=torch.Generator().manual_seed(0), dtype=torch.float64).to(y)
    try:
        out = likelihood.log_prob(y, f)
    except ValueError as err:
        raise CLIError(f"--likelihood {spec['import_path']}: {_one_line(err)}") from None
    except (Exception, SystemExit) as err:  # (sys.exit in the function is its failure too)
        raise CLIError(f"--likelihood {spec['import_path']}: the function failed when called with y of shape "
                       f"{tuple(y.shape)} and f of shape {tuple(f.shape)} (Q = --num-latent {Q}): "
                       f"{type(err).__name__}: {_one_line(err)}") from None
    if not bool(torch.isfinite(out).all()):  # exit 3 with the rows and f values (see cmd_train)
        from .nonfinite import non_finite_error

        raise non_finite_error(likelihood, y, f, out)


def _select_inputs(table: Table, config: dict, inputs: Optional[str], exclude=(), positional: bool = False) -> list:
    """Input columns of a predict/evaluate file for a model trained on ``config["columns"]``:
    ``--inputs`` if given; else by the training header's names (every one must be there); a model
    trained without a header reads the same column indices from a file of the same width; by
    position (the recorded indices, or every non-target column) only with ``--positional``."""
    D = int(config["model"]["input_dim"])
    cols = config.get("columns") or {}
    trained = cols.get("inputs") or []
    if inputs is not None:
        icols = resolve_columns(inputs, table, "--inputs")
        bad = [j for j in icols if j in exclude]
        if bad:
            raise DataError(f"column {table.column_label(bad[0])} of {table.path} is both an input and a target")
    elif cols.get("header") and not positional:
        icols = columns_by_name(table, trained, "input", "--inputs")
    elif cols and not cols.get("header") and table.header is not None and not positional:
        raise DataError(f"{table.path}: has a header ({', '.join(map(repr, table.header))}) but the model was trained "
                        f"on a file without one (input columns {cols.get('input_indices')}); name the columns with "
                        "--inputs, or pass --positional to take them by position")
    elif cols and (positional or not cols.get("header")) and table.num_columns == cols.get("num_columns") \
            and not set(cols.get("input_indices", [])) & set(exclude):
        icols = list(cols["input_indices"])
    elif positional:
        icols = [j for j in range(table.num_columns) if j not in exclude]
    else:
        raise DataError(f"{table.path}: cannot tell which of its {table.num_columns} column(s) are the model's "
                        f"{D} input(s) ({'trained on columns ' + ', '.join(map(str, trained)) if trained else 'the model records no column names'}); "
                        "name them with --inputs, or pass --positional to take them by position")
    if len(icols) != D:
        raise DataError(f"{table.path}: {len(icols)} input column(s) selected but the model takes {D} "
                        f"(trained on columns {', '.join(map(str, trained)) or '?'})")
    return icols


def _select_targets(table: Table, config: dict, targets: Optional[str], positional: bool = False) -> list:
    cols = config.get("columns") or {}
    P = len(config.get("example_target") or [0])
    if targets is not None:
        tcols = resolve_columns(targets, table, "--targets")
    elif cols.get("header") and not positional:
        tcols = columns_by_name(table, cols.get("targets") or [], "target", "--targets")
    elif cols and not cols.get("header") and table.header is not None and not positional:
        raise DataError(f"{table.path}: has a header ({', '.join(map(repr, table.header))}) but the model was trained "
                        f"on a file without one (target columns {cols.get('target_indices')}); name them with "
                        "--targets, or pass --positional")
    elif cols and table.num_columns == cols.get("num_columns"):
        tcols = list(cols["target_indices"])
    else:
        trained = ", ".join(map(str, cols.get("targets") or [])) or "no names recorded"
        raise DataError(f"{table.path}: give the target column(s) with --targets (the model was trained on {trained})")
    if len(tcols) != P:
        raise DataError(f"{table.path}: --targets selects {len(tcols)} column(s) but the model predicts {P}")
    return tcols


def _label_name(v) -> str:
    v = float(v)
    return str(int(v)) if v == int(v) else repr(v)


# ====================================================================== train
def _training_options(args) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(args).items() if k in RESUME_KEYS}


def _train_default(key: str):
    """The parser's default of ``train``'s option ``key`` (as :func:`_training_options` records it)."""
    import argparse

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    value = sub.choices["train"].get_default(key)
    return list(value) if isinstance(value, tuple) else value


def _resume_source(out: str, ckpt: str) -> Optional[str]:
    if os.path.exists(ckpt):
        return ckpt
    if os.path.exists(out):
        return out
    return None


def _launch_ranks(args) -> int:
    """``train --nproc N``: run this same command as N ranks on this machine under ``torchrun``
    (static rendezvous on the loopback address, a free port), and return its exit status."""
    import socket
    import subprocess

    argv, rest = [], list(args.argv)
    while rest:
        a = rest.pop(0)
        if a == "--nproc":
            rest.pop(0)
        elif not a.startswith("--nproc="):
            argv.append(a)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--node-rank", "0",
           "--nproc-per-node", str(args.nproc), "--master-addr", "127.0.0.1", "--master-port", str(port),
           "-m", "savigp", *argv]
    env = dict(os.environ)
    if args.threads is None and "OMP_NUM_THREADS" not in env:  # torchrun would set 1 and warn
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // args.nproc))
    proc = subprocess.Popen(cmd, env=env)
    # A terminal's Ctrl-C reaches torchrun too, which then stops the ranks with SIGTERM (each checkpoints
    # as after Ctrl-C): wait for it rather than die first; a SIGTERM sent to this process is passed on.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    previous_term = signal.signal(signal.SIGTERM, lambda signum, frame: proc.send_signal(signal.SIGTERM))
    try:
        return proc.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGTERM, previous_term)


def _join_ranks(args) -> int:
    """Under ``torchrun``: join the process group (gloo, or NCCL for ``--device cuda``, which then
    means ``cuda:LOCAL_RANK``) and return this rank; 0 in one process."""
    from . import distributed

    if not distributed.launched():
        return 0
    if args.device and args.device == "cuda":
        args.device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
    distributed.init_from_env(args.device or "cpu", timeout=args.dist_timeout)
    return distributed.rank()


def cmd_train(args) -> int:
    """``savigp train``: read, validate, build, fit (with checkpoints), write the model atomically.
    Under ``torchrun`` every rank trains its share of each mini-batch and rank 0 alone prints and
    writes checkpoints and the model."""
    if args.nproc is not None and args.nproc < 1:
        raise CLIError(f"--nproc must be >= 1, got {args.nproc}")
    if args.dist_timeout is not None and not args.dist_timeout > 0:
        raise CLIError(f"--dist-timeout must be > 0 seconds, got {args.dist_timeout}")
    from .distributed import finish, launched

    if args.nproc is not None and args.nproc > 1 and not launched():
        return _launch_ranks(args)
    quiet = args.quiet
    if args.iterations is not None and args.epochs is not None:
        raise CLIError("give --iterations or --epochs, not both")
    for opt in ("iterations", "checkpoint_every", "samples", "batch_size", "num_inducing", "components"):
        v = getattr(args, opt)
        if v is not None and v < (0 if opt == "iterations" else 1):
            raise CLIError(f"--{opt.replace('_', '-')} must be {'>= 0' if opt == 'iterations' else '>= 1'}, got {v}")
    if args.epochs is not None and not args.epochs > 0:
        raise CLIError(f"--epochs must be > 0, got {args.epochs}")
    if args.lr is not None and not args.lr > 0:
        raise CLIError(f"--lr must be > 0, got {args.lr}")
    out = _output_path(args.out, [args.data], args.quiet)
    ckpt = check_output_path(out + ".ckpt", "--out (its checkpoint)", inputs=[args.data])
    plot = _check_plot_option(args.plot, [args.data], [out, ckpt])
    for stale in remove_orphaned_temporaries(out) + remove_orphaned_temporaries(ckpt):
        if not quiet:
            print(f"removed {stale}, a temporary file left by an interrupted write", file=sys.stderr)
    if args.mean_basis_size and importlib.util.find_spec("savigp.decoupled") is None:
        raise CLIError("--mean-basis-size needs savigp.decoupled (the orthogonally decoupled mean head), "
                       "which this installation does not have")

    # ---- data (numpy only)
    table = read_csv(args.data, header=args.header, delimiter=args.delimiter)
    icols, tcols = split_columns(table, args.targets, args.inputs)
    X, Y = table.values[:, icols], table.values[:, tcols]
    N = X.shape[0]
    if not args.dense and args.num_inducing is not None and args.num_inducing > N:
        raise DataError(f"{table.path}: has {N} data row(s), fewer than --num-inducing {args.num_inducing} "
                        "(the number of inducing points cannot exceed the number of rows)")
    if args.batch_size is not None and args.batch_size > N:
        raise DataError(f"{table.path}: has {N} data row(s), fewer than --batch-size {args.batch_size}")

    import torch

    from .serialization import SavedModel, build_model, load_model, standardization_stats
    from .training import default_log_every, fit

    _check_device(args.device)
    rank = _join_ranks(args)
    quiet = quiet or rank != 0

    # ---- likelihood and targets
    spec = _likelihood_spec(args, Y)
    likelihood = _make_likelihood(spec)
    if likelihood.output_dim != Y.shape[1]:
        raise DataError(f"{table.where(None, tcols)}: --targets selects {Y.shape[1]} column(s) but the "
                        f"{args.likelihood} likelihood takes {likelihood.output_dim}")
    if args.standardize_targets and spec["name"] in USER_KINDS:
        raise CLIError(f"--standardize-targets does not apply to a user likelihood ({args.likelihood}): it "
                       "receives y in the file's units and its f means what it says in those units (standardized "
                       "targets would leave every latent function in standardized units); scale inside the "
                       "function, or set --prior-mean")
    if args.standardize_targets and spec["name"] not in STANDARDIZABLE:
        raise CLIError(f"--standardize-targets applies to real-valued targets ({', '.join(STANDARDIZABLE)}), "
                       f"not to --likelihood {args.likelihood}")
    in_stats = standardization_stats(X) if args.standardize_inputs else None
    out_stats = standardization_stats(Y) if args.standardize_targets else None
    Xm = X if in_stats is None else (X - np.asarray(in_stats["mean"])) / np.asarray(in_stats["std"])
    Ym = Y if out_stats is None else (Y - np.asarray(out_stats["mean"])) / np.asarray(out_stats["std"])
    Yt = torch.as_tensor(Ym, dtype=torch.float64)
    _validate_targets(likelihood, Yt, table, tcols)
    if spec["name"] == "callable":
        with file_lines_in_errors(table):
            _probe_callable(likelihood, Yt, spec)
    if spec["name"] in USER_KINDS:
        from .cli_user import warn_unused_latents

        warn_unused_latents(likelihood, Yt, spec)

    # ---- options and configuration
    optimizer = args.optimizer
    lr = args.lr if args.lr is not None else DEFAULT_LR[optimizer]
    B = N if (args.batch_size is None or optimizer == "lbfgs") else int(args.batch_size)
    if args.iterations is not None:
        total = int(args.iterations)
    elif args.epochs is not None:
        total = max(1, int(math.ceil(args.epochs * N / B)))
    else:
        total = 500
    model_options = {
        "kernel": args.kernel, "num_inducing": args.num_inducing, "inducing_init": args.inducing_init,
        "dense": args.dense, "learn_inducing": not args.fixed_inducing, "posterior": args.posterior,
        "num_components": args.components, "prior_mean": _parse_floats(args.prior_mean, "--prior-mean"),
        "learn_prior_mean": args.learn_prior_mean, "mean_basis_size": args.mean_basis_size or 0,
        "mean_basis": args.mean_basis, "dtype": args.dtype, "device": args.device, "seed": args.seed,
    }
    if likelihood.task == "classification":
        if spec["name"] == "logistic":
            class_labels = [-1.0 if bool((Y == -1).any()) else 0.0, 1.0]
        elif getattr(likelihood, "classes", None) is not None:  # a user function's label set
            class_labels = [float(c) for c in likelihood.classes]
        elif "num_classes" in spec["kwargs"]:
            class_labels = [float(c) for c in range(int(spec["kwargs"]["num_classes"]))]
        else:  # a user Likelihood subclass: classes 0..C-1 in its own order
            class_labels = None
    else:
        class_labels = None
    config = {
        "model_options": {k: model_options[k] for k in ("kernel", "inducing_init", "seed", "dtype", "prior_mean")},
        "likelihood": spec,
        "standardize": {"inputs": in_stats, "targets": out_stats},
        "example_target": [float(v) for v in Ym[0]],
        "class_labels": class_labels,
        "columns": {"header": table.header is not None, "num_columns": table.num_columns,
                    "inputs": table.names(icols), "targets": table.names(tcols),
                    "input_indices": list(icols), "target_indices": list(tcols)},
        "training": {"data": os.path.abspath(args.data), "data_rows": N, "data_checksum": data_checksum(X, Y),
                     "options": _training_options(args), "iterations": total, "optimizer": optimizer, "lr": lr,
                     "batch_size": B, "num_samples": args.samples, "estimator": args.estimator, "seed": args.seed},
        "step": 0, "complete": False, "elbo": None,
    }

    # ---- model: new, or resumed from a checkpoint
    state: dict = {}
    if args.resume:
        source = _resume_source(out, ckpt)
        if source is None:
            raise CLIError(f"--resume: there is no checkpoint {ckpt} nor model {out} to resume from")
        # the user's own --likelihood and --mean-function are the consent to run them (never the
        # file's record of them); a file changed since the checkpoint is refused without --trust-code
        user = spec["name"] in USER_KINDS
        code = {"mean_fn": args.mean_function} if user and args.mean_function else None
        saved, tstate = load_model(source, device=args.device, X=Xm, Y=Ym, trust_code=args.trust_code,
                                   likelihood=args.likelihood if user else None, code=code)
        old = saved.config
        if _code_paths(old["likelihood"]) != _code_paths(spec):
            raise CLIError(f"--resume: {source} was trained with likelihood {_describe_code(old['likelihood'])}, not "
                           f"--likelihood {_describe_code(spec)}")
        ot = old.get("training", {})
        if ot.get("data_checksum") != config["training"]["data_checksum"]:
            raise CLIError(f"--resume: {args.data} is not the data {source} was trained on "
                           f"({ot.get('data_rows')} rows from {ot.get('data')}; the contents differ)")
        recorded = ot.get("options", {})
        for key in RESUME_KEYS:
            # an option a checkpoint from an older savigp lacks had its default then
            a = recorded[key] if key in recorded else _train_default(key)
            b = config["training"]["options"].get(key)
            if a != b:
                raise CLIError(f"--resume: --{key.replace('_', '-')} is {b!r} here but {source} was trained with "
                               f"{a!r}; resume with the same options")
        if tstate is None:
            raise CLIError(f"--resume: {source} holds no optimizer state to resume from")
        step = int(old.get("step", 0))
        state = {"optimizer_state": tstate["optimizer"], "generator_state": tstate["generator"],
                 "perm": tstate["perm"], "pos": int(tstate["pos"]), "step": step}
        model = saved.model
        config["step"], config["elbo"] = step, old.get("elbo")
        if step >= total:
            if source == out and step == total:
                if not quiet:
                    print(f"{out} already has {step} of {total} steps; nothing to do")
                return EXIT_OK
            if step > total:
                raise CLIError(f"--resume: {source} is at step {step}, beyond the requested {total} iterations")
        if not quiet:
            print(f"resuming from {source} at step {step} of {total}", file=sys.stderr)
    else:
        model = build_model(Xm, Ym, likelihood, model_options)  # SAVIGP calls likelihood.initialize_from_data
    saved = SavedModel(model, config)

    # ---- training with checkpoints and a graceful Ctrl-C
    interrupted = {"flag": False}
    hook = os.environ.get(TEST_SIGINT_ENV)
    hook_step = int(hook) if hook and hook.strip().isdigit() else None

    def snapshot() -> dict:
        gen = last.get("generator") if last.get("generator_step") == state.get("step") else None
        return {"optimizer": state["optimizer"].state_dict(),
                "generator": gen if gen is not None else state["generator"].get_state(),
                "perm": state["perm"], "pos": int(state["pos"])}

    def write_checkpoint(path: str, step: int, complete: bool, elbo: Optional[float]) -> None:
        if rank != 0:
            return
        saved.config = dict(config, step=int(step), complete=bool(complete), elbo=elbo)
        saved.save(path, snapshot() if "optimizer" in state else (
            {"optimizer": state["optimizer_state"], "generator": state["generator_state"], "perm": state["perm"],
             "pos": state["pos"]} if "optimizer_state" in state else None))

    def on_sigint(signum, frame):
        if interrupted["flag"]:
            raise KeyboardInterrupt
        interrupted["flag"] = True
        if rank == 0:
            print("\nsavigp: interrupted; saving a checkpoint after this step (Ctrl-C again to stop at once)",
                  file=sys.stderr)

    def callback(step: int, terms) -> bool:
        done = step + 1
        if hook_step is not None and done == hook_step:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)  # let the handler run
        every = args.checkpoint_every
        last["elbo"] = float(terms.elbo.detach())
        if spec["name"] == "callable":  # the draws' state after this step, should user code stop the next one
            last["generator"], last["generator_step"] = state["generator"].get_state(), done
        if (interrupted["flag"] and done < total) or (every and done % every == 0 and done < total):
            write_checkpoint(ckpt, done, False, last["elbo"])
            last["checkpoint"] = done
        return interrupted["flag"]

    last = {"elbo": config.get("elbo"), "checkpoint": None}
    remaining = total - int(state.get("step", 0))
    try:
        previous = signal.signal(signal.SIGINT, on_sigint)
        # torchrun stops its workers with SIGTERM (after Ctrl-C): checkpoint first, as for Ctrl-C
        previous_term = signal.signal(signal.SIGTERM, on_sigint) if launched() else None
    except ValueError:  # not the main thread: no handler, Ctrl-C cannot reach us anyway
        previous = previous_term = None
    t0 = time.perf_counter()
    estimator = model.resolved_estimator(args.estimator)  # an impossible choice: one line, exit 2
    if not quiet:
        print(f"estimator: {estimator} ({ESTIMATOR_WHY[estimator]})", file=sys.stderr)
    try:
        # fit calls back at its reads of the device: at every checkpoint step at least
        log_every = default_log_every(model.device)
        if args.checkpoint_every:
            log_every = math.gcd(int(args.checkpoint_every), log_every)
        with file_lines_in_errors(table):
            history = fit(model, iterations=remaining, batch_size=args.batch_size, optimizer=optimizer, lr=lr,
                          num_samples=args.samples, estimator=args.estimator, seed=args.seed, progress=not quiet,
                          callback=callback, state=state, log_every=log_every)
    except (SystemExit, KeyboardInterrupt) as err:
        if isinstance(err, KeyboardInterrupt) and (interrupted["flag"] or previous is None):
            raise  # Ctrl-C pressed twice: stop at once
        # raised by user code (our handler turns a first Ctrl-C into a flag): a failure of that code
        done = int(state.get("step", 0))
        kept = ""
        if "optimizer" in state and last["checkpoint"] != done:
            write_checkpoint(ckpt, done, False, last["elbo"])
            last["checkpoint"] = done
        if last["checkpoint"] is not None or os.path.exists(ckpt):
            kept = f"; checkpoint {ckpt} at step {last['checkpoint'] if last['checkpoint'] is not None else '?'} " \
                   "(continue with --resume once it is fixed)"
        what = f"called sys.exit({err.code!r})" if isinstance(err, SystemExit) else "raised KeyboardInterrupt"
        raise UserCodeExit(f"the likelihood {spec.get('import_path') or spec['name']} {what} during step {done + 1} "
                           f"of {total}; no model written{kept}") from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        if previous_term is not None:
            signal.signal(signal.SIGTERM, previous_term)
    done = int(state.get("step", 0))
    if done < total:  # interrupted here or on another rank (interrupted after the last step: just finish)
        if last["checkpoint"] != done:  # Ctrl-C came after the last callback
            write_checkpoint(ckpt, done, False, last["elbo"])
        if rank == 0:
            print(f"savigp train: interrupted at step {done} of {total}; checkpoint written to {ckpt}; "
                  f"run the same command with --resume to continue", file=sys.stderr)
        return EXIT_INTERRUPTED
    elbo = history.elbo[-1] if history.elbo else config.get("elbo")
    elbo_text = f"{elbo:.6g}" if elbo is not None else "n/a"
    config["training"]["estimator_used"] = history.estimator
    write_checkpoint(out, done, True, elbo)
    if rank == 0 and os.path.exists(ckpt):
        os.unlink(ckpt)
    finish()
    if rank == 0:
        # the one-line summary is printed even with --quiet (which silences progress only)
        print(f"trained {done} step(s) ({history.steps} in this run, {time.perf_counter() - t0:.1f} s, "
              f"estimator {history.estimator}), final ELBO {elbo_text}; wrote {out}")
        if plot:
            from .plotting import save_elbo_plot

            save_elbo_plot(history.elbo, plot, start=done - history.steps,
                           title=f"{os.path.basename(out)}: ELBO per step ({history.estimator} estimator)")
            print(f"wrote {plot}", file=sys.stderr)
    return EXIT_OK


# ====================================================================== predict / evaluate
def _load_for_use(model_path: str, device, likelihood=None, trust_code: bool = False, mean_function=None):
    from .serialization import ModelFileError, load_model

    if not os.path.exists(model_path):
        raise ModelFileError(f"{model_path}: no such model file")
    _check_device(device)
    code = {"mean_fn": mean_function} if mean_function else None
    saved, _ = load_model(model_path, device=device, likelihood=likelihood, trust_code=trust_code, code=code)
    return saved


def prediction_table(saved, pred: dict, latent: bool = False) -> tuple:
    """Header and values ``(B, columns)`` of a predictions CSV.

    ``pred`` is ``Prediction.numpy()`` (the same fields and shapes as :meth:`SAVIGP.predict`).
    Columns: ``mean_<target>`` and ``var_<target>`` for each target (when the likelihood has
    predictive moments; ``var_`` is left out for a user mean function that gives E[y | f] only), ``prob_<label>`` for each class and ``predicted_<target>`` (the most
    probable label) for classification, and ``latent_mean_<j>``/``latent_var_<j>`` for the Q
    latent functions with ``latent=True`` or when there are no predictive moments.
    """
    cfg = saved.config
    names = (cfg.get("columns") or {}).get("targets") or [f"y{p}" for p in range(len(cfg["example_target"]))]
    header, blocks = [], []
    if pred["mean"] is not None:
        for p, t in enumerate(names):
            header.append(f"mean_{t}")
            blocks.append(pred["mean"][:, p:p + 1])
            if pred["variance"] is not None:  # None: a user mean function gives E[y | f] only
                header.append(f"var_{t}")
                blocks.append(pred["variance"][:, p:p + 1])
    if pred["probabilities"] is not None:
        labels = cfg.get("class_labels") or list(range(pred["probabilities"].shape[1]))
        header += [f"prob_{_label_name(c)}" for c in labels]
        blocks.append(pred["probabilities"])
        header.append(f"predicted_{names[0]}" if len(names) == 1 else "predicted_class")
        idx = pred["probabilities"].argmax(axis=1)
        blocks.append(np.asarray(labels, dtype=np.float64)[idx][:, None])
    if latent or pred["mean"] is None:
        Q = pred["latent_mean"].shape[1]
        for j in range(Q):
            header += [f"latent_mean_{j}", f"latent_var_{j}"]
            blocks += [pred["latent_mean"][:, j:j + 1], pred["latent_var"][:, j:j + 1]]
    return header, np.concatenate(blocks, axis=1)


def _model_and_table(args):
    """The model file and the CSV that ``savigp predict`` / ``evaluate`` read (clear errors for both)."""
    from .serialization import ModelFileError

    if not os.path.exists(args.model):
        raise ModelFileError(f"{args.model}: no such model file")
    table = read_csv(args.data, header=args.header, delimiter=args.delimiter)
    return table, _load_for_use(args.model, args.device, args.likelihood, args.trust_code, args.mean_function)


def cmd_predict(args) -> int:
    """``savigp predict``: predictive means/variances (and class probabilities) per row."""
    _check_samples(args.samples)
    out = _output_path(args.out, [args.model, args.data], args.quiet, allow_stdout=True)
    plot = _check_plot_option(args.plot, [args.model, args.data], [out])
    table, saved = _model_and_table(args)
    if plot and int(saved.config["model"]["input_dim"]) > 2:
        raise CLIError(f"--plot draws models of 1 or 2 inputs; {args.model} has {saved.config['model']['input_dim']}")
    icols = _select_inputs(table, saved.config, args.inputs, positional=args.positional)
    if not saved.likelihood_loaded and not args.quiet:
        print(f"savigp predict: note: latent predictions only ({saved.model.likelihood.note})", file=sys.stderr)
    with file_lines_in_errors(table):
        pred = saved.predict(table.values[:, icols], num_samples=args.samples, seed=args.seed).numpy()
    header, values = prediction_table(saved, pred, latent=args.latent)
    write_csv(out, header, values)
    if out != "-" and not args.quiet:
        print(f"wrote {values.shape[0]} prediction(s) ({', '.join(header)}) to {out}", file=sys.stderr)
    if plot:
        from .plotting import save_fit_plot

        with file_lines_in_errors(table):
            save_fit_plot(saved, table.values[:, icols], plot, Y=_targets_if_present(table, saved.config, icols),
                          num_samples=args.samples, seed=args.seed, input_names=table.names(icols))
        if not args.quiet:
            print(f"wrote {plot}", file=sys.stderr)
    return EXIT_OK


def _targets_if_present(table: Table, config: dict, icols: list):
    """The training targets' columns of a predict file when it has them (by name), else None."""
    cols = config.get("columns") or {}
    names = cols.get("targets") or []
    if table.header is None or not names or not all(n in table.header for n in names):
        return None
    tcols = [table.header.index(n) for n in names]
    return None if set(tcols) & set(icols) else table.values[:, tcols]


METRIC_NAMES = {"n": "N", "sse": "SSE", "nlpd": "NLPD", "mse": "MSE", "mae": "MAE",
                "error_rate": "error rate", "nlp": "NLP"}


def format_metrics(metrics: dict) -> str:
    """A two-column text table of :func:`savigp.metrics.evaluate`'s dict."""
    rows = [("metric", "value")]
    for k, v in metrics.items():
        if k == "sse_note":
            continue
        if v is None:
            text = "undefined" + (f" ({metrics['sse_note'].split(': ', 1)[-1]})" if k == "sse" and "sse_note" in metrics else "")
        else:
            text = str(v) if isinstance(v, int) else f"{v:.6g}"
        rows.append((METRIC_NAMES.get(k, k), text))
    w = max(len(r[0]) for r in rows)
    return "\n".join(f"{a:<{w}}  {b}" for a, b in rows)


def cmd_evaluate(args) -> int:
    """``savigp evaluate``: SSE and NLPD (regression) or error rate and NLP (classification)."""
    _check_samples(args.samples)
    table, saved = _model_and_table(args)
    tcols = _select_targets(table, saved.config, args.targets, positional=args.positional)
    icols = _select_inputs(table, saved.config, args.inputs, exclude=tcols, positional=args.positional)
    X, Y = table.values[:, icols], table.values[:, tcols]
    import torch

    _validate_targets(saved.model.likelihood, torch.as_tensor(saved.transform_targets(Y)), table, tcols)
    with file_lines_in_errors(table):
        metrics = saved.evaluate(X, Y, num_samples=args.samples, seed=args.seed)
    if args.json:
        print(json.dumps(metrics))
    else:
        print(format_metrics(metrics))
    return EXIT_OK


# ====================================================================== demo
def cmd_demo(args) -> int:
    """``savigp demo``: train and evaluate two small models on generated data, via CSV files."""
    if args.dir:
        os.makedirs(args.dir, exist_ok=True)
        return _demo(args, args.dir)
    with tempfile.TemporaryDirectory(prefix="savigp-demo-") as folder:
        return _demo(args, folder)


def _demo(args, folder: str) -> int:
    rng = np.random.default_rng(args.seed)
    quiet = ["--quiet"] if args.quiet else []

    def write(name, header, values):
        write_csv(os.path.join(folder, name), header, values)
        return name

    def run(title, train_csv, test_csv, model, train_opts, targets):
        print(f"== {title}", flush=True)
        cmd = ["train", train_csv, "--targets", targets, "--out", model] + train_opts
        ev = ["evaluate", model, test_csv, "--targets", targets]
        print("   savigp " + " ".join(cmd) + "\n   savigp " + " ".join(ev), flush=True)
        here = [os.path.join(folder, a) if a.endswith((".csv", ".pt")) else a for a in cmd + quiet]
        code = cmd_train(build_parser().parse_args(here))
        if code != EXIT_OK:
            return code
        return cmd_evaluate(build_parser().parse_args([os.path.join(folder, a) if a.endswith((".csv", ".pt")) else a
                                                       for a in ev]))

    t0 = time.perf_counter()
    # 1-D regression, Gaussian likelihood
    x = rng.uniform(-3, 3, 300)
    y = np.sin(2 * x) + 0.3 * x + 0.2 * rng.standard_normal(300)
    data = np.stack([x, y], 1)
    code = run("1-D regression, Gaussian likelihood (200 training / 100 test points)",
               write("regression_train.csv", ["x", "y"], data[:200]),
               write("regression_test.csv", ["x", "y"], data[200:]), "regression.pt",
               ["--likelihood", "gaussian", "--num-inducing", "15", "--iterations", "250", "--lr", "0.05"], "y")
    if code != EXIT_OK:
        return code
    # 2-D binary classification, logistic likelihood
    X = rng.standard_normal((300, 2))
    p = 1 / (1 + np.exp(-4 * (np.sin(2 * X[:, 0]) + X[:, 1])))
    lab = (rng.uniform(size=300) < p).astype(float)
    data = np.column_stack([X, lab])
    code = run("2-D binary classification, logistic likelihood (200 training / 100 test points)",
               write("classification_train.csv", ["x1", "x2", "label"], data[:200]),
               write("classification_test.csv", ["x1", "x2", "label"], data[200:]), "classification.pt",
               ["--likelihood", "logistic", "--num-inducing", "15", "--iterations", "250", "--lr", "0.05",
                "--samples", "20"], "label")
    if code != EXIT_OK:
        return code
    kept = f"; files in {folder}" if args.dir else ""
    print(f"demo finished in {time.perf_counter() - t0:.1f} s{kept}")
    return EXIT_OK


# ====================================================================== parser
EPILOG_MAIN = """\
examples:
  savigp demo
  savigp train data.csv --targets y --likelihood gaussian --out model.pt
  savigp train data.csv --targets label --likelihood logistic --num-inducing 50 \\
      --batch-size 200 --iterations 2000 --out clf.pt
  savigp predict model.pt test.csv --out predictions.csv
  savigp evaluate model.pt test.csv --targets y --json

exit status: 0 ok, 2 bad input (one line on stderr), 1 failure while running, 3 the likelihood
returned NaN or inf (the line names the function, the file lines and the f values), 130 interrupted.
run 'savigp COMMAND --help' for the options of each command.
"""

EPILOG_TRAIN = """\
examples:
  # regression; every column but 'y' is an input; standardized inputs and targets
  savigp train data.csv --targets y --standardize-inputs --standardize-targets --out model.pt
  # binary classification with labels in {0, 1} or {-1, +1}, mini-batches of 200
  savigp train data.csv --targets label --likelihood logistic --batch-size 200 \\
      --iterations 3000 --out clf.pt
  # 10 classes (labels 0..9), a mixture of 2 diagonal Gaussians as posterior
  savigp train usps.csv --targets 0 --likelihood softmax --num-classes 10 \\
      --posterior diag --components 2 --out usps.pt
  # your own log-likelihood log_lik(y, f) in numpy or torch, with Q = 2 latent functions
  savigp train data.csv --targets 3 --likelihood my_lik.py:log_lik --num-latent 2 --out m.pt
  # ... with a learned keyword parameter log_lik(y, f, r=...) and predictive means from mean(f)
  savigp train counts.csv --targets n --likelihood nb.py:log_lik --lik-param r=3.0:positive \
      --mean-function nb.py:mean --out nb.pt
  # ... a classifier: class probabilities from log_lik at each label 0..3
  savigp train grades.csv --targets g --likelihood ordinal.py:log_lik --task classification \
      --num-classes 4 --lik-param cut=-1,0,1 --out ord.pt
  # ... or a Likelihood subclass, constructor arguments as --lik-option
  savigp train data.csv --targets y --likelihood my_lik.py:MyLikelihood --lik-option scale=2 --out m.pt
  # checkpoint every 100 steps; after a crash or Ctrl-C continue with --resume
  savigp train big.csv --targets y --iterations 5000 --checkpoint-every 100 --out big.pt
  savigp train big.csv --targets y --iterations 5000 --checkpoint-every 100 --out big.pt --resume

columns: comma-separated header names, 0-based indices (negative from the end) or ranges a:b.
checkpoints are written to OUT.ckpt; the finished model replaces OUT atomically.
"""

EPILOG_PREDICT = """\
examples:
  savigp predict model.pt test.csv --out predictions.csv
  savigp predict model.pt test.csv --inputs x1,x2 --latent --out - | head

output columns: mean_<target>, var_<target> (predictive mean and variance of y, in the
original units; a user function has them with --mean-function, var_ only when it returns
the pair E[y|f], Var[y|f]), prob_<label> and predicted_<target> for classification, and
latent_mean_<j>, latent_var_<j> with --latent (or when the likelihood has no predictive
moments). --plot FIT.png draws the fit for 1-D and 2-D inputs.
"""

EPILOG_EVALUATE = """\
examples:
  savigp evaluate model.pt test.csv --targets y
  savigp evaluate clf.pt test.csv --targets label --json

metrics (seed paper, sec. 9.1): regression: SSE (MSE / variance of the test targets), NLPD
(mean negative log predictive density, in the targets' original units); classification:
error rate and NLP (mean negative log probability of the true labels).
"""


def _add_csv_options(p) -> None:
    p.add_argument("--header", action=argparse.BooleanOptionalAction, default=None,
                   help="the first row is (--header) or is not (--no-header) a header (default: auto-detect)")
    p.add_argument("--delimiter", default=",", help="field separator (default ',')")


def _add_column_options(p) -> None:
    p.add_argument("--positional", action="store_true",
                   help="take the model's columns by position when the file's names differ or it has no header "
                        "(default: by the training column names; a missing name is an error)")


def _add_trust_options(p) -> None:
    p.add_argument("--likelihood", metavar="FILE.py[:FN]",
                   help="for a model trained with your own likelihood: run this file's function (also where the file "
                        "is now, if it moved; without :FN the recorded name). A model file never runs code by itself")
    p.add_argument("--mean-function", metavar="FILE.py[:FN]",
                   help="for a model trained with --mean-function in another file than the likelihood: run this one "
                        "(also where it is now; without :FN the recorded name)")
    p.add_argument("--trust-code", action="store_true",
                   help="run the user code the model file names (and a file changed since training)")


def _add_threads_option(p, default=None) -> None:
    p.add_argument("--threads", type=int, default=default, metavar="T",
                   help="CPU threads for torch (default: torch's choice" + (f"; demo: {default})" if default else ")"))


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of the ``savigp`` command."""
    from . import __version__

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
                   help="built-in: " + ", ".join(_available_likelihoods())
                   + "; or a function log_lik(y, f) as package.module:function or path/to/file.py:function "
                     "(default gaussian)")
    g.add_argument("--num-latent", type=int, metavar="Q", help="latent functions read by a user function (default 1)")
    g.add_argument("--num-classes", type=int, metavar="C", help="softmax, or a user function with --task classification: classes, labels 0..C-1 "
                        "(default: softmax: largest label + 1; user function: the distinct target values)")
    g.add_argument("--one-hot", action="store_true", help="softmax: targets are C one-hot columns")
    g.add_argument("--num-outputs", type=int, metavar="P", help="multi-gaussian, gprn: outputs (default: target columns)")
    g.add_argument("--num-nodes", type=int, metavar="Q'", help="gprn: latent node functions (default 1)")
    g.add_argument("--num-layers", type=int, metavar="P", help="seismic: layers (default: target columns)")
    g.add_argument("--num-tanh", type=int, metavar="I", help="warped: tanh terms of the warping (default 3)")
    g.add_argument("--df", type=float, help="student-t: degrees of freedom (default 4)")
    g.add_argument("--bin-width", type=float, help="poisson: width of each count's bin (default 1)")
    g.add_argument("--noise-variance", type=float, help="initial noise variance (gaussian, multi-gaussian, gprn, warped)")
    g.add_argument("--lik-option", action="append", metavar="KEY=VALUE",
                   help="any other constructor argument of the likelihood, e.g. depth_scale=10, or "
                        "differentiable=True for a torch user function (repeatable)")
    g.add_argument("--task", choices=("regression", "classification"),
                   help="user function: regression (default) or classification (labels: --num-classes C gives "
                        "0..C-1, else the distinct target values; class probabilities from the function)")
    g.add_argument("--mean-function", metavar="FILE.py:FN",
                   help="user function: E[y | f] as mean(f) (or the pair E[y | f], Var[y | f]) for predictive "
                        "means, SSE and MSE")
    g.add_argument("--lik-param", action="append", metavar="NAME=VALUE[:positive|:fixed]",
                   help="user function: a keyword parameter of log_lik learned with the model (VALUE: a number or "
                        "comma-separated numbers; :positive keeps it > 0, :fixed holds it) (repeatable)")
    g.add_argument("--min-log-prob", type=float, metavar="L",
                   help="user function: replace -inf and values below L by L (for simulators whose density underflows)")
    g = t.add_argument_group("model")
    g.add_argument("--kernel", choices=("rbf", "matern32", "matern52"), default="rbf", help="covariance (default rbf, ARD)")
    g.add_argument("--num-inducing", type=int, metavar="M", help="inducing points per latent function (default min(N, 100))")
    g.add_argument("--inducing-init", choices=("kmeans", "subset"), default="kmeans", help="initial inducing inputs")
    g.add_argument("--dense", action="store_true", help="inducing inputs = all training inputs, fixed (small N only)")
    g.add_argument("--fixed-inducing", action="store_true", help="do not learn the inducing inputs")
    g.add_argument("--posterior", choices=("full", "diag", "diag-whitened", "joint"), default="full",
                   help="full Gaussian components; diag: the paper's diagonal components over u (mog); "
                        "diag-whitened: diagonal in whitened coordinates (faster steps); joint: one Gaussian coupled "
                        "across the latent functions (K = 1; for likelihoods that couple them, moderate Q * M)")
    g.add_argument("--components", type=int, default=1, metavar="K", help="mixture components (default 1)")
    g.add_argument("--prior-mean", metavar="MU", help="constant prior mean: one number or Q comma-separated")
    g.add_argument("--learn-prior-mean", action="store_true", help="learn the prior means")
    g.add_argument("--mean-basis-size", type=int, default=0, metavar="G",
                   help="orthogonally decoupled mean basis per latent function (seed 003; 0 = off)")
    g.add_argument("--mean-basis", choices=("orthogonal", "decoupled", "hybrid"), default="orthogonal",
                   help="how the mean basis of --mean-basis-size enters (savigp.mean_bases): orthogonal (seed 003), "
                        "decoupled (Cheng & Boots 2017) or hybrid (seed 003, eq. (10))")
    g.add_argument("--standardize-inputs", action="store_true", help="train on standardized inputs (undone at prediction)")
    g.add_argument("--standardize-targets", action="store_true",
                   help="train on standardized targets; means, variances and densities are reported in the original units")
    g.add_argument("--dtype", choices=("float32", "float64"), default="float64")
    g.add_argument("--device", default=None, help="cpu, cuda, cuda:1, ... (default cpu)")
    g.add_argument("--seed", type=int, default=0, help="seeds initialization, mini-batches and Monte Carlo draws")
    g = t.add_argument_group("training")
    g.add_argument("--iterations", type=int, help="optimizer steps (default 500)")
    g.add_argument("--epochs", type=float, help="alternatively, passes over the data")
    g.add_argument("--batch-size", type=int, metavar="B", help="mini-batch size (default all rows; lbfgs: all rows)")
    g.add_argument("--optimizer", choices=("adam", "adadelta", "lbfgs"), default="adam")
    g.add_argument("--lr", type=float, help="learning rate (default: adam 0.01, adadelta 1, lbfgs 1)")
    g.add_argument("--samples", type=int, default=100, metavar="S", help="Monte Carlo samples per point (default 100)")
    from .expected_log_lik import ESTIMATORS

    g.add_argument("--estimator", choices=ESTIMATORS, default="auto",
                   help="expected log-likelihood estimator (default auto: closed form, else reparam, else score)")
    g.add_argument("--checkpoint-every", type=int, metavar="N", help="write OUT.ckpt every N steps")
    g.add_argument("--resume", action="store_true", help="continue from OUT.ckpt (or OUT) with the same options")
    g.add_argument("--trust-code", action="store_true",
                   help="with --resume: run the --likelihood (and --mean-function) file even though it changed since "
                        "the checkpoint")
    g.add_argument("--quiet", action="store_true", help="no progress bar (the one-line summary is still printed)")
    g.add_argument("--plot", metavar="ELBO.png", help="draw the ELBO per step to this image (needs matplotlib)")
    g.add_argument("--nproc", type=int, metavar="R",
                   help="train data-parallel on R processes of this machine (runs torchrun; see docs/cli.md)")
    g.add_argument("--dist-timeout", type=float, metavar="SEC",
                   help="data-parallel: seconds a rank waits for the others before failing (default 300)")
    _add_threads_option(g)
    t.set_defaults(func=cmd_train)

    # ---------------------------------------------------------------- predict
    p = sub.add_parser("predict", formatter_class=fmt, epilog=EPILOG_PREDICT, help="predict at the rows of a CSV file",
                       description="Write predictive means and variances (and class probabilities) for each row.")
    p.add_argument("model", metavar="MODEL.pt")
    p.add_argument("data", metavar="DATA.csv")
    p.add_argument("--out", default="-", metavar="PRED.csv", help="output CSV (default '-': standard output)")
    p.add_argument("--inputs", metavar="COLS", help="input columns (default: the training header names)")
    _add_column_options(p)
    _add_csv_options(p)
    p.add_argument("--latent", action="store_true", help="also write the latent functions' means and variances")
    p.add_argument("--samples", type=int, default=500, help="Monte Carlo samples (default 500)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None)
    p.add_argument("--quiet", action="store_true")
    _add_trust_options(p)
    p.add_argument("--plot", metavar="FIT.png",
                   help="draw the fit (1-D or 2-D inputs; the file's targets overlaid when it has them; needs matplotlib)")
    _add_threads_option(p)
    p.set_defaults(func=cmd_predict)

    # ---------------------------------------------------------------- evaluate
    e = sub.add_parser("evaluate", formatter_class=fmt, epilog=EPILOG_EVALUATE, help="the paper's metrics on a CSV file",
                       description="Evaluate a model on labelled data: SSE and NLPD, or error rate and NLP.")
    e.add_argument("model", metavar="MODEL.pt")
    e.add_argument("data", metavar="DATA.csv")
    e.add_argument("--targets", metavar="COLS", help="target column(s) (default: the training target names)")
    e.add_argument("--inputs", metavar="COLS", help="input columns (default: the training header names)")
    _add_column_options(e)
    _add_csv_options(e)
    e.add_argument("--json", action="store_true", help="print a JSON object instead of a table")
    e.add_argument("--samples", type=int, default=1000, help="Monte Carlo samples (default 1000)")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--device", default=None)
    _add_trust_options(e)
    _add_threads_option(e)
    e.set_defaults(func=cmd_evaluate)

    # ---------------------------------------------------------------- demo
    d = sub.add_parser("demo", formatter_class=fmt, help="train two small models on generated data",
                       description="Train and evaluate a 1-D Gaussian regression and a 2-D logistic classification "
                                   "on generated data (a few seconds each), through the same CSV/model-file path "
                                   "as train and evaluate.",
                       epilog="example:\n  savigp demo\n  savigp demo --dir demo_files   # keep the CSVs and models\n")
    d.add_argument("--dir", help="folder for the generated CSVs and models (default: a temporary folder)")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--quiet", action="store_true", help="no progress bars")
    _add_threads_option(d, default=1)
    d.set_defaults(func=cmd_demo)
    return parser


# ====================================================================== entry point
def main(argv=None) -> int:
    """Run the ``savigp`` command with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors (argparse prints them)
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return EXIT_BAD_INPUT
    args.argv = list(sys.argv[1:] if argv is None else argv)
    prefix = f"savigp {args.command}: error: "
    if getattr(args, "threads", None) is not None:
        if args.threads < 1:
            print(prefix + f"--threads must be >= 1, got {args.threads}", file=sys.stderr)
            return EXIT_BAD_INPUT
        import torch

        torch.set_num_threads(args.threads)
    if os.environ.get("SAVIGP_DEBUG"):
        return args.func(args)
    from ._linalg import CholeskyError
    from .distributed import DistributedError
    from .nonfinite import NonFiniteLogProb
    from .training import TrainingDiverged

    try:
        return args.func(args)
    except KeyboardInterrupt:
        print(f"\nsavigp {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except DistributedError as err:  # another rank died or hung; its checkpoint (rank 0's) is intact
        print(prefix + _one_line(err), file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_FAILURE)  # not sys.exit: gloo's threads abort the interpreter's exit after a failed collective
    except (TrainingDiverged, CholeskyError, UserCodeExit) as err:
        print(prefix + _one_line(err), file=sys.stderr)
        return EXIT_FAILURE
    except NonFiniteLogProb as err:  # a model problem, not bad input
        print(prefix + _one_line(err), file=sys.stderr)
        return EXIT_NON_FINITE
    except MemoryError:
        print(prefix + "out of memory (fewer --samples, or a smaller --batch-size for train, needs less)", file=sys.stderr)
        return EXIT_FAILURE
    except SystemExit as err:  # user code (a likelihood) called sys.exit: its failure, not a result
        print(prefix + f"a user function called sys.exit({err.code!r})", file=sys.stderr)
        return EXIT_FAILURE
    except (ValueError, TypeError) as err:  # DataError, CLIError, ModelFileError, LikelihoodImportError, engine checks
        print(prefix + _one_line(err), file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # e.g. `savigp predict ... --out - | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILURE
    except OSError as err:
        where = f"{err.filename}: " if getattr(err, "filename", None) else ""
        print(prefix + where + (err.strerror or _one_line(err)), file=sys.stderr)
        return EXIT_FAILURE
    except Exception as err:  # a bug: say so in one line, with a way to get the traceback
        print(prefix + f"internal error: {type(err).__name__}: {_one_line(err)} "
              "(set SAVIGP_DEBUG=1 for a traceback)", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
