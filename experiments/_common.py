"""The experiments' helper library: their options (the model and training options taken from the
``savigp`` command line's own parser, :func:`add_cli_options`), locating and reading the CSV splits
of ``../shared/data``, standardizing with training statistics (the statistics ``savigp train``
uses), the paper's metrics (Gaussian NLPD, SSE) written once, results (CSV / Markdown tables, a JSON
record with the environment, PNG figures) each written atomically, printing and summarizing tables,
a box-plot helper in the style of the paper's figures, and a clock of training time alone.

The scripts form the package ``experiments``: each is run from the repository root as ``python -m
experiments.<name> ...`` and imports this module and its siblings by their package names
(``from experiments import _common``, ``from experiments import mnist``); nothing edits
``sys.path``.

Nothing here knows about a particular experiment; every function takes plain numpy arrays or
tensors, lists of dicts, paths or an ``argparse`` parser.
"""
from __future__ import annotations

import argparse
import csv
import inspect
import io
import json
import math
import os
import platform
import re
import sys
import time
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

import numpy as np

from savigp.io.atomic_files import atomic_write

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA_DIR = REPO_ROOT.parent / "shared" / "data"


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
@lru_cache(maxsize=None)
def _cli_actions(command: str) -> dict:
    """``{option string: argparse action}`` of ``savigp <command>`` (built once per process)."""
    from savigp.cli.parser import build_parser

    cli = build_parser()
    commands = next(a for a in cli._actions if isinstance(a, argparse._SubParsersAction)).choices
    if command not in commands:
        raise ValueError(f"command: savigp has no command {command!r} (it has {', '.join(commands)})")
    return {flag: a for a in commands[command]._actions for flag in a.option_strings}


#: the constructor arguments an argparse action is rebuilt from (those its class takes)
_ACTION_FIELDS = ("dest", "nargs", "const", "default", "type", "choices", "required", "help", "metavar")
#: a "(default ...)" note in the CLI's help (one level of nested parentheses, as in "min(N, 100)")
_DEFAULT_NOTE = re.compile(r"\s*\(default[^()]*(?:\([^()]*\)[^()]*)*\)")


def add_cli_options(parser, *flags: str, command: str = "train", defaults: Optional[dict] = None,
                    default_help: Optional[dict] = None, helps: Optional[dict] = None) -> None:
    """Add the options ``flags`` (e.g. ``"--lr"``, ``"--samples"``) of ``savigp <command>`` to
    ``parser`` (or an argument group), with the command line's own action, type, choices, metavar
    and help (:func:`savigp.cli.parser.build_parser`): a training or model option is typed once, in
    the CLI, and an experiment takes it from there.

    ``defaults`` maps an option to this script's default (the CLI's otherwise); the help then drops
    the CLI's "(default ...)" note and states ``default_help[option]`` (e.g. ``"100; 50 with
    --quick"``) or the default. ``helps`` replaces an option's help text entirely.

    Raises ValueError naming an option the command does not have.
    """
    actions = _cli_actions(command)
    defaults, default_help, helps = dict(defaults or {}), dict(default_help or {}), dict(helps or {})
    unknown = sorted((set(defaults) | set(default_help) | set(helps)) - set(flags))
    if unknown:
        raise ValueError(f"defaults/default_help/helps name {unknown}, which are not among the flags {list(flags)}")
    for flag in flags:
        if flag not in actions:
            raise ValueError(f"flags: savigp {command} has no option {flag!r} "
                             f"(it has {', '.join(sorted(f for f in actions if f.startswith('--')))})")
        action = actions[flag]
        taken = inspect.signature(type(action).__init__).parameters
        kwargs = {f: getattr(action, f) for f in _ACTION_FIELDS if f in taken and hasattr(action, f)}
        if flag in defaults or flag in default_help:
            kwargs["default"] = defaults.get(flag, action.default)
            note = default_help.get(flag, kwargs["default"])
            kwargs["help"] = f"{_DEFAULT_NOTE.sub('', action.help or '')} (default {note})".replace("%", "%%").lstrip()
        if flag in helps:
            kwargs["help"] = helps[flag]
        parser.add_argument(*action.option_strings, action=type(action), **kwargs)


def uses_score_function(estimator: str) -> bool:
    """Whether the registered estimator ``estimator`` is a score-function one (its declared capability,
    :attr:`savigp.estimators.base.Estimator.score_function`), for the scripts that pick their draws by it."""
    from savigp import ESTIMATORS

    return bool(ESTIMATORS[ESTIMATORS.canonical(estimator)].score_function)


def add_data_argument(parser, folder: Optional[str] = None) -> None:
    """``--data-dir`` (default ``../shared/data``); read it with :func:`resolve_data_dir`."""
    what = f"folder holding {folder}/" if folder else "folder with the datasets"
    parser.add_argument("--data-dir", default=None, help=f"{what} (default ../shared/data)")


def add_out_argument(parser, default: Optional[str] = None, help: Optional[str] = None) -> None:
    """``--out``: where the script writes its results (every file atomically)."""
    parser.add_argument("--out", default=default, help=help or f"output folder (default {default})")


