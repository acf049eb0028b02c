"""The experiments' shared runner: where the scripts import from, their common options
(``--data-dir``, ``--out``, ``--threads``, ``--seed`` / ``--seeds``, ``--device`` / ``--dtype``),
locating and reading the CSV splits of ``../shared/data``, standardizing with training statistics
(the statistics ``savigp train`` uses), the paper's metrics (Gaussian NLPD, SSE) written once,
writing CSV / Markdown / JSON results atomically, printing tables, summarizing over splits, and a
box-plot helper in the style of the paper's figures.

A script is run as a file, ``python experiments/<name>.py ...``: Python puts ``experiments/`` first
on ``sys.path``, so the script imports this module as ``_common`` (and ``_flagship_io``,
``seismic_model``, ... the same way); another script it imports by its package name
(``from experiments import mnist``: a name such as ``mnist`` may also be an installed package).
Importing this module puts the repository root on ``sys.path`` (a checkout without
``pip install -e .``); importing a script as ``experiments.<name>`` (the tests, ``python -m
experiments.<name>``) goes through ``experiments/__init__.py``, which imports this module first.
:func:`_importable` is the one place that edits ``sys.path`` for the experiments.

Nothing here knows about a particular experiment; every function takes plain numpy arrays or
tensors, lists of dicts, paths or an ``argparse`` parser.
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import sys
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS_DIR = REPO_ROOT / "experiments"
DEFAULT_DATA_DIR = REPO_ROOT.parent / "shared" / "data"


def _importable() -> None:
    """Make ``savigp`` / ``likelihoods`` (the repository root) and the scripts' own modules
    (``experiments/``) importable, and give this module one identity under both of its names
    (``_common`` and ``experiments._common``), so its classes are the same objects whichever way a
    script was reached."""
    if str(REPO_ROOT) not in sys.path:  # this checkout's savigp before any installed one
        sys.path.insert(0, str(REPO_ROOT))
    if str(EXPERIMENTS_DIR) not in sys.path:  # after the installed packages: a script's name shadows none
        sys.path.append(str(EXPERIMENTS_DIR))
    other = "_common" if __name__ == "experiments._common" else "experiments._common"
    sys.modules.setdefault(other, sys.modules[__name__])


_importable()

from savigp.io.atomic_files import atomic_write  # noqa: E402  (after the repository is importable)


# ---------------------------------------------------------------------------------- data
def resolve_data_dir(data_dir: Optional[str] = None, folder: Optional[str] = None) -> Path:
    """``data_dir`` if given, else ``<repo>/../shared/data``; with ``folder``, that sub-folder of it.

    Raises FileNotFoundError naming the missing path and the ``--data-dir`` option."""
    path = Path(data_dir) if data_dir else DEFAULT_DATA_DIR
    if not path.is_dir():
        raise FileNotFoundError(
            f"data folder {path} not found: pass --data-dir, or place the shared data at {DEFAULT_DATA_DIR}"
        )
    if folder is not None:
        if not (path / folder).is_dir():
            raise FileNotFoundError(f"data folder {path / folder} not found: --data-dir {path} has no {folder}/")
        return path / folder
    return path


def read_csv_matrix(path: os.PathLike) -> np.ndarray:
    """A header-less numeric CSV file as a float64 ``(rows, cols)`` array (a single column stays 2-D)."""
    arr = np.loadtxt(path, delimiter=",", dtype=np.float64, ndmin=2)
    if not np.isfinite(arr).all():
        bad = np.argwhere(~np.isfinite(arr))[:5].tolist()
        raise ValueError(f"{path}: non-finite values at (row, col) {bad}")
    return arr


def available_splits(folder: os.PathLike, prefix: str = "train_") -> list[int]:
    """The split numbers s for which ``folder/{prefix}{s}.csv`` exists, sorted."""
    ids = []
    for p in Path(folder).glob(f"{prefix}*.csv"):
        m = re.fullmatch(re.escape(prefix) + r"(\d+)\.csv", p.name)
        if m:
            ids.append(int(m.group(1)))
    return sorted(ids)


def read_split(folder: os.PathLike, split: int, target_cols: int = 1) -> tuple[np.ndarray, ...]:
    """Read ``train_{split}.csv`` and ``test_{split}.csv`` of ``folder``, whose first
    ``target_cols`` columns are targets and the rest inputs.

    Returns:
        X_train ``(N, D)``, Y_train ``(N, target_cols)``, X_test, Y_test.
    """
    out = []
    for kind in ("train", "test"):
        path = Path(folder) / f"{kind}_{split}.csv"
        if not path.is_file():
            raise FileNotFoundError(f"split {split}: {path} not found (splits present: {available_splits(folder)})")
        arr = read_csv_matrix(path)
        if arr.shape[1] <= target_cols:
            raise ValueError(f"{path}: {arr.shape[1]} columns, need more than {target_cols} target column(s)")
        out += [arr[:, target_cols:], arr[:, :target_cols]]
    return out[0], out[1], out[2], out[3]


class Standardizer:
    """Affine map x -> (x - mean) / std with statistics of the training data, the statistics
    ``savigp train`` standardizes with (:func:`savigp.model_files.builder.standardization_stats`:
    column means and population standard deviations, a constant column keeps std 1).
    ``log_scale`` is sum(log std): the log-Jacobian term to add to a per-row negative log density
    computed on the standardized scale to get it on the original one.
    """

    def __init__(self, data: np.ndarray):
        from savigp.model_files.builder import standardization_stats

        stats = standardization_stats(np.asarray(data).reshape(len(data), -1))
        self.mean = np.asarray(stats["mean"], dtype=np.float64)
        self.std = np.asarray(stats["std"], dtype=np.float64)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return (x - self.mean) / self.std

    def inverse(self, z: np.ndarray) -> np.ndarray:
        return z * self.std + self.mean

    @property
    def log_scale(self) -> float:
        return float(np.log(self.std).sum())


class Identity(Standardizer):
    """A :class:`Standardizer` that changes nothing (for data used as given)."""

    def __init__(self, dim: int):
        self.mean = np.zeros(dim)
        self.std = np.ones(dim)


def nested_subsets(n: int, sizes: Iterable[int], seed: int) -> dict[int, np.ndarray]:
    """Index sets of the given sizes that are nested (smaller ones inside larger ones), from one
    random permutation of range(n): the paper's placement of inducing inputs (Bonilla et al. 2019, §9.2)."""
    perm = np.random.default_rng(seed).permutation(n)
    return {int(m): np.sort(perm[: int(m)]) for m in sizes}


