"""Model files: save a trained :class:`~savigp.model.SAVIGP` and rebuild it without its data.

A model file is a ``torch.save`` of a dict of tensors and plain Python values only, so it loads
with ``torch.load(path, weights_only=True)``::

    {
      "config":         plain dict (below),
      "state_dict":     SAVIGP.state_dict() (tensors, on the CPU),
      "training_state": None or {"optimizer": optimizer.state_dict(), "generator": ByteTensor
                        (torch.Generator state), "perm": LongTensor (N,), "pos": int},
    }

``config`` holds everything needed to rebuild the module around the state dict and to use it:

* ``"model"``: SAVIGP's own ``config`` (input_dim D, num_data N, num_latent Q, num_inducing M,
  dense, learn_inducing, posterior, num_components, learn_prior_mean, mean_basis_size, mean_basis,
  entropy, entropy_samples);
* ``"model_options"``: kernel name, inducing_init, seed, dtype name, prior_mean;
* ``"likelihood"``: ``{"name", "class", "kwargs"}`` for a class of :mod:`likelihoods`, or
  ``{"name": "callable" | "user-class", "class", "import_path", "sha256", "kwargs"}`` for a user
  function or ``Likelihood`` subclass (see :mod:`savigp.user_likelihood`): where it was and the
  SHA-256 of its file at training (``"code_kwargs"``: the same for further functions given to its
  constructor, e.g. ``{"mean_fn": {"import_path", "sha256"}}``);
* ``"standardize"``: ``{"inputs": None | {"mean": [D floats], "std": [D floats]},
  "targets": None | {"mean": [P floats], "std": [P floats]}}``, undone at prediction;
* ``"example_target"``: one valid target row (P floats), used to build the placeholder data;
* ``"class_labels"``: the label of each class (classification) or None;
* ``"columns"``, ``"training"``, ``"step"``, ``"complete"``: what the command line recorded.

The training data are not stored (``train_x``/``train_y`` are non-persistent buffers): a model
rebuilt by :func:`rebuild_model` without data holds placeholders and can predict, not train.

**Trust model.** A model file is data: loading one never imports or runs anything it names.
Built-in likelihoods are found by class name among the classes :mod:`likelihoods` exports, with
keyword arguments checked against the constructor. A user function is imported only when the
caller says so: ``load(path, likelihood="my_lik.py:log_lik")`` (``--likelihood`` on the command
line; the file may have moved: a path without ``:function`` keeps the recorded function name) or
``load(path, trust_code=True)`` (``--trust-code``: import what the file names). Either way, when
a SHA-256 was recorded at training and the file now differs, it is refused before it is imported
(``trust_code=True`` overrides that too). Without either, the model loads with its latent
functions only: ``predict`` gives latent means and variances, and evaluation says what to pass.
Every configuration field is checked (type, range, size against the state dict, memory needed;
:mod:`savigp._model_schema`) before a tensor is allocated.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import math
import os
import sys
import zipfile
from typing import Callable, Optional

import numpy as np
import torch

from ._model_schema import SchemaError, check_config
from .atomic_files import atomic_write
from .model import SAVIGP

FORMAT = "savigp-model"
#: 2: ``posterior="diag"`` became the paper's diagonal mixture over u (:class:`UDiagonalMixture`);
#: version-1 files meant the whitened one, read back as ``"diag-whitened"`` (see :func:`_upgrade`).
#: 3: a user likelihood's SHA-256 is recorded (``"sha256"``), and the file is never imported unless
#: the caller says so; versions 1 and 2 read the same way (without a hash to check)
VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
#: the names of the whitened diagonal mixture in version-1 files
_V1_DIAGONAL_NAMES = ("diag", "diagonal", "mog")


class ModelFileError(ValueError):
    """A model file that cannot be read or used; ``str(err)`` is one line naming the file."""


class LikelihoodImportError(ValueError):
    """A user likelihood ``module:function`` or ``file.py:function`` that cannot be imported."""


# ---------------------------------------------------------------------- user likelihoods
def _is_file_spec(target: str) -> bool:
    return target.endswith(".py") or "/" in target or os.sep in target


def _split_spec(spec: str, also: str = "") -> tuple[str, str]:
    """``"target:function"`` -> (target, function), or a one-line error naming what was expected."""
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name:
        raise LikelihoodImportError(
            f"likelihood {spec!r}: expected {also}'package.module:function' or 'path/to/file.py:function'"
        )
    return target, name


def canonical_import_path(spec: str) -> str:
    """``spec`` with a file path made absolute (``/abs/file.py:fn``); module paths unchanged."""
    target, name = _split_spec(spec, "a built-in name, ")
    if _is_file_spec(target):
        target = os.path.abspath(os.path.expanduser(target))
    return f"{target}:{name}"


def import_callable(spec: str) -> Callable:
    """Import the function named by ``"package.module:function"`` or ``"path/to/file.py:function"``.

    A module path is looked up on ``sys.path`` and then in the current folder.

    Raises:
        LikelihoodImportError: one line saying what is missing (file, module, function).
    """
    target, name = _split_spec(spec)
    if _is_file_spec(target):
        path = os.path.abspath(os.path.expanduser(target))
        if not os.path.isfile(path):
            raise LikelihoodImportError(f"likelihood {spec!r}: no such file {path}")
        # keyed by path and contents: an edited file is imported afresh, not served from the cache
        modname = "savigp_user_likelihood_" + hashlib.sha1((path + file_sha256(path)).encode()).hexdigest()[:12]
        if modname in sys.modules:
            module = sys.modules[modname]
        else:
            loader_spec = importlib.util.spec_from_file_location(modname, path)
            if loader_spec is None or loader_spec.loader is None:
                raise LikelihoodImportError(f"likelihood {spec!r}: cannot load {path} as a Python file")
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[modname] = module
            try:
                loader_spec.loader.exec_module(module)
            except BaseException as err:
                del sys.modules[modname]
                if isinstance(err, KeyboardInterrupt):
                    raise
                where = f" (line {err.lineno})" if isinstance(err, SyntaxError) and err.lineno else ""
                raise LikelihoodImportError(
                    f"likelihood {spec!r}: running {path} failed{where}: {type(err).__name__}: {err}"
                ) from None
    else:
        added = os.getcwd() not in sys.path
        if added:
            sys.path.append(os.getcwd())
        try:
            module = importlib.import_module(target)
        except BaseException as err:
            if isinstance(err, KeyboardInterrupt):
                raise
            raise LikelihoodImportError(f"likelihood {spec!r}: cannot import module {target!r}: {type(err).__name__}: {err}") from None
        finally:
            if added:
                sys.path.remove(os.getcwd())
    fn = getattr(module, name, None)
    if fn is None:
        raise LikelihoodImportError(f"likelihood {spec!r}: {target} has no attribute {name!r}")
    if not callable(fn):
        raise LikelihoodImportError(f"likelihood {spec!r}: {target}.{name} is a {type(fn).__name__}, not a function")
    return fn


#: arguments of :class:`likelihoods.CallableLikelihood` that name or are code: a model file records
#: them as ``import_path`` / ``code_kwargs`` (consent and SHA-256 apply), never among ``kwargs``
USER_CODE_ARGUMENTS = ("log_lik", "import_path", "mean_fn", "mean_import_path")


def make_likelihood(spec: dict, fn: Optional[Callable] = None, code: Optional[dict] = None):
    """Construct the likelihood that ``config["likelihood"]`` describes.

    For user code (``spec["name"]`` ``"callable"`` or ``"user-class"``) ``fn`` is the function
    or ``Likelihood`` subclass and ``code`` the further functions of ``spec["code_kwargs"]``
    (name -> function); without them the recorded import paths are imported, which only callers
    that were told to may do (the command line's ``train``, whose ``--likelihood`` and
    ``--mean-function`` name them; see :func:`authorized_import` and :func:`resolve_likelihood`).

    Raises:
        LikelihoodImportError: a user function that cannot be imported.
        ModelFileError: a likelihood class that is not one of :mod:`likelihoods`' own, or
            keyword arguments its constructor does not take.
    """
    import likelihoods

    kwargs = dict(spec.get("kwargs") or {})
    # ---- user likelihoods (functions and Likelihood subclasses in user code): every field of
    # their spec (task, classes, params, constraints, min_log_prob, code_kwargs, ...) is read back
    # by build_user_likelihood; CallableLikelihood.spec() writes them
    from .user_likelihood import USER_KINDS, build_user_likelihood

    if spec.get("name") in USER_KINDS:
        if fn is None:
            fn = import_callable(spec["import_path"])
        if code is None:
            code = {name: import_callable(ref["import_path"]) for name, ref in (spec.get("code_kwargs") or {}).items()}
        if spec.get("name") == "callable" and not isinstance(fn, type):
            _check_kwargs(likelihoods.CallableLikelihood, kwargs, skip=USER_CODE_ARGUMENTS)
        return build_user_likelihood(spec, fn, code)
    cls = builtin_likelihood_class(spec.get("class"), spec.get("name"))
    _check_kwargs(cls, kwargs)
    return cls(**kwargs)


def builtin_likelihood_class(name, cli_name=None):
    """The class ``name`` among those :mod:`likelihoods` exports, or the class registered under
    ``cli_name`` (:mod:`likelihoods.registry`: classes of modules this process imported) when its
    name is ``name``. Nothing is imported by name from anywhere."""
    import likelihoods
    from likelihoods import registry

    builtin = [n for n in likelihoods.__all__ if n not in ("Likelihood", "CallableLikelihood")]
    cls = getattr(likelihoods, name, None) if name in builtin else None
    if cls is None and cli_name in registry.names() and registry.get(cli_name).__name__ == name:
        cls = registry.get(cli_name)
    if not (isinstance(cls, type) and issubclass(cls, likelihoods.Likelihood)):
        raise ModelFileError(f"likelihood class {name!r} is not a built-in likelihood of this installation "
                             f"({', '.join(builtin)})")
    return cls


def _check_kwargs(cls, kwargs: dict, skip=()) -> None:
    params = inspect.signature(cls.__init__).parameters
    names = [n for n, p in params.items() if n != "self" and n not in skip
             and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    for key in kwargs:
        if key not in names:
            raise ModelFileError(f"likelihood {cls.__name__} takes no argument {key!r} (it takes {', '.join(names)})")


# ---------------------------------------------------------------------- user code: consent and hashes
class CodeNotAuthorized(LikelihoodImportError):
    """A model file names user code that the caller did not allow to run."""


def file_sha256(path: str) -> str:
    """SHA-256 of a file's bytes (hex)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _code_file(target: str) -> Optional[str]:
    """The file that defines ``target`` (a ``.py`` path, or a module found on ``sys.path``) or None.

    For a dotted module name ``find_spec`` imports its parent packages: call this only for code
    the user named."""
    if _is_file_spec(target):
        return os.path.abspath(os.path.expanduser(target))
    try:
        found = importlib.util.find_spec(target)
    except (ImportError, ValueError):
        return None
    origin = getattr(found, "origin", None) if found is not None else None
    return origin if origin and os.path.isfile(origin) else None


