"""``savigp predict`` (predictive means, variances and class probabilities per row, to a CSV) and
``savigp evaluate`` (the paper's metrics on labelled data)."""
from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager

import numpy as np

from ..io.csv_data import TableMemoryError, read_csv, write_csv
from .checks import check_device, check_plot_option, code_inputs, max_memory_bytes, output_path
from .columns import select_inputs, select_targets, targets_if_present, validate_targets
from .errors import EXIT_OK, CLIError, one_line
from .plan import EvaluatePlan, PredictPlan, SavedModelPlan
from .user_options import file_lines_in_errors

METRIC_NAMES = {"n": "N", "sse": "SSE", "nlpd": "NLPD", "mse": "MSE", "mae": "MAE",
                "error_rate": "error rate", "nlp": "NLP", "coverage90": "90% interval coverage"}


def _label_name(v) -> str:
    v = float(v)
    return str(int(v)) if v == int(v) else repr(v)


def prediction_table(saved, pred: dict, latent: bool = False) -> tuple:
    """Header and values ``(B, columns)`` of a predictions CSV.

    ``pred`` is ``Prediction.numpy()`` (the same fields and shapes as :meth:`SAVIGP.predict`).
    Columns: ``mean_<target>`` and ``var_<target>`` for each target (when the likelihood has
    predictive moments; ``var_`` is left out for a user mean function that gives E[y | f] only;
    for classification only when the likelihood says its labels are ordered, ``ordered = True``:
    the mean of an unordered class label means nothing), ``prob_<label>`` for each class and
    ``predicted_<target>`` (the most probable label) for classification, and ``latent_mean_<j>``/``latent_var_<j>`` for the Q latent functions with
    ``latent=True`` or when there are no predictive moments.
    """
    cfg = saved.config
    names = (cfg.get("columns") or {}).get("targets") or [f"y{p}" for p in range(len(cfg["example_target"]))]
    header, blocks = [], []
    unordered = pred["probabilities"] is not None and not getattr(saved.model.likelihood, "ordered", False)
    if pred["mean"] is not None and not unordered:
        for p, t in enumerate(names):
            header.append(f"mean_{t}")
            blocks.append(pred["mean"][:, p:p + 1])
            if pred["variance"] is not None:  # None: a user mean function gives E[y | f] only
                header.append(f"var_{t}")
                blocks.append(pred["variance"][:, p:p + 1])
    if pred["probabilities"] is not None:
        labels = cfg.get("class_labels") or list(range(pred["probabilities"].shape[1]))
        header += [f"prob_{_label_name(c)}" for c in labels]
        blocks.append(pred["probabilities"])
        header.append(f"predicted_{names[0]}" if len(names) == 1 else "predicted_class")
        idx = pred["probabilities"].argmax(axis=1)
        blocks.append(np.asarray(labels, dtype=np.float64)[idx][:, None])
    if latent or pred["mean"] is None:
        Q = pred["latent_mean"].shape[1]
        for j in range(Q):
            header += [f"latent_mean_{j}", f"latent_var_{j}"]
            blocks += [pred["latent_mean"][:, j:j + 1], pred["latent_var"][:, j:j + 1]]
    return header, np.concatenate(blocks, axis=1)


def parts_table(parts) -> tuple:
    """Header and values ``(B, 2 J)`` of the additive parts' columns (``savigp predict --parts``):
    ``part_mean_<term>`` and ``part_var_<term>`` for each part of ``parts`` (a
    :class:`savigp.PartsPrediction`), the term as the kernel expression writes it;
    ``part_mean_<j>_<term>`` for latent function j when Q > 1."""
    header, blocks = [], []
    Q = parts.num_latent
    for q in range(Q):
        tag = f"{q}_" if Q > 1 else ""
        for j, name in enumerate(parts.names[q]):
            header += [f"part_mean_{tag}{name}", f"part_var_{tag}{name}"]
            blocks += [parts.mean[q][:, j:j + 1], parts.var[q][:, j:j + 1]]
    return header, np.concatenate([b.detach().cpu().double().numpy() for b in blocks], axis=1)


def model_and_table(plan: SavedModelPlan):
    """The CSV and the model file that ``savigp predict`` / ``evaluate`` read (clear errors for both)."""
    from ..model_files import ModelFileError, load_model

    if not os.path.exists(plan.model):
        raise ModelFileError(f"{plan.model}: no such model file")
    table = read_csv(plan.data, header=plan.header, delimiter=plan.delimiter)
    check_device(plan.device)
    code = {"mean_fn": plan.mean_function} if plan.mean_function else None
    saved, _ = load_model(plan.model, device=plan.device, likelihood=plan.likelihood, trust_code=plan.trust_code,
                          code=code, max_bytes=max_memory_bytes(plan.max_memory))
    if plan.threads is None:
        _choose_threads(saved, table.num_rows, plan.samples)
    return table, saved


