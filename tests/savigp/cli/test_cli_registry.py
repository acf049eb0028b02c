"""A likelihood class registered with the command line (savigp.cli.register_likelihood, in the
user's own module) is offered by ``savigp train`` with no edit of the CLI: adding a likelihood
touches one file."""
import sys
import textwrap

import numpy as np
import pytest
import torch

from savigp._choices import LIKELIHOODS
from savigp.cli import likelihood_options, main
from savigp.io.csv_data import write_csv

LAPLACE = textwrap.dedent('''
    import math
    import torch
    from likelihoods import Likelihood
    from savigp.cli import register_likelihood

    class Laplace(Likelihood):
        """y | f ~ Laplace(f, b) with variance 2 b^2."""

        def __init__(self, variance: float = 1.0):
            super().__init__()
            self.num_latent, self.output_dim = 1, 1
            self.variance = float(variance)

        def _log_prob(self, y, f):
            b = math.sqrt(self.variance / 2)
            return (-(y[..., 0] - f[..., 0]).abs() / b - math.log(2 * b))

    register_likelihood("laplace-test", Laplace, options=("noise_variance",), standardizable=True)
''')


@pytest.fixture
def laplace_module(tmp_path, monkeypatch):
    """The module imported (so its class registers), unregistered afterwards."""
    (tmp_path / "laplace_test_lik.py").write_text(LAPLACE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "laplace_test_lik", raising=False)
    import laplace_test_lik

    yield laplace_test_lik
    sys.modules.pop("laplace_test_lik", None)
    if "laplace-test" in LIKELIHOODS:
        likelihood_options.unregister_likelihood("laplace-test")


def test_a_registered_class_is_listed_accepted_and_saved(tmp_path, laplace_module, capsys):
    assert main(["train", "--help"]) == 0
    assert "laplace-test" in capsys.readouterr().out
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (40, 1))
    Y = np.sin(3 * X) + 0.1 * rng.laplace(size=(40, 1))
    data, model = str(tmp_path / "d.csv"), str(tmp_path / "m.pt")
    write_csv(data, ["x", "y"], np.column_stack([X, Y]))
    args = ["train", data, "--targets", "y", "--likelihood", "laplace-test", "--num-inducing", "5",
            "--iterations", "3", "--quiet", "--out", model]
    assert main(args + ["--noise-variance", "0.5", "--standardize-targets"]) == 0
    saved = torch.load(model, weights_only=True)["config"]["likelihood"]
    assert saved == {"name": "laplace-test", "class": "Laplace", "kwargs": {"variance": 0.5}}
    import savigp

    loaded = savigp.load(model)
    assert isinstance(loaded.model.likelihood, laplace_module.Laplace)
    assert loaded.model.likelihood.variance == 0.5
    capsys.readouterr()
    # an option the class does not declare is refused, naming the classes that take it
    assert main(args + ["--df", "3"]) == 2
    assert "--df does not apply to --likelihood laplace-test (it is for: student-t)" in capsys.readouterr().err
    # and without the module imported the name is unknown
    likelihood_options.unregister_likelihood("laplace-test")
    assert main(args) == 2
    assert "--likelihood 'laplace-test': not a built-in likelihood" in capsys.readouterr().err


def test_builtin_options_become_the_same_constructor_arguments_as_before(tmp_path):
    """The registry-driven spec equals the old table's for every built-in (the kwargs a model file
    records), including the options whose default the data decide."""
    from savigp.cli.likelihood_options import likelihood_spec
    from savigp.cli.parser import build_parser
    from savigp.cli.plan import TrainPlan

    Y2 = np.column_stack([np.zeros(5), np.ones(5)])
    labels = np.array([[0.0], [2.0], [1.0], [2.0], [0.0]])
    cases = [
        (["--likelihood", "gaussian", "--noise-variance", "0.3"], Y2[:, :1], {"variance": 0.3}),
        (["--likelihood", "softmax"], labels, {"num_classes": 3, "one_hot": False}),
        (["--likelihood", "softmax", "--one-hot"], Y2, {"num_classes": 2, "one_hot": True}),
        (["--likelihood", "softmax", "--num-classes", "5"], labels, {"num_classes": 5, "one_hot": False}),
        (["--likelihood", "multi-gaussian"], Y2, {"num_outputs": 2}),
        (["--likelihood", "gprn", "--num-nodes", "3"], Y2, {"num_outputs": 2, "num_nodes": 3}),
        (["--likelihood", "seismic", "--lik-option", "depth_scale=10"], Y2, {"num_layers": 2, "depth_scale": 10}),
        (["--likelihood", "warped", "--num-tanh", "2"], Y2[:, :1], {"num_tanh": 2}),
        (["--likelihood", "student-t", "--df", "5"], Y2[:, :1], {"df": 5.0}),
        (["--likelihood", "poisson", "--bin-width", "2"], Y2[:, :1], {"bin_width": 2.0}),
        (["--likelihood", "logistic"], Y2[:, :1], {}),
    ]
    for argv, Y, kwargs in cases:
        args = build_parser().parse_args(["train", "d.csv", "--targets", "y", "--out", "m.pt", *argv])
        spec = likelihood_spec(TrainPlan.from_args(args), Y)
        assert spec["kwargs"] == kwargs, argv
        assert spec == {"name": argv[1], "class": LIKELIHOODS[argv[1]].__name__, "kwargs": kwargs}


def test_code_arguments_are_no_lik_options(tmp_path, capsys):
    """--lik-option refuses the arguments that are code, as not options of a user function (they
were refused before too, later, by the constructor-argument check, in other words)."""
    rng = np.random.default_rng(0)
    data = str(tmp_path / "d.csv")
    write_csv(data, ["x", "y"], np.column_stack([rng.uniform(size=10), rng.normal(size=10)]))
    (tmp_path / "lik.py").write_text("def log_lik(y, f):\n    return -(y[:, 0] - f[..., 0]) ** 2\n")
    for key in ("mean_import_path", "import_path", "mean_fn"):
        assert main(["train", data, "--targets", "y", "--likelihood", f"{tmp_path}/lik.py:log_lik", "--iterations",
                     "1", "--lik-option", f"{key}=x.py:f", "--out", str(tmp_path / "m.pt")]) == 2
        err = capsys.readouterr().err
        assert f"--lik-option {key}=...: not an option of a user function" in err and "mean_import_path" not in \
            err.split("(options: ")[1].split(")")[0]