def code_reference(spec: str) -> dict:
    """``{"import_path", "sha256"}`` for a user function the user named (at training): the
    canonical import path and the SHA-256 of the file that defines it (None if there is none)."""
    path = canonical_import_path(spec)
    target, _ = _split_spec(path)
    origin = _code_file(target)
    return {"import_path": path, "sha256": file_sha256(origin) if origin and os.path.isfile(origin) else None}


def authorized_import(ref: dict, override=None, trust_code: bool = False, what: str = "likelihood",
                      source: str = "the model file") -> Callable:
    """Import the user function a model file records, but only with the caller's consent.

    Args:
        ref: ``{"import_path", "sha256"}`` from the file.
        override: where the function is now: ``"file.py:function"``, ``"package.module:function"``,
            or a file path alone (the recorded function name is kept); the caller's consent.
        trust_code: import ``ref["import_path"]`` itself (consent), and run a file whose SHA-256
            differs from the recorded one.

    Raises:
        CodeNotAuthorized: neither ``override`` nor ``trust_code``.
        LikelihoodImportError: the file changed since training (without ``trust_code``), or the
            import failed.
    """
    recorded = ref["import_path"]
    if override is None and not trust_code:
        raise CodeNotAuthorized(_consent_message(recorded, what, source))
    spec = recorded if override is None else _with_function(str(override), recorded)
    target, _ = _split_spec(spec)
    digest = ref.get("sha256")
    if digest:
        origin = _code_file(target)
        if origin is not None and os.path.isfile(origin):
            now = file_sha256(origin)
            if now != digest and not trust_code:
                raise LikelihoodImportError(
                    f"{what} {spec}: {origin} has changed since the model was trained (SHA-256 {now[:16]}..., recorded "
                    f"{digest[:16]}...); refusing to run it: pass --trust-code (trust_code=True) to run it anyway")
    return import_callable(spec)


