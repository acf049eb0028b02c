"""fit's schedule (savigp/training/schedule.py): a run stopped anywhere -- inside a mixture's
exploring starts, at the boundary between two phases, inside the reflection move, fit's own phase or
the annealing -- and resumed from its ``state`` takes the steps of the uninterrupted run (bit for
bit); the progress and the callback count every step; a run continued to another length keeps the
phases it has taken."""
from __future__ import annotations

import copy

import pytest
import torch

import savigp
from likelihoods import Gaussian
from savigp.training import schedule as sched
from savigp.training import starts

pytestmark = pytest.mark.filterwarnings("ignore::savigp.training.convergence.ConvergenceWarning")  # (short fits)

TOTAL = 200  # a mixture's phases (start_fraction 0.4): 4 starts of 20 steps, 20 before the move, 2 branches of 30,
#              20 of fit's own, 20 annealed


def _model(K=2):
    g = torch.Generator().manual_seed(0)
    X = torch.rand(30, 1, generator=g, dtype=torch.float64) * 6 - 3
    Y = torch.sin(2 * X) + 0.2 * torch.randn(30, 1, generator=g, dtype=torch.float64)
    return savigp.SAVIGP(X, Y, Gaussian(0.1), num_inducing=6, num_components=K, seed=1)


def _fit(model, iterations, progress=False, **kw):
    return savigp.fit(model, iterations=iterations, batch_size=10, lr=0.05, num_samples=4, estimator="reparam",
                      seed=3, progress=progress, start_fraction=0.4, **kw)


def _params(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def test_the_phases_of_a_mixture_add_up_to_the_iterations():
    phases = sched.phases(starts.plan(TOTAL, 4, 0.4, True, True), TOTAL, starts=4, seed=3)
    kinds = [(p["kind"], p["index"], p["steps"]) for p in phases]
    assert kinds == [("start", 0, 20), ("start", 1, 20), ("start", 2, 20), ("start", 3, 20), ("before", 0, 20),
                     ("branch", 0, 30), ("branch", 1, 30), ("main", 0, 20), ("anneal", 0, 20)], kinds
    assert sum(p["steps"] for p in phases) == TOTAL


@pytest.fixture(scope="module")
def uninterrupted():
    model = _model()
    seen = []
    history = _fit(model, TOTAL, callback=lambda step, terms: seen.append(step))
    return _params(model), history, seen


# stops: after the last step of start 0 (a phase's end not yet acted on); inside start 1; inside
# branch 1 (the reflected copy); inside the annealing (K = 1 below: inside fit's own phase)
@pytest.mark.parametrize("stop", [20, 30, 145, 190])
def test_a_run_stopped_anywhere_resumes_to_the_uninterrupted_one(uninterrupted, stop):
    ref, ref_history, _ = uninterrupted
    model, state = _model(), {}
    first = _fit(model, TOTAL, state=state, callback=lambda step, terms: step + 1 == stop)
    assert state["step"] == stop and first.stopped and len(first.elbo) <= stop
    saved = copy.deepcopy({k: v for k, v in state.items() if k not in ("optimizer", "generator")})
    resumed = {**saved, "optimizer_state": state["optimizer"].state_dict(),  # (as a checkpoint holds it)
               "generator_state": state["generator"].get_state()}
    second = _fit(model, TOTAL - stop, state=resumed)
    assert resumed["step"] == TOTAL
    assert torch.equal(_params(model), ref)  # bit for bit
    assert second.final_elbo == ref_history.final_elbo
    record, ref_record = second.starts, ref_history.starts
    assert (record.elbo, record.kept, record.reflection) == (ref_record.elbo, ref_record.kept, ref_record.reflection)


def test_progress_and_the_callback_count_every_step(uninterrupted, capsys):
    """Before, fit's own phase alone was counted: a run of 200 steps showed 180/180 (20 annealed)."""
    _, history, seen = uninterrupted
    assert seen == list(range(TOTAL))
    assert history.starts.starts == 4 and history.starts.reflection is not None
    model = _model(K=1)
    capsys.readouterr()
    _fit(model, 200, progress=True)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if " step " in ln]
    assert lines[-1].split(" step ")[1].startswith("200/200"), lines


