"""savigp/cli/checkpoint.py: the Checkpointer's writes, driven by savigp.training.fit as train does."""
import os

import numpy as np
import pytest

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
    with ckp.signals(sigterm=False) as handled:
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
