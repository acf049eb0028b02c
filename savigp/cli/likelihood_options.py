"""``--likelihood`` and its options -> the ``config["likelihood"]`` spec a model file records, and
the likelihood object built from it (built-in classes of :mod:`likelihoods`, or user code through
:mod:`savigp.cli.user_options`)."""
from __future__ import annotations

import importlib.util
import os

import numpy as np

from ..user_likelihood import USER_KINDS
from .checks import parse_lik_options
from .errors import CLIError, one_line

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


def available_likelihoods() -> list:
    """Built-in names whose module exists in the installed :mod:`likelihoods` package."""
    spec = importlib.util.find_spec("likelihoods")
    folders = list(spec.submodule_search_locations or []) if spec else []
    return [name for name, (_, mod) in LIKELIHOODS.items()
            if any(os.path.exists(os.path.join(f, mod + ".py")) for f in folders)]


def is_builtin(name: str) -> bool:
    return name in LIKELIHOODS


def likelihood_spec(args, Y: np.ndarray) -> dict:
    """The ``config["likelihood"]`` entry for ``--likelihood`` and its options (plain values)."""
    from ..serialization import canonical_import_path

    name = args.likelihood
    is_callable = not is_builtin(name)
    kind = "callable" if is_callable else name
    if is_callable and ":" not in name:
        raise CLIError(f"--likelihood {name!r}: not a built-in likelihood ({', '.join(available_likelihoods())}) "
                       "nor a user function 'package.module:function' or 'path/to/file.py:function'")
    for opt, applies in LIKELIHOOD_OPTIONS.items():
        value = getattr(args, opt, None)
        if value not in (None, False) and kind not in applies:
            raise CLIError(f"--{opt.replace('_', '-')} does not apply to --likelihood {name} "
                           f"(it is for: {', '.join(applies)})")
    P = Y.shape[1]
    extra = parse_lik_options(args.lik_option)
    if is_callable:
        from .user_options import user_likelihood_spec

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


def make_likelihood(spec: dict):
    """Construct the likelihood; a constructor's complaint becomes a one-line CLIError."""
    import likelihoods

    from ..serialization import make_likelihood as build

    if spec["name"] not in USER_KINDS and getattr(likelihoods, spec["class"], None) is None:
        raise CLIError(f"--likelihood {spec['name']}: class likelihoods.{spec['class']} is not available in this "
                       f"installation (available: {', '.join(available_likelihoods())})")
    try:
        return build(spec)
    except TypeError as err:
        raise CLIError(f"--likelihood {spec['name']}: bad option(s) {spec.get('kwargs')}: {one_line(err)}") from None
    except ValueError as err:
        if type(err).__name__ == "LikelihoodImportError":
            raise
        raise CLIError(f"--likelihood {spec['name']}: {one_line(err)}") from None


def class_labels(spec: dict, likelihood, Y: np.ndarray):
    """The label of each class, as the model file records it (``config["class_labels"]``), or
    None for regression and for a user ``Likelihood`` subclass (classes 0..C-1 in its own order)."""
    if likelihood.task != "classification":
        return None
    if spec["name"] == "logistic":
        return [-1.0 if bool((Y == -1).any()) else 0.0, 1.0]
    if getattr(likelihood, "classes", None) is not None:  # a user function's label set
        return [float(c) for c in likelihood.classes]
    if "num_classes" in spec["kwargs"]:
        return [float(c) for c in range(int(spec["kwargs"]["num_classes"]))]
    return None
