"""Reading and validating numeric CSV files for the ``savigp`` command line.

Only numpy and the standard library are used here (no torch), so that a bad file is reported
within a fraction of a second. Every problem raises :class:`DataError` with a one-line message
that names the file, the line (1-based, as an editor shows it) and the column::

    data.csv, line 7, column 'x2' (index 1): 'abc' is not a number

A table is read whole: rows of equal length, every cell a finite number, optionally a header.
Column selections (``--targets``, ``--inputs``) are comma-separated items, each a header name,
a 0-based index (negative counts from the end) or a range ``a:b`` (``b`` excluded).
"""
from __future__ import annotations

import csv
import hashlib
import io
import os
import re
import warnings
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np


#: the largest magnitude a cell may have: squares (variances, standardization, Gaussian
#: log-densities) of values up to 1e150 stay finite in float64 (max 1.8e308)
MAX_ABS_VALUE = 1e150


#: the longest line (bytes) a CSV file may have: far above any table savigp can model (100,000
#: columns of 160 characters), and a file that is one huge line (binary data, a missing newline)
#: is named with its line number after reading this much of it, not after filling the memory
MAX_LINE_BYTES = 2 ** 24
#: bytes read at a time while the line lengths are checked
READ_CHUNK = 2 ** 24

#: a number as savigp reads it: ASCII digits, an optional sign, decimal point and exponent (and
#: nan/inf, refused later with their own message). Python's float() also takes ``1_000`` and
#: non-ASCII digits (``１２``), which no other CSV reader does: they are not numbers here
_NUMBER = re.compile(r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)",
                     re.ASCII | re.IGNORECASE)


class DataError(ValueError):
    """A problem with an input file or a column selection; ``str(err)`` is one line."""


@dataclass
class Table:
    """A numeric CSV table.

    Attributes:
        path: the file it was read from (as given).
        header: column names (C strings) when the file has a header row, else None.
        values: the cells, float64 ``(R, C)``.
        lines: the 1-based line number of each data row in the file, int ``(R,)``.
    """

    path: str
    header: Optional[list]
    values: np.ndarray
    lines: np.ndarray

    @property
    def num_rows(self) -> int:
        return int(self.values.shape[0])

    @property
    def num_columns(self) -> int:
        return int(self.values.shape[1])

    def column_label(self, j: int) -> str:
        """``'name' (index j)`` with a header, ``index j`` without."""
        if self.header is not None:
            return f"{self.header[j]!r} (index {j})"
        return f"index {j}"

    def names(self, columns: Sequence[int]) -> list:
        """Names of the given columns: header names, or ``column<j>`` without a header."""
        return [self.header[j] if self.header is not None else f"column{j}" for j in columns]

    def where(self, row: Optional[int] = None, columns: Optional[Sequence[int]] = None) -> str:
        """Location prefix of a message: ``path, line L, column 'c' (index j)``."""
        out = str(self.path)
        if row is not None:
            out += f", line {int(self.lines[row])}"
        if columns:
            labels = ", ".join(self.column_label(j) for j in columns)
            out += f", column{'s' if len(columns) > 1 else ''} {labels}"
        return out


def _is_number(cell: str) -> bool:
    """A cell of the number syntax savigp reads (:data:`_NUMBER`)."""
    return _NUMBER.fullmatch(cell.strip()) is not None


def _plain_ascii(text: str) -> bool:
    """True when ``text`` holds no cell that float() reads but savigp does not (``_``, non-ASCII)."""
    return text.isascii() and "_" not in text


