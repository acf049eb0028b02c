""":func:`savigp.fit` without ``iterations``: steps until the ELBO has stopped rising, then a polish.

A fixed number of steps ends "still rising" on most real data (breast cancer +2-3 nats, elnino +20,
sunspots +66 over the last fifth of the default 500 steps; issue 57) and says so only in a warning.
Without ``iterations`` or ``epochs``, fit runs in rounds instead and stops by a stated rule:

* **Rounds.** The first round is :data:`FIRST_ROUND` steps, planned as any fit of that length
  (a mixture's exploration of starts and its move, fit's own phase, the annealing phase:
  :mod:`savigp.training.schedule`). Each round stops where the annealing phase would begin; while
  the rule says the ELBO still rises, the run is lengthened by :data:`GROWTH` (its own phase takes
  the new steps, with the same optimizer: its moments are not reset), up to ``max_iterations``
  steps or ``time_budget`` seconds. Then the annealing phase runs.
* **The rule.** The least-squares trend of the per-step ELBO estimates (at fit's checks: every step
  on the CPU; kept in the schedule, so that a resumed run reads what the uninterrupted run read) over
  the last :data:`WINDOW_FRACTION` of the path after the exploration (at least :data:`MIN_WINDOW` steps): the
  ELBO has stopped rising when the rise that trend implies over the window is within
  :data:`~savigp.training.convergence.RISE_Z` of its standard errors (its Monte Carlo noise) or
  below :data:`~savigp.training.convergence.RISE_PER_POINT` nats per data point
  (:func:`savigp.training.convergence.trend`), **and** the full-data ELBO (common draws) gained at
  most twice its standard error, or RISE_PER_POINT nats per point, over the last round
  (:func:`round_gain`; so at least two rounds are taken): a mini-batch's noise hides a trend that
  the full-data estimate shows.
* **The best round.** The full-data ELBO at each round's end is kept with the round's parameters;
  where a round ends more than :data:`FALL_NATS` (and twice the standard error of the difference,
  and RISE_PER_POINT nats per point) below the best, the best round's parameters are put back
  (:func:`_fell`) and the run goes on from them at half the learning rate (:func:`_slow_down`: the
  optimizer's rates halved, its moments kept), up to :data:`MAX_BACKOFFS` times; a fall after that
  stops the run there and warns. At the run's end (after the annealing phase and the polish) a
  smaller fall below the best is put back silently. Stopping at the first fall handed back a point
  on the way up: elnino's ``rbf(t, lengthscale=1) + periodic(t, period=1) * rbf(t)`` fell 10 nats
  at step 675 and stopped with its best round at -157.5 (step 450), where the same model reaches +5.15
  (a 20000-step run in years).
* **Shorter length-scales.** At the first round whose full-data ELBO gained at most
  :data:`PROBE_GAIN_NATS` (or :data:`PROBE_GAIN_PER_POINT` nats per point; on a plateau, or nearly
  converged; a plateau's slow creep kept elnino's run from converging for 19000 steps), and where
  that found nothing, once more where the rule or the cap would stop the run, copies of the model with each long
  length-scale at a tenth (and a hundredth) of its column's spread are fitted briefly, and the best
  replaces the model where it gains beyond the noise (:mod:`savigp.training.shorter_lengthscales`: a
  plateau where the data's variation was taken for noise); the rounds then go on from it, up to
  :data:`MAX_MOVES` such moves. First-order optimizers, one process, the kernel learned. (elnino's
  periodic model in years, 10 seeds: with one try, 3 runs stayed on the plateau, test NLPD 1.75-1.77
  against 1.25-1.34.)
* **Polish.** Where the full data fit in memory (N S K Q at most :data:`POLISH_MAX_WORK`) and the
  estimator's draws can be held fixed (not a score-function estimator, whose fixed-draw objective
  is not the ELBO's), each round ends with L-BFGS on fixed draws (:func:`_polish`: chunks of
  :data:`POLISH_STEPS` outer steps while a chunk gains beyond its noise, each kept only where it
  raised the rounds' full-data ELBO, whose draws are not the chunk's; as many chunks as cost no more
  than the round's own steps, :func:`polish_chunks`), before the round's gain is read, and the run
  ends with one after its annealing phase. An Adam round that ends below the last polished point by
  more than its noise (Adam blowing up at a sharp optimum, as elnino's period in years did after
  each polish) is a fall: Adam goes on from the polished point at half its rate; after
  :data:`MAX_BACKOFFS` falls, L-BFGS takes the run on alone to its optimum
  (:func:`_polish_to_optimum`; ``Convergence.polish_only``). Adam at its learning rate creeps where
  the ELBO is ill-conditioned and ends at a random point of its noise floor, nats below the optimum:
  breast cancer (logistic, 30 features) reached the 20000-step cap at -50.1 in 405 s; polished at
  each round it converges after 750 steps at -50.6 in 11 s (2000 draws a point; 10000 more Adam steps
  from there gain 2.4 nats, 0.004 a point: the rule's threshold is 0.001 a point over its window).

The history's :attr:`~savigp.training.loop.TrainingHistory.convergence` records the verdict
(:class:`Convergence`), and a run that did not converge (its cap, its time budget, a fall) has a
:class:`~savigp.training.notes.Note` of it in ``history.notes``, which fit warns once with
:class:`~savigp.training.convergence.ConvergenceWarning`.
"""
from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from .._choices import OPTIMIZERS
from .convergence import RISE_PER_POINT, ConvergenceWarning, full_data_elbo, rises, trend
from .notes import Note
from .plan import MAX_ITERATIONS, FitPlan  # (the default cap: the plan's, read here too)

