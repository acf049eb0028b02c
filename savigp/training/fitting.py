"""fit: mini-batch Adam / Adadelta and full-batch L-BFGS (Bonilla et al. 2019, §5, §9.2).

All parameters -- posterior means, Cholesky factors and mixture logits, kernel
hyper-parameters, inducing inputs and likelihood parameters -- are optimized jointly by default;
``groups`` selects a subset. Every step records on the device whether the ELBO and every
parameter are finite; fit reads that back every ``log_every`` steps and, if a step failed,
restores the parameters of the last good step and :class:`TrainingDiverged` names the step and
the term that failed (see :mod:`savigp.training.step` for the exact semantics, the jitter growth
after a failed K_zz factorization and the CUDA graph). The loop is :func:`savigp.training.loop.run`,
the updates are the rules of :mod:`savigp.training.rules`, the phases of a run (starts, reflection
move, fit's own phase, annealing) those of :mod:`savigp.training.schedule`.
"""
from __future__ import annotations

import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from typing import Optional, Sequence

import torch

from . import distributed
from .._choices import ESTIMATORS, OPTIMIZERS, PARAMETER_GROUPS
from ..runtime.allocator import tune_cpu_allocator
from ..runtime.threads import torch_threads
from ..model import SAVIGP
from . import loop, notes as _notes, schedule as _schedule, starts as _starts, step as _step, warmup as _warmup
from .component_checks import component_notes, fold_notes
from .convergence import MIN_TREND_STEPS, full_data_elbo, still_rising
from .groups import parameter_groups
from .loop import Batches, TrainingHistory
from .optimizers import make_adam
from .plan import FitPlan, ResolvedPlan, default_log_every
from .rules import GradientStep, SyncFreeStep
from .step_scales import attach_element_scales, scaled_groups


#: the mixture weights' learning rate relative to fit's ``lr`` (first-order optimizers, K > 1)
WEIGHT_LR_FACTOR = 0.1


def mixture_param_groups(model: SAVIGP, params: list, lr: float, weight_lr: Optional[float]) -> list:
    """``params`` as optimizer groups: a mixture's logits (K > 1) in a group of their own at rate
    ``weight_lr`` (None: :data:`WEIGHT_LR_FACTOR` times ``lr``), everything else at ``lr``.

    Two time scales, as in the natural-gradient methods for mixtures (Arenz, Neumann & Zhong 2018,
    §4: the weights are updated after the components; Lin, Khan & Schmidt 2019, §3): while the
    components move towards their modes, their ELBO contributions c_k differ by many nats, and at
    the components' rate the weights follow those transient differences to 0 or 1 within ~100
    steps. A weight that has collapsed leaves its component where it stood (a wide Gaussian
    between the modes, a stationary point with a near-zero weight). At a tenth of the rate the
    weights stay near their start until the components have settled, then move by the
    exponentiated-gradient step of
    :meth:`savigp.posteriors.MixturePosterior.precondition_gradients`.
    """
    post = model.posterior
    logits = post.weight_logits
    if post.num_components == 1 or logits is None or not any(p is logits for p in params):
        return params
    rate = WEIGHT_LR_FACTOR * lr if weight_lr is None else float(weight_lr)
    if not rate > 0:
        raise ValueError(f"weight_lr must be > 0, got {weight_lr}")
    return [{"params": [p for p in params if p is not logits]}, {"params": [logits], "lr": rate}]


def _warn_joint_factorized(model: SAVIGP, groups: Optional[Sequence[str]]) -> None:
    """A :class:`~savigp.training.warm_start.FactorizedHyperparameterWarning` naming the two-stage recipe when
    ``groups`` learn a dense model's hyper-parameters with a factorized q(u)
    (:func:`savigp.training.warm_start.joint_factorized_fit`)."""
    from .warm_start import TWO_STAGE_PYTHON, FactorizedHyperparameterWarning, joint_factorized_fit

    problem = joint_factorized_fit(model, groups)
    if problem is not None:
        warnings.warn(f"savigp.fit: {problem}. The two-stage recipe avoids it: {TWO_STAGE_PYTHON}.",
                      FactorizedHyperparameterWarning, stacklevel=3)  # (fit's caller)



