"""The command line with large files and at start-up: running out of memory while a CSV file is
read, or while a model predicts on its rows, names the file (its size, its rows), not --samples; ``predict`` and ``evaluate`` import no
training code and, for a small model and file, take one thread without measuring the idle cores.

(Start-up and reading times are measured by ``experiments/csv_read.py``, never asserted here.)"""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

import savigp.io.csv_data as csv_data
from conftest import ROOT
from savigp.cli import main
from savigp.io.csv_data import write_csv


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("scale")
    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, 40)
    data, model = str(folder / "d.csv"), str(folder / "m.pt")
    write_csv(data, ["x", "y"], np.column_stack([x, np.sin(x)]))
    assert main(["train", data, "--targets", "y", "--out", model, "--num-inducing", "5", "--iterations", "5",
                 "--samples", "10", "--threads", "1", "--quiet"]) == 0
    return data, model


def _err(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "internal error" not in err, err
    return err


def test_out_of_memory_while_reading_names_the_file(trained, tmp_path, monkeypatch, capsys):
    """A 1.26 GiB one-column file under a 6 GB cap ended "out of memory (fewer --samples, or a
    smaller --batch-size ...)"; the advice now depends on where memory ran out."""
    data, model = trained

    def no_memory(*args, **kwargs):
        raise MemoryError()

    with monkeypatch.context() as m:
        m.setattr(csv_data._Rows, "reserve", no_memory)
        for cmd in (["predict", model, data, "--out", "-", "--quiet"], ["evaluate", model, data],
                    ["train", data, "--targets", "y", "--out", str(tmp_path / "m2.pt"), "--quiet"]):
            assert main(cmd) == 1
            err = _err(capsys)
            assert f"error: {data}: out of memory reading this " in err and "about 40 rows" in err, err
            assert "--samples" not in err and "--batch-size" not in err
    with monkeypatch.context() as m:  # predicting or evaluating: the file's rows, all held at once
        m.setattr("savigp.model_files.saved_model.SavedModel.predict", no_memory)
        m.setattr("savigp.model_files.saved_model.SavedModel.evaluate", no_memory)
        for cmd, doing in ((["predict", model, data, "--out", "-", "--quiet"], "predicting"),
                           (["evaluate", model, data], "evaluating the model on")):
            assert main(cmd) == 1
            err = _err(capsys)
            assert f"error: {data}: out of memory {doing} its 40 rows" in err and "split the file" in err, err
    with monkeypatch.context() as m:  # training: the run's own sizes
        m.setattr("savigp.cli.train._fit", no_memory)
        assert main(["train", data, "--targets", "y", "--out", str(tmp_path / "m3.pt"), "--quiet"]) == 1
        assert "out of memory (fewer --samples" in _err(capsys)


def test_predict_and_evaluate_import_no_training_code(trained):
    """``main``'s handlers of training errors import nothing (0.1-0.2 s of the start on a busy machine)."""
    data, model = trained
    code = ("import sys; from savigp.cli import main; "
            f"rc = [main(['predict', {model!r}, {data!r}, '--out', '-', '--quiet']), main(['evaluate', {model!r}, {data!r}])]; "
            "print(rc, sorted(m for m in sys.modules if m.startswith('savigp.training')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip().splitlines()[-1] == "[0, 0] []", out.stdout[-500:] + out.stderr[-2000:]


def test_a_small_prediction_takes_one_thread_without_looking_at_the_idle_cores(trained, monkeypatch, capsys):
    """The rule ``train`` follows, for a step of all the file's rows: 40 rows and M = 5 are small."""
    data, model = trained
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)

    def looked(*args):
        raise AssertionError("measured the idle cores for a small prediction")

    monkeypatch.setattr("savigp.runtime.threads.idle_cores", looked)
    torch.set_num_threads(2)
    assert main(["evaluate", model, data, "--json"]) == 0
    assert torch.get_num_threads() == 1
