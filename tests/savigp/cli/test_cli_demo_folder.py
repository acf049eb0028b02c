"""``savigp demo --dir D`` never replaces a file of the user's (issue 54): it writes its six files
(``savigp.cli.demo.FILES``, and beside its models train's checkpoint and lock:
``savigp.cli.demo.WRITTEN``) only into a folder that holds none of them, else it refuses (exit 2,
one line naming the files there) before it writes anything."""
from __future__ import annotations

import os

import pytest

from savigp.cli import main
from savigp.cli.demo import WRITTEN


def _one_line(capsys):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "internal error" not in err, err
    return err


@pytest.mark.parametrize("name", WRITTEN)  # regression.pt.ckpt and .lock too: train writes, then removes them
def test_demo_refuses_a_folder_holding_one_of_its_files(tmp_path, capsys, name):
    (tmp_path / name).write_text("the user's own file\n")
    (tmp_path / "notes.txt").write_text("kept\n")
    assert main(["demo", "--dir", str(tmp_path), "--quiet"]) == 2
    err = _one_line(capsys)
    assert name in err and "--dir" in err and "overwrite" in err, err
    assert (tmp_path / name).read_text() == "the user's own file\n"
    assert sorted(os.listdir(tmp_path)) == sorted([name, "notes.txt"])  # nothing written


def test_demo_refuses_links_and_a_file_for_a_folder(tmp_path, capsys):
    """A link named as a demo file (dangling too: the write would create its target) is refused, and
    so is a --dir that is a file."""
    os.symlink(tmp_path / "elsewhere.pt", tmp_path / "regression.pt")
    (tmp_path / "classification_test.csv").write_text("1,2,3\n")
    assert main(["demo", "--dir", str(tmp_path), "--quiet"]) == 2
    err = _one_line(capsys)
    assert "regression.pt" in err and "classification_test.csv" in err, err
    assert not os.path.lexists(tmp_path / "elsewhere.pt")
    plain = tmp_path / "plain"
    plain.write_text("x\n")
    assert main(["demo", "--dir", str(plain), "--quiet"]) == 2
    assert "not a folder" in _one_line(capsys)
    assert plain.read_text() == "x\n"