def _read_bytes(path: str, fh) -> bytearray:
    """The whole file, read in :data:`READ_CHUNK` pieces; a line longer than :data:`MAX_LINE_BYTES`
    raises a DataError naming it as soon as that much of it has been read."""
    size = os.fstat(fh.fileno()).st_size
    data = bytearray(size)  # filled in place (no second copy of the file); grows if the file does
    pos = 0
    line, run = 1, 0  # the line being read and its bytes so far

    def too_long(at: int):
        return DataError(f"{path}, line {at}: longer than {MAX_LINE_BYTES} bytes (a CSV line must be at most "
                         f"{MAX_LINE_BYTES // 2 ** 20} MiB; is this a text file with one row per line?)")

    while True:
        if pos < len(data):
            with memoryview(data) as view:
                n = fh.readinto(view[pos:min(len(data), pos + READ_CHUNK)])
        else:
            more = fh.read(READ_CHUNK)
            n = len(more)
            data += more
        if not n:
            break
        chunk = data[pos:pos + n]
        pos += n
        ends = np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == 10)
        if ends.size == 0:
            run += len(chunk)
        else:
            lengths = np.diff(ends, prepend=-1) - 1
            lengths[0] += run
            if int(lengths.max()) > MAX_LINE_BYTES:
                raise too_long(line + int(np.argmax(lengths > MAX_LINE_BYTES)))
            line += int(ends.size)
            run = len(chunk) - int(ends[-1]) - 1
        if run > MAX_LINE_BYTES:
            raise too_long(line)
    del data[pos:]  # a file that shrank while it was read
    return data


def read_csv(path: str, header: Optional[bool] = None, delimiter: str = ",") -> Table:
    """Read a numeric CSV file.

    Args:
        path: the file.
        header: True: the first row holds column names; False: it is data; None (default): it is
            a header when any of its cells is not a number.
        delimiter: the field separator.

    Returns:
        a :class:`Table` with ``values (R, C)`` float64, R >= 1.

    Raises:
        DataError: missing or unreadable file, empty file, header without data rows, rows of
            different lengths, empty or non-numeric cells, NaN or infinite values.
    """
    path = str(path)
    if not os.path.exists(path):
        raise DataError(f"{path}: no such file")
    if os.path.isdir(path):
        raise DataError(f"{path}: is a directory, not a CSV file")
    rows: list = []
    lines: list = []
    try:
        with open(path, "rb") as fh:
            raw = _read_bytes(path, fh)
    except OSError as err:
        raise DataError(f"{path}: cannot read: {err.strerror or err}") from None
    bom = 3 if raw.startswith(b"\xef\xbb\xbf") else 0
    try:
        text = raw[bom:].decode("utf-8")
    except UnicodeDecodeError as err:
        at = bom + err.start  # the offset in the whole file (decoded in one piece)
        newline = b"\n"
        line, line_start = raw.count(newline, 0, at) + 1, raw.rfind(newline, 0, at) + 1
        raise DataError(f"{path}, line {line}, byte {at - line_start + 1} of the line: not UTF-8 "
                        f"text ({err.reason}: byte 0x{raw[at]:02x} at file offset {at})") from None
    del raw
    fast = _plain_table(path, text, header, delimiter)
    if fast is not None:
        return fast
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    start = 1  # the line where the row being read begins (a quoted field may span lines)
    try:
        for row in reader:
            if row and not all(not c.strip() for c in row):  # else a blank line
                rows.append([c.strip() for c in row])
                lines.append(start)
            start = reader.line_num + 1
    except csv.Error as err:
        if reader.line_num > start or "end of data" in str(err):  # a quote opened on `start` never closed
            raise DataError(f"{path}, line {start}: malformed CSV: a quoted field opened on this line is not closed "
                            f"(read to line {reader.line_num}: {err})") from None
        raise DataError(f"{path}, line {start}: malformed CSV: {err}") from None
    strict_cells = not _plain_ascii(text)
    del text
    if not rows:
        raise DataError(f"{path}: the file is empty (no rows)")

    first = rows[0]
    if header is None:
        header = any(not _is_number(c) for c in first)
    names = None
    if header:
        names = first
        seen = set()
        for j, name in enumerate(names):
            if not name:
                raise DataError(f"{path}, line {lines[0]}, column index {j}: empty column name in the header")
            if name in seen:
                raise DataError(f"{path}, line {lines[0]}, column index {j}: duplicate column name {name!r} in the header")
            seen.add(name)
        rows, lines = rows[1:], lines[1:]
        if not rows:
            raise DataError(f"{path}: has a header but no data rows")

    width = len(names) if names is not None else len(rows[0])
    for r, row in enumerate(rows):
        if len(row) != width:
            ref = "the header" if names is not None else f"line {lines[0]}"
            raise DataError(f"{path}, line {lines[r]}: ragged row: {len(row)} field(s), but {ref} has {width}")

    table = Table(path, names, np.empty((0, width)), np.asarray(lines, dtype=np.int64))
    try:  # float() also reads 1_000 and non-ASCII digits: then cell by cell (strict_cells)
        values = None if strict_cells else np.array(rows, dtype=np.float64)
    except ValueError:
        values = None
    if values is None or values.shape != (len(rows), width):
        values = np.empty((len(rows), width))
        for r, row in enumerate(rows):  # slow path: cell by cell, naming the first bad one
            for j, cell in enumerate(row):
                if not cell:
                    raise DataError(f"{table.where(r, [j])}: empty cell")
                if not _is_number(cell):
                    raise DataError(f"{table.where(r, [j])}: {cell!r} is not a number (digits 0-9, an optional "
                                    "sign, decimal point and exponent)")
                values[r, j] = float(cell)
    bad = ~np.isfinite(values)
    if bad.any():
        r, j = np.argwhere(bad)[0]
        raise DataError(f"{table.where(int(r), [int(j)])}: {rows[r][j]!r} is not a finite number (NaN and inf are not allowed)")
    big = np.abs(values) > MAX_ABS_VALUE
    if big.any():
        r, j = np.argwhere(big)[0]
        raise DataError(f"{table.where(int(r), [int(j)])}: {rows[r][j]!r} is too large (|value| must be at most "
                        f"{MAX_ABS_VALUE:g}, so that squares and sums of squares stay finite in float64)")
    table.values = values
    return table