def _consent_message(recorded: str, what: str, source: str) -> str:
    return (f"{source} names user code as its {what} ({recorded}); loading a model file never runs code it names: "
            f"pass --likelihood FILE.py[:FUNCTION] (likelihood=...) to say which file to run, or --trust-code "
            f"(trust_code=True) to run {recorded}")


def _with_function(spec: str, recorded: str) -> str:
    """``spec`` as ``target:function``: a bare file path or module keeps the recorded function name."""
    target, sep, name = spec.rpartition(":")
    if sep and target and name.isidentifier():
        return spec
    return f"{spec}:{_split_spec(recorded)[1]}"


def _function_path(fn) -> str:
    """Where a function defined at the top level of a module or script can be imported from again."""
    qual = getattr(fn, "__qualname__", "") or ""
    modname = getattr(fn, "__module__", None)
    if not qual.isidentifier() or modname is None:
        raise TypeError(f"cannot record where {fn!r} is defined (a lambda, a local function or a method): define it at "
                        "the top level of a file and pass import_path='file.py:function' to CallableLikelihood")
    module = sys.modules.get(modname)
    file = getattr(module, "__file__", None)
    if modname == "__main__" or modname.startswith("savigp_user_likelihood_"):
        if not file:
            raise TypeError(f"cannot record where {qual} is defined (interactive session): define it in a file and pass "
                            "import_path='file.py:function' to CallableLikelihood")
        return f"{os.path.abspath(file)}:{qual}"
    return f"{modname}:{qual}"


