"""The command line's handling of user likelihoods: ``--likelihood file.py:function`` (with
``--task``, ``--num-classes``, ``--mean-function``, ``--lik-param``, ``--min-log-prob``) and
``--likelihood file.py:Class`` (a ``Likelihood`` subclass, constructor arguments by
``--lik-option``): the spec a model file records, a first call of the function that fails in
one line, and data-file lines in the error for non-finite likelihood values."""
from __future__ import annotations

import contextlib
import inspect
import sys

import numpy as np

from likelihoods.callable import label_set

from ..model_files.schema import USER_CODE_ARGUMENTS
from ..estimators.nonfinite import NonFiniteLogProb
from ..user_likelihood import is_likelihood_class, parse_lik_params, unused_latents
from .errors import CLIError, one_line

#: options that only a user *function* takes
FUNCTION_OPTIONS = ("num_latent", "task", "num_classes", "mean_function", "lik_param", "min_log_prob")


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def user_likelihood_spec(args, Y: np.ndarray, path: str, extra: dict) -> dict:
    """The ``config["likelihood"]`` spec of ``--likelihood path`` (a function or a class).

    Args:
        args: the parsed ``train`` options; Y: the targets ``(N, P)`` as read (file units);
        path: the canonical ``file.py:name``; extra: the ``--lik-option`` values.

    The function or class and the ``--mean-function`` are recorded with the SHA-256 of their
    files' bytes that ran (:func:`savigp.model_files.user_code.load_code`), checked before a later run.
    """
    from ..model_files.user_code import import_with_reference

    obj, ref = import_with_reference(path)
    if is_likelihood_class(obj):
        given = [o for o in FUNCTION_OPTIONS if getattr(args, o, None) not in (None, False, [])]
        if given:
            raise CLIError(f"{_option(given[0])} does not apply to --likelihood {path}: it is a Likelihood subclass, "
                             "whose constructor sets it; pass constructor arguments as --lik-option KEY=VALUE")
        return {"name": "user-class", "class": obj.__name__, **ref, "kwargs": dict(extra)}
    if isinstance(obj, type):
        raise CLIError(f"--likelihood {path}: {obj.__name__} is a class but not a subclass of likelihoods.Likelihood; "
                         "give a function log_lik(y, f) or a Likelihood subclass")
    from likelihoods import CallableLikelihood

    extra = dict(extra)
    # code (the function, its mean function, where they are) is recorded apart, never as an option
    accepted = set(inspect.signature(CallableLikelihood.__init__).parameters) - {"self", "params", "constraints",
                                                                                 *USER_CODE_ARGUMENTS}
    unknown = sorted(set(extra) - accepted)
    if unknown:
        name = unknown[0]
        raise CLIError(f"--lik-option {name}=...: not an option of a user function (options: "
                         f"{', '.join(sorted(accepted))}); to give the function a keyword parameter use "
                         f"--lik-param {name}=VALUE (learned) or --lik-param {name}=VALUE:fixed")
    task = extra.pop("task", None) or args.task or "regression"
    num_classes = extra.pop("num_classes", None) if args.num_classes is None else args.num_classes
    num_latent = int(extra.pop("num_latent", None) or args.num_latent or 1)
    if num_latent < 1:
        raise CLIError(f"--num-latent must be >= 1, got {num_latent}")
    kwargs = {"num_latent": num_latent, "output_dim": int(Y.shape[1]), "backend": "auto", "task": task}
    if task == "classification":  # the label set as the model file records it, checked by the likelihood's rule
        try:
            kwargs["classes"] = label_set(num_classes=num_classes, targets=Y[:, 0])
        except ValueError as err:
            raise CLIError(f"--task classification: {err} (on the command line: --num-classes C for labels "
                           "0..C-1)") from None
    elif task != "regression":
        raise CLIError(f"--task must be regression or classification, got {task!r}")
    elif num_classes is not None:
        raise CLIError("--num-classes applies to a user function with --task classification")
    try:
        params, constraints = parse_lik_params(args.lik_param)
    except ValueError as err:
        raise CLIError(str(err)) from None
    if params:
        kwargs.update(params=params, constraints=constraints)
    if args.min_log_prob is not None:
        kwargs["min_log_prob"] = float(args.min_log_prob)
    kwargs.update(extra)
    spec = {"name": "callable", "class": "CallableLikelihood", **ref, "kwargs": kwargs}
    if args.mean_function:  # code: recorded with its SHA-256 under code_kwargs, never among kwargs
        spec["code_kwargs"] = {"mean_fn": import_with_reference(args.mean_function)[1]}  # a missing one: one line now
    return spec


def _probe_input(likelihood, Y, scale: float, seed: int) -> tuple:
    """The first 3 rows ``y (3, P)`` of ``Y`` and 2 seeded draws ``f (2, 3, Q)`` of N(0, scale^2)."""
    import torch

    y = Y[:3]
    gen = torch.Generator().manual_seed(seed)
    f = scale * torch.randn(2, y.shape[0], int(likelihood.num_latent), generator=gen, dtype=torch.float64)
    return y, f.to(y)


def probe_callable(likelihood, Y, spec: dict) -> None:
    """Call a user likelihood once on 3 rows and 2 samples; a failure or wrong shape -> CLIError."""
    import torch

    y, f = _probe_input(likelihood, Y, 0.1, 0)
    try:
        out = likelihood.log_prob(y, f)
    except ValueError as err:
        raise CLIError(f"--likelihood {spec['import_path']}: {one_line(err)}") from None
    except (Exception, SystemExit) as err:  # (sys.exit in the function is its failure too)
        raise CLIError(f"--likelihood {spec['import_path']}: the function failed when called with y of shape "
                       f"{tuple(y.shape)} and f of shape {tuple(f.shape)} (Q = --num-latent {likelihood.num_latent}): "
                       f"{type(err).__name__}: {one_line(err)}") from None
    if not bool(torch.isfinite(out).all()):  # exit 3 with the rows and f values
        from ..estimators.nonfinite import non_finite_error

        raise non_finite_error(likelihood, y, f, out)


def warn_unused_latents(likelihood, Y, spec: dict) -> None:
    """A warning on stderr when the likelihood ignores some of its Q latent functions (e.g.
    ``--num-latent 3`` for a function of f[..., 0]): they would be trained for nothing."""
    Q = int(likelihood.num_latent)
    if Q < 2:
        return
    y, f = _probe_input(likelihood, Y, 0.3, 1)
    try:
        unused = unused_latents(likelihood, y, f)
    except Exception:  # the probe is advisory; training reports real failures
        return
    if unused:
        print(f"savigp train: warning: latent function(s) {unused} of Q = {Q} do not change the values of "
              f"--likelihood {spec['import_path']}: it reads fewer latent functions than --num-latent gives it, and "
              "the unused ones are fitted for nothing", file=sys.stderr)


@contextlib.contextmanager
def file_lines_in_errors(table):
    """Re-word a :class:`NonFiniteLogProb` raised inside so that data rows are ``table``'s file lines."""
    try:
        yield
    except NonFiniteLogProb as err:
        lines = table.lines

        def where(r: int) -> str:
            return f"{table.path} line {int(lines[r])}" if 0 <= r < len(lines) else f"data row {r}"

        err.args = (err.render(where),)
        raise

