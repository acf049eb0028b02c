"""Training loops: mini-batch Adam / Adadelta and full-batch L-BFGS (seed 004, §5, §9.2).

All parameters -- posterior means, Cholesky factors and mixture logits, kernel
hyper-parameters, inducing inputs and likelihood parameters -- are optimized jointly by default;
``groups`` selects a subset. Every step records on the device whether the ELBO and every
parameter are finite; fit reads that back every ``log_every`` steps and, if a step failed,
restores the parameters of the last good step and :class:`TrainingDiverged` names the step and
the term that failed (see :mod:`savigp._step` for the exact semantics, the jitter growth after a
failed K_zz factorization and the CUDA graph).
"""
from __future__ import annotations

import math
import sys
import warnings
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import torch
from tqdm.auto import tqdm

from . import _step, distributed
from ._allocator import tune_cpu_allocator
from ._linalg import base_jitter, robust_cholesky
from .model import SAVIGP, ELBOTerms
from .nonfinite import NonFiniteLogProb

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
    cuda_graph: bool = False


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
        self.shown = start

    def update(self, done: int, elbo: float) -> None:
        """``done`` steps taken in all (fit calls this at its reads: every ``log_every`` steps)."""
        if not self.enabled or done <= self.shown:
            return
        steps, previous, self.shown = done - self.shown, self.shown, done
        if self.bar is not None:
            self.bar.update(steps)
            # redraw at tqdm's interval, and on the last step however short the run
            self.bar.set_postfix(elbo=f"{elbo:.4g}", refresh=done == self.total)
        elif (done - self.start) // self.every > (previous - self.start) // self.every or done == self.total:
            print(f"{self.label} step {done}/{self.total} elbo={elbo:.6g}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def make_adam(params, lr: float, capturable: bool = False) -> torch.optim.Adam:
    """Adam with PyTorch's fused kernel where it applies (floating parameters on the CPU or CUDA):
    the same update in one pass per tensor (0.43 against 0.77-0.81 ms a step for an M = 500 full
    posterior's parameters, 2 CPU threads, torch 2.13). Falls back to the default implementation
    elsewhere. (Fused steps do not bump version counters; the decoupled head's prediction cache
    keys on the values too, see :mod:`savigp.decoupled`.) ``capturable``: keep the step counters
    on the device, as a CUDA graph of the step needs."""
    flat = [p for g in params for p in (g["params"] if isinstance(g, dict) else [g])]
    fusable = bool(flat) and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in flat)
    extra = {"capturable": True} if capturable else {}
    if fusable:
        try:
            return torch.optim.Adam(params, lr=lr, fused=True, **extra)
        except (RuntimeError, ValueError):  # an unsupported dtype or device: the portable update
            return torch.optim.Adam(params, lr=lr, **extra)
    return torch.optim.Adam(params, lr=lr, **extra)


def default_log_every(device: torch.device) -> int:
    """Steps between fit's host reads by default: 1 on the CPU (a read costs nothing there: the
    CPU has no queue of work to drain), 100 on an accelerator."""
    return 1 if torch.device(device).type == "cpu" else 100


def _grow_jitter(model: SAVIGP, step: int) -> None:
    """After a failed K_zz factorization inside a step: ten times the relative jitter that factorizes
    K_zz at the (restored) parameters (and at least ten times the one that failed), kept in
    ``model.jitter_floor`` for the rest of training; raises :class:`savigp.CholeskyError` when no
    jitter helps."""
    with torch.no_grad():
        Z = model.inducing
        Kzz = model.kernel(Z, Z)
        old = max(base_jitter(Kzz.dtype), float(getattr(model, "jitter_floor", 0.0)))
        _, rel = robust_cholesky(Kzz, name="K_zz (inducing-point kernel matrix)", return_jitter=True)
    model.jitter_floor = 10.0 * max(rel, old)  # a decade above what factorizes now: the kernel keeps moving
    warnings.warn(f"savigp.fit: K_zz could not be factorized at step {step} with relative jitter {old:.1e}; "
                  f"continuing from the last good step with {model.jitter_floor:.1e}", RuntimeWarning, stacklevel=3)


def _diverged(model: SAVIGP, info: dict, step: int) -> Exception:
    """The error for a bad step found at a check (the parameters are already restored)."""
    if info["flags"].get("log_prob"):
        return ValueError(
            f"{type(model.likelihood).__name__}.log_prob returned NaN or inf at training step {step} (a log-density "
            "must be finite; score-function gradients are undefined at -inf). The model holds the parameters of "
            "the last good step; model.elbo(batch) on them names the rows if the values are reproducible")
    problems = [f"{n}={v}" for n, v in info["terms"].items() if n != "ell_stderr" and not math.isfinite(v)]
    names = [n for n, _ in model.named_parameters()]
    problems += [f"parameter {names[i]} has non-finite entries" for i, ok in enumerate(info["params_ok"]) if not ok]
    return TrainingDiverged(
        f"training diverged at step {step}: {'; '.join(problems[:5]) or 'non-finite values'}. The model holds "
        "the parameters of the last good step; try a smaller learning rate or more samples")


