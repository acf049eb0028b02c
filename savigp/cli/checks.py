"""Checks of the command line's options, before any long work: numbers, ``--lik-option``,
``--out`` and ``--plot`` paths, ``--device`` and ``--samples``; each failure is a one-line
:class:`~savigp.cli.errors.CLIError` naming the option."""
from __future__ import annotations

import ast
import math
import os
import sys
from typing import Optional

from ..io.output_paths import check_output_path
from .errors import CLIError, one_line


def parse_floats(text: Optional[str], option: str):
    """``"1.5"`` -> 1.5, ``"1,2"`` -> [1.0, 2.0], None -> None; finite values only."""
    if text is None:
        return None
    try:
        vals = [float(v) for v in str(text).split(",")]
    except ValueError:
        raise CLIError(f"{option}: expected a number or comma-separated numbers, got {text!r}") from None
    if not all(math.isfinite(v) for v in vals):
        raise CLIError(f"{option}: values must be finite, got {text!r}")
    return vals[0] if len(vals) == 1 else vals


def check_initial_values(module, dtype: str, option) -> None:
    """Refuse, before training, a module (the likelihood, the kernel, the initial model; or a dict
    of tensors named by their state-dict keys) holding a value that a model file in ``dtype``
    cannot hold (beyond sqrt(finfo.max), 1.3e154 in float64:
    :func:`savigp.model_files.schema.value_beyond_bound`, the bound the file's reader applies), which
    training would write and ``predict``/``evaluate`` refuse. ``option``: state-dict key -> the
    option (and value) that set it, for the message.

    Raises:
        CLIError: one line naming the option, the value and the bound."""
    import torch

    from ..model_files.schema import tensor_bound, value_beyond_bound

    found = value_beyond_bound(module, getattr(torch, dtype))
    if found is not None:
        key, value = found
        raise CLIError(f"{option(key)}: {key} would start at {value:.3g}, beyond {tensor_bound(getattr(torch, dtype)):.3g}, "
                       f"the largest magnitude a {dtype} model file holds (its square must stay finite), so predict "
                       "and evaluate could not read the model back; give a smaller value")


