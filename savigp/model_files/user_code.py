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
recorded, or when the caller names another function than the file records.

**Only the hashed bytes run.** Code the user file reaches from its own folder or the working
folder is not covered by the hash, so as long as checked bytes (a recorded SHA-256, no
``trust_code``) are on the call stack -- when the module is run and whenever its functions are
called later -- :class:`_UnhashedCodeGuard` refuses: importing a module from those folders
(at module level or inside a function), running or compiling a file from them
(``importlib.util.spec_from_file_location`` with ``exec_module``, ``runpy.run_path``,
``exec(compile(open(...).read(), "helper.py", "exec"))``), and ``exec`` / ``eval`` / ``compile`` of
a string called directly by the checked code (``exec(open("helper.py").read())``). It is a
``sys.meta_path`` finder and an audit hook (:func:`sys.addaudithook`), installed once and inert
while no checked code is on the stack. Installed packages (under ``sys.prefix``), savigp and
:mod:`likelihoods` import as usual. It closes the ways the issue tracker found; Python code that
wants to run unhashed code can always find another (the hash is an integrity check of the file
the user names, not a sandbox).

**Which function runs.** A further function recorded from the likelihood's own file (a mean
function) moves with the consent to that file only when the model file records its
*function binding* (``"function_sha256"``: the SHA-256 of the function's name followed by the
file's bytes, :func:`function_binding`) and it matches the bytes that run: the recorded file hash
alone does not say which function of the file was trained, so without the binding a model file
could point ``mean_fn`` at any other function of a consented file. Computing a binding needs the
file's bytes, which the model file does not hold. A reference without a binding (a file written
before it) runs only when named (``code=`` / ``--mean-function``) or with ``trust_code``.
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
    in turn are not covered by the hash: whenever bytes checked against ``sha256`` (without
    ``trust_code``) are on the call stack, code from the file's own folder or the working folder
    that the hash does not cover is refused (:class:`_UnhashedCodeGuard`, module docstring);
    installed packages import as Python finds them.

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
        return sys.modules[_module_name(path, sha256)], sha256  # (guarded as it was when it ran)
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
    if module is not None:  # the latest consent decides: checked now, or trusted now
        _GUARD.watch(modname, path) if sha256 and not trust_code else _GUARD.forget(modname)
        return module, digest
    module = types.ModuleType(modname)
    module.__file__, module.__cached__ = path, None
    module.__spec__ = importlib.machinery.ModuleSpec(modname, None, origin=path)
    module.__package__ = "" if is_file_spec(target) else target.rpartition(".")[0]
    module.__savigp_sha256__ = digest
    module.__savigp_source__ = source  # for function_binding: the bytes that ran, never read again
    sys.modules[modname] = module
    checked = sha256 and not trust_code
    if checked:  # from now on, whenever this module's code is on the stack (module docstring)
        _GUARD.watch(modname, path)
    try:
        exec(compile(source, path, "exec", dont_inherit=True), module.__dict__)
    except BaseException as err:
        del sys.modules[modname]
        _GUARD.forget(modname)
        if isinstance(err, KeyboardInterrupt):
            raise
        where = f" (line {err.lineno})" if isinstance(err, SyntaxError) and err.lineno else ""
        raise LikelihoodImportError(f"{what} {spec!r}: running {path} failed{where}: {type(err).__name__}: {err}") from None
    return module, digest


def _under(path: str, folders) -> bool:
    return any(path == d or path.startswith(d.rstrip(os.sep) + os.sep) for d in folders)


