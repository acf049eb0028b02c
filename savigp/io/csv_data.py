"""Reading and validating numeric CSV files for the ``savigp`` command line.

Only numpy and the standard library are used here (no torch), so that a bad file is reported
within a fraction of a second. Every problem raises :class:`DataError` with a one-line message
that names the file, the line (1-based, as an editor shows it) and the column::

    data.csv, line 7, column 'x2' (index 1): 'abc' is not a number

A table is read whole: rows of equal length, every cell a finite number, optionally a header.
Column selections (``--targets``, ``--inputs``) are comma-separated items, each a header name,
a 0-based index (negative counts from the end) or a range ``a:b`` (``b`` excluded).

How a file is read: in blocks of whole lines (about :data:`READ_CHUNK` bytes), each parsed by
numpy's compiled reader (``numpy.loadtxt``) into one growing array, so that what is held is the
table and a block, never the whole text. A block numpy refuses, or whose numbers break a rule of
savigp's (NaN, inf, beyond :data:`MAX_ABS_VALUE`), is read again by the careful reader (Python's
csv module, cell by cell), which names the line and column of its first problem. A file with
quotes or a lone carriage return is read whole by the careful reader (a quoted field may span
lines). Speed and memory against numpy and pandas: docs/performance.md, "Reading CSV files".
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
#: bytes of whole lines parsed at a time (a block): the memory a read holds beyond the table is a few
#: blocks; larger blocks were no faster (``python -m experiments.csv_read --block-sizes``)
READ_CHUNK = 2 ** 20

#: a number as savigp reads it: ASCII digits, an optional sign, decimal point and exponent (and
#: nan/inf, refused later with their own message). Python's float() also takes ``1_000`` and
#: non-ASCII digits (``１２``), which no other CSV reader does: they are not numbers here
_NUMBER = re.compile(r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)",
                     re.ASCII | re.IGNORECASE)


class DataError(ValueError):
    """A problem with an input file or a column selection; ``str(err)`` is one line."""


class TableMemoryError(MemoryError):
    """A CSV file's table, or what a command computes for its rows, did not fit in the memory left;
    ``str(err)`` is one line naming the file and its rows (counted or estimated), and what to do."""


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
        """``'name' (index j)`` with a header, ``index j`` without (a long name cut: :func:`quote_names`)."""
        if self.header is not None:
            return f"{quote_names([self.header[j]])} (index {j})"
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


class _WholeFile(Exception):
    """The file is read whole by the careful reader: it has quotes (a quoted field may span lines,
    and so blocks), a lone carriage return (a line end to the csv module, not to a line count) or a
    delimiter that is not one plain character."""


def _too_long(path: str, line: int) -> DataError:
    return DataError(f"{path}, line {line}: longer than {MAX_LINE_BYTES} bytes (a CSV line must be at most "
                     f"{MAX_LINE_BYTES // 2 ** 20} MiB; is this a text file with one row per line?)")


def _blocks(path: str, fh):
    """The file in blocks of whole lines: ``(offset, line, block, newlines)``, ``block`` bytes of
    about :data:`READ_CHUNK` (the last may lack its final newline), starting at byte ``offset`` of the
    file and on its line ``line`` (1-based), holding ``newlines`` line ends.

    A line longer than :data:`MAX_LINE_BYTES` raises a DataError naming it as soon as that much of it
    has been read: the file is read in pieces of at most that many bytes, so only the line a piece
    starts in (continued from the pieces before) and the one it ends in can be that long.
    """
    piece = max(1, min(READ_CHUNK, MAX_LINE_BYTES))
    pending: list = []  # pieces read since the last block, the first of them the last block's unfinished line
    size = 0  # their bytes
    offset, line = 0, 1  # where the next block starts
    newlines = 0  # in `pending`
    current, run = 1, 0  # the line being read and its bytes so far
    while True:
        more = fh.read(piece)
        if more:
            first = more.find(b"\n")
            if first < 0:
                run += len(more)
            else:
                if run + first > MAX_LINE_BYTES:
                    raise _too_long(path, current)
                count = more.count(b"\n")
                current += count
                newlines += count
                run = len(more) - more.rfind(b"\n") - 1
            if run > MAX_LINE_BYTES:
                raise _too_long(path, current)
            pending.append(more)
            size += len(more)
            if size < READ_CHUNK:
                continue
        if not pending:
            return
        data = b"".join(pending) if len(pending) > 1 else pending[0]
        end = not more
        pending = more = None  # (hold no second copy of the block)
        cut = len(data) if end else data.rfind(b"\n") + 1
        if cut == 0:  # no line ends yet: read on
            pending, size = [data], len(data)
            continue
        block, rest = (data, b"") if cut == len(data) else (data[:cut], data[cut:])
        data = None
        yield offset, line, block, newlines
        offset, line = offset + len(block), line + newlines
        block = None
        pending, size, newlines = ([rest] if rest else []), len(rest), 0
        if end:
            return


def _bom_length(data) -> int:
    """The bytes of the UTF-8 byte-order marks (EF BB BF) that ``data``, the file's start, begins
    with: every one of them (an editor that adds a mark to a file that has one doubles it; a mark
    left in the text would become part of the first column's name)."""
    n = 0
    while data.startswith(b"\xef\xbb\xbf", n):
        n += 3
    return n


def _decode(path: str, block, offset: int, line: int, skip: int = 0) -> str:
    """``block[skip:]`` (bytes starting on ``line`` at file ``offset``) as text; a byte that is not
    UTF-8 raises a DataError naming its line, its byte in the line and its file offset."""
    try:
        with memoryview(block) as view:
            return str(view[skip:], "utf-8")
    except UnicodeDecodeError as err:
        at = skip + err.start  # in the block, which starts a line
        newline = b"\n"
        line_start = block.rfind(newline, 0, at) + 1
        raise DataError(f"{path}, line {line + block.count(newline, 0, at)}, byte {at - line_start + 1} of the line: "
                        f"not UTF-8 text ({err.reason}: byte 0x{block[at]:02x} at file offset {offset + at})") from None


def _parse_rows(path: str, text: str, first_line: int, delimiter: str) -> tuple:
    """The non-blank rows of ``text`` (which starts on the file's line ``first_line``), cells
    stripped, and the line each starts on; a blank row (no cell with a character) is skipped.

    Raises:
        DataError: malformed CSV (an unclosed quote: the line where it opens).
    """
    rows: list = []
    lines: list = []
    base = first_line - 1
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    start = first_line  # the line where the row being read begins (a quoted field may span lines)
    try:
        for row in reader:
            if row and not all(not c.strip() for c in row):  # else a blank line
                rows.append([c.strip() for c in row])
                lines.append(start)
            start = base + reader.line_num + 1
    except csv.Error as err:
        if base + reader.line_num > start or "end of data" in str(err):  # a quote opened on `start` never closed
            raise DataError(f"{path}, line {start}: malformed CSV: a quoted field opened on this line is not closed "
                            f"(read to line {base + reader.line_num}: {err})") from None
        raise DataError(f"{path}, line {start}: malformed CSV: {err}") from None
    return rows, lines


def _header_names(path: str, first: list, line: int, header: Optional[bool]) -> Optional[list]:
    """The column names when ``first`` (the first row, on ``line``) is a header, else None.

    ``header`` None: a header when no cell is a number, data when every cell is; a row of both (a
    headerless file whose first row has a missing value, ``1,NA,3``) is neither: a DataError
    naming the line and the first cell that is not a number. Raises DataError for an empty or a
    duplicate name."""
    if header is None:
        numbers = [_is_number(c) for c in first]
        if any(numbers) and not all(numbers):
            j = numbers.index(False)
            what = "empty cell" if not first[j] else f"{quote_names([first[j]])} is not a number"
            raise DataError(f"{path}, line {line}, column index {j}: {what}, but the row holds numbers too, so it is "
                            "data, not a header; fix the cell, or give --header if the row names the columns")
        header = not any(numbers)
    if not header:
        return None
    seen = set()
    for j, name in enumerate(first):
        if not name:
            raise DataError(f"{path}, line {line}, column index {j}: empty column name in the header")
        if name in seen:
            raise DataError(f"{path}, line {line}, column index {j}: duplicate column name {name!r} in the header")
        seen.add(name)
    return first


def _parse_cells(path: str, names: Optional[list], rows: list, lines: list, width: int, ref: str,
                 strict: bool) -> np.ndarray:
    """``rows`` (lists of cell strings, on ``lines``) as float64 ``(len(rows), width)``, checked:
    every row ``width`` cells (else ragged, against ``ref``: the header or the first data line),
    every cell a finite number of at most :data:`MAX_ABS_VALUE`. ``strict``: the text holds cells
    that float() reads but savigp does not (``_``, non-ASCII), so cells are read one by one."""
    for r, row in enumerate(rows):
        if len(row) != width:
            raise DataError(f"{path}, line {lines[r]}: ragged row: {len(row)} field(s), but {ref} has {width}")
    table = Table(path, names, np.empty((0, width)), np.asarray(lines, dtype=np.int64))
    try:  # float() also reads 1_000 and non-ASCII digits: then cell by cell (strict)
        values = None if strict else np.array(rows, dtype=np.float64)
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
    return values


def _line_dtype(size: int):
    """Line numbers of a file of ``size`` bytes: int32 when they fit (half the memory of int64)."""
    return np.int32 if size < 2 ** 31 - 1 else np.int64


def read_csv(path: str, header: Optional[bool] = None, delimiter: str = ",") -> Table:
    """Read a numeric CSV file.

    Args:
        path: the file.
        header: True: the first row holds column names; False: it is data; None (default): it is
            a header when none of its cells is a number, data when all are, else an error.
        delimiter: the field separator.

    Returns:
        a :class:`Table` with ``values (R, C)`` float64, R >= 1.

    Raises:
        DataError: missing or unreadable file, empty file, header without data rows, rows of
            different lengths, empty or non-numeric cells, NaN or infinite values (the first
            problem of the first block of lines that has one).
    """
    path = str(path)
    if not os.path.exists(path):
        raise DataError(f"{path}: no such file")
    if os.path.isdir(path):
        raise DataError(f"{path}: is a directory, not a CSV file")
    try:
        return _read(path, header, delimiter)
    except DataError as err:
        hint = _delimiter_hint(path, delimiter)
        if not hint:
            raise
        raise DataError(f"{err}; {hint}") from None


#: separators a file may use instead of ``--delimiter``'s, for the hint of :func:`_delimiter_hint`
_OTHER_DELIMITERS = {";": ("';'", "';'"), "\t": ("tabs", "'\\t'"), "|": ("'|'", "'|'"), ",": ("','", "','")}


def _delimiter_hint(path: str, delimiter: str) -> str:
    """A hint (else ``""``) for a file that reads as one column because it has another separator:
    its first non-blank line (of its first 64 KiB) holds no ``delimiter`` but one of
    :data:`_OTHER_DELIMITERS`, named with the ``--delimiter`` that reads it."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(2 ** 16).decode("utf-8", errors="replace")
    except OSError:
        return ""
    first = next((line for line in head.splitlines() if line.strip()), "")
    if delimiter in first:
        return ""
    for other, (name, option) in _OTHER_DELIMITERS.items():
        if other != delimiter and other in first:
            return (f"the file reads as one column and its first line holds {name}: give --delimiter {option} "
                    f"if they separate its columns")
    return ""


def _read(path: str, header: Optional[bool], delimiter: str) -> Table:
    """:func:`read_csv` without its hint."""
    progress = _Progress()
    try:
        with open(path, "rb") as fh:
            progress.size = os.fstat(fh.fileno()).st_size
            try:
                return _read_blocks(path, fh, header, delimiter, progress)
            except _WholeFile:
                fh.seek(0)
                progress.whole = True
                return _read_whole(path, fh, header, delimiter)
    except OSError as err:
        raise DataError(f"{path}: cannot read: {err.strerror or err}") from None
    except MemoryError:
        raise TableMemoryError(progress.message(path)) from None


def _gib(n: float) -> str:
    return f"{n / 2 ** 30:.3g} GiB" if n >= 2 ** 30 else f"{n / 2 ** 20:.3g} MiB"


@dataclass
class _Progress:
    """How far a read got (for the message of a :class:`TableMemoryError`)."""

    size: int = 0  # bytes in the file
    done: int = 0  # bytes of it read into rows
    rows: int = 0
    width: int = 0
    whole: bool = False  # read whole by the careful reader

    def message(self, path: str) -> str:
        out = f"{path}: out of memory reading this {_gib(self.size)} file"
        if self.whole:
            out += (" (read whole, every cell held as a string, because it has quotes or a lone carriage return: "
                    "without them it is read in blocks, holding little more than its table)")
        elif self.rows and self.done:
            rows = self.rows * self.size / self.done
            out += (f" ({self.rows} rows of {self.width} column(s) in its first {_gib(self.done)}: about {rows:.3g} rows, "
                    f"a table of {_gib(rows * self.width * 8)} as float64)")
        return out + "; free memory, use a machine with more, or use fewer rows (a sample of the file)"


def _read_whole(path: str, fh, header: Optional[bool], delimiter: str) -> Table:
    """The careful reader on the whole file: every cell held as a string (about 0.7 GiB more than
    the table for a million rows of three columns), for files :func:`_read_blocks` leaves to it."""
    raw = bytearray()
    for _, _, block, _ in _blocks(path, fh):
        raw += block
    text = _decode(path, raw, 0, 1, _bom_length(raw))
    size = len(raw)
    del raw
    rows, lines = _parse_rows(path, text, 1, delimiter)
    strict = not _plain_ascii(text)
    del text
    if not rows:
        raise DataError(f"{path}: the file is empty (no rows)")
    names = _header_names(path, rows[0], lines[0], header)
    if names is not None:
        rows, lines = rows[1:], lines[1:]
        if not rows:
            raise DataError(f"{path}: has a header but no data rows")
    width = len(names) if names is not None else len(rows[0])
    ref = "the header" if names is not None else f"line {lines[0]}"
    values = _parse_cells(path, names, rows, lines, width, ref, strict)
    return Table(path, names, values, np.asarray(lines, dtype=_line_dtype(size)))


def _plain_block(data: bytes, newlines: int, width: int, delimiter: str) -> Optional[np.ndarray]:
    """The rows of ``data`` (ASCII lines without quotes or lone carriage returns, ``newlines`` line
    ends) as float64 ``(rows, width)``, parsed by numpy's compiled reader, or None when the block is
    not plain: a blank line inside it, a row of another width, a cell numpy cannot read, or a value
    that is not finite or beyond :data:`MAX_ABS_VALUE` (the careful reader then names the line and
    column)."""
    if data.endswith((b"\n\n", b"\n\r\n")) or data in (b"\n", b"\r\n"):  # blank lines at the end: no rows
        data = data.rstrip(b"\r\n")
        newlines = data.count(b"\n")
    rows = newlines + (not data.endswith(b"\n"))
    if not data:
        return np.empty((0, width))
    try:
        values = np.loadtxt(io.BytesIO(data), delimiter=delimiter, comments=None, dtype=np.float64, ndmin=2)
    except ValueError:
        return None
    if values.shape != (rows, width):  # numpy skips blank lines: the rows after one would shift
        return None
    if not np.abs(values).max() <= MAX_ABS_VALUE:  # (NaN compares False)
        return None
    return values


class _Rows:
    """A float64 ``(rows, width)`` array and its line numbers, grown in place (``ndarray.resize``
    reallocates, which moves large blocks by remapping pages, not by copying them)."""

    def __init__(self, width: int, line_dtype):
        self.values = np.empty((0, width))
        self.lines = np.empty(0, dtype=line_dtype)
        self.n = 0

    def reserve(self, capacity: int) -> None:
        if self.values.shape[0] == 0:  # (np.empty: pages are touched when written, not zeroed first)
            self.values, self.lines = np.empty((capacity, self.values.shape[1])), np.empty(capacity, self.lines.dtype)
        elif capacity > self.values.shape[0] or capacity == self.n:
            self.values.resize((capacity, self.values.shape[1]), refcheck=False)
            self.lines.resize(capacity, refcheck=False)

    def add(self, values: np.ndarray, lines) -> None:
        k = values.shape[0]
        if self.n + k > self.values.shape[0]:
            self.reserve(max(self.n + k, self.values.shape[0] + self.values.shape[0] // 4))
        self.values[self.n:self.n + k] = values
        if isinstance(lines, range):  # (no int64 array of them first)
            np.add(np.arange(k, dtype=self.lines.dtype), lines.start, out=self.lines[self.n:self.n + k])
        else:
            self.lines[self.n:self.n + k] = lines
        self.n += k


def _block_rows(path: str, data: bytes, line: int, newlines: int, names: Optional[list], width: int, ref: str,
                delimiter: str, ascii_only: bool) -> tuple:
    """The values ``(rows, width)`` and line numbers of the rows of ``data``, lines of the file from
    ``line`` on with ``newlines`` line ends (``ascii_only``: all its bytes are): parsed by
    :func:`_plain_block` or, when it refuses them, by the careful reader, which raises a DataError
    naming the line and column of the first problem."""
    values = _plain_block(data, newlines, width, delimiter) if ascii_only else None
    if values is not None:
        return values, range(line, line + values.shape[0])
    text = data.decode("utf-8")
    del data
    rows, lines = _parse_rows(path, text, line, delimiter)
    return _parse_cells(path, names, rows, lines, width, ref, not _plain_ascii(text)), lines


def _read_blocks(path: str, fh, header: Optional[bool], delimiter: str, progress: _Progress) -> Table:
    """The table, read block by block (:func:`_blocks`): the first non-blank row decides the header,
    then each block's rows go through :func:`_plain_block` or, when it refuses them, the careful reader.

    Raises:
        _WholeFile: the file needs :func:`_read_whole` (checked block by block, before its rows).
    """
    if len(delimiter) != 1 or delimiter in "\n\r\"":
        raise _WholeFile
    size = progress.size
    names, width, ref, out = None, None, None, None
    for offset, line, block, newlines in _blocks(path, fh):
        first_line = line
        if b'"' in block or (b"\r" in block and block.count(b"\r") != block.count(b"\r\n")):
            raise _WholeFile
        pos = _bom_length(block) if offset == 0 else 0
        ascii_only = block.isascii()
        if not ascii_only:
            _decode(path, block, offset, line, pos)  # names a byte that is not UTF-8
        while width is None and pos < len(block):  # the first non-blank row: a header or data
            end = block.find(b"\n", pos) + 1 or len(block)
            rows, _ = _parse_rows(path, block[pos:end].decode("utf-8"), line, delimiter)
            if rows:
                names = _header_names(path, rows[0], line, header)
                width = len(rows[0])
                ref = "the header" if names is not None else f"line {line}"
                out = _Rows(width, _line_dtype(size))
                if names is None:
                    break  # the row is data
            pos, line = end, line + 1
        if width is None or pos >= len(block):
            continue
        data = block[pos:] if pos else block
        values, lines = _block_rows(path, data, line, newlines - (line - first_line), names, width, ref, delimiter,
                                    ascii_only or data.isascii())
        data = None
        progress.done, progress.width, progress.rows = offset + len(block), width, out.n + values.shape[0]
        block = None
        if out.n == 0 and values.shape[0]:  # room for the rows the file's size suggests
            out.reserve(int(progress.rows * size / progress.done * 1.02) + 16)
        out.add(values, lines)
        values = lines = None
    if width is None:
        raise DataError(f"{path}: the file is empty (no rows)")
    if out.n == 0:
        raise DataError(f"{path}: has a header but no data rows")
    out.reserve(out.n)  # give back what the estimate left over
    return Table(path, names, out.values, out.lines)


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
                known = f"its columns are {quote_names(table.header)}" if table.header is not None \
                    else "it has no header row, so columns are selected by 0-based index"
                raise DataError(f"{option}: column {quote_names([item])} does not exist in {table.path} ({known})") from None
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


def quote_names(names: Sequence[str], limit: int = 10, width: int = 60) -> str:
    """Column names quoted for a one-line message: each at most ``width`` characters (a longer
    one cut, with its length: a 100,000-character header name is not echoed whole), at most
    ``limit`` of them (then how many more)."""
    names = list(names)
    shown = [repr(n) if len(repr(n)) <= width else f"{repr(n)[:width]}... ({len(str(n))} characters)"
             for n in names[:limit]]
    return ", ".join(shown) + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")


def columns_by_name(table: Table, names: Sequence[str], role: str, option: str) -> list:
    """Indices of the columns called ``names`` (a model's training column names) in ``table``.

    Raises:
        DataError: the file has no header, or lacks some of the names; the message lists the
            expected and the found names, and how to choose columns explicitly (``option``, or
            ``--positional``).
    """
    expected = quote_names(names)
    if table.header is None:
        raise DataError(f"{table.path}: has no header row, but the model's {role} columns are named ({expected}); "
                        f"add the header, name the columns with {option} (0-based indices), or pass --positional "
                        "to take them by position")
    missing = [n for n in names if n not in table.header]
    if missing:
        raise DataError(f"{table.path}: the model's {role} column(s) {quote_names(missing)} are missing: "
                        f"expected {expected}, found {quote_names(table.header)}; name the columns with "
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
