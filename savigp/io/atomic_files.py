"""Writing files atomically: readers (and a crash, a full disk, a Ctrl-C) never see half a file.

:func:`atomic_write` writes to a temporary file ``.NAME.XXXXXXXX.tmp`` in the destination's own
folder (so that the final rename stays on one file system; the folder resolved as the operating
system resolves it, :func:`savigp.io.output_paths.resolve_output_path`, for both), flushes and fsyncs it, gives it the
mode an ordinary new file would get (``0666 & ~umask``; ``mkstemp`` creates ``0600``), and then
``os.replace``\\ s it over the destination and fsyncs the folder. On any failure the temporary file
is removed and an existing file at the destination is left untouched. A temporary left by a
killed process is found by :func:`savigp.io.output_paths.remove_orphaned_temporaries`.

Model files, the command line's CSVs and plots, and the experiments' tables all go through here.
"""
from __future__ import annotations

import errno
import os
import tempfile
from contextlib import contextmanager
from typing import IO, Iterator


@contextmanager
def atomic_write(path: "os.PathLike | str", mode: str = "w", newline=None) -> Iterator[IO]:
    """Open a temporary file for writing in ``path``'s folder; on a normal exit it replaces ``path``.

    Args:
        path: the destination file (its folder must exist).
        mode: ``"w"`` (text) or ``"wb"`` (binary).
        newline: for text mode, as :func:`open` (``""`` for the csv module).

    Example::

        with atomic_write("table.csv", newline="") as fh:
            fh.write("a,b\\n1,2\\n")
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write: mode must be 'w' or 'wb', got {mode!r}")
    from .output_paths import OutputPathError, resolve_output_path

    try:  # the folder as the kernel resolves it, never `..` collapsed as text
        path = resolve_output_path(os.fspath(path), "write")
    except OutputPathError as err:  # as open() would say it (an OSError), with the reason
        raise FileNotFoundError(errno.ENOENT, str(err), os.fspath(path)) from None
    folder = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"newline": newline})) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_folder(folder)


def _fsync_folder(folder: str) -> None:
    """Make the rename durable: fsync the folder (where the platform has directory handles)."""
    try:
        dfd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory handles
        return
    try:
        os.fsync(dfd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(dfd)
