"""``train --nproc`` and one run per ``--out``: ranks started without the working folder on
``sys.path``, the rank that failed named with its status, a model completely written before a
failure or an interrupt reported as complete (exit 0), and a second run on one ``--out`` refused.
The launcher is driven with stand-in ranks (``python -c``, no torch) to stay cheap; the real
two-rank training is tested in test_cli_warm_start.py and tests/savigp/training/test_distributed.py."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from savigp.cli import main, ranks
from savigp.cli.run_lock import lock_output
from savigp.io.csv_data import write_csv

from conftest import ROOT  # noqa: E402

FAST = ["--num-inducing", "4", "--samples", "3", "--threads", "1", "--quiet", "--iterations", "1"]


def _data(path):
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (20, 2))
    write_csv(str(path), ["x1", "x2", "y"], np.column_stack([X, np.sin(X[:, 0])]))
    return str(path)


def test_ranks_never_import_from_the_working_folder(tmp_path):
    """What each rank runs, in a folder holding ``savigp.py``, ``likelihoods.py`` and ``torch.py``
    that would say so if imported (``python -m savigp`` there imports them)."""
    for name in ("savigp", "likelihoods", "torch"):
        (tmp_path / f"{name}.py").write_text(f"import pathlib\npathlib.Path({str(tmp_path / name)!r} + '.ran')"
                                             f".write_text('x')\nraise SystemExit('imported {name}.py')\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = subprocess.run(ranks.rank_command(["--version"]), cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("savigp"), r.stderr
    assert not list(tmp_path.glob("*.ran"))


def _launch(tmp_path, monkeypatch, rank_code: str, nproc=2, out=None):
    """``launch_ranks`` with stand-in ranks running ``rank_code`` (``RANK`` in the environment)."""
    monkeypatch.setattr(ranks, "rank_command", lambda argv: [sys.executable, "-c", rank_code])
    args = argparse.Namespace(argv=["train", "d.csv", "--nproc", str(nproc), "--quiet"], nproc=nproc, threads=1,
                              quiet=True)  # (without --quiet a first line says that the ranks start)
    return ranks.launch_ranks(args, out)


def test_the_rank_that_died_is_named(tmp_path, monkeypatch, capsys):
    # rank 1 is killed; rank 0 notices and stops with status 1 (as on a broken process group)
    code = ("import os, signal, time\n"
            "if os.environ['RANK'] == '1':\n    os.kill(os.getpid(), signal.SIGKILL)\n"
            "time.sleep(0.5)\nraise SystemExit(1)\n")
    assert _launch(tmp_path, monkeypatch, code) == 1
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err] and err.startswith("savigp train: rank 1 of 2 killed by SIGKILL (rank 0: exit status 1)")
    assert "--resume" in err
    # every rank refusing the same input: its status, nothing added
    assert _launch(tmp_path, monkeypatch, "raise SystemExit(2)\n") == 2 and capsys.readouterr().err == ""
    assert _launch(tmp_path, monkeypatch, "pass\n", nproc=3) == 0


def test_a_model_written_before_a_rank_died_is_reported_complete(tmp_path, monkeypatch, capsys):
    out, ready = tmp_path / "m.pt", tmp_path / "ready.pt"
    out.write_bytes(b"an older file")
    torch.save({"config": {"complete": True, "step": 7}}, str(ready))
    code = ("import os, signal, time\n"
            f"if os.environ['RANK'] == '0':\n    os.replace({str(ready)!r}, {str(out)!r})\n    raise SystemExit(0)\n"
            f"while os.path.exists({str(ready)!r}):\n    time.sleep(0.01)\nos.kill(os.getpid(), signal.SIGKILL)\n")
    assert _launch(tmp_path, monkeypatch, code, out=str(out)) == 0
    err = capsys.readouterr().err
    assert f"rank 1 of 2 killed by SIGKILL, after {out} was completely written (7 step(s)): the model is complete" in err
    # an unchanged file is not this run's model: a failure
    assert _launch(tmp_path, monkeypatch, code.replace("os.replace", "print"), out=str(out)) == 1
    capsys.readouterr()


def test_an_interrupt_after_the_model_was_written(tmp_path, monkeypatch, capsys):
    import savigp.training.distributed

    data = _data(tmp_path / "d.csv")

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(savigp.training.distributed, "finish", interrupted)
    assert main(["train", data, "--targets", "y", "--out", str(tmp_path / "m.pt"), *FAST]) == 0
    err = capsys.readouterr().err.strip()
    assert err == f"savigp train: interrupted after {tmp_path / 'm.pt'} was completely written (1 step(s)): the model is complete"
    from savigp.model_files import load_model

    assert load_model(str(tmp_path / "m.pt"))[0].config["complete"]
    # interrupted while the model is being written: not complete, an interrupt as ever
    from savigp.cli.checkpoint import Checkpointer

    def write(self, path, step, complete, elbo):
        if complete:
            raise KeyboardInterrupt

    monkeypatch.setattr(Checkpointer, "write", write)
    assert main(["train", data, "--targets", "y", "--out", str(tmp_path / "m2.pt"), *FAST]) == 130
    assert "completely written" not in capsys.readouterr().err and not os.path.exists(tmp_path / "m2.pt")


def test_one_run_per_out(tmp_path, capsys):
    data = _data(tmp_path / "d.csv")
    out = str(tmp_path / "m.pt")
    held = lock_output(out, ["train", "d.csv", "--out", "m.pt"])  # another run holds it
    try:
        assert main(["train", data, "--targets", "y", "--out", out, *FAST]) == 2
        err = capsys.readouterr().err.strip()
        assert err.splitlines() == [err] and "another savigp train is writing it (pid" in err
        assert "savigp train d.csv --out m.pt" in err and not os.path.exists(out)
        # through a link to the folder: the same lock
        os.symlink(tmp_path, tmp_path / "alias")
        assert main(["train", data, "--targets", "y", "--out", str(tmp_path / "alias" / "m.pt"), *FAST]) == 2
        assert "another savigp train" in capsys.readouterr().err
    finally:
        held.release()
    assert main(["train", data, "--targets", "y", "--out", out, *FAST]) == 0
    assert os.path.exists(out) and not os.path.exists(out + ".lock")


def test_backend_errors_lose_their_source_paths():
    from savigp.training.distributed import _backend_message

    gloo = RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
                        "[127.0.0.1]:29500. This is typically caused by a remote worker crashing. GLHF!"
                        "\nException raised from recvBytes at /pytorch/torch/csrc/x.cpp:1")
    assert _backend_message(gloo) == "Connection closed by peer [127.0.0.1]:29500"
    assert _backend_message(RuntimeError("reset (/pytorch/torch/csrc/distributed/c10d/ProcessGroupGloo.cpp:12)")) == "reset"
    assert _backend_message(RuntimeError("")) == "RuntimeError"


def test_the_lock_file_never_replaces_an_input(tmp_path, capsys):
    data = _data(tmp_path / "d.csv")
    before = open(data, "rb").read()
    os.symlink(data, tmp_path / "m.pt.lock")  # the lock's name, a link to the data
    assert main(["train", data, "--targets", "y", "--out", str(tmp_path / "m.pt"), *FAST]) == 2
    assert "--out (its lock file)" in capsys.readouterr().err and open(data, "rb").read() == before
    with pytest.raises(Exception, match="lock file"):  # and the lock itself never opens through a link
        lock_output(str(tmp_path / "m.pt"))
    assert open(data, "rb").read() == before


def test_ranks_that_hang_after_another_failed_are_stopped(tmp_path):
    """A rank that fails while the others wait in a collective: they get SIGTERM, then SIGKILL."""
    import time

    ready = tmp_path / "ready"
    hang = f"import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nopen({str(ready)!r}, 'w')\ntime.sleep(60)\n"
    deaf = subprocess.Popen([sys.executable, "-c", hang])
    while not ready.exists() and deaf.poll() is None:
        time.sleep(0.01)
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]),
             subprocess.Popen([sys.executable, "-c", "raise SystemExit(2)"]), deaf]
    codes, first = ranks.supervise(procs, grace_s=0.3)
    assert first == 1 and codes == [-15, 2, -9]
    assert ranks.describe_status(-9) == "killed by SIGKILL" and ranks.describe_status(3) == "exit status 3"
