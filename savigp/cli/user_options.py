"""The command line's handling of user likelihoods: ``--likelihood file.py:function`` (with
``--task``, ``--num-classes``, ``--mean-function``, ``--lik-param``, ``--min-log-prob``) and
``--likelihood file.py:Class`` (a ``Likelihood`` subclass, constructor arguments by
``--lik-option``): the spec a model file records, a first call of the function that fails in
one line, and data-file lines in the error for non-finite likelihood values."""
from __future__ import annotations

import contextlib
import difflib
import inspect
import sys
from typing import Optional

import numpy as np

from likelihoods.callable import label_set

from ..model_files.schema import USER_CODE_ARGUMENTS
from ..estimators.nonfinite import NonFiniteLogProb
from ..user_likelihood import is_likelihood_class, parse_lik_params, unused_latents
from .errors import CLIError, one_line
from .plan import TrainPlan

#: options that only a user *function* takes
FUNCTION_OPTIONS = ("num_latent", "task", "num_classes", "mean_function", "lik_param", "min_log_prob")


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def user_likelihood_spec(plan: TrainPlan, Y: np.ndarray, path: str, extra: dict) -> dict:
    """The ``config["likelihood"]`` spec of ``--likelihood path`` (a function or a class).

    Args:
        plan: the parsed ``train`` options; Y: the targets ``(N, P)`` as read (file units);
        path: the canonical ``file.py:name``; extra: the ``--lik-option`` values.

    The function or class and the ``--mean-function`` are recorded with the SHA-256 of their
    files' bytes that ran (:func:`savigp.model_files.user_code.load_code`), checked before a later run.
    """
    obj, ref = import_user_code(path)
    if is_likelihood_class(obj):
        given = [o for o in FUNCTION_OPTIONS if getattr(plan, o, None) not in (None, False, [])]
        if given:
            raise CLIError(f"{_option(given[0])} does not apply to --likelihood {path}: it is a Likelihood subclass, "
                             "whose constructor sets it; pass constructor arguments as --lik-option KEY=VALUE")
        _check_names(obj.__init__, extra, f"--lik-option {{name}}=...: {path} takes no argument {{name!r}}",
                     "it takes", skip=1)
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
    task = extra.pop("task", None) or plan.task or "regression"
    num_classes = extra.pop("num_classes", None) if plan.num_classes is None else plan.num_classes
    num_latent = int(extra.pop("num_latent", None) or plan.num_latent or 1)
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
        params, constraints = parse_lik_params(plan.lik_param)
    except ValueError as err:
        raise CLIError(str(err)) from None
    _check_parameters_given(obj, path, params)
    if params:
        kwargs.update(params=params, constraints=constraints)
    if plan.min_log_prob is not None:
        kwargs["min_log_prob"] = float(plan.min_log_prob)
    kwargs.update(extra)
    spec = {"name": "callable", "class": "CallableLikelihood", **ref, "kwargs": kwargs}
    if plan.mean_function:  # code: recorded with its SHA-256 under code_kwargs, never among kwargs
        spec["code_kwargs"] = {"mean_fn": import_user_code(plan.mean_function, "--mean-function")[1]}  # a missing one: one line now
    return spec


def import_user_code(path: str, option: str = "--likelihood") -> tuple:
    """:func:`savigp.model_files.user_code.import_with_reference` of ``path`` (``file.py:name`` or
    ``module:name``); a name the file does not define is one line that names the functions it
    does define closest to it ("did you mean ...?")."""
    from ..model_files import LikelihoodImportError
    from ..model_files.user_code import import_with_reference, load_code, split_spec

    try:
        return import_with_reference(path)
    except LikelihoodImportError as err:
        target, name = split_spec(path)
        if "has no attribute" not in str(err):
            raise
        module = load_code(target, spec=path)[0]  # (the same bytes: the module that just ran)
        defined = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
                         and getattr(v, "__module__", None) == module.__name__)
        close = difflib.get_close_matches(name, defined, n=3, cutoff=0.6)
        hint = (f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else "") + \
            (f" (it defines {', '.join(defined[:12])}{', ...' if len(defined) > 12 else ''})" if defined else "")
        raise CLIError(f"{option} {path}: {target} defines no function {name!r}{hint}") from None