class DifferentiableHintWarning(UserWarning):
    """fit's ``estimator="auto"`` chose a score-function estimator for a likelihood that autograd
    differentiates in f (a user function in torch): the reparameterization estimator, usually much
    less noisy, is one option away."""


@dataclass(frozen=True)
class StepOptions:
    """How :func:`fit` takes each step: the optimizer and the Monte Carlo estimate of a phase's rule
    (:mod:`savigp.training.rules`). Fit's arguments of these names, ``batch_size`` resolved (all N
    for L-BFGS) and ``estimator`` resolved for the model."""

    batch_size: int
    optimizer: str
    lr: float
    weight_lr: Optional[float]
    num_samples: int
    estimator: str
    groups: Optional[Sequence[str]]
    lbfgs_max_iter: int
    log_every: int
    cuda_graphs: Optional[bool]

    def annealed(self) -> "StepOptions":
        """The annealing phase's: ``lr`` and the weights' rate (default ``lr`` times
        :data:`WEIGHT_LR_FACTOR`) times :data:`~savigp.training.starts.ANNEAL_LR`."""
        weight_lr = (WEIGHT_LR_FACTOR * self.lr if self.weight_lr is None else self.weight_lr) * _starts.ANNEAL_LR
        return replace(self, lr=self.lr * _starts.ANNEAL_LR, weight_lr=weight_lr)


@dataclass(frozen=True)
class PhaseOptions:
    """The phases :func:`fit` runs around its own (:mod:`savigp.training.schedule`): a mixture's
    ``starts`` (together ``start_fraction`` of the iterations), the ``reflect`` move and the
    ``anneal`` phase (None: where it applies; False: never). Fit's arguments of these names."""

    starts: int = _starts.DEFAULT_STARTS
    start_fraction: float = _starts.DEFAULT_FRACTION
    reflect: bool = True
    anneal: Optional[bool] = None


