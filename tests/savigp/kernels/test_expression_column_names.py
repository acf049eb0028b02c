"""A ``--kernel`` expression names a column whose name is not a plain word (a number, a leading
digit, a space) in quotes; when such a column is written bare, the error says how to write it
(issue 54): ``rbf("2020")``. A bare number is an index; one that is also another column's name is
refused as ambiguous."""
from __future__ import annotations

import pytest

from savigp.cli import main
from savigp.kernels.expression import parse_kernel


@pytest.mark.parametrize("text, columns, written, fixed", [
    ("rbf(2020)", ["2020", "2021"], 'rbf("2020")', 'rbf("2020")'),
    ("linear(x) + periodic(3.5)", ["3.5", "x"], 'periodic("3.5")', 'linear(x) + periodic("3.5")'),
    ("rbf(2d_x)", ["2d_x", "x"], 'rbf("2d_x")', 'rbf("2d_x")'),
    ("matern52(my col)", ["my col", "x"], 'matern52("my col")', "matern52('my col')"),
    ("rbf(x) * rbf(0)", ["x", "0"], 'rbf("0")', 'rbf(x) * rbf("0")'),  # 0: x's index and the other's name
])
def test_a_bare_column_name_that_is_not_a_word_says_how_to_quote_it(text, columns, written, fixed):
    with pytest.raises(ValueError) as err:
        parse_kernel(text, columns=columns)
    assert f"named in quotes: {written}" in str(err.value), str(err.value)
    assert parse_kernel(fixed, columns=columns)  # as the message says, it reads


def test_indices_still_read_and_plain_errors_have_no_quoting_hint():
    assert parse_kernel("rbf(1)", columns=["2020", "2021"]) == {"kernel": "rbf", "active_dims": [1]}
    assert parse_kernel("rbf(1)", columns=["x", "1"]) == {"kernel": "rbf", "active_dims": [1]}  # the same column
    with pytest.raises(ValueError) as err:
        parse_kernel("rbf(5)", columns=["a", "b"])
    assert "quotes" not in str(err.value)


def test_the_command_line_says_how_to_quote(tmp_path, capsys):
    data = tmp_path / "d.csv"
    data.write_text("2020,2021,y\n" + "".join(f"{i},{i % 3},{i % 2}\n" for i in range(8)))
    code = main(["train", str(data), "--header", "--targets", "y", "--out", str(tmp_path / "m.pt"),
                 "--kernel", "rbf(2020)", "--quiet", "--iterations", "1"])
    err = capsys.readouterr().err
    assert code == 2 and 'rbf("2020")' in err and err.startswith("savigp train: error: --kernel"), err
