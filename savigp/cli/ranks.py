"""``savigp train --nproc R`` and ``torchrun -m savigp train``: starting the data-parallel ranks on
this machine, and joining the process group in each."""
from __future__ import annotations

import os
import signal
import sys


def launch_ranks(args) -> int:
    """``train --nproc N``: run this same command as N ranks on this machine under ``torchrun``
    (static rendezvous on the loopback address, a free port), and return its exit status."""
    import subprocess

    from ..distributed import free_loopback_port

    argv, rest = [], list(args.argv)
    while rest:
        a = rest.pop(0)
        if a == "--nproc":
            rest.pop(0)
        elif not a.startswith("--nproc="):
            argv.append(a)
    port = free_loopback_port()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--node-rank", "0",
           "--nproc-per-node", str(args.nproc), "--master-addr", "127.0.0.1", "--master-port", str(port),
           "-m", "savigp", *argv]
    env = dict(os.environ)
    if args.threads is None and "OMP_NUM_THREADS" not in env:  # torchrun would set 1 and warn
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // args.nproc))
    if not args.quiet:
        threads = args.threads if args.threads is not None else env["OMP_NUM_THREADS"]
        backend = "nccl" if (args.device or "cpu").startswith("cuda") else "gloo"
        print(f"savigp train: starting {args.nproc} data-parallel processes on this machine (ranks 0-{args.nproc - 1}, "
              f"torchrun, {backend} backend, {threads} thread(s) per rank); rank 0 reports", file=sys.stderr, flush=True)
    proc = subprocess.Popen(cmd, env=env)
    # A terminal's Ctrl-C reaches torchrun too, which then stops the ranks with SIGTERM (each checkpoints
    # as after Ctrl-C): wait for it rather than die first; a SIGTERM sent to this process is passed on.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    previous_term = signal.signal(signal.SIGTERM, lambda signum, frame: proc.send_signal(signal.SIGTERM))
    try:
        return proc.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGTERM, previous_term)


def join_ranks(args) -> int:
    """Under ``torchrun``: join the process group (gloo, or NCCL for ``--device cuda``, which then
    means ``cuda:LOCAL_RANK``) and return this rank; 0 in one process."""
    from .. import distributed

    if not distributed.launched():
        return 0
    if args.device and args.device == "cuda":
        args.device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
    distributed.init_from_env(args.device or "cpu", timeout=args.dist_timeout)
    return distributed.rank()

