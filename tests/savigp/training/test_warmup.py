"""fit's learning-rate warm-up (savigp/training/warmup.py, issue 57 item 2): a fresh Adam started at
a fitted optimum keeps it. A warm start from an L-BFGS optimum of a periodic model, where a fresh
Adam's first step (every coordinate moved by lr) fell by 167 nats and its first 50 steps averaged
22 standard errors below the start, now averages within 3 standard errors of it; the annealing
phase and a fitted model's first phase take the geometric rates of the rule, a fresh model's
first phase the full rate from its first step, and a run stopped inside a warm-up resumes to the
uninterrupted run bit for bit."""
from __future__ import annotations

import copy
import math

import pytest
import torch

import savigp
from likelihoods import Gaussian
from savigp.training import warmup
from savigp.training.convergence import full_data_elbo

pytestmark = pytest.mark.filterwarnings("ignore::savigp.training.convergence.ConvergenceWarning")  # (short fits)

KERNEL = "periodic(0, period=1) * rbf"


def _periodic_data(n=200):
    g = torch.Generator().manual_seed(3)
    X = torch.rand(n, 1, generator=g, dtype=torch.float64) * 6.0
    y = torch.sin(2 * math.pi * X[:, 0]) + X[:, 0] / 12 + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
    return X, y[:, None]


def _periodic_model():
    X, Y = _periodic_data()
    return savigp.SAVIGP(X, Y, Gaussian(0.1), KERNEL, num_inducing=15, seed=0)


@pytest.fixture(scope="module")
def optimum():
    """A periodic model at its optimum: L-BFGS on fixed draws of the reparameterization estimator."""
    source = _periodic_model()
    savigp.fit(source, optimizer="lbfgs", iterations=30, estimator="reparam", num_samples=20, progress=False)
    return source


def test_a_warm_start_from_an_optimum_keeps_it(optimum):
    """The done criterion of issue 57, item 2: the mean ELBO of a warm start's first 50 steps within 3
    standard errors (the start's full-data Monte Carlo error, as round_gain reads it) of the start.
    Without the warm-up: 120.5 against 140.4 +- 0.9 (-22 s.e.), the first step's estimate -26.5."""
    model = savigp.warm_start(_periodic_model(), optimum)
    start, se = full_data_elbo(model, num_samples=20, estimator="reparam", seed=5)
    assert se > 0
    history = savigp.fit(model, iterations=50, estimator="reparam", num_samples=20, seed=1, progress=False)
    mean = sum(history.elbo) / len(history.elbo)
    assert mean >= start - 3 * se, (mean, start, se, history.elbo[:5])
    assert history.elbo[1] >= start - 3 * se  # (the estimate after the first step: -26.5 without the warm-up)


def test_without_the_warm_up_the_same_start_falls(optimum):
    """The same warm start with ``warmup=False``: the drop the rule removes (so that the test above
    tests it)."""
    model = savigp.warm_start(_periodic_model(), optimum)
    start, se = full_data_elbo(model, num_samples=20, estimator="reparam", seed=5)
    history = savigp.fit(model, iterations=50, estimator="reparam", num_samples=20, seed=1, progress=False,
                         warmup=False)
    assert sum(history.elbo) / len(history.elbo) < start - 10 * se


def _small():
    g = torch.Generator().manual_seed(0)
    X = torch.rand(30, 1, generator=g, dtype=torch.float64) * 6 - 3
    Y = torch.sin(2 * X) + 0.2 * torch.randn(30, 1, generator=g, dtype=torch.float64)
    return savigp.SAVIGP(X, Y, Gaussian(0.1), num_inducing=6, seed=1)


def _rates(model, iterations, **kw):
    """The learning rate each step took (read in the callback from the optimizer fit keeps in ``state``)."""
    state, rates = {}, []
    savigp.fit(model, iterations=iterations, lr=0.05, num_samples=4, estimator="reparam", seed=3, progress=False,
               state=state, callback=lambda step, terms: rates.append(state["optimizer"].param_groups[0]["lr"]), **kw)
    return rates


def test_which_phases_warm_up_and_their_rates():
    model = _small()
    assert not warmup.fitted(model)
    first = _rates(model, 600)  # fit's own phase (540 steps), the annealing phase (60)
    assert first[:540] == [0.05] * 540  # a fresh model: the full rate from its first step, as before
    annealed = [0.05 * 0.1 * warmup.factor(i, 10) for i in range(60)]  # (10 steps)
    assert first[540:] == annealed and annealed[0] == pytest.approx(0.05 * 0.1 / 100) and first[-50:] == [0.05 * 0.1] * 50
    assert warmup.fitted(model)
    again = _rates(model, 150, anneal=False)  # a fitted model: its first phase warms up (100 steps)
    assert again[:100] == [0.05 * warmup.factor(i) for i in range(100)] and again[100:] == [0.05] * 50
    assert again[50] == pytest.approx(0.05 / 10)
    assert all(a < b for a, b in zip(again[:100], again[1:101]))  # geometric, from lr / 100 up to lr
    assert _rates(model, 30, anneal=False, warmup=False) == [0.05] * 30
    assert _rates(_small(), 30, anneal=False, warmup=True)[0] == pytest.approx(0.05 / 100)


def test_a_run_stopped_inside_a_warm_up_resumes_to_the_uninterrupted_one():
    fitted = _small()
    savigp.fit(fitted, iterations=40, lr=0.05, seed=2, progress=False, anneal=False)
    reference = copy.deepcopy(fitted)
    ref = savigp.fit(reference, iterations=80, lr=0.05, estimator="reparam", num_samples=4, seed=3, progress=False)
    model, state = copy.deepcopy(fitted), {}
    savigp.fit(model, iterations=80, lr=0.05, estimator="reparam", num_samples=4, seed=3, progress=False, state=state,
               callback=lambda step, terms: step + 1 == 20)
    assert state["step"] == 20
    saved = copy.deepcopy({k: v for k, v in state.items() if k not in ("optimizer", "generator")})
    resumed = {**saved, "optimizer_state": state["optimizer"].state_dict(),  # (as a checkpoint holds it)
               "generator_state": state["generator"].get_state()}
    model.fitted = False  # (a process that read the checkpoint: the schedule says the phase warms up)
    second = savigp.fit(model, iterations=60, lr=0.05, estimator="reparam", num_samples=4, seed=3, progress=False,
                        state=resumed)
    assert second.elbo == ref.elbo[20:]
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), reference.parameters()))
