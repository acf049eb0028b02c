"""The command-line names of likelihood classes: which class ``--likelihood NAME`` builds and
which options it takes.

A class registers itself by *defining* ``cli_name`` in its own body (``Likelihood.__init_subclass__``
calls :func:`register`); a subclass that only inherits ``cli_name`` does not register. This holds
for user subclasses too: ``class Laplace(Likelihood): cli_name = "laplace"`` adds ``"laplace"`` to
:func:`names` once its module is imported. The order of :func:`names` is the order of
registration: the built-ins in the order ``likelihoods/__init__.py`` imports them, then user
classes as they are defined. Adding a built-in likelihood therefore touches only its own file
(and the package's import list, and ``savigp._choices.BUILTIN_LIKELIHOODS``, the names that
``savigp train --help`` lists without importing torch; a test keeps the two equal).

Class attributes read here (defaults on :class:`likelihoods.Likelihood`):

* ``cli_name`` -- the name on the command line, or None (not offered there);
* ``cli_options`` -- names (argparse destinations) of the command-line options the class takes;
* ``standardizable`` -- its targets are real-valued location-scale data that ``train
  --standardize-targets`` may standardize;
* ``cli_user_code`` -- the name stands for user code (``--likelihood module:function``), not a
  built-in: its options are listed by :func:`options`, the name is not in :func:`names`.
"""
from __future__ import annotations

from typing import Dict, Tuple

#: CLI name -> registered class, in registration order
_CLASSES: Dict[str, type] = {}


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def register(cls: type) -> type:
    """Register ``cls`` under ``cls.cli_name`` (a no-op when it is None).

    Re-registering a class of the same module and qualified name (a reloaded module, a class
    redefined in a notebook) replaces it; another class claiming a taken name is a ``ValueError``
    naming both classes.
    """
    name = cls.__dict__.get("cli_name")
    if name is None:
        return cls
    if not isinstance(name, str) or name.split() != [name] or ":" in name:
        raise ValueError(f"{_qualified(cls)}.cli_name must be a non-empty name without spaces or ':', "
                         f"got {name!r}")
    options = cls.cli_options
    if isinstance(options, str) or not all(isinstance(o, str) and o.isidentifier() for o in options):
        raise ValueError(f"{_qualified(cls)}.cli_options must be a tuple of option names (argparse "
                         f"destinations such as 'noise_variance'), got {options!r}")
    taken = _CLASSES.get(name)
    if taken is not None and _qualified(taken) != _qualified(cls):
        raise ValueError(f"{_qualified(cls)}: cli_name {name!r} is already taken by {_qualified(taken)}")
    _CLASSES[name] = cls
    return cls


def names() -> list:
    """CLI names of the built-in (and registered user) likelihood classes, in registration order;
    names that stand for user code (``cli_user_code``) are left out."""
    return [name for name, cls in _CLASSES.items() if not cls.cli_user_code]


def get(name: str) -> type:
    """The class registered under the CLI name ``name``; a ``ValueError`` naming the known names
    otherwise."""
    try:
        return _CLASSES[name]
    except (KeyError, TypeError):
        raise ValueError(f"no likelihood is registered under the name {name!r} "
                         f"(known: {', '.join(_CLASSES)})") from None


def options() -> Dict[str, Tuple[str, ...]]:
    """Option name (argparse destination) -> the CLI names of the classes that take it, in
    registration order (user-code names included)."""
    out: Dict[str, Tuple[str, ...]] = {}
    for name, cls in _CLASSES.items():
        for opt in cls.cli_options:
            out[opt] = out.get(opt, ()) + (name,)
    return out


def standardizable() -> Tuple[str, ...]:
    """CLI names whose targets ``train --standardize-targets`` may standardize."""
    return tuple(name for name, cls in _CLASSES.items() if cls.standardizable and not cls.cli_user_code)