def test_a_single_gaussian_anneals_in_one_process_and_when_resumed():
    """K = 1: fit's own phase and the annealing; resumed inside either, the same run."""
    ref = _model(K=1)
    _fit(ref, 200)
    for stop in (100, 185):
        model, state = _model(K=1), {}
        _fit(model, 200, state=state, callback=lambda step, terms: step + 1 == stop)
        _fit(model, 200 - stop, state=state)  # (the live objects fit left in the state)
        assert torch.equal(_params(model), _params(ref)), stop
    phases = [p["kind"] for p in state["schedule"]["phases"]]
    assert phases == ["main", "anneal"], phases


def _schedule(total, anneal=True):
    return sched.new(sched.phases(starts.plan(total, 4, 0.2, True, anneal), total, starts=4, seed=0), anneal=anneal,
                     starts=4)


def _steps(schedule):
    return [(p["kind"], p["steps"]) for p in schedule["phases"]]


def test_a_run_continued_to_another_length_keeps_the_phases_it_took():
    """400 steps of a mixture: 4 starts of 20, 120 before the move, 2 branches of 60, 40 own, 40 annealed."""
    fresh = lambda n: sched.phases(starts.plan(n, 4, 0.2, True, True), n, starts=4, seed=0)  # noqa: E731
    # before the annealing: fit's own phase takes the difference, the annealing is sized for the new length
    s = _schedule(400)
    s["finished"] = 7  # (in fit's own phase)
    sched.continue_to(s, 330, 600, fresh)
    assert _steps(s)[-2:] == [("main", 220), ("anneal", 60)] and sched.total(s) == 600
    sched.continue_to(s, 330, 340, fresh)  # shorter: fit's own phase keeps its 10 steps taken, the rest anneals
    assert _steps(s)[-2:] == [("main", 10), ("anneal", 10)]
    # annealing: its phase takes the difference
    s = _schedule(400)
    s["finished"] = 8
    sched.continue_to(s, 370, 500, fresh)
    assert _steps(s)[-1] == ("anneal", 140)
    # ended: a new fit of the extra steps from its model
    s = _schedule(400)
    s["finished"], s["explore"] = 9, {"kept": 1}
    sched.continue_to(s, 400, 400 + 400, fresh)
    assert _steps(s)[9:] == _steps(_schedule(400)) and s["segment"] == 9 and s["explore"] == {}
    # not inside the exploration
    s = _schedule(400)
    with pytest.raises(ValueError, match="exploration of starts takes its first 320 steps"):
        sched.continue_to(s, 10, 300, fresh)
    # a run that does not anneal (anneal=False) is one phase longer or shorter
    s = sched.new(sched.phases(None, 100, starts=4, seed=0), anneal=False, starts=4)
    sched.continue_to(s, 50, 300, fresh)
    assert _steps(s) == [("main", 300)]


def test_a_state_from_before_the_schedule_resumes_as_one_phase():
    """A checkpoint written before fit kept its schedule: the steps it holds, then ``iterations`` more
    in one phase, restored from its optimizer and batch order (as fit resumed before)."""
    ref, model, state = _model(K=1), _model(K=1), {}
    _fit(ref, 60, anneal=False)
    _fit(model, 30, state=state, anneal=False)
    legacy = {"optimizer_state": state["optimizer"].state_dict(), "generator_state": state["generator"].get_state(),
              "perm": state["perm"], "pos": state["pos"], "step": state["step"]}
    _fit(model, 30, state=legacy)
    assert torch.equal(_params(model), _params(ref))


def test_checks_fall_on_the_multiples_of_log_every_in_every_phase_and_resumed_piece():
    """The callback (which checkpoints ``savigp train``) runs every ``log_every`` steps counted from
    step 0 -- not from the start of a phase (the annealing of a 200-step run starts at step 180) or
    of a resumed piece -- and after each phase's last step."""
    seen = []
    _fit(_model(K=1), 200, log_every=16, callback=lambda step, terms: seen.append(step + 1))
    assert [s for s in seen if s % 16] == [180, 200], seen  # (the last steps of the two phases)
    assert [s for s in seen if s % 16 == 0] == list(range(16, 200, 16))
    model, state, resumed = _model(K=1), {}, []
    _fit(model, 200, log_every=16, state=state, callback=lambda step, terms: step + 1 == 64)
    _fit(model, 136, log_every=16, state=state, callback=lambda step, terms: resumed.append(step + 1))
    assert resumed == [s for s in seen if s > 64]
