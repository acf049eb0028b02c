"""The field types of a model file's configuration checks (:mod:`savigp.model_files.schema`):
each ``check(value, where)`` raises :class:`SchemaError` with one line naming ``where``, what it
holds and what was expected. Plain values are bounded in nesting, items and string length, so
that a small file cannot make the checks (or the loader) do unbounded work."""
from __future__ import annotations

import re
from typing import Optional

from .._checks import finite_number, short_repr

#: plain (non-tensor) values in a model file: nesting depth, items per container, characters per string
MAX_DEPTH, MAX_ITEMS, MAX_STRING = 12, 1_000_000, 65_536
#: the most items a list in a likelihood's constructor arguments may hold
MAX_KWARG_ITEMS = 100_000
#: the largest integer (in magnitude) among a likelihood's constructor arguments
MAX_KWARG_INT = 1_000_000


class SchemaError(ValueError):
    """A configuration field of the wrong type, range or size; the message names the field."""


# ---------------------------------------------------------------------- field types
class Field:
    """A field's check; ``check(value, where)`` raises :class:`SchemaError` naming ``where``."""

    optional = False

    def check(self, value, where: str) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class Opt(Field):
    """``None`` or the wrapped field (an absent key reads as None)."""

    optional = True

    def __init__(self, inner: Field):
        self.inner = inner

    def check(self, value, where):
        if value is not None:
            self.inner.check(value, where)


class Int(Field):
    def __init__(self, lo: int, hi: int):
        self.lo, self.hi = lo, hi

    def check(self, value, where):
        if isinstance(value, bool) or not isinstance(value, int):
            raise SchemaError(f"{where} must be an integer, got {type(value).__name__} {short_repr(value)}")
        if not self.lo <= value <= self.hi:
            raise SchemaError(f"{where} must be between {self.lo} and {self.hi}, got {short_repr(value)}")


class Float(Field):
    def check(self, value, where):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SchemaError(f"{where} must be a number, got {type(value).__name__} {short_repr(value)}")
        if not finite_number(value):
            raise SchemaError(f"{where} must be finite, got {short_repr(value)}")


class Positive(Float):
    def check(self, value, where):
        super().check(value, where)
        if not value > 0:
            raise SchemaError(f"{where} must be > 0, got {value}")


class Bool(Field):
    def check(self, value, where):
        if not isinstance(value, bool):
            raise SchemaError(f"{where} must be true or false, got {type(value).__name__} {short_repr(value)}")


class Str(Field):
    def __init__(self, choices=None, pattern: Optional[str] = None, max_len: int = 4096):
        self.choices, self.pattern, self.max_len = choices, pattern, max_len

    def check(self, value, where):
        if not isinstance(value, str):
            raise SchemaError(f"{where} must be a string, got {type(value).__name__} {short_repr(value)}")
        if len(value) > self.max_len:
            raise SchemaError(f"{where} is {len(value)} characters long (at most {self.max_len})")
        if self.choices is not None and value not in self.choices:
            raise SchemaError(f"{where} must be one of {', '.join(map(repr, self.choices))}, got {short_repr(value)}")
        if self.pattern is not None and not re.fullmatch(self.pattern, value):
            raise SchemaError(f"{where} is not of the expected form ({self.pattern}): {short_repr(value)}")


class List(Field):
    def __init__(self, item: Field, min_len: int = 0, max_len: int = MAX_ITEMS):
        self.item, self.min_len, self.max_len = item, min_len, max_len

    def check(self, value, where):
        if not isinstance(value, list):
            raise SchemaError(f"{where} must be a list, got {type(value).__name__} {short_repr(value)}")
        if not self.min_len <= len(value) <= self.max_len:
            raise SchemaError(f"{where} has {len(value)} item(s); expected {self.min_len} to {self.max_len}")
        for i, v in enumerate(value):
            self.item.check(v, f"{where}[{i}]")


class OneOf(Field):
    """The first of several fields that accepts the value (e.g. a number or a list of numbers)."""

    def __init__(self, *options: Field):
        self.options = options

    def check(self, value, where):
        errors = []
        for opt in self.options:
            try:
                opt.check(value, where)
                return
            except SchemaError as err:
                errors.append(str(err))
        raise SchemaError(" or ".join(errors))


