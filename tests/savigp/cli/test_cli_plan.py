"""``savigp train``'s typed plan (:class:`savigp.cli.plan.TrainPlan`): built once from the command
line, with the options a resumed run must repeat marked on its fields (``RESUME_KEYS`` is read
from the marks, no hand list)."""
import argparse
import dataclasses

import pytest

from savigp.cli.errors import CLIError
from savigp.cli.parser import build_parser
from savigp.cli.plan import RESUME_KEYS, DemoPlan, EvaluatePlan, PredictPlan, ReportPlan, SavedModelPlan, TrainPlan

ARGV = ["train", "d.csv", "--targets", "y", "--out", "m.pt"]

#: the options model files of savigp 0.x record for --resume (config["training"]["options"])
RECORDED = ("likelihood", "num_latent", "num_classes", "one_hot", "num_outputs", "num_nodes", "num_layers",
            "num_tanh", "df", "bin_width", "noise_variance", "lik_option", "task", "mean_function", "lik_param",
            "min_log_prob", "kernel", "fourier_features", "shared_kernel", "num_inducing", "inducing_init", "dense",
            "fixed_inducing", "posterior", "components", "entropy", "prior_mean", "learn_prior_mean",
            "mean_basis_size", "mean_basis", "standardize_inputs", "standardize_targets", "dtype", "seed",
            "until_converged", "batch_size", "optimizer", "lr", "samples", "estimator", "learn")


def _train_parser():
    return _command_parser("train")


def _command_parser(command):
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


def test_every_option_of_train_is_a_field_of_the_plan():
    dests = {a.dest for a in _train_parser()._actions if a.dest != "help"}
    assert dests == {f.name for f in dataclasses.fields(TrainPlan)} - {"argv"}


def test_resume_keys_are_the_marked_fields_in_the_order_files_record_them():
    assert RESUME_KEYS == RECORDED
    assert "iterations" not in RESUME_KEYS and "epochs" not in RESUME_KEYS  # a resumed run may train longer


def test_the_plan_reads_the_command_line_once():
    args = build_parser().parse_args(ARGV + ["--learn", "kernel,posterior", "--lik-option", "a=1", "--lr", "0.5"])
    args.argv = ARGV
    plan = TrainPlan.from_args(args)
    assert plan.learn == ("posterior", "kernel")  # in PARAMETER_GROUPS order, as recorded
    assert plan.lik_option == ("a=1",) and plan.argv == tuple(ARGV)
    options = plan.resume_options()
    assert list(options) == list(RESUME_KEYS)
    assert options["learn"] == ["posterior", "kernel"] and options["lik_option"] == ["a=1"]
    assert plan.learning_rate == 0.5 and plan.fit_plan().lr == 0.5
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.device = "cuda"
    assert plan.on_device("cuda:1").device == "cuda:1" and plan.device is None
    default = TrainPlan.from_args(build_parser().parse_args(ARGV + ["--optimizer", "adadelta"]))
    assert default.learning_rate == 1.0 and default.argv is None


def test_the_default_learning_rates_are_the_optimizers_own():
    """Without --lr, each optimizer's declared ``default_lr`` (savigp.training.optimizers), which
    ``--lr``'s help names (the parser, read before torch, cannot import the classes)."""
    from savigp._choices import OPTIMIZERS

    help_text = next(a.help for a in _train_parser()._actions if a.dest == "lr")
    for name in OPTIMIZERS:
        plan = TrainPlan.from_args(build_parser().parse_args(ARGV + ["--optimizer", name]))
        assert plan.learning_rate == OPTIMIZERS[name].default_lr
        assert f"{name} {OPTIMIZERS[name].default_lr:g}" in help_text, (name, help_text)


@pytest.mark.parametrize("extra, message", [
    (["--nproc", "0"], "--nproc must be >= 1, got 0"),
    (["--dist-timeout", "0"], "--dist-timeout must be > 0 seconds, got 0.0"),
    (["--learn", "kernels"], "--learn: unknown parameter group(s) 'kernels'"),
    (["--nproc", "0", "--learn", "kernels"], "--nproc must be >= 1"),  # (checked in the order of before)
    (["--nproc", "2147483647"], "--nproc 2147483647: the ranks run on this machine, at most one per core"),
])
def test_bad_options_are_one_line_errors_when_the_plan_is_built(extra, message):
    with pytest.raises(CLIError, match=message.replace("(", r"\(").replace(")", r"\)")):
        TrainPlan.from_args(build_parser().parse_args(ARGV + extra))


@pytest.mark.parametrize("command, plan", [("predict", PredictPlan), ("evaluate", EvaluatePlan), ("report", ReportPlan),
                                           ("demo", DemoPlan)])
