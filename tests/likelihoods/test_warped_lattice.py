"""WarpedGaussian on targets that lie on a lattice (integer counts): the slope bound ``max_slope``.

Without a bound the warped density is unbounded there: a tanh step of slope b centred on one level
gives those targets log t'(y) = log(1 + a b), which grows without limit in b (and a rescaling of t
with sigma costs the Gaussian term nothing). ``max_slope="data"`` bounds the effective slopes by
1 / (the lattice's spacing), so log t'(y) <= log(1 + sum_i a_i / gap).
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

import savigp
from likelihoods import WarpedGaussian


def _integers(n=200, seed=0):
    rng = np.random.default_rng(seed)
    return torch.as_tensor(rng.integers(0, 6, size=(n, 1)), dtype=torch.float64) * 0.5  # spacing 0.5


def _step_at(level, slope, max_slope=None):
    """One tanh term centred on ``level`` with amplitude 2 and slope ``slope``."""
    return WarpedGaussian(num_tanh=1, variance=1.0, a=[2.0], b=[slope], c=[-level], max_slope=max_slope)


def test_without_a_bound_a_step_on_one_level_raises_its_density_without_limit():
    y = torch.tensor([[1.0]], dtype=torch.float64)
    f = torch.zeros(1, 1, dtype=torch.float64)
    free = [float(_step_at(1.0, s).log_prob(y, f).detach()) for s in (1e2, 1e4, 1e6)]
    bounded = [float(_step_at(1.0, s, max_slope=2.0).log_prob(y, f).detach()) for s in (1e2, 1e4, 1e6)]
    # free: log t'(y) = log(1 + 2 s) at the step's centre, t(y) = y: grows by log(100) per step in s
    assert free[2] - free[0] == pytest.approx(math.log(2e6 + 1) - math.log(2e2 + 1), rel=1e-9)
    # bounded: b_eff = 2 tanh(s / 2) = 2 (to rounding) for every s here: the same finite density
    top = -0.5 * math.log(2 * math.pi) - 0.5 + math.log(1 + 2.0 * 2.0)
    assert bounded == pytest.approx([top, top, top], abs=1e-12)


def test_data_resolves_the_bound_from_the_lattice_spacing():
    y = _integers()
    lik = WarpedGaussian(num_tanh=3, max_slope="data")
    lik.initialize_from_data(y)
    assert float(lik.slope_bound) == pytest.approx(1.0 / 0.5, rel=1e-12)
    with torch.no_grad():
        lik.b.set(torch.tensor([1e-3, 1.0, 1e8], dtype=torch.float64))
    b = lik.slopes()
    assert float(b.detach().max()) <= 2.0 * (1 + 1e-15)
    assert float(b[0]) == pytest.approx(1e-3, rel=(1e-3 / 2.0) ** 2)  # = b for b << b_max
    # the inverse warp inverts the bounded warp
    z, _ = lik.warp(y[:, 0])
    torch.testing.assert_close(lik.inverse_warp(z), y[:, 0], rtol=0, atol=1e-9)


def test_continuous_targets_get_no_bound_and_the_same_values():
    y = torch.randn(200, 1, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    f = torch.randn(3, 200, 1, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no lattice, no warning
        bounded, free = WarpedGaussian(num_tanh=3, max_slope="data"), WarpedGaussian(num_tanh=3)
        bounded.initialize_from_data(y)
        free.initialize_from_data(y)
    assert not math.isfinite(float(bounded.slope_bound))
    assert torch.equal(bounded.log_prob(y, f), free.log_prob(y, f))


def test_an_unbounded_warp_on_a_lattice_warns_and_names_the_remedy():
    with pytest.warns(RuntimeWarning, match=r"200 targets take only 6 distinct values .*max_slope='data'"):
        WarpedGaussian(num_tanh=3).initialize_from_data(_integers())


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), "lattice"])
def test_a_bad_max_slope_is_refused(bad):
    with pytest.raises(ValueError, match="max_slope must be None, 'data' or a finite number > 0"):
        WarpedGaussian(num_tanh=2, max_slope=bad)


def test_the_resolved_bound_is_kept_by_a_model_file(tmp_path):
    """Python save / load, and the CLI (--lik-option max_slope=data): the file rebuilds the likelihood
    from its arguments ("data") without the training targets, so the bound travels in the state."""
    import subprocess
    import sys

    from conftest import ROOT

    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (60, 1))
    Y = np.round(2 * np.sin(X) + rng.normal(0, 0.3, (60, 1)))  # integer targets
    model = savigp.SAVIGP(X, Y, WarpedGaussian(num_tanh=2, max_slope="data"), num_inducing=6)
    bound = float(model.likelihood.slope_bound)
    assert bound == pytest.approx(1.0, rel=1e-12)  # integer targets, spacing 1 (not standardized here)
    path = tmp_path / "m.pt"
    savigp.save(model, str(path))
    loaded = savigp.load(str(path)).model
    assert float(loaded.likelihood.slope_bound) == bound
    y = torch.as_tensor(Y[:5], dtype=torch.float64)
    f = torch.zeros(2, 5, 1, dtype=torch.float64)
    with torch.no_grad():
        for lik in (model.likelihood, loaded.likelihood):
            lik.b.set(torch.tensor([50.0, 0.5], dtype=torch.float64))  # one slope far above the bound
        torch.testing.assert_close(loaded.likelihood.log_prob(y, f), model.likelihood.log_prob(y, f), rtol=0, atol=1e-12)
    csv = tmp_path / "int.csv"
    np.savetxt(csv, np.hstack([X, Y]), delimiter=",", header="x,y", comments="")
    out = tmp_path / "cli.pt"
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "savigp", "train", str(csv), "--targets", "y", "--likelihood", "warped",
                           "--lik-option", "max_slope=data", "--iterations", "3", "--quiet", "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    cli_bound = float(savigp.load(str(out)).model.likelihood.slope_bound)
    assert math.isfinite(cli_bound) and cli_bound > 0, cli_bound  # the CLI standardizes: 1 / (1 / std(y))
