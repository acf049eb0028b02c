"""Steps scaled to what a parameter can move (a period over many cycles), and a run to convergence
that never hands back a state far below its best round (issue 57, items 3 and 5)."""
import math
import warnings

import pytest
import torch

import savigp
from likelihoods import Gaussian
from savigp.kernels import Periodic
from savigp.training.convergence import ConvergenceWarning, full_data_elbo
from savigp.training.step_scales import parameter_step_scales, scaled_groups


def _ten_cycles(n=200):
    g = torch.Generator().manual_seed(0)
    X = torch.linspace(0, 10, n, dtype=torch.float64)[:, None]
    Y = torch.sin(2 * math.pi * X) + 0.1 * torch.randn(n, 1, generator=g, dtype=torch.float64)
    return X, Y


def test_a_period_over_many_cycles_steps_at_its_period_over_the_datas_extent():
    X, Y = _ten_cycles()
    m = savigp.SAVIGP(X, Y, Gaussian(0.5), kernel="rbf(0) + periodic(0, period=1.02)", num_inducing=20, seed=0)
    periodic = next(k for k in m.kernel.modules() if isinstance(k, Periodic))
    scales = parameter_step_scales(m)
    assert list(scales) == [periodic.period.raw]
    assert scales[periodic.period.raw] == pytest.approx(1.02 / 10.0)
    groups = scaled_groups(m, list(m.parameters()), 0.01)
    rates = {id(p): g["lr"] for g in groups for p in g["params"] if "lr" in g}
    assert rates == {id(periodic.period.raw): pytest.approx(0.01 * 0.102)}
    assert sum(len(g["params"]) for g in groups) == len(list(m.parameters()))
    # fewer than one cycle, or a fixed period: no scale, the groups as given
    short = savigp.SAVIGP(X[:20], Y[:20], Gaussian(0.5), kernel="periodic(0, period=2)", num_inducing=5, seed=0)
    assert parameter_step_scales(short) == {}
    fixed = savigp.SAVIGP(X, Y, Gaussian(0.5), kernel=Periodic(1, 1, period=1.0, learn=False), num_inducing=5, seed=0)
    params = list(fixed.parameters())
    assert scaled_groups(fixed, params, 0.01) is params


def test_a_run_to_convergence_keeps_its_best_round_and_says_when_it_fell():
    """At 10 times fit's rate, Adam throws this period's optimum away (full-data ELBO 159 at step
    1013, -218 at step 1519): the run stops there, puts the best round's parameters back and warns;
    the returned model's ELBO is the best round's, not the fallen one."""
    X, Y = _ten_cycles()
    m = savigp.SAVIGP(X, Y, Gaussian(0.5), kernel="periodic(0, period=1.02)", num_inducing=30, seed=0)
    state = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        h = savigp.fit(m, lr=0.1, progress=False, seed=0, state=state)
    fell = [w for w in caught if issubclass(w.category, ConvergenceWarning) and "fell" in str(w.message)]
    assert fell and not h.convergence.converged and "fell" in h.convergence.reason
    best = state["schedule"]["converge"]["best"]
    elbo, _ = full_data_elbo(m, estimator="closed-form")
    assert elbo >= best[0] - 1e-6 and elbo > 150.0  # (the fallen state was near -218)