def fit(model: SAVIGP, plan: Optional[FitPlan] = None, **options) -> TrainingHistory:
    """Optimize the ELBO of ``model``: run ``plan`` (a :class:`~savigp.training.plan.FitPlan`, checked
    when it was made and resolved for the model once, :meth:`~savigp.training.plan.FitPlan.for_model`),
    or the plan of the keyword arguments below (``fit(model, iterations=500, lr=0.01)`` is
    ``fit(model, FitPlan(iterations=500, lr=0.01))``, bit for bit); keywords given with a plan
    replace its fields. A bad value raises a ``ValueError`` naming the option before any step.

    What fit has to say at the end (the ELBO still rising, the cap or the time budget reached, a fall
    below the best round, a local optimum, a mixture using fewer components than it has, what the
    starts and the move did, a rejected L-BFGS step) is in ``history.notes``, one
    :class:`~savigp.training.notes.Note` each (kind, message, what to try); those of a warning
    category are also warned once, at the end, with it (:class:`ConvergenceWarning`,
    :class:`~savigp.training.starts.LocalOptimumWarning`,
    :class:`~savigp.training.component_checks.ComponentWarning`). A caller that prints the notes
    itself silences those categories.

    Args:
        iterations: number of optimizer steps (for L-BFGS: outer steps of ``lbfgs_max_iter``
            inner iterations each, all with the same Monte Carlo draws). Without ``iterations`` and
            ``epochs``, fit runs until the ELBO has stopped rising, by the rule of
            :mod:`savigp.training.until_converged` (rounds of steps, the trend of the ELBO after the
            exploration within its noise over a window of a quarter of the path, and the full-data
            ELBO's gain over the last round within its noise), up to
            ``max_iterations`` steps (default 20000) or ``time_budget`` seconds, then polishes with
            L-BFGS where the full data fit in memory; ``history.convergence`` says how it ended.
        epochs: alternatively, passes over the data (``iterations = epochs * N / batch_size``).
        batch_size: B for mini-batches (default: all N); L-BFGS always uses all data.
        optimizer: ``"adam"``, ``"adadelta"`` or ``"lbfgs"``.
        lr: learning rate (Adadelta's default in torch is 1.0; L-BFGS uses it as its step size).
        weight_lr: Adam/Adadelta, mixtures (K > 1): the learning rate of the mixture weights' logits
            (default ``lr`` / 10, see :func:`mixture_param_groups`). With these optimizers each
            component's gradients (and its logit's) are divided by its weight before the step
            (:meth:`savigp.posteriors.MixturePosterior.precondition_gradients`; Lin, Khan & Schmidt
            2019), so that a component learns at a rate independent of its weight.
        starts: Adam/Adadelta, mixtures (K > 1): the number of starts explored before the fit
            proper (default :data:`~savigp.training.starts.DEFAULT_STARTS` = 4; 1: none): the
            model's own start and fresh spreads of its component means
            (:meth:`savigp.posteriors.MixturePosterior.respread`), each fitted for
            ``start_fraction * iterations / starts`` steps; the one with the highest full-data ELBO
            (common draws) goes on (the short-runs initialization of EM for mixtures, Biernacki,
            Celeux & Govaert 2003). A K > 1 fit of a posterior with several modes otherwise ends in
            the local optimum its start leads to (a component whose mean changes sign between
            inputs, 1-20 nats below the two-mode fit) in up to a third of the seeds (docs/mixtures.md).
        start_fraction: the fraction of ``iterations`` all the starts take together, in (0, 1).
        anneal: Adam/Adadelta: take the last 10% of the iterations
            (:data:`~savigp.training.starts.ANNEAL_FRACTION`) with a fresh optimizer at a tenth of
            ``lr`` and ``weight_lr`` (:data:`~savigp.training.starts.ANNEAL_LR`), to bring the fit
            below the noise floor of its Monte Carlo gradients at ``lr`` (a two-step version of
            the decreasing step sizes of Robbins & Monro 1951). None (the default) and True: for
            any posterior fitted by Adam/Adadelta (so that fits of different K compared by their
            ELBO have had the same schedule); False: never. Measured on Gaussian regression
            (docs/mixtures.md), K = 1 with the score estimator at ``lr=0.05`` ends up to 0.3 nats
            below its annealed fit. Its first :data:`~savigp.training.warmup.ANNEAL_WARMUP_STEPS`
            (10) steps warm up (below).
        warmup: Adam/Adadelta: a fresh optimizer that starts at a fitted point takes its first
            W steps at rates rising geometrically from a hundredth of its rate to it
            (:mod:`savigp.training.warmup`: lr_i = lr 0.01^(1 - i/W); Goyal et al. 2017), so that
            it does not throw the fit out of its optimum (a fresh Adam's first step moves every
            coordinate by ``lr``): W = :data:`~savigp.training.warmup.ANNEAL_WARMUP_STEPS` (10) in
            the annealing phase, :data:`~savigp.training.warmup.WARMUP_STEPS` (100) in the first
            phase of a fit of a fitted model. None (the default): the annealing phase,
            and the first phase when ``model`` is fitted (a fit took steps on it, or
            :func:`savigp.warm_start` started it, or it was read from a model file) or ``state``
            continues a run that has ended; True: also the first phase of a fresh model; False:
            never (kept in ``state``'s schedule). A fresh model's steps are those they were.
        reflect: Adam/Adadelta, mixtures (K > 1): after half the iterations, try replacing the
            lightest component by the reflection of the heaviest through the prior mean
            (:meth:`savigp.posteriors.MixturePosterior.reflect`): the fit as it is and the reflected
            copy are each fitted for 15% of the iterations and the one with the higher full-data
            ELBO goes on (default True). It moves the second of two components that sit on one
            mode of a sign-symmetric posterior (``y = |f|``, ``y = f^2``: 0.69 nats below the two-mode fit,
            too little for the starts' short runs to see) to the mirror mode. Starts, the move
            (:func:`savigp.training.starts.search`) and the annealing phase below take part of
            ``iterations``, so the steps taken add up to ``iterations``; ``history.elbo`` holds the
            kept path's (the kept start's, the steps before the move, the kept branch's, fit's own
            phase, the annealing phase) and ``history.starts`` the record
            (:class:`savigp.training.starts.Exploration`); progress and ``callback`` cover every
            step of every phase, numbered on through them (a stop by ``callback`` stops the run
            where it is; ``state`` resumes it there). The starts and the move are not done for
            K = 1 or when the posterior's means are not trained; none of the three for L-BFGS or
            when a phase would get fewer than :data:`~savigp.training.starts.MIN_STEPS` steps. The
            phases are the same in one process, under torch.distributed and in a run resumed from
            ``state`` (:mod:`savigp.training.schedule`): the command line's ``savigp train`` is
            this function with a ``state`` it checkpoints, so its runs are Python's.
        num_samples: S, Monte Carlo samples per data point and component.
        estimator: a name of :data:`savigp.ESTIMATORS` (:mod:`savigp.estimators`).
        groups: parameter groups to optimize (default all): a subset of :data:`PARAMETER_GROUPS`.
        seed: seeds the mini-batch order and the Monte Carlo draws.
        progress: report progress on stderr: a tqdm bar with the running ELBO and the estimator
            on a terminal, plain lines at every tenth of the run otherwise (updated at each read);
            it counts every step of every phase (``iterations`` of them).
        callback: ``callback(step, terms)`` at each check (every ``log_every`` steps and after
            the last; after every step on the CPU by default), with the terms of that step, which
            are finite, in every phase (``step`` counts on through them); return True to stop
            (``state`` then says where, and a call with it goes on from there).
        log_every: steps between host reads of the ELBO and the failure flags (default
            :func:`default_log_every`: 1 on the CPU, 100 on an accelerator).
        callback_every: steps at whose multiples ``callback`` must be called (a caller's
            checkpoints): the default ``log_every`` is then the greatest common divisor of the two. The steps themselves
            never wait for the device; a failure is acted on at the next read (see
            :mod:`savigp.training.step`). L-BFGS, and every step under a process group, read every step.
        cuda_graphs: capture the mini-batch step in a CUDA graph and replay it (None: wherever
            possible, i.e. on CUDA with Adam/Adadelta and a torch likelihood; False: never; True:
            say once why not where impossible). The Monte Carlo draws then come from a CUDA
            generator seeded with ``seed`` (so do they for any CUDA model).
        tune_allocator: on the CPU, first call :func:`savigp.tune_cpu_allocator` (glibc only): freed
            memory is kept for reuse between steps instead of being returned to the operating
            system (faster steps, see :mod:`savigp.runtime.allocator` for the measurement); the process keeps
            its peak resident size afterwards. False leaves the C library's settings alone.
        threads: CPU threads for torch during the fit (the caller's setting is restored after).
            None: 1 thread for a small step (:func:`savigp.runtime.threads.step_work` below 1e8
            multiply-adds, e.g. M <= 300 at B = 1000 for Q = K = 1), else torch's setting capped at
            the cores idle now; ``OMP_NUM_THREADS`` in the environment keeps torch's setting.
            Threads that wait for a descheduled sibling make a busy machine several times slower,
            and one thread costs at most the number of cores on an idle one (measured in docs/cli.md,
            "Threads"; see :mod:`savigp.runtime.threads`).
        final_elbo: after the last step, estimate the ELBO on all N points with the training
            estimator and its Monte Carlo standard error (one pass without gradients, in chunks:
            :func:`savigp.training.convergence.full_data_elbo`), recorded as
            ``history.final_elbo`` and ``history.final_elbo_stderr``.
        state: optional dict for resumable training (the ``savigp`` CLI's checkpoints hold it).
            fit keeps its run in it: ``"schedule"`` (:mod:`savigp.training.schedule`: the phases,
            how many have ended, what a mixture's exploration has kept; plain values and tensors)
            and ``"step"`` (int), the steps taken through all phases. A ``state`` with a schedule
            goes on from ``step``: ``iterations`` more are taken (``step`` values seen by
            ``callback`` continue from it), the ones the uninterrupted run would have taken when
            ``step + iterations`` is that run's length (else the schedule's rules for another
            length apply). Inside a phase it restores the optimizer, generators and batch order:
            the live ``"optimizer"``, ``"generator"`` (and, off the CPU, ``"draw_generator"``)
            objects fit stored, else ``"optimizer_state"`` (an optimizer ``state_dict()``),
            ``"generator_state"`` (``torch.Generator.get_state()``), ``"draw_generator_state"``,
            and ``"perm"`` (LongTensor ``(N,)``) and ``"pos"`` (int), the mini-batch order. After
            every step, before ``callback``, fit stores those live objects and the current
            ``"perm"``, ``"pos"`` and ``"step"``, so that a callback can checkpoint exactly. A
            state without a schedule (written before fit kept one) resumes as one phase.

    Data-parallel: under ``torchrun`` (or any initialized ``torch.distributed`` process group), fit
    joins the group described by the environment if it is not yet joined (gloo for a CPU model,
    NCCL for CUDA), broadcasts rank 0's parameters, and every rank evaluates its disjoint share of
    each global mini-batch of ``batch_size`` points (the same seeded order on every rank), weighted
    so that the summed ELBO and gradient are the one-process ones on the union batch (Bonilla et al.
    2019, eq. (33); the KL terms count once). Gradients are summed by an all-reduce, so every rank
    takes the same step; Monte Carlo draws differ per rank (seeded by seed, rank and step). Only
    rank 0 shows the progress bar; ``callback`` runs on every rank with the global terms, and a stop
    on any rank stops all. A failed or silent rank raises :class:`savigp.training.distributed.DistributedError`
    after the process-group timeout at most. See :mod:`savigp.training.distributed`.

    Convergence: each recorded ELBO is one mini-batch's estimate; the progress shows their mean
    over the last tenth of the run (at most 100 steps) with its spread, and when the trend of the
    last fifth is still rising (:func:`savigp.training.convergence.still_rising`) fit warns with
    :class:`savigp.ConvergenceWarning` and records the hint in ``history.still_rising``.

    Returns:
        :class:`TrainingHistory`.
    """
    plan = _the_plan(plan, options)
    resolved = plan.for_model(model)
    _warn_joint_factorized(model, plan.groups)
    rank0 = distributed.rank() == 0
    if ESTIMATORS[plan.estimator].chooses and ESTIMATORS[resolved.estimator].score_function and rank0:
        hint = getattr(model.likelihood, "suggest_differentiable", None)  # (a user function in torch)
        hint = hint(model.train_y) if hint is not None else None
        if hint:
            warnings.warn(f"savigp.fit: {hint}", DifferentiableHintWarning, stacklevel=2)  # (fit's caller)
    if plan.to_convergence:
        from .until_converged import fit_until_converged

        history = fit_until_converged(model, _fit_plan, resolved)
    else:
        history = _fit_plan(model, resolved)
    if history.starts is not None and (history.starts.starts > 1 or history.starts.reflection is not None):
        history.notes.append(history.starts.note())  # (what the starts and the move did)
    if history.steps and not history.stopped:  # (a mixture using fewer components than it has, at its end)
        with _process(model, resolved.threads, tune_allocator=False):  # (on the run's threads)
            history.notes.extend(component_notes(model))
            history.notes.extend(fold_notes(model, int(plan.seed)))  # (a latent function that changes sign)
    if rank0:
        _notes.warn(history.notes, stacklevel=2)  # (fit's caller: each note once)
    return history


