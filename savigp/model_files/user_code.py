"""User code named by a model file or the command line: ``package.module:function`` or
``path/to/file.py:function``, imported only with the caller's consent and refused when its file
changed since training (SHA-256).

**Trust model.** A model file is data: loading one never imports or runs anything it names. A
user function is imported only when the caller says so: ``load(path, likelihood="my_lik.py:log_lik")``
(``--likelihood`` on the command line; the file may have moved: a path without ``:function`` keeps
the recorded function name) or ``load(path, trust_code=True)`` (``--trust-code``: import what the
file names). Either way, when a SHA-256 was recorded at training and the file now differs, it is
refused before it is imported (``trust_code=True`` overrides that too).
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from typing import Callable, Optional

from .errors import CodeNotAuthorized, LikelihoodImportError


def is_file_spec(target: str) -> bool:
    return target.endswith(".py") or "/" in target or os.sep in target


def split_spec(spec: str, also: str = "") -> tuple[str, str]:
    """``"target:function"`` -> (target, function), or a one-line error naming what was expected."""
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name:
        raise LikelihoodImportError(
            f"likelihood {spec!r}: expected {also}'package.module:function' or 'path/to/file.py:function'"
        )
    return target, name


def canonical_import_path(spec: str) -> str:
    """``spec`` with a file path made absolute (``/abs/file.py:fn``); module paths unchanged."""
    target, name = split_spec(spec, "a built-in name, ")
    if is_file_spec(target):
        target = os.path.abspath(os.path.expanduser(target))
    return f"{target}:{name}"


def import_callable(spec: str) -> Callable:
    """Import the function named by ``"package.module:function"`` or ``"path/to/file.py:function"``.

    A module path is looked up on ``sys.path`` and then in the current folder.

    Raises:
        LikelihoodImportError: one line saying what is missing (file, module, function).
    """
    target, name = split_spec(spec)
    if is_file_spec(target):
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
            raise LikelihoodImportError(f"likelihood {spec!r}: cannot import module {target!r}: {type(err).__name__}: {err}"
                                        + _file_hint(err, target, name)) from None
        finally:
            if added:
                sys.path.remove(os.getcwd())
    fn = getattr(module, name, None)
    if fn is None:
        raise LikelihoodImportError(f"likelihood {spec!r}: {target} has no attribute {name!r}")
    if not callable(fn):
        raise LikelihoodImportError(f"likelihood {spec!r}: {target}.{name} is a {type(fn).__name__}, not a function")
    return fn


def _file_hint(err: BaseException, target: str, name: str) -> str:
    """For a module that is not found (not on ``sys.path``, not in the current folder): how to
    name its file instead, which works from any folder."""
    if not isinstance(err, ModuleNotFoundError) or not err.name or not target.startswith(err.name):
        return ""
    file = target.replace(".", "/") + ".py"
    return (f" (looked on sys.path and in {os.getcwd()}); a module in another folder is found by its file path: "
            f"likelihood='path/to/{file}:{name}' (command line: --likelihood path/to/{file}:{name})")


def file_sha256(path: str) -> str:
    """SHA-256 of a file's bytes (hex)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def code_file(target: str) -> Optional[str]:
    """The file that defines ``target`` (a ``.py`` path, or a module found on ``sys.path``) or None.

    For a dotted module name ``find_spec`` imports its parent packages: call this only for code
    the user named."""
    if is_file_spec(target):
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
    target, _ = split_spec(path)
    origin = code_file(target)
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
        raise CodeNotAuthorized(consent_message(recorded, what, source))
    spec = recorded if override is None else with_function(str(override), recorded)
    target, _ = split_spec(spec)
    digest = ref.get("sha256")
    if digest:
        origin = code_file(target)
        if origin is not None and os.path.isfile(origin):
            now = file_sha256(origin)
            if now != digest and not trust_code:
                raise LikelihoodImportError(
                    f"{what} {spec}: {origin} has changed since the model was trained (SHA-256 {now[:16]}..., recorded "
                    f"{digest[:16]}...); refusing to run it: pass --trust-code (trust_code=True) to run it anyway")
    return import_callable(spec)


def consent_message(recorded: str, what: str, source: str) -> str:
    return (f"{source} names user code as its {what} ({recorded}); loading a model file never runs code it names: "
            f"pass --likelihood FILE.py[:FUNCTION] (likelihood=...) to say which file to run, or --trust-code "
            f"(trust_code=True) to run {recorded}")


def with_function(spec: str, recorded: str) -> str:
    """``spec`` as ``target:function``: a bare file path or module keeps the recorded function name."""
    target, sep, name = spec.rpartition(":")
    if sep and target and name.isidentifier():
        return spec
    return f"{spec}:{split_spec(recorded)[1]}"


def function_path(fn) -> str:
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