def likelihood_spec(lik) -> dict:
    """The ``config["likelihood"]`` entry that rebuilds ``lik``: its class (built-in) or its
    function's import path and SHA-256 (:class:`CallableLikelihood`, with the plain options of
    :meth:`CallableLikelihood.spec` and its mean function under ``code_kwargs``), and the
    constructor's arguments read back from the object's attributes (checked by rebuilding it).

    Raises:
        TypeError: a likelihood this cannot describe (a user class, a lambda), saying what to do.
    """
    import likelihoods

    cls = type(lik)
    if cls is likelihoods.CallableLikelihood:
        spec = lik.spec()
        kwargs = spec["kwargs"]
        spec.update(code_reference(lik.import_path or _function_path(lik.fn)))
        spec.pop("code_kwargs", None)
        if lik.mean_fn is not None:
            spec["code_kwargs"] = {"mean_fn": code_reference(lik.mean_import_path or _function_path(lik.mean_fn))}
        rebuilt = likelihoods.CallableLikelihood(lik.fn, mean_fn=lik.mean_fn, **kwargs)
    else:
        builtin = getattr(likelihoods, cls.__name__, None) is cls
        try:
            builtin_likelihood_class(cls.__name__, None if builtin else cls.__dict__.get("cli_name"))
        except ModelFileError:
            raise TypeError(f"cannot save a model with likelihood {cls.__name__}: model files hold built-in likelihoods "
                            "(likelihoods.*) and user functions (likelihoods.CallableLikelihood); a Likelihood "
                            "subclass of your own is saved by `savigp train --likelihood file.py:Class`") from None
        kwargs = {}
        for name, param in inspect.signature(cls.__init__).parameters.items():
            if name == "self" or param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
                continue
            if name.startswith("learn_") and isinstance(getattr(lik, name[6:], None), torch.nn.Module):
                kwargs[name] = any(p.requires_grad for p in getattr(lik, name[6:]).parameters())
                continue
            value = getattr(lik, name, None)
            if isinstance(value, (bool, int, float, str)):
                kwargs[name] = value
        spec = {"name": cls.__name__.lower() if builtin else cls.cli_name, "class": cls.__name__, "kwargs": kwargs}
        rebuilt = cls(**kwargs)
    shapes = {k: tuple(v.shape) for k, v in lik.state_dict().items()}
    if shapes != {k: tuple(v.shape) for k, v in rebuilt.state_dict().items()} or \
            (lik.num_latent, lik.output_dim) != (rebuilt.num_latent, rebuilt.output_dim):
        raise TypeError(f"cannot describe this {cls.__name__} by its constructor arguments {kwargs} (rebuilding it gives "
                        "other parameters); save it with an explicit config={'likelihood': {...}}")
    return spec


class _LatentOnly:
    """Stands in for a user likelihood that was not loaded: the latent functions can be predicted,
    nothing that needs log p(y | f)."""


def _latent_only_likelihood(Q: int, P: int, message: str):
    import likelihoods

    class LatentOnly(likelihoods.Likelihood, _LatentOnly):
        """A user likelihood that was not loaded (see the message)."""

        def __init__(self):
            super().__init__()
            self.num_latent, self.output_dim, self.note = Q, P, message

        def log_prob(self, y, f):
            raise CodeNotAuthorized(self.note)

    return LatentOnly()


def resolve_likelihood(config: dict, likelihood=None, trust_code: bool = False, source: str = "the model file",
                       code: Optional[dict] = None):
    """The likelihood of a (checked) configuration, honouring the trust model.

    Args:
        likelihood: None; for a model with user code (a function or a ``Likelihood`` subclass):
            where it is now (a spec string, see :func:`authorized_import`), the function or class
            itself, or a :class:`likelihoods.Likelihood` object.
        trust_code: import the code the file names.
        code: where further functions (``config["likelihood"]["code_kwargs"]``, e.g.
            ``{"mean_fn": "mean.py:mean"}``) are now: the caller's consent to run them. Without
            it, one from the likelihood's own file moves with ``likelihood``; others need
            ``trust_code``.

    Returns:
        the likelihood, or a latent-only stand-in when user code was not allowed to run.
    """
    import likelihoods

    from .user_likelihood import USER_KINDS

    spec = config["likelihood"]
    Q, P = config["model"]["num_latent"], len(config["example_target"])
    unknown = sorted(set(code or {}) - set(spec.get("code_kwargs") or {}))
    if unknown:
        raise ModelFileError(f"code for {unknown[0]!r} was given, but the model's likelihood records no such function")
    if spec.get("name") not in USER_KINDS:
        if likelihood is not None:
            raise ModelFileError(f"the model's likelihood is the built-in {spec.get('class')}; a likelihood is given only "
                                 "for a model trained with user code")
        return make_likelihood(spec)
    if not isinstance(spec.get("import_path"), str):
        raise ModelFileError("config.likelihood.import_path: a user likelihood without an import path")
    if isinstance(likelihood, likelihoods.Likelihood):
        return likelihood
    if likelihood is None and not trust_code:
        return _latent_only_likelihood(Q, P, _consent_message(spec["import_path"], "likelihood", source))
    used = spec["import_path"]  # where the code was imported from (recorded again if the model is saved)
    if callable(likelihood):  # the function or class itself: functions from its module move with it
        fn = likelihood
        try:
            where = _split_spec(_function_path(fn))[0]
        except TypeError:
            where = None
    else:
        fn = authorized_import(spec, likelihood, trust_code, source=source)
        if likelihood is not None:
            used = canonical_import_path(_with_function(str(likelihood), spec["import_path"]))
        where = None if likelihood is None else _split_spec(used)[0]
    main_target = _split_spec(spec["import_path"])[0]
    functions, refs = {}, {}
    for name, ref in (spec.get("code_kwargs") or {}).items():
        target, fname = _split_spec(ref["import_path"])
        override = (code or {}).get(name)
        if override is None and where is not None and target == main_target:
            override = f"{where}:{fname}"  # a function from the likelihood's file moves with it (the user named that file)
        functions[name] = authorized_import(ref, override, trust_code, what=f"likelihood {name}", source=source)
        now = ref["import_path"] if override is None else canonical_import_path(_with_function(str(override), ref["import_path"]))
        refs[name] = {**ref, "import_path": now}
    return make_likelihood({**spec, "import_path": used, "code_kwargs": refs}, fn=fn, code=functions)


