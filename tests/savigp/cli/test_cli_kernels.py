"""``savigp train --kernel EXPR`` and ``--fourier-features F`` (savigp/cli/kernel_option.py): a
composite kernel and an ODVFF model trained, interrupted and resumed to the uninterrupted run's
parameters bit for bit; an expression's numbers meaning, in the model, what they mean in the units
of the file's columns (standardized or not); a wrong expression one line naming --kernel and the
bad part.

Every run calls ``main()`` in-process (a subprocess pays the torch import each time).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import refused_train
from savigp.cli import TEST_SIGINT_ENV, main
from savigp.cli.errors import CLIError
from savigp.cli.kernel_option import in_model_units
from savigp.io.csv_data import write_csv
from savigp.model_files import load_model

QUIET = ["--threads", "1", "--quiet"]
COMPOSITE = "scale(rbf(x) + periodic(time, period=1) * matern32(time)) + linear(time, offset=2005) + white"


def _train(*args) -> int:
    return main(["train", *map(str, args), *QUIET])


_refused = refused_train


def _states_equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """``d.csv``: ``y`` (a target, first), ``time`` (years 2000-2010, a yearly cycle and a trend in y)
    and ``x`` (standard normal)."""
    t = tmp_path_factory.mktemp("kernels")
    rng = np.random.default_rng(0)
    time = np.sort(rng.uniform(2000, 2010, 80))
    x = rng.standard_normal(80)
    y = 0.3 * (time - 2005) + np.sin(2 * np.pi * time) + 0.2 * x + 0.1 * rng.standard_normal(80)
    write_csv(str(t / "d.csv"), ["y", "time", "x"], np.column_stack([y, time, x]))
    return {"dir": t, "csv": t / "d.csv", "time": time, "x": x}


@pytest.mark.parametrize("kernel", [
    [COMPOSITE, "--standardize-inputs", "--num-inducing", "8"],
    ["additive-matern(nu=2.5)", "--fourier-features", "3", "--mean-basis-size", "5"],  # ODVFF
])
def test_a_kernel_expression_trains_and_resumes_exactly(data, capsys, monkeypatch, kernel):
    """Interrupted at step 6 of 12 and resumed, the run ends at the uninterrupted run's parameters
    bit for bit (mini-batches, Adam), and the file's predictions are the trained model's; resuming
    with another --kernel is refused naming it."""
    t = data["dir"]
    args = [data["csv"], "--targets", "y", "--kernel", *kernel, "--iterations", "12", "--batch-size", "40",
            "--lr", "0.05", "--checkpoint-every", "4", "--samples", "8"]
    assert _train(*args, "--out", t / "ref.pt") == 0
    monkeypatch.setenv(TEST_SIGINT_ENV, "6")
    assert _train(*args, "--out", t / "cut.pt") == 130
    monkeypatch.delenv(TEST_SIGINT_ENV)
    another = "additive-matern" if "--fourier-features" in kernel else "rbf"
    changed = [a if a != kernel[0] else another for a in args]
    assert f"--kernel is {another!r} here but" in _refused(capsys, *changed, "--out", t / "cut.pt", "--resume")
    assert _train(*args, "--out", t / "cut.pt", "--resume") == 0
    ref, cut = load_model(str(t / "ref.pt"))[0], load_model(str(t / "cut.pt"))[0]
    assert cut.config["step"] == 12 and _states_equal(cut.model.state_dict(), ref.model.state_dict())
    raw = np.column_stack([data["time"], data["x"]])[::7]
    a, b = ref.predict(raw, num_samples=10), cut.predict(raw, num_samples=10)
    assert torch.equal(a.mean, b.mean) and torch.equal(a.variance, b.variance)
    if "--fourier-features" in kernel:
        assert cut.config["model_options"]["fourier_features"] == 3 and cut.model.num_inducing == 2 * 7
        assert cut.config["model"]["mean_basis_size"] == 5


def _periodic(t1, t2, period, ls, var):
    return var * np.exp(-2 * np.sin(np.pi * (t1[:, None] - t2[None, :]) / period) ** 2 / ls ** 2)


@pytest.mark.parametrize("standardize", [False, True])
def test_the_numbers_of_an_expression_are_in_the_units_of_the_columns(data, standardize):
    """A period of 1.5 years, a length-scale of 3 on (time, x), an offset at the year 2005: the
    trained model's kernel on the inputs it sees (standardized, or not) is the kernel the expression
    writes on the file's columns (fixed values, learn=false, 0 steps)."""
    t = data["dir"]
    expr = ("periodic(time, period=1.5, lengthscale=0.8, variance=2, learn=false) + rbf(time, x, lengthscale=3, "
            "learn=false) + linear(time, offset=2005, variance=0.1, learn=false)")
    out = t / f"units{int(standardize)}.pt"
    assert _train(data["csv"], "--targets", "y", "--kernel", expr, "--iterations", "0", "--num-inducing", "5",
                  *(["--standardize-inputs"] if standardize else []), "--out", out) == 0
    saved = load_model(str(out))[0]
    raw = np.column_stack([data["time"], data["x"]])
    a, b = raw[:9], raw[20:26]
    Xa, Xb = (torch.as_tensor(saved.transform_inputs(v)) for v in (a, b))
    parts = saved.model.kernel.parts
    with torch.no_grad():
        got = [part(Xa, Xb)[0].numpy() for part in parts]
    want = [_periodic(a[:, 0], b[:, 0], 1.5, 0.8, 2.0),
            np.exp(-0.5 * ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1) / 9),
            0.1 * (a[:, :1] - 2005) @ (b[:, :1] - 2005).T]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)
    assert (saved.config["standardize"]["inputs"] is not None) == standardize


