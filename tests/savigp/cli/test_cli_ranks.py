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


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie waiting for a parent that does not reap it has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _children(pid: int) -> list:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(c) for c in fh.read().split()]
    except OSError:
        return []


@pytest.mark.skipif(not (sys.platform.startswith("linux") and os.path.exists("/proc/self/task")),
                    reason="reads the process tree from /proc (Linux)")
def test_a_killed_launcher_takes_its_ranks_and_lock_with_it(tmp_path):
    """``kill -9`` of ``train --nproc 2``'s launcher: its ranks end within seconds (they would
    otherwise train on and replace the model of a later run) and the lock is free, not held by
    orphans. The launcher is the real one; the ranks are killed as soon as both have started."""
    import signal
    import time

    import torch.distributed as dist

    if not (dist.is_available() and dist.is_gloo_available()):
        pytest.skip("torch.distributed with gloo is not available")
    data = _data(tmp_path / "d.csv")
    out = str(tmp_path / "m.pt")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    launcher = subprocess.Popen([sys.executable, "-m", "savigp", "train", data, "--targets", "y", "--out", out,
                                 "--nproc", "2", "--iterations", "1000000", "--num-inducing", "4", "--samples", "3",
                                 "--threads", "1", "--quiet"], cwd=tmp_path, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ranks_ = []
    try:
        deadline = time.monotonic() + 120
        while len(ranks_) < 2 and launcher.poll() is None and time.monotonic() < deadline:
            ranks_ = _children(launcher.pid)
            time.sleep(0.05)
        assert len(ranks_) == 2, "the launcher did not start two ranks"
        time.sleep(0.5)  # (the ranks are past their start-up code or in it: either way they must go)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in ranks_) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(p) for p in ranks_), "ranks still run after their launcher was killed"
        lock = lock_output(out, ["train"])  # free: no orphan holds it
        assert lock is not None
        lock.release()
    finally:
        for p in [launcher.pid, *ranks_]:
            if _alive(p):
                os.kill(p, signal.SIGKILL)


def test_ranks_hold_the_launchers_lock(tmp_path, monkeypatch, capsys):
    """The lock is passed to the ranks: when the launcher's own descriptor is gone (as when it is
    killed) while a rank still runs, no other run takes the lock until that rank has ended."""
    import threading
    import time

    from savigp.cli.errors import CLIError
    from savigp.cli.run_lock import LOCK_ENV

    out = str(tmp_path / "m.pt")
    lock = lock_output(out, ["train"])
    pid_file = tmp_path / "rank.pid"
    rank_code = f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)\n"
    monkeypatch.setattr(ranks, "rank_command", lambda argv: [sys.executable, "-c", rank_code])
    args = argparse.Namespace(argv=["train", "d.csv", "--nproc", "1", "--quiet"], nproc=1, threads=1, quiet=True)
    seen = []

    def another_run():  # while the launcher (this test's main thread) watches its rank
        deadline = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.02)
        try:
            fd, lock.fd = lock.fd, None  # the launcher's descriptor closes, as a killed launcher's does
            os.close(fd)
            try:
                seen.append(lock_output(out, ["train"]))  # must fail: the running rank holds the lock
            except CLIError as err:
                seen.append(err)
        finally:
            if pid_file.exists() and pid_file.read_text():
                os.kill(int(pid_file.read_text()), 9)

    helper = threading.Thread(target=another_run)
    helper.start()
    ranks.launch_ranks(args, out, {LOCK_ENV: out + ".lock"})
    helper.join(60)
    capsys.readouterr()
    assert len(seen) == 1 and isinstance(seen[0], CLIError), seen
    assert "another savigp train is writing it" in str(seen[0])
    again = lock_output(out, ["train"])  # the rank has ended: free
    assert again is not None
    again.release()


def test_no_sitecustomize_from_the_working_folder(tmp_path, monkeypatch):
    """An empty ``PYTHONPATH`` entry names the working folder, where ``site`` imports a
    ``sitecustomize.py`` before any code of the rank runs: the ranks get ``PYTHONPATH`` without it."""
    marker = tmp_path / "ran"
    (tmp_path / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep + str(ROOT) + os.pathsep)
    assert _launch(tmp_path, monkeypatch, "import os\nassert '' not in os.environ['PYTHONPATH'].split(os.pathsep)\n") == 0
    assert not marker.exists()
    # the same start without the cleaning runs it: the test can fail
    subprocess.run([sys.executable, "-c", "pass"], env={**os.environ}, cwd=tmp_path, timeout=60)
    assert marker.exists()


def test_a_hard_linked_lock_file_is_refused(tmp_path):
    """``OUT.lock`` made a hard link to another file: the lock would write its pid line into it."""
    victim = tmp_path / "notes.txt"
    victim.write_text("precious\n")
    os.link(victim, tmp_path / "m.pt.lock")
    from savigp.cli.errors import CLIError

    with pytest.raises(CLIError, match="hard link"):
        lock_output(str(tmp_path / "m.pt"))
    assert victim.read_text() == "precious\n"


def test_bad_input_is_said_once_not_once_per_rank(tmp_path, monkeypatch, capsys):
    """Every rank of ``--nproc``/``torchrun`` reads the same input and meets the same error: the
    machine's first rank (LOCAL_RANK 0) prints its one line, the others only exit with status 2 (before,
    ``--nproc 2`` printed each error twice)."""
    bad = tmp_path / "bad.csv"
    bad.write_text("x1,x2,y\n1,2,3\n4,abc,6\n7,8,9\n")
    cmd = ["train", str(bad), "--targets", "y", "--out", str(tmp_path / "m.pt"), *FAST]
    for rank, says in (("0", True), ("1", False)):
        for key, value in {"RANK": rank, "LOCAL_RANK": rank, "WORLD_SIZE": "2"}.items():
            monkeypatch.setenv(key, value)
        capsys.readouterr()
        assert main(cmd) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == ([f"savigp train: error: {bad}, line 3, column 'x2' (index 1): 'abc' is not a number "
                        "(digits 0-9, an optional sign, decimal point and exponent)"] if says else []), err