# ---------------------------------------------------------------------- building models
def _dtype(name: str) -> torch.dtype:
    dt = getattr(torch, str(name), None)
    if not isinstance(dt, torch.dtype) or not dt.is_floating_point:
        raise ModelFileError(f"unknown floating-point dtype {name!r}")
    return dt


def build_model(X, Y, likelihood, options: dict) -> SAVIGP:
    """A new :class:`SAVIGP` on data ``X (N, D)``, ``Y (N, P)`` from command-line style options.

    ``options`` keys (all optional): ``kernel``, ``num_inducing``, ``inducing_inputs``
    (``(M, D)`` or ``(Q, M, D)``), ``inducing_init``, ``dense``,
    ``learn_inducing``, ``posterior``, ``num_components``, ``prior_mean``, ``learn_prior_mean``,
    ``mean_basis_size``, ``mean_basis``, ``entropy``, ``entropy_samples``, ``dtype`` (a name: ``"float32"``/``"float64"``), ``device``, ``seed``.
    """
    o = dict(options)
    return SAVIGP(
        X, Y, likelihood, o.get("kernel") or "rbf",
        num_inducing=o.get("num_inducing"), inducing_inputs=o.get("inducing_inputs"),
        inducing_init=o.get("inducing_init") or "kmeans",
        learn_inducing=bool(o.get("learn_inducing", True)), dense=bool(o.get("dense", False)),
        posterior=o.get("posterior") or "full", num_components=int(o.get("num_components") or 1),
        prior_mean=o["prior_mean"] if o.get("prior_mean") is not None else 0.0,
        learn_prior_mean=bool(o.get("learn_prior_mean", False)),
        entropy=o.get("entropy") or "bound", entropy_samples=int(o.get("entropy_samples") or 64),
        mean_basis_size=int(o.get("mean_basis_size") or 0), mean_basis=o.get("mean_basis") or "orthogonal", dtype=_dtype(o.get("dtype") or "float64"),
        device=o.get("device"), seed=int(o.get("seed") or 0),
    )


def rebuild_model(config: dict, state_dict: dict, X=None, Y=None, device=None, likelihood=None) -> SAVIGP:
    """The model a (checked, see :func:`read_model_file`) file describes, with its parameters
    loaded from ``state_dict``.

    Without ``X``/``Y`` the module is built around placeholder data of the recorded shapes (it
    can predict but not train); with them (``X (N, D)``, ``Y (N, P)``, e.g. to resume training)
    they become its training data. Inducing inputs are placeholders in both cases (no k-means
    is run) and are then overwritten by the state dict.

    Args:
        likelihood: the likelihood object (see :func:`resolve_likelihood`); default: the built-in
            class from the registry, or for a user function a latent-only stand-in (nothing is
            imported).
    """
    mc, mo = config["model"], config.get("model_options") or {}
    if likelihood is None:
        likelihood = resolve_likelihood(config)
    D, N, Q, M = int(mc["input_dim"]), int(mc["num_data"]), int(mc["num_latent"]), int(mc["num_inducing"])
    P = len(config["example_target"])
    if (int(likelihood.num_latent), int(likelihood.output_dim)) != (Q, P):
        raise ModelFileError(f"the likelihood {type(likelihood).__name__} reads Q={likelihood.num_latent} latent "
                             f"function(s) and P={likelihood.output_dim} target(s), but the model has Q={Q}, P={P}")
    with_data = X is not None
    if not with_data:
        n = N if mc["dense"] else max(2, int(mc.get("mean_basis_size") or 0))
        gen = torch.Generator().manual_seed(0)
        X = torch.randn(n, D, generator=gen, dtype=torch.float64)
        example = torch.as_tensor(config["example_target"], dtype=torch.float64).reshape(1, -1)
        Y = example.expand(n, example.shape[1]).clone()
    options = {
        "kernel": mo.get("kernel"), "inducing_init": mo.get("inducing_init"), "seed": mo.get("seed", 0),
        "dtype": mo.get("dtype", "float64"), "prior_mean": mo.get("prior_mean", 0.0),
        "dense": mc["dense"], "learn_inducing": mc["learn_inducing"], "posterior": mc["posterior"],
        "num_components": mc["num_components"], "learn_prior_mean": mc["learn_prior_mean"],
        "mean_basis_size": mc.get("mean_basis_size", 0), "mean_basis": mc.get("mean_basis"), "device": device,
        "entropy": mc.get("entropy"), "entropy_samples": mc.get("entropy_samples"),
    }
    if not mc["dense"]:
        options["inducing_inputs"] = torch.zeros(Q, M, D, dtype=torch.float64)
    if isinstance(likelihood, _LatentOnly):  # its parameters were not built: leave theirs out
        state_dict = {k: v for k, v in state_dict.items() if not k.startswith("likelihood.")}
    model = build_model(X, Y, likelihood, options)
    if not with_data:
        model.num_data = N
        model.config["num_data"] = N
    try:
        model.load_state_dict(state_dict, strict=True)
    except RuntimeError as err:
        first = str(err).strip().splitlines()
        raise ModelFileError(f"the parameters do not fit the model the file describes: {' '.join(s.strip() for s in first[:3])}") from None
    return model


