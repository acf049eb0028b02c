"""Pictures of the additive parts (issue 53, savigp.io.plotting.plot_parts): a panel per part with
its 95% band on its own column, the total with the data where the likelihood's mean is f, the
outcome panel where it is not, heat maps for parts of two columns."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import likelihoods
import savigp

pytest.importorskip("matplotlib")
from savigp.io.plotting import plot_parts  # noqa: E402


def _series(n=60, d=1, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 3, (n, d))
    y = np.sin(2 * np.pi * X[:, :1]) + 0.5 * X[:, :1] + 0.1 * rng.standard_normal((n, 1))
    return X, y


def _moved(model):
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.posterior.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


def test_each_part_is_drawn_with_its_band_and_the_data_on_the_total(tmp_path):
    X, Y = _series()
    model = _moved(savigp.SAVIGP(X, Y, likelihoods.Gaussian(0.1), "rbf + periodic * rbf + linear", num_inducing=10))
    path = tmp_path / "parts.png"
    fig = plot_parts(model, X, Y, path=str(path))
    assert path.stat().st_size > 0
    parts = model.predict_parts(X, covariance=True)
    axes = fig.axes
    assert len(axes) == 4  # the total and three parts
    assert axes[0].get_title(loc="left") == "total: rbf + periodic * rbf + linear"
    labels = axes[0].get_legend_handles_labels()[1]
    assert "data" in labels  # a Gaussian likelihood: f is y's mean
    order = np.argsort(X[:, 0])
    for j, ax in enumerate(axes[1:]):
        assert ax.get_title(loc="left") == parts.names[0][j]
        m, s = parts.mean[0][:, j].numpy()[order], parts.var[0][:, j].sqrt().numpy()[order]
        assert np.allclose(ax.lines[0].get_ydata(), m)
        band = ax.collections[0].get_paths()[0].vertices[:, 1]  # the 95% band's outline
        assert np.isclose(band.max(), (m + 1.96 * s).max()) and np.isclose(band.min(), (m - 1.96 * s).min())


def test_a_poisson_model_gets_the_latent_total_and_the_data_on_the_outcome_scale():
    """Counts: the data are drawn on the outcome's panel (the predictive mean of y), not on the
    latent total's; the prior mean, one number, is in the total's title instead of a panel."""
    X, Y = _series(seed=1)
    Y = np.round(np.exp(Y))
    model = _moved(savigp.SAVIGP(X, Y, likelihoods.Poisson(), "rbf + linear", num_inducing=8, prior_mean=0.5))
    fig = plot_parts(model, X, Y)
    assert len(fig.axes) == 4  # total, two parts, the outcome: the constant "mean" part has no panel
    assert fig.axes[0].get_title(loc="left").endswith("(mean = 0.5)")
    assert "data" not in fig.axes[0].get_legend_handles_labels()[1]
    assert fig.axes[-1].get_title(loc="left").startswith("the outcome")
    assert "data" in fig.axes[-1].get_legend_handles_labels()[1]


def test_parts_of_many_inputs_are_drawn_on_their_own_columns():
    """D = 3: the total over the rows sorted by its mean (in file order it was noise), a part of
    one column against it, of two a heat map over them, of three the inputs on two columns coloured
    by its mean."""
    X, Y = _series(n=40, d=3, seed=2)
    model = _moved(savigp.SAVIGP(X, Y, likelihoods.Gaussian(0.1), "rbf(1) + rbf(0, 2) + linear", num_inducing=8))
    fig = plot_parts(model, X, Y, input_names=["a", "b", "c"])
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    total, one, two, three = panels
    line = total.lines[-1].get_ydata()  # the total over the rows sorted by its mean: readable at any D
    assert np.all(np.diff(line) >= 0) and "order of the total's mean" in total.get_xlabel()
    assert one.get_xlabel() == "b" and len(one.lines) == 1
    assert (two.get_xlabel(), two.get_ylabel()) == ("a", "c")
    assert any(type(c).__name__ == "QuadMesh" for c in two.collections)
    assert "reads 3 columns" in three.get_title(loc="left")
    with pytest.raises(ValueError, match=r"parts were predicted at 5 inputs but X has 40 rows"):
        plot_parts(model, X, parts=model.predict_parts(X[:5]))