def _the_plan(plan: Optional[FitPlan], options: dict) -> FitPlan:
    """``plan`` with ``options`` (fit's keywords) replacing its fields, or the plan of ``options``."""
    unknown = sorted(set(options) - {f.name for f in fields(FitPlan)})
    if unknown:
        raise TypeError(f"fit() got unexpected keyword argument(s) {', '.join(unknown)}; fit takes "
                        f"{', '.join(f.name for f in fields(FitPlan))}")
    if plan is None:
        return FitPlan(**options)
    if not isinstance(plan, FitPlan):
        raise TypeError(f"fit(model, plan): plan must be a FitPlan, got {type(plan).__name__}")
    return plan.replace(**options) if options else plan


def _fit_plan(model: SAVIGP, resolved: ResolvedPlan) -> TrainingHistory:
    """One run of a plan of ``iterations`` steps (a round of a run to convergence, or the whole
    run): its schedule (:func:`_schedule_run`), its phases (:func:`_run`), the full-data ELBO; its
    notes in the history (a still-rising trend, an exploration that ended below its best), warned
    by :func:`fit` at its end."""
    plan = resolved.plan
    phases = PhaseOptions(resolved.starts, plan.start_fraction, resolved.reflect, plan.anneal)
    steps = StepOptions(batch_size=resolved.batch_size, optimizer=plan.optimizer, lr=plan.lr, weight_lr=plan.weight_lr,
                        num_samples=plan.num_samples, estimator=resolved.estimator, groups=plan.groups,
                        lbfgs_max_iter=plan.lbfgs_max_iter, log_every=resolved.log_every,
                        cuda_graphs=plan.cuda_graphs)
    state = {} if plan.state is None else plan.state
    done = int(state.get("step", 0))
    _schedule_run(model, state, done, resolved.iterations, steps, phases, resolved.trained, plan.seed, plan.warmup)
    with _process(model, resolved.threads, plan.tune_allocator):
        report = loop.Progress(plan.progress and distributed.rank() == 0, done, resolved.iterations, resolved.estimator)
        try:
            history = _run(model, state, done, steps, report, plan.callback)
        finally:
            report.close()
        if history.steps:  # (a later fit's first phase warms up)
            _warmup.mark_fitted(model)
        if plan.final_elbo:  # (draws seeded by the last phase's seed + 1)
            shard, reduce = distributed.evaluation_shard(model.device)
            history.final_elbo, history.final_elbo_stderr = full_data_elbo(
                model, num_samples=plan.num_samples, estimator=resolved.estimator,
                seed=int(state["schedule"]["phases"][-1]["seed"]) + 1, shard=shard, reduce=reduce)
    history.threads = resolved.threads
    return history


