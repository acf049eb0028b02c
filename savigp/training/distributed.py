"""Data-parallel training on ``torch.distributed``: one process per rank, launched by ``torchrun``
(gloo on the CPU, NCCL on CUDA).

Every rank holds the whole training set and an identical model (rank 0's parameters are
broadcast when training starts). Every rank draws the same seeded global mini-batch order as one
process; the global batch b of B indices is split into R disjoint contiguous shards b_r (sizes
differing by at most one), and rank r evaluates

    L_r = (|b_r| / B) ELBO(b_r)
        = (N / B) sum_{n in b_r} E_q[log p(y_n | f_n)] + (|b_r| / B) (entropy + cross-entropy - head KL),

where ELBO(b_r) is the model's mini-batch ELBO, whose data term is scaled by N / |b_r|
(Bonilla et al. 2019, eq. (33)). Summed over the ranks,

    sum_r L_r = (N / B) sum_{n in b} E_q[log p(y_n | f_n)] + entropy + cross-entropy - head KL,

the one-process estimate on the union batch: its data term is unbiased for the full-data
expected log-likelihood and the KL terms count once (their weights |b_r| / B sum to one). The
gradients of the L_r are summed over the ranks by an all-reduce, so every rank applies the
same optimizer step to the same gradient and holds the same parameters after every step. The
Monte Carlo draws of rank r at step t come from a generator seeded by (seed, r, t): distinct per
rank, reproducible, and independent of how the run was split into resumed pieces.

Gradients are summed by an explicit all-reduce of flat buckets (one bucket holds up to
``BUCKET_ELEMENTS`` values; the reported ELBO terms ride in the last one, so a step with one bucket
costs one collective), or, with ``SAVIGP_GRAD_SYNC=ddp`` in the environment, by
:class:`torch.nn.parallel.DistributedDataParallel`; ``experiments/scaling.py`` measures both.
"""
from __future__ import annotations

import datetime
import os
from typing import Callable, Optional, Sequence

import numpy as np
import torch
import torch.distributed as dist

from .. import settings
from ..settings import DEFAULT_TIMEOUT, GRAD_SYNCS  # noqa: F401 (savigp.settings documents them)

#: values per gradient bucket of the explicit all-reduce (4 Mi float64 values = 32 MiB)
BUCKET_ELEMENTS = 1 << 22
_timeout_used: Optional[float] = None  # the timeout of the process group init_from_env created


class DistributedError(RuntimeError):
    """A collective failed: another rank stopped, or did not answer within the process-group
    timeout. The last checkpoint written (by rank 0) is intact. The process group is then broken;
    leave the process with ``os._exit`` (as the ``savigp`` command does): gloo's threads can abort
    a normal interpreter exit after a failed collective (``terminate called without an active
    exception``, seen in 1 of 7 killed-rank runs)."""


def launched() -> bool:
    """Whether this process was started by ``torchrun`` (or set up like it) with a process group
    to join: ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` are in the environment."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the system picks it), for a one-machine
    rendezvous (``MASTER_PORT``). Another process may take it before the ranks bind it; the
    rendezvous then fails with an address-in-use error."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rank() -> int:
    """This process's rank: the process group's if one is initialized, else ``RANK`` (0 when unset)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", 0))


def timeout_seconds(timeout: Optional[float] = None) -> float:
    if timeout is None:
        timeout = settings.dist_timeout()
    if not timeout > 0:
        raise ValueError(f"the process-group timeout must be > 0 seconds, got {timeout}")
    return float(timeout)


def init_from_env(device: torch.device | str = "cpu", timeout: Optional[float] = None) -> bool:
    """Join the process group that ``torchrun`` describes in the environment, if any and not yet
    joined: backend NCCL for a CUDA ``device`` (whose index should be ``LOCAL_RANK``), gloo
    otherwise, with a timeout of ``timeout`` seconds for every collective (default
    ``SAVIGP_DIST_TIMEOUT`` or 300). Returns whether a process group is initialized."""
    global _timeout_used
    if not dist.is_available():
        return False
    if dist.is_initialized():
        return True
    if not launched():
        return False
    _timeout_used = timeout_seconds(timeout)
    device = torch.device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    kwargs = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=_timeout_used), **kwargs)
    return True


