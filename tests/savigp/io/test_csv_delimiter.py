"""A file with another separator than ``--delimiter``'s reads as one column; its error then says
so and names the ``--delimiter`` that reads it (issue 54). ``--delimiter`` is one character, and
``\\t`` (as typed) or ``tab`` is a tab."""
from __future__ import annotations

import pytest

from savigp.cli.parser import build_parser
from savigp.io.csv_data import DataError, read_csv


@pytest.mark.parametrize("text, option", [
    ("x;y\n1;2\n3;4\n", "--delimiter ';'"),
    ("1;2\n3;4\n", "--delimiter ';'"),
    ("\nx\ty\n1\t2\n", "--delimiter '\\t'"),
    ("x|y\n1|2\n", "--delimiter '|'"),
])
def test_a_file_with_another_separator_names_the_delimiter(tmp_path, text, option):
    path = tmp_path / "d.csv"
    path.write_text(text)
    with pytest.raises(DataError) as err:
        read_csv(str(path))
    assert "reads as one column" in str(err.value) and option in str(err.value), str(err.value)
    assert len(str(err.value).splitlines()) == 1


def test_no_hint_where_the_delimiter_splits_the_file_and_the_right_delimiter_reads_it(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("x,y\n1,2;3\n")  # two columns: the bad cell is the problem, not the separator
    with pytest.raises(DataError) as err:
        read_csv(str(path))
    assert "--delimiter" not in str(err.value)
    path.write_text("x;y\n1;2\n")
    assert read_csv(str(path), delimiter=";").header == ["x", "y"]
    path.write_text("x,y\n1,2\n")
    with pytest.raises(DataError) as err:
        read_csv(str(path), delimiter=";")
    assert "--delimiter ','" in str(err.value)


@pytest.mark.parametrize("typed, read", [("\\t", "\t"), ("tab", "\t"), ("\t", "\t"), (";", ";")])
def test_delimiter_option_takes_one_character_and_tab_spelled_out(typed, read):
    args = build_parser().parse_args(["train", "d.csv", "--targets", "y", "--out", "m.pt", "--delimiter", typed])
    assert args.delimiter == read


def test_delimiter_option_refuses_several_characters(capsys):
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args(["train", "d.csv", "--targets", "y", "--out", "m.pt", "--delimiter", ";;"])
    assert stop.value.code == 2 and "--delimiter: expected one character" in capsys.readouterr().err