def _fit_checked(model, opt, ddp, report, history, gen, num_samples, estimator, state, callback, start, iterations,
                 perm, pos, B, N) -> None:
    """fit's loop with a host read per step: L-BFGS (full batch, the same draws at every evaluation
    within an outer step; L-BFGS reads the loss on the host anyway) and any optimizer under a process
    group (``ddp``, :mod:`savigp.distributed`: its all-reduces synchronize every step anyway, and a
    check every step keeps all ranks in agreement about stopping). Errors raise at once (a
    user likelihood's NaN as :class:`savigp.nonfinite.NonFiniteLogProb`, naming rows and f values)."""
    last_good = _LastGood(model)  # after setup: rank 0's broadcast parameters
    for step in range(start, start + iterations):
        if isinstance(opt, torch.optim.LBFGS):
            draw_seed = int(torch.randint(0, 2**62, (1,), generator=gen))

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
            terms = ddp.elbo_and_grad(batch, num_samples=num_samples, estimator=estimator,
                                      generator=ddp.draws(step), step=step)
            if torch.isfinite(terms.elbo):
                opt.step()
        _check_finite(model, terms, step, last_good)
        last_good.save()
        history.terms = terms.as_dict()
        history.elbo.append(history.terms["elbo"])
        history.steps += 1
        if state is not None:
            state.update(optimizer=opt, generator=gen, perm=perm, pos=pos, step=step + 1)
        report.update(step + 1, history.elbo[-1])
        if callback is not None and (callback(step, terms) if ddp is None else ddp.any(bool(callback(step, terms)))):
            break


def _explain_log_prob(model, inputs: tuple, step: int, num_samples: int, estimator: str) -> None:
    """After a step flagged NaN/inf log-likelihood values (parameters already restored to the ones
    that step evaluated): evaluate that step's ELBO again with its batch and draws, outside the
    deferred checks, so that :func:`savigp.expected_log_lik.checked_log_prob` raises its error
    naming the likelihood, the data rows, the targets and the f values. Returns if the values are
    finite this time (the caller then raises its own error)."""
    batch, draw_state, device = inputs
    if draw_state is None:
        return
    g = torch.Generator(device=device)
    g.set_state(draw_state)
    try:
        model.elbo(batch, num_samples=num_samples, estimator=estimator, generator=g)
    except NonFiniteLogProb as err:
        raise NonFiniteLogProb(err.who, err.examples, err.count, err.total,
                               f"{err.hint} (at training step {step}; the model holds the parameters of the last "
                               "good step)") from None