#: steps of the first round
FIRST_ROUND = 500
#: each further round lengthens the run by this factor
GROWTH = 1.5
#: the seed of the full-data ELBO at each round's end, relative to fit's
ROUND_SEED = 11
#: L-BFGS: the first round's outer steps and the rule's least window
LBFGS_FIRST_ROUND, LBFGS_MIN_WINDOW = 20, 10
#: the rule's window: this fraction of the path after the exploration, at least MIN_WINDOW steps
WINDOW_FRACTION = 0.25
MIN_WINDOW = 50
#: a run whose full-data ELBO falls more than this many nats (and its noise, and RISE_PER_POINT nats per
#: point) below its best round's stops there, puts the best round's parameters back and says so
FALL_NATS = 1.0
#: falls (each: the best round put back, the learning rate halved) after which a fall stops the run
MAX_BACKOFFS = 3
#: the factor on the learning rate at each fall
BACKOFF = 0.5
#: moves to shorter length-scales (savigp.training.shorter_lengthscales) a run takes at most
MAX_MOVES = 2
#: they are tried at the first round whose full-data ELBO gained at most this many nats, or this many per
#: point (the run is on a plateau, or converging; again after each move taken) and, where that found
#: nothing, again where the rule or the cap would stop the run: at most MAX_FAILED_PROBES times without a move
PROBE_GAIN_NATS, PROBE_GAIN_PER_POINT = 5.0, 0.01
MAX_FAILED_PROBES = 2
#: L-BFGS outer steps of a chunk of the polish (20 inner iterations each, strong Wolfe line search), and
#: the chunks at most (while each gains beyond its noise)
POLISH_STEPS, POLISH_CHUNKS = 5, 10
#: the rounds' full-data ELBO (and the polish's judge) takes this many times the plan's draws a point
#: where the work allows (its standard error a third; breast cancer's at S = 100: 0.46 nats, more than
#: a round's or a polish chunk's gain near the optimum)
ROUND_DRAWS = 10
#: calls of the polish at most (each up to POLISH_CHUNKS chunks) where it takes a run on alone
POLISH_ONLY_CALLS = 20
#: L-BFGS's inner iterations an outer step (fit's lbfgs_max_iter default): a chunk's full-data evaluations
#: are at most POLISH_STEPS times this (and its line searches')
POLISH_INNER = 20
#: the polish goes on while a chunk gains more than twice its standard error and this many nats a point
#: (a tenth of the rule's: L-BFGS is cheap where Adam creeps; breast cancer's chunks gain 0.5 nats each)
POLISH_MIN_GAIN_PER_POINT = RISE_PER_POINT / 10
#: the polish runs where N * S * K * Q (the draws of one full-data evaluation) is at most this
POLISH_MAX_WORK = 5e7


