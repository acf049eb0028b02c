"""The likelihood a model file describes (``config["likelihood"]``) and back: built-in classes
of :mod:`likelihoods` (by class name; a class registered in :data:`savigp._choices.LIKELIHOODS` by a
module this process imported, by its registered name), and user code under the trust model of
:mod:`savigp.model_files.user_code` (a latent-only stand-in when it may not run).
"""
from __future__ import annotations

import difflib
import inspect
from typing import Callable, Optional

import torch

from .._choices import LIKELIHOODS
from .errors import CodeNotAuthorized, ModelFileError
from .schema import USER_CODE_ARGUMENTS
from .user_code import (authorized_import, canonical_import_path, code_reference, consent_message, function_path,
                        import_callable, split_spec, with_function)


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
    from ..user_likelihood import USER_KINDS, build_user_likelihood

    if spec.get("name") in USER_KINDS:
        if fn is None:  # the bytes recorded (train: those that just ran, never a file changed since)
            fn = import_callable(spec["import_path"], spec.get("sha256"), reuse=True)
        if code is None:
            code = {name: import_callable(ref["import_path"], ref.get("sha256"), reuse=True)
                    for name, ref in (spec.get("code_kwargs") or {}).items()}
        if spec.get("name") == "callable" and not isinstance(fn, type):
            _check_kwargs(likelihoods.CallableLikelihood, kwargs, skip=USER_CODE_ARGUMENTS)
        return build_user_likelihood(spec, fn, code)
    cls = builtin_likelihood_class(spec.get("class"), spec.get("name"))
    _check_kwargs(cls, kwargs)
    return cls(**kwargs)


def builtin_likelihood_class(name, cli_name=None):
    """The class ``name`` among those :mod:`likelihoods` exports, or the class registered under
    ``cli_name`` (:data:`savigp._choices.LIKELIHOODS`: classes of modules this process imported) when
    its name is ``name``. Nothing is imported by name from anywhere."""
    import likelihoods

    builtin = [n for n in likelihoods.__all__ if n not in ("Likelihood", "CallableLikelihood")]
    cls = getattr(likelihoods, name, None) if name in builtin else None
    if cls is None and cli_name in LIKELIHOODS and LIKELIHOODS[cli_name].__name__ == name:
        cls = LIKELIHOODS[cli_name]
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
            near = sorted(names, key=lambda n: -difflib.SequenceMatcher(None, key, n).ratio())  # closest first
            raise ModelFileError(f"likelihood {cls.__name__} takes no argument {key!r} (it takes {', '.join(near)})")


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
        spec.update(code_reference(lik.import_path or function_path(lik.fn), lik.fn))
        spec.pop("code_kwargs", None)
        if lik.mean_fn is not None:
            spec["code_kwargs"] = {"mean_fn": code_reference(lik.mean_import_path or function_path(lik.mean_fn),
                                                             lik.mean_fn)}
        rebuilt = likelihoods.CallableLikelihood(lik.fn, mean_fn=lik.mean_fn, **kwargs)
    else:
        builtin = getattr(likelihoods, cls.__name__, None) is cls
        try:
            builtin_likelihood_class(cls.__name__, None if builtin else LIKELIHOODS.name_of(cls))
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
        spec = {"name": cls.__name__.lower() if builtin else LIKELIHOODS.name_of(cls), "class": cls.__name__,
                "kwargs": kwargs}
        rebuilt = cls(**kwargs)
    shapes = {k: tuple(v.shape) for k, v in lik.state_dict().items()}
    if shapes != {k: tuple(v.shape) for k, v in rebuilt.state_dict().items()} or \
            (lik.num_latent, lik.output_dim) != (rebuilt.num_latent, rebuilt.output_dim):
        raise TypeError(f"cannot describe this {cls.__name__} by its constructor arguments {kwargs} (rebuilding it gives "
                        "other parameters); save it with an explicit config={'likelihood': {...}}")
    return spec


class UnloadedLikelihood:
    """Stands in for a user likelihood that was not loaded: the latent functions can be predicted,
    nothing that needs log p(y | f)."""


def latent_only_likelihood(Q: int, P: int, message: str):
    import likelihoods

    class LatentOnly(likelihoods.Likelihood, UnloadedLikelihood):
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

    from ..user_likelihood import USER_KINDS

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
        return latent_only_likelihood(Q, P, consent_message(spec["import_path"], "likelihood", source))
    used = spec["import_path"]  # where the code was imported from (recorded again if the model is saved)
    if callable(likelihood):  # the function or class itself: functions from its module move with it
        fn = likelihood
        try:
            where = split_spec(function_path(fn))[0]
        except TypeError:
            where = None
    else:
        fn = authorized_import(spec, likelihood, trust_code, source=source)
        if likelihood is not None:
            used = canonical_import_path(with_function(str(likelihood), spec["import_path"]))
        where = None if likelihood is None else split_spec(used)[0]
    main_target = split_spec(spec["import_path"])[0]
    functions, refs = {}, {}
    for name, ref in (spec.get("code_kwargs") or {}).items():
        target, fname = split_spec(ref["import_path"])
        override = (code or {}).get(name)
        moved = override is None and where is not None and target == main_target
        if moved:  # a function from the likelihood's file moves with it (the user named that file; its name: the model file's)
            override = f"{where}:{fname}"
        functions[name] = authorized_import(ref, override, trust_code, what=f"likelihood {name}", source=source,
                                            named_by_file=moved)
        now = ref["import_path"] if override is None else canonical_import_path(with_function(str(override), ref["import_path"]))
        refs[name] = {**ref, "import_path": now}
    return make_likelihood({**spec, "import_path": used, "code_kwargs": refs}, fn=fn, code=functions)
