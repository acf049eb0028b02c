"""A ``--lik-param`` (or ``--lik-option``) name the likelihood does not take is named, with the
names it does take, the closest first (issue 54); before, a user function's misspelt parameter
ended in the constructor's dump of every option and a suggestion to add it to the function."""
from __future__ import annotations

import numpy as np
import pytest

from savigp.cli import main
from savigp.io.csv_data import write_csv

FAST = ["--num-inducing", "4", "--iterations", "1", "--quiet", "--samples", "4", "--threads", "1"]
CODE = '''import torch
def log_lik(y, f, scale=1.0, shift=0.0, offset=0.0):
    return (-0.5 * ((y - f - shift - offset) / scale) ** 2 - torch.log(torch.as_tensor(scale))).sum(-1)
def open_ended(y, f, scale=1.0, **rest):
    return (-0.5 * ((y - f) / scale) ** 2).sum(-1)
from likelihoods import Likelihood
class Laplace(Likelihood):
    def __init__(self, scale=1.0, shift=0.0):
        super().__init__(num_latent=1, output_dim=1)
        self.scale = scale
    def log_prob(self, y, f):
        return (-(y - f).abs() / self.scale).sum(-1)
'''


@pytest.fixture()
def files(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (20, 1))
    data = str(tmp_path / "d.csv")
    write_csv(data, ["x", "y"], np.column_stack([X, np.sin(X[:, 0])]))
    (tmp_path / "lik.py").write_text(CODE)
    return data, str(tmp_path / "lik.py"), str(tmp_path / "m.pt")


def _error(capsys):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("given, closest", [("scael", "scale"), ("shfit", "shift"), ("ofset", "offset")])
def test_a_misspelt_lik_param_is_named_with_the_functions_parameters(files, capsys, given, closest):
    data, lik, out = files
    code = main(["train", data, "--targets", "y", "--out", out, *FAST, "--likelihood", f"{lik}:log_lik",
                 "--lik-param", f"{given}=1.0:positive"])
    err = _error(capsys)
    assert code == 2 and f"--lik-param {given}=" in err and f"did you mean {closest!r}" in err, err
    listed = err.split("(y, f): ")[1]
    assert listed.startswith(closest) and all(n in listed for n in ("scale", "shift", "offset")), err


def test_a_function_taking_any_keyword_takes_any_lik_param(files, capsys):
    data, lik, out = files
    assert main(["train", data, "--targets", "y", "--out", out, *FAST, "--likelihood", f"{lik}:open_ended",
                 "--lik-param", "anything=1.0:fixed"]) == 0, capsys.readouterr().err


def test_a_misspelt_lik_option_lists_the_classs_arguments_closest_first(files, capsys):
    data, _, out = files
    assert main(["train", data, "--targets", "y", "--out", out, *FAST, "--likelihood", "student-t",
                 "--lik-option", "scael=1"]) == 2
    err = _error(capsys)
    assert "'scael'" in err and err.split("it takes ")[1].startswith("scale"), err


def test_a_misspelt_lik_option_of_a_likelihood_class_of_ones_own_is_named(files, capsys):
    data, lik, out = files
    assert main(["train", data, "--targets", "y", "--out", out, *FAST, "--likelihood", f"{lik}:Laplace",
                 "--lik-option", "shfit=1"]) == 2
    err = _error(capsys)
    assert "--lik-option shfit=" in err and "did you mean 'shift'" in err and "it takes shift, scale" in err, err
