"""``savigp report MODEL DATA --out report.html``: the fitted model described on its training data
in one self-contained HTML page (:func:`savigp.report`; docs/report.md)."""
from __future__ import annotations

import sys

from ..io.csv_data import read_csv
from .checks import code_inputs, output_path
from .columns import select_inputs, select_targets, validate_targets
from .errors import EXIT_OK, CLIError
from .plan import ReportPlan
from .predict import model_and_table, model_problems, rows_out_of_memory
from .user_options import file_lines_in_errors


def _labelled(table, saved, plan: ReportPlan) -> tuple:
    """``(X, Y)`` of a CSV file read as the model's training file was: its inputs and targets,
    the targets checked against the likelihood (a one-line error naming the file's row)."""
    import torch

    tcols = select_targets(table, saved.config, plan.targets, positional=plan.positional)
    icols = select_inputs(table, saved.config, plan.inputs, exclude=tcols, positional=plan.positional)
    X, Y = table.values[:, icols], table.values[:, tcols]
    if saved.likelihood_loaded:
        validate_targets(saved.model.likelihood, torch.as_tensor(saved.transform_targets(Y)), table, tcols)
    return X, Y, table.names(icols), table.names(tcols)


def cmd_report(args) -> int:
    """``savigp report``: read the model and its data (and ``--test``), write the HTML page. ``args``:
    the parsed command line, read once into a :class:`~savigp.cli.plan.ReportPlan`."""
    from ..io.plotting import MissingExtra, require_matplotlib

    plan = ReportPlan.from_args(args)
    inputs = [plan.model, plan.data, *([plan.test] if plan.test else []),
              *code_inputs(plan.likelihood, plan.mean_function, plan.model if plan.trust_code else None)]
    out = output_path(plan.out, inputs, plan.quiet)
    try:
        require_matplotlib()
    except MissingExtra as err:
        raise CLIError(str(err)) from None
    table, saved = model_and_table(plan)
    if not saved.likelihood_loaded:
        raise CLIError(f"{plan.model}: the report's checks of fit need the model's likelihood: "
                       f"{saved.model.likelihood.note}")
    X, Y, inames, tnames = _labelled(table, saved, plan)
    X_test = Y_test = None
    if plan.test:
        test = read_csv(plan.test, header=plan.header, delimiter=plan.delimiter)
        X_test, Y_test, _, _ = _labelled(test, saved, plan)
    from ..reports import report

    with rows_out_of_memory(table, "reporting on"), file_lines_in_errors(table), model_problems(plan.model):
        report(saved, X, Y, X_test=X_test, Y_test=Y_test, path=out, num_samples=plan.samples, seed=plan.seed,
               title=plan.title, input_names=inames, target_names=tnames)
    if not plan.quiet:
        print(f"wrote {out}", file=sys.stderr)
    return EXIT_OK