def _fit_sync_free(model, opt, report, history, gen, draw_gen, num_samples, estimator, state, callback, start,
                   iterations, perm, pos, B, N, window, graphs) -> None:
    """fit's mini-batch loop with Adam/Adadelta in one process: :class:`savigp._step.StepRunner`'s
    steps never wait for the device; every ``window`` steps (and after the last) one host read
    collects the ELBO values and failure flags, updates the progress report and calls ``callback``."""
    runner = _step.StepRunner(model, opt, num_samples=num_samples, estimator=estimator, generator=draw_gen,
                              window=window, graphs=graphs)
    perm_dev = perm.to(model.device)
    since = 0
    inputs = []  # per step of the window: (batch, draw generator state, device), to explain a NaN likelihood
    for step in range(start, start + iterations):
        if B == N:
            batch = None
        else:
            if pos + B > N:
                perm, pos = torch.randperm(N, generator=gen), 0
                perm_dev = perm.to(model.device)
            batch = perm_dev[pos:pos + B]
            pos += B
        # (a captured graph advances its generator on the device: no host-side state to keep)
        inputs.append((batch, draw_gen.get_state() if runner.graph is None else None, draw_gen.device))
        terms = runner.run(batch)
        history.cuda_graph = runner.captured
        since += 1
        if state is not None:
            state.update(optimizer=opt, generator=gen, perm=perm, pos=pos, step=step + 1)
            if draw_gen is not gen:
                state.update(draw_generator=draw_gen)
        if since < window and step + 1 < start + iterations:
            continue
        since = 0
        info = runner.read()  # the one host read of this window
        window_start, window_inputs, inputs = step + 1 - len(inputs), inputs, []
        for row in info["rows"]:
            history.elbo.append(row[0])
        history.steps += len(info["rows"])
        if info["rows"]:
            history.terms = dict(zip(runner.TERMS, info["rows"][-1]))
        if not info["ok"]:
            runner.recover()
            bad = start + info["step"]
            if info["flags"].get("cholesky"):  # (NaN factors make NaN log-likelihood values too)
                _grow_jitter(model, bad)
                continue
            if info["flags"].get("log_prob") and 0 <= bad - window_start < len(window_inputs):
                _explain_log_prob(model, window_inputs[bad - window_start], bad, num_samples, estimator)
            raise _diverged(model, info, bad)
        if history.elbo:
            report.update(step + 1, history.elbo[-1])
        if callback is not None and callback(step, terms):
            break


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
    log_every: Optional[int] = None,
    cuda_graphs: Optional[bool] = None,
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
            on a terminal, plain lines at every tenth of the run otherwise (updated at each read).
        callback: ``callback(step, terms)`` at each check (every ``log_every`` steps and after
            the last; after every step on the CPU by default), with the terms of that step, which
            are finite; return True to stop early.
        log_every: steps between host reads of the ELBO and the failure flags (default
            :func:`default_log_every`: 1 on the CPU, 100 on an accelerator). The steps themselves
            never wait for the device; a failure is acted on at the next read (see
            :mod:`savigp._step`). L-BFGS, and every step under a process group, read every step.
        cuda_graphs: capture the mini-batch step in a CUDA graph and replay it (None: wherever
            possible, i.e. on CUDA with Adam/Adadelta and a torch likelihood; False: never; True:
            say once why not where impossible). The Monte Carlo draws then come from a CUDA
            generator seeded with ``seed`` (so do they for any CUDA model).
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
            Off the CPU the draws have their own generator on the device: ``"draw_generator"``
            (stored) and ``"draw_generator_state"`` (restored).

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
    window = default_log_every(model.device) if log_every is None else int(log_every)
    if window < 1:
        raise ValueError(f"log_every must be >= 1, got {log_every}")
    graphs, why = _step.graph_decision(cuda_graphs, device=model.device, optimizer=optimizer, estimator=estimator,
                                       likelihood=model.likelihood, joint=bool(getattr(model.posterior, "joint", False)))
    if not graphs and cuda_graphs is not False and (cuda_graphs or model.device.type == "cuda"):
        _step.say_once(f"savigp.fit: the step is not captured in a CUDA graph: {why}")
    params = parameter_groups(model, groups)
    if not params:
        raise ValueError(f"no trainable parameters in groups {groups}")
    if optimizer == "adam":
        opt = make_adam(params, lr, capturable=graphs)
    elif optimizer == "adadelta":
        opt = torch.optim.Adadelta(params, lr=lr, **({"capturable": True} if graphs else {}))
    else:
        opt = torch.optim.LBFGS(params, lr=lr, max_iter=lbfgs_max_iter, history_size=50,
                                line_search_fn="strong_wolfe", tolerance_grad=1e-9, tolerance_change=1e-12)

    gen = torch.Generator().manual_seed(seed)
    # the draws: from gen on the CPU (as always); from a generator on the device elsewhere (no copy
    # of the draws per step, and graph-safe)
    draw_gen = gen if model.device.type == "cpu" else torch.Generator(device=model.device).manual_seed(seed)
    history = TrainingHistory(estimator=estimator)
    perm, pos = torch.randperm(N, generator=gen), 0
    start = 0
    if state is not None:
        if state.get("optimizer_state") is not None:
            opt.load_state_dict(state["optimizer_state"])
        if state.get("generator_state") is not None:
            gen.set_state(state["generator_state"])
        if state.get("draw_generator_state") is not None and draw_gen is not gen:
            draw_gen.set_state(state["draw_generator_state"])
        if state.get("perm") is not None:
            perm, pos = state["perm"].clone(), int(state.get("pos", 0))
        start = int(state.get("step", 0))
    # under torch.distributed (torchrun): this rank's share of every global batch, gradients summed
    ddp = distributed.setup(model, params, seed, {"N": N, "batch_size": B, "iterations": iterations,
                                                  "start step": start, "seed": seed, "batch position": pos})
    progress = progress and (ddp is None or ddp.rank == 0)
    report = _Progress(progress, start, iterations, estimator)
    t0 = time.perf_counter()
    try:
        if optimizer == "lbfgs" or ddp is not None:
            _fit_checked(model, opt, ddp, report, history, gen, num_samples, estimator, state, callback,
                         start, iterations, perm, pos, B, N)
        else:
            _fit_sync_free(model, opt, report, history, gen, draw_gen, num_samples, estimator, state, callback,
                           start, iterations, perm, pos, B, N, window, graphs)
    finally:
        report.close()
    history.seconds = time.perf_counter() - t0
    return history
