"""savigp/cli/checkpoint.py: the Checkpointer's writes, driven by savigp.training.fit as train does."""
import os

import numpy as np
import pytest
import torch

from savigp.cli.checkpoint import Checkpointer
from savigp.cli.errors import UserCodeExit
from savigp.model_files import SavedModel, build_model, load_model
from savigp.training import fit


def _checkpointer(tmp_path, total=7, every=3, rank=0):
    import likelihoods

    X = np.linspace(-1, 1, 12)[:, None]
    model = build_model(X, np.sin(3 * X), likelihoods.Gaussian(), {"num_inducing": 3})
    config = {"likelihood": {"name": "gaussian", "class": "Gaussian", "kwargs": {}}, "example_target": [0.0],
              "step": 0, "elbo": None}
    state = {}
    ckp = Checkpointer(SavedModel(model, config), config, str(tmp_path / "m.pt.ckpt"), total, every, rank, state)
    return model, ckp


def test_periodic_checkpoints_and_the_final_model(tmp_path):
    model, ckp = _checkpointer(tmp_path)
    steps = []

    def callback(step, terms):
        stop = ckp.callback(step, terms)
        if os.path.exists(ckp.path):
            steps.append(load_model(ckp.path)[0].config["step"])
        return stop

    fit(model, iterations=7, callback=callback, state=ckp.state, log_every=1, progress=False, seed=0)
    assert sorted(set(steps)) == [3, 6]  # every 3 steps, never at the last one
    saved, tstate = load_model(ckp.path)
    assert saved.config["complete"] is False and tstate["pos"] == ckp.state["pos"]
    ckp.finish(str(tmp_path / "m.pt"), 7, ckp.elbo)
    assert not os.path.exists(ckp.path)
    saved, _ = load_model(str(tmp_path / "m.pt"))
    assert (saved.config["step"], saved.config["complete"]) == (7, True)
    assert saved.config["elbo"] == pytest.approx(ckp.elbo)


def test_an_interrupt_stops_after_the_step_with_a_checkpoint(tmp_path):
    model, ckp = _checkpointer(tmp_path, every=None)
    with ckp.signals() as handled:
        assert handled  # the main thread
        ckp._on_signal(None, None)  # a first Ctrl-C: a flag, not an exception
        fit(model, iterations=7, callback=ckp.callback, state=ckp.state, log_every=1, progress=False, seed=0)
        with pytest.raises(KeyboardInterrupt):  # a second one stops at once
            ckp._on_signal(None, None)
    assert ckp.state["step"] == 1 and ckp.written == 1
    assert load_model(ckp.path)[0].config["step"] == 1


def test_user_code_exit_keeps_the_last_finished_step(tmp_path):
    model, ckp = _checkpointer(tmp_path, every=None)
    fit(model, iterations=2, callback=ckp.callback, state=ckp.state, log_every=1, progress=False, seed=0)
    err = ckp.user_code_exit(SystemExit(4), "lik.py:log_lik")
    assert isinstance(err, UserCodeExit)
    assert str(err) == (f"the likelihood lik.py:log_lik called sys.exit(4) during step 3 of 7; no model written; "
                        f"checkpoint {ckp.path} at step 2 (continue with --resume once it is fixed)")
    assert load_model(ckp.path)[0].config["step"] == 2


def test_only_rank_0_writes(tmp_path):
    model, ckp = _checkpointer(tmp_path, every=1, rank=1)
    fit(model, iterations=3, callback=ckp.callback, state=ckp.state, log_every=1, progress=False, seed=0)
    ckp.finish(str(tmp_path / "m.pt"), 3, ckp.elbo)
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------------- an edited checkpoint at --resume
@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """``(folder, command, checkpoint bytes)``: a run of 6 steps interrupted after step 3 (its
    checkpoint at step 3, in fit's one phase: too short to anneal)."""
    from savigp.cli import TEST_SIGINT_ENV, main
    from savigp.io.csv_data import write_csv

    t = tmp_path_factory.mktemp("edited")
    X = np.linspace(-1, 1, 20)[:, None]
    write_csv(str(t / "d.csv"), ["x", "y"], np.column_stack([X, np.sin(3 * X)]))
    cmd = ["train", str(t / "d.csv"), "--targets", "y", "--out", str(t / "m.pt"), "--num-inducing", "4",
           "--samples", "3", "--threads", "1", "--quiet", "--iterations", "6", "--batch-size", "5"]
    os.environ[TEST_SIGINT_ENV] = "3"
    try:
        assert main(cmd) == 130
    finally:
        del os.environ[TEST_SIGINT_ENV]
    return t, cmd, (t / "m.pt.ckpt").read_bytes()


