"""Small helpers shared by the flagship experiments (seismic.py, gprn_sarcos.py, mnist.py, ...), on
top of the shared runner (_common.py): their common options, a result folder with tables as CSV
and Markdown, a JSON record and figures (every file written atomically), and the matplotlib set-up.

Data are never copied into the repository: they are read from ``../shared/data`` relative to the
repository root, or from ``--data-dir``.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Optional, Sequence

# the shared runner (which makes savigp importable); resolve_data_dir and the option helpers are
# re-exported for the experiments (io.resolve_data_dir, io.add_seed_argument, ...)
from _common import (  # noqa: F401
    REPO_ROOT, add_data_argument, add_device_arguments, add_out_argument, add_seed_argument, add_threads_argument,
    device_and_dtype, gaussian_log_density, gaussian_nlpd, markdown_table, resolve_data_dir, sse, write_csv_atomic,
    write_json_atomic, write_text_atomic,
)


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
    each atomically (:mod:`_common`'s writers). Returns the two paths."""
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


def write_json(obj, path: Path) -> Path:
    """``obj`` as JSON at ``path``, atomically (:func:`_common.write_json_atomic`)."""
    return write_json_atomic(path, obj)


def write_result(path: Path, argv: Optional[Sequence[str]], **fields) -> dict:
    """An experiment's result record: ``fields`` plus the environment, the command-line arguments
    and the output folder, written as JSON to ``path``; returns the record."""
    result = dict(fields)
    result.update(environment=environment(), argv=list(argv) if argv is not None else sys.argv[1:],
                  out=str(Path(path).parent))
    write_json(result, path)
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


def parser(doc: str, name: str, *, quick_help: Optional[str] = None, data_folder: Optional[str] = None,
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


def save_figure(fig, path: Path, title: Optional[str] = None) -> Path:
    """Optional suptitle, tight layout, a 120-dpi PNG at ``path`` (written atomically), and the figure closed."""
    from savigp.io.atomic_files import atomic_write

    if title is not None:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    with atomic_write(path, "wb") as fh:
        fig.savefig(fh, dpi=120, format=Path(path).suffix.lstrip(".") or None)
    pyplot().close(fig)
    return path


# ---------------------------------------------------------------------------------- device and clocks
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
