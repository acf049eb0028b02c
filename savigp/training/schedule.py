"""The schedule of a :func:`savigp.fit` run: its phases, kept in fit's resumable ``state`` so that
a run interrupted anywhere and resumed -- from Python or by ``savigp train --resume`` -- takes the
steps of the uninterrupted run.

A run of ``iterations`` steps with Adam or Adadelta is a list of phases whose steps add up to
``iterations`` (:func:`savigp.training.starts.plan` sizes them):

* ``start`` (a mixture, K > 1): the exploring starts, one phase each
  (:mod:`savigp.training.starts`: each starts from the given parameters, start i > 0 with its
  component means spread afresh, and the best by the full-data ELBO goes on);
* ``before``: steps on the kept start up to the reflection move;
* ``branch`` 0 and 1 (a mixture): the reflection move, the fit as it is and its reflected copy;
* ``main``: fit's own phase at ``lr``;
* ``anneal``: the last :data:`~savigp.training.starts.ANNEAL_FRACTION` of the steps at
  :data:`~savigp.training.starts.ANNEAL_LR` times the learning rates (Robbins & Monro 1951's
  decreasing step sizes, in two steps).

Every phase starts a fresh optimizer and its own seeded mini-batch order and draws (the phase's
``seed``); the annealing phase, and the first phase of a fit of a fitted model (marked
``"warmup"``), warm up its learning rates over their first steps (:mod:`savigp.training.warmup`); the steps are counted through all phases, so the number of steps taken (``state["step"]``)
says which phase the run is in and how far. The schedule (a dict of plain values and tensors,
``state["schedule"]``, written into ``savigp train``'s checkpoints) holds the phases, how many of them
have ended (``finished``) and what the exploration has found so far (the given and the best
parameters, the starts' ELBOs, the reflection's record). L-BFGS, ``anneal=False`` or a short run
have one ``main`` phase (and, for the second, no ``anneal``).

A run continued to another total (``savigp train --resume`` with another ``--iterations``,
``fit(..., state=state)`` again) keeps the phases it has taken: before its ``anneal`` phase the
``main`` phase takes the difference and the ``anneal`` phase is sized for the new total; inside it
the ``anneal`` phase does; a run that has ended goes on as a new fit of the extra steps from the
model it left (the schedule that :func:`savigp.fit` plans for them, appended).
"""
from __future__ import annotations

from typing import Callable, Optional

from . import starts as _starts

#: the phases a run takes, in order
KINDS = ("start", "before", "branch", "main", "anneal")


def phases(steps: Optional[dict], iterations: int, *, starts: int, seed: int) -> list:
    """The phases of :func:`savigp.training.starts.plan`'s ``steps`` (None: one ``main`` phase of
    ``iterations``) with their seeds: start i's ``seed + SEED_STRIDE (i + 1)``, the branches'
    ``seed + SEED_STRIDE (starts + 1)``, the annealing phase's ``seed + SEED_STRIDE (starts + 2)``,
    ``before`` and ``main`` ``seed``. Each is ``{"kind", "index", "steps", "seed", "fit_seed"}``
    (``fit_seed``: ``seed``, which the exploration's actions read); zero-step phases are left out
    except ``main``."""
    stride = _starts.SEED_STRIDE
    if steps is None:
        return [_phase("main", 0, iterations, seed, seed)]
    out = []
    if steps["start"]:
        out += [_phase("start", i, steps["start"], seed + stride * (i + 1), seed) for i in range(int(starts))]
    if steps["before"]:
        out.append(_phase("before", 0, steps["before"], seed, seed))
    if steps["branch"]:
        out += [_phase("branch", b, steps["branch"], seed + stride * (int(starts) + 1), seed) for b in (0, 1)]
    out.append(_phase("main", 0, steps["final"], seed, seed))
    if steps["anneal"]:
        out.append(_phase("anneal", 0, steps["anneal"], seed + stride * (int(starts) + 2), seed))
    return out


def _phase(kind: str, index: int, steps: int, seed: int, fit_seed: int) -> dict:
    return {"kind": kind, "index": int(index), "steps": int(steps), "seed": int(seed), "fit_seed": int(fit_seed)}


def new(run_phases: list, *, anneal: bool, starts: int, warmup: bool = True) -> dict:
    """A schedule at its first step: ``run_phases`` (:func:`phases`); ``anneal``: whether the run
    anneals when its length changes; ``starts``: fit's number of starts (the annealing phase's seed);
    ``warmup``: whether its fresh optimizers at a fitted point warm up their learning rates
    (:func:`savigp.training.warmup.phase_steps`)."""
    return {"phases": list(run_phases), "finished": 0, "segment": 0, "explore": {}, "anneal": bool(anneal),
            "starts": int(starts), "warmup": bool(warmup)}


def bounds(schedule: dict, p: int) -> tuple:
    """``(begin, end)``: the steps taken before phase ``p`` and after it."""
    begin = sum(int(ph["steps"]) for ph in schedule["phases"][:p])
    return begin, begin + int(schedule["phases"][p]["steps"])


def total(schedule: dict) -> int:
    return sum(int(ph["steps"]) for ph in schedule["phases"])


def continue_to(schedule: dict, done: int, steps: int, fresh: Callable[[int], list]) -> None:
    """Resize ``schedule`` in place so that its phases add up to ``steps`` (>= ``done``, the steps
    taken) as the module docstring says; ``fresh(n)`` gives the phases of a new fit of ``n`` steps.

    Raises:
        ValueError: ``steps`` ends inside the exploration (its phases keep their lengths).
    """
    old = total(schedule)
    if steps == old:
        return
    run = schedule["phases"]
    if schedule["finished"] >= len(run):  # the run ended: a new fit of the extra steps from its model
        schedule["segment"] = len(run)
        schedule["explore"] = {}
        run += fresh(steps - old)
        return
    seg = int(schedule.get("segment", 0))
    main = next(i for i in range(seg, len(run)) if run[i]["kind"] == "main")
    explored, _ = bounds(schedule, main)
    if steps < max(explored, done):
        raise ValueError(f"the run's exploration of starts takes its first {explored} steps; it cannot end at "
                         f"step {steps}")
    has_anneal = main + 1 < len(run)
    if schedule["finished"] > main:  # annealing: its phase takes the difference
        begin, _ = bounds(schedule, main + 1)
        run[main + 1]["steps"] = steps - begin
        return
    segment_begin, _ = bounds(schedule, seg)
    cool = int(_starts.ANNEAL_FRACTION * (steps - segment_begin)) if schedule.get("anneal") else 0
    cool = cool if cool >= _starts.MIN_STEPS else 0
    length = max(steps - explored - cool, done - explored, 0)
    cool = steps - explored - length
    run[main]["steps"] = length
    if has_anneal and cool:
        run[main + 1]["steps"] = cool
    elif has_anneal:
        del run[main + 1]
    elif cool:
        seed = int(run[main]["fit_seed"])
        run.insert(main + 1, _phase("anneal", 0, cool, seed + _starts.SEED_STRIDE * (int(schedule["starts"]) + 2), seed))
