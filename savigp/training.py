"""Training loops: mini-batch Adam / Adadelta and full-batch L-BFGS (seed 004, §5, §9.2).

All parameters -- posterior means, Cholesky factors and mixture logits, kernel
hyper-parameters, inducing inputs and likelihood parameters -- are optimized jointly by default;
``groups`` selects a subset. Every step checks that the ELBO and every parameter are finite;
if not, the last good parameters are restored and :class:`TrainingDiverged` names the step and
the term that failed.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import torch
from tqdm.auto import tqdm

from . import distributed
from ._allocator import tune_cpu_allocator
from .model import SAVIGP, ELBOTerms

OPTIMIZERS = ("adam", "adadelta", "lbfgs")
PARAMETER_GROUPS = ("posterior", "kernel", "inducing", "likelihood", "prior_mean", "mean_head")


class TrainingDiverged(FloatingPointError):
    """The ELBO or a parameter became NaN/inf; the model holds the last good parameters."""


@dataclass
class TrainingHistory:
    """What a call to :func:`fit` did: the ELBO after every step (Monte Carlo estimate) and the
    number of steps taken."""

    elbo: list = field(default_factory=list)
    steps: int = 0
    seconds: float = 0.0
    estimator: str = ""
    terms: Optional[dict] = None


def parameter_groups(model: SAVIGP, groups: Optional[Sequence[str]] = None) -> list:
    """The trainable parameters of the named groups (all groups by default)."""
    groups = PARAMETER_GROUPS if groups is None else tuple(groups)
    unknown = set(groups) - set(PARAMETER_GROUPS)
    if unknown:
        raise ValueError(f"unknown parameter group(s) {sorted(unknown)}; choose from {PARAMETER_GROUPS}")
    modules = {"posterior": [model.posterior], "kernel": [model.kernel], "likelihood": [model.likelihood],
               "mean_head": [model.mean_head] if model.mean_head is not None else []}
    params = []
    for g in groups:
        if g == "inducing":
            params += [model.inducing] if isinstance(model.inducing, torch.nn.Parameter) else []
        elif g == "prior_mean":
            params += [model.prior_mean] if isinstance(model.prior_mean, torch.nn.Parameter) else []
        else:
            for m in modules[g]:
                params += [p for p in m.parameters() if p.requires_grad]
    return params


class _LastGood:
    """In-place copies of every parameter after the last finite step (no allocation per step)."""

    def __init__(self, model: SAVIGP):
        self.pairs = [(p, p.detach().clone()) for p in model.parameters()]

    @torch.no_grad()
    def save(self) -> None:
        for p, c in self.pairs:
            c.copy_(p)

    @torch.no_grad()
    def restore(self) -> None:
        for p, c in self.pairs:
            p.copy_(c)


def _check_finite(model: SAVIGP, terms: ELBOTerms, step: int, last_good: _LastGood) -> None:
    problems = []
    for name in ("ell", "entropy", "cross_entropy", "mean_head_kl"):
        if not math.isfinite(getattr(terms, name)):
            problems.append(f"{name}={getattr(terms, name)}")
    for name, p in model.named_parameters():
        if not torch.isfinite(p).all():
            problems.append(f"parameter {name} has non-finite entries")
    if problems:
        last_good.restore()
        raise TrainingDiverged(
            f"training diverged at step {step}: {'; '.join(problems[:5])}. The model holds the parameters of "
            "the last good step; try a smaller learning rate or more samples"
        )



class _Progress:
    """Progress of :func:`fit` on stderr: a tqdm bar with the running ELBO and the estimator on a
    terminal (left in place at the end); elsewhere (a log file, a pipe) plain lines at every tenth
    of the run, with no carriage returns."""

    def __init__(self, enabled: bool, start: int, iterations: int, estimator: str):
        self.enabled, self.start, self.total = bool(enabled), start, start + iterations
        self.label = f"savigp [{estimator}]"
        self.tty = self.enabled and hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
        self.bar = None
        if self.tty:
            self.bar = tqdm(total=self.total, initial=start, desc=self.label, dynamic_ncols=True, leave=True,
                            mininterval=0.5)
        self.every = max(1, iterations // 10)

    def update(self, done: int, elbo: float) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(1)
            # redraw at tqdm's interval, and on the last step however short the run
            self.bar.set_postfix(elbo=f"{elbo:.4g}", refresh=done == self.total)
        elif (done - self.start) % self.every == 0 or done == self.total:
            print(f"{self.label} step {done}/{self.total} elbo={elbo:.6g}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def make_adam(params, lr: float) -> torch.optim.Adam:
    """Adam with PyTorch's fused kernel where it applies (floating parameters on the CPU or CUDA):
    the same update in one pass per tensor (0.43 against 0.77-0.81 ms a step for an M = 500 full
    posterior's parameters, 2 CPU threads, torch 2.13). Falls back to the default implementation
    elsewhere. (Fused steps do not bump version counters; the decoupled head's prediction cache
    keys on the values too, see :mod:`savigp.decoupled`.)"""
    flat = [p for g in params for p in (g["params"] if isinstance(g, dict) else [g])]
    fusable = bool(flat) and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in flat)
    if fusable:
        try:
            return torch.optim.Adam(params, lr=lr, fused=True)
        except (RuntimeError, ValueError):  # an unsupported dtype or device: the portable update
            return torch.optim.Adam(params, lr=lr)
    return torch.optim.Adam(params, lr=lr)


def fit(
    model: SAVIGP,
    *,
    iterations: Optional[int] = None,
    epochs: Optional[float] = None,
    batch_size: Optional[int] = None,
    optimizer: str = "adam",
    lr: float = 0.01,
    num_samples: int = 100,
    estimator: str = "auto",
    groups: Optional[Sequence[str]] = None,
    seed: int = 0,
    progress: bool = True,
    callback: Optional[Callable[[int, ELBOTerms], Optional[bool]]] = None,
    lbfgs_max_iter: int = 20,
    state: Optional[dict] = None,
    tune_allocator: bool = True,
) -> TrainingHistory:
    """Optimize the ELBO of ``model``.

    Args:
        iterations: number of optimizer steps (for L-BFGS: outer steps of ``lbfgs_max_iter``
            inner iterations each, all with the same Monte Carlo draws).
        epochs: alternatively, passes over the data (``iterations = epochs * N / batch_size``).
        batch_size: B for mini-batches (default: all N); L-BFGS always uses all data.
        optimizer: ``"adam"``, ``"adadelta"`` or ``"lbfgs"``.
        lr: learning rate (Adadelta's default in torch is 1.0; L-BFGS uses it as its step size).
        num_samples: S, Monte Carlo samples per data point and component.
        estimator: see :mod:`savigp.expected_log_lik`.
        groups: parameter groups to optimize (default all): a subset of :data:`PARAMETER_GROUPS`.
        seed: seeds the mini-batch order and the Monte Carlo draws.
        progress: report progress on stderr: a tqdm bar with the running ELBO and the estimator
            on a terminal, plain lines at every tenth of the run otherwise.
        callback: ``callback(step, terms)`` after each step; return True to stop early.
        tune_allocator: on the CPU, first call :func:`savigp.tune_cpu_allocator` (glibc only): freed
            memory is kept for reuse between steps instead of being returned to the operating
            system (faster steps, see :mod:`savigp._allocator` for the measurement); the process keeps
            its peak resident size afterwards. False leaves the C library's settings alone.
        state: optional dict for resumable training (used by the ``savigp`` CLI's checkpoints).
            On entry, fit restores whatever of these keys it holds: ``"optimizer_state"`` (an
            optimizer ``state_dict()``), ``"generator_state"`` (``torch.Generator.get_state()``),
            ``"perm"`` (LongTensor ``(N,)``) and ``"pos"`` (int), the mini-batch order, and
            ``"step"`` (int), the steps already taken (``iterations`` more are taken; ``step``
            values seen by ``callback`` continue from it). After every step, before ``callback``,
            fit stores the live ``"optimizer"`` and ``"generator"`` objects and the current
            ``"perm"``, ``"pos"`` and ``"step"`` in it, so that a callback can checkpoint exactly.

    Data-parallel: under ``torchrun`` (or any initialized ``torch.distributed`` process group), fit
    joins the group described by the environment if it is not yet joined (gloo for a CPU model,
    NCCL for CUDA), broadcasts rank 0's parameters, and every rank evaluates its disjoint share of
    each global mini-batch of ``batch_size`` points (the same seeded order on every rank), weighted
    so that the summed ELBO and gradient are the one-process ones on the union batch (Bonilla et al.
    2019, eq. (33); the KL terms count once). Gradients are summed by an all-reduce, so every rank
    takes the same step; Monte Carlo draws differ per rank (seeded by seed, rank and step). Only
    rank 0 shows the progress bar; ``callback`` runs on every rank with the global terms, and a stop
    on any rank stops all. A failed or silent rank raises :class:`savigp.distributed.DistributedError`
    after the process-group timeout at most. See :mod:`savigp.distributed`.

    Returns:
        :class:`TrainingHistory`.
    """
    import time

    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    N = model.num_data
    B = N if (batch_size is None or optimizer == "lbfgs") else int(batch_size)
    if not 1 <= B <= N:
        raise ValueError(f"batch_size must be between 1 and N={N}, got {batch_size}")
    if iterations is None:
        if epochs is None:
            raise ValueError("give iterations= or epochs=")
        iterations = max(1, int(math.ceil(epochs * N / B)))
    iterations = int(iterations)
    if iterations < 0:
        raise ValueError(f"iterations must be >= 0, got {iterations}")
    estimator = model.resolved_estimator(estimator)
    if tune_allocator and model.device.type == "cpu":
        tune_cpu_allocator()
    params = parameter_groups(model, groups)
    if not params:
        raise ValueError(f"no trainable parameters in groups {groups}")
    if optimizer == "adam":
        opt = make_adam(params, lr)
    elif optimizer == "adadelta":
        opt = torch.optim.Adadelta(params, lr=lr)
    else:
        opt = torch.optim.LBFGS(params, lr=lr, max_iter=lbfgs_max_iter, history_size=50,
                                line_search_fn="strong_wolfe", tolerance_grad=1e-9, tolerance_change=1e-12)

    gen = torch.Generator().manual_seed(seed)
    history = TrainingHistory(estimator=estimator)
    last_good = _LastGood(model)
    perm, pos = torch.randperm(N, generator=gen), 0
    start = 0
    if state is not None:
        if state.get("optimizer_state") is not None:
            opt.load_state_dict(state["optimizer_state"])
        if state.get("generator_state") is not None:
            gen.set_state(state["generator_state"])
        if state.get("perm") is not None:
            perm, pos = state["perm"].clone(), int(state.get("pos", 0))
        start = int(state.get("step", 0))
    # under torch.distributed (torchrun): this rank's share of every global batch, gradients summed
    ddp = distributed.setup(model, params, seed, {"N": N, "batch_size": B, "iterations": iterations,
                                                  "start step": start, "seed": seed, "batch position": pos})
    progress = progress and (ddp is None or ddp.rank == 0)
    report = _Progress(progress, start, iterations, estimator)
    t0 = time.perf_counter()
    for step in range(start, start + iterations):
        if optimizer == "lbfgs":
            draw_seed = int(torch.randint(0, 2**62, (1,), generator=gen))
            last: dict = {}

            def closure():
                opt.zero_grad()
                if ddp is not None:  # the same draws at every evaluation, per rank
                    terms = ddp.elbo_and_grad(None, num_samples=num_samples, estimator=estimator,
                                              generator=ddp.draws(step), step=step)
                    return -terms.elbo
                g = torch.Generator().manual_seed(draw_seed)  # the same draws at every evaluation
                terms = model.elbo(None, num_samples=num_samples, estimator=estimator, generator=g)
                loss = -terms.elbo
                if torch.isfinite(loss):
                    loss.backward()
                last["terms"] = terms
                return loss

            opt.step(closure)
            if ddp is not None:
                terms = ddp.elbo_and_grad(None, num_samples=num_samples, estimator=estimator,
                                          generator=ddp.draws(step), step=step, backward=False)
            else:
                terms = model.elbo(None, num_samples=num_samples, estimator=estimator,
                                   generator=torch.Generator().manual_seed(draw_seed))
        else:
            if B == N:
                batch = None
            else:
                if pos + B > N:
                    perm, pos = torch.randperm(N, generator=gen), 0
                batch = perm[pos:pos + B].to(model.device)
                pos += B
            opt.zero_grad()
            if ddp is not None:
                terms = ddp.elbo_and_grad(batch, num_samples=num_samples, estimator=estimator,
                                          generator=ddp.draws(step), step=step)
                if torch.isfinite(terms.elbo):
                    opt.step()
            else:
                terms = model.elbo(batch, num_samples=num_samples, estimator=estimator, generator=gen)
                if torch.isfinite(terms.elbo):
                    (-terms.elbo).backward()
                    opt.step()
        _check_finite(model, terms, step, last_good)
        last_good.save()
        history.elbo.append(float(terms.elbo.detach()))
        history.steps += 1
        history.terms = terms.as_dict()
        if state is not None:
            state.update(optimizer=opt, generator=gen, perm=perm, pos=pos, step=step + 1)
        report.update(step + 1, history.elbo[-1])
        if callback is not None and (callback(step, terms) if ddp is None else ddp.any(bool(callback(step, terms)))):
            break
    report.close()
    history.seconds = time.perf_counter() - t0
    return history
