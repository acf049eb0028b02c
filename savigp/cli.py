"""The ``savigp`` command line: ``train``, ``predict``, ``evaluate`` and ``demo``.

    savigp train DATA.csv --targets y --likelihood gaussian --out model.pt
    savigp predict model.pt TEST.csv --out predictions.csv
    savigp evaluate model.pt TEST.csv --targets y [--json]
    savigp demo

Exit status: 0 success; 2 bad input (files, columns, labels, options; one line on stderr naming
the file, line and column); 1 a failure while running (e.g. training diverged); 130 interrupted
(Ctrl-C; ``train`` first writes a checkpoint that ``--resume`` continues from).

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

from .csv_data import DataError, Table, data_checksum, read_csv, resolve_columns, split_columns, write_csv

EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130

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
STANDARDIZABLE = ("gaussian", "student-t", "warped", "multi-gaussian", "gprn", "callable")
#: likelihood-specific options -> the likelihoods they apply to
LIKELIHOOD_OPTIONS = {
    "num_latent": ("callable",),
    "num_classes": ("softmax",),
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
    "num_layers", "num_tanh", "df", "bin_width", "noise_variance", "lik_option", "kernel", "num_inducing",
    "inducing_init", "dense", "fixed_inducing", "posterior", "components", "prior_mean", "learn_prior_mean",
    "mean_basis_size", "standardize_inputs", "standardize_targets", "dtype", "seed", "batch_size", "optimizer",
    "lr", "samples", "estimator",
)
DEFAULT_LR = {"adam": 0.01, "adadelta": 1.0, "lbfgs": 1.0}


class CLIError(ValueError):
    """A bad command line or input; reported as one line, exit status 2."""


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


def _check_output_path(path: str, option: str = "--out") -> None:
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise CLIError(f"{option} {path}: is a directory")
    if not os.path.isdir(folder):
        raise CLIError(f"{option} {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise CLIError(f"{option} {path}: the folder {folder} is not writable")


def _check_device(device: Optional[str]) -> None:
    import torch

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
        path = canonical_import_path(name)
        kwargs = {"num_latent": int(args.num_latent or 1), "output_dim": P, "backend": "auto"}
        if kwargs["num_latent"] < 1:
            raise CLIError(f"--num-latent must be >= 1, got {args.num_latent}")
        kwargs.update(extra)
        return {"name": "callable", "class": "CallableLikelihood", "import_path": path, "kwargs": kwargs}
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

    if spec["name"] != "callable" and getattr(likelihoods, spec["class"], None) is None:
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
    except Exception as err:
        raise CLIError(f"--likelihood {spec['import_path']}: the function failed when called with y of shape "
                       f"{tuple(y.shape)} and f of shape {tuple(f.shape)} (Q = --num-latent {Q}): "
                       f"{type(err).__name__}: {_one_line(err)}") from None
    if not bool(torch.isfinite(out).any()) and bool(torch.isnan(out).all()):
        raise CLIError(f"--likelihood {spec['import_path']}: the function returned only NaN for y of shape "
                       f"{tuple(y.shape)} and f of shape {tuple(f.shape)}")


def _select_inputs(table: Table, config: dict, inputs: Optional[str], exclude=()) -> list:
    """Input columns of a predict/evaluate file for a model trained on ``config["columns"]``."""
    D = int(config["model"]["input_dim"])
    cols = config.get("columns") or {}
    if inputs is not None:
        icols = resolve_columns(inputs, table, "--inputs")
        bad = [j for j in icols if j in exclude]
        if bad:
            raise DataError(f"column {table.column_label(bad[0])} of {table.path} is both an input and a target")
    elif table.header is not None and cols.get("header") and all(n in table.header for n in cols.get("inputs", [])):
        icols = [table.header.index(n) for n in cols["inputs"]]
    else:
        rest = [j for j in range(table.num_columns) if j not in exclude]
        if len(rest) == D:
            icols = rest
        elif table.num_columns == cols.get("num_columns") and not set(cols.get("input_indices", [])) & set(exclude):
            icols = list(cols["input_indices"])
        else:
            trained = ", ".join(map(str, cols.get("inputs", []))) or "?"
            raise DataError(f"{table.path}: cannot tell which of its {table.num_columns} column(s) are the model's "
                            f"{D} input(s) (trained on columns {trained}); name them with --inputs")
    if len(icols) != D:
        raise DataError(f"{table.path}: {len(icols)} input column(s) selected but the model takes {D} "
                        f"(trained on columns {', '.join(map(str, cols.get('inputs', [])))})")
    return icols


def _select_targets(table: Table, config: dict, targets: Optional[str]) -> list:
    cols = config.get("columns") or {}
    P = len(config.get("example_target") or [0])
    if targets is not None:
        tcols = resolve_columns(targets, table, "--targets")
    elif table.header is not None and cols.get("header") and all(n in table.header for n in cols.get("targets", [])):
        tcols = [table.header.index(n) for n in cols["targets"]]
    elif table.num_columns == cols.get("num_columns"):
        tcols = list(cols["target_indices"])
    else:
        raise DataError(f"{table.path}: give the target column(s) with --targets (the model was trained on "
                        f"{', '.join(map(str, cols.get('targets', [])))})")
    if len(tcols) != P:
        raise DataError(f"{table.path}: --targets selects {len(tcols)} column(s) but the model predicts {P}")
    return tcols


def _label_name(v) -> str:
    v = float(v)
    return str(int(v)) if v == int(v) else repr(v)


# ====================================================================== train
def _training_options(args) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(args).items() if k in RESUME_KEYS}


def _resume_source(out: str, ckpt: str) -> Optional[str]:
    if os.path.exists(ckpt):
        return ckpt
    if os.path.exists(out):
        return out
    return None


def cmd_train(args) -> int:
    """``savigp train``: read, validate, build, fit (with checkpoints), write the model atomically."""
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
    out, ckpt = args.out, args.out + ".ckpt"
    _check_output_path(out)
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

    # ---- likelihood and targets
    spec = _likelihood_spec(args, Y)
    likelihood = _make_likelihood(spec)
    if likelihood.output_dim != Y.shape[1]:
        raise DataError(f"{table.where(None, tcols)}: --targets selects {Y.shape[1]} column(s) but the "
                        f"{args.likelihood} likelihood takes {likelihood.output_dim}")
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
        _probe_callable(likelihood, Yt, spec)

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
        "dtype": args.dtype, "device": args.device, "seed": args.seed,
    }
    if likelihood.task == "classification":
        if spec["name"] == "logistic":
            class_labels = [-1.0 if bool((Y == -1).any()) else 0.0, 1.0]
        else:
            class_labels = [float(c) for c in range(int(spec["kwargs"]["num_classes"]))]
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
        saved, tstate = load_model(source, device=args.device, X=Xm, Y=Ym)
        old = saved.config
        ot = old.get("training", {})
        if ot.get("data_checksum") != config["training"]["data_checksum"]:
            raise CLIError(f"--resume: {args.data} is not the data {source} was trained on "
                           f"({ot.get('data_rows')} rows from {ot.get('data')}; the contents differ)")
        for key in RESUME_KEYS:
            a, b = ot.get("options", {}).get(key), config["training"]["options"].get(key)
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
        return {"optimizer": state["optimizer"].state_dict(),
                "generator": state["generator"].get_state(), "perm": state["perm"], "pos": int(state["pos"])}

    def write_checkpoint(path: str, step: int, complete: bool, elbo: Optional[float]) -> None:
        saved.config = dict(config, step=int(step), complete=bool(complete), elbo=elbo)
        saved.save(path, snapshot() if "optimizer" in state else (
            {"optimizer": state["optimizer_state"], "generator": state["generator_state"], "perm": state["perm"],
             "pos": state["pos"]} if "optimizer_state" in state else None))

    def on_sigint(signum, frame):
        if interrupted["flag"]:
            raise KeyboardInterrupt
        interrupted["flag"] = True
        print("\nsavigp: interrupted; saving a checkpoint after this step (Ctrl-C again to stop at once)",
              file=sys.stderr)

    def callback(step: int, terms) -> bool:
        done = step + 1
        if hook_step is not None and done == hook_step:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)  # let the handler run
        every = args.checkpoint_every
        last["elbo"] = float(terms.elbo.detach())
        if (interrupted["flag"] and done < total) or (every and done % every == 0 and done < total):
            write_checkpoint(ckpt, done, False, last["elbo"])
            last["checkpoint"] = done
        return interrupted["flag"]

    last = {"elbo": config.get("elbo"), "checkpoint": None}
    remaining = total - int(state.get("step", 0))
    try:
        previous = signal.signal(signal.SIGINT, on_sigint)
    except ValueError:  # not the main thread: no handler, Ctrl-C cannot reach us anyway
        previous = None
    t0 = time.perf_counter()
    try:
        # fit calls back at its reads of the device: at every checkpoint step at least
        log_every = default_log_every(model.device)
        if args.checkpoint_every:
            log_every = math.gcd(int(args.checkpoint_every), log_every)
        history = fit(model, iterations=remaining, batch_size=args.batch_size, optimizer=optimizer, lr=lr,
                      num_samples=args.samples, estimator=args.estimator, seed=args.seed, progress=not quiet,
                      callback=callback, state=state, log_every=log_every)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    done = int(state.get("step", 0))
    if interrupted["flag"] and done < total:  # (interrupted after the last step: just finish)
        if last["checkpoint"] != done:  # Ctrl-C came after the last callback
            write_checkpoint(ckpt, done, False, last["elbo"])
        print(f"savigp train: interrupted at step {done} of {total}; checkpoint written to {ckpt}; "
              f"run the same command with --resume to continue", file=sys.stderr)
        return EXIT_INTERRUPTED
    elbo = history.elbo[-1] if history.elbo else config.get("elbo")
    elbo_text = f"{elbo:.6g}" if elbo is not None else "n/a"
    config["training"]["estimator_used"] = history.estimator
    write_checkpoint(out, done, True, elbo)
    if os.path.exists(ckpt):
        os.unlink(ckpt)
    if not quiet:
        print(f"trained {done} step(s) ({history.steps} in this run, {time.perf_counter() - t0:.1f} s), "
              f"final ELBO {elbo_text}; wrote {out}")
    return EXIT_OK


# ====================================================================== predict / evaluate
def _load_for_use(model_path: str, device):
    from .serialization import ModelFileError, load_model

    if not os.path.exists(model_path):
        raise ModelFileError(f"{model_path}: no such model file")
    _check_device(device)
    saved, _ = load_model(model_path, device=device)
    return saved


def prediction_table(saved, pred: dict, latent: bool = False) -> tuple:
    """Header and values ``(B, columns)`` of a predictions CSV.

    Columns: ``mean_<target>`` and ``var_<target>`` for each target (when the likelihood has
    predictive moments), ``prob_<label>`` for each class and ``predicted_<target>`` (the most
    probable label) for classification, and ``latent_mean_<j>``/``latent_var_<j>`` for the Q
    latent functions with ``latent=True`` or when there are no predictive moments.
    """
    cfg = saved.config
    names = (cfg.get("columns") or {}).get("targets") or [f"y{p}" for p in range(len(cfg["example_target"]))]
    header, blocks = [], []
    if pred["mean"] is not None:
        for p, t in enumerate(names):
            header += [f"mean_{t}", f"var_{t}"]
            blocks += [pred["mean"][:, p:p + 1], pred["variance"][:, p:p + 1]]
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
    return table, _load_for_use(args.model, args.device)


def cmd_predict(args) -> int:
    """``savigp predict``: predictive means/variances (and class probabilities) per row."""
    _check_samples(args.samples)
    if args.out != "-":
        _check_output_path(args.out)
    table, saved = _model_and_table(args)
    icols = _select_inputs(table, saved.config, args.inputs)
    pred = saved.predict(table.values[:, icols], num_samples=args.samples, seed=args.seed)
    header, values = prediction_table(saved, pred, latent=args.latent)
    write_csv(args.out, header, values)
    if args.out != "-" and not args.quiet:
        print(f"wrote {values.shape[0]} prediction(s) ({', '.join(header)}) to {args.out}", file=sys.stderr)
    return EXIT_OK


METRIC_NAMES = {"n": "N", "sse": "SSE", "nlpd": "NLPD", "mse": "MSE", "mae": "MAE",
                "error_rate": "error rate", "nlp": "NLP"}


def format_metrics(metrics: dict) -> str:
    """A two-column text table of :func:`savigp.metrics.evaluate`'s dict."""
    rows = [("metric", "value")]
    for k, v in metrics.items():
        rows.append((METRIC_NAMES.get(k, k), str(v) if isinstance(v, int) else f"{v:.6g}"))
    w = max(len(r[0]) for r in rows)
    return "\n".join(f"{a:<{w}}  {b}" for a, b in rows)


