"""Shorter length-scales tried at a plateau (issue 57: a fit that converges where the data's
variation was taken for noise is not handed back as the optimum)."""
import math
import warnings

import torch

import savigp
from likelihoods import Gaussian
from savigp.training import shorter_lengthscales as shorter
from savigp.training.convergence import full_data_elbo
from savigp.training.plan import FitPlan
from savigp.training.until_converged import round_score


def _wiggle(w: float, n: int = 100, span: float = 20.0):
    """0.8 sin(w t) + N(0, 0.2^2) noise on t in [0, span] (spread 5.8)."""
    g = torch.Generator().manual_seed(0)
    t = torch.linspace(0, span, n, dtype=torch.float64)[:, None]
    return t, 0.8 * torch.sin(w * t) + 0.2 * torch.randn(n, 1, generator=g, dtype=torch.float64)


def _plateau(t, Y):
    """The RBF at ten times the column's spread and the noise at the targets' variance: everything noise."""
    return savigp.SAVIGP(t, Y, Gaussian(float(Y.var())), kernel="rbf(0, lengthscale=60)", num_inducing=25, seed=0)


def _score(model):
    return round_score(model, FitPlan())


def _fit_copy(trial, steps, state):
    savigp.fit(trial, iterations=steps, progress=False, anneal=False, warmup=False, state=state)


def test_a_long_lengthscale_is_tried_at_a_tenth_and_a_hundredth_of_the_spread_above_the_spacing():
    t, Y = _wiggle(2.0)
    spread, spacing = float(t.std(unbiased=False)), 20.0 / 99
    (index, hyper, values), = shorter.long_lengthscales(_plateau(t, Y))
    assert hyper.name == "lengthscale" and index == 0
    assert values == [spread * 0.1]  # (a hundredth, 0.058, is below twice the spacing, 0.40)
    assert spread * 0.01 < 2 * spacing
    # a length-scale already short, or a fixed one, is not tried
    short = savigp.SAVIGP(t, Y, Gaussian(0.1), kernel="rbf(0, lengthscale=1)", num_inducing=25, seed=0)
    assert shorter.long_lengthscales(short) == []
    fixed = savigp.SAVIGP(t, Y, Gaussian(0.1), kernel=savigp.RBF(1, lengthscale=60.0, learn=False), num_inducing=25,
                          seed=0)
    assert shorter.long_lengthscales(fixed) == []


def test_a_plateau_where_the_variation_is_noise_is_left_for_the_shorter_lengthscale():
    """Closed-form ELBO (Gaussian): the copy at a tenth of the spread gains 147 nats over the
    plateau in 300 steps; the model itself is not changed by the trial."""
    t, Y = _wiggle(2.0)
    m = _plateau(t, Y)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    now = _score(m)
    found = shorter.try_shorter(m, _fit_copy, _score, now)
    assert found is not None and found["gain"] > 100.0, found
    assert found["elbo"] == _score(found["model"])[0]
    assert float(found["model"].kernel.lengthscales().detach().max()) < 0.2 * float(t.std())
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())
    assert found["model"].train_x is m.train_x and found["model"].train_y is m.train_y  # (the data not copied)


def test_a_long_lengthscale_that_is_right_stays():
    """A slow sine (its length-scale is long) fitted to its optimum: no shorter copy gains beyond
    the noise, so nothing moves."""
    t, Y = _wiggle(0.125)
    m = _plateau(t, Y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        savigp.fit(m, iterations=1500, progress=False, seed=0)
    assert shorter.long_lengthscales(m)  # (it is long, so it is tried)
    assert shorter.try_shorter(m, _fit_copy, _score, _score(m)) is None


def test_a_run_to_convergence_moves_off_the_plateau_and_records_it():
    """fit without iterations from the plateau (ELBO -232): before, the run crept for 12807 steps and
    the rule called it converged at -89.0 with the length-scale at 62.7, all noise; now it moves at
    its first slow round (step 675, +54 nats) and converges after 1125 steps at -34.7, the move in
    history.convergence.moves. (The polish reaches the plateau's stationary point, where the signal
    variance is 1.7e-13 and nothing moves: the tried copy revives it.)"""
    t, Y = _wiggle(2.0)
    m = _plateau(t, Y)
    plateau = _score(m)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        h = savigp.fit(m, progress=False, seed=0)
    assert len(h.convergence.moves) == 1 and h.convergence.moves[0]["gain"] > 10.0, h.convergence
    elbo = full_data_elbo(m, estimator="closed-form")[0]
    assert plateau < -200.0 and elbo > -89.0 + 30.0 and math.isfinite(elbo)
    assert float(m.kernel.lengthscales().detach().max()) < 2.0


def test_where_the_first_try_finds_nothing_it_is_tried_once_more_where_the_rule_stops(monkeypatch):
    """The tries (stubbed: none gains) happen at the first slow round and again where the rule would
    stop the run, and no more: elnino's periodic model in years stayed on its plateau in 3 of 10
    seeds after one try. (The rounds' polish is off: with it this run stops at its first slow round, where
    it is tried once.)"""
    from savigp.training import until_converged

    monkeypatch.setattr(until_converged, "_polish_round", lambda *args: (None, None))
    calls = []
    monkeypatch.setattr(shorter, "try_shorter", lambda model, *args: calls.append(model.num_data))
    t, Y = _wiggle(0.125)
    m = _plateau(t, Y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        h = savigp.fit(m, progress=False, seed=0)
    assert h.convergence.converged and h.convergence.moves == []
    assert len(calls) == until_converged.MAX_FAILED_PROBES == 2, (calls, h.convergence)


def test_a_run_the_cap_ends_tries_them_at_its_last_round(monkeypatch):
    """A run that reaches its cap (600 steps: rounds of 500 and 100) tries the shorter length-scales
    at its last round (before: only below the cap, so never here; elnino's seed 2 reached the
    20000-step cap on its plateau)."""
    calls = []
    monkeypatch.setattr(shorter, "try_shorter", lambda model, *args: calls.append(model.num_data))
    t, Y = _wiggle(0.125)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        h = savigp.fit(_plateau(t, Y), progress=False, seed=0, max_iterations=600)
    assert h.convergence.ended == "cap" and len(calls) == 1, (calls, h.convergence)