# ---------------------------------------------------------------------- writing and reading files
def atomic_torch_save(obj, path: str) -> None:
    """``torch.save(obj)`` to ``path`` atomically (:func:`savigp.atomic_files.atomic_write`): a
    failure leaves any existing file at ``path`` untouched."""
    with atomic_write(path, "wb") as fh:
        torch.save(obj, fh)


def _cpu(obj):
    """A copy of a nested dict/list of tensors with every tensor detached on the CPU."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cpu(v) for v in obj)
    return obj


def plain(obj, where: str = "config"):
    """``obj`` as plain Python values only (dict, list, str, int, float, bool, None), which is what
    ``torch.load(weights_only=True)`` accepts besides tensors: numpy scalars and arrays become
    numbers and lists, tuples become lists; anything else raises ``TypeError`` naming the key."""
    if isinstance(obj, np.generic):  # before float: np.float64 is a float subclass
        return obj.item()
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, (np.ndarray, torch.Tensor)):
        return np.asarray(obj.detach().cpu() if isinstance(obj, torch.Tensor) else obj).tolist()
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if not isinstance(k, str):
                raise TypeError(f"{where}: keys must be strings, got {k!r}")
            out[k] = plain(v, f"{where}[{k!r}]")
        return out
    if isinstance(obj, (list, tuple)):
        return [plain(v, f"{where}[{i}]") for i, v in enumerate(obj)]
    raise TypeError(f"{where}: {type(obj).__name__} is not a plain value (model files hold tensors and plain values only)")


def save_model(path: str, model: SAVIGP, config: dict, training_state: Optional[dict] = None) -> None:
    """Write a model file atomically (see the module docstring for its layout).

    Args:
        model: the trained model.
        config: the plain configuration dict; ``config["model"]`` is refreshed from ``model.config``;
            ``"likelihood"`` and ``"example_target"`` are read from the model when absent
            (:func:`likelihood_spec`), so ``{}`` describes a model built in Python.
        training_state: ``{"optimizer": state_dict, "generator": ByteTensor, "perm": LongTensor (N,),
            "pos": int}`` to allow resuming, or None.
    """
    config = plain(dict(config))
    config["format"], config["version"] = FORMAT, VERSION
    if "likelihood" not in config:  # a model built in Python: describe its likelihood
        config["likelihood"] = likelihood_spec(model.likelihood)
    if "example_target" not in config:
        config["example_target"] = [float(v) for v in model.train_y[0].detach().cpu().double()]
    config.setdefault("standardize", {"inputs": None, "targets": None})
    config.setdefault("class_labels", None)
    config["model"] = plain(dict(model.config))
    # what the module itself is, whatever the caller's config says
    from .kernels import KERNELS

    kernel = [name for name, cls in KERNELS.items() if type(model.kernel) is cls]
    if not kernel:
        raise TypeError(f"cannot save a model with kernel {type(model.kernel).__name__}: model files support "
                        f"the built-in kernels {sorted(KERNELS)}")
    options = dict(config.get("model_options") or {})
    options.update(kernel=kernel[0], dtype=str(model.dtype).replace("torch.", ""))
    config["model_options"] = options
    payload = {
        "config": config,
        "state_dict": {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()},
        "training_state": _cpu(training_state) if training_state is not None else None,
    }
    atomic_torch_save(payload, path)


def read_model_file(path: str, max_bytes: Optional[int] = None) -> dict:
    """The contents of a model file, loaded with ``weights_only=True`` onto the CPU, every
    configuration field checked (types, ranges, sizes against the state dict, memory needed to
    build the model: at most ``max_bytes``, default ``SAVIGP_MAX_MODEL_BYTES`` or 8 GiB).

    Raises:
        ModelFileError: a missing file, one that is not a savigp model file, or a bad field
            (one line naming the file and the field).
    """
    path = str(path)
    if not os.path.exists(path):
        raise ModelFileError(f"{path}: no such model file")
    if os.path.isdir(path):
        raise ModelFileError(f"{path}: is a directory, not a model file")
    if not zipfile.is_zipfile(path):
        raise ModelFileError(f"{path}: not a savigp model file (not a PyTorch archive)")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # pickle / zip errors of every kind
        raise ModelFileError(f"{path}: not a savigp model file (damaged, or it holds objects other than tensors "
                             f"and plain values: {type(err).__name__})") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("config"), dict) \
            or payload["config"].get("format") != FORMAT:
        raise ModelFileError(f"{path}: not a savigp model file (no {FORMAT!r} configuration)")
    version = payload["config"].get("version")
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        raise ModelFileError(f"{path}: model file format version {version!r} is not supported (this savigp reads "
                             f"versions {', '.join(map(str, READABLE_VERSIONS))})")
    if version == 1:
        _upgrade(payload["config"])
    if max_bytes is None and os.environ.get("SAVIGP_MAX_MODEL_BYTES"):
        try:
            max_bytes = int(float(os.environ["SAVIGP_MAX_MODEL_BYTES"]))
        except ValueError:
            raise ModelFileError(f"SAVIGP_MAX_MODEL_BYTES={os.environ['SAVIGP_MAX_MODEL_BYTES']!r} is not a number "
                                 "of bytes") from None
    try:
        check_config(payload["config"], payload.get("state_dict"), max_bytes)
        _check_training_state(payload.get("training_state"))
    except SchemaError as err:
        raise ModelFileError(f"{path}: bad model file: {err}") from None
    return payload


def _check_training_state(ts) -> None:
    if ts is None:
        return
    if not isinstance(ts, dict) or not isinstance(ts.get("optimizer"), dict):
        raise SchemaError("training_state must be None or a dict with an optimizer state")
    perm, pos, gen = ts.get("perm"), ts.get("pos"), ts.get("generator")
    if not (isinstance(perm, torch.Tensor) and perm.dim() == 1 and perm.dtype == torch.int64):
        raise SchemaError("training_state.perm must be a 1-D LongTensor")
    if isinstance(pos, bool) or not isinstance(pos, int) or not 0 <= pos <= perm.numel():
        raise SchemaError(f"training_state.pos must be an integer between 0 and {perm.numel()}, got {pos!r}")
    if not (isinstance(gen, torch.Tensor) and gen.dtype == torch.uint8):
        raise SchemaError("training_state.generator must be a ByteTensor (a torch.Generator state)")


def _upgrade(config: dict) -> None:
    """A version-1 configuration in version-2 terms, in place: its ``"diag"`` posterior (also
    ``"diagonal"``, ``"mog"``) was the whitened diagonal mixture, now named ``"diag-whitened"``
    (the parameters have the same names and shapes, so loading them as ``"diag"`` would silently
    give another model)."""
    for section in ("model", "model_options"):
        part = config.get(section)
        if isinstance(part, dict) and part.get("posterior") in _V1_DIAGONAL_NAMES:
            part["posterior"] = "diag-whitened"
    config["version"] = 2


# ---------------------------------------------------------------------- a loaded model
class SavedModel:
    """A model together with its file configuration; predictions in the data's original units.

    Inputs given to :meth:`predict`, :meth:`log_predictive_density` and :meth:`evaluate` are raw
    (as in the CSV file): the recorded input standardization is applied here, and the target
    standardization is undone on means, variances and log densities.
    """

    def __init__(self, model: SAVIGP, config: dict):
        self.model = model
        self.config = config
        st = config.get("standardize") or {}
        self.input_stats = st.get("inputs")
        self.target_stats = st.get("targets")

    @property
    def likelihood_loaded(self) -> bool:
        """False when the model's user likelihood was not allowed to run (latent predictions only)."""
        return not isinstance(self.model.likelihood, _LatentOnly)

    def _need_likelihood(self, what: str) -> None:
        if not self.likelihood_loaded:
            raise CodeNotAuthorized(f"{what} needs the likelihood: {self.model.likelihood.note}")

    # ------------------------------------------------------------ transforms
    def transform_inputs(self, X) -> np.ndarray:
        """Raw inputs ``(B, D)`` -> the model's (standardized when recorded), float64."""
        X = np.asarray(X, dtype=np.float64)
        if self.input_stats is None:
            return X
        return (X - np.asarray(self.input_stats["mean"])) / np.asarray(self.input_stats["std"])

    def transform_targets(self, Y) -> np.ndarray:
        """Raw targets ``(B, P)`` -> the model's (standardized when recorded), float64."""
        Y = np.asarray(Y, dtype=np.float64)
        if self.target_stats is None:
            return Y
        return (Y - np.asarray(self.target_stats["mean"])) / np.asarray(self.target_stats["std"])

    def log_jacobian(self) -> float:
        """sum_p log std_p: log p(y) = log p(y_standardized) - this (0 without standardization)."""
        if self.target_stats is None:
            return 0.0
        return float(np.sum(np.log(np.asarray(self.target_stats["std"], dtype=np.float64))))

    # ------------------------------------------------------------ predictions
    def predict(self, X, num_samples: int = 500, seed: int = 0):
        """Predictions at raw inputs ``X (B, D)`` in the targets' original units.

        Returns:
            a :class:`~savigp.model.Prediction`, as :meth:`SAVIGP.predict` gives, with float64
            CPU tensors: ``mean`` and ``variance`` ``(B, P)`` (None when the likelihood has no
            predictive moments; ``variance`` also when it has E[y | f] only), ``probabilities``
            ``(B, C)`` (classification, else None), ``latent_mean`` and ``latent_var`` ``(B, Q)``
            (model units). ``.numpy()`` gives a dict of arrays with the same keys.
        """
        pred = self.model.predict(self.transform_inputs(X), num_samples=num_samples, seed=seed)
        for name in pred.FIELDS:
            value = getattr(pred, name)
            setattr(pred, name, None if value is None else value.detach().cpu().to(torch.float64))
        if self.target_stats is not None and pred.mean is not None:
            mu = torch.as_tensor(self.target_stats["mean"], dtype=torch.float64)
            sd = torch.as_tensor(self.target_stats["std"], dtype=torch.float64)
            pred.mean = mu + sd * pred.mean
            pred.variance = None if pred.variance is None else pred.variance * sd ** 2
        return pred

    def log_predictive_density(self, X, Y, num_samples: int = 1000, seed: int = 0) -> np.ndarray:
        """log p(y*_n | x*_n) of raw targets ``Y (B, P)`` at raw inputs ``X (B, D)``: ``(B,)``.

        With standardized targets this is the density of the standardized targets minus the
        log-Jacobian sum_p log std_p, i.e. a density in the targets' original units.
        """
        self._need_likelihood("log_predictive_density")
        lpd = self.model.log_predictive_density(self.transform_inputs(X), self.transform_targets(Y),
                                                num_samples=num_samples, seed=seed)
        return lpd.detach().cpu().to(torch.float64).numpy() - self.log_jacobian()

    def evaluate(self, X, Y, num_samples: int = 1000, seed: int = 0) -> dict:
        """The paper's metrics on raw test data (as :func:`savigp.metrics.evaluate`, in original units).

        Returns:
            ``{"n", "sse", "nlpd", "mse", "mae"}`` for regression (``sse``/``mse``/``mae`` only
            when the likelihood has predictive means), ``{"n", "error_rate", "nlp"}`` for
            classification.
        """
        from .metrics import evaluate, sse_entries

        self._need_likelihood("evaluate")
        lik = self.model.likelihood
        if lik.task == "classification" or self.target_stats is None:
            return evaluate(self.model, self.transform_inputs(X), np.asarray(Y, dtype=np.float64),
                            num_samples=num_samples, seed=seed)
        Y = np.asarray(Y, dtype=np.float64)
        lpd = self.log_predictive_density(X, Y, num_samples=num_samples, seed=seed)
        out = {"n": int(Y.shape[0]), "nlpd": float(-lpd.mean())}
        mean = self.predict(X, num_samples=num_samples, seed=seed)["mean"]
        if mean is not None:
            y, m = torch.as_tensor(Y), torch.as_tensor(mean)
            out.update(**sse_entries(y, m), mse=float(((y - m) ** 2).mean()),
                       mae=float((y - m).abs().mean()))
        return out

    # ------------------------------------------------------------ files
    def save(self, path: str, training_state: Optional[dict] = None) -> None:
        """Write this model to ``path`` atomically (see :func:`save_model`)."""
        save_model(path, self.model, self.config, training_state)