def _plain_table(path: str, text: str, header: Optional[bool], delimiter: str) -> Optional[Table]:
    """The table of a plain, valid file, parsed by numpy in one pass, or None.

    Plain: no quotes, no carriage returns, no blank lines, a one-character delimiter, rows of equal
    width, every cell a finite number within :data:`MAX_ABS_VALUE` and a header (if any) of distinct,
    non-empty names. Anything else returns None and the general reader, which holds every cell as a
    string (a peak of about 0.7 GiB more for a million rows of three columns, against 0.4 GiB here,
    text included; measured with ``ru_maxrss``), reads the
    file and reports what is wrong with its line and column.
    """
    if len(delimiter) != 1 or delimiter in "\n\r\"" or '"' in text or "\r" in text:
        return None
    body = text[:-1] if text.endswith("\n") else text
    if not body.strip() or "\n\n" in body or body.startswith("\n"):
        return None
    nl = body.find("\n")
    first = [c.strip() for c in (body if nl < 0 else body[:nl]).split(delimiter)]
    if header is None:
        header = any(not _is_number(c) for c in first)
    if header and (nl < 0 or not all(first) or len(set(first)) != len(first)):
        return None
    rest = body[nl + 1:] if header else body
    if not _plain_ascii(rest):
        return None
    width = len(first)
    data = np.frombuffer(rest.encode("utf-8"), dtype=np.uint8)
    ends = np.flatnonzero(data == 10)
    delims = np.flatnonzero(data == ord(delimiter))
    per_line = np.diff(np.searchsorted(delims, np.concatenate([[0], ends, [data.size]])))
    if not bool((per_line == width - 1).all()):
        return None
    del data, delims
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            values = np.fromstring(rest.replace("\n", delimiter), dtype=np.float64, sep=delimiter)
        except ValueError:
            return None
    rows = ends.size + 1
    if values.size != rows * width or not bool(np.isfinite(values).all()) or \
            bool((np.abs(values) > MAX_ABS_VALUE).any()):
        return None
    first_line = 2 if header else 1
    return Table(path, first if header else None, values.reshape(rows, width),
                 np.arange(first_line, first_line + rows, dtype=np.int64))


