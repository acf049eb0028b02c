"""The ``SAVIGP_*`` environment variables: each read here, with its meaning, default and check.

``SAVIGP_MAX_MODEL_BYTES`` (default 8 GiB)
    memory limit (bytes) of building, training or using a model (:mod:`savigp.cost`;
    ``--max-memory`` and ``max_bytes=`` win over it).
``SAVIGP_COMPILE`` (default off)
    ``1``: ``torch.compile`` the step's elementwise chains (:mod:`savigp.runtime.compilation`).
``SAVIGP_DIST_TIMEOUT`` (default 300)
    seconds a collective waits for the other ranks (:mod:`savigp.training.distributed`).
``SAVIGP_GRAD_SYNC`` (default ``allreduce``)
    how ranks average gradients: ``allreduce`` (bucketed) or ``ddp`` (DistributedDataParallel).
``SAVIGP_DEBUG`` (default off)
    ``1``: the command shows tracebacks instead of one-line errors (:mod:`savigp.cli`).
``SAVIGP_TRAIN_LOCK_HELD`` (default unset)
    set by ``train --nproc`` for its ranks: the lock file the launcher holds (internal).
``SAVIGP_CLI_TEST_SIGINT_AFTER`` (default unset)
    tests only: ``train`` sends itself SIGINT after this many steps.

Every value is read when asked for, so a variable set later in the process counts (``SAVIGP_COMPILE``:
read once, when :mod:`savigp.runtime.compilation` is imported; :func:`savigp.runtime.compilation.set_compile` then).
A value that does not parse raises :class:`SettingError` naming the variable, its value and what
was expected. This module imports nothing heavy (the command's parser reads it before torch).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Optional

__all__ = ["SettingError", "Setting", "SETTINGS", "get", "max_model_bytes", "compile_enabled", "dist_timeout",
           "grad_sync", "debug", "train_lock_held", "test_sigint_after", "GRAD_SYNCS", "DEFAULT_MAX_BYTES",
           "DEFAULT_TIMEOUT", "MAX_BYTES_ENV", "LOCK_ENV", "TEST_SIGINT_ENV"]


class SettingError(ValueError):
    """A ``SAVIGP_*`` variable whose value does not parse (the message names both and what was expected)."""


@dataclass(frozen=True)
class Setting:
    """One environment variable: ``parse`` turns its (stripped, non-empty) text into the value or
    raises ValueError; an unset or empty variable gives ``default``."""

    name: str
    meaning: str
    default: Any
    expected: str
    parse: Callable[[str], Any]


def _flag(text: str) -> bool:
    low = text.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError(text)


def _positive_bytes(text: str) -> int:
    value = float(text)  # "1e9" is allowed
    if not value > 0 or value != value or value == float("inf"):
        raise ValueError(text)
    return int(value)


def _positive_seconds(text: str) -> float:
    value = float(text)
    if not value > 0 or value != value:
        raise ValueError(text)
    return value


def _one_of(choices: tuple) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(text)
        return text
    return parse


def _count(text: str) -> int:
    if not text.isdigit():
        raise ValueError(text)
    return int(text)


#: the ways ranks average gradients (``SAVIGP_GRAD_SYNC``)
GRAD_SYNCS = ("allreduce", "ddp")
DEFAULT_MAX_BYTES = 8 * 2 ** 30
DEFAULT_TIMEOUT = 300.0
MAX_BYTES_ENV = "SAVIGP_MAX_MODEL_BYTES"
LOCK_ENV = "SAVIGP_TRAIN_LOCK_HELD"
TEST_SIGINT_ENV = "SAVIGP_CLI_TEST_SIGINT_AFTER"

#: every variable savigp reads, by name
SETTINGS: dict[str, Setting] = {s.name: s for s in (
    Setting(MAX_BYTES_ENV, "memory limit (bytes) of building, training or using a model", DEFAULT_MAX_BYTES,
            "a positive number of bytes (e.g. 2e9)", _positive_bytes),
    Setting("SAVIGP_COMPILE", "torch.compile the step's elementwise chains", False, "1 or 0", _flag),
    Setting("SAVIGP_DIST_TIMEOUT", "seconds a collective waits for the other ranks", DEFAULT_TIMEOUT,
            "a positive number of seconds", _positive_seconds),
    Setting("SAVIGP_GRAD_SYNC", "how ranks average gradients", "allreduce", f"one of {', '.join(GRAD_SYNCS)}",
            _one_of(GRAD_SYNCS)),
    Setting("SAVIGP_DEBUG", "the command shows tracebacks instead of one-line errors", False, "1 or 0", _flag),
    Setting(LOCK_ENV, "the lock file train --nproc's launcher holds for its ranks (internal)", None,
            "a path", str),
    Setting(TEST_SIGINT_ENV, "tests only: train sends itself SIGINT after this many steps", None,
            "a number of steps (digits)", _count),
)}


def get(name: str) -> Any:
    """The value of the variable ``name`` (a key of :data:`SETTINGS`) now.

    Raises:
        SettingError: its value does not parse, naming the variable, the value and what was expected.
    """
    setting = SETTINGS[name]
    text = os.environ.get(name, "").strip()
    if not text:
        return setting.default
    try:
        return setting.parse(text)
    except ValueError:
        raise SettingError(f"{name}={text!r}: expected {setting.expected} ({setting.meaning})") from None


def max_model_bytes() -> int:
    """``SAVIGP_MAX_MODEL_BYTES``: the default memory limit of a model, in bytes."""
    return get(MAX_BYTES_ENV)


def compile_enabled() -> bool:
    """``SAVIGP_COMPILE``: whether the step's elementwise chains start compiled."""
    return get("SAVIGP_COMPILE")


def dist_timeout() -> float:
    """``SAVIGP_DIST_TIMEOUT``: seconds a collective waits for the other ranks."""
    return get("SAVIGP_DIST_TIMEOUT")


def grad_sync() -> str:
    """``SAVIGP_GRAD_SYNC``: ``"allreduce"`` or ``"ddp"``."""
    return get("SAVIGP_GRAD_SYNC")


def debug() -> bool:
    """``SAVIGP_DEBUG``: the command shows tracebacks."""
    return get("SAVIGP_DEBUG")


def train_lock_held() -> Optional[str]:
    """``SAVIGP_TRAIN_LOCK_HELD``: the lock file a launcher holds for this rank, or None."""
    return get(LOCK_ENV)


def test_sigint_after() -> Optional[int]:
    """``SAVIGP_CLI_TEST_SIGINT_AFTER``: the step after which ``train`` interrupts itself (tests), or None."""
    return get(TEST_SIGINT_ENV)
