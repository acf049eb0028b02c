"""Where the command line may write: checks on an output path before anything is computed.

Files are written atomically (a temporary file in the same folder, then ``os.replace``), which
replaces whatever is at the path. So an output path is checked first:

* ``-`` is standard output, where the command allows it (predictions), and an error elsewhere;
* a symbolic link is followed: the file it points to is replaced and the link is kept (the
  returned path is the target; the command says so);
* an existing path that is not a regular file (a FIFO, a device such as ``/dev/full``, a socket,
  ``/proc/self/fd/1``) is refused: atomic replacement would put a file in its place;
* the path must not be one of the command's input files (the training data, the model being
  read, the data being predicted), compared by file identity, so ``--out data.csv`` or a link to
  it is refused;
* the folder must exist and be writable.

:func:`remove_orphaned_temporaries` removes the temporary files that a killed writer left.
"""
from __future__ import annotations

import os
import re
import stat
import time
from typing import Iterable, Optional


class OutputPathError(ValueError):
    """An output path that the command will not write to; one line naming the option and path."""


_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


def _kind(mode: int) -> Optional[str]:
    for test, name in _KINDS:
        if test(mode):
            return name
    return None if stat.S_ISREG(mode) else "not a regular file"


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def check_output_path(path: str, option: str = "--out", inputs: Iterable[str] = (), allow_stdout: bool = False) -> str:
    """The path to write for ``option``: ``"-"`` (standard output), or the real path of the file
    (a symlink's target), after the checks in the module docstring.

    Args:
        path: as given on the command line.
        inputs: the command's input files (none of them may be overwritten).
        allow_stdout: whether ``-`` means standard output for this command.

    Raises:
        OutputPathError: naming the option, the path and the reason.
    """
    if path == "-":
        if allow_stdout:
            return "-"
        raise OutputPathError(f"{option} -: this command writes a model file, not to standard output; give a file name")
    if not path:
        raise OutputPathError(f"{option}: empty path")
    target = os.path.realpath(path) if os.path.islink(path) else os.path.abspath(path)
    try:
        st = os.stat(path)  # follows links: what would be replaced
    except FileNotFoundError:
        st = None
    except OSError as err:
        raise OutputPathError(f"{option} {path}: cannot inspect it ({err.strerror})") from None
    if st is not None:
        kind = _kind(st.st_mode)
        if kind is not None:
            hint = "; use --out - for standard output" if allow_stdout and kind != "a directory" else ""
            raise OutputPathError(f"{option} {path}: is {kind}, not a regular file; savigp writes a file and "
                                  f"replaces it atomically, so it does not write there{hint}")
    for source in inputs:
        if source and source != "-" and os.path.exists(source) and os.path.exists(path) and _same_file(path, source):
            raise OutputPathError(f"{option} {path}: is an input of this command ({source}); it would be overwritten; "
                                  "write somewhere else")
    folder = os.path.dirname(target)
    if not os.path.isdir(folder):
        raise OutputPathError(f"{option} {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise OutputPathError(f"{option} {path}: the folder {folder} is not writable")
    return target


def remove_orphaned_temporaries(path: str, min_age_s: float = 60.0) -> list:
    """Remove the temporary files that an atomic write of ``path`` leaves when it is killed
    (``.NAME.XXXXXXXX.tmp`` next to it) and that are at least ``min_age_s`` old (a younger one may
    belong to a writer still running). Returns the removed paths."""
    folder, name = os.path.split(os.path.abspath(path))
    pattern = re.compile(r"\." + re.escape(name) + r"\.[A-Za-z0-9_]{8}\.tmp")
    removed = []
    try:
        entries = os.listdir(folder)
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        if not pattern.fullmatch(entry):
            continue
        full = os.path.join(folder, entry)
        try:
            st = os.lstat(full)
            if stat.S_ISREG(st.st_mode) and now - st.st_mtime >= min_age_s:
                os.unlink(full)
                removed.append(full)
        except OSError:
            continue
    return removed
