"""``savigp train --nproc R`` and ``torchrun -m savigp train``: starting the data-parallel ranks on
this machine, and joining the process group in each.

``--nproc R`` starts the R ranks itself (the environment ``torchrun`` would give them: ``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR=127.0.0.1``, a free
``MASTER_PORT``) and watches them, so that it can say which rank ended first and how:

* **Never code from the working folder.** ``python -m`` and ``python -c`` put the working folder
  first on ``sys.path``, so a ``likelihoods.py`` or ``torch.py`` there would run in every rank.
  Each rank is started as ``python -c BOOT`` where ``BOOT`` removes every entry that is the
  working folder (``''``, and an empty or explicit ``PYTHONPATH`` entry naming it) before anything
  is imported (``python -P`` / ``PYTHONSAFEPATH=1`` of Python 3.11 would leave a ``PYTHONPATH``
  entry such as ``a:`` in place); other ``PYTHONPATH`` entries are kept; the folder holding
  the launcher's own ``savigp`` is appended only when ``savigp`` is not otherwise importable (a
  source checkout run in place). A user likelihood named ``module:function`` is still looked up
  in the working folder after ``sys.path``: the user named it (and it is run by its SHA-256 rule,
  :func:`savigp.model_files.user_code.load_code`).
* **No ``sitecustomize`` from the working folder either.** An empty ``PYTHONPATH`` entry (``a:``,
  ``:a``) names the working folder, where Python's ``site`` would import a ``sitecustomize.py`` at
  start-up, before ``BOOT`` runs; :func:`rank_environment` passes ``PYTHONPATH`` on without the
  entries that name the working folder.
* **Ranks die with their launcher.** A rank asks the kernel for SIGKILL when its launcher dies
  (``prctl(PR_SET_PDEATHSIG)``, Linux; elsewhere a thread that polls its parent process and ends
  the rank when the launcher is gone), and ends at once if the launcher died before it asked. The
  launcher's lock on ``OUT.lock`` (:mod:`savigp.cli.run_lock`) is passed to the ranks as an open
  descriptor, so it stays held until the last rank has ended: a ``kill -9`` of the launcher never
  leaves ranks running that would later replace the model of a second run on the same ``--out``.
  The other ranks then notice a dead peer at their next collective (a broken connection).
* **Which rank failed.** The first rank to end with a non-zero status is named with its status
  or signal (``rank 1 of 2 killed by SIGKILL``) in one line; the others normally stop at once on
  the broken process group (rank 0's last checkpoint is intact) and are sent SIGTERM, then
  SIGKILL, when they have not after 10 and 20 s.
* **A model already written.** When a rank fails after rank 0 wrote the finished model
  (``--out`` changed during the run and holds a complete model), the line says so and the exit
  status is 0: the model file is complete and is the run's result.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from typing import Optional

from .plan import TrainPlan

#: what each rank runs (``python -c``): the working folder off ``sys.path`` before any import, then
#: death with the launcher (process ``{launcher}``), then savigp
BOOT = """\
import os, sys, importlib.util
here = os.path.realpath(os.getcwd())
sys.path[:] = [p for p in sys.path if p and os.path.realpath(p) != here]
import ctypes, signal, threading, time
try:  # Linux: the kernel sends this process SIGKILL when the launcher ends, however it ends
    if ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0) != 0:  # PR_SET_PDEATHSIG
        raise OSError(ctypes.get_errno(), "prctl")
except (OSError, AttributeError):  # elsewhere: watch the launcher from a thread
    def _watch():
        while os.getppid() == {launcher}:
            time.sleep(0.2)
        os._exit(1)
    threading.Thread(target=_watch, name="savigp-launcher-watch", daemon=True).start()
if os.getppid() != {launcher}:  # the launcher ended before the kernel was asked
    os._exit(1)
importlib.util.find_spec('savigp') or sys.path.append({root!r})
from savigp.cli import main
sys.exit(main())
"""


def rank_command(argv: list) -> list:
    """The command line of one rank of ``savigp`` with arguments ``argv``, started by this process
    (its launcher; see the module docstring)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return [sys.executable, "-c", BOOT.format(root=root, launcher=os.getpid()), *argv]


def rank_environment(env: dict, cwd: Optional[str] = None) -> dict:
    """``env`` for a rank: ``PYTHONPATH`` without its entries that name the working folder ``cwd``
    (an empty entry, ``.``, the folder itself), where ``site`` would import a ``sitecustomize.py``
    before anything else runs; other entries kept in order."""
    env = dict(env)
    if "PYTHONPATH" in env:
        here = os.path.realpath(cwd or os.getcwd())
        kept = [p for p in env["PYTHONPATH"].split(os.pathsep) if p and os.path.realpath(p) != here]
        if kept:
            env["PYTHONPATH"] = os.pathsep.join(kept)
        else:
            del env["PYTHONPATH"]
    return env


