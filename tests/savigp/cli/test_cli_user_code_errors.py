"""What ``savigp train`` says when the likelihood named on the command line is not what the user
meant or fails while training:

* a misspelt function name or built-in likelihood: exit 2, one line that says "did you mean ...";
* a user function whose keyword parameter has no value: exit 2, one line that says how to give it
  (``--lik-param NAME=VALUE``), before the function is first called (before: a TypeError from the
  first call, "missing 1 required positional argument");
* a user function that raises during training (a simulator that crashes at its 40th call): exit 1,
  a failure while running, naming the step, the error and the line, with a checkpoint of the last
  finished step (before: exit 2, kept for bad input, and no step)."""
from __future__ import annotations

import numpy as np
import pytest

from savigp.cli import EXIT_BAD_INPUT, EXIT_FAILURE, main
from savigp.io.csv_data import write_csv
from savigp.model_files import load_model

CODE = '''
import numpy as np
calls = [0]

def log_lik(y, f, r):
    mu = np.exp(f[..., 0])
    return y[:, 0] * np.log(mu) - mu - 0.0 * r

def crashes(y, f):
    calls[0] += 1
    if calls[0] > 40:
        raise {error}("the simulator crashed")
    return -0.5 * (y[:, 0] - f[..., 0]) ** 2
'''


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 3, 40)
    write_csv(str(tmp_path / "d.csv"), ["x", "n"], np.column_stack([x, rng.poisson(np.exp(np.sin(x)))]))
    return tmp_path


def _train(files, *args) -> int:
    return main(["train", str(files / "d.csv"), "--targets", "n", "--iterations", "60", "--num-inducing", "5",
                 "--samples", "5", "--threads", "1", "--quiet", "--out", str(files / "m.pt"), *args])


def _code(files, error="RuntimeError") -> str:
    path = files / f"lik_{error}.py"
    path.write_text(CODE.format(error=error))
    return str(path)


def test_a_misspelt_name_gets_a_did_you_mean(files, capsys):
    code = _code(files)
    assert _train(files, "--likelihood", code + ":log_lk", "--lik-param", "r=1") == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "defines no function 'log_lk'; did you mean 'log_lik'?" in err and len(err.strip().splitlines()) == 1, err
    assert _train(files, "--likelihood", "gausian") == EXIT_BAD_INPUT
    assert "did you mean gaussian?" in capsys.readouterr().err


def test_a_parameter_without_a_value_is_asked_for_with_lik_param(files, capsys):
    assert _train(files, "--likelihood", _code(files) + ":log_lik") == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "its parameter 'r' has no value: give it with --lik-param r=VALUE" in err, err
    assert _train(files, "--likelihood", _code(files) + ":log_lik", "--lik-param", "r=1") == 0


@pytest.mark.parametrize("error", ["RuntimeError", "ValueError"])
def test_a_function_that_raises_during_training_is_a_failure_naming_the_step(files, capsys, error):
    code = _code(files, error)
    assert _train(files, "--likelihood", code + ":crashes") == EXIT_FAILURE
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"raised {error}: the simulator crashed ({code}, line 12) during step " in err, err
    step = int(err.split("during step ")[1].split()[0])
    assert 1 < step <= 60 and "continue with --resume once it is fixed" in err
    assert load_model(str(files / "m.pt.ckpt"))[0].config["step"] == step - 1
