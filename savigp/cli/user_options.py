"""The command line's handling of user likelihoods: ``--likelihood file.py:function`` (with
``--task``, ``--num-classes``, ``--mean-function``, ``--lik-param``, ``--min-log-prob``) and
``--likelihood file.py:Class`` (a ``Likelihood`` subclass, constructor arguments by
``--lik-option``), and data-file lines in the error for non-finite likelihood values."""
from __future__ import annotations

import contextlib
import inspect
import sys

import numpy as np

from likelihoods.callable import MAX_INFERRED_CLASSES

from .nonfinite import NonFiniteLogProb
from .user_likelihood import is_likelihood_class, labels_of, parse_lik_params, unused_latents

#: options that only a user *function* takes
FUNCTION_OPTIONS = ("num_latent", "task", "num_classes", "mean_function", "lik_param", "min_log_prob")


def _cli_error(msg: str):
    from .cli import CLIError

    return CLIError(msg)


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def user_likelihood_spec(args, Y: np.ndarray, path: str, extra: dict) -> dict:
    """The ``config["likelihood"]`` spec of ``--likelihood path`` (a function or a class).

    Args:
        args: the parsed ``train`` options; Y: the targets ``(N, P)`` as read (file units);
        path: the canonical ``file.py:name``; extra: the ``--lik-option`` values.

    The function or class and the ``--mean-function`` are recorded with the SHA-256 of their
    files (:func:`savigp.serialization.code_reference`), checked before a later import.
    """
    from .serialization import code_reference, import_callable

    obj = import_callable(path)
    if is_likelihood_class(obj):
        given = [o for o in FUNCTION_OPTIONS if getattr(args, o, None) not in (None, False, [])]
        if given:
            raise _cli_error(f"{_option(given[0])} does not apply to --likelihood {path}: it is a Likelihood subclass, "
                             "whose constructor sets it; pass constructor arguments as --lik-option KEY=VALUE")
        return {"name": "user-class", "class": obj.__name__, **code_reference(path), "kwargs": dict(extra)}
    if isinstance(obj, type):
        raise _cli_error(f"--likelihood {path}: {obj.__name__} is a class but not a subclass of likelihoods.Likelihood; "
                         "give a function log_lik(y, f) or a Likelihood subclass")
    from likelihoods import CallableLikelihood

    extra = dict(extra)
    accepted = set(inspect.signature(CallableLikelihood.__init__).parameters) - {"self", "log_lik", "mean_fn",
                                                                                 "import_path", "params", "constraints"}
    unknown = sorted(set(extra) - accepted)
    if unknown:
        name = unknown[0]
        raise _cli_error(f"--lik-option {name}=...: not an option of a user function (options: "
                         f"{', '.join(sorted(accepted))}); to give the function a keyword parameter use "
                         f"--lik-param {name}=VALUE (learned) or --lik-param {name}=VALUE:fixed")
    task = extra.pop("task", None) or args.task or "regression"
    num_classes = extra.pop("num_classes", None) if args.num_classes is None else args.num_classes
    num_latent = int(extra.pop("num_latent", None) or args.num_latent or 1)
    if num_latent < 1:
        raise _cli_error(f"--num-latent must be >= 1, got {num_latent}")
    kwargs = {"num_latent": num_latent, "output_dim": int(Y.shape[1]), "backend": "auto", "task": task}
    if task == "classification":
        if Y.shape[1] != 1:
            raise _cli_error(f"--task classification takes one target column of labels, got {Y.shape[1]}")
        if num_classes is not None and (int(num_classes) != num_classes or int(num_classes) < 2):
            raise _cli_error(f"--num-classes must be an integer >= 2, got {num_classes}")
        labels = labels_of(Y, num_classes)
        if num_classes is None and len(labels) > MAX_INFERRED_CLASSES:
            raise _cli_error(f"--task classification: the targets hold {len(labels)} distinct labels; give "
                             "--num-classes C (labels 0..C-1) or use a regression task")
        if len(labels) < 2:
            raise _cli_error(f"--task classification: the targets hold only the label {labels}; give --num-classes")
        kwargs["classes"] = labels
    elif task != "regression":
        raise _cli_error(f"--task must be regression or classification, got {task!r}")
    elif num_classes is not None:
        raise _cli_error("--num-classes applies to a user function with --task classification")
    try:
        params, constraints = parse_lik_params(args.lik_param)
    except ValueError as err:
        raise _cli_error(str(err)) from None
    if params:
        kwargs.update(params=params, constraints=constraints)
    if args.min_log_prob is not None:
        kwargs["min_log_prob"] = float(args.min_log_prob)
    kwargs.update(extra)
    spec = {"name": "callable", "class": "CallableLikelihood", **code_reference(path), "kwargs": kwargs}
    if args.mean_function:  # code: recorded with its SHA-256 under code_kwargs, never among kwargs
        spec["code_kwargs"] = {"mean_fn": code_reference(args.mean_function)}
        import_callable(spec["code_kwargs"]["mean_fn"]["import_path"])  # a missing file or function: one line now
    return spec


def warn_unused_latents(likelihood, Y, spec: dict) -> None:
    """A warning on stderr when the likelihood ignores some of its Q latent functions (e.g.
    ``--num-latent 3`` for a function of f[..., 0]): they would be trained for nothing."""
    import torch

    Q = int(likelihood.num_latent)
    if Q < 2:
        return
    y = Y[:3]
    f = 0.3 * torch.randn(2, y.shape[0], Q, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(y)
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