@contextmanager
def _process(model: SAVIGP, n_threads: Optional[int], tune_allocator: bool):
    """Within: torch on ``n_threads`` CPU threads (None: as it is; the caller's setting restored
    after) and, on the CPU with ``tune_allocator``, the allocator tuned
    (:func:`savigp.tune_cpu_allocator`)."""
    with torch_threads(n_threads or torch.get_num_threads()):
        if tune_allocator and model.device.type == "cpu":
            tune_cpu_allocator()
        yield


def _schedule_run(model: SAVIGP, state: dict, done: int, iterations: int, steps: StepOptions, phases: PhaseOptions,
                  trained: list, seed: int, warmup: Optional[bool] = None) -> None:
    """``state["schedule"]``: the phases of a new run of ``iterations`` steps (the starts, the
    reflection move and the annealing of ``phases`` where they apply: a mixture, Adam/Adadelta, its
    means trained), or the schedule in ``state`` continued to ``done + iterations`` steps
    (:mod:`savigp.training.schedule`). A new run's (or a new segment's) first phase warms up
    (``"warmup"``, :func:`savigp.training.warmup.phase_steps`) when ``warmup`` is True, or None and
    the model is fitted or the steps go on from a run that has ended."""
    optimizer, anneal = steps.optimizer, phases.anneal

    def planned(n: int) -> list:  # the phases of a new run of n steps
        if _starts.explorable(model, optimizer, trained):
            plan = _starts.plan(n, phases.starts, float(phases.start_fraction), phases.reflect, anneal is not False)
        elif anneal is not False and _starts.explorable(model, optimizer, trained, mixture=False):
            plan = _starts.plan(n, 1, float(phases.start_fraction), False, True)
        else:
            plan = None
        run_phases = _schedule.phases(plan, n, starts=phases.starts, seed=seed)
        if warmup or (warmup is None and (_warmup.fitted(model) or done > 0)):
            run_phases[0]["warmup"] = True
        return run_phases

    if state.get("schedule") is not None:  # a run of fit's schedule, resumed or continued
        _schedule.continue_to(state["schedule"], done, done + iterations, planned)
    elif done > 0:  # a state from before the schedule was kept in it: one phase, resumed where it stood
        state["schedule"] = _schedule.new(_schedule.phases(None, done + iterations, starts=phases.starts, seed=seed),
                                          anneal=False, starts=phases.starts, warmup=warmup is not False)
    else:
        anneals = anneal is not False and _starts.explorable(model, optimizer, trained, mixture=False)
        state["schedule"] = _schedule.new(planned(iterations), anneal=anneals, starts=phases.starts,
                                          warmup=warmup is not False)