def _backend_message(err: BaseException) -> str:
    """The first sentence of a gloo / NCCL error without the backend's source locations
    (``[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [...]. This
    is typically ...`` -> ``Connection closed by peer [...]``), or the error's type name."""
    import re

    lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
    text = re.sub(r"\[[^\]\s]*\.(?:cc|cpp|cxx|c|h|hpp|cu|py):\d+\]\s*", "", lines[0]) if lines else ""
    text = re.sub(r"\s*\((?:[^()\s]*/)?[^()\s/]+\.(?:cc|cpp|cxx|c|h|hpp|cu):\d+\)", "", text)
    text = text.split(". ")[0]  # gloo goes on: "This is typically caused by a remote worker crashing. ..."
    return " ".join(text.split())[:200] or type(err).__name__


def _draw_seed(seed: int, rank_: int, step: int) -> int:
    """A 63-bit seed for the Monte Carlo draws of ``rank_`` at ``step`` (SeedSequence mixing)."""
    state = np.random.SeedSequence([int(seed) & 0xFFFFFFFFFFFFFFFF, int(rank_), int(step)]).generate_state(2, np.uint64)
    return int(state[0]) >> 1


class DataParallel:
    """The per-rank side of one data-parallel :func:`savigp.fit` (module docstring).

    Args:
        model: the :class:`savigp.SAVIGP` being trained (the same data on every rank).
        params: the optimized parameters, in the optimizer's order.
        seed: fit's seed (mini-batch order and, with the rank and step, Monte Carlo draws).
        check: values that must agree across ranks, by name (e.g. N, B, iterations, start step); a
            hash of the training data is added.
    """

    def __init__(self, model, params: Sequence[torch.Tensor], seed: int, check: dict):
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.model, self.params, self.seed = model, list(params), int(seed)
        self.timeout = _timeout_used  # None: the group was created by the caller, with its own timeout
        self.step = None
        self.sync = sync = settings.grad_sync()
        self._agree(dict(check, **{"training data (hash)": self._data_hash()}))
        self._broadcast_parameters()
        self._layout()
        self._ddp = None
        if sync == "ddp":
            import warnings

            from torch.nn.parallel import DistributedDataParallel

            with warnings.catch_warnings():  # torch 2.13 deprecates broadcast_buffers; its successor still syncs
                warnings.simplefilter("ignore", FutureWarning)  # buffers at init, which is all we want here
                self._ddp = DistributedDataParallel(_Objective(model), broadcast_buffers=False,
                                                    device_ids=[model.device] if model.device.type == "cuda" else None)

    def close(self) -> None:
        """Release the DistributedDataParallel wrapper now, while the process group is alive.

        The wrapper sits in a reference cycle (measured: with the collector off it outlives its
        DataParallel, even with its stored ELBO terms cleared), so without this it would be freed
        by a later garbage collection: possibly after
        ``destroy_process_group`` or during interpreter shutdown, where gloo aborts the process
        ("terminate called without an active exception"). Idempotent.
        """
        if self._ddp is not None:
            import gc

            self._ddp = None
            gc.collect()

    # ------------------------------------------------------------------ collectives with clear failures
    def _collective(self, fn: Callable, what: str):
        try:
            return fn()
        except RuntimeError as err:  # DistBackendError and the gloo / NCCL errors are RuntimeErrors
            at = f" at step {self.step}" if self.step is not None else ""
            first = _backend_message(err)
            limit = ("the process group's timeout" if self.timeout is None
                     else f"the {self.timeout:g} s process-group timeout")
            raise DistributedError(
                f"rank {self.rank} of {self.world}: {what}{at} failed: another rank stopped or did not answer "
                f"within {limit} ({first}). The last checkpoint is "
                "intact: run again with --resume (with any number of ranks)") from err

    def _agree(self, check: dict) -> None:
        names = list(check)
        v = torch.tensor([float(check[k]) for k in names], dtype=torch.float64, device=self._comm_device())
        both = torch.cat([v, -v])  # max and min in one collective: min(v) = -max(-v), exactly
        self._collective(lambda: dist.all_reduce(both, op=dist.ReduceOp.MAX), "checking the ranks' settings")
        hi, lo = both[:len(names)], -both[len(names):]
        bad = [f"{k} ({lo[i].item():g} to {hi[i].item():g})" for i, k in enumerate(names) if hi[i] != lo[i]]
        if bad:
            raise ValueError(f"rank {self.rank} of {self.world}: the ranks disagree on {', '.join(bad)}; every rank "
                             "must train the same model on the same data with the same options")

    def _data_hash(self) -> float:
        """A 52-bit hash of the training inputs and targets (exact in float64, so ranks can compare it)."""
        import hashlib

        h = hashlib.blake2b(digest_size=8)
        for t in (self.model.train_x, self.model.train_y):
            h.update(t.detach().cpu().contiguous().numpy().tobytes())
        return float(int.from_bytes(h.digest(), "little") >> 12)

    def _comm_device(self) -> torch.device:
        return self.model.device

    @torch.no_grad()
    def _broadcast_parameters(self) -> None:
        tensors = list(self.model.parameters()) + [b for n, b in self.model.named_buffers()
                                                   if b.is_floating_point() and n not in ("train_x", "train_y")]
        for t in tensors:
            self._collective(lambda t=t: dist.broadcast(t, src=0), "broadcasting rank 0's parameters")

    def _layout(self) -> None:
        """Buckets of consecutive parameters of one dtype, up to BUCKET_ELEMENTS values each."""
        self.buckets, current, size = [], [], 0
        for i, p in enumerate(self.params):
            if current and (size + p.numel() > BUCKET_ELEMENTS or self.params[current[-1]].dtype != p.dtype):
                self.buckets.append(current)
                current, size = [], 0
            current.append(i)
            size += p.numel()
        if current:
            self.buckets.append(current)

    # ------------------------------------------------------------------ the step
    def shard(self, batch: Optional[torch.Tensor]) -> tuple[torch.Tensor, float]:
        """This rank's part of the global ``batch`` ``(B,)`` (None: all N points) and its weight |b_r| / B."""
        if batch is None:
            batch = torch.arange(self.model.num_data, device=self.model.device)
        B = batch.shape[0]
        if B < self.world:
            raise ValueError(f"batch_size {B} is smaller than the number of ranks {self.world}: every rank needs "
                             "at least one point of every mini-batch")
        local = torch.tensor_split(batch, self.world)[self.rank]
        return local, local.shape[0] / B

    def draws(self, step: int) -> torch.Generator:
        """The generator of this rank's Monte Carlo draws at ``step``."""
        return torch.Generator(device=self.model.device).manual_seed(_draw_seed(self.seed, self.rank, step))

    def elbo_and_grad(self, batch: Optional[torch.Tensor], *, num_samples: int, estimator: str,
                      generator: torch.Generator, step: int, backward: bool = True):
        """Evaluate this rank's share L_r of the global mini-batch ELBO (``batch`` ``(B,)`` global
        indices, None for all N), backpropagate -L_r and sum the gradients over the ranks (not with
        ``backward=False``). Returns the global :class:`savigp.ELBOTerms` (the same on every rank);
        the optimized parameters' ``.grad`` then hold the gradient of minus the global ELBO."""
        from ..model import ELBOTerms

        self.step = step
        local, w = self.shard(batch)
        if self._ddp is not None and backward:
            loss = self._ddp(local, w * self.world, num_samples, estimator, generator)  # DDP averages: times R
            terms, self._ddp.module.terms = self._ddp.module.terms, None  # no cycle through the graph
            self._collective(lambda: (-loss).backward(), "the gradient all-reduce (DDP)")
            extras = self._extras(terms, w)
            self._collective(lambda: dist.all_reduce(extras), "summing the ELBO over the ranks")
        else:
            terms = self.model.elbo(local, num_samples=num_samples, estimator=estimator, generator=generator)
            extras = self._extras(terms, w)
            if not backward:
                self._collective(lambda: dist.all_reduce(extras), "summing the ELBO over the ranks")
            else:
                if torch.isfinite(terms.elbo):  # else the global ELBO is non-finite too and no step is taken
                    (-w * terms.elbo).backward()
                extras = self._allreduce_grads(extras)
        extras = extras.detach()
        return ELBOTerms(extras[0].clone(), extras[1].clone(), terms.entropy, terms.cross_entropy, terms.mean_head_kl,
                         extras[2].clamp_min(0.0).sqrt())

    def _extras(self, terms, w: float) -> torch.Tensor:
        """This rank's weighted ELBO and expected log-likelihood and its squared standard error ``(3,)``,
        on the device (the fields of :class:`savigp.ELBOTerms` are 0-dim tensors or floats)."""
        like = self.params[0]
        elbo, ell, se = (torch.as_tensor(v, dtype=like.dtype).to(like.device).detach().reshape(())
                         for v in (terms.elbo.detach(), terms.ell, terms.ell_stderr))
        return torch.stack([w * elbo, w * ell, (w * se) ** 2])

    @torch.no_grad()
    def _allreduce_grads(self, extras: torch.Tensor) -> torch.Tensor:
        """Sum the gradients (zeros where ``.grad`` is None) and ``extras`` over the ranks, bucket by bucket
        (nothing to do for one rank)."""
        if self.world == 1:
            return extras
        for j, bucket in enumerate(self.buckets):
            ps = [self.params[i] for i in bucket]
            parts = [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in ps]
            last = j == len(self.buckets) - 1
            flat = torch.cat(parts + ([extras.to(parts[0].dtype)] if last else []))
            self._collective(lambda: dist.all_reduce(flat), "the gradient all-reduce")
            offset = 0
            for p in ps:
                n = p.numel()
                if p.grad is not None:
                    p.grad.copy_(flat[offset:offset + n].view_as(p))
                offset += n
            if last:
                extras = flat[offset:].to(extras.dtype)
        return extras

    def sum(self, t: torch.Tensor) -> torch.Tensor:
        """The sum over the ranks of ``t`` (a CPU float64 tensor; the result is too)."""
        total = t.to(self._comm_device())
        self._collective(lambda: dist.all_reduce(total), "summing across the ranks")
        return total.cpu()

    def any(self, flag: bool) -> bool:
        """Whether ``flag`` is true on any rank (e.g. a callback asking to stop)."""
        t = torch.tensor([1.0 if flag else 0.0], dtype=torch.float64, device=self._comm_device())
        self._collective(lambda: dist.all_reduce(t, op=dist.ReduceOp.MAX), "agreeing on stopping")
        return bool(t.item() > 0)