def load_model(path: str, device=None, X=None, Y=None, likelihood=None, trust_code: bool = False,
               max_bytes: Optional[int] = None, code: Optional[dict] = None) -> tuple:
    """Load a model file (see the module docstring for what is checked and what may run).

    Args:
        path: the file.
        device: where to put the model (default the CPU).
        X, Y: optional training data ``(N, D)``, ``(N, P)`` in the model's (standardized) units,
            to continue training; without them the model can predict only.
        likelihood, trust_code, code: for a model trained with user code, the consent to run it
            (see :func:`resolve_likelihood`); without either, latent predictions only.
        max_bytes: the most memory building the model may need (see :func:`read_model_file`).

    Returns:
        ``(SavedModel, training_state)``; ``training_state`` is the file's dict or None.

    Raises:
        ModelFileError, LikelihoodImportError: with one-line messages naming the file.
    """
    payload = read_model_file(path, max_bytes=max_bytes)
    config = payload["config"]
    try:
        lik = resolve_likelihood(config, likelihood, trust_code, source=str(path), code=code)
        model = rebuild_model(config, payload["state_dict"], X=X, Y=Y, device=device, likelihood=lik)
    except LikelihoodImportError as err:
        msg = str(err)
        raise type(err)(msg if msg.startswith(str(path)) else f"{path}: the model's likelihood cannot be imported: {msg}") from None
    except ModelFileError as err:
        raise ModelFileError(f"{path}: {err}") from None
    except (KeyError, TypeError, ValueError) as err:
        raise ModelFileError(f"{path}: the model cannot be built from this file ({type(err).__name__}: {err})") from None
    return SavedModel(model, config), payload.get("training_state")