@dataclass
class Convergence:
    """How a run to convergence ended.

    Attributes:
        converged: the rule said the ELBO had stopped rising (False: the cap or the budget ended it).
        steps: the steps taken; rounds: the rounds.
        window: the steps the last verdict read; rise: the trend's rise over them (nats); z: the
            trend over its standard error (inf without noise).
        reason: one line saying why the run stopped.
        polished: whether the L-BFGS polish ran and raised the ELBO (None: it did not run).
        ended: what ended it: ``"rule"`` (converged), ``"cap"``, ``"time budget"``, ``"fall"`` (the
            full-data ELBO fell below its best round's, whose parameters were put back, more than
            :data:`MAX_BACKOFFS` times) or ``"callback"``.
        backoffs: the falls after which the run went on from its best round at half the rate.
        moves: the moves to shorter length-scales taken (:mod:`savigp.training.shorter_lengthscales`),
            each ``{"part", "lengthscale", "step", "gain"}``.
        polish_only: L-BFGS (the polish) took the run to its optimum alone, where Adam's rounds lost
            what it found (:func:`_polish_to_optimum`).
    """

    converged: bool
    steps: int
    rounds: int
    window: int
    rise: float
    z: float
    reason: str
    polished: Optional[bool] = None
    ended: str = ""
    backoffs: int = 0
    moves: list = field(default_factory=list)
    polish_only: bool = False

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("converged", "steps", "rounds", "window", "rise", "z", "reason", "polished",
                                              "ended", "backoffs", "moves", "polish_only")}


def verdict(path: list, num_data: int, min_window: int = MIN_WINDOW) -> tuple:
    """``(converged, window, rise, z)`` of the rule (module docstring) on ``path``, the per-step ELBO
    estimates after the exploration (a path shorter than ``min_window`` is not judged converged)."""
    window = min(len(path), max(min_window, int(WINDOW_FRACTION * len(path))))
    found = trend(path[len(path) - window:]) if window >= min_window else None
    if found is None:
        return False, window, math.nan, math.nan
    return not rises(found, num_data), window, found.rise, found.z