def _choose_threads(saved, rows: int, num_samples: int) -> None:
    """torch's threads without ``--threads``: the rule ``train`` follows
    (:func:`savigp.runtime.threads.choose_threads`) for a step of all ``rows``: 1 thread for a small
    model and file (without the 0.1 s look at the idle cores), else torch's setting capped at the
    cores idle now."""
    import torch

    from ..runtime.threads import choose_threads, step_work

    torch.set_num_threads(choose_threads(step_work(saved.model, rows, num_samples)))


def cmd_predict(args) -> int:
    """``savigp predict``: predictive means/variances (and class probabilities) per row. ``args``:
    the parsed command line, read once into a :class:`~savigp.cli.plan.PredictPlan`."""
    plan = PredictPlan.from_args(args)
    inputs = [plan.model, plan.data, *code_inputs(plan.likelihood, plan.mean_function,
                                                  plan.model if plan.trust_code else None)]
    out = output_path(plan.out, inputs, plan.quiet, allow_stdout=True)
    plot = check_plot_option(plan.plot, inputs, [out])
    table, saved = model_and_table(plan)
    if plot and not plan.parts and int(saved.config["model"]["input_dim"]) > 2:
        raise CLIError(f"--plot draws models of 1 or 2 inputs; {plan.model} has {saved.config['model']['input_dim']} "
                       "(--parts --plot draws each additive part on its own columns, at any number of inputs)")
    icols = select_inputs(table, saved.config, plan.inputs, positional=plan.positional)
    if not saved.likelihood_loaded and not plan.quiet:
        print(f"savigp predict: note: latent predictions only ({saved.model.likelihood.note})", file=sys.stderr)
    with rows_out_of_memory(table, "predicting"):
        with file_lines_in_errors(table), model_problems(plan.model):
            pred = saved.predict(table.values[:, icols], num_samples=plan.samples, seed=plan.seed).numpy()
        if saved.likelihood_loaded and pred["mean"] is None and pred["probabilities"] is None and not plan.quiet:
            print(f"savigp predict: note: latent predictions only: the likelihood gives no predictive mean; pass "
                  f"--mean-function FILE.py:FN (E[y | f], or the pair E[y | f], Var[y | f]) for mean_ columns",
                  file=sys.stderr)
        header, values = prediction_table(saved, pred, latent=plan.latent)
        no_mean = saved.likelihood_loaded and pred["mean"] is None and pred["probabilities"] is None
        del pred
        parts = None
        if plan.parts:
            with file_lines_in_errors(table), model_problems(plan.model):
                parts = saved.predict_parts(table.values[:, icols], covariance=bool(plot))
            part_header, part_values = parts_table(parts)
            header, values = header + part_header, np.concatenate([values, part_values], axis=1)
        check_finite_predictions(values, header, table, plan.model)
        write_csv(out, header, values)
    if out != "-" and not plan.quiet:
        print(f"wrote {values.shape[0]} prediction(s) ({', '.join(header)}) to {out}", file=sys.stderr)
    if plot and parts is not None:
        from ..io.plotting import plot_parts

        with file_lines_in_errors(table):
            plot_parts(saved, table.values[:, icols], Y=targets_if_present(table, saved.config, icols), parts=parts,
                       path=plot, input_names=table.names(icols))
        if not plan.quiet:
            print(f"wrote {plot}", file=sys.stderr)
    elif plot:
        from ..io.plotting import density_grid, save_fit_plot, target_columns

        targets = targets_if_present(table, saved.config, icols)
        with file_lines_in_errors(table):
            save_fit_plot(saved, table.values[:, icols], plot, Y=targets,
                          num_samples=plan.samples, seed=plan.seed, input_names=table.names(icols))
        if not plan.quiet:
            print(f"wrote {plot}", file=sys.stderr)
            columns = target_columns(saved, targets) if targets is not None and targets.shape[1] > 1 else None
            if no_mean and len(icols) == 1 and columns is not None:
                print(f"savigp predict: note: {columns.describe()}", file=sys.stderr)
            elif no_mean and len(icols) == 1:
                print("savigp predict: note: " + ("the plot draws y's predictive median and 95% interval read off the "
                      "density exp(log p(y | f)) on a grid of y" if int(saved.model.likelihood.output_dim) == 1
                      and density_grid(saved, targets) is not None else
                      "the plot shows the latent functions only: DATA has no targets to place a grid of y by and the "
                      "likelihood declares no bounded support (CallableLikelihood(support=...))"), file=sys.stderr)
    return EXIT_OK


