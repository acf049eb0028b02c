"""``savigp train``'s length (issue 57): with neither ``--iterations`` nor ``--epochs`` it trains until
fit's rule says the ELBO has stopped rising (savigp/training/until_converged.py; at most 20000 steps,
``--time-budget`` seconds), records how it ended in the model file and says so in the summary line;
``--iterations N`` alone stays a fixed run of exactly N steps; a default run interrupted and resumed
ends at the uninterrupted run's parameters, bit for bit.

Every run calls ``main()`` in-process (a subprocess pays the torch import each time).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import refused_train as _refused
from savigp.cli import TEST_SIGINT_ENV, main
from savigp.io.csv_data import write_csv
from savigp.model_files import load_model


def _train(*args) -> int:
    return main(["train", *map(str, args), "--threads", "1", "--quiet"])


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """``d.csv``: 80 rows of ``y = sin(2x) + noise`` on ``x`` in [0, 5]."""
    t = tmp_path_factory.mktemp("length")
    rng = np.random.default_rng(3)
    x = np.sort(rng.uniform(0, 5, 80))
    y = np.sin(2 * x) + 0.2 * rng.standard_normal(80)
    write_csv(str(t / "d.csv"), ["x", "y"], np.column_stack([x, y]))
    return t


def _args(t):
    return [t / "d.csv", "--targets", "y", "--num-inducing", "10", "--lr", "0.05", "--standardize-targets"]


def test_the_default_run_trains_to_convergence_and_says_so(data, capsys):
    """No --iterations: the run ends by fit's rule, not at 500 steps; the model file records the
    verdict (``config["training"]["convergence"]``, the steps as the run's length, the run's mode
    among the options ``--resume`` keeps to) and the summary line says after how many steps and by
    which criterion. ``--resume`` of the finished model has nothing to do."""
    out = data / "default.pt"
    capsys.readouterr()
    assert _train(*_args(data), "--out", out) == 0
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    saved = load_model(str(out))[0]
    training = saved.config["training"]
    record = training["convergence"]
    assert record["converged"] and record["steps"] != 500, record
    assert saved.config["step"] == record["steps"] == training["iterations"] and record["rounds"] >= 2
    assert training["options"]["until_converged"] is True and training["time_budget"] is None
    assert summary.startswith(f"trained {record['steps']} step(s)"), summary
    assert f"converged after {record['steps']} steps (the ELBO's trend over the last {record['window']} steps " \
           in summary, summary
    assert "within its noise), final ELBO" in summary, summary
    assert _train(*_args(data), "--out", out, "--resume") == 0
    assert load_model(str(out))[0].config["step"] == record["steps"]


def test_iterations_alone_is_a_fixed_run_of_exactly_that_many_steps(data, capsys):
    """``--iterations N`` without --until-converged: N steps, no verdict of the rule, a fixed run among
    the options (a resume without --iterations is refused, naming the way to resume it)."""
    out = data / "fixed.pt"
    capsys.readouterr()
    assert _train(*_args(data), "--iterations", "37", "--out", out) == 0
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    saved = load_model(str(out))[0]
    training = saved.config["training"]
    assert saved.config["step"] == training["iterations"] == 37 and training.get("convergence") is None
    assert training["options"]["until_converged"] is False
    assert summary.startswith("trained 37 step(s)") and "converged" not in summary, summary
    err = _refused(capsys, *_args(data), "--out", out, "--resume")
    assert "was trained for a fixed number of steps (--iterations or --epochs): resume with --iterations N" in err


def test_an_interrupted_default_run_resumes_to_the_uninterrupted_model(data, monkeypatch, capsys):
    """A default run stopped by Ctrl-C in its second round (step 600) and resumed with the same
    command ends at the uninterrupted run's step and parameters, bit for bit (the rule's ELBO path is
    in the checkpoint); resuming it with --iterations is refused."""
    ref = data / "default.pt"
    if not ref.exists():
        assert _train(*_args(data), "--out", ref) == 0
    cut = data / "cut.pt"
    monkeypatch.setenv(TEST_SIGINT_ENV, "600")
    assert _train(*_args(data), "--out", cut) == 130
    monkeypatch.delenv(TEST_SIGINT_ENV)
    err = _refused(capsys, *_args(data), "--iterations", "900", "--out", cut, "--resume")
    assert "was trained to convergence (no --iterations or --epochs, or --until-converged)" in err, err
    assert _train(*_args(data), "--out", cut, "--resume") == 0
    a, b = load_model(str(ref))[0], load_model(str(cut))[0]
    assert b.config["step"] == a.config["step"] and b.config["training"]["convergence"]["converged"]
    sa, sb = a.model.state_dict(), b.model.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_time_budget_stops_the_run_still_rising_and_is_checked(data, capsys):
    """``--time-budget``: no round starts after it (the model is written, the summary line says the
    budget stopped it still rising, the file records the budget and the verdict); it must be > 0 and
    bounds only a run to convergence."""
    out = data / "budget.pt"
    capsys.readouterr()
    assert _train(*_args(data), "--time-budget", "0.01", "--out", out) == 0
    printed = capsys.readouterr()
    summary = printed.out.strip().splitlines()[-1]
    note = [line for line in printed.err.splitlines() if line.startswith("savigp train: note: ")]
    assert len(note) == 1 and note[0].startswith("savigp train: note: the time budget of 0.01 s ended the run with "
                                                 "the ELBO still rising"), printed.err
    assert "a larger --time-budget" in note[0] and "max_iterations=" not in note[0], note
    training = load_model(str(out))[0].config["training"]
    assert training["time_budget"] == 0.01 and training["convergence"]["converged"] is False
    assert training["convergence"]["rounds"] == 1
    assert "not converged: the time budget of 0.01 s stopped it with the ELBO still rising" in summary, summary
    assert "--time-budget must be > 0 seconds, got 0.0" in _refused(capsys, *_args(data), "--time-budget", "0",
                                                                     "--out", data / "b.pt")
    assert "not with a fixed --iterations" in _refused(capsys, *_args(data), "--time-budget", "5", "--iterations",
                                                       "10", "--out", data / "b.pt")


def test_the_summary_line_names_a_fall_at_the_cap_and_a_rise_at_the_cap():
    """The summary's words on a run the cap ended (savigp/cli/train.py ``_ending``): after a fall the
    best round's model is kept, and that is said, not "still rising" (the verdict's trend there is
    the fall's, negative: elnino's periodic model printed "+-48.4 nats")."""
    from savigp.cli.train import _ending
    from savigp.training.until_converged import Convergence

    fell = Convergence(False, 20000, 11, 4500, -48.4, -22.8, "the cap of 20000 steps ended the run after its full-data "
                       "ELBO fell below its best round's (that round's model is kept): a lower learning rate", True, "cap", 3)
    rising = Convergence(False, 20000, 11, 4500, 12.0, 9.0, "the cap of 20000 steps ended the run with the ELBO still "
                         "rising (+12 nats over the last 4500 steps): give max_iterations= more", True, "cap")
    assert "after a fall below its best round, whose model is kept" in _ending(fell, 585)
    assert "still rising" not in _ending(fell, 585) and "went on from its best round" in _ending(fell, 585)
    assert "the cap of 20000 steps stopped it with the ELBO still rising" in _ending(rising, 585)
