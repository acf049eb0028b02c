"""``savigp train --components K`` (K > 1, Adam) explores starts as :func:`savigp.fit` does
(savigp/training/starts.py): the command's checkpoint state at step 0 resumes nothing, so the starts
and the reflection move run first and fit's own phase counts its steps on from them; an interrupt
in that phase writes a checkpoint at its absolute step, and ``--resume`` finishes the run. The command says what the search did on stderr."""
from __future__ import annotations

import numpy as np

from savigp.cli import TEST_SIGINT_ENV, main
from savigp.io.csv_data import write_csv
from savigp.model_files import load_model

QUIET = ["--threads", "1", "--quiet"]


def _train(*args) -> int:
    return main(["train", *map(str, args), *QUIET])


def test_a_mixture_explores_counts_its_steps_and_resumes(tmp_path, monkeypatch, capsys):
    gen = np.random.default_rng(3)
    X = np.sort(gen.uniform(-3, 3, size=(30, 1)), axis=0)
    write_csv(str(tmp_path / "d.csv"), ["x", "y"], np.column_stack([X, np.sin(2 * X) + 0.2 * gen.standard_normal((30, 1))]))
    # 200 steps: a reflection move (2 x 30 steps after 100), fit's own phase (steps 160-180) and 20 annealed
    args = [tmp_path / "d.csv", "--targets", "y", "--dense", "--posterior", "full", "--components", "2",
            "--iterations", "200", "--lr", "0.05", "--samples", "5"]
    capsys.readouterr()
    assert main(["train", *map(str, args), "--threads", "1", "--out", str(tmp_path / "full.pt")]) == 0
    err = capsys.readouterr().err
    assert "mixture search (savigp.fit's starts): move (" in err and ") of component" in err, err
    done = load_model(str(tmp_path / "full.pt"))[0]
    assert done.config["step"] == 200 and done.config["complete"]
    monkeypatch.setenv(TEST_SIGINT_ENV, "170")  # (only reachable when fit's phase counts on from the move's steps)
    assert _train(*args, "--out", tmp_path / "cut.pt") == 130
    monkeypatch.delenv(TEST_SIGINT_ENV)
    cut = load_model(str(tmp_path / "cut.pt.ckpt"))[0]
    assert cut.config["step"] == 170 and not cut.config["complete"]
    assert _train(*args, "--out", tmp_path / "cut.pt", "--resume") == 0
    resumed = load_model(str(tmp_path / "cut.pt"))[0]
    assert resumed.config["step"] == 200 and resumed.config["complete"]
