"""The one mini-batch training loop that :func:`savigp.fit` and :func:`savigp.fit_orthnat` share.

The loop draws the mini-batches (:class:`Batches`), asks a *step rule* to take a step, keeps the
resumable state, and at the rule's checks records the ELBO of the good steps
(:class:`TrainingHistory`), reacts to a bad step (the rule restores the last good parameters;
a failed K_zz factorization grows the jitter and training goes on, NaN/inf log-likelihood values
raise ``ValueError``, anything else :class:`TrainingDiverged`), reports progress and calls back.
What differs between optimizers is only the rule's update (see :mod:`savigp.training.rules`):

* ``step(batch, step) -> ELBOTerms``: one update on the batch (``None``: all data), Monte Carlo
  estimate of the ELBO of Bonilla et al. 2019, eq. (17), at the parameters the step started from;
* ``due(step, last) -> bool``: whether the loop checks after this step;
* ``check() -> Check``: one host read: the terms of the good steps since the last check, and the
  first bad step, if any;
* ``recover()``: back to the parameters after the last good step; ``explain(step)``: raise the
  likelihood's own error for the log-likelihood values of a bad step, if it can;
* ``stop(flag) -> bool``: whether a callback's answer stops training (all ranks agree under a
  process group); ``state_entries() -> dict`` and ``captured``: what the resumable state and the
  history keep of the rule.
"""
from __future__ import annotations

import math
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch
from tqdm.auto import tqdm

from ..linalg.cholesky import base_jitter, robust_cholesky
from ..model import ELBOTerms
from .convergence import still_rising, window_stats


class TrainingDiverged(FloatingPointError):
    """The ELBO or a parameter became NaN/inf; the model holds the last good parameters.

    Attributes:
        step: the (0-based) training step that went wrong, or None.
        where: the names of the ELBO terms (``"elbo"``, ``"ell"``, ...) and of the parameters
            (``model.named_parameters()`` names) that were not finite, in that order.
    """

    def __init__(self, message: str, *, step: Optional[int] = None, where: tuple = ()):
        super().__init__(message)
        self.step, self.where = step, tuple(where)

    def __reduce__(self):
        return _rebuild_diverged, (str(self), self.step, self.where)


def _rebuild_diverged(message, step, where):
    return TrainingDiverged(message, step=step, where=where)


@dataclass
class TrainingHistory:
    """What a call to :func:`fit` did: the ELBO after every step (one mini-batch's Monte Carlo
    estimate), the number of steps taken, and the convergence readout
    (:mod:`savigp.training.convergence`)."""

    elbo: list = field(default_factory=list)
    steps: int = 0
    seconds: float = 0.0
    estimator: str = ""
    terms: Optional[dict] = None
    cuda_graph: bool = False
    #: ``fit(max_components=...)``: the ELBO per K tried (:attr:`savigp.ComponentSearch.table`)
    components: Optional[dict] = None
    #: the ELBO on all N training points after the last step and its Monte Carlo standard error
    #: (:func:`savigp.training.convergence.full_data_elbo`; None when not computed)
    final_elbo: Optional[float] = None
    final_elbo_stderr: Optional[float] = None
    #: the one-line hint when the ELBO was still rising at the end (:func:`~savigp.training.convergence.still_rising`), else None
    still_rising: Optional[str] = None
    #: the torch threads the steps ran on
    threads: Optional[int] = None
    #: whether ``callback`` stopped training (fit's ``state`` then says where, for a resume)
    stopped: bool = False
    #: fit's exploration of starts before these steps (a mixture with K > 1 under Adam/Adadelta):
    #: :class:`savigp.training.starts.Exploration` (its kept path's steps open ``elbo``), else None
    starts: Optional[object] = None
    #: one :class:`~savigp.training.notes.Note` per event of the run a user should know of (kind,
    #: message, what to try, its warning category; ``str(note)`` is its line): the ELBO still rising,
    #: the cap, the time budget or a fall of a run to convergence, a local optimum, a mixture using
    #: fewer components than it has, what the starts and the move did, an L-BFGS step rejected because
    #: a trial point of its line search had a matrix that is not positive definite. fit warns those
    #: of a category once, at its end
    notes: list = field(default_factory=list)
    #: a run without ``iterations``: how it ended (:class:`savigp.training.until_converged.Convergence`)
    convergence: Optional[object] = None


@dataclass
class BadStep:
    """The first bad step since the last check: its index, its ELBO terms (floats, by name), whether
    each parameter (``model.parameters()`` order) was finite, and the failure flags
    (``{"cholesky": bool, "log_prob": bool}``; empty where the rule raises such failures at once)."""

    step: int
    terms: dict
    params_ok: list
    flags: dict = field(default_factory=dict)


