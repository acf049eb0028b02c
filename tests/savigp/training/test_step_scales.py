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
from savigp.training import until_converged
from savigp.training.step_scales import attach_element_scales, parameter_step_scales, scaled_groups


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
    short = savigp.SAVIGP(X[:20], Y[:20], Gaussian(0.5), kernel="periodic(0, period=2)", num_inducing=5, seed=0,
                          learn_inducing=False)
    assert parameter_step_scales(short) == {}
    fixed = savigp.SAVIGP(X, Y, Gaussian(0.5), kernel=Periodic(1, 1, period=1.0, learn=False), num_inducing=5, seed=0)
    params = list(fixed.parameters())
    assert scaled_groups(fixed, params, 0.01) is params


def _ten_cycles_at_ten_times_the_rate(monkeypatch, cap: int) -> tuple:
    """``(model, history, state, warnings)`` of the periodic model on ten cycles fitted to convergence at
    lr = 0.1 with at most ``cap`` steps, the rounds' polish off (it would keep each round at the optimum)."""
    monkeypatch.setattr(until_converged, "_polish_round", lambda *args: (None, None))
    X, Y = _ten_cycles()
    m = savigp.SAVIGP(X, Y, Gaussian(0.5), kernel="periodic(0, period=1.02)", num_inducing=30, seed=0)
    state: dict = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        h = savigp.fit(m, lr=0.1, progress=False, seed=0, state=state, max_iterations=cap)
    return m, h, state, caught


@pytest.mark.parametrize("backoffs", [0, until_converged.MAX_BACKOFFS])
def test_a_run_to_convergence_keeps_its_best_round_and_goes_on_from_it_at_half_the_rate(monkeypatch, backoffs):
    """At 10 times fit's rate, Adam throws this period's optimum away (full-data ELBO 159 at step
    1013, -218 at step 1519). The run puts the best round's parameters back and goes on from them at
    half the rate: by the cap of 1600 steps it stands at 159.8, one fall and no warning (stopped at
    the fall, as before MAX_BACKOFFS, it kept 159.0); with no back-off left it stops at the fall and
    warns. Either way the returned model's ELBO is the best round's, not the fallen one. (The
    rounds' polish is off here: with it each round ends at the optimum, and the run converges after 1125 steps at
    161.23 without a fall; the back-off is for the runs it does not apply to: score functions, data
    that do not fit in memory.)"""
    monkeypatch.setattr(until_converged, "MAX_BACKOFFS", backoffs)
    m, h, state, caught = _ten_cycles_at_ten_times_the_rate(monkeypatch, 1600)
    fell = [w for w in caught if issubclass(w.category, ConvergenceWarning) and "nats below its best" in str(w.message)]
    best = state["schedule"]["converge"]["best"]
    elbo, _ = full_data_elbo(m, estimator="closed-form")
    assert elbo >= best[0] - 1e-6 and elbo > 150.0  # (the fallen state was near -218)
    if backoffs == 0:
        assert fell and not h.convergence.converged and h.convergence.ended == "fall"
        assert h.convergence.backoffs == 1
    else:
        assert not fell and h.convergence.ended != "fall" and h.convergence.backoffs == 1
        assert h.convergence.steps == 1600 and elbo > best_of_the_stopped_run + 0.5


def test_a_cap_that_ends_a_run_at_a_fall_says_so_not_still_rising(monkeypatch):
    """The same run capped at 1300 steps: its last round fell (put back to the best round). Before, the
    verdict read "the cap ... ended the run with the ELBO still rising (+-368 nats ...)", the trend of
    the fall (elnino's periodic model at the 20000-step cap said "+-48.4 nats over the last 4500
    steps"); now it names the fall, and the model is the best round's."""
    m, h, state, caught = _ten_cycles_at_ten_times_the_rate(monkeypatch, 1300)
    said = [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)]
    assert h.convergence.ended == "cap" and "fell below its best round" in h.convergence.reason, h.convergence
    assert "still rising" not in h.convergence.reason and said and "fell below its best round" in said[-1], said
    assert full_data_elbo(m, estimator="closed-form")[0] >= state["schedule"]["converge"]["best"][0] - 1e-6

#: the ELBO the run stopped at the fall keeps (the MAX_BACKOFFS = 0 case above, measured)
best_of_the_stopped_run = 159.0


def _years(n=150):
    """A smooth series on calendar years (spread 14.4 years) and the same on standardized inputs."""
    g = torch.Generator().manual_seed(1)
    t = torch.linspace(1950.0, 2000.0, n, dtype=torch.float64)[:, None]
    Y = torch.sin(t / 4.0) + 0.2 * torch.randn(n, 1, generator=g, dtype=torch.float64)
    return t, (t - t.mean()) / t.std(unbiased=False), Y