def add_threads_argument(parser, default: Optional[int] = None, help: Optional[str] = None) -> None:
    """``savigp train``'s ``--threads`` (torch's intra-op CPU threads; the script calls
    ``torch.set_num_threads``, or :func:`set_threads` when ``default`` is None); ``help`` replaces
    the CLI's help."""
    note = default if default is not None else "1 with --quick, else the cores up to 4 (set_threads)"
    add_cli_options(parser, "--threads", defaults={"--threads": default}, default_help={"--threads": note},
                    helps={"--threads": help} if help else None)


def add_seed_argument(parser, default: int = 0, help: Optional[str] = None) -> None:
    """``savigp train``'s ``--seed`` (one integer), default ``default``; ``help`` replaces the CLI's help."""
    add_cli_options(parser, "--seed", defaults={"--seed": default}, helps={"--seed": help} if help else None)


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
def add_device_arguments(parser, *, default_dtype: Optional[str] = "float64") -> None:
    """``savigp train``'s ``--device`` (default cpu) and ``--dtype`` (its choices) for the script's
    models; ``default_dtype=None``: float64 on the CPU, float32 on an accelerator."""
    add_cli_options(parser, "--device", "--dtype", defaults={"--device": "cpu", "--dtype": default_dtype},
                    helps={"--dtype": "floating-point type of the models (default "
                                      + (default_dtype or "float64 on the CPU, float32 on CUDA") + ")"})


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


# ---------------------------------------------------------------------------------- result folders and figures
def out_dir(arg: Optional[str], name: str) -> Path:
    """The output folder (created): ``arg`` if given, else ``results/<name>`` under the current folder."""
    path = Path(arg) if arg else Path("results") / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def set_threads(quick: bool, threads: Optional[int]) -> int:
    """Limit torch's intra-op threads (1 in quick mode: the test machines are shared)."""
    import torch

    n = threads if threads else (1 if quick else max(1, min(4, os.cpu_count() or 1)))
    torch.set_num_threads(int(n))
    return int(n)


def write_table(rows: Sequence[dict], stem: Path, columns: Optional[Sequence[str]] = None,
                title: Optional[str] = None, notes: Iterable[str] = ()) -> tuple[Path, Path]:
    """Write ``rows`` (a list of dicts) to ``stem.csv`` (full precision) and ``stem.md`` (rounded),
    each atomically. Returns the two paths."""
    stem = Path(stem)
    if columns is None:
        columns = []
        for r in rows:
            columns += [k for k in r if k not in columns]
    csv_path, md_path = stem.with_suffix(".csv"), stem.with_suffix(".md")
    write_csv_atomic(csv_path, rows, columns)
    lines = [f"# {title}", ""] if title else []
    lines.append(markdown_table(rows, columns).rstrip("\n"))
    notes = list(notes)
    if notes:
        lines.append("")
        lines += [f"- {n}" for n in notes]
    write_text_atomic(md_path, "\n".join(lines) + "\n")
    return csv_path, md_path


def write_result(path: Path, argv: Optional[Sequence[str]], **fields) -> dict:
    """An experiment's result record: ``fields`` plus the environment, the command-line arguments
    and the output folder, written as JSON to ``path``; returns the record."""
    result = dict(fields)
    result.update(environment=environment(), argv=list(argv) if argv is not None else sys.argv[1:],
                  out=str(Path(path).parent))
    write_json_atomic(path, result)
    return result


def environment() -> dict:
    """What the numbers were measured on (written next to every results table)."""
    import numpy
    import torch

    return {"python": platform.python_version(), "torch": torch.__version__, "numpy": numpy.__version__,
            "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(), "machine": platform.machine(),
            "cuda": bool(torch.cuda.is_available()), "date": time.strftime("%Y-%m-%d %H:%M:%S")}


def pyplot():
    """matplotlib.pyplot with the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def script_parser(doc: str, name: str, *, quick_help: Optional[str] = None, data_folder: Optional[str] = None,
           epilog: bool = False) -> argparse.ArgumentParser:
    """The flagship scripts' common options: ``--quick`` (when ``quick_help`` is given), ``--out``
    (default ``results/<name>``) and ``--data-dir`` (when the script reads ``data_folder``)."""
    parts = doc.split("\n\n", 1)
    p = argparse.ArgumentParser(description=parts[0], epilog=parts[1] if epilog and len(parts) > 1 else None,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    if quick_help is not None:
        p.add_argument("--quick", action="store_true", help=quick_help)
    add_out_argument(p, None, help=f"output folder (default results/{name})")
    if data_folder is not None:
        add_data_argument(p, data_folder)
    return p


def save_figure(fig, path: Path, title: Optional[str] = None, dpi: int = 120) -> Path:
    """Optional suptitle, tight layout, the figure at ``path`` (PNG at ``dpi``; written atomically,
    its folder created), and the figure closed."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    if title is not None:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    with atomic_write(path, "wb") as fh:
        fig.savefig(fh, dpi=dpi, format=Path(path).suffix.lstrip(".") or None)
    pyplot().close(fig)
    return path