def describe_status(code: int) -> str:
    """``exit status 2`` or ``killed by SIGKILL`` for a ``Popen.returncode``."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    return f"exit status {code}"


def supervise(procs: list, grace_s: float = 10.0) -> tuple:
    """Wait for the ranks ``procs`` (``Popen``, index = rank); ``grace_s`` seconds after the first
    non-zero end, send the others SIGTERM (they normally stop by themselves at once, on the broken
    process group), and SIGKILL ``grace_s`` later. Returns ``(codes, first)``:
    every rank's return code, and the rank that ended first with a non-zero status (or None)."""
    first: Optional[int] = None
    since, termed = None, False
    while [p.poll() for p in procs].count(None):  # every one polled: returncode set for each that ended
        if first is None:
            ended = [r for r, p in enumerate(procs) if p.returncode not in (None, 0)]
            if ended:  # several at one look: one killed by a signal is the cause, the others followed
                first = min(ended, key=lambda r: (procs[r].returncode >= 0, r))
                since = time.monotonic()
        else:
            waited = time.monotonic() - since
            if waited > 2 * grace_s or (waited > grace_s and not termed):
                for q in procs:
                    if q.poll() is None:
                        q.kill() if termed else q.terminate()
                termed = True
        time.sleep(0.01)
    codes = [p.returncode for p in procs]
    if first is None:
        ended = [r for r, c in enumerate(codes) if c != 0]
        first = min(ended, key=lambda r: (codes[r] >= 0, r)) if ended else None
    return codes, first


def _file_identity(path: Optional[str]):
    try:
        st = os.stat(path)
    except (OSError, TypeError):
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def _complete_model(path: str) -> Optional[int]:
    """The step of the complete model at ``path``, or None (missing, unreadable, a checkpoint)."""
    try:
        import torch

        config = torch.load(path, map_location="cpu", weights_only=True).get("config") or {}
    except Exception:
        return None
    return int(config.get("step", 0)) if config.get("complete") is True else None


def launch_ranks(plan: TrainPlan, out: Optional[str] = None, extra_env: Optional[dict] = None) -> int:
    """``train --nproc N``: run this same command as N ranks on this machine (module docstring)
    and return the exit status: 0 when every rank succeeded (or a rank failed after the complete
    model was written to ``out``), else the first failed rank's status (1 for a signal)."""
    import subprocess

    from ..training.distributed import free_loopback_port
    from .errors import EXIT_FAILURE, EXIT_OK

    argv, rest = [], list(plan.argv)
    while rest:
        a = rest.pop(0)
        if a == "--nproc":
            rest.pop(0)
        elif not a.startswith("--nproc="):
            argv.append(a)
    from .run_lock import LOCK_ENV, held_lock_descriptor

    port = free_loopback_port()
    env = rank_environment(os.environ)
    if plan.threads is None and "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // plan.nproc))
    if not plan.quiet:
        threads = plan.threads if plan.threads is not None else env["OMP_NUM_THREADS"]
        backend = "nccl" if (plan.device or "cpu").startswith("cuda") else "gloo"
        print(f"savigp train: starting {plan.nproc} data-parallel processes on this machine (ranks 0-{plan.nproc - 1}, "
              f"{backend} backend, {threads} thread(s) per rank); rank 0 reports", file=sys.stderr, flush=True)
    env.update({"WORLD_SIZE": str(plan.nproc), "LOCAL_WORLD_SIZE": str(plan.nproc), "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port), "GROUP_RANK": "0", **(extra_env or {})})
    before = _file_identity(out)
    cmd = rank_command(argv)
    held = held_lock_descriptor(env.get(LOCK_ENV))  # the ranks hold the launcher's lock with it (module docstring)
    procs = []
    # A terminal's Ctrl-C reaches every rank (each checkpoints); a SIGTERM sent to this process is passed on.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    previous_term = signal.signal(signal.SIGTERM, lambda signum, frame: [p.send_signal(signal.SIGTERM) for p in procs
                                                                         if p.poll() is None])
    try:
        for r in range(plan.nproc):
            procs.append(subprocess.Popen(cmd, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
                                          **({} if held is None else {"pass_fds": (held,)})))
        codes, first = supervise(procs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGTERM, previous_term)
    if first is None:
        return EXIT_OK
    code = codes[first]
    what = f"savigp train: rank {first} of {plan.nproc} {describe_status(code)}"
    others = [f"rank {r}: {describe_status(c)}" for r, c in enumerate(codes) if r != first and c != 0]
    what += f" ({'; '.join(others)})" if others else ""
    step = _complete_model(out) if out and _file_identity(out) != before else None
    if step is not None:
        print(f"{what}, after {out} was completely written ({step} step(s)): the model is complete", file=sys.stderr)
        return EXIT_OK
    if all(c == code for c in codes):  # every rank said the same (bad input, interrupted): its status
        return code
    print(f"{what}; no complete model was written (the last checkpoint, if any, is intact: run again with --resume)",
          file=sys.stderr)
    return code if code > 0 else EXIT_FAILURE


def join_ranks(plan: TrainPlan) -> tuple:
    """Under ``torchrun`` (or ``--nproc``): join the process group (gloo, or NCCL for ``--device cuda``,
    which then means ``cuda:LOCAL_RANK``). Returns ``(rank, plan)``: this rank (0 in one process) and
    the :class:`~savigp.cli.plan.TrainPlan` on its device."""
    from ..training import distributed

    if not distributed.launched():
        return 0, plan
    if plan.device and plan.device == "cuda":
        plan = plan.on_device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}")
    distributed.init_from_env(plan.device or "cpu", timeout=plan.dist_timeout)
    return distributed.rank(), plan
