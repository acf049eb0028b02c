"""fit's options grouped (:mod:`savigp.training.fitting`): :class:`StepOptions` (how each step is
taken, the annealing phase's at a tenth of the rates) and :class:`PhaseOptions` (the phases around
fit's own), built from fit's keyword arguments, which keep working as before."""
import pytest
import torch

import savigp
from likelihoods import Gaussian
from savigp.training import starts as _starts
from savigp.training.fitting import WEIGHT_LR_FACTOR, PhaseOptions, StepOptions


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


def test_phase_options_fill_in_fits_defaults_and_refuse_bad_values():
    assert PhaseOptions.of(None, _starts.DEFAULT_FRACTION, None, None) == PhaseOptions()
    assert PhaseOptions.of(None, 0.2, None, False) == PhaseOptions(_starts.DEFAULT_STARTS, 0.2, True, False)
    with pytest.raises(ValueError, match=r"start_fraction must be in \(0, 1\), got 1"):
        PhaseOptions.of(None, 1, None, None)
    with pytest.raises(ValueError, match="starts must be >= 1, got 0"):
        PhaseOptions.of(0, 0.2, None, None)


def test_fits_keyword_arguments_still_refuse_bad_values():
    g = torch.Generator().manual_seed(0)
    X = torch.rand(20, 1, generator=g)
    model = savigp.SAVIGP(X, torch.sin(X), Gaussian(0.1), num_inducing=3)
    for kwargs, match in (({"start_fraction": 0.0}, "start_fraction"), ({"starts": 0}, "starts must be"),
                          ({"log_every": 0}, "log_every must be"), ({"optimizer": "sgd"}, "optimizer must be")):
        with pytest.raises(ValueError, match=match):
            savigp.fit(model, iterations=1, progress=False, **kwargs)