class Plain(Field):
    """Any plain value (dict with string keys, list, str, int, float, bool, None), bounded in size."""

    def check(self, value, where, depth: int = 0):
        if depth > MAX_DEPTH:
            raise SchemaError(f"{where}: nested more than {MAX_DEPTH} levels deep")
        if value is None or isinstance(value, (bool, int)):
            return
        if isinstance(value, float):
            return  # non-finite values are refused where a field needs a number
        if isinstance(value, str):
            if len(value) > MAX_STRING:
                raise SchemaError(f"{where}: a string of {len(value)} characters (at most {MAX_STRING})")
            return
        if isinstance(value, (list, dict)):
            if len(value) > MAX_ITEMS:
                raise SchemaError(f"{where}: {len(value)} items (at most {MAX_ITEMS})")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for k, v in items:
                if isinstance(value, dict) and not isinstance(k, str):
                    raise SchemaError(f"{where}: key {short_repr(k)} is not a string")
                self.check(v, f"{where}[{k!r}]", depth + 1)
            return
        raise SchemaError(f"{where}: a {type(value).__name__} is not a plain value")


class Absent(Field):
    """A key that must not be there (``reason`` says why and where its content belongs)."""

    optional = True

    def __init__(self, reason: str):
        self.reason = reason

    def check(self, value, where):
        raise SchemaError(f"{where} is not allowed: {self.reason}")


class Dict(Field):
    """A dict with the given fields (required unless :class:`Opt`); other keys must be plain values
    (``extra``), and match ``key_pattern`` when one is given."""

    def __init__(self, fields: Optional[dict] = None, extra: Field = Plain(), key_pattern: Optional[str] = None,
                 max_len: int = MAX_ITEMS):
        self.fields, self.extra, self.key_pattern, self.max_len = fields or {}, extra, key_pattern, max_len

    def check(self, value, where):
        if not isinstance(value, dict):
            raise SchemaError(f"{where} must be a dict, got {type(value).__name__} {short_repr(value)}")
        for key, field in self.fields.items():
            if key not in value:
                if not field.optional:
                    raise SchemaError(f"{where} has no field {key!r}")
                continue
            field.check(value[key], f"{where}.{key}")
        if len(value) > self.max_len:
            raise SchemaError(f"{where} has {len(value)} entries (at most {self.max_len})")
        for key, v in value.items():
            if not isinstance(key, str):
                raise SchemaError(f"{where}: key {short_repr(key)} is not a string")
            if key not in self.fields and self.key_pattern is not None and not re.fullmatch(self.key_pattern, key):
                raise SchemaError(f"{where}: key {short_repr(key)} is not of the expected form ({self.key_pattern})")
            if key not in self.fields:
                self.extra.check(v, f"{where}.{key}")


class KernelSpec(Field):
    """A kernel: a registered name (:data:`savigp._choices.KERNELS`, read when checked) or a spec
    (:mod:`savigp.kernels.spec`) that :func:`~savigp.kernels.spec.check_spec` accepts from data alone
    (bounded nodes and depth, known nodes, families and options); its sizes against the model's D
    and Q are checked with them (:func:`savigp.model_files.kernel_record.check_kernel_record`)."""

    def check(self, value, where):
        from .._choices import KERNELS
        from ..kernels.spec import check_spec

        if isinstance(value, str):
            if value not in KERNELS:
                raise SchemaError(f"{where} must be one of {', '.join(map(repr, KERNELS))}, got {short_repr(value)}")
            return
        if not isinstance(value, dict):
            raise SchemaError(f"{where} must be a kernel name or a kernel spec (a dict), got {type(value).__name__} "
                              f"{short_repr(value)}")
        try:
            check_spec(value)
        except ValueError as err:
            raise spec_error(where, err) from None


def spec_error(where: str, err: ValueError) -> SchemaError:
    """:func:`~savigp.kernels.spec.check_spec`'s one line ("kernel spec at kernel.sum[1]: ...") naming
    the field instead (``where.sum[1]: ...``)."""
    text, head = str(err), "kernel spec at kernel"
    return SchemaError(f"{where}{text[len(head):]}" if text.startswith(head) else f"{where}: {text}")


class BoundedPlain(Plain):
    """A plain value whose integers are at most ``MAX_KWARG_INT`` in magnitude and whose lists hold
    at most ``MAX_KWARG_ITEMS`` items: constructor arguments cannot ask for huge allocations."""

    def check(self, value, where, depth: int = 0):
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_KWARG_INT:
            raise SchemaError(f"{where} must be at most {MAX_KWARG_INT} in magnitude, got {short_repr(value)}")
        if isinstance(value, (list, dict)) and len(value) > MAX_KWARG_ITEMS:
            raise SchemaError(f"{where}: {len(value)} items (at most {MAX_KWARG_ITEMS})")
        if isinstance(value, (list, dict)):
            for k, v in (value.items() if isinstance(value, dict) else enumerate(value)):
                self.check(v, f"{where}[{k!r}]", depth + 1)
            return
        super().check(value, where, depth)