def resolve_columns(spec: str, table: Table, option: str = "--targets") -> list:
    """Column indices named by ``spec`` (comma-separated names, 0-based indices or ``a:b`` ranges).

    Raises:
        DataError: naming the option, the file and the column that does not exist.
    """
    C = table.num_columns
    out: list = []
    items = [s.strip() for s in str(spec).split(",")]
    if not any(items):
        raise DataError(f"{option}: no columns given")
    for item in items:
        if not item:
            raise DataError(f"{option} {spec!r}: empty item in the column list")
        if table.header is not None and item in table.header:
            idx = [table.header.index(item)]
        elif ":" in item:
            a, _, b = item.partition(":")
            try:
                lo = int(a) if a.strip() else 0
                hi = int(b) if b.strip() else C
            except ValueError:
                raise DataError(f"{option}: {item!r} is not a column name or a range a:b of indices in {table.path}") from None
            lo, hi = (lo + C if lo < 0 else lo), (hi + C if hi < 0 else hi)
            if not 0 <= lo < hi <= C:
                raise DataError(f"{option}: range {item!r} selects no columns of {table.path}, which has {C} column(s) (indices 0-{C - 1})")
            idx = list(range(lo, hi))
        else:
            try:
                j = int(item)
            except ValueError:
                known = f"its columns are {', '.join(repr(n) for n in table.header)}" if table.header is not None \
                    else "it has no header row, so columns are selected by 0-based index"
                raise DataError(f"{option}: column {item!r} does not exist in {table.path} ({known})") from None
            if not -C <= j < C:
                raise DataError(f"{option}: column index {j} does not exist in {table.path}, which has {C} column(s) (indices 0-{C - 1})")
            idx = [j % C]
        for j in idx:
            if j in out:
                raise DataError(f"{option}: column {table.column_label(j)} is selected twice")
            out.append(j)
    return out


def split_columns(table: Table, targets: str, inputs: Optional[str] = None) -> tuple:
    """Input and target column indices for ``--targets`` and the optional ``--inputs``.

    Without ``inputs``, every column that is not a target is an input.

    Returns:
        ``(input_columns, target_columns)``, lists of indices.
    """
    tcols = resolve_columns(targets, table, "--targets")
    if inputs is None:
        icols = [j for j in range(table.num_columns) if j not in tcols]
    else:
        icols = resolve_columns(inputs, table, "--inputs")
        both = [j for j in icols if j in tcols]
        if both:
            raise DataError(f"column {table.column_label(both[0])} of {table.path} is both an input and a target")
    if not icols:
        raise DataError(f"{table.path}: no input columns left (all {table.num_columns} column(s) are targets)")
    return icols, tcols


def columns_by_name(table: Table, names: Sequence[str], role: str, option: str) -> list:
    """Indices of the columns called ``names`` (a model's training column names) in ``table``.

    Raises:
        DataError: the file has no header, or lacks some of the names; the message lists the
            expected and the found names, and how to choose columns explicitly (``option``, or
            ``--positional``).
    """
    expected = ", ".join(map(repr, names))
    if table.header is None:
        raise DataError(f"{table.path}: has no header row, but the model's {role} columns are named ({expected}); "
                        f"add the header, name the columns with {option} (0-based indices), or pass --positional "
                        "to take them by position")
    missing = [n for n in names if n not in table.header]
    if missing:
        raise DataError(f"{table.path}: the model's {role} column(s) {', '.join(map(repr, missing))} are missing: "
                        f"expected {expected}, found {', '.join(map(repr, table.header))}; name the columns with "
                        f"{option} or pass --positional to take them by position")
    return [table.header.index(n) for n in names]


def data_checksum(X: np.ndarray, Y: np.ndarray) -> str:
    """SHA-256 of the float64 contents and shapes of ``X (N, D)`` and ``Y (N, P)``."""
    h = hashlib.sha256()
    for a in (X, Y):
        a = np.ascontiguousarray(a, dtype=np.float64)
        h.update(str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def write_csv(path: str, header: Sequence[str], values: np.ndarray) -> None:
    """Write ``values (R, C)`` with a header row; ``path`` ``"-"`` is standard output.

    Files are written atomically (:func:`savigp.io.atomic_files.atomic_write`), so that an existing
    file is never left truncated. Numbers are written with full precision (repr).
    """
    import sys

    from .atomic_files import atomic_write

    def emit(fh) -> None:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(list(header))
        for row in np.asarray(values, dtype=np.float64):
            w.writerow([repr(float(v)) for v in row])

    if path == "-":
        emit(sys.stdout)
        sys.stdout.flush()
        return
    with atomic_write(path, "w", newline="") as fh:
        emit(fh)
