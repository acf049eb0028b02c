"""The kernel structure search's table, when the model file keeps it: ``savigp train --kernel
search`` writes ``config["training"]["kernel_search"]`` = ``{"expression", "complete", "seconds",
"table"}`` (:func:`savigp.cli.searched_model.record`), one row per candidate fitted
(:attr:`savigp.KernelSearchResult.table`: level, expression, ELBO and its standard error, the number
of hyper-parameters, the penalized score, seconds, converged, chosen, and why a failed candidate
failed). A file without it (a model not chosen by ``--kernel search``, or written before files kept
the table) gives None and the report shows no search section.
"""
from __future__ import annotations

from typing import Optional

#: where a model file keeps the search (``config[outer][inner]``)
SEARCH_KEYS = (("training", "kernel_search"),)
#: the table's columns: (key in a row, heading)
COLUMNS = (("level", "level"), ("expression", "expression"), ("elbo", "ELBO"), ("elbo_stderr", "s.e."),
           ("num_hypers", "hypers"), ("score", "score"), ("seconds", "s"), ("converged", "converged"),
           ("chosen", "chosen"), ("failed", "failed"))


def _rows(value) -> Optional[list]:
    if isinstance(value, dict):
        value = value.get("table")
    if isinstance(value, list) and value and all(isinstance(r, dict) for r in value):
        return value
    return None


def search_rows(config: Optional[dict]) -> Optional[tuple]:
    """The search from a model file's configuration as ``(headings, rows of strings, summary)``, or
    None when it keeps none. A column no row fills is left out (``failed`` when none failed);
    ``summary`` is one sentence: the chosen expression, the seconds, and whether the time budget
    stopped the search."""
    for outer, inner in SEARCH_KEYS:
        record = ((config or {}).get(outer) or {}).get(inner)
        rows = _rows(record)
        if rows is not None:
            break
    else:
        return None
    cols = [(k, h) for k, h in COLUMNS if any(r.get(k) is not None for r in rows)]
    record = record if isinstance(record, dict) else {}
    summary = ""
    if record.get("expression"):
        seconds = record.get("seconds")
        summary = (f"Chosen: {record['expression']}" + (f" ({seconds:.0f} s" if isinstance(seconds, (int, float)) else " (")
                   + ("" if record.get("complete", True) else ", stopped by its time budget") + ").")
        summary = summary.replace(" ()", "")
    return [h for _, h in cols], [[_cell(r.get(k)) for k, _ in cols] for r in rows], summary


def _cell(v) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.2f}"
    return "" if v is None else str(v)