def _run(model, state: dict, done: int, steps: StepOptions, report, callback) -> TrainingHistory:
    """The phases of ``state["schedule"]`` from step ``done`` on (:mod:`savigp.training.schedule`),
    each a :func:`_fit` (the annealing phase's with :meth:`StepOptions.annealed`), with the
    exploration's actions between them (:func:`savigp.training.starts.begin` and
    :func:`~savigp.training.starts.end`), until the last step or a stop by the callback. Returns
    fit's history: the ELBO of the steps this call took on the path to the model it ends with,
    their terms, the exploration's record, the still-rising hint of the last phase at the full
    learning rate."""
    num_samples, estimator = steps.num_samples, steps.estimator
    schedule = state["schedule"]
    run_phases, memo = schedule["phases"], schedule["explore"]
    history = TrainingHistory(estimator=estimator)
    traces: dict = {}
    t0 = time.perf_counter()
    shard = None
    first = int(schedule["finished"])
    for p in range(first, len(run_phases)):
        phase = run_phases[p]
        begin, end = _schedule.bounds(schedule, p)
        if done > end or (done < begin):
            raise ValueError(f"fit(state=...): step {done} is not in phase {p} ({phase['kind']}, steps {begin}-{end}) "
                             "where the schedule stands; the state was changed")
        seed = int(phase["fit_seed"])
        if done == begin and phase["kind"] in ("start", "branch"):
            _starts.begin(model, phase, memo, seed)
        if done < end:
            phase_history = _fit(model, steps.annealed() if phase["kind"] == "anneal" else steps,
                                 iterations=end - done, start=done, seed=int(phase["seed"]), report=report,
                                 callback=callback, state=state, resume=_resume_entries(state) if done > begin else None,
                                 warmup=(begin, _warmup.phase_steps(schedule, phase, steps.optimizer)))
            done = int(state.get("step", done))
            traces[p] = phase_history
            history.notes.extend(phase_history.notes)
            history.terms = phase_history.terms or history.terms
            history.cuda_graph = history.cuda_graph or phase_history.cuda_graph
            if phase_history.stopped:  # by the callback: the state says where, for a resume
                history.stopped = True
                break
        if phase["kind"] in ("start", "branch"):
            if shard is None:
                shard = distributed.evaluation_shard(model.device)
            last_start = phase["kind"] == "start" and (p + 1 == len(run_phases) or run_phases[p + 1]["kind"] != "start")
            _starts.end(model, phase, memo, lambda: _starts.score(model, num_samples, estimator, seed, *shard),
                        last_start)
        schedule["finished"] = p + 1
    path = [p for p in sorted(traces) if _starts.on_path(run_phases[p], memo)]
    for p in path:
        history.elbo += traces[p].elbo
    history.steps = len(history.elbo)
    history.seconds = time.perf_counter() - t0
    segment = run_phases[int(schedule.get("segment", 0)):]
    explored = [p for p in path if run_phases[p]["kind"] in ("start", "before", "branch")]
    history.starts = _starts.record(segment, memo, [v for p in explored for v in traces[p].elbo])
    if history.starts is not None and int(schedule["finished"]) == len(run_phases):  # (a fit below its own exploration says so)
        below = _starts.verdict(model, history.starts, num_samples, estimator, int(run_phases[-1]["fit_seed"]),
                                *distributed.evaluation_shard(model.device))
        if below is not None:
            history.notes.append(below)
    # (the verdict of the path after the starts at the full rate -- the steps before the move, the kept
    # branch, fit's own phase -- over its last quarter: annealing's lower rate steps the ELBO up by
    # design, and fit's own phase alone is a tenth of a mixture's run, its last fifth 2% of it)
    judged = [p for p in path if run_phases[p]["kind"] in ("before", "branch", "main")] or path[-1:]
    if judged:
        trail = [v for p in judged for v in traces[p].elbo]
        rising = still_rising(trail, model.num_data, steps=max(MIN_TREND_STEPS, len(trail) // 4))
        history.still_rising = rising.message() if rising is not None else None
        if rising is not None:
            history.notes.append(rising.note())
    return history


def _resume_entries(state: dict) -> dict:
    """What :func:`_fit` restores to go on inside a phase: the live objects a fit in this process
    left in ``state`` (``"optimizer"``, ``"generator"``, ``"draw_generator"``), else the states read
    back (``"optimizer_state"``, ``"generator_state"``, ``"draw_generator_state"``), and ``"perm"``, ``"pos"``."""
    def live(name):
        obj = state.get(name)
        if obj is None:
            return state.get(name + "_state")
        return obj.state_dict() if name == "optimizer" else obj.get_state()

    return {"optimizer_state": live("optimizer"), "generator_state": live("generator"),
            "draw_generator_state": live("draw_generator"), "perm": state.get("perm"), "pos": int(state.get("pos", 0))}


def _optimizer(model: SAVIGP, steps: StepOptions, params: list, graphs: bool) -> torch.optim.Optimizer:
    """A fresh optimizer of ``steps`` over ``params`` (under one that ``takes_groups``, Adam and Adadelta,
    a mixture's logits at their own rate, :func:`mixture_param_groups`, and sharp parameters such as a
    period at a scaled one, :func:`savigp.training.step_scales.scaled_groups`; state on the device for a
    CUDA graph), built by its entry of :data:`savigp._choices.OPTIMIZERS`."""
    lr, kind = steps.lr, OPTIMIZERS[steps.optimizer]
    if kind.takes_groups:
        params = scaled_groups(model, mixture_param_groups(model, params, lr, steps.weight_lr), lr)
    return attach_element_scales(kind.make(params, lr, capturable=graphs, max_iter=steps.lbfgs_max_iter))


def _fit(model, steps: StepOptions, *, iterations, start, seed, report, callback, state, resume,
         warmup: tuple = (0, 0)) -> TrainingHistory:
    """One phase of :func:`fit`, the loop (:func:`savigp.training.loop.run`): steps ``start .. start +
    iterations - 1`` of the rule of ``steps`` (:mod:`savigp.training.rules`: per-step checks for
    L-BFGS and under a process group, else sync-free) with a fresh optimizer and the mini-batch
    order and draws of ``seed`` or, with ``resume`` (:func:`_resume_entries`), the optimizer,
    generators and batch order it restores. ``warmup``: ``(begin, steps)``, the phase's first step
    and the steps of its learning-rate warm-up (:class:`savigp.training.warmup.RateWarmUp`)."""
    N, B, estimator, num_samples = model.num_data, steps.batch_size, steps.estimator, steps.num_samples
    window = steps.log_every
    graphs, why = _step.graph_decision(steps.cuda_graphs, device=model.device, optimizer=steps.optimizer,
                                       estimator=estimator, likelihood=model.likelihood, joint=model.posterior.joint,
                                       mean_head=model.head)
    if not graphs and steps.cuda_graphs is not False and (steps.cuda_graphs or model.device.type == "cuda"):
        _step.say_once(f"savigp.fit: the step is not captured in a CUDA graph: {why}")
    params = parameter_groups(model, steps.groups)
    opt = _optimizer(model, steps, params, graphs)
    rates = _warmup.rate_warm_up(opt, begin=warmup[0], steps=warmup[1])  # (the full rates, before a resume's)

    gen = torch.Generator().manual_seed(seed)
    # the draws: from gen on the CPU (as always); from a generator on the device elsewhere (no copy
    # of the draws per step, and graph-safe)
    draw_gen = gen if model.device.type == "cpu" else torch.Generator(device=model.device).manual_seed(seed)
    history = TrainingHistory(estimator=estimator)
    perm, pos = torch.randperm(N, generator=gen), 0
    if resume is not None:
        if resume.get("optimizer_state") is not None:
            opt.load_state_dict(resume["optimizer_state"])
        if resume.get("generator_state") is not None:
            gen.set_state(resume["generator_state"])
        if resume.get("draw_generator_state") is not None and draw_gen is not gen:
            draw_gen.set_state(resume["draw_generator_state"])
        if resume.get("perm") is not None:
            perm, pos = resume["perm"].clone(), int(resume.get("pos", 0))
    # under torch.distributed (torchrun): this rank's share of every global batch, gradients summed
    ddp = distributed.setup(model, params, seed, {"N": N, "batch_size": B, "iterations": iterations,
                                                  "start step": start, "seed": seed, "batch position": pos})
    if OPTIMIZERS[steps.optimizer].line_search or ddp is not None:  # (the last good state: rank 0's broadcast parameters)
        rule = GradientStep(model, opt, num_samples=num_samples, estimator=estimator, generator=gen, ddp=ddp)
    else:
        rule = SyncFreeStep(model, opt, num_samples=num_samples, estimator=estimator, draw_generator=draw_gen,
                            batch_generator=gen, start=start, window=window, graphs=graphs)
    try:
        loop.run(model, rule, Batches(N, B, gen, perm, pos, model.device), history, start=start,
                 iterations=iterations, callback=callback, state=state, report=report, rates=rates)
    finally:
        if ddp is not None:
            ddp.close()
        history.notes.extend(rule.notes)
    return history