class _UnhashedCodeGuard:
    """What keeps checked user code (bytes run by :func:`load_code` against a recorded SHA-256,
    without ``trust_code``) from running code the hash does not cover, for as long as a frame of
    such a module is on the call stack (see the module docstring): a ``sys.meta_path`` finder
    (imports of modules not yet loaded) and an audit hook (``compile`` and ``exec`` events).
    Installed on the first checked load, once per process; inert while no checked code runs."""

    def __init__(self):
        self.checked: dict = {}  # module name -> (its file, the folders it may not run unhashed code from)
        self.installed = False
        self._exempt: Optional[tuple] = None

    def watch(self, modname: str, path: str) -> None:
        self.checked[modname] = (path, (os.path.realpath(os.path.dirname(path)), os.path.realpath(os.getcwd())))
        if not self.installed:
            self.installed = True
            sys.meta_path.insert(0, self)
            sys.addaudithook(self._audit)

    def forget(self, modname: str) -> None:
        self.checked.pop(modname, None)

    def exempt(self) -> tuple:
        """Where installed code lives (never the user's): the interpreter's prefixes (a virtual
        environment inside the working folder included), savigp and likelihoods."""
        if self._exempt is None:
            import likelihoods

            roots = {sys.prefix, sys.base_prefix, sys.exec_prefix,
                     os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                     os.path.dirname(os.path.abspath(likelihoods.__file__))}
            self._exempt = tuple(sorted({os.path.realpath(r) for r in roots if r}))
        return self._exempt

    def on_stack(self, frame) -> Optional[tuple]:
        """``(file, folders)`` of the innermost checked module with a frame at or below ``frame``, or None."""
        checked = self.checked
        while frame is not None:
            name = frame.f_globals.get("__name__")
            if type(name) is str and name in checked:
                return checked[name]
            frame = frame.f_back
        return None

    def _refuse(self, who: tuple, what: str) -> None:
        raise LikelihoodImportError(
            f"{who[0]} {what}, which the recorded SHA-256 does not cover (only the likelihood's own file is "
            "hashed); refusing to run it: keep the code in one file, or pass --trust-code (trust_code=True)")

    def _unhashed(self, filename, folders) -> Optional[str]:
        """``filename`` (a module's or a code object's) when it lies in ``folders`` and is not installed code."""
        if not isinstance(filename, (str, bytes)) or not filename:
            return None
        filename = os.fsdecode(filename)
        if filename.startswith("<"):
            return None
        where = os.path.realpath(filename)
        return filename if _under(where, folders) and not _under(where, self.exempt()) else None

    def find_spec(self, fullname, search_path=None, target=None):
        if not self.checked:
            return None
        who = self.on_stack(sys._getframe(1))
        if who is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, search_path)
        origin = getattr(spec, "origin", None)
        if origin not in (None, "built-in", "frozen") and self._unhashed(origin, who[1]):
            self._refuse(who, f"imports {fullname} ({origin})")
        return None

    def _audit(self, event: str, args: tuple) -> None:
        if (event != "compile" and event != "exec") or not self.checked:
            return
        caller = sys._getframe(1)  # who called compile / exec (builtins have no frame of their own)
        who = self.on_stack(caller)
        if who is None:
            return
        filename = args[1] if event == "compile" else getattr(args[0], "co_filename", None)
        where = self._unhashed(filename, who[1])
        if where is not None:
            self._refuse(who, f"runs {where}")
        direct = caller.f_globals.get("__name__")
        if event == "compile" and type(direct) is str and direct in self.checked:
            self._refuse(who, "compiles code from a string (exec, eval or compile)")


_GUARD = _UnhashedCodeGuard()


def import_callable(spec: str, sha256: Optional[str] = None, trust_code: bool = False, reuse: bool = False) -> Callable:
    """The function named by ``"package.module:function"`` or ``"path/to/file.py:function"``,
    run by :func:`load_code`'s rule (checked against ``sha256`` when given).

    Raises:
        LikelihoodImportError: one line saying what is missing (file, module, function) or changed.
    """
    return import_with_reference(spec, sha256, trust_code, reuse)[0]


def import_with_reference(spec: str, sha256: Optional[str] = None, trust_code: bool = False,
                          reuse: bool = False) -> tuple:
    """``(function, {"import_path", "sha256", "function_sha256"})``: the function ``spec`` names and
    the reference a model file records for it -- the canonical import path, the SHA-256 of the
    bytes that ran and the function's binding to them (:func:`function_binding`)."""
    target, name = split_spec(spec)
    module, digest = load_code(target, sha256, trust_code, spec, reuse=reuse)
    fn = getattr(module, name, None)
    if fn is None:
        raise LikelihoodImportError(f"likelihood {spec!r}: {target} has no attribute {name!r}")
    if not callable(fn):
        raise LikelihoodImportError(f"likelihood {spec!r}: {target}.{name} is a {type(fn).__name__}, not a function")
    return fn, {"import_path": canonical_import_path(spec), "sha256": digest,
                "function_sha256": function_binding(module.__savigp_source__, name)}


