"""One ``savigp train`` per ``--out`` at a time: an exclusive lock on ``OUT.lock``.

Two runs writing one model file would both report success while one silently replaces the
other's model and checkpoints. ``train`` therefore takes ``fcntl.flock(LOCK_EX | LOCK_NB)`` on
``OUT.lock`` (next to the resolved ``--out``) for its whole duration and writes its process id,
start time and command line into it; a second run finds the lock held and stops at once (exit 2)
naming the first. The lock is released by the kernel when the process ends however it ends; a
run that finishes removes the file (while still holding it, and a run that locked a file
already removed tries again, so that two runs never hold locks on two different files). Under
``--nproc`` the launcher holds the lock and tells its ranks so (:data:`LOCK_ENV`); under
``torchrun`` rank 0 takes it. Where ``fcntl`` does not exist (Windows) there is no lock.

The ranks of ``--nproc`` inherit the launcher's open lock (:func:`held_lock_descriptor`, passed by
:func:`savigp.cli.ranks.launch_ranks`): a ``flock`` belongs to the open file, so the lock stays
held until the launcher and every rank have ended -- a killed launcher never frees it while its
ranks still run. The lock file is written only when it is a regular file with one name (never
through a symbolic link, never a hard link to another file, whose contents the run would replace).
"""
from __future__ import annotations

import os
import stat
import sys
import time
from typing import Optional

from ..settings import LOCK_ENV, train_lock_held
from .errors import CLIError

#: the locks this process holds: lock file -> its open descriptor
_HELD: dict = {}


def held_lock_descriptor(path: Optional[str]) -> Optional[int]:
    """The open descriptor of the lock on ``path`` that this process holds (what ``--nproc``'s
    launcher passes to its ranks so that they hold it too), or None."""
    return _HELD.get(path) if path else None


class RunLock:
    """A held lock on ``path`` (``OUT.lock``); :meth:`release` removes the file and unlocks it."""

    def __init__(self, fd: int, path: str):
        self.fd, self.path = fd, path

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            os.unlink(self.path)  # still holding it: no other run can have it
        except OSError:
            pass
        if _HELD.get(self.path) == self.fd:
            del _HELD[self.path]
        os.close(self.fd)
        self.fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def lock_output(out: str, argv: Optional[list] = None) -> Optional[RunLock]:
    """The lock of ``train --out OUT`` (``out`` resolved), or None where this process needs none
    (a rank whose launcher holds it, a rank other than 0, a platform without ``fcntl``).

    Raises:
        CLIError: another run holds it (one line naming its process and command line).
    """
    path = out + ".lock"
    if train_lock_held() == path or int(os.environ.get("RANK", "0") or 0) != 0:
        return None
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return None
    for _ in range(100):
        try:  # never through a link (it could name any file), never anything but a regular file
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
        except OSError as err:
            raise CLIError(f"--out {out}: cannot create its lock file {path} ({err.strerror})") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise CLIError(f"--out {out}: its lock file {path} is not a regular file")
        if st.st_nlink != 1:  # a hard link: writing the lock would replace another file's contents
            os.close(fd)
            raise CLIError(f"--out {out}: its lock file {path} has {st.st_nlink} names (a hard link to another file, "
                           "whose contents the lock would replace); remove it")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 4096).decode("utf-8", "replace").strip() or "a process"
            os.close(fd)
            raise CLIError(f"--out {out}: another savigp train is writing it ({' '.join(holder.split())}); wait for "
                           f"it to end or give another --out (the lock is {path})") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except OSError:
            same = False
        if not same:  # the file was removed by a run that just finished: lock the new one
            os.close(fd)
            continue
        command = " ".join(["savigp", *(argv if argv is not None else sys.argv[1:])])
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}: {command}\n".encode())
        _HELD[path] = fd
        return RunLock(fd, path)
    raise CLIError(f"--out {out}: could not lock {path}")  # pragma: no cover
