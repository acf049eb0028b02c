"""``--likelihood`` and its options -> the ``config["likelihood"]`` spec a model file records, and
the likelihood object built from it: the classes of :data:`savigp._choices.LIKELIHOODS` with the
command-line options this module declares for each (:data:`OPTIONS`; ``likelihoods/`` knows
nothing of the command line), or user code through :mod:`savigp.cli.user_options`.

A likelihood class of your own is offered by ``savigp train --likelihood NAME`` once
:func:`register_likelihood` has named it (in a module your process imports), with the options of
``train`` it takes::

    from savigp.cli import register_likelihood
    register_likelihood("laplace", Laplace, options=("noise_variance",), standardizable=True)
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

from .._choices import LIKELIHOODS
from .checks import parse_lik_options
from .errors import CLIError, one_line
from .plan import TrainPlan

#: the name whose options are those of a user function (``--likelihood file.py:function``), not a class
USER_FUNCTION = "callable"
#: the options of ``savigp train`` (argparse destinations) each likelihood takes, by its name: each
#: given one (or its data default) becomes the constructor argument of the same name
#: (:data:`ARGUMENT_OF_OPTION`); ``--lik-option KEY=VALUE`` gives any other
OPTIONS = {
    "gaussian": ("noise_variance",), "logistic": (), "softmax": ("num_classes", "one_hot"), "poisson": ("bin_width",),
    "warped": ("num_tanh", "noise_variance"), "student-t": ("df",), "gprn": ("num_outputs", "num_nodes", "noise_variance"),
    "seismic": ("num_layers",), "multi-gaussian": ("num_outputs", "noise_variance"), "probit": (),
    USER_FUNCTION: ("num_latent", "num_classes", "task", "mean_function", "lik_param", "min_log_prob"),
}
#: the likelihoods whose targets are real-valued location-scale data, which ``--standardize-targets``
#: may standardize
STANDARDIZABLE = {"gaussian", "warped", "student-t", "gprn", "multi-gaussian"}
#: a likelihood option whose constructor argument has another name
ARGUMENT_OF_OPTION = {"noise_variance": "variance"}


def register_likelihood(name: str, cls: type, *, options: Iterable[str] = (), standardizable: bool = False,
                        replace: bool = False) -> type:
    """Offer the likelihood class ``cls`` as ``savigp train --likelihood name`` (and rebuild it from
    a model file that records ``name``): one entry of :data:`savigp._choices.LIKELIHOODS`, with the
    ``train`` options it takes (``options``: argparse destinations such as ``"noise_variance"``) and
    whether ``--standardize-targets`` may standardize its targets. Returns ``cls``.

    Raises:
        ValueError: a bad name, a taken one (without ``replace=True``), or options that are not
            option names.
    """
    if isinstance(options, str) or not all(isinstance(o, str) and o.isidentifier() for o in options):
        raise ValueError(f"register_likelihood({name!r}): options must be option names (argparse destinations "
                         f"such as 'noise_variance'), got {options!r}")
    if name == USER_FUNCTION:
        raise ValueError(f"register_likelihood: {name!r} stands for a user function")
    LIKELIHOODS.register(name, cls, replace=replace)
    OPTIONS[name] = tuple(options)
    (STANDARDIZABLE.add if standardizable else STANDARDIZABLE.discard)(name)
    return cls


def unregister_likelihood(name: str) -> None:
    """Undo :func:`register_likelihood` (a KeyError when ``name`` is not registered)."""
    LIKELIHOODS.unregister(name)
    OPTIONS.pop(name, None)
    STANDARDIZABLE.discard(name)


def available_likelihoods() -> list:
    """The names ``--likelihood`` accepts for likelihood classes, in registration order."""
    return list(LIKELIHOODS)


def is_builtin(name: str) -> bool:
    return name in LIKELIHOODS


def standardizable() -> tuple:
    """The names whose targets ``--standardize-targets`` may standardize, in registration order."""
    return tuple(n for n in LIKELIHOODS if n in STANDARDIZABLE)


def option_users() -> dict:
    """Option name -> the likelihood names that take it, in registration order (a user function last)."""
    out: dict = {}
    for name in [*LIKELIHOODS, USER_FUNCTION]:
        for opt in OPTIONS.get(name, ()):
            out[opt] = out.get(opt, ()) + (name,)
    return out


def _data_default(option: str, plan: TrainPlan, Y: np.ndarray):
    """The value of a likelihood option not given on the command line that the data decide, or
    None (the constructor's own default): one output or layer per target column, and softmax's
    classes (the one-hot columns, else the largest integer label + 1)."""
    if option in ("num_outputs", "num_layers"):
        return Y.shape[1]
    if option == "num_classes":
        if plan.one_hot:
            return Y.shape[1]
        labels = Y[:, 0]
        ints = labels[(labels >= 0) & (labels == np.round(labels))]
        return max(2, int(ints.max()) + 1) if ints.size else 2
    return None


def likelihood_spec(plan: TrainPlan, Y: np.ndarray) -> dict:
    """The ``config["likelihood"]`` entry for ``--likelihood`` and its options (plain values).

    A likelihood class takes the options :data:`OPTIONS` declares for it: each given one (or its
    data default) becomes the constructor argument of the same name (``--noise-variance``:
    ``variance``); ``--lik-option KEY=VALUE`` gives any other argument.
    """
    from ..model_files import canonical_import_path

    name = plan.likelihood
    is_callable = not is_builtin(name)
    kind = USER_FUNCTION if is_callable else name
    if is_callable and ":" not in name:
        import difflib

        close = difflib.get_close_matches(name.lower(), available_likelihoods(), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise CLIError(f"--likelihood {name!r}: not a built-in likelihood ({', '.join(available_likelihoods())}) "
                       f"nor a user function 'package.module:function' or 'path/to/file.py:function'{hint}")
    for opt, applies in option_users().items():
        value = getattr(plan, opt, None)
        if value not in (None, False) and kind not in applies:
            raise CLIError(f"--{opt.replace('_', '-')} does not apply to --likelihood {name} "
                           f"(it is for: {', '.join(applies)})")
    extra = parse_lik_options(plan.lik_option)
    if is_callable:
        from .user_options import user_likelihood_spec

        return user_likelihood_spec(plan, Y, canonical_import_path(name), extra)
    cls = LIKELIHOODS[name]
    kwargs: dict = {}
    for opt in OPTIONS.get(name, ()):
        value = getattr(plan, opt, None)
        value = _data_default(opt, plan, Y) if value is None else value
        if value is not None:
            kwargs[ARGUMENT_OF_OPTION.get(opt, opt)] = value
    kwargs.update(extra)
    return {"name": name, "class": cls.__name__, "kwargs": kwargs}


def option_of_parameter(plan: TrainPlan, key: str) -> str:
    """The option (with its value as given) that set the likelihood's state-dict entry ``key``
    (``variance.raw``: ``--noise-variance 1e+300``; a ``--lik-option`` or ``--lik-param`` item by
    its name), else ``--likelihood NAME``; for messages."""
    parts = key.split(".")
    for opt in OPTIONS.get(plan.likelihood, OPTIONS[USER_FUNCTION]):
        if ARGUMENT_OF_OPTION.get(opt, opt) in parts and getattr(plan, opt, None) is not None:
            return f"--{opt.replace('_', '-')} {getattr(plan, opt)}"
    for option, items in (("--lik-option", plan.lik_option), ("--lik-param", plan.lik_param)):
        for item in items or []:
            if item.partition("=")[0].strip().replace("-", "_") in parts:
                return f"{option} {item}"
    return f"--likelihood {plan.likelihood}"


def make_likelihood(spec: dict):
    """Construct the likelihood; a constructor's complaint becomes a one-line CLIError."""
    from ..model_files import LikelihoodImportError, make_likelihood as build

    try:
        return build(spec)
    except TypeError as err:
        raise CLIError(f"--likelihood {spec['name']}: bad option(s) {spec.get('kwargs')}: {one_line(err)}") from None
    except ValueError as err:
        if type(err) is LikelihoodImportError:  # its own one line, naming the file
            raise
        raise CLIError(f"--likelihood {spec['name']}: {one_line(err)}") from None


def class_labels(spec: dict, likelihood, Y: np.ndarray):
    """The label of each class, as the model file records it (``config["class_labels"]``), or
    None for regression and for a user ``Likelihood`` subclass (classes 0..C-1 in its own order)."""
    if likelihood.task != "classification":
        return None
    if getattr(likelihood, "binary", False):  # Logistic and Probit (and subclasses): labels {-1, +1} or {0, 1}
        return [-1.0 if bool((Y == -1).any()) else 0.0, 1.0]
    if getattr(likelihood, "classes", None) is not None:  # a user function's label set
        return [float(c) for c in likelihood.classes]
    if "num_classes" in spec["kwargs"]:
        return [float(c) for c in range(int(spec["kwargs"]["num_classes"]))]
    return None
