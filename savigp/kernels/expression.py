"""Kernel expressions, as written on the command line (``--kernel``) or passed as ``SAVIGP(kernel=...)``:

    rbf + periodic(time, period=1) * rbf(time) + white
    scale(matern52(0, 2) * linear(1)) + constant

Grammar (``+`` binds looser than ``*``; parentheses group)::

    expr   := term ('+' term)*
    term   := factor ('*' factor)*
    factor := NAME ['(' args ')'] | 'scale' '(' expr [',' key=value]* ')' | '(' expr ')'
    args   := arg (',' arg)*
    arg    := COLUMN | key '=' value          COLUMN: a header name, a quoted name or a 0-based index
    value  := number | true | false

NAME is a registered kernel (:data:`savigp._choices.KERNELS`); the columns a kernel names are its
``active_dims`` (all columns when it names none); options are keyword arguments of its constructor
(``period``, ``lengthscale``, ``variance``, ``alpha``, ``offset``, ``ard``, ``learn``). The result is a
spec (:mod:`savigp.kernels.spec`): data, built by :func:`savigp.kernels.spec.build_kernel`. A wrong
expression is a one-line :class:`ValueError` that quotes the expression up to the bad part.
"""
from __future__ import annotations

import difflib
import math
import re
from typing import Optional, Sequence

from .._choices import KERNELS
from .spec import MAX_DEPTH, check_spec

_TOKEN = re.compile(r"""\s*(?:(?P<number>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w.]))
                         |(?P<name>[A-Za-z_][\w.\-]*)
                         |(?P<quoted>'[^']*'|"[^"]*")
                         |(?P<op>[-+*(),=]))""", re.VERBOSE)


class _Tokens:
    def __init__(self, text: str, columns: Optional[Sequence[str]] = None):
        self.text, self.columns = text, columns
        self.items: list[tuple[str, str, int]] = []  # (kind, value, position)
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            if not m or m.end() == pos:
                at = pos + len(text[pos:]) - len(text[pos:].lstrip())
                self.fail(at, "unexpected character", self.quoting_hint(at))
            kind = m.lastgroup
            start = m.start(kind)
            self.items.append((kind, m.group(kind), start))
            pos = m.end()
        self.i = 0

    def fail(self, pos: int, what: str, hint: str = ""):
        shown = self.text if len(self.text) <= 200 else self.text[:200] + "..."
        here = self.text[pos:pos + 20] or "the end"
        raise ValueError(f"kernel expression {shown!r}: {what} at character {pos + 1} ({here!r}){hint}")

    def quoting_hint(self, pos: int, name: Optional[str] = None) -> str:
        """How to write the column the text at ``pos`` begins to name (``name``: that column, else
        the longest one the text starts with) when it is not a plain word -- a number (``2020``,
        ``3.5``), a name that starts with a digit or holds a space: in quotes, ``rbf("2020")``
        (the kernel being the last one named before ``pos``); else ``""``."""
        if name is None:
            starts = [c for c in self.columns or () if self.text.startswith(c, pos) and not _plain_word(c)]
            name = max(starts, key=len) if starts else None
        if name is None or _plain_word(name):
            return ""
        before = [v for kind, v, at in self.items if kind == "name" and at < pos and v in KERNELS]
        quote = "'" if '"' in name else '"'
        return (f"; a column whose name is not a plain word is named in quotes: "
                f"{before[-1] if before else 'rbf'}({quote}{name}{quote})")

    def peek(self):
        return self.items[self.i] if self.i < len(self.items) else ("end", "", len(self.text))

    def take(self, kind=None, value=None):
        tok = self.peek()
        if (kind and tok[0] != kind) or (value and tok[1] != value):
            self.fail(tok[2], f"expected {value or kind}, got {tok[1] or 'the end'!r}")
        self.i += 1
        return tok


