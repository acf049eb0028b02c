"""The kernel structure search's table (:attr:`savigp.KernelSearchResult.table`), when the model
file keeps it: one row per candidate fitted (level, expression, ELBO and its standard error, the
number of hyper-parameters, the penalized score, seconds, converged, chosen). A file written
without it (any model not chosen by ``--kernel search``, or written before files kept the table)
gives None and the report shows no search section."""
from __future__ import annotations

from typing import Optional

#: where a model file may keep the search's rows (``config[outer][inner]``), first found first
SEARCH_KEYS = (("metadata", "kernel_search"), ("metadata", "search"), ("training", "kernel_search"))
#: the table's columns: (key in a row, heading)
COLUMNS = (("level", "level"), ("expression", "expression"), ("elbo", "ELBO"), ("elbo_stderr", "s.e."),
           ("num_hypers", "hypers"), ("score", "score"), ("seconds", "s"), ("converged", "converged"),
           ("chosen", "chosen"))


def _rows(value) -> Optional[list]:
    if isinstance(value, dict):
        value = value.get("table")
    if isinstance(value, list) and value and all(isinstance(r, dict) for r in value):
        return value
    return None


def search_rows(config: Optional[dict]) -> Optional[tuple]:
    """The search's table as ``(headings, rows of strings)`` from a model file's configuration, or
    None when it keeps none. Columns a row lacks are left out if no row has them."""
    for outer, inner in SEARCH_KEYS:
        rows = _rows(((config or {}).get(outer) or {}).get(inner))
        if rows is not None:
            break
    else:
        return None
    cols = [(k, h) for k, h in COLUMNS if any(k in r for r in rows)]
    cols += sorted({(k, k) for r in rows for k in r if k not in dict(COLUMNS) and not isinstance(r[k], (list, dict))})
    return [h for _, h in cols], [[_cell(r.get(k)) for k, _ in cols] for r in rows]


def _cell(v) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.2f}"
    return "" if v is None else str(v)