# ---------------------------------------------------------------------------------- baselines
def gpytorch_kernel(kernel: str, D: int, ard: bool, batch_shape, lengthscale):
    """GPyTorch's ``ScaleKernel(RBFKernel())``, or for ``"composite"``
    ``ScaleKernel(RBFKernel()) + ScaleKernel(PeriodicKernel() * RBFKernel())``, with the length-scales,
    period and variances of ``experiments.benchmark.savigp_kernel`` (GPyTorch's periodic length-scale is savigp's l^2)."""
    import gpytorch.kernels as gk

    dims = D if ard else None
    first = gk.ScaleKernel(gk.RBFKernel(ard_num_dims=dims, batch_shape=batch_shape), batch_shape=batch_shape)
    first.base_kernel.lengthscale, first.outputscale = lengthscale, 1.0
    if kernel == "rbf":
        return first
    periodic = gk.PeriodicKernel(ard_num_dims=dims, batch_shape=batch_shape)
    periodic.lengthscale, periodic.period_length = lengthscale ** 2, 1.0
    rbf = gk.RBFKernel(ard_num_dims=dims, batch_shape=batch_shape)
    rbf.lengthscale = lengthscale
    second = gk.ScaleKernel(periodic * rbf, batch_shape=batch_shape)
    second.outputscale = 1.0
    return first + second


def gpytorch_svgp(Z, num_tasks: int = 0, *, ard: bool = True, learn_inducing: bool = True,
                  shared: bool = False, diagonal: bool = False, kernel: str = "rbf", lengthscale: float = 1.0):
    """The GPyTorch baseline of benchmark.py, mnist.py and airline.py (Hensman et al. 2015's SVGP in
    GPyTorch, Gardner et al. 2018), with inducing inputs ``Z (M, D)``: a whitened full-Cholesky q(u)
    (``CholeskyVariationalDistribution`` in a ``VariationalStrategy``; ``diagonal``: its mean-field
    ``MeanFieldVariationalDistribution``), zero mean, a scaled RBF kernel (ARD or one length-scale);
    with ``num_tasks`` = Q > 0, Q independent GPs sharing the initial Z
    (``IndependentMultitaskVariationalStrategy``, batch shape ``(Q,)``), each with its own kernel and
    inducing inputs, or with ``shared`` one kernel and one set of inducing inputs for all Q (only
    q(u) is batched: savigp's ``shared_kernel``). ``lengthscale``: a float, or ``(D,)`` with ``ard``."""
    import gpytorch
    import torch
    from gpytorch.variational import (CholeskyVariationalDistribution, IndependentMultitaskVariationalStrategy,
                                      VariationalStrategy)

    M, D = Z.shape
    batch_shape = torch.Size([num_tasks]) if num_tasks else torch.Size([])
    prior_batch = torch.Size([]) if shared else batch_shape  # of the kernel, the mean and Z
    family = (gpytorch.variational.MeanFieldVariationalDistribution if diagonal
              else CholeskyVariationalDistribution)

    class SVGP(gpytorch.models.ApproximateGP):
        def __init__(self, Zb):
            vd = family(M, batch_shape=batch_shape)
            vs = VariationalStrategy(self, Zb, vd, learn_inducing_locations=learn_inducing)
            if num_tasks:
                vs = IndependentMultitaskVariationalStrategy(vs, num_tasks=num_tasks)
            super().__init__(vs)
            self.mean_module = gpytorch.means.ZeroMean(batch_shape=prior_batch)
            self.covar_module = gpytorch_kernel(kernel, D, ard, prior_batch, lengthscale)

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))

    return SVGP(Z.unsqueeze(0).expand(num_tasks, M, D).clone() if num_tasks and not shared else Z.clone())


# ---------------------------------------------------------------------------------- clocks
def device_name(device) -> str:
    """A readable name of the device (the GPU model for CUDA)."""
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({os.cpu_count()} cores, {torch.get_num_threads()} torch threads)"


class TrainingClock:
    """Wall time of training alone: evaluations made inside :meth:`pause` do not count.

    On CUDA the device is synchronized before every reading, so the clock sees finished work.
    """

    def __init__(self, device=None, offset: float = 0.0):
        self.device = device
        self.paused = 0.0
        self.offset = float(offset)  # training seconds already spent (a resumed run)
        self._sync()
        self.t0 = time.perf_counter()

    def _sync(self) -> None:
        if self.device is not None and getattr(self.device, "type", "cpu") == "cuda":
            import torch

            torch.cuda.synchronize(self.device)

    def seconds(self) -> float:
        """Training seconds so far (including ``offset``)."""
        self._sync()
        return self.offset + time.perf_counter() - self.t0 - self.paused

    @contextmanager
    def pause(self):
        """Context manager: time spent inside is excluded from :meth:`seconds`."""
        self._sync()
        start = time.perf_counter()
        try:
            yield
        finally:
            self._sync()
            self.paused += time.perf_counter() - start
