"""``savigp train`` refuses, before training, an initial value that a model file cannot hold
(issue 54): beyond sqrt(finfo.max) of the model's dtype (1.34e154 in float64, 1.84e19 in float32),
the bound ``savigp predict``/``evaluate``'s reader applies. Before, training exited 0 and wrote a
model that its own ``evaluate`` refused."""
from __future__ import annotations

import numpy as np
import pytest

from savigp.cli import main
from savigp.io.csv_data import write_csv

FAST = ["--num-inducing", "5", "--iterations", "1", "--quiet", "--samples", "5", "--threads", "1"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = np.random.default_rng(0)
    X = rng.uniform(-0.02, 0.02, (30, 1))
    path = str(tmp_path_factory.mktemp("initial") / "d.csv")
    write_csv(path, ["x", "y"], np.column_stack([X, np.sin(100 * X[:, 0])]))
    return path


@pytest.mark.parametrize("options, named", [
    (["--kernel", "rbf(lengthscale=1e300)"], "--kernel 'rbf(lengthscale=1e300)'"),
    (["--kernel", "rbf + periodic(period=1e300)"], "--kernel 'rbf + periodic(period=1e300)'"),
    (["--noise-variance", "1e300"], "--noise-variance 1e+300"),
    (["--likelihood", "student-t", "--lik-option", "scale=1e200"], "--lik-option scale=1e200"),
    (["--prior-mean", "1e300"], "--prior-mean 1e300"),
    (["--posterior", "diag", "--hypers", "two-stage", "--prior-mean", "1e300"], "--prior-mean 1e300"),  # before stage 1
    (["--standardize-inputs", "--kernel", "rbf(lengthscale=1e153)"], "--kernel"),  # / std 0.0115: 8.7e154 in the model
    (["--dtype", "float32", "--kernel", "rbf(variance=1e30)"], "--kernel 'rbf(variance=1e30)'"),
])
def test_a_value_no_model_file_holds_is_refused_before_training(data, tmp_path, capsys, options, named):
    out = tmp_path / "m.pt"
    assert main(["train", data, "--targets", "y", "--out", str(out), *FAST, *options]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"savigp train: error: {named}"), err
    assert "model file" in err and ("1.84e+19" if "float32" in options else "1.34e+154") in err, err
    assert not out.exists()


def test_a_value_within_the_bound_trains_and_reads_back(data, tmp_path, capsys):
    """1e154 < sqrt(finfo(float64).max) = 1.34e154: saved, and read back by evaluate."""
    out = str(tmp_path / "m.pt")
    assert main(["train", data, "--targets", "y", "--out", out, *FAST, "--kernel", "rbf(lengthscale=1e154)"]) == 0
    assert main(["evaluate", out, data]) == 0, capsys.readouterr().err
