"""Issue 28: fit's convergence readout (savigp.training.convergence), its threads (savigp.runtime.threads)
and the hint to declare a torch likelihood differentiable (CallableLikelihood.suggest_differentiable)."""
import math
import warnings

import numpy as np
import pytest
import torch

import savigp
from likelihoods import CallableLikelihood, Gaussian
from savigp.runtime import threads as _threads
from savigp.training import full_data_elbo, still_rising


def _data(N=60, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(N, 1, generator=g) * 6
    return X, torch.sin(X) + 0.3 * torch.randn(N, 1, generator=g)


def _model(N=60, M=6, likelihood=None):
    X, Y = _data(N)
    return savigp.SAVIGP(X, Y, likelihood or Gaussian(0.3), num_inducing=M)


# ---------------------------------------------------------------------------- full-data ELBO
def test_full_data_elbo_matches_the_exact_gaussian_elbo_within_its_standard_error():
    """Monte Carlo (reparam, S = 50, 60 rows in chunks of 7) against the closed form: within 4
    standard errors; the closed form in chunks is the one-pass closed form to rounding; quadrature
    agrees with it to 1e-6 relative."""
    model = _model()
    savigp.fit(model, iterations=20, lr=0.05, progress=False, final_elbo=False)
    with torch.no_grad():
        exact = float(model.elbo(None, estimator="closed-form").elbo)
    value, se = full_data_elbo(model, estimator="closed-form", chunk_size=7)
    assert se == 0 and value == pytest.approx(exact, rel=1e-12)
    value, se = full_data_elbo(model, estimator="quadrature", chunk_size=7)
    assert value == pytest.approx(exact, rel=1e-6)
    errors = []
    for seed in range(3):
        value, se = full_data_elbo(model, estimator="reparam", num_samples=50, chunk_size=7, seed=seed)
        assert 0 < se < 1.0
        errors.append((value - exact) / se)
    assert max(abs(z) for z in errors) < 4, errors
    # fit records it with the training estimator
    h = savigp.fit(model, iterations=2, estimator="reparam", num_samples=50, progress=False)
    assert h.final_elbo_stderr > 0 and abs(h.final_elbo - exact) < 6 * h.final_elbo_stderr + 1.0


# ---------------------------------------------------------------------------- still rising
def test_the_hint_fires_on_a_truncated_fit_and_not_on_a_converged_one():
    truncated = _model()
    with pytest.warns(savigp.ConvergenceWarning, match="still rising"):
        h = savigp.fit(truncated, iterations=100, lr=0.01, progress=False, final_elbo=False)
    assert h.still_rising and "over the last 25 steps" in h.still_rising  # (a quarter of the path: no annealing in 100)
    converged = _model()
    savigp.fit(converged, iterations=8, optimizer="lbfgs", progress=False, final_elbo=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", savigp.ConvergenceWarning)
        h = savigp.fit(converged, iterations=100, lr=0.001, progress=False, final_elbo=False)
    assert h.still_rising is None


def test_still_rising_weighs_the_trend_against_its_noise_and_size():
    rng = np.random.default_rng(0)
    noisy_flat = list(-1000 + 5 * rng.standard_normal(200))
    assert still_rising(noisy_flat, num_data=100) is None
    rising = [v + 0.5 * i for i, v in enumerate(noisy_flat)]  # +20 over the last 40 steps, noise sd 5
    r = still_rising(rising, num_data=100)
    assert r is not None and r.steps == 40 and r.z > 3
    tiny = [-1000 + 1e-6 * i for i in range(200)]  # no noise, but 4e-5 nats: not worth more steps
    assert still_rising(tiny, num_data=100) is None
    assert still_rising(rising[:99], num_data=100) is None  # a fifth of 99 steps is too short to judge


def test_progress_shows_the_smoothed_elbo(capsys):
    savigp.fit(_model(), iterations=20, lr=0.01, progress=True, final_elbo=False)
    lines = capsys.readouterr().err.splitlines()
    assert lines[-1].startswith("savigp [closed-form] step 20/20 elbo=")
    assert lines[-1].endswith(")") and "(mean of the last 2 steps, sd " in lines[-1]


# ---------------------------------------------------------------------------- threads
def test_threads_small_problems_use_one_and_the_callers_setting_is_restored(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        h = savigp.fit(_model(), iterations=2, progress=False, final_elbo=False)
        assert h.threads == 1 and torch.get_num_threads() == 2
        h = savigp.fit(_model(), iterations=1, progress=False, final_elbo=False, threads=2)
        assert h.threads == 2 and torch.get_num_threads() == 2
        torch.set_num_threads(1)
        with pytest.raises(ValueError, match="threads must be >= 1"):
            savigp.fit(_model(), iterations=1, progress=False, threads=0)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_the_thread_rule(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(4)
        assert _threads.choose_threads(1e6) == 1  # small: one thread, idle or not
        monkeypatch.setattr(_threads, "idle_cores", lambda: 0.4)
        assert _threads.choose_threads(1e9) == 1  # large on a busy machine
        monkeypatch.setattr(_threads, "idle_cores", lambda: 2.7)
        assert _threads.choose_threads(1e9) == 3
        monkeypatch.setattr(_threads, "idle_cores", lambda: 16.0)
        assert _threads.choose_threads(1e9) == 4  # never above torch's setting
        assert _threads.choose_threads(1e9, threads=7) == 7
        monkeypatch.setenv("OMP_NUM_THREADS", "4")
        assert _threads.choose_threads(1e6) == 4  # told otherwise
    finally:
        torch.set_num_threads(before)
    # the README's example (N = 500, M = 20, B = 100, S = 100) is small; M = 500, B = 1000 is not
    X = np.random.default_rng(0).random((500, 1))
    small = savigp.SAVIGP(X, np.sin(X), Gaussian(0.1), num_inducing=20)
    assert _threads.step_work(small, 100, 100) < _threads.SMALL_WORK
    assert 0.0 <= _threads.idle_cores()


# ---------------------------------------------------------------------------- differentiable hint
def _torch_laplace(y, f):
    return -math.log(0.6) - (y[:, 0] - f[..., 0]).abs() / 0.3


def _numpy_laplace(y, f):
    return -np.log(0.6) - np.abs(y[:, 0] - f[..., 0]) / 0.3


def test_a_differentiable_torch_function_gets_the_hint_once_and_numpy_none():
    model = _model(likelihood=CallableLikelihood(_torch_laplace))
    with pytest.warns(UserWarning, match="is differentiable in f with torch.*differentiable=True selects the reparam"):
        savigp.fit(model, iterations=2, num_samples=5, progress=False, final_elbo=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        savigp.fit(model, iterations=2, num_samples=5, progress=False, final_elbo=False)  # said once
        # asked for the score estimator by name: nothing to suggest
        savigp.fit(_model(likelihood=CallableLikelihood(_torch_laplace)), iterations=2, num_samples=5,
                   estimator="score", progress=False, final_elbo=False)
        for fn in (_numpy_laplace, lambda y, f: _torch_laplace(y, f).detach()):
            lik = CallableLikelihood(fn)
            savigp.fit(_model(likelihood=lik), iterations=2, num_samples=5, progress=False, final_elbo=False)
            assert lik.suggest_differentiable(torch.zeros(3, 1)) is None


def test_fits_warnings_point_at_the_caller():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        savigp.fit(_model(likelihood=CallableLikelihood(_torch_laplace)), iterations=100, lr=0.01, num_samples=5,
                   progress=False, final_elbo=False)
    kinds = {w.category: w.filename for w in caught}
    from savigp.training.fitting import DifferentiableHintWarning  # (a UserWarning of its own category)

    assert kinds.get(savigp.ConvergenceWarning) == __file__ and kinds.get(DifferentiableHintWarning) == __file__, caught


def test_a_mixture_fit_still_rising_is_said_from_its_whole_path_after_the_starts():
    """A mixture's fit-own phase is a tenth of its run (the starts, the move and the annealing take the
    rest): the still-rising verdict read the last fifth of that phase, 8 of 400 steps here, too few to
    judge, and a fit far from its optimum said nothing (issue 57). It now reads the last quarter of
    the path after the starts at the full rate (the steps before the move, the kept branch, fit's own)."""
    from experiments import mixture_modes as mm

    p = mm.problems()["abs5"]
    model = p.build(2, 0)
    with pytest.warns(savigp.ConvergenceWarning, match="still rising"):
        h = savigp.fit(model, iterations=400, lr=0.002, num_samples=10, estimator="reparam", progress=False,
                       final_elbo=False)
    assert h.starts is not None and h.still_rising and "over the last 55 steps" in h.still_rising, h.still_rising
