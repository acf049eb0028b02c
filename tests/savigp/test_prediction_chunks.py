"""Predictions and log densities chunked to a memory budget (savigp/model.py) equal the unchunked
ones: the Monte Carlo draws are shared by all rows."""
from __future__ import annotations

import numpy as np
import torch

import likelihoods
import savigp


def test_predictions_chunked_to_a_memory_budget_are_the_same():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 2))
    Y = (X[:, :1] > 0).astype(float) + (X[:, 1:] > 0.5)
    model = savigp.SAVIGP(X, Y, likelihoods.Softmax(num_classes=3), num_inducing=6, posterior="diag-u", num_components=2)
    Xt = rng.standard_normal((1000, 2))
    whole = model.predict(Xt, num_samples=50, memory_budget=10 ** 9)
    assert model._rows_per_chunk(10**6, 50, 3 + 2 + 3, 100_000) < 100  # the budget below means > 10 chunks
    parts = model.predict(Xt, num_samples=50, memory_budget=100_000)
    for f in ("latent_mean", "latent_var", "probabilities"):
        assert torch.allclose(getattr(whole, f), getattr(parts, f), rtol=1e-12, atol=1e-14), f
    Yt = rng.integers(0, 3, (1000, 1)).astype(float)
    a = model.log_predictive_density(Xt, Yt, num_samples=50, memory_budget=10 ** 9)
    b = model.log_predictive_density(Xt, Yt, num_samples=50, memory_budget=100_000)
    assert torch.allclose(a, b, rtol=1e-12, atol=1e-12)
