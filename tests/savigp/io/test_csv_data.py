"""savigp/io/csv_data.py at scale: a file read in blocks of lines by numpy's compiled reader gives
numpy's values and the file's line numbers; a problem deep in a file is named by its own line; the
memory held is about the table, not the text; running out of memory names the file.

(Speed is measured by ``experiments/csv_read.py``, never asserted here.)"""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import savigp.io.csv_data as cd
from savigp.io.csv_data import DataError, TableMemoryError, read_csv


def _numbers(rows: int, columns: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, columns)) * 10.0 ** np.arange(-3, columns - 3)


def _text(values: np.ndarray, newline: str = "\n") -> str:
    return "".join(",".join(map(repr, row)) + newline for row in values.tolist())


@pytest.mark.parametrize("block", [64, 1000, 1 << 20])
def test_blocks_give_numpys_values_and_the_files_lines(tmp_path, monkeypatch, block):
    """Blocks smaller than a line, of a few lines, and larger than the file; CRLF lines and blank
    lines (skipped, the line numbers kept) inside and at the end of the file."""
    monkeypatch.setattr(cd, "READ_CHUNK", block)
    values = _numbers(3000, 4)
    head, tail = _text(values[:1000], "\r\n"), _text(values[1000:])
    path = tmp_path / "t.csv"
    path.write_text("a,b,c,y\n" + head + "\n \n" + tail + "\n\n", newline="")
    t = read_csv(str(path))
    assert t.header == ["a", "b", "c", "y"]
    assert np.array_equal(t.values, values)  # bit for bit: both readers round correctly
    assert t.lines.tolist() == list(range(2, 1002)) + list(range(1004, 3004))


def test_a_problem_deep_in_a_file_is_named_by_its_own_line(tmp_path, monkeypatch):
    """The block numpy refuses is read again by the careful reader, which counts lines from the
    block's first: the first problem of that block, on its line of the file."""
    monkeypatch.setattr(cd, "READ_CHUNK", 4096)
    lines = _text(_numbers(30000, 3)).splitlines(keepends=True)
    for at, cell, needle in ((20000, "1e999", r"'1e999' is not a finite number"),
                             (25000, "abc", r"'abc' is not a number"),
                             (29998, "", "empty cell")):
        bad = lines.copy()
        bad[at] = bad[at].rsplit(",", 1)[0] + "," + cell + "\n"
        path = tmp_path / "deep.csv"
        path.write_text("x1,x2,y\n" + "".join(bad))
        with pytest.raises(DataError, match=rf"deep.csv, line {at + 2}, column 'y' \(index 2\): {needle}"):
            read_csv(str(path))
    bad = lines.copy()
    bad[27000] = "1,2\n"
    path.write_text("".join(bad))  # no header: the width is the first line's
    with pytest.raises(DataError, match=r"deep.csv, line 27001: ragged row: 2 field\(s\), but line 1 has 3"):
        read_csv(str(path))


def test_the_memory_held_is_the_table_and_a_few_blocks(tmp_path, monkeypatch):
    """Peak traced memory of a read against the table's bytes: the reader before blocks held the
    whole text (about 2.5 times the table here) and copies of it, 16.8 times the table on this file
    (24 with a blank line at its end); now the table, its line numbers (int32: half a column) and
    blocks of lines (64 KiB here)."""
    monkeypatch.setattr(cd, "READ_CHUNK", 1 << 16)
    values = _numbers(20000, 9)
    path = tmp_path / "m.csv"
    path.write_text("".join(f"x{j}," for j in range(8)) + "y\n" + _text(values))
    tracemalloc.start()
    try:
        t = read_csv(str(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.array_equal(t.values, values)
    assert t.values.nbytes == 20000 * 9 * 8 and t.lines.dtype == np.int32
    assert peak <= 1.5 * t.values.nbytes, peak / t.values.nbytes


def test_running_out_of_memory_names_the_file_its_size_and_rows(tmp_path, monkeypatch):
    """A MemoryError while the table grows says how large the file and its table are (the advice of
    ``savigp``'s other out-of-memory message, fewer --samples, has nothing to do with a file)."""
    monkeypatch.setattr(cd, "READ_CHUNK", 4096)
    path = tmp_path / "big.csv"
    path.write_text("x,y\n" + _text(_numbers(4000, 2)))

    def no_memory(self, capacity):
        raise MemoryError()

    monkeypatch.setattr(cd._Rows, "reserve", no_memory)
    with pytest.raises(TableMemoryError) as err:
        read_csv(str(path))
    msg = str(err.value)
    assert msg.startswith(f"{path}: out of memory reading this ") and " MiB file (" in msg
    rows = float(msg.split("about ")[1].split(" rows")[0])
    assert 3600 <= rows <= 4400, msg  # estimated from the first block's bytes per row
    assert "2 column(s)" in msg and "use fewer rows" in msg and "--samples" not in msg
    path.write_text('x,y\n"1",2\n')  # read whole (quotes): said so
    with pytest.raises(TableMemoryError, match=r"read whole, every cell held as a string, because it has quotes"):
        monkeypatch.setattr(cd, "_parse_cells", lambda *a: (_ for _ in ()).throw(MemoryError()))
        read_csv(str(path))


@pytest.mark.parametrize("marks", [1, 2, 3])
@pytest.mark.parametrize("quoted", [False, True])  # (the block reader, and the careful reader quotes send it to)
def test_every_leading_byte_order_mark_is_dropped(tmp_path, marks, quoted):
    """A UTF-8 byte-order mark is not text: an editor that saves a file that has one may add another,
    and a mark left in (before: the second of two) became part of the first column's name."""
    path = tmp_path / "bom.csv"
    first = '"x1"' if quoted else "x1"
    path.write_bytes(b"\xef\xbb\xbf" * marks + f"{first},x2,y\n1,2,3\n4,5,6\n".encode())
    table = read_csv(str(path))
    assert table.header == ["x1", "x2", "y"]
    assert table.values.tolist() == [[1, 2, 3], [4, 5, 6]]