@contextmanager
def rows_out_of_memory(table, doing: str):
    """A MemoryError while a model works on the file's rows names the file and its rows: every row's
    results are held at once (the Monte Carlo draws are chunked to
    :data:`savigp.model.PREDICT_MEMORY_BUDGET`, so fewer ``--samples`` would not help); the way out
    is fewer rows at a time."""
    try:
        yield
    except TableMemoryError:
        raise
    except MemoryError:
        raise TableMemoryError(f"{table.path}: out of memory {doing} its {table.num_rows} rows (the results of every "
                               "row are held at once; fewer --samples would not help): split the file and run on "
                               "its parts") from None


@contextmanager
def model_problems(model: str):
    """While a loaded model predicts: a K_zz that cannot be factorized (:class:`savigp.CholeskyError`,
    e.g. inducing inputs so far apart that their distances overflow) is a problem of the model
    file's parameters, reported as a ModelFileError naming the file (exit 2), not a failure of the run."""
    from ..linalg.cholesky import CholeskyError
    from ..model_files import ModelFileError

    try:
        yield
    except CholeskyError as err:
        raise ModelFileError(f"{model}: {one_line(err)} (from the model file's parameters)") from None


def check_finite_predictions(values: np.ndarray, header: list, table, model: str) -> None:
    """The last guard of ``predict``: no NaN or inf is ever written with exit status 0.

    ``values (B, C)`` the predictions table, ``header`` its C names, ``table`` the test CSV (for
    the line of the first bad row). A loaded model has finite parameters of bounded magnitude
    (:func:`savigp.model_files.schema.check_tensor`), so this is a model whose parameters still
    combine into overflow.

    Raises:
        ModelFileError: naming the model file, the test file's line and the column.
    """
    from ..model_files import ModelFileError

    bad = ~np.isfinite(values)
    if bad.any():
        r, j = (int(v) for v in np.argwhere(bad)[0])
        raise ModelFileError(f"{model}: its prediction is not finite ({table.where(r)}, {header[j]} = {values[r, j]}; "
                             f"{int(bad.any(axis=1).sum())} of {values.shape[0]} row(s)): the model's parameters are "
                             "out of range for these inputs")


def check_finite_metrics(metrics: dict, model: str) -> None:
    """The last guard of ``evaluate``: every metric finite (or None: undefined), else a
    ModelFileError naming the model file and the metric."""
    import math

    from ..model_files import ModelFileError

    for k, v in metrics.items():
        if isinstance(v, float) and not math.isfinite(v):
            raise ModelFileError(f"{model}: {METRIC_NAMES.get(k, k)} is {v} on these data: the model gives some test "
                                 "rows a zero or non-finite density (its parameters are out of range for them)")


def format_metrics(metrics: dict) -> str:
    """A two-column text table of :func:`savigp.metrics.evaluate`'s dict."""
    rows = [("metric", "value")]
    for k, v in metrics.items():
        if k == "sse_note":
            continue
        if v is None:
            text = "undefined" + (f" ({metrics['sse_note'].split(': ', 1)[-1]})" if k == "sse" and "sse_note" in metrics else "")
        else:
            text = str(v) if isinstance(v, int) else f"{v:.6g}"
        rows.append((METRIC_NAMES.get(k, k), text))
    w = max(len(r[0]) for r in rows)
    return "\n".join(f"{a:<{w}}  {b}" for a, b in rows)


def cmd_evaluate(args) -> int:
    """``savigp evaluate``: SSE and NLPD (regression) or error rate and NLP (classification).
    ``args``: the parsed command line, read once into a :class:`~savigp.cli.plan.EvaluatePlan`."""
    plan = EvaluatePlan.from_args(args)
    table, saved = model_and_table(plan)
    tcols = select_targets(table, saved.config, plan.targets, positional=plan.positional)
    icols = select_inputs(table, saved.config, plan.inputs, exclude=tcols, positional=plan.positional)
    X, Y = table.values[:, icols], table.values[:, tcols]
    import torch

    with rows_out_of_memory(table, "evaluating the model on"):
        validate_targets(saved.model.likelihood, torch.as_tensor(saved.transform_targets(Y)), table, tcols)
        with file_lines_in_errors(table), model_problems(plan.model):
            metrics = saved.evaluate(X, Y, num_samples=plan.samples, seed=plan.seed)
    check_finite_metrics(metrics, plan.model)
    if plan.json:
        print(json.dumps(metrics))
    else:
        print(format_metrics(metrics))
    return EXIT_OK