def _perm(ts, value):
    ts["perm"] = value


def _schedule(ts, **changes):
    ts["schedule"].update(changes)


@pytest.mark.parametrize("edit, needle", [
    (lambda ts: ts.update(optimizer={"foo": 1}), "training_state.optimizer must hold 'state' (a dict) and 'param_groups'"),
    (lambda ts: ts["optimizer"].update(param_groups=[]), "training_state.optimizer must hold 'state' (a dict)"),
    (lambda ts: ts["optimizer"]["param_groups"][0].update(lr="x"), "training_state.optimizer.param_groups[0] must hold"),
    (lambda ts: ts["optimizer"]["param_groups"][0].update(params=[-1]), "training_state.optimizer.param_groups[0] must"),
    (lambda ts: _perm(ts, ts["perm"][:-1]), "training_state.perm orders 19 rows, the data has 20"),
    (lambda ts: _perm(ts, torch.zeros(20, dtype=torch.int64)), "training_state.perm is not a permutation of the row numbers 0 to 19"),
    (lambda ts: _perm(ts, ts["perm"] + 1), "training_state.perm is not a permutation"),
    (lambda ts: _perm(ts, ts["perm"].to(torch.int32)), "training_state.perm must be a 1-D LongTensor"),
    (lambda ts: _schedule(ts, phases=[]), "training_state.schedule must hold a non-empty list of phases"),
    (lambda ts: _schedule(ts, finished=99), "training_state.schedule.finished must be an integer between 0 and 1 (the number of phases), got 99"),
    (lambda ts: _schedule(ts, finished=1), "training_state.schedule.finished is 1: the run would stand at the end of its 6 steps, but the checkpoint is at step 3"),
    (lambda ts: ts["schedule"]["phases"][0].update(steps=2), "training_state.schedule.finished is 0: the run would stand at phase 0 (steps 0 to 2)"),
    (lambda ts: _schedule(ts, segment=-1), "training_state.schedule.segment must be an integer between 0 and 1"),
    (lambda ts: ts["schedule"]["phases"][0].update(kind="warp"), "training_state.schedule.phases[0] must be {'kind': one of"),
    (lambda ts: ts["schedule"]["phases"][0].update(steps=2.5), "training_state.schedule.phases[0] must be {'kind'"),
    (lambda ts: ts["schedule"]["phases"][0].update(kind="anneal"), "training_state.schedule.phases hold no 'main' phase"),
])
def test_an_edited_checkpoint_is_refused_in_one_line_naming_the_field(interrupted, tmp_path, capsys, edit, needle):
    """A checkpoint's mini-batch order and schedule are checked when --resume reads them (before: a
    perm of the wrong length or not a permutation, or an empty schedule, failed inside fit as internal
    errors, and finished=99 skipped every phase and reported the run interrupted)."""
    from savigp.cli import main
    from savigp.model_files.file_format import content_digest

    folder, cmd, raw = interrupted
    out = tmp_path / "m.pt"
    ckpt = tmp_path / "m.pt.ckpt"
    ckpt.write_bytes(raw)
    payload = torch.load(str(ckpt), weights_only=True)
    edit(payload["training_state"])
    payload["content_sha256"] = content_digest(payload)
    torch.save(payload, str(ckpt))
    capsys.readouterr()
    code = main([*cmd[:4], "--out", str(out), *cmd[6:], "--resume"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.splitlines() == [err] and needle in err and "internal error" not in err, err
    assert not out.exists()


def test_the_unedited_checkpoint_resumes(interrupted, tmp_path):
    from savigp.cli import main

    folder, cmd, raw = interrupted
    (tmp_path / "m.pt.ckpt").write_bytes(raw)
    assert main([*cmd[:4], "--out", str(tmp_path / "m.pt"), *cmd[6:], "--resume"]) == 0
    assert (tmp_path / "m.pt").exists() and not (tmp_path / "m.pt.ckpt").exists()