# ---------------------------------------------------------------------------------- tables
def _atomic_write(path: os.PathLike, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, "w", newline="") as f:
        f.write(text)


def write_text_atomic(path: os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename (readers never see half a file)."""
    _atomic_write(path, text)


def write_csv_atomic(path: os.PathLike, rows: Sequence[dict], columns: Optional[Sequence[str]] = None) -> None:
    """Write a list of dicts as CSV (columns: ``columns`` or the union of keys in first-seen order)."""
    if columns is None:
        columns = []
        for r in rows:
            columns += [k for k in r if k not in columns]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: _fmt_csv(r.get(k, "")) for k in columns})
    _atomic_write(path, buf.getvalue())


def read_csv_rows(path: os.PathLike) -> list[dict]:
    """A CSV written by :func:`write_csv_atomic` as a list of dicts (numbers parsed back to float)."""
    with open(path, newline="") as f:
        return [{k: _parse(v) for k, v in r.items()} for r in csv.DictReader(f)]


def _fmt_csv(v):
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else str(v)
    return v


def _parse(v: str):
    try:
        return float(v)
    except (TypeError, ValueError):
        return v


def fmt_number(v, digits: int = 4) -> str:
    """A compact string for a table cell: floats to ``digits`` significant digits, others as str."""
    if isinstance(v, (float, np.floating)):
        if not math.isfinite(v):
            return str(v)
        return f"{v:.{digits}g}"
    return str(v)


def markdown_table(rows: Sequence[dict], columns: Sequence[str], headers: Optional[Sequence[str]] = None,
                   digits: int = 4) -> str:
    """A GitHub Markdown table of ``rows`` (dicts) restricted to ``columns``."""
    headers = list(headers or columns)
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join("---" for _ in headers) + " |"]
    for r in rows:
        lines.append("| " + " | ".join(fmt_number(r.get(c, ""), digits) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def summarize(rows: Sequence[dict], keys: Sequence[str], metrics: Sequence[str]) -> list[dict]:
    """Group ``rows`` by the values of ``keys`` (first-seen order) and give, per group, the number of
    rows ``n`` and ``{metric}_mean`` / ``{metric}_std`` (population std over the group) of each
    metric present as a finite number."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r.get(k) for k in keys), []).append(r)
    out = []
    for gkey, members in groups.items():
        s = dict(zip(keys, gkey))
        s["n"] = len(members)
        for m in metrics:
            vals = np.array([float(r[m]) for r in members if _is_number(r.get(m))], dtype=float)
            if vals.size:
                s[f"{m}_mean"] = float(vals.mean())
                s[f"{m}_std"] = float(vals.std())
        out.append(s)
    return out


def _is_number(v) -> bool:
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


# ---------------------------------------------------------------------------------- figures
def grouped_boxplot(ax, data: dict, groups: Sequence, members: Sequence, *, ylabel: str = "",
                    xlabel: str = "", baselines: Optional[dict] = None, colors: Optional[Sequence[str]] = None,
                    group_label: Callable = str) -> None:
    """Box plots of ``data[(group, member)]`` (a list of values, e.g. one per split), grouped along
    the x axis by ``groups`` (e.g. sparsity factors), one coloured box per member (e.g. posterior)
    inside each group -- the layout of the paper's figures 1-4. Whiskers at 1.5 IQR (the paper's);
    every value is also drawn as a dot.

    ``baselines`` maps a label to a list of values (e.g. exact GP per split), drawn as an extra
    group on the right.
    """
    import matplotlib.patches as mpatches

    colors = list(colors or ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"])
    width = 0.8 / max(1, len(members))
    ticks, labels = [], []
    for gi, g in enumerate(groups):
        for mi, m in enumerate(members):
            vals = [v for v in data.get((g, m), []) if _is_number(v)]
            if not vals:
                continue
            pos = gi + (mi - (len(members) - 1) / 2) * width
            bp = ax.boxplot([vals], positions=[pos], widths=width * 0.85, whis=1.5, patch_artist=True,
                            manage_ticks=False, showfliers=False)
            for box in bp["boxes"]:
                box.set_facecolor(colors[mi % len(colors)])
                box.set_alpha(0.75)
            for med in bp["medians"]:
                med.set_color("black")
            ax.scatter(np.full(len(vals), pos), vals, s=9, color="black", zorder=3)  # every split
        ticks.append(gi)
        labels.append(group_label(g))
    handles = [mpatches.Patch(color=colors[i % len(colors)], alpha=0.75, label=str(m)) for i, m in enumerate(members)]
    if baselines:
        for bi, (name, vals) in enumerate(baselines.items()):
            vals = [v for v in vals if _is_number(v)]
            if not vals:
                continue
            pos = len(groups) + bi
            bp = ax.boxplot([vals], positions=[pos], widths=0.5, whis=1.5, patch_artist=True, manage_ticks=False,
                            showfliers=False)
            for box in bp["boxes"]:
                box.set_facecolor("lightgrey")
            for med in bp["medians"]:
                med.set_color("black")
            ax.scatter(np.full(len(vals), pos), vals, s=9, color="black", zorder=3)
            ticks.append(pos)
            labels.append(name)
    ax.set_xticks(ticks)
    ax.set_xticklabels(labels)
    ax.set_xlim(-0.6, max(ticks) + 0.6 if ticks else 1)
    ax.set_ylabel(ylabel)
    ax.set_xlabel(xlabel)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(handles=handles, fontsize="small", loc="best")


# ---------------------------------------------------------------------------------- options
def add_data_argument(parser, folder: Optional[str] = None) -> None:
    """``--data-dir`` (default ``../shared/data``); read it with :func:`resolve_data_dir`."""
    what = f"folder holding {folder}/" if folder else "folder with the datasets"
    parser.add_argument("--data-dir", default=None, help=f"{what} (default ../shared/data)")


def add_out_argument(parser, default: Optional[str] = None, help: Optional[str] = None) -> None:
    """``--out``: where the script writes its results (every file atomically)."""
    parser.add_argument("--out", default=default, help=help or f"output folder (default {default})")


def add_threads_argument(parser, default: Optional[int] = None, help: Optional[str] = None) -> None:
    """``--threads``: torch's intra-op CPU threads (the script calls ``torch.set_num_threads``)."""
    parser.add_argument("--threads", type=int, default=default, help=help)


def add_seed_argument(parser, default: int = 0, help: Optional[str] = None) -> None:
    """``--seed``: one integer seed."""
    parser.add_argument("--seed", type=int, default=default, help=help)


def add_seeds_argument(parser, default: str = "0", help: Optional[str] = None) -> None:
    """``--seeds``: comma-separated integer seeds (read with :func:`parse_ints`)."""
    parser.add_argument("--seeds", default=default, help=help or "comma-separated seeds")


def parse_ints(parser, text: str, option: str = "--seeds") -> list[int]:
    """``"0,1, 2"`` -> ``[0, 1, 2]``; anything else is ``parser.error`` naming ``option`` (exit 2)."""
    try:
        values = [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        values = []
    if not values:
        parser.error(f"{option} must be comma-separated integers, got {text!r}")
    return values


# ---------------------------------------------------------------------------------- metrics
def _tensor(x):
    import torch

    return x if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x, dtype=np.float64))


def gaussian_log_density(y, mean, var):
    """log N(y; mean, var) elementwise (broadcast), by
    :func:`likelihoods.densities.gaussian_log_density`, the density the Gaussian likelihoods use;
    a tensor if any argument is one, else a numpy array."""
    import torch

    from likelihoods.densities import gaussian_log_density as _log_density

    out = _log_density(_tensor(y), _tensor(mean), _tensor(var))
    return out if any(isinstance(a, torch.Tensor) for a in (y, mean, var)) else out.numpy()


def gaussian_nlpd(y, mean, var) -> float:
    """Mean over points of -log N(y; mean, var) (the paper's NLPD of a Gaussian predictive,
    Bonilla et al. 2019, §9.1)."""
    return float(-gaussian_log_density(y, mean, var).mean())


def sse(y, mean) -> float:
    """The paper's SSE: mean squared error / variance of the test targets, averaged over outputs
    (:func:`savigp.metrics.standardized_squared_error`); ``y``, ``mean`` ``(N,)`` or ``(N, P)``,
    tensors or numpy arrays."""
    from savigp.metrics import standardized_squared_error

    y, mean = _tensor(y), _tensor(mean)
    if y.dim() == 1:
        y, mean = y[:, None], mean[:, None]
    return standardized_squared_error(y, mean)


# ---------------------------------------------------------------------------------- results
def write_json_atomic(path: os.PathLike, obj) -> Path:
    """``obj`` as indented JSON at ``path`` (written atomically; numpy numbers as floats)."""
    _atomic_write(path, json.dumps(obj, indent=2, default=float) + "\n")
    return Path(path)


def print_table(rows: Sequence[dict], columns: Sequence[str], headers: Optional[Sequence[str]] = None,
                digits: int = 4, file=None) -> None:
    """Print ``rows`` as a Markdown table (:func:`markdown_table`) to ``file`` (stdout)."""
    print(markdown_table(rows, columns, headers, digits), end="", file=file or sys.stdout, flush=True)


# ---------------------------------------------------------------------------------------- device and dtype
DTYPES = ("float64", "float32")


def add_device_arguments(parser, *, default_dtype: Optional[str] = "float64") -> None:
    """``--device`` (default cpu) and ``--dtype`` (float64 or float32) for the script's models;
    ``default_dtype=None``: float64 on the CPU, float32 on an accelerator."""
    parser.add_argument("--device", default="cpu",
                        help="torch device of the models: cpu (default), cuda, cuda:1, ...")
    parser.add_argument("--dtype", default=default_dtype, choices=DTYPES,
                        help="floating-point type of the models (default "
                             + (default_dtype or "float64 on the CPU, float32 on CUDA") + ")")


def device_and_dtype(args):
    """``(torch.device, torch.dtype)`` from :func:`add_device_arguments`'s options; a clear
    ``SystemExit`` for a device that does not exist here."""
    import torch

    try:
        device = torch.device(args.device)
    except RuntimeError as err:
        raise SystemExit(f"--device {args.device!r}: {err}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: no CUDA device here (torch {torch.__version__})")
    name = args.dtype or ("float64" if device.type == "cpu" else "float32")
    return device, getattr(torch, name)