def cmd_evaluate(args) -> int:
    """``savigp evaluate``: SSE and NLPD (regression) or error rate and NLP (classification)."""
    _check_samples(args.samples)
    table, saved = _model_and_table(args)
    tcols = _select_targets(table, saved.config, args.targets)
    icols = _select_inputs(table, saved.config, args.inputs, exclude=tcols)
    X, Y = table.values[:, icols], table.values[:, tcols]
    import torch

    _validate_targets(saved.model.likelihood, torch.as_tensor(saved.transform_targets(Y)), table, tcols)
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

exit status: 0 ok, 2 bad input (one line on stderr), 1 failure while running, 130 interrupted.
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
original units), prob_<label> and predicted_<target> for classification, and
latent_mean_<j>, latent_var_<j> with --latent (or when the likelihood has no predictive
moments, e.g. a user function).
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
    g.add_argument("--num-classes", type=int, metavar="C", help="softmax: classes (default: largest label + 1)")
    g.add_argument("--one-hot", action="store_true", help="softmax: targets are C one-hot columns")
    g.add_argument("--num-outputs", type=int, metavar="P", help="multi-gaussian, gprn: outputs (default: target columns)")
    g.add_argument("--num-nodes", type=int, metavar="Q'", help="gprn: latent node functions (default 1)")
    g.add_argument("--num-layers", type=int, metavar="P", help="seismic: layers (default: target columns)")
    g.add_argument("--num-tanh", type=int, metavar="I", help="warped: tanh terms of the warping (default 3)")
    g.add_argument("--df", type=float, help="student-t: degrees of freedom (default 4)")
    g.add_argument("--bin-width", type=float, help="poisson: width of each count's bin (default 1)")
    g.add_argument("--noise-variance", type=float, help="initial noise variance (gaussian, multi-gaussian, gprn, warped)")
    g.add_argument("--lik-option", action="append", metavar="KEY=VALUE",
                   help="any other constructor argument of the likelihood, e.g. depth_scale=10 (repeatable)")
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
    g.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    _add_threads_option(g)
    t.set_defaults(func=cmd_train)

    # ---------------------------------------------------------------- predict
    p = sub.add_parser("predict", formatter_class=fmt, epilog=EPILOG_PREDICT, help="predict at the rows of a CSV file",
                       description="Write predictive means and variances (and class probabilities) for each row.")
    p.add_argument("model", metavar="MODEL.pt")
    p.add_argument("data", metavar="DATA.csv")
    p.add_argument("--out", default="-", metavar="PRED.csv", help="output CSV (default '-': standard output)")
    p.add_argument("--inputs", metavar="COLS", help="input columns (default: by the training header names, or all)")
    _add_csv_options(p)
    p.add_argument("--latent", action="store_true", help="also write the latent functions' means and variances")
    p.add_argument("--samples", type=int, default=500, help="Monte Carlo samples (default 500)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None)
    p.add_argument("--quiet", action="store_true")
    _add_threads_option(p)
    p.set_defaults(func=cmd_predict)

    # ---------------------------------------------------------------- evaluate
    e = sub.add_parser("evaluate", formatter_class=fmt, epilog=EPILOG_EVALUATE, help="the paper's metrics on a CSV file",
                       description="Evaluate a model on labelled data: SSE and NLPD, or error rate and NLP.")
    e.add_argument("model", metavar="MODEL.pt")
    e.add_argument("data", metavar="DATA.csv")
    e.add_argument("--targets", metavar="COLS", help="target column(s) (default: the training target names)")
    e.add_argument("--inputs", metavar="COLS", help="input columns (default: the other columns)")
    _add_csv_options(e)
    e.add_argument("--json", action="store_true", help="print a JSON object instead of a table")
    e.add_argument("--samples", type=int, default=1000, help="Monte Carlo samples (default 1000)")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--device", default=None)
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
    from .training import TrainingDiverged

    try:
        return args.func(args)
    except KeyboardInterrupt:
        print(f"\nsavigp {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (TrainingDiverged, CholeskyError) as err:
        print(prefix + _one_line(err), file=sys.stderr)
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