def test_every_option_of_each_other_command_is_a_field_of_its_plan(command, plan):
    dests = {a.dest for a in _command_parser(command)._actions if a.dest != "help"}
    assert dests == {f.name for f in dataclasses.fields(plan)}


def test_predict_and_evaluate_plans_read_their_command_lines():
    args = build_parser().parse_args(["predict", "m.pt", "t.csv", "--no-header", "--latent", "--samples", "7",
                                      "--plot", "fit.png"])
    args.argv = ["predict", "m.pt", "t.csv"]  # (main records it on every command; only train's plan keeps it)
    plan = PredictPlan.from_args(args)
    assert isinstance(plan, SavedModelPlan)
    assert (plan.model, plan.data, plan.header, plan.latent, plan.samples, plan.plot, plan.out) == \
        ("m.pt", "t.csv", False, True, 7, "fit.png", "-")
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.samples = 1
    plan = EvaluatePlan.from_args(build_parser().parse_args(["evaluate", "m.pt", "t.csv", "--targets", "y", "--json"]))
    assert (plan.targets, plan.json, plan.samples, plan.threads) == ("y", True, 1000, None)
    plan = DemoPlan.from_args(build_parser().parse_args(["demo", "--seed", "3"]))
    assert (plan.dir, plan.seed, plan.quiet, plan.threads) == (None, 3, False, 1)


@pytest.mark.parametrize("command", ["predict", "evaluate"])
def test_bad_samples_are_a_one_line_error_when_the_plan_is_built(command):
    plan = PredictPlan if command == "predict" else EvaluatePlan
    with pytest.raises(CLIError, match="--samples must be >= 1, got 0"):
        plan.from_args(build_parser().parse_args([command, "m.pt", "t.csv", "--samples", "0"]))


@pytest.mark.parametrize("command", ["train", "predict", "evaluate", "demo"])
def test_numeric_options_are_bounded_where_they_are_read(command, capsys):
    """Every integer option is a count within a C int (a seed within 0..2^63 - 1) and every real one a
    finite float64, refused by the parser naming the option (before: a 400-digit --iterations,
    --samples, --components or --epochs failed later as internal errors (OverflowError), a negative
    or 20-digit --seed without naming it, --lr 1e400 trained to NaN, exit 1)."""
    from savigp.cli import main

    huge = "1" * 400
    actions = {a.option_strings[0]: a for a in _command_parser(command)._actions if a.option_strings}

    def reads(action, text, kind) -> bool:  # (the option's type, told by what it makes of a value)
        try:
            return action.type is not None and type(action.type(text)) is kind
        except Exception:  # noqa: BLE001 - a type that refuses the probe takes other values
            return False

    cases = [(o, huge, f"argument {o}: {'1' * 20}... is out of range") for o, a in actions.items() if reads(a, "5", int)]
    cases += [(o, "1e400", f"argument {o}: 1e400 is not a finite number") for o, a in actions.items()
              if reads(a, "0.5", float)]
    cases += [("--seed", "-1", "argument --seed: -1 is out of range (0 to 9223372036854775807)")]
    assert len(cases) >= (10 if command == "train" else 3)
    head = {"train": ["train", "d.csv", "--targets", "y", "--out", "m.pt"], "predict": ["predict", "m.pt", "t.csv"],
            "evaluate": ["evaluate", "m.pt", "t.csv"], "demo": ["demo"]}[command]
    for option, value, message in cases:
        capsys.readouterr()
        assert main([*head, option, value]) == 2, option
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1] == f"savigp {command}: error: {message}" or message in err[-1], (option, err[-1])


def test_threads_are_bounded(capsys):
    """--threads 2^31 - 1 failed inside torch (an internal error, exit 1)."""
    from savigp.cli import main

    for threads in ("0", "2147483647"):
        capsys.readouterr()
        assert main(["predict", "m.pt", "t.csv", "--threads", threads]) == 2
        assert capsys.readouterr().err.strip() == f"savigp predict: error: --threads must be between 1 and 1024, got {threads}"


@pytest.mark.parametrize("value, shown", [("1" * 400, "1111111111"), ("1e400", "inf"), ("[1, -1e999]", "-inf"),
                                          ("{'a': (2, 1e999)}", "inf")])
def test_a_lik_option_number_beyond_float64_is_refused_naming_it(value, shown):
    """A 400-digit --lik-option value overflowed a float inside the likelihood (an internal error,
    exit 1); any number a float64 does not hold, also inside a list or dict, is refused as it is read."""
    from savigp.cli.checks import parse_lik_options

    assert parse_lik_options(["df=4", "scale=[1, 2.5]"]) == {"df": 4, "scale": [1, 2.5]}
    with pytest.raises(CLIError, match=rf"--lik-option df=: the number -?{shown}.* is beyond what a float64 holds"):
        parse_lik_options([f"df={value}"])
