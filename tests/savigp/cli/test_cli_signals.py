"""``savigp train`` under real signals sent to its process (savigp/cli/checkpoint.py, savigp/cli/__init__.py):
a SIGTERM, what a cluster scheduler sends before it kills, stops the run after its step with a
checkpoint as Ctrl-C does (exit status 130), and a second signal that arrives while that
checkpoint is written neither prints a traceback nor cuts the file: it is written whole and
resumes."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np

from savigp.io.csv_data import write_csv
from savigp.model_files import load_model

from conftest import ROOT

#: ``savigp train`` whose model writes first create a numbered file in ``$FLAGS`` and then wait
#: ``$SLOW`` seconds (so that a test can send a signal while one is being written)
SLOW_WRITES = """\
import os, sys, time
from savigp.model_files import saved_model
original, count = saved_model.SavedModel.save, [0]
def save(self, *args, **kwargs):
    count[0] += 1
    open(os.path.join(os.environ["FLAGS"], str(count[0])), "w").close()
    time.sleep(float(os.environ["SLOW"]))
    return original(self, *args, **kwargs)
saved_model.SavedModel.save = save
from savigp.cli import main
sys.exit(main())
"""


def _wait(proc, condition, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"the run ended (status {proc.returncode}) before it was due to"
        assert time.monotonic() < end, "timed out"
        time.sleep(0.005)


def test_sigterm_checkpoints_and_a_second_signal_while_writing_cuts_nothing(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (40, 1))
    write_csv(str(tmp_path / "d.csv"), ["x", "y"], np.column_stack([X, np.sin(2 * X[:, 0])]))
    flags = tmp_path / "flags"
    flags.mkdir()
    out = tmp_path / "m.pt"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "OMP_NUM_THREADS": "1", "FLAGS": str(flags), "SLOW": "0.5"}
    proc = subprocess.Popen([sys.executable, "-c", SLOW_WRITES, "train", str(tmp_path / "d.csv"), "--targets", "y",
                             "--out", str(out), "--num-inducing", "4", "--samples", "3", "--threads", "1",
                             "--batch-size", "10", "--iterations", "1000000"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)
    reader.start()
    try:
        _wait(proc, lambda: any(line.startswith("estimator:") for line in lines))  # (printed once fit's handlers are set)
        proc.send_signal(signal.SIGTERM)
        _wait(proc, lambda: (flags / "1").exists())  # the checkpoint the SIGTERM asked for is being written
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(timeout=10)
    err = "".join(lines)
    assert code == 130 and "Traceback" not in err and "internal error" not in err, err
    assert "savigp: SIGTERM received; saving a checkpoint after this step" in err, err
    assert "interrupted while writing a file; stopping once it is written" in err, err
    stopped = [line for line in lines if line.startswith("savigp train: interrupted at step")]
    assert len(stopped) == 1 and f"checkpoint written to {out}.ckpt" in stopped[0], err
    step = int(stopped[0].split()[5])
    assert sorted(p.name for p in flags.iterdir()) == ["1"]  # one write: the signal held, not a second write
    saved, state = load_model(str(out) + ".ckpt")  # whole: it loads (its content's SHA-256 checked)
    assert saved.config["step"] == step >= 1 and state is not None and not out.exists()
