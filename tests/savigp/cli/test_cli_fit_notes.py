"""``savigp train`` says what :func:`savigp.fit` has to say once, in its own lines: fit's warnings are
silenced by their categories (never by a message's text) and the command prints each note of the
history (:class:`savigp.training.notes.Note`) once after its summary. Before, a mixture's
ComponentWarning reached the user as a Python warning (a file name, a line number, the source line)
while the still-rising note was printed by the command and its warning silenced, and the stage 1 fit
of the two-stage default said nothing of its own verdict."""
from __future__ import annotations

import ast
import warnings
from pathlib import Path

import numpy as np

import savigp
from savigp.cli import main
from savigp.io.csv_data import write_csv


def test_a_run_prints_each_of_fits_notes_once_and_warns_nothing(tmp_path, capsys):
    """A two-stage K = 2 run of 100 steps on |sin 2x|: stage 1 and stage 2 end still rising, and stage
    2's two components sit on one mode; three notes, three lines, no Python warning."""
    rng = np.random.default_rng(3)
    x = np.sort(rng.uniform(0, 5, 80))
    write_csv(str(tmp_path / "abs.csv"), ["x", "y"], np.column_stack([x, np.abs(np.sin(2 * x)) + 0.1 * rng.standard_normal(80)]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["train", str(tmp_path / "abs.csv"), "--targets", "y", "--num-inducing", "8", "--lr", "0.02",
                     "--iterations", "100", "--components", "2", "--posterior", "diag", "--threads", "1", "--quiet",
                     "--out", str(tmp_path / "m.pt")]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert not [w for w in caught if "savigp" in str(w.message)], [str(w.message) for w in caught]
    rising = [line for line in err if "still rising" in line]
    assert len(rising) == 2 and rising[0].startswith("savigp train: stage 1: note: the ELBO was still rising"), err
    assert rising[1].startswith("savigp train: note: the ELBO was still rising") and "--resume" in rising[1], err
    modes = [line for line in err if "sit on one mode" in line]
    assert len(modes) == 1 and modes[0].startswith("savigp train: note: components 0 and 1 sit on one mode"), err


def test_the_command_filters_no_warning_by_its_message():
    """No ``warnings.filterwarnings(..., message=...)`` in savigp/cli (a filter by a message's text
    breaks silently when the message changes): by category only."""
    root = Path(savigp.__file__).parent / "cli"
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("filterwarnings", "simplefilter") \
                    and (any(k.arg == "message" for k in node.keywords) or len(node.args) > 1 and node.func.attr
                         == "filterwarnings"):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert not found, found
