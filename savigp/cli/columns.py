"""Which columns of a CSV file ``predict`` and ``evaluate`` read for a trained model, and the
check of target values with the offending file line in the message."""
from __future__ import annotations

import re
from typing import Optional

from ..io.csv_data import DataError, Table, columns_by_name, quote_names, resolve_columns
from .errors import one_line


def validate_targets(likelihood, Y, table: Table, tcols: list) -> None:
    """``likelihood.validate_targets(Y)``, re-raised as a DataError naming the first bad line.

    ``Y`` is the tensor ``(N, P)`` given to the model; rows are in file order, so the first bad
    row is found by bisection on prefixes (O(log N) validations), and "row k" in the likelihood's
    message is rewritten as the file's line number.
    """
    try:
        likelihood.validate_targets(Y)
        return
    except ValueError as err:
        msg = one_line(err)
    lo, hi = 0, Y.shape[0]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            likelihood.validate_targets(Y[:mid])
            lo = mid
        except ValueError:
            hi = mid
    N = Y.shape[0]
    msg = re.sub(r"\brow (\d+)\b",
                 lambda m: f"line {int(table.lines[int(m.group(1))])}" if int(m.group(1)) < N else m.group(0), msg)
    raise DataError(f"{table.where(hi - 1, tcols)}: {msg}")


def select_inputs(table: Table, config: dict, inputs: Optional[str], exclude=(), positional: bool = False) -> list:
    """Input columns of a predict/evaluate file for a model trained on ``config["columns"]``:
    ``--inputs`` if given; else by the training header's names (every one must be there); a model
    trained without a header reads the same column indices from a file of the same width; by
    position (the recorded indices, or every non-target column) only with ``--positional``."""
    D = int(config["model"]["input_dim"])
    cols = config.get("columns") or {}
    trained = cols.get("inputs") or []
    if inputs is not None:
        icols = resolve_columns(inputs, table, "--inputs")
        bad = [j for j in icols if j in exclude]
        if bad:
            raise DataError(f"column {table.column_label(bad[0])} of {table.path} is both an input and a target")
    elif cols.get("header") and not positional:
        icols = columns_by_name(table, trained, "input", "--inputs")
    elif cols and not cols.get("header") and table.header is not None and not positional:
        raise DataError(f"{table.path}: has a header ({quote_names(table.header)}) but the model was trained "
                        f"on a file without one (input columns {cols.get('input_indices')}); name the columns with "
                        "--inputs, or pass --positional to take them by position")
    elif cols and (positional or not cols.get("header")) and table.num_columns == cols.get("num_columns") \
            and not set(cols.get("input_indices", [])) & set(exclude):
        icols = list(cols["input_indices"])
    elif positional:
        icols = [j for j in range(table.num_columns) if j not in exclude]
    else:
        raise DataError(f"{table.path}: cannot tell which of its {table.num_columns} column(s) are the model's "
                        f"{D} input(s) ({'trained on columns ' + quote_names(trained) if trained else 'the model records no column names'}); "
                        "name them with --inputs, or pass --positional to take them by position")
    if len(icols) != D:
        raise DataError(f"{table.path}: {len(icols)} input column(s) selected but the model takes {D} "
                        f"(trained on columns {quote_names(trained) or '?'})")
    return icols


def select_targets(table: Table, config: dict, targets: Optional[str], positional: bool = False) -> list:
    """Target columns of an evaluate file: ``--targets``, else the training names, else the
    recorded indices in a file of the same width."""
    cols = config.get("columns") or {}
    P = len(config.get("example_target") or [0])
    if targets is not None:
        tcols = resolve_columns(targets, table, "--targets")
    elif cols.get("header") and not positional:
        tcols = columns_by_name(table, cols.get("targets") or [], "target", "--targets")
    elif cols and not cols.get("header") and table.header is not None and not positional:
        raise DataError(f"{table.path}: has a header ({quote_names(table.header)}) but the model was trained "
                        f"on a file without one (target columns {cols.get('target_indices')}); name them with "
                        "--targets, or pass --positional")
    elif cols and table.num_columns == cols.get("num_columns"):
        tcols = list(cols["target_indices"])
    else:
        trained = quote_names(cols.get("targets") or []) or "no names recorded"
        raise DataError(f"{table.path}: give the target column(s) with --targets (the model was trained on {trained})")
    if len(tcols) != P:
        raise DataError(f"{table.path}: --targets selects {len(tcols)} column(s) but the model predicts {P}")
    return tcols


def targets_if_present(table: Table, config: dict, icols: list):
    """The training targets' columns of a predict file when it has them (by name), else None."""
    cols = config.get("columns") or {}
    names = cols.get("targets") or []
    if table.header is None or not names or not all(n in table.header for n in names):
        return None
    tcols = [table.header.index(n) for n in names]
    return None if set(tcols) & set(icols) else table.values[:, tcols]