def fit_until_converged(model, run: Callable, resolved):
    """Run ``resolved`` (a :class:`~savigp.training.plan.ResolvedPlan` of a plan without
    ``iterations``) in rounds of ``run(model, resolved)`` (fit's run of a plan of so many steps,
    passed in: fit calls this) until the rule says the ELBO has stopped rising (module docstring).
    Returns the :class:`~savigp.training.loop.TrainingHistory` of the whole run, with
    ``convergence`` set and the verdict among its notes (where the run did not converge: the cap, the
    time budget or a fall, with :class:`~savigp.training.convergence.ConvergenceWarning`); the
    rounds' own still-rising verdicts are not kept."""
    from . import schedule as _schedule

    plan = resolved.plan
    cap = plan.steps_for(model.num_data)  # (max_iterations, or MAX_ITERATIONS)
    time_budget, callback, progress = plan.time_budget, plan.callback, plan.progress
    state = {} if plan.state is None else plan.state
    t0 = time.perf_counter()
    user_stopped = {"stop": False}

    def anneal_begins() -> Optional[int]:
        sched = state.get("schedule")
        if sched is None:
            return None
        phases = sched["phases"]
        for p in range(int(sched.get("segment", 0)), len(phases)):
            if phases[p]["kind"] == "anneal":
                return _schedule.bounds(sched, p)[0]
        return None

    def at_anneal(step, terms):
        # the ELBO at each check, kept in the schedule (which a resumable state and savigp train's
        # checkpoints hold), so that a run resumed anywhere reads the rule as the uninterrupted run does
        state["schedule"].setdefault("converge", {"trail": []})["trail"].append([int(step), float(terms.elbo)])
        if callback is not None and callback(step, terms):
            user_stopped["stop"] = True
            return True
        begin = anneal_begins()  # (without an annealing phase: one step before the schedule's end)
        return step + 1 >= (begin if begin is not None else _schedule.total(state["schedule"]) - 1)

    def main_path() -> list:
        """The ELBO at the checks of fit's own phase so far (the path after the exploration)."""
        sched = state["schedule"]
        phases = sched["phases"]
        seg = int(sched.get("segment", 0))
        main = next((p for p in range(seg, len(phases)) if phases[p]["kind"] == "main"), seg)
        begin, end = _schedule.bounds(sched, main)
        return [v for s, v in sched.get("converge", {}).get("trail", []) if begin <= s < end]

    lbfgs = OPTIMIZERS[plan.optimizer].line_search  # (outer steps of 20 iterations each)
    first, min_window = (LBFGS_FIRST_ROUND, LBFGS_MIN_WINDOW) if lbfgs else (FIRST_ROUND, MIN_WINDOW)
    done = int(state.get("step", 0))
    total = max(done + 2, min(cap, first)) if "schedule" not in state else max(done, _schedule.total(state["schedule"]))
    history = None
    rounds, reason, converged, window, rise, z, ended = 0, "", False, 0, float("nan"), float("nan"), ""
    said, advice = "", ""  # (the verdict of a run that did not converge: what happened, what to try)
    quiet = plan.replace(progress=progress, final_elbo=False, state=state, max_iterations=None, time_budget=None)

    def rounds_of(steps: int, then: Optional[Callable]):
        return run(model, quiet.replace(iterations=steps, callback=then).for_model(model))

    ended_before = state.get("schedule", {}).get("converge", {}).get("verdict")  # (a run resumed in its annealing phase)
    if ended_before is not None:
        rounds, reason, converged, window, rise, z, ended, said, advice = ended_before
    while ended_before is None:
        rounds += 1
        h = rounds_of(total - int(state.get("step", 0)), at_anneal)
        history = _joined(history, h)
        if user_stopped["stop"]:
            reason, ended = "stopped by the callback", "callback"
            break
        converged, window, rise, z = verdict(main_path(), model.num_data, min_window)
        began = int((state["schedule"].get("converge", {}).get("round_elbo") or [0, 0, 0])[2])  # (the last round's
        lost, score = _polish_round(model, run, plan, state,  # end, kept in the schedule: a resumed run reads
                                    polish_chunks(int(state.get("step", 0)) - began, resolved.batch_size,  # the same)
                                                  model.num_data))
        gained = round_gain(state["schedule"], int(state.get("step", 0)), model, plan, score)  # (and this round's kept)
        step = int(state.get("step", 0))
        fell = _fell(state["schedule"], model)
        record = state["schedule"]["converge"]
        if fell is not None:
            record["backoffs"] = int(record.get("backoffs", 0)) + 1
            if record["backoffs"] > MAX_BACKOFFS:
                again = (f" (after {MAX_BACKOFFS} such falls, each followed by half the learning rate from the best "
                         "round)") if MAX_BACKOFFS else ""
                (said, advice), converged, ended = (fell[0] + again, fell[1]), False, "fall"
                reason = f"{said}; {advice}"
                break
            _slow_down(state, BACKOFF)  # (and on, from the best round, at half the rate)
            converged = False
        over_time = time_budget is not None and time.perf_counter() - t0 > float(time_budget)
        stops = converged and fell is None and gained is not None \
            and gained[0] <= max(2.0 * gained[1], RISE_PER_POINT * model.num_data)
        failed = int(record.get("failed_probes", 0))  # (since the last move)
        slow = gained is not None and gained[0] <= max(PROBE_GAIN_NATS, PROBE_GAIN_PER_POINT * model.num_data)
        last = total >= cap  # (the cap ends the run at this round: a move is still worth its 300 steps)
        if fell is None and not over_time and int(record.get("probed_at", -1)) != step \
                and ((slow and failed == 0 and not last) or ((stops or last) and failed < MAX_FAILED_PROBES)):
            record["probed_at"] = step
            if _moved(model, run, state, plan, step):
                record["failed_probes"] = 0
                if not last:
                    total = min(cap, max(step + 2, int(total * GROWTH)))
                    continue  # (and on, from the moved model)
            else:
                record["failed_probes"] = failed + 1
        adam_fell = lost is not None and fell is None and not stops and not over_time \
            and lost[0] > max(2.0 * lost[1], FALL_NATS, RISE_PER_POINT * model.num_data)
        if adam_fell and int(record.get("backoffs", 0)) < MAX_BACKOFFS:
            # Adam's round fell below the last polished point (the polish climbed back): a fall, on at half
            # Adam's rate from the polished point (sunspots, Poisson: L-BFGS alone from the first such
            # round stopped at -4646 where Adam's rounds, slowed, reach -1745 at the cap)
            record["backoffs"] = int(record.get("backoffs", 0)) + 1
            _slow_down(state, BACKOFF)
        elif adam_fell:  # (after MAX_BACKOFFS falls Adam only loses ground here: L-BFGS goes on alone)
            found, settled, score = _polish_to_optimum(model, run, plan,
                                                       polish_chunks(cap - step, resolved.batch_size, model.num_data),
                                                       score)
            round_gain(state["schedule"], step, model, plan, score)
            record["polish_only"] = True
            head = (f"Adam's round to step {step} ended {lost[0]:.3g} nats below the round before (s.e. "
                    f"{lost[1]:.2g}), and L-BFGS on the full data (the polish) went on alone ({found:+.3g} nats)")
            if settled:
                converged, ended = True, "rule"
                reason = f"the ELBO stopped rising: {head}, its last call within its noise"
            else:  # (its limits ended it: what the run's remaining steps would cost)
                converged, ended = False, "cap"
                said, advice = f"the cap of {cap} steps ended the run with L-BFGS alone still gaining ({head})", \
                    "give max_iterations= more, or a lower learning rate (lr=)"
                reason = f"{said}: {advice}"
            break
        if stops:
            why = (f"below {RISE_PER_POINT * model.num_data:.3g} nats" if rise <= RISE_PER_POINT * model.num_data
                   else f"within its noise ({z:.1f} standard errors)")
            ended = "rule"
            reason = (f"the ELBO stopped rising: its trend over the last {window} steps is {rise:+.3g} nats, {why}; "
                      f"the full-data ELBO gained {gained[0]:+.3g} nats (s.e. {gained[1]:.2g}) over the last round")
            break
        if converged:  # (the per-step estimates' noise hid a trend the full-data ELBO shows)
            converged = False
            if gained is not None:
                rise, window = gained[0], int(state.get("step", 0)) - gained[2]
        over_time = time_budget is not None and time.perf_counter() - t0 > float(time_budget)
        if total >= cap or over_time:
            what = f"the cap of {cap} steps" if total >= cap else f"the time budget of {float(time_budget):g} s"
            ended = "cap" if total >= cap else "time budget"
            if fell is not None:  # (the last round fell and its best round was put back: not a rise)
                said = (f"{what} ended the run after its full-data ELBO fell below its best round's (that round's "
                        "model is kept)")
                advice = "a lower learning rate (lr=) keeps a sharp optimum; or give max_iterations= or time_budget= more"
            else:
                said = f"{what} ended the run with the ELBO still rising (+{rise:.3g} nats over the last {window} steps)"
                advice = "give max_iterations= or time_budget= more"
            reason = f"{said}: {advice}"
            break
        total = min(cap, max(step + 2, int(total * GROWTH)))
    if not user_stopped["stop"] and ended_before is None:  # (kept, so that a run resumed after this reads it)
        state["schedule"]["converge"]["verdict"] = [rounds, reason, converged, window, rise, z, ended, said, advice]
    # the annealing phase (the rest of the schedule), when the run stopped before it
    step = int(state.get("step", 0))
    rest = _schedule.total(state["schedule"]) - step
    if rest > 0 and not user_stopped["stop"]:
        def annealing(step, terms):  # (a stop by the user's callback here is one too: no polish after it)
            if callback is not None and callback(step, terms):
                user_stopped["stop"] = True
            return user_stopped["stop"]

        h = rounds_of(rest, annealing)
        history = _joined(history, h)
        if user_stopped["stop"]:
            converged, reason, ended = False, "stopped by the callback", "callback"
    polished = _polish(model, run, plan, max(1, polish_chunks(int(state.get("step", 0)), resolved.batch_size,
                                                              model.num_data)))[0] if not user_stopped["stop"] else None
    if not user_stopped["stop"]:  # the annealing phase (or the polish) must not end below the best round either
        round_gain(state["schedule"], int(state.get("step", 0)), model, plan)
        fell = _fell(state["schedule"], model, final=True)
        if fell is not None:
            (said, advice), converged, ended = fell, False, "fall"
            reason = f"{said}; {advice}"
    history.seconds = time.perf_counter() - t0
    history.still_rising = None if converged else reason
    record = state["schedule"].get("converge", {})
    history.convergence = Convergence(converged, int(state.get("step", 0)), rounds, int(window), float(rise),
                                      float(z), reason, polished, ended, int(record.get("backoffs", 0)),
                                      list(record.get("moves", [])), bool(record.get("polish_only", False)))
    if not converged and not user_stopped["stop"]:
        history.notes.append(Note(ended, said, advice, ConvergenceWarning))
    if plan.final_elbo:
        history.final_elbo, history.final_elbo_stderr = full_data_elbo(
            model, num_samples=plan.num_samples, estimator=history.estimator, seed=int(plan.seed) + 1)
    return history


