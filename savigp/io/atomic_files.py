"""Writing files atomically: readers (and a crash, a full disk, a Ctrl-C) never see half a file.

:func:`atomic_write` writes to a temporary file ``.NAME.XXXXXXXX.tmp`` in the destination's own
folder (so that the final rename stays on one file system; the folder resolved as the operating
system resolves it, :func:`savigp.io.output_paths.resolve_output_path`), flushes and fsyncs it, gives it the
mode an ordinary new file would get (``0666 & ~umask``; it is created ``0600``), and then
``os.replace``\\ s it over the destination and fsyncs the folder. On any failure the temporary file
is removed and an existing file at the destination is left untouched. A temporary left by a
killed process is found by :func:`savigp.io.output_paths.remove_orphaned_temporaries`.

The folder is opened once (``O_DIRECTORY``) and every step after is relative to it (``dir_fd``:
the temporary file, created ``O_EXCL | O_NOFOLLOW``, the rename, the fsync): a symbolic link
swapped in for a folder of the path while the file is written cannot send it elsewhere. A path
that :func:`savigp.io.output_paths.check_output_path` checked is written only into the folder it
checked (the same ``st_dev``, ``st_ino``), else :class:`~savigp.io.output_paths.OutputPathError`.
Where the platform has no ``dir_fd`` (Windows) the steps go by path, as before.

Model files, the command line's CSVs and plots, and the experiments' tables all go through here.
"""
from __future__ import annotations

import errno
import os
import secrets
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
    from .output_paths import OutputPathError, checked_folder, resolve_output_path

    checked = checked_folder(os.fspath(path))  # (by the path as checked: resolving it again follows a swapped link)
    try:  # the folder as the kernel resolves it, never `..` collapsed as text
        path = resolve_output_path(os.fspath(path), "write")
    except OutputPathError as err:  # as open() would say it (an OSError), with the reason
        raise FileNotFoundError(errno.ENOENT, str(err), os.fspath(path)) from None
    folder, name = os.path.split(path)
    if not _HAS_DIR_FD:  # pragma: no cover - Windows: by path, the folder compared with the one checked first
        st = os.stat(folder)
        if checked is not None and (st.st_dev, st.st_ino) != checked:
            raise OutputPathError(f"{path}: its folder {folder} is not the folder that was checked; nothing was written")
        yield from _write_by_path(path, mode, newline)
        return
    dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(dfd)
        if checked is not None and (st.st_dev, st.st_ino) != checked:
            raise OutputPathError(f"{path}: its folder {folder} is not the folder that was checked (it was replaced, "
                                  "e.g. by a symbolic link, after the check); nothing was written")
        fd, tmp = _create_temporary(name, dfd)
        try:
            yield from _fill(fd, mode, newline)
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except FileNotFoundError:
                pass
            raise
        try:
            os.fsync(dfd)  # the rename, durable
        except OSError:  # pragma: no cover
            pass
    finally:
        os.close(dfd)


# (os.supports_dir_fd lists os.rename, not os.replace, which takes the same src_dir_fd / dst_dir_fd)
_HAS_DIR_FD = {os.open, os.rename, os.unlink} <= os.supports_dir_fd and hasattr(os, "O_DIRECTORY")


def _fill(fd: int, mode: str, newline) -> Iterator[IO]:
    """Yield the open file ``fd`` to be written; then flush and fsync it and give it the mode an
    ordinary new file gets (``0666 & ~umask``); it is closed either way."""
    with os.fdopen(fd, mode, **({} if "b" in mode else {"newline": newline})) as fh:
        yield fh
        fh.flush()
        os.fsync(fh.fileno())
        mask = os.umask(0)
        os.umask(mask)
        if os.chmod in os.supports_fd:  # (Windows has no such mode bits to give)
            os.chmod(fh.fileno(), 0o666 & ~mask)


def _create_temporary(name: str, dfd: int) -> tuple:
    """``(fd, name)`` of a new file ``.NAME.XXXXXXXX.tmp`` (mode 0600) in the open folder ``dfd``."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = f".{name}.{secrets.token_hex(4)}.tmp"
        try:
            return os.open(tmp, flags, 0o600, dir_fd=dfd), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no unused temporary file name", name)  # pragma: no cover


def _write_by_path(path: str, mode: str, newline) -> Iterator[IO]:  # pragma: no cover - Windows
    folder = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        yield from _fill(fd, mode, newline)
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
