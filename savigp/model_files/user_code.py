"""User code named by a model file or the command line: ``package.module:function`` or
``path/to/file.py:function``, imported only with the caller's consent and refused when its file
changed since training (SHA-256).

**Trust model.** A model file is data: loading one never imports or runs anything it names. A
user function is imported only when the caller says so: ``load(path, likelihood="my_lik.py:log_lik")``
(``--likelihood`` on the command line; the file may have moved: a path without ``:function`` keeps
the recorded function name) or ``load(path, trust_code=True)`` (``--trust-code``: import what the
file names). Either way the code runs by :func:`load_code`'s rule -- the bytes are read once,
hashed, and exactly those bytes are compiled and run (never a ``__pycache__`` entry, never a
second read); a module name is found as its ``.py`` file first -- and, unless
``trust_code=True``, it is refused when its SHA-256 differs from the recorded one, when none was
recorded, or when the caller names another function than the file records. Modules the user file
imports in turn are not covered by the hash (docs/cli.md says so).
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import sys
import types
from typing import Callable, Optional

from .errors import CodeNotAuthorized, LikelihoodImportError

#: the private module names under which :func:`load_code` runs user files
USER_MODULE_PREFIX = "savigp_user_likelihood_"


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


def source_file(target: str, spec: Optional[str] = None) -> str:
    """The Python source file that defines ``target``: a ``.py`` path, or a module name found
    without running anything (:class:`importlib.machinery.PathFinder`, package by package, on
    ``sys.path`` and then the current folder; a parent package's ``__init__`` is not run).

    Raises:
        LikelihoodImportError: no such file or module, or a module that is not a ``.py`` source
            (an extension, a built-in or a namespace package: its bytes cannot be checked).
    """
    spec = spec or target
    if is_file_spec(target):
        path = os.path.abspath(os.path.expanduser(target))
        if not os.path.isfile(path):
            raise LikelihoodImportError(f"likelihood {spec!r}: no such file {path}")
        return path
    parts = target.split(".")
    if not all(p.isidentifier() for p in parts):
        raise LikelihoodImportError(f"likelihood {spec!r}: {target!r} is not a module name")
    search, found = list(sys.path) + [os.getcwd()], None
    for i in range(len(parts)):
        name = ".".join(parts[:i + 1])
        try:
            found = importlib.machinery.PathFinder.find_spec(name, search)
        except (ImportError, ValueError):
            found = None
        if found is None:
            raise LikelihoodImportError(f"likelihood {spec!r}: cannot import module {target!r}: no module named {name!r}"
                                        + _file_hint(target, spec))
        search = list(found.submodule_search_locations or [])
        if i < len(parts) - 1 and not search:
            raise LikelihoodImportError(f"likelihood {spec!r}: cannot import module {target!r}: {name!r} is not a package")
    origin = getattr(found, "origin", None)
    if not (origin and origin.endswith(".py") and os.path.isfile(origin)):
        raise LikelihoodImportError(f"likelihood {spec!r}: module {target!r} is not a Python source file ({origin}); "
                                    "its bytes cannot be checked and run")
    return os.path.abspath(origin)


def _file_hint(target: str, spec: str) -> str:
    """For a module that is not found (not on ``sys.path``, not in the current folder): how to
    name its file instead, which works from any folder."""
    fn = spec.rpartition(":")[2] if ":" in spec else "FUNCTION"
    file = target.replace(".", "/") + ".py"
    return (f" (looked on sys.path and in {os.getcwd()}); a module in another folder is found by its file path: "
            f"likelihood='path/to/{file}:{fn}' (command line: --likelihood path/to/{file}:{fn})")


def _module_name(path: str, digest: str) -> str:
    return USER_MODULE_PREFIX + hashlib.sha1((path + digest).encode()).hexdigest()[:12]


def load_code(target: str, sha256: Optional[str] = None, trust_code: bool = False, spec: Optional[str] = None,
              what: str = "likelihood", reuse: bool = False) -> tuple:
    """Run the file that defines ``target`` (:func:`source_file`) by **one rule**: its bytes are
    read once, hashed, and exactly those bytes are compiled and executed in a fresh module
    (registered in ``sys.modules`` under a private name keyed by path and SHA-256); no
    ``__pycache__`` is read or written and the file is not read again. Modules that code imports
    in turn are imported by Python as usual and are *not* covered by the hash.

    Args:
        sha256: the SHA-256 the bytes must have (recorded at training), or None.
        trust_code: run bytes whose SHA-256 differs from ``sha256``.
        reuse: return the module that bytes of SHA-256 ``sha256`` from this path already ran as
            in this process, without reading the file (``train`` building the likelihood it has
            just recorded); otherwise the file is read (and checked) afresh.

    Returns:
        ``(module, sha256 of the bytes that ran)``.

    Raises:
        LikelihoodImportError: the bytes differ from ``sha256`` (without ``trust_code``), or running
            them failed.
    """
    spec = spec or target
    path = source_file(target, spec)
    if reuse and sha256 and _module_name(path, sha256) in sys.modules:  # these very bytes already ran here
        return sys.modules[_module_name(path, sha256)], sha256
    try:
        with open(path, "rb") as fh:
            source = fh.read()
    except OSError as err:
        raise LikelihoodImportError(f"{what} {spec}: cannot read {path} ({err.strerror})") from None
    digest = hashlib.sha256(source).hexdigest()
    if sha256 and digest != sha256 and not trust_code:
        raise LikelihoodImportError(
            f"{what} {spec}: {path} has changed since the model was trained (SHA-256 {digest[:16]}..., recorded "
            f"{sha256[:16]}...); refusing to run it: pass --trust-code (trust_code=True) to run it anyway")
    # keyed by path and contents: an edited file runs afresh; the same bytes reuse their module
    modname = _module_name(path, digest)
    module = sys.modules.get(modname)
    if module is not None:
        return module, digest
    module = types.ModuleType(modname)
    module.__file__, module.__cached__ = path, None
    module.__spec__ = importlib.machinery.ModuleSpec(modname, None, origin=path)
    module.__package__ = "" if is_file_spec(target) else target.rpartition(".")[0]
    module.__savigp_sha256__ = digest
    sys.modules[modname] = module
    try:
        exec(compile(source, path, "exec", dont_inherit=True), module.__dict__)
    except BaseException as err:
        del sys.modules[modname]
        if isinstance(err, KeyboardInterrupt):
            raise
        where = f" (line {err.lineno})" if isinstance(err, SyntaxError) and err.lineno else ""
        raise LikelihoodImportError(f"{what} {spec!r}: running {path} failed{where}: {type(err).__name__}: {err}") from None
    return module, digest


def import_callable(spec: str, sha256: Optional[str] = None, trust_code: bool = False, reuse: bool = False) -> Callable:
    """The function named by ``"package.module:function"`` or ``"path/to/file.py:function"``,
    run by :func:`load_code`'s rule (checked against ``sha256`` when given).

    Raises:
        LikelihoodImportError: one line saying what is missing (file, module, function) or changed.
    """
    return import_with_reference(spec, sha256, trust_code, reuse)[0]


def import_with_reference(spec: str, sha256: Optional[str] = None, trust_code: bool = False,
                          reuse: bool = False) -> tuple:
    """``(function, {"import_path", "sha256"})``: the function ``spec`` names and the reference a
    model file records for it -- the canonical import path and the SHA-256 of the bytes that ran."""
    target, name = split_spec(spec)
    module, digest = load_code(target, sha256, trust_code, spec, reuse=reuse)
    fn = getattr(module, name, None)
    if fn is None:
        raise LikelihoodImportError(f"likelihood {spec!r}: {target} has no attribute {name!r}")
    if not callable(fn):
        raise LikelihoodImportError(f"likelihood {spec!r}: {target}.{name} is a {type(fn).__name__}, not a function")
    return fn, {"import_path": canonical_import_path(spec), "sha256": digest}


def file_sha256(path: str) -> str:
    """SHA-256 of a file's bytes (hex)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def code_reference(spec: str, fn=None) -> dict:
    """``{"import_path", "sha256"}`` for a user function the user named: the canonical import path
    and the SHA-256 of the bytes that ran when ``fn`` was run by :func:`load_code` from that file
    (else of the file's bytes now; None for a module that is not a ``.py`` source)."""
    path = canonical_import_path(spec)
    target, _ = split_spec(path)
    try:
        origin = source_file(target, spec)
    except LikelihoodImportError:
        return {"import_path": path, "sha256": None}
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    ran = getattr(module, "__savigp_sha256__", None)
    if ran is not None and getattr(module, "__file__", None) == origin:
        return {"import_path": path, "sha256": ran}
    return {"import_path": path, "sha256": file_sha256(origin)}


def authorized_import(ref: dict, override=None, trust_code: bool = False, what: str = "likelihood",
                      source: str = "the model file") -> Callable:
    """Run the user function a model file records, but only with the caller's consent, and only
    the bytes it was trained with (:func:`load_code`).

    Args:
        ref: ``{"import_path", "sha256"}`` from the file.
        override: where the function is now: ``"file.py:function"``, ``"package.module:function"``,
            or a file path alone (the recorded function name is kept); the caller's consent.
        trust_code: import ``ref["import_path"]`` itself (consent), and run a file whose SHA-256
            differs from the recorded one, or with none recorded, or a function of another name.

    Raises:
        CodeNotAuthorized: neither ``override`` nor ``trust_code``.
        LikelihoodImportError: without ``trust_code``: no SHA-256 recorded, the file changed since
            training, or ``override`` names another function than the file records; or the import failed.
    """
    recorded = ref["import_path"]
    if override is None and not trust_code:
        raise CodeNotAuthorized(consent_message(recorded, what, source))
    spec = recorded if override is None else with_function(str(override), recorded)
    digest = ref.get("sha256")
    if not trust_code:
        if not digest:
            raise LikelihoodImportError(
                f"{what} {spec}: {source} records no SHA-256 of {recorded}, so nothing shows that this is the code the "
                "model was trained with; refusing to run it: pass --trust-code (trust_code=True) to run it anyway")
        given, trained = split_spec(spec)[1], split_spec(recorded)[1]
        if given != trained:
            raise LikelihoodImportError(
                f"{what} {spec}: names the function {given!r} but {source} was trained with {trained!r} ({recorded}); "
                "refusing to run it: pass --trust-code (trust_code=True) to run it anyway")
    return import_callable(spec, digest, trust_code)


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
    if modname == "__main__" or modname.startswith(USER_MODULE_PREFIX):
        if not file:
            raise TypeError(f"cannot record where {qual} is defined (interactive session): define it in a file and pass "
                            "import_path='file.py:function' to CallableLikelihood")
        return f"{os.path.abspath(file)}:{qual}"
    return f"{modname}:{qual}"