def round_gain(schedule: dict, step: int, model, plan, score: Optional[tuple] = None) -> Optional[tuple]:
    """The full-data ELBO now (common draws, seeded by the :class:`~savigp.training.plan.FitPlan`'s ``seed``; with the model's ``"auto"``
    estimator where fit's is a score function, whose error would hide the gain) kept in
    ``schedule["converge"]``, and ``(gain, stderr, step)``: its
    gain over the one kept at the end of the last round, the standard error of that gain (the two
    estimates' errors added in quadrature: an upper bound under common draws) and the last round's
    step; None at the first round's end. The per-step estimates' trend alone stopped a score-function
    fit 10 nats short (Poisson, batches of 50 of 300 rows: ELBO -612.0 at its 500 steps, -602.2 at
    5000): their noise hides a trend the full-data ELBO shows. ``score``: the model's
    :func:`round_score` where it was read already (the polish's last)."""
    from .loop import parameter_copies

    record = schedule.setdefault("converge", {"trail": []})
    elbo, se = round_score(model, plan) if score is None else score
    last = record.get("round_elbo")
    record["round_elbo"] = [float(elbo), float(se), int(step)]
    best = record.get("best")
    if best is None or float(elbo) > best[0]:  # (a NaN never replaces it)
        record["best"] = [float(elbo), float(se), int(step), parameter_copies(model)]
    if last is None:
        return None
    return float(elbo) - last[0], math.hypot(float(se), last[1]), last[2]