@dataclass
class Check:
    """A rule's check: the terms (dicts of floats, :data:`savigp.ELBOTerms.NAMES`) of the good steps
    since the last check, in order, and the first bad step (None if there was none)."""

    rows: list
    bad: Optional[BadStep] = None


class LastGood:
    """In-place copies of every parameter of ``model`` after the last finite step (no allocation
    per step): :meth:`save` after a good step, :meth:`restore` after a bad one."""

    def __init__(self, model):
        self.pairs = list(zip(model.parameters(), parameter_copies(model)))

    @torch.no_grad()
    def save(self) -> None:
        for p, c in self.pairs:
            c.copy_(p)

    @torch.no_grad()
    def restore(self) -> None:
        for p, c in self.pairs:
            p.copy_(c)


def parameter_copies(model) -> list:
    """Detached copies of ``model.parameters()``, in that order (what :func:`restore_parameters` takes)."""
    return [p.detach().clone() for p in model.parameters()]


@torch.no_grad()
def restore_parameters(model, copies: list) -> None:
    """Copy ``copies`` (:func:`parameter_copies`, possibly read back from a file on the CPU) into
    ``model``'s parameters, in place."""
    params = list(model.parameters())
    if len(params) != len(copies):
        raise ValueError(f"restore_parameters: {len(copies)} saved tensors for {len(params)} parameters")
    for p, c in zip(params, copies):
        p.copy_(c)


class Batches:
    """The seeded mini-batch order: a random permutation of the N rows drawn from ``generator``,
    taken B rows at a time, redrawn when fewer than B remain; ``None`` (all data) when B = N.

    Args:
        perm: the current permutation, LongTensor ``(N,)`` (on the CPU); pos: rows of it used.
        device: where the batch indices go (the model's device).
    """

    def __init__(self, N: int, B: int, generator: torch.Generator, perm: torch.Tensor, pos: int, device):
        self.N, self.B, self.generator, self.device = int(N), int(B), generator, device
        self.perm, self.pos = perm, int(pos)
        self._on_device = perm.to(device)

    def next(self) -> Optional[torch.Tensor]:
        if self.B == self.N:
            return None
        if self.pos + self.B > self.N:
            self.perm, self.pos = torch.randperm(self.N, generator=self.generator), 0
            self._on_device = self.perm.to(self.device)
        batch = self._on_device[self.pos:self.pos + self.B]
        self.pos += self.B
        return batch