class _Objective(torch.nn.Module):
    """The model's weighted mini-batch ELBO as a ``forward`` (what DistributedDataParallel wraps)."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.terms = None

    def forward(self, batch, weight, num_samples, estimator, generator):
        self.terms = self.model.elbo(batch, num_samples=num_samples, estimator=estimator, generator=generator)
        return weight * self.terms.elbo


def setup(model, params, seed: int, check: dict) -> Optional[DataParallel]:
    """The :class:`DataParallel` of this rank when a process group is initialized (or ``torchrun``'s
    environment describes one, which is then joined), else None (one process)."""
    if not init_from_env(model.device):
        return None
    return DataParallel(model, params, seed, check)


def evaluation_shard(device) -> tuple:
    """``(shard, reduce)`` for :func:`savigp.training.convergence.full_data_elbo` outside a step:
    ``((rank, world), the sum over the ranks)`` under a process group (joined from ``torchrun``'s
    environment if it is not yet), ``((0, 1), None)`` in one process. A failed collective raises
    :class:`DistributedError`."""
    if not init_from_env(device):
        return (0, 1), None
    r, world = dist.get_rank(), dist.get_world_size()
    comm = torch.device(device)

    def reduce(t: torch.Tensor) -> torch.Tensor:
        total = t.to(comm)
        try:
            dist.all_reduce(total)
        except RuntimeError as err:
            raise DistributedError(f"rank {r} of {world}: summing the full-data ELBO across the ranks failed: another "
                                   f"rank stopped or did not answer ({_backend_message(err)}). The last checkpoint "
                                   "is intact: run again with --resume (with any number of ranks)") from err
        return total.cpu()

    return (r, world), reduce


def finish() -> None:
    """Leave the process group, if one is initialized (at the end of a successful run)."""
    if dist.is_available() and dist.is_initialized():
        import gc

        gc.collect()  # free unreachable DDP reducers and pending work before the group goes (see close)
        dist.destroy_process_group()


def refuse(what: str) -> None:
    """Raise if a process group is active: ``what`` has no data-parallel implementation."""
    if (dist.is_available() and dist.is_initialized()) or launched():
        raise RuntimeError(f"{what} does not run data-parallel under torch.distributed; use savigp.fit "
                           "(Adam, Adadelta or L-BFGS), or run it in one process")