def load(path: str, likelihood=None, trust_code: bool = False, device=None, code: Optional[dict] = None) -> SavedModel:
    """Load a model file written by :meth:`SAVIGP.save` or ``savigp train``.

    Predictions of the returned :class:`SavedModel` take raw inputs and are in the targets'
    original units. A model file never runs code by itself: for a model trained with a user
    likelihood pass ``likelihood="my_lik.py:log_lik"`` (also where the file is now, if it moved;
    a path without ``:function`` keeps the recorded name), the function itself, or
    ``trust_code=True`` to import the recorded one; without them only the latent functions can be
    predicted. A file changed since training (SHA-256) is refused unless ``trust_code=True``.
    Further user functions (a mean function) come from the likelihood's own module, or from where
    ``code={"mean_fn": "mean.py:mean"}`` says.
    """
    return load_model(path, device=device, likelihood=likelihood, trust_code=trust_code, code=code)[0]


def standardization_stats(A: np.ndarray) -> dict:
    """Column means and standard deviations of ``A (N, C)`` as plain float lists; a constant
    column gets std 1 (it is only centred)."""
    A = np.asarray(A, dtype=np.float64)
    mean = A.mean(axis=0)
    std = A.std(axis=0)
    std = np.where((std > 0) & np.isfinite(std), std, 1.0)
    if not all(math.isfinite(v) for v in mean):
        raise ValueError("cannot standardize: non-finite column means")
    return {"mean": [float(v) for v in mean], "std": [float(v) for v in std]}