def test_parameters_in_the_inputs_units_step_in_units_of_the_columns_spread():
    t, z, Y = _years()
    spread = float(t.std(unbiased=False))
    raw = savigp.SAVIGP(t, Y, Gaussian(0.5), kernel="rbf(0) + linear(0)", num_inducing=10, seed=0)
    scales = {name: scales for name, p in raw.named_parameters() for q, scales in parameter_step_scales(raw).items()
              if p is q}
    # the RBF's length-scale, the linear part's offset and the inducing inputs; not the variances
    assert scales == {"kernel.parts.0.lengthscales.raw": pytest.approx(spread),
                      "kernel.parts.1.offset": pytest.approx(spread), "inducing": pytest.approx(spread)}
    # standardized inputs, or fixed inducing inputs and hyper-parameters: the steps as they were
    assert parameter_step_scales(savigp.SAVIGP(z, Y, Gaussian(0.5), kernel="rbf(0) + linear(0)", num_inducing=10,
                                               seed=0)) == {}
    # a decoupled mean head's basis inputs are points in the input space too
    head = savigp.SAVIGP(t, Y, Gaussian(0.5), kernel="rbf(0)", num_inducing=10, seed=0, mean_basis="decoupled",
                         mean_basis_size=20)
    assert {n for n, p in head.named_parameters() if p in parameter_step_scales(head)} == {
        "kernel.lengthscales.raw", "inducing", "mean_head.gamma"}
    # a tiny spread: an unconstrained parameter's steps shrink, a positive one's (a softplus) do not
    tiny = savigp.SAVIGP(z * 1e-3, Y, Gaussian(0.5), kernel="rbf(0) + linear(0)", num_inducing=10, seed=0)
    names = {n for n, p in tiny.named_parameters() if p in parameter_step_scales(tiny)}
    assert names == {"kernel.parts.1.offset", "inducing"}


def test_a_fit_on_inputs_in_raw_units_reaches_the_standardized_fits_optimum_as_fast():
    """The same model on years and on standardized years (length-scale and inducing inputs scaled
    alike: the same ELBO), 300 Adam steps each from the same start in its own units: with the steps in
    units of the column's spread the two paths agree to a few nats (before, the years' length-scale,
    starting at the column's spread, moved 0.01 years a step and the years' fit ended 20 nats lower)."""
    t, z, Y = _years()
    elbos = []
    for X in (t, z):
        m = savigp.SAVIGP(X, Y, Gaussian(0.5), kernel="rbf(0)", num_inducing=10, seed=0)
        savigp.fit(m, iterations=300, progress=False, seed=0)
        elbos.append(full_data_elbo(m, estimator="closed-form")[0])
    assert abs(elbos[0] - elbos[1]) < 2.0, elbos


def test_columns_of_mixed_spreads_step_each_in_units_of_its_own():
    """Years beside a column near unit scale: one factor per parameter cannot serve both, so the
    inducing inputs and the ARD length-scales step per column (a group's ``element_scale``): along the
    years they move 14.5 times as far as along the other column (before: as far)."""
    t, z, Y = _years()
    X = torch.cat([t, z], dim=1)
    m = savigp.SAVIGP(X, Y, Gaussian(0.5), kernel="rbf", num_inducing=10, seed=0)
    spread = float(t.std(unbiased=False))
    scales = parameter_step_scales(m)
    assert torch.allclose(scales[m.inducing].reshape(-1), torch.tensor([spread, 1.0], dtype=torch.float64))
    assert torch.allclose(scales[m.kernel.lengthscales.raw].reshape(-1), torch.tensor([spread, 1.0], dtype=torch.float64))
    groups = scaled_groups(m, list(m.parameters()), 0.01)
    scaled = [g for g in groups if "element_scale" in g]
    assert {id(p) for g in scaled for p in g["params"]} == {id(m.inducing), id(m.kernel.lengthscales.raw)}
    # the step itself: Adam's first step is lr sign(g) in every entry; scaled, lr times the column's factor
    p = torch.nn.Parameter(torch.zeros(3, 2, dtype=torch.float64))
    opt = attach_element_scales(torch.optim.Adam([{"params": [p], "lr": 0.01,
                                                   "element_scale": torch.tensor([[spread, 1.0]], dtype=torch.float64)}]))
    p.grad = -torch.ones_like(p)
    opt.step()
    assert torch.allclose(p.detach(), torch.tensor([[0.01 * spread, 0.01]] * 3, dtype=torch.float64), rtol=1e-6)
    state = opt.state_dict()  # (a resume keeps the scale: it is in the group)
    again = attach_element_scales(torch.optim.Adam([{"params": [p], "lr": 0.01,
                                                     "element_scale": torch.tensor([[spread, 1.0]], dtype=torch.float64)}]))
    again.load_state_dict(state)
    p.grad = -torch.ones_like(p)
    again.step()
    assert float(p[0, 0]) > 1.9 * 0.01 * spread

