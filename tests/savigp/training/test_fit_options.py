"""fit's options grouped (:mod:`savigp.training.fitting`): :class:`StepOptions` (how each step is
taken, the annealing phase's at a tenth of the rates) and :class:`PhaseOptions` (the phases around
fit's own), built from a :class:`~savigp.training.plan.FitPlan`, checked when it is made, or from fit's
keyword arguments, which keep working as before, bit for bit."""
import warnings

import numpy as np
import pytest
import torch

import savigp
from likelihoods import Gaussian
from savigp.training import starts as _starts
from savigp.training.fitting import WEIGHT_LR_FACTOR, StepOptions
from savigp.training.plan import FitPlan


def _steps(**kw):
    base = dict(batch_size=10, optimizer="adam", lr=0.05, weight_lr=None, num_samples=5, estimator="reparam",
                groups=None, lbfgs_max_iter=20, log_every=None, cuda_graphs=None)
    return StepOptions(**{**base, **kw})


def test_the_annealing_phase_steps_at_a_tenth_of_both_rates():
    annealed = _steps().annealed()
    assert annealed.lr == 0.05 * _starts.ANNEAL_LR
    assert annealed.weight_lr == WEIGHT_LR_FACTOR * 0.05 * _starts.ANNEAL_LR
    assert _steps(weight_lr=0.2).annealed().weight_lr == 0.2 * _starts.ANNEAL_LR
    assert annealed.num_samples == 5 and annealed.batch_size == 10  # (nothing else changes)


@pytest.mark.parametrize("option, value, match", [
    ("start_fraction", 1, r"start_fraction must be in \(0, 1\), got 1"),
    ("starts", 0, "starts must be >= 1, got 0"),
    ("optimizer", "sgd", "optimizer must be one of .*, got 'sgd'"),
    ("estimator", "exact", "estimator must be one of .*, got 'exact'"),
    ("groups", ["kernel", "kernels"], r"unknown parameter group\(s\) \['kernels'\]"),
    ("iterations", -1, "iterations must be >= 0, got -1"),
    ("epochs", 0, "epochs must be > 0, got 0"),
    ("batch_size", 0, "batch_size must be >= 1, got 0"),
    ("lr", -0.1, r"lr must be > 0, got -0.1"),
    ("num_samples", 0, "num_samples must be >= 1, got 0"),
    ("log_every", 0, "log_every must be >= 1, got 0"),
    ("weight_lr", 0.0, "weight_lr must be > 0, got 0.0"),
    ("max_iterations", 0, "max_iterations must be >= 1, got 0"),
    ("time_budget", float("nan"), "time_budget must be > 0, got nan"),
])
def test_a_fit_plan_refuses_a_bad_value_naming_it(option, value, match):
    """Every option is checked once, when the plan is made (before any model is read)."""
    with pytest.raises(ValueError, match=match):
        FitPlan(**{option: value})


def test_a_fit_plan_fills_in_the_phases_defaults_and_resolves_for_the_model():
    """The derived values, once: the batch (all N for L-BFGS), the steps of ``epochs``, the reads'
    interval (``callback_every`` on the CPU: every step), the starts and the move."""
    model = _model()
    resolved = FitPlan(epochs=2.5, batch_size=6).for_model(model)
    assert (resolved.batch_size, resolved.iterations, resolved.log_every) == (6, 9, 1)  # ceil(2.5 * 20 / 6)
    assert (resolved.starts, resolved.reflect) == (_starts.DEFAULT_STARTS, True)
    assert resolved.estimator == model.resolved_estimator("auto")
    assert FitPlan(optimizer="lbfgs", batch_size=6, iterations=3).for_model(model).batch_size == 20
    assert FitPlan(max_iterations=70).for_model(model).iterations is None and FitPlan().steps_for(20) == 20000
    assert FitPlan(callback_every=50).log_every_on("cpu") == 1 and FitPlan(callback_every=50).log_every_on("cuda") == 50
    assert FitPlan(iterations=np.int64(5), lr=np.float32(0.1)).steps_for(20) == 5  # (numpy's numbers are numbers)
    with pytest.raises(ValueError, match="batch_size must be between 1 and N=20, got 21"):
        FitPlan(batch_size=21).for_model(model)


def _model(K=1):
    g = torch.Generator().manual_seed(0)
    X = torch.rand(20, 1, generator=g)
    return savigp.SAVIGP(X, torch.sin(3 * X), Gaussian(0.1), num_inducing=3, num_components=K, seed=1)


@pytest.mark.parametrize("options", [
    dict(iterations=60, batch_size=8, lr=0.05, num_samples=4, estimator="reparam", seed=3),  # (K = 2: starts, move, anneal)
    dict(max_iterations=40, lr=0.05, num_samples=4, estimator="reparam", seed=1),  # (to convergence: rounds, polish)
])
def test_the_keyword_front_and_a_plan_run_the_same_fit_bit_for_bit(options):
    runs = []
    for how in ("keywords", "plan"):
        model = _model(K=2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            h = (savigp.fit(model, progress=False, **options) if how == "keywords"
                 else savigp.fit(model, FitPlan(progress=False, **options)))
        runs.append((h, [p.detach().clone() for p in model.parameters()]))
    (a, pa), (b, pb) = runs
    assert a.elbo == b.elbo and a.steps == b.steps > 0 and a.final_elbo == b.final_elbo
    assert [str(n) for n in a.notes] == [str(n) for n in b.notes]
    assert all(torch.equal(x, y) for x, y in zip(pa, pb))


def test_fits_keyword_arguments_still_refuse_bad_values():
    g = torch.Generator().manual_seed(0)
    X = torch.rand(20, 1, generator=g)
    model = savigp.SAVIGP(X, torch.sin(X), Gaussian(0.1), num_inducing=3)
    for kwargs, match in (({"start_fraction": 0.0}, "start_fraction"), ({"starts": 0}, "starts must be"),
                          ({"log_every": 0}, "log_every must be"), ({"optimizer": "sgd"}, "optimizer must be")):
        with pytest.raises(ValueError, match=match):
            savigp.fit(model, iterations=1, progress=False, **kwargs)