class Progress:
    """Progress of training on stderr: a tqdm bar with the smoothed ELBO and the estimator on a
    terminal (left in place at the end); elsewhere (a log file, a pipe) plain lines at every tenth
    of the run, with no carriage returns. The ELBO shown is the mean of the last :attr:`window`
    per-step estimates (a tenth of the run, at most 100 steps) with their standard deviation
    (:func:`savigp.training.convergence.window_stats`): one step's estimate is one mini-batch's."""

    def __init__(self, enabled: bool, start: int, iterations: int, estimator: str):
        self.enabled, self.start, self.total = bool(enabled), start, start + iterations
        self.label = f"savigp [{estimator}]"
        self.tty = self.enabled and hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
        self.bar = None
        if self.tty:
            self.bar = tqdm(total=self.total, initial=start, desc=self.label, dynamic_ncols=True, leave=True,
                            mininterval=0.5)
        self.every = max(1, iterations // 10)
        self.window = min(100, self.every)
        self.shown = start

    def update(self, done: int, elbo) -> None:
        """``done`` steps taken in all; ``elbo``: the per-step estimates so far (a list; the loop
        calls this at its checks)."""
        if not self.enabled or done <= self.shown:
            return
        steps, previous, self.shown = done - self.shown, self.shown, done
        mean, sd, n = window_stats(elbo, self.window)
        if self.bar is not None:
            self.bar.update(steps)
            # redraw at tqdm's interval, and on the last step however short the run
            self.bar.set_postfix(elbo=f"{mean:.6g}", sd=f"{sd:.3g}", refresh=done == self.total)
        elif (done - self.start) // self.every > (previous - self.start) // self.every or done == self.total:
            over = f" (mean of the last {n} steps, sd {sd:.3g})" if n > 1 else ""
            print(f"{self.label} step {done}/{self.total} elbo={mean:.6g}{over}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def grow_jitter(model, step: int) -> None:
    """After a failed K_zz factorization inside a step: ten times the relative jitter that factorizes
    K_zz at the (restored) parameters (and at least ten times the one that failed), kept in
    ``model.jitter_floor`` for the rest of training; raises :class:`savigp.CholeskyError` when no
    jitter helps."""
    with torch.no_grad():
        Z = model.inducing
        Kzz = model.kernel(Z)
        old = max(base_jitter(Kzz.dtype), float(getattr(model, "jitter_floor", 0.0)))
        _, rel = robust_cholesky(Kzz, name="K_zz (inducing-point kernel matrix)", return_jitter=True,
                                 initial_jitter=old)
    model.jitter_floor = 10.0 * max(rel, old)  # a decade above what factorizes now: the kernel keeps moving
    warnings.warn(f"savigp.fit: K_zz could not be factorized at step {step} with relative jitter {old:.1e}; "
                  f"continuing from the last good step with {model.jitter_floor:.1e}", RuntimeWarning, stacklevel=3)


def diverged_error(model, bad: BadStep) -> Exception:
    """The error for a bad step found at a check (the parameters are already restored)."""
    if bad.flags.get("log_prob"):
        return ValueError(
            f"{type(model.likelihood).__name__}.log_prob returned NaN or inf at training step {bad.step} (a "
            "log-density must be finite; score-function gradients are undefined at -inf). The model holds the "
            "parameters of the last good step; model.elbo(batch) on them names the rows if the values are "
            "reproducible")
    terms = [n for n, v in bad.terms.items() if n in ELBOTerms.CHECKED and not math.isfinite(v)]
    names = [n for n, _ in model.named_parameters()]
    params = [names[i] for i, ok in enumerate(bad.params_ok) if not ok]
    problems = [f"{n}={bad.terms[n]}" for n in terms] + [f"parameter {n} has non-finite entries" for n in params]
    return TrainingDiverged(
        f"training diverged at step {bad.step}: {'; '.join(problems[:5]) or 'non-finite values'}. The model holds "
        "the parameters of the last good step; try a smaller learning rate or more samples",
        step=bad.step, where=tuple(terms + params))


def run(model, rule, batches: Batches, history: TrainingHistory, *, start: int, iterations: int,
        progress: bool = False, callback: Optional[Callable] = None, state: Optional[dict] = None,
        report: Optional[Progress] = None, rates: Optional[Callable[[int], None]] = None) -> None:
    """Steps ``start .. start + iterations - 1`` of ``rule`` on ``batches`` (module docstring).

    ``progress`` reports on stderr (:class:`Progress`, labelled with ``history.estimator``), or
    ``report`` does: a caller's :class:`Progress` over a longer run (several calls; the caller
    closes it). ``callback(step, terms)`` runs at each check with the terms of the step just taken;
    a true answer stops training. ``state`` (fit's resumable state) receives, after every step, the
    rule's :meth:`state_entries`, the batch generator, ``perm``, ``pos`` and ``step`` (steps taken).
    ``history.seconds`` is set to the loop's wall-clock time when it ends without an error, and
    ``history.still_rising`` to the hint of :func:`savigp.training.convergence.still_rising` when the
    ELBO was still rising at the end (the callers warn with :class:`ConvergenceWarning`).
    ``rates(step)``, when given, sets the optimizer's learning rates before each step (a warm-up,
    :class:`savigp.training.warmup.RateWarmUp`).
    """
    own = report is None
    if own:
        report = Progress(progress, start, iterations, history.estimator)
    t0 = time.perf_counter()
    try:
        _steps(model, rule, batches, history, report, start, start + iterations, callback, state, rates)
    finally:
        if own:
            report.close()
    history.seconds = time.perf_counter() - t0
    rising = still_rising(history.elbo, model.num_data)
    history.still_rising = rising.message() if rising is not None else None


def _steps(model, rule, batches: Batches, history: TrainingHistory, report: Progress, start: int, last: int,
           callback: Optional[Callable], state: Optional[dict], rates: Optional[Callable[[int], None]] = None) -> None:
    for step in range(start, last):
        if rates is not None:
            rates(step)
        terms = rule.step(batches.next(), step)
        history.cuda_graph = rule.captured
        if state is not None:
            state.update(rule.state_entries(), generator=batches.generator, perm=batches.perm, pos=batches.pos,
                         step=step + 1)
        if not rule.due(step, last):
            continue
        check = rule.check()
        history.elbo.extend(row["elbo"] for row in check.rows)
        history.steps += len(check.rows)
        if check.rows:
            history.terms = check.rows[-1]
        if check.bad is not None:
            rule.recover()
            if check.bad.flags.get("cholesky"):  # (NaN factors make NaN log-likelihood values too)
                grow_jitter(model, check.bad.step)
                continue
            if check.bad.flags.get("log_prob"):
                rule.explain(check.bad.step)
            raise diverged_error(model, check.bad)
        if history.elbo:
            report.update(step + 1, history.elbo)
        if callback is not None and rule.stop(callback(step, terms)):
            history.stopped = True
            break