def function_binding(source: bytes, name: str) -> str:
    """The SHA-256 that binds function ``name`` to a file's bytes ``source``: of
    ``b"savigp function\\0" + name + b"\\0" + source``, the name first, so that it cannot be
    computed from the file's own SHA-256 (which a model file records) without the bytes."""
    return hashlib.sha256(b"savigp function\0" + name.encode() + b"\0" + source).hexdigest()


def file_sha256(path: str) -> str:
    """SHA-256 of a file's bytes (hex)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def code_reference(spec: str, fn=None) -> dict:
    """``{"import_path", "sha256", "function_sha256"}`` for a user function the user named: the
    canonical import path, the SHA-256 of the bytes that ran when ``fn`` was run by
    :func:`load_code` from that file (else of the file's bytes now) and the function's binding to
    them (:func:`function_binding`); ``sha256`` None for a module that is not a ``.py`` source."""
    path = canonical_import_path(spec)
    target, _ = split_spec(path)
    try:
        origin = source_file(target, spec)
    except LikelihoodImportError:
        return {"import_path": path, "sha256": None}
    name = split_spec(path)[1]
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    ran = getattr(module, "__savigp_sha256__", None)
    if ran is not None and getattr(module, "__file__", None) == origin:
        source = module.__savigp_source__
    else:
        with open(origin, "rb") as fh:
            source = fh.read()
        ran = hashlib.sha256(source).hexdigest()
    return {"import_path": path, "sha256": ran, "function_sha256": function_binding(source, name)}


def authorized_import(ref: dict, override=None, trust_code: bool = False, what: str = "likelihood",
                      source: str = "the model file", named_by_file: bool = False) -> Callable:
    """Run the user function a model file records, but only with the caller's consent, and only
    the bytes it was trained with (:func:`load_code`).

    Args:
        ref: ``{"import_path", "sha256"}`` from the file.
        override: where the function is now: ``"file.py:function"``, ``"package.module:function"``,
            or a file path alone (the recorded function name is kept); the caller's consent.
        trust_code: import ``ref["import_path"]`` itself (consent), and run a file whose SHA-256
            differs from the recorded one, or with none recorded, or a function of another name.
        named_by_file: the function's name comes from the model file, not from the caller (a mean
            function moving with the consent to the likelihood's file): its recorded
            ``function_sha256`` is then required (module docstring, "Which function runs").

    Raises:
        CodeNotAuthorized: neither ``override`` nor ``trust_code``.
        LikelihoodImportError: without ``trust_code``: no SHA-256 recorded, the file changed since
            training, ``override`` names another function than the file records, or the recorded
            function binding is missing (``named_by_file``) or does not match; or the import failed.
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
        if named_by_file and not ref.get("function_sha256"):
            raise LikelihoodImportError(
                f"{what} {spec}: {source} records no binding of the function {trained!r} to its file (written before "
                "savigp recorded one), so the consent to the likelihood's file does not say to run it: name it "
                "(--mean-function FILE.py:FN, code={...}) or pass --trust-code (trust_code=True)")
    fn = import_callable(spec, digest, trust_code)
    bound = ref.get("function_sha256")
    if bound and not trust_code:
        module = sys.modules.get(getattr(fn, "__module__", None) or "")
        ran = getattr(module, "__savigp_source__", None)
        name = split_spec(spec)[1]
        if ran is None or function_binding(ran, name) != bound:
            raise LikelihoodImportError(
                f"{what} {spec}: {source} was not trained with the function {name!r} of this file (its recorded "
                "function binding differs); refusing to run it: pass --trust-code (trust_code=True) to run it anyway")
    return fn


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