def _check_parameters_given(fn, path: str, params: dict) -> None:
    """A user function's keyword parameters after ``(y, f)`` that have no default must be given by
    ``--lik-param``: else one line that says how (before the function is first called); and each
    ``--lik-param`` must name one of them (unless it takes ``**kwargs``): else one line naming it and
    listing them, the closest first (a misspelt name)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # builtins and some callables: the first call says
        return
    _check_names(fn, params, f"--lik-param {{name}}=...: {path} has no parameter {{name!r}}",
                 "its parameters after (y, f):", skip=2)
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    names = [p for p in sig.parameters.values() if p.kind in positional + (inspect.Parameter.KEYWORD_ONLY,)]
    extra = [p.name for i, p in enumerate(names) if (i >= 2 or p.kind is inspect.Parameter.KEYWORD_ONLY)
             and p.default is inspect.Parameter.empty and p.name not in params]
    if extra:
        name = extra[0]
        raise CLIError(f"--likelihood {path}: its parameter {name!r} has no value: give it with --lik-param "
                       f"{name}=VALUE (learned; {name}=VALUE:positive keeps it above 0, {name}=VALUE:unit_interval in "
                       f"(0, 1), {name}=VALUE:fixed holds it{'' if len(extra) == 1 else '; also ' + ', '.join(extra[1:])})")


def _check_names(fn, given, message: str, listing: str, skip: int) -> None:
    """Each name in ``given`` (``--lik-param`` or ``--lik-option`` names) one that ``fn`` takes as a
    keyword, past its first ``skip`` parameters (``(y, f)``; ``self``), unless it takes ``**kwargs``:
    else a CLIError, ``message`` (formatted with ``name``) then the names it takes, the closest first."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # builtins and some callables: the first call says
        return
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    params = list(sig.parameters.values())
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return
    takes = [p.name for i, p in enumerate(params) if p.kind in kinds and (i >= skip or p.kind is kinds[1])]
    unknown = [name for name in given if name not in takes]
    if unknown:
        name = unknown[0]
        near = sorted(takes, key=lambda t: -difflib.SequenceMatcher(None, name, t).ratio())  # closest first
        close = difflib.get_close_matches(name, takes, n=1, cutoff=0.6)
        listed = f"{listing} {', '.join(near)}" if near else f"{listing} none"
        raise CLIError(message.format(name=name) + (f"; did you mean {close[0]!r}?" if close else "") + f" ({listed})")


def _probe_input(likelihood, Y, scale: float, seed: int) -> tuple:
    """The first 3 rows ``y (3, P)`` of ``Y`` and 2 seeded draws ``f (2, 3, Q)`` of N(0, scale^2)."""
    import torch

    y = Y[:3]
    gen = torch.Generator().manual_seed(seed)
    f = scale * torch.randn(2, y.shape[0], int(likelihood.num_latent), generator=gen, dtype=torch.float64)
    return y, f.to(y)


def probe_callable(likelihood, Y, spec: dict) -> None:
    """Call a user likelihood once on 3 rows and 2 samples; a failure or wrong shape -> CLIError.
    Declared ``differentiable``, it is called as training calls it, with f that requires grad (a
    numpy function so declared is refused here, as bad input, not at the first step)."""
    import torch

    y, f = _probe_input(likelihood, Y, 0.1, 0)
    if getattr(likelihood, "differentiable", False):
        f = f.detach().requires_grad_(True)
    try:
        with torch.enable_grad():
            out = likelihood.log_prob(y, f).detach()
    except ValueError as err:
        raise CLIError(f"--likelihood {spec['import_path']}: {one_line(err)}") from None
    except (Exception, SystemExit) as err:  # (sys.exit in the function is its failure too)
        raise CLIError(f"--likelihood {spec['import_path']}: the function failed when called with y of shape "
                       f"{tuple(y.shape)} and f of shape {tuple(f.shape)} (Q = --num-latent {likelihood.num_latent}): "
                       f"{type(err).__name__}: {one_line(err)}") from None
    if not bool(torch.isfinite(out).all()):  # exit 3 with the rows and f values
        from ..estimators.nonfinite import non_finite_error

        raise non_finite_error(likelihood, y, f.detach(), out)


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


def user_code_failure(err: BaseException) -> Optional[tuple]:
    """``(error, "file, line N")`` when ``err`` came from user code (a likelihood or mean function
    run from its file: :func:`savigp.model_files.user_code.load_code`): the exception raised there
    (``err`` or one of its causes) and the line of the innermost user-code frame; else None."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        tb, where = err.__traceback__, None
        while tb is not None:
            if tb.tb_frame.f_globals.get("__savigp_sha256__") is not None:  # (a module load_code ran)
                where = f"{tb.tb_frame.f_code.co_filename}, line {tb.tb_lineno}"
            tb = tb.tb_next
        if where is not None:
            return err, where
        err = err.__cause__ or err.__context__
    return None


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