def round_score(model, plan) -> tuple:
    """``(elbo, se)``: the full-data ELBO of ``model`` as the rounds read it (common draws seeded by
    the :class:`~savigp.training.plan.FitPlan`'s ``seed``; with the model's ``"auto"`` estimator where
    the plan's is a score function), on :data:`ROUND_DRAWS` times the plan's draws a point where
    N S K Q times that is at most :data:`POLISH_MAX_WORK` (fewer above, down to the plan's): at the
    plan's S = 100, breast cancer's standard error was 0.46 nats and wine's 0.32, so that rounds
    gaining up to twice their difference's, 0.9-1.3 nats, read as converged (wine ended 3.4 nats below
    a 20000-step run)."""
    from .._choices import ESTIMATORS
    from . import distributed

    estimator = model.resolved_estimator(plan.estimator)
    if ESTIMATORS[estimator].score_function:  # (the model's own choice: a closed form, quadrature or the
        estimator = model.resolved_estimator("auto")  # reparameterization where it can; as the K search does)
    S = int(plan.num_samples)
    draws = 1
    if ESTIMATORS[estimator].monte_carlo:
        work = model.num_data * S * model.posterior.num_components * model.num_latent
        draws = max(1, min(ROUND_DRAWS, int(POLISH_MAX_WORK // max(work, 1))))
    shard, reduce = distributed.evaluation_shard(model.device)
    return full_data_elbo(model, num_samples=S * draws, estimator=estimator, seed=int(plan.seed) + ROUND_SEED,
                          shard=shard, reduce=reduce)


def _moved(model, run: Callable, state: dict, plan, step: int) -> bool:
    """A move to shorter length-scales (:func:`savigp.training.shorter_lengthscales.try_shorter`, each
    copy fitted by ``run``, fit's run of a resolved plan, with the run's ``plan``) where one gains: the
    model takes the moved copy's parameters and the run its optimizer state; the move is recorded in
    ``state["schedule"]["converge"]["moves"]``. False where none gains, the run has taken
    :data:`MAX_MOVES`, or it does not apply (module docstring)."""
    from . import distributed
    from .loop import parameter_copies
    from .shorter_lengthscales import try_shorter

    record = state["schedule"]["converge"]
    if len(record.get("moves", [])) >= MAX_MOVES or distributed.launched() or not OPTIMIZERS[plan.optimizer].first_order \
            or (plan.groups is not None and "kernel" not in plan.groups):
        return False
    trial_plan = plan.replace(progress=False, final_elbo=False, anneal=False, warmup=False, callback=None,
                              max_iterations=None, time_budget=None)

    def fit_copy(trial, steps: int, trial_state: dict) -> None:  # (polished as the rounds are: the model it
        run(trial, trial_plan.replace(iterations=steps, state=trial_state).for_model(trial))  # is judged against was)
        _polish(trial, run, plan, polish_chunks(steps, plan.batch_for(trial.num_data), trial.num_data))

    found = try_shorter(model, fit_copy, lambda m: round_score(m, plan), tuple(record["round_elbo"][:2]))
    if found is None:
        return False
    with torch.no_grad():
        model.load_state_dict(found["model"].state_dict())
    state["optimizer"], state["optimizer_state"] = None, found["optimizer_state"]
    record["round_elbo"] = [found["elbo"], found["se"], int(step)]
    record["best"] = [found["elbo"], found["se"], int(step), parameter_copies(model)]  # (the rounds' best is now this)
    record.setdefault("moves", []).append({"part": found["part"], "lengthscale": found["lengthscale"], "step": int(step),
                                           "gain": round(found["gain"], 3)})
    return True


def _slow_down(state: dict, factor: float) -> None:
    """The learning rates of the run's optimizer (the live one fit left in ``state``, else its saved
    state, which a resume loads with its rates) times ``factor``; its moments kept. The annealing
    phase's fresh optimizer takes fit's own rate / 10 as before."""
    live = state.get("optimizer")
    groups = live.param_groups if live is not None else (state.get("optimizer_state") or {}).get("param_groups", [])
    for group in groups:
        group["lr"] = float(group["lr"]) * factor


def _fell(schedule: dict, model, final: bool = False) -> Optional[tuple]:
    """Where the full-data ELBO at the last round's end (:func:`round_gain`) is below the best round's
    by more than twice the standard error of their difference, :data:`FALL_NATS` and RISE_PER_POINT
    nats per point: the best round's parameters put back, and ``(what happened, what to try)``; else None (and,
    at the run's ``final`` check, the best round's parameters put back where it is below them by
    more than the noise: a smaller fall is Adam's noise floor, not worth a warning). Adam at a fixed rate can
    throw a sharp optimum away (a period over many cycles: elnino's period went from 1 to 0.80
    years at standardized inputs, the ELBO 400 nats down), and a run that ends there must not hand
    the user its last state."""
    from .loop import restore_parameters

    record = schedule.get("converge", {})
    now, best = record.get("round_elbo"), record.get("best")
    if now is None or best is None or best[2] == now[2]:
        return None
    drop = best[0] - now[0]
    noise = 2.0 * math.hypot(now[1], best[1])
    if not drop > max(noise, FALL_NATS, RISE_PER_POINT * model.num_data):
        if final and drop > noise:  # (Adam's noise floor: the better point kept, nothing to say)
            restore_parameters(model, best[3])
            record["round_elbo"] = best[:3]
        return None
    restore_parameters(model, best[3])
    record["round_elbo"] = best[:3]
    return (f"the full-data ELBO fell {drop:.3g} nats below its best (at step {best[2]}: {best[0]:.6g}) by step "
            f"{now[2]}: the model at step {best[2]} is kept", "a lower learning rate (lr=) keeps a sharp optimum")


def _joined(history, more):
    """``history`` with the steps of a later call of fit (``more``) appended."""
    if history is None:
        more.notes = [n for n in more.notes if n.kind != "still rising"]
        return more
    history.elbo += more.elbo
    history.steps += more.steps
    history.notes += [n for n in more.notes if n.kind != "still rising"]  # (the rule's verdict replaces a round's)
    history.terms = more.terms or history.terms
    history.cuda_graph = history.cuda_graph or more.cuda_graph
    history.threads = more.threads or history.threads
    history.stopped = more.stopped
    return history


def _polish_round(model, run: Callable, plan, state: dict, chunks: int) -> tuple:
    """The polish (:func:`_polish`) at a round's end, before its gain is read: Adam's creep is slow where
    L-BFGS is not (breast cancer reached the 20000-step cap at -50.1; polished at each round's end it
    converges after 750 steps at -50.6). The rounds polished are counted in the schedule. Returns
    ``(lost, score)``: lost is ``(nats, se)``, how far Adam's round ended below the last round's
    full-data ELBO (negative: it gained) and the standard error of that difference, where the polish
    applies and a round was read before, else None; score is the model's :func:`round_score` after
    the polish (None where it does not apply)."""
    if chunks < 1 or not _polish_applies(model, plan):
        return None, None
    record = state["schedule"].setdefault("converge", {"trail": []})
    last = record.get("round_elbo")
    before = round_score(model, plan)
    kept, score = _polish(model, run, plan, chunks, before)
    if kept:
        record["polishes"] = int(record.get("polishes", 0)) + 1
    return (None if last is None else (last[0] - before[0], math.hypot(last[1], before[1]))), score


def _polish_to_optimum(model, run: Callable, plan, chunks: int, score: tuple) -> tuple:
    """L-BFGS alone (:func:`_polish`, again while a call gains more than twice its standard error and
    RISE_PER_POINT nats per point, :data:`POLISH_ONLY_CALLS` calls and ``chunks`` chunks in all at
    most: what the run's remaining steps would cost), where Adam's rounds lose what the polish found,
    from the model's ``score`` (its :func:`round_score`). Returns ``(gain, settled, score)``: the nats
    it gained, whether it stopped because a call gained no more than that (or none could be kept)
    rather than at its limits, and the model's score as it ends."""
    start = score
    for _ in range(POLISH_ONLY_CALLS):
        take = min(POLISH_CHUNKS, chunks)
        chunks -= take
        if take < 1:
            return score[0] - start[0], False, score
        kept, after = _polish(model, run, plan, take, score)
        settled = not kept or after[0] - score[0] <= max(2.0 * math.hypot(score[1], after[1]),
                                                           RISE_PER_POINT * model.num_data)
        score = after
        if settled:
            return score[0] - start[0], True, score
    return score[0] - start[0], False, score


def _polish_applies(model, plan) -> bool:
    """Does the polish (:func:`_polish`) apply to a run of ``plan`` (module docstring)?"""
    from .._choices import ESTIMATORS
    from . import distributed
    estimator = model.resolved_estimator(plan.estimator)
    S = int(plan.num_samples) if ESTIMATORS[estimator].monte_carlo else 1
    work = model.num_data * S * model.posterior.num_components * model.num_latent
    return not (ESTIMATORS[estimator].score_function or work > POLISH_MAX_WORK or distributed.launched()
                or OPTIMIZERS[plan.optimizer].line_search)


def polish_chunks(steps: int, batch_size: int, num_data: int) -> int:
    """The chunks of the polish (:data:`POLISH_CHUNKS` at most) that cost no more than ``steps`` of
    the run's own of ``batch_size`` rows of ``num_data``: a chunk's L-BFGS evaluates the full data up
    to :data:`POLISH_STEPS` x 20 times (0: no polish). A round of 500 full-batch steps affords 5; with
    mini-batches of a hundredth of the rows, a round needs 10000 steps for one (a polish of every
    round would otherwise cost more than the rounds on data that fit in memory only just)."""
    return max(0, min(POLISH_CHUNKS, int(steps * batch_size / max(num_data, 1) / (POLISH_STEPS * POLISH_INNER))))


def _polish(model, run: Callable, plan, chunks: int = POLISH_CHUNKS, score: Optional[tuple] = None) -> tuple:
    """The deterministic polish (module docstring) of a run of ``plan``, by ``run`` (fit's run of a
    resolved plan): chunks of :data:`POLISH_STEPS` L-BFGS outer steps, each on its own fixed draws,
    judged by the rounds' full-data ELBO (:func:`round_score`, on :data:`ROUND_DRAWS` times the
    plan's draws where the work allows: its draws are not the ones a chunk fitted, whose own ELBO
    always rises); a chunk is kept where it raised that ELBO, and the next follows while a chunk
    gains more than twice its standard error and :data:`POLISH_MIN_GAIN_PER_POINT` nats per point,
    up to ``chunks``. Returns ``(kept, score)``: kept is True if a chunk was kept, False if the first
    was not (the model put back), None where it does not apply or ``chunks`` is 0; score is the
    model's :func:`round_score` as it ends (None where it does not apply), and ``score`` the one it
    starts from where read already (each is read once). (Breast cancer, logistic, 30 features, after 500 Adam steps
    at ELBO -78.5: 5 outer steps reach -53.0, 25 reach -50.7, on 2000 draws a point; Adam's creep
    took 20000 steps to -50.1.)"""
    if not _polish_applies(model, plan):
        return None, None
    estimator = model.resolved_estimator(plan.estimator)
    kept = None
    before, se = round_score(model, plan) if score is None else score
    for chunk in range(int(chunks)):
        before_state = copy.deepcopy(model.state_dict())
        try:
            polish = FitPlan(optimizer="lbfgs", iterations=POLISH_STEPS, lr=1.0, num_samples=int(plan.num_samples),
                             estimator=estimator, groups=plan.groups, seed=int(plan.seed) + 7 + chunk, progress=False,
                             final_elbo=False, threads=plan.threads)
            run(model, polish.for_model(model))
            after, after_se = round_score(model, plan)
        except (ArithmeticError, RuntimeError, ValueError):
            after = float("-inf")
        if not after > before:  # (a NaN is no gain)
            model.load_state_dict(before_state)
            return bool(kept), (before, se)
        kept = True
        if after - before <= max(2.0 * se, POLISH_MIN_GAIN_PER_POINT * model.num_data):
            return True, (after, after_se)
        before, se = after, after_se
    return kept, (before, se)