def parse_kernel(text: str, columns: Optional[Sequence[str]] = None, input_dim: Optional[int] = None) -> dict:
    """Parse a kernel expression into a spec.

    Args:
        text: the expression (a plain registered name is an expression too).
        columns: the input columns' names (a CSV header), for kernels that name their columns.
        input_dim: D, to check column indices (``len(columns)`` when columns are given).

    Raises:
        ValueError: one line quoting the expression and the bad part.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"kernel expression: expected a non-empty string, got {text!r}")
    if len(text) > 10000:
        raise ValueError(f"kernel expression: {len(text)} characters, more than 10000")
    columns = list(columns) if columns is not None else None
    D = len(columns) if columns is not None else input_dim
    t = _Tokens(text, columns)
    depth = [0]  # the parentheses open where the parser is

    def column(tok) -> int:
        kind, value, pos = tok
        if kind == "number":
            named = value if columns is not None and value in columns else None  # a column of that name
            hint = t.quoting_hint(pos, named)
            if not re.fullmatch(r"\d+", value):
                t.fail(pos, f"column {value!r} is not a column index (0, 1, ...) or name", hint)
            if len(value) > 9:
                t.fail(pos, f"column {value[:20]!r}... is out of range (the inputs have {D or 'fewer'} columns)")
            index = int(value)
            if D is not None and index >= D:
                t.fail(pos, f"column {index} is out of range (the inputs have {D} columns, 0 to {D - 1})", hint)
            if named is not None and columns.index(named) != index:
                t.fail(pos, f"{value} is a column index (column {columns[index]!r}) and the name of column "
                            f"{columns.index(named)}", hint + f", or by index: {columns.index(named)}")
            return index
        name = value[1:-1] if kind == "quoted" else value
        if columns is None:
            t.fail(pos, f"column {name!r} named, but no column names are known here: use a 0-based index")
        if name not in columns:
            near = difflib.get_close_matches(name, columns, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else f" (the inputs are {', '.join(columns[:12])}{', ...' if len(columns) > 12 else ''})"
            t.fail(pos, f"unknown column {name[:40]!r}{hint}", t.quoting_hint(pos))
        return columns.index(name)

    def value():
        kind, v, pos = t.take()
        if kind == "number":
            if not math.isfinite(float(v)):  # (a float64 holds about 1.8e308 at most; an int past it would overflow later)
                t.fail(pos, f"number {v[:20]}{'...' if len(v) > 20 else ''} is out of range (beyond about 1.8e308)")
            return int(v) if re.fullmatch(r"[-+]?\d+", v) else float(v)
        if kind == "name" and v.lower() in ("true", "false"):
            return v.lower() == "true"
        t.fail(pos, f"expected a number, true or false, got {v!r}")

    def args(name_pos):
        dims, options = [], {}
        if t.peek()[1] == ")":
            t.fail(t.peek()[2], "empty parentheses: name columns or options, or drop the parentheses")
        while True:
            tok = t.take()
            if t.peek()[1] == "=" and tok[0] == "name":
                t.take("op", "=")
                if tok[1] in options:
                    t.fail(tok[2], f"option {tok[1]!r} given twice")
                options[tok[1]] = (value(), tok[2])
            elif tok[0] in ("name", "number", "quoted"):
                if options:
                    t.fail(tok[2], "a column after an option: name the columns first")
                dims.append((column(tok), tok[2]))
            else:
                t.fail(tok[2], f"expected a column or an option, got {tok[1]!r}")
            sep = t.take("op")
            if sep[1] == ")":
                return dims, options
            if sep[1] != ",":
                t.fail(sep[2], f"expected ',' or ')', got {sep[1]!r}")

    def nested(pos: int, inner):
        """``inner()`` one level of parentheses deeper: at most :data:`MAX_DEPTH` levels (the parser
        recurses once per level, and a spec holds at most that many)."""
        depth[0] += 1
        if depth[0] > MAX_DEPTH:
            t.fail(pos, f"nested more than {MAX_DEPTH} levels deep")
        node = inner()
        depth[0] -= 1
        return node

    def factor():
        kind, name, pos = t.take()
        if kind == "op" and name == "(":
            node = nested(pos, expr)
            t.take("op", ")")
            return node
        if kind != "name":
            t.fail(pos, f"expected a kernel name or '(', got {name or 'the end'!r}")
        if name == "scale":
            t.take("op", "(")
            node = {"scale": nested(pos, expr)}
            while t.peek()[1] == ",":
                t.take()
                key = t.take("name")
                if key[1] not in ("variance", "learn"):
                    t.fail(key[2], f"scale takes variance= and learn=, not {key[1]!r}")
                t.take("op", "=")
                node[key[1]] = value()
            t.take("op", ")")
            return node
        if name not in KERNELS:
            known = list(KERNELS) + ["scale"]
            near = difflib.get_close_matches(name, known, n=1)
            t.fail(pos, f"unknown kernel {name[:40]!r}" + (f" (did you mean {near[0]!r}?)" if near else f" (kernels: {', '.join(known)})"))
        node = {"kernel": KERNELS.canonical(name)}
        if t.peek()[1] == "(":
            t.take()
            dims, options = args(pos)
            if dims:
                seen = set()
                for d, p in dims:
                    if d in seen:
                        t.fail(p, f"column {d} named twice")
                    seen.add(d)
                node["active_dims"] = [d for d, _ in dims]
            for key, (v, p) in options.items():
                node[key] = v
                try:
                    check_spec(node, D)
                except ValueError as err:
                    t.fail(p, str(err).split(": ", 1)[-1])
        return node

    def chain(symbol: str, op: str, part) -> dict:
        """``part (symbol part)*`` as one flat ``{op: [...]}`` node (or the lone part)."""
        parts = [part()]
        while t.peek()[1] == symbol:
            t.take()
            parts.append(part())
        flat = [q for p in parts for q in (p[op] if op in p else [p])]
        return flat[0] if len(flat) == 1 else {op: flat}

    def term():
        return chain("*", "product", factor)

    def expr():
        return chain("+", "sum", term)

    spec = expr()
    tok = t.peek()
    if tok[0] != "end":
        t.fail(tok[2], f"unexpected {tok[1]!r} (expected '+', '*' or the end)")
    check_spec(spec, D)
    return spec


def format_kernel(spec: dict, columns: Optional[Sequence[str]] = None) -> str:
    """The expression of a spec (the inverse of :func:`parse_kernel` up to spacing), naming columns by
    ``columns`` when given: for tables and messages."""
    if "sum" in spec:
        return " + ".join(format_kernel(p, columns) for p in spec["sum"])
    if "product" in spec:
        return " * ".join(f"({format_kernel(p, columns)})" if "sum" in p else format_kernel(p, columns)
                          for p in spec["product"])
    if "scale" in spec:
        extra = "".join(f", {k}={_literal(v)}" for k, v in spec.items() if k != "scale")
        return f"scale({format_kernel(spec['scale'], columns)}{extra})"
    if "list" in spec:
        return "[" + "; ".join(format_kernel(p["kernel"], columns) for p in spec["list"]) + "]"
    dims = spec.get("active_dims") or []
    names = [_column_name(d, columns) for d in dims]
    options = [f"{k}={_literal(v)}" for k, v in spec.items() if k not in ("kernel", "active_dims")]
    inner = ", ".join(names + options)
    return f"{spec['kernel']}({inner})" if inner else spec["kernel"]


def _plain_word(name: str) -> bool:
    """A column name an expression may write bare (else in quotes): a letter or ``_``, then word
    characters, ``.`` or ``-``, and not ``true``/``false``."""
    return re.fullmatch(r"[A-Za-z_][\w.\-]*", name) is not None and name not in ("true", "false")


def _column_name(d: int, columns) -> str:
    if columns is None or d >= len(columns):
        return str(d)
    name = columns[d]
    return name if _plain_word(name) else repr(name)


def _literal(v) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else repr(v)
