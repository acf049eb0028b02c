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

**One rule for where a path leads** (:func:`resolve_output_path`, used by :func:`check_output_path`
and by every write, :func:`savigp.io.atomic_files.atomic_write`): the path is resolved the way the
operating system will resolve it -- its folder must exist and is replaced by its real path
(``os.path.realpath`` of an existing folder follows each symbolic link before the ``..`` after
it, as the kernel does; ``nonexist/..`` is not a folder and is refused, never collapsed as text),
and the last component is kept. The check compares that path with the inputs by file identity
(``st_dev``, ``st_ino``: a hard link to an input is the input) and by resolved path, and the
write goes to exactly the path that was checked.

**Checked once, written there.** The folder is found by path when the path is checked and again
when the file is written, and a symbolic link swapped in between (for a folder of the path) would
redirect the write, onto an input even. So the check records the folder's identity
(``st_dev``, ``st_ino``) for the path it returns, and :func:`savigp.io.atomic_files.atomic_write`
opens the folder once (``O_DIRECTORY``), refuses to write when that folder is not the one checked,
and does everything else relative to the open folder (``dir_fd``: the temporary file, the rename,
the fsync), so the file lands in the very folder that was checked or nowhere.

:func:`remove_orphaned_temporaries` removes the temporary files that a killed writer left (never an
input of the command that happens to be named like one, never a file with another name too).
"""
from __future__ import annotations

import os
import re
import stat
import time
from typing import Iterable, Optional


class OutputPathError(ValueError):
    """An output path that the command will not write to; one line naming the option and path."""


#: the paths :func:`check_output_path` returned: path -> (its folder's identity, the inputs' identities)
_CHECKED: dict = {}


def checked_folder(path: str) -> Optional[tuple]:
    """The identity ``(st_dev, st_ino)`` of the folder that :func:`check_output_path` checked for
    ``path`` (the path it returned), or None when ``path`` was not checked in this process."""
    entry = _CHECKED.get(os.fspath(path))
    return None if entry is None else entry[0]


_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


def _kind(mode: int) -> Optional[str]:
    for test, name in _KINDS:
        if test(mode):
            return name
    return None if stat.S_ISREG(mode) else "not a regular file"


def resolve_output_path(path: str, option: str = "--out", follow_link: bool = False) -> str:
    """The absolute path the operating system will write for ``path``: the real path of its
    folder (which must exist; symbolic links and ``..`` resolved as the kernel resolves them) joined
    with its last component; with ``follow_link``, a symbolic link there is followed to the file it
    names (by the same rule, at most 40 links).

    Raises:
        OutputPathError: a folder that does not exist (``missing/../x`` included: the kernel does
            not collapse ``..`` after a missing folder), or a last component that names a folder.
    """
    for _ in range(40):
        folder, name = os.path.split(os.fspath(path))
        if name in ("", ".", ".."):
            raise OutputPathError(f"{option} {path}: names a folder, not a file")
        folder = folder or "."
        try:
            st = os.stat(folder)  # what the kernel resolves, dangling `..` included
        except OSError as err:
            raise OutputPathError(f"{option} {path}: the folder {folder} does not exist "
                                  f"({err.strerror})") from None
        if not stat.S_ISDIR(st.st_mode):
            raise OutputPathError(f"{option} {path}: {folder} is not a folder")
        real = os.path.realpath(folder)
        try:
            rst = os.stat(real)
        except OSError:
            rst = None
        if rst is None or (rst.st_dev, rst.st_ino) != (st.st_dev, st.st_ino):  # changed under us
            raise OutputPathError(f"{option} {path}: the folder {folder} changed while it was resolved")
        target = os.path.join(real, name)
        if not (follow_link and os.path.islink(target)):
            return target
        path = os.path.join(real, os.readlink(target))
    raise OutputPathError(f"{option} {path}: too many levels of symbolic links")


def _identity(path: str) -> Optional[tuple]:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def check_output_path(path: str, option: str = "--out", inputs: Iterable[str] = (), allow_stdout: bool = False) -> str:
    """The path to write for ``option``: ``"-"`` (standard output), or the absolute path
    :func:`resolve_output_path` gives (a symlink's target), after the checks in the module
    docstring. Write to exactly this path.

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
    target = resolve_output_path(path, option, follow_link=True)  # what the write will replace
    try:
        st = os.stat(target)
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
    identity = None if st is None else (st.st_dev, st.st_ino)
    for source in inputs:
        if not source or source == "-":
            continue
        same = identity is not None and identity == _identity(source)  # a hard link too
        if same or os.path.realpath(source) == target:
            raise OutputPathError(f"{option} {path}: is an input of this command ({source}); it would be overwritten; "
                                  "write somewhere else")
    folder = os.path.dirname(target)
    if not os.access(folder, os.W_OK):
        raise OutputPathError(f"{option} {path}: the folder {folder} is not writable")
    folder_identity = _identity(folder)
    if folder_identity is None:
        raise OutputPathError(f"{option} {path}: the folder {folder} changed while it was checked")
    _CHECKED[target] = (folder_identity, {i for i in map(_identity, (s for s in inputs if s and s != "-")) if i})
    return target


def remove_orphaned_temporaries(path: str, min_age_s: float = 60.0, inputs: Optional[Iterable[str]] = None) -> list:
    """Remove the temporary files that an atomic write of ``path`` leaves when it is killed
    (``.NAME.XXXXXXXX.tmp`` next to it) and that are at least ``min_age_s`` old (a younger one may
    belong to a writer still running). A file that is one of ``inputs`` (by identity; default: the
    inputs :func:`check_output_path` was given for ``path``) or that has another name too (a hard
    link) is never removed, whatever its name. Returns the removed paths."""
    if inputs is None:
        keep = (_CHECKED.get(os.fspath(path)) or (None, set()))[1]
    else:
        keep = {i for i in map(_identity, (s for s in inputs if s and s != "-")) if i}
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
            if (stat.S_ISREG(st.st_mode) and now - st.st_mtime >= min_age_s and st.st_nlink == 1
                    and (st.st_dev, st.st_ino) not in keep):
                os.unlink(full)
                removed.append(full)
        except OSError:
            continue
    return removed