def test_a_shift_leaves_a_period_and_moves_an_offset():
    """Centring alone (std 1, as train does for float32 inputs far from zero): a period and a
    length-scale are unchanged, a linear offset is moved by the shift; scaling divides both."""
    shift = {"mean": [2000.0, 0.0], "std": [1.0, 1.0]}
    spec = {"sum": [{"kernel": "periodic", "active_dims": [0], "period": 1.0, "lengthscale": 0.5},
                    {"kernel": "linear", "active_dims": [0], "offset": 2005.0, "variance": 3.0}]}
    assert in_model_units(spec, shift, ["t", "x"]) == {"sum": [
        {"kernel": "periodic", "active_dims": [0], "period": 1.0, "lengthscale": 0.5},
        {"kernel": "linear", "active_dims": [0], "offset": 5.0, "variance": 3.0}]}
    scaled = {"mean": [2000.0, 1.0], "std": [4.0, 2.0]}
    assert in_model_units(spec, scaled, ["t", "x"])["sum"] == [
        {"kernel": "periodic", "active_dims": [0], "period": 0.25, "lengthscale": 0.5},
        {"kernel": "linear", "active_dims": [0], "offset": 1.25, "variance": 48.0}]
    assert in_model_units({"kernel": "rbf", "lengthscale": 2.0}, scaled, ["t", "x"]) == \
        {"kernel": "rbf", "lengthscale": [0.5, 1.0]}
    with pytest.raises(CLIError, match=r"rbf\(ard=false, lengthscale=2.0\): lengthscale=2.0 is one value for columns t, x"):
        in_model_units({"kernel": "rbf", "ard": False, "lengthscale": 2.0}, scaled, ["t", "x"])
    with pytest.raises(CLIError, match="linear's variance|one value for columns t, x"):
        in_model_units({"kernel": "linear", "variance": 2.0}, scaled, ["t", "x"])


@pytest.mark.parametrize("expr, needle", [
    ("rbf +", "expected a kernel name or '(', got 'the end' at character 6"),
    ("rbf + periodc(time)", "unknown kernel 'periodc' (did you mean 'periodic'?) at character 7"),
    ("rbf + periodic(tme)", "unknown column 'tme' (did you mean 'time'?) at character 16"),
    ("periodic(y)", "unknown column 'y'"),  # the target is no input
    ("periodic(5)", "column 5 is out of range (the inputs have 2 columns, 0 to 1)"),
    ("rbf(time, period=1)", "rbf takes no option 'period'"),
    ("rbf(time) * (matern32(x)", "expected ), got 'the end'"),
    ("rbf + scale(periodic(time, period=-1))", "periodic(time, period=-1): PositiveParameter"),
    ("additive-matern(nu=2)", "additive-matern(nu=2): nu must be one of [0.5, 1.5, 2.5]"),
    # bounded before the parser recurses or a float overflows (before: internal errors, exit 1)
    ("(" * 199 + "rbf" + ")" * 199, "nested more than 32 levels deep at character 33"),
    ("scale(" * 40 + "rbf" + ")" * 40, "nested more than 32 levels deep"),
    (f"rbf(time, lengthscale={'1' * 400})", "number 11111111111111111111... is out of range (beyond about 1.8e308)"),
    (f"rbf({'1' * 400})", "is out of range (the inputs have 2 columns)"),
    ("scale(rbf, variance=-1)", "scale(rbf, variance=-1): PositiveParameter"),  # (before: no --kernel named)
    ("rbf(x, ard=7)", "rbf's ard must be true or false, got 7"),  # (before: 7 taken as true)
    ("periodic(time, period=true)", "periodic's period must be a number, got true"),
])
def test_a_wrong_expression_is_one_line_naming_the_bad_part(data, capsys, expr, needle):
    out = data["dir"] / "bad.pt"
    err = _refused(capsys, data["csv"], "--targets", "y", "--kernel", expr, "--iterations", "1", "--out", out)
    assert "--kernel" in err and needle in err, err
    assert not out.exists()


