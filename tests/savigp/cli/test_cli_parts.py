"""``savigp predict --parts`` (issue 53): a column per additive part of the kernel, named as the
expression writes the term, in the targets' units when they were standardized and f is y's mean;
``--parts --plot`` draws the parts at any number of inputs. Every run calls ``main()`` in-process."""
from __future__ import annotations

import numpy as np
import pytest

from savigp.cli import main
from savigp.io.csv_data import read_csv, write_csv
from savigp.model_files import load_model

QUIET = ["--threads", "1", "--quiet"]
KERNEL = "rbf(time) + periodic(time, period=1) * rbf(time) + linear(x)"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """``d.csv`` (y, time in years, x) and a Gaussian model of it with standardized targets."""
    t = tmp_path_factory.mktemp("parts")
    rng = np.random.default_rng(0)
    time = np.sort(rng.uniform(2000, 2006, 50))
    x = rng.standard_normal(50)
    y = 400 + 3 * (time - 2000) + 2 * np.sin(2 * np.pi * time) + 0.5 * x + 0.2 * rng.standard_normal(50)
    write_csv(str(t / "d.csv"), ["y", "time", "x"], np.column_stack([y, time, x]))
    assert main(["train", str(t / "d.csv"), "--targets", "y", "--kernel", KERNEL, "--standardize-targets",
                 "--standardize-inputs", "--num-inducing", "10", "--iterations", "10", "--out", str(t / "m.pt"),
                 *QUIET]) == 0
    return t


def test_predict_parts_writes_a_mean_and_variance_per_part_in_the_targets_units(trained):
    """The parts' columns, named by their terms (the targets' mean in the "mean" part), add up to
    the predictive mean of y in ppm-like units, and equal SavedModel.predict_parts."""
    out = trained / "p.csv"
    assert main(["predict", str(trained / "m.pt"), str(trained / "d.csv"), "--parts", "--out", str(out), *QUIET]) == 0
    table = read_csv(str(out))
    names = ["rbf(time)", "periodic(time) * rbf(time)", "linear(x)", "mean"]
    assert table.header == ["mean_y", "var_y"] + [f"part_{w}_{n}" for n in names for w in ("mean", "var")]
    v = table.values
    assert np.allclose(v[:, 2:10:2].sum(1), v[:, 0], rtol=0, atol=1e-9 * np.abs(v[:, 0]).max())
    assert np.allclose(v[:, 9], 0.0) and (v[:, 3:8:2] > 0).all()
    saved, _ = load_model(str(trained / "m.pt"))
    X = read_csv(str(trained / "d.csv")).values[:, 1:]
    parts = saved.predict_parts(X)
    assert np.allclose(v[:, 2::2], parts.mean[0].numpy()) and np.allclose(v[:, 3::2], parts.var[0].numpy())
    latent = saved.model.predict_parts(saved.transform_inputs(X))  # the model's units: sd times smaller
    sd = saved.target_stats["std"][0]
    assert np.allclose(v[:, 3:8:2], sd ** 2 * latent.var[0].numpy())


def test_predict_parts_plot_draws_the_parts_and_plot_alone_refuses_three_inputs(trained, capsys):
    png = trained / "parts.png"
    assert main(["predict", str(trained / "m.pt"), str(trained / "d.csv"), "--parts", "--plot", str(png),
                 "--out", str(trained / "q.csv"), *QUIET]) == 0
    assert png.stat().st_size > 0
    rng = np.random.default_rng(1)
    write_csv(str(trained / "d3.csv"), ["y", "a", "b", "c"], rng.standard_normal((30, 4)))
    assert main(["train", str(trained / "d3.csv"), "--targets", "y", "--kernel", "rbf(a) + rbf(b, c)",
                 "--num-inducing", "5", "--iterations", "3", "--out", str(trained / "m3.pt"), *QUIET]) == 0
    capsys.readouterr()
    assert main(["predict", str(trained / "m3.pt"), str(trained / "d3.csv"), "--plot", str(trained / "f.png"),
                 *QUIET]) == 2
    assert "--parts --plot draws each additive part" in capsys.readouterr().err
    assert main(["predict", str(trained / "m3.pt"), str(trained / "d3.csv"), "--parts", "--plot",
                 str(trained / "p3.png"), "--out", str(trained / "p3.csv"), *QUIET]) == 0
    assert read_csv(str(trained / "p3.csv")).header[2:] == ["part_mean_rbf(a)", "part_var_rbf(a)",
                                                             "part_mean_rbf(b, c)", "part_var_rbf(b, c)"]


def test_the_parts_columns_of_several_latent_functions_carry_their_index():
    import torch

    import savigp
    from likelihoods import MultiGaussian
    from savigp.cli.predict import parts_table

    X = torch.linspace(0, 1, 12, dtype=torch.float64)[:, None]
    model = savigp.SAVIGP(X, torch.cat([X, -X], 1), MultiGaussian(2), "rbf + linear", num_inducing=4)
    header, values = parts_table(model.predict_parts(X))
    assert header == [f"part_{w}_{q}_{n}" for q in (0, 1) for n in ("rbf", "linear") for w in ("mean", "var")]
    assert values.shape == (12, 8)
