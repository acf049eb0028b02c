"""Whether the first row of a CSV file is a header (issue 54): unless ``--header``/``--no-header``
says, a row of names is a header, a row of numbers is data, and a row of both is neither -- a
headerless file whose first row has a missing value (``1,NA,3``) is an error naming the line and
the cell, not a header of names ``'1'``, ``'NA'``, ``'3'`` over the other rows."""
from __future__ import annotations

import numpy as np
import pytest

from savigp.io.csv_data import DataError, read_csv

ROWS = "".join(f"{i},{0.5 * i},{i % 3}\n" for i in range(2, 50))


@pytest.mark.parametrize("first, line, column, cell", [
    ("1,NA,3\n", 1, 1, "'NA'"),
    ("3.821770,1,NA\n", 1, 2, "'NA'"),
    ("x,2,3\n", 1, 0, "'x'"),
    ("1,,3\n", 1, 1, "empty cell"),
    ('"1","n/a",3\n', 1, 1, "'n/a'"),  # quotes: the careful reader, read whole
    ("\n\n1,?,3\n", 3, 1, "'?'"),  # blank lines first: the row's own line
])
def test_a_first_row_with_numbers_is_data(tmp_path, first, line, column, cell):
    path = tmp_path / "d.csv"
    path.write_text(first + ROWS)
    with pytest.raises(DataError) as err:
        read_csv(str(path))
    message = str(err.value)
    assert f"line {line}, column index {column}: {cell}" in message and "--header" in message, message


def test_names_are_a_header_numbers_are_data_and_the_options_decide(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("x,y,label\n" + ROWS)
    table = read_csv(str(path))
    assert table.header == ["x", "y", "label"] and table.num_rows == 48
    path.write_text("1,0.5,1\n" + ROWS)
    table = read_csv(str(path))
    assert table.header is None and table.num_rows == 49 and np.array_equal(table.values[0], [1, 0.5, 1])
    path.write_text("x,2,3\n" + ROWS)
    assert read_csv(str(path), header=True).header == ["x", "2", "3"]
    with pytest.raises(DataError, match="line 1, column index 0"):
        read_csv(str(path), header=False)