def parse_lik_options(items) -> dict:
    """``--lik-option KEY=VALUE`` items -> ``{key: value}`` (Python literals, else the text)."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key.isidentifier():
            raise CLIError(f"--lik-option: expected KEY=VALUE (e.g. depth_scale=10), got {item!r}")
        try:
            out[key] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError, RecursionError, MemoryError):
            out[key] = value.strip()
        bad = _out_of_range(out[key])
        if bad is not None:
            raise CLIError(f"--lik-option {key}=: the number {bad} is beyond what a float64 holds (about 1.8e308); "
                           "give a finite number")
    return out


def _out_of_range(value, depth: int = 0) -> Optional[str]:
    """The first number in a literal (a number, or one in its lists, tuples, sets or dicts) that is
    not finite in float64 (a 400-digit integer, 1e400), shortened, or None."""
    from .._checks import finite_number, short_repr

    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return None if finite_number(value) else short_repr(value, 24)
    if isinstance(value, (list, tuple, set, dict)) and depth < 100:
        for item in (list(value.items()) if isinstance(value, dict) else value):
            found = _out_of_range(item, depth + 1)
            if found is not None:
                return found
    return None


def code_inputs(likelihood: Optional[str], mean_function: Optional[str], trusted_model: Optional[str] = None) -> list:
    """The files of the user code the command may run, module names included (found without
    running anything): inputs too, never an output. Those that ``--likelihood`` and
    ``--mean-function`` name, and those the model file ``trusted_model`` records (``predict`` /
    ``evaluate``'s model under ``--trust-code``), which then run by the user's consent."""
    from .._choices import LIKELIHOODS
    from ..model_files.errors import LikelihoodImportError
    from ..model_files.user_code import source_file

    specs = [likelihood, mean_function]
    if trusted_model:
        specs += _recorded_code(trusted_model)
    files = []
    for spec in specs:
        target = str(spec or "").rpartition(":")[0] or str(spec or "")
        if not target or str(spec) in LIKELIHOODS:
            continue  # a built-in likelihood's name
        try:
            files.append(source_file(target))
        except LikelihoodImportError:
            continue  # reported when it is imported
    return files


def _recorded_code(model: str) -> list:
    """The import paths of the user code a model file records (its likelihood and the further
    functions of ``code_kwargs``); none when the file cannot be read (said when it is loaded)."""
    from ..model_files import read_model_file

    try:
        spec = read_model_file(model)["config"]["likelihood"]
    except (ValueError, TypeError, KeyError, OSError):
        return []
    refs = [spec] + list((spec.get("code_kwargs") or {}).values())
    return [ref["import_path"] for ref in refs if isinstance(ref, dict) and isinstance(ref.get("import_path"), str)]


def output_path(path: str, inputs: list, quiet: bool, allow_stdout: bool = False) -> str:
    """``--out`` checked (see :mod:`savigp.io.output_paths`); a symlink's target, said on stderr."""
    target = check_output_path(path, "--out", inputs=inputs, allow_stdout=allow_stdout)
    if target != "-" and os.path.islink(path) and not quiet:
        print(f"note: --out {path} is a symbolic link; writing to its target {target}", file=sys.stderr)
    return target


def check_plot_option(path: Optional[str], inputs: list, outputs: list) -> Optional[str]:
    """``--plot PATH`` checked as ``--out`` is (see :mod:`savigp.io.output_paths`; never one of the
    command's ``inputs`` nor its other ``outputs``), and matplotlib installed, before any long
    work; the path to write (a symlink's target)."""
    if not path:
        return None
    target = check_output_path(path, "--plot", inputs=inputs)
    if target in outputs:
        raise CLIError(f"--plot {path}: is also where --out writes ({target}); give the picture its own file")
    from ..io.plotting import MissingExtra, require_matplotlib

    try:
        require_matplotlib()
    except MissingExtra as err:
        raise CLIError(f"--plot: {err}") from None
    from matplotlib.backend_bases import FigureCanvasBase

    kinds = FigureCanvasBase.get_supported_filetypes()
    fmt = os.path.splitext(target)[1].lstrip(".").lower() or "png"  # (the format savigp.io.plotting writes)
    if fmt not in kinds:
        raise CLIError(f"--plot {_short(path)}: matplotlib cannot write .{_short(fmt, 20)} pictures; give the file one "
                       f"of the extensions {', '.join('.' + k for k in sorted(kinds))}")
    return target


def _short(text: str, limit: int = 80) -> str:
    """``text`` for a one-line message: at most ``limit`` characters, then how many there are."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def check_device(device: Optional[str]) -> None:
    """``--device``: a name torch knows, and CUDA available when it names CUDA."""
    import torch

    if device:
        try:
            torch.device(device)
        except (RuntimeError, ValueError) as err:
            raise CLIError(f"--device {device!r}: not a device ({one_line(err).split(':')[0]}); use cpu, cuda, "
                           "cuda:1, ...") from None
    if device and str(device).startswith("cuda") and not torch.cuda.is_available():
        raise CLIError(f"--device {device}: CUDA is not available on this machine")


def check_samples(samples: int) -> None:
    if samples < 1:
        raise CLIError(f"--samples must be >= 1, got {samples}")


def max_memory_bytes(gib: Optional[float]) -> Optional[int]:
    """``--max-memory GIB`` in bytes (None: the default limit of :func:`savigp.cost.memory_limit`)."""
    if gib is None:
        return None
    if not (math.isfinite(gib) and gib > 0):
        raise CLIError(f"--max-memory must be a positive number of GiB, got {gib}")
    return int(gib * 2 ** 30)