@pytest.mark.parametrize("extra, needle", [
    (["--kernel", "rbf", "--fourier-features", "2"], "Fourier features are those of the kernel 'additive-matern' alone"),
    (["--kernel", "additive-matern", "--fourier-features", "2", "--num-inducing", "5"], "not with --num-inducing"),
    (["--kernel", "additive-matern", "--fourier-features", "-1"], "--fourier-features must be >= 0"),
    (["--kernel", "rbf(time, ard=false, lengthscale=2) * linear(time, x, variance=3)", "--standardize-inputs"],
     "variance=3 is one value for columns time, x of different spreads"),
])
def test_fourier_features_and_units_that_cannot_be_kept_are_refused(data, capsys, extra, needle):
    assert needle in _refused(capsys, data["csv"], "--targets", "y", *extra, "--iterations", "1", "--out",
                              data["dir"] / "bad.pt")


def test_help_lists_the_families(capsys):
    from savigp._choices import KERNELS

    assert main(["train", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert all(name in text for name in KERNELS) and "--fourier-features F" in text


def test_kernel_search_chooses_trains_and_saves_the_structure(data, capsys):
    """``--kernel search``: the candidates' table on stderr, the chosen structure trained and saved
    (a spec the model file rebuilds); ``--resume`` takes the checkpoint's kernel without searching."""
    out = data["dir"] / "searched.pt"
    capsys.readouterr()
    args = [data["csv"], "--targets", "y", "--kernel", "search", "--search-base", "rbf,periodic", "--search-max-terms", "1",
            "--search-iterations", "30", "--num-inducing", "10", "--iterations", "6", "--checkpoint-every", "3",
            "--threads", "1", "--out", out]
    assert main(["train", *map(str, args)]) == 0
    err = capsys.readouterr().err
    assert "| level | expression |" in err and "chosen:" in err
    tried = [line.split("|")[2].strip() for line in err.splitlines() if line.startswith("| 1 |")]
    assert sorted(tried) == ["periodic(time)", "periodic(x)", "rbf(time)", "rbf(x)"]
    chosen = err.split("chosen: ")[1].split(" (")[0]
    saved = load_model(str(out))[0]
    from savigp.kernels import format_kernel, kernel_spec
    assert format_kernel(kernel_spec(saved.model.kernel), ["time", "x"]).split("(")[0] == chosen.split("(")[0]
    assert main(["train", *map(str, args[:-1]), str(out), "--iterations", "9", "--resume"]) == 0
    assert "searching" not in capsys.readouterr().err


def test_kernel_search_saves_the_search_model_with_its_table(data, capsys):
    """``--kernel search`` saves the search's own fitted model: with no ``--iterations`` its full-data
    ELBO is the chosen candidate's in the search's table (closed form: to 1e-6), and the table is in
    the model file. Before, the command kept only the kernel's values, trained q(u), the inducing
    inputs and the noise afresh for 500 Adam steps and saved a model hundreds of nats below the search's
    on real series (issue 57). With ``--iterations`` the further steps start from it and the model
    saved is no worse than it."""
    from savigp.training.convergence import full_data_elbo

    base = [data["csv"], "--targets", "y", "--kernel", "search", "--search-base", "rbf", "--search-max-terms", "1",
            "--search-iterations", "20", "--num-inducing", "12", "--standardize-inputs", "--standardize-targets"]
    out = data["dir"] / "search_model.pt"
    assert _train(*base, "--out", out) == 0
    saved, _ = load_model(str(out))
    record = saved.config["training"]["kernel_search"]
    chosen = [r for r in record["table"] if r["chosen"]][-1]
    assert saved.config["training"]["iterations"] == 0 and record["expression"] in chosen["expression"]
    Xm, Ym = _model_units(saved, data)
    model = load_model(str(out), X=Xm, Y=Ym)[0].model
    elbo, _ = full_data_elbo(model, estimator="closed-form")
    assert abs(elbo - chosen["elbo"]) < 1e-6 * max(1.0, abs(elbo)), (elbo, chosen)
    further = data["dir"] / "search_model_further.pt"
    assert _train(*base, "--iterations", "60", "--lr", "0.05", "--out", further) == 0
    model = load_model(str(further), X=Xm, Y=Ym)[0].model
    assert full_data_elbo(model, estimator="closed-form")[0] >= chosen["elbo"] - 1e-6 * abs(chosen["elbo"])


def test_kernel_search_whose_q_u_cannot_carry_over_trains_to_convergence(data, capsys):
    """A joint posterior takes no q(u) from the search's moments: the run says so, starts from the
    search's kernel and likelihood, and trains as the command does by default, until the ELBO stops
    rising (with no steps it saved a model at ELBO -2400 on 40 points where the search's was at 11.9)."""
    out = data["dir"] / "search_joint.pt"
    capsys.readouterr()
    assert main(["train", str(data["csv"]), "--targets", "y", "--kernel", "search", "--search-base", "rbf",
                 "--search-max-terms", "1", "--search-iterations", "20", "--num-inducing", "12", "--posterior", "joint",
                 "--threads", "1", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "q(u) does not carry over" in err and "it trains until the ELBO stops rising" in err, err
    training = load_model(str(out))[0].config["training"]
    assert training["convergence"]["converged"] and training["iterations"] == training["convergence"]["steps"]
    assert training["options"]["until_converged"] is True


def _model_units(saved, data) -> tuple:
    """The fixture's inputs (time, x) and target y in a saved model's standardized units."""
    st = saved.config["standardize"]
    X = np.column_stack([data["time"], data["x"]])
    X = (X - np.asarray(st["inputs"]["mean"])) / np.asarray(st["inputs"]["std"])
    from savigp.io.csv_data import read_csv

    y = read_csv(str(data["csv"])).values[:, :1]
    return X, (y - np.asarray(st["targets"]["mean"])) / np.asarray(st["targets"]["std"])


def test_kernel_search_options_are_checked(data, capsys):
    err = _refused(capsys, data["csv"], "--targets", "y", "--kernel", "search", "--search-base", "rbf,periodc",
                   "--iterations", "1", "--out", data["dir"] / "bad.pt")
    assert "--search-base: expected comma-separated kernel families" in err


def test_until_converged_ends_by_the_rule_and_resumes_to_the_uninterrupted_model(data, monkeypatch, capsys):
    """``savigp train --until-converged``: fit's rule ends the run (the model file records the
    verdict and the steps), and a run interrupted inside its second round (Ctrl-C at step 600) and
    resumed ends with the uninterrupted run's parameters, bit for bit: the rule's ELBO path is in the
    checkpoint's schedule. (A trend kernel: with the periodic part, whose period steps at p / L of the
    rate, the run takes 8538 steps to converge, 1687 without.)"""
    t = data["dir"]
    args = [data["csv"], "--targets", "y", "--inputs", "time", "--kernel", "rbf(time) + linear(time)",
            "--standardize-targets", "--lr", "0.05", "--num-inducing", "12", "--until-converged"]
    assert _train(*args, "--out", t / "uc_ref.pt") == 0
    ref = load_model(str(t / "uc_ref.pt"))[0]
    record = ref.config["training"]["convergence"]
    assert record["converged"] and ref.config["step"] == record["steps"] == ref.config["training"]["iterations"] > 500
    monkeypatch.setenv(TEST_SIGINT_ENV, "600")
    assert _train(*args, "--out", t / "uc_cut.pt") == 130
    monkeypatch.delenv(TEST_SIGINT_ENV)
    assert _train(*args, "--out", t / "uc_cut.pt", "--resume") == 0
    cut = load_model(str(t / "uc_cut.pt"))[0]
    assert cut.config["step"] == ref.config["step"] and _states_equal(cut.model.state_dict(), ref.model.state_dict())
    assert "--until-converged: its run ends by fit's convergence rule" in _refused(
        capsys, *args, "--epochs", "2", "--out", t / "uc_bad.pt")
