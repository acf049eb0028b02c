"""Learning-rate warm-up for a fresh optimizer that starts on a fitted model.

A fresh Adam's first step moves every coordinate by its learning rate whatever the gradient's
scale (the bias-corrected first step is lr * sign(g); Kingma & Ba 2015, §2-3), and its next steps
move them by nearly as much while its second-moment estimate rests on a few draws. At a fitted
optimum of SAVIGP's ELBO (Bonilla et al. 2019, eq. (17)) -- q(u)'s means, the inducing inputs, log
length-scales and a period, some of them sharp -- that throws the fit out: from elnino's fitted
``rbf + periodic * rbf`` model (closed form, ELBO -537.7) the first full-rate step fell to -1461 and
the first 50 averaged -652.6; with the warm-up they averaged -537.0 (docs/experiments.md, "Warm
starts keep their optimum").

The rule (a warm-up of the step size, Goyal et al. 2017, §2.2, here geometric): in a phase of
:func:`savigp.fit` that warms up, step i of the phase (i = 0, 1, ...) takes every parameter group
at

    lr_i = lr * START ** (1 - i / STEPS)   for i < STEPS,   lr_i = lr after,

with ``START`` = :data:`WARMUP_START` (the first step moves each coordinate by lr / 100) and
``STEPS`` = :data:`WARMUP_STEPS` (100) in the first phase of a fit of a fitted model,
:data:`ANNEAL_WARMUP_STEPS` (10) in the annealing phase; ``lr`` is the group's own rate (a
mixture's weights keep theirs relative to it). The rate is a function of the step's index within
its phase alone, so a run resumed inside a warm-up (``fit(state=...)``, ``savigp train --resume``)
takes the rates of the uninterrupted run.

Which phases warm up (:func:`phase_steps`): the first phase of a fit of a model already fitted --
one that a fit has taken steps on (:func:`mark_fitted`, set by :func:`savigp.fit`), started by
:func:`savigp.warm_start`, or read from a model file (``savigp train --warm-start``, a search's
model trained further, ``fit`` called again) -- and the annealing phase (a fresh optimizer at a
tenth of the rate, started where fit's own phase ended: at Adam's noise floor at lr, often still
rising, where a long warm-up costs progress -- elnino's 500-step fit ended 4.4 nats lower with 50
steps, 0.6 with 10 -- and the first steps are the ones that jump). A fresh model's first phase
takes lr from its first step, as before. L-BFGS sets its own steps by its line search and is left
alone. Under a CUDA graph, Adam on float32 parameters reads the changing rate from a device tensor;
with float64 parameters a changed rate drops the graph (:mod:`savigp.training.step`), so most
warm-up steps run eagerly.
"""
from __future__ import annotations

from typing import Optional

import torch

from .._choices import OPTIMIZERS

#: steps of the warm-up of a fitted model's first phase (docs/experiments.md, "Warm starts keep their
#: optimum": with 50, elnino's steps 50-100 after a warm start fell 17 standard errors below it)
WARMUP_STEPS = 100
#: steps of the annealing phase's warm-up
ANNEAL_WARMUP_STEPS = 10
#: the warm-up's first rate, relative to the phase's learning rate
WARMUP_START = 0.01


def factor(i: int, steps: int = WARMUP_STEPS) -> float:
    """The learning rate of step ``i`` of a warm-up of ``steps`` steps, relative to the full rate
    (module docstring): ``WARMUP_START ** (1 - i / steps)`` for ``0 <= i < steps``, then 1."""
    if steps <= 0 or i >= steps:
        return 1.0
    return WARMUP_START ** (1.0 - max(int(i), 0) / steps)


def mark_fitted(model) -> None:
    """Say that ``model`` holds fitted values: a later fit's first phase warms up."""
    model.fitted = True


def fitted(model) -> bool:
    """Whether ``model`` was marked by :func:`mark_fitted`."""
    return bool(getattr(model, "fitted", False))


def phase_steps(schedule: dict, phase: dict, optimizer: str) -> int:
    """The warm-up's steps in ``phase`` of fit's ``schedule`` (:mod:`savigp.training.schedule`)
    under a first-order optimizer (Adam, Adadelta: its ``first_order``): :data:`WARMUP_STEPS` for a phase planned with ``"warmup"`` (the first of
    a fit of a fitted model), :data:`ANNEAL_WARMUP_STEPS` for the annealing phase, unless the run
    was started with ``warmup=False`` (kept in the schedule); else 0."""
    if not OPTIMIZERS[optimizer].first_order or not schedule.get("warmup", True):
        return 0
    if phase.get("warmup"):
        return WARMUP_STEPS
    return ANNEAL_WARMUP_STEPS if phase["kind"] == "anneal" else 0


class RateWarmUp:
    """Sets an optimizer's learning rates for each step of a phase that warms up (module docstring).

    Args:
        optimizer: the phase's fresh optimizer; its groups' rates when this is made are the full rates.
        begin: the index (counted through all phases) of the phase's first step.
        steps: the warm-up's steps (0: none).
    """

    def __init__(self, optimizer: torch.optim.Optimizer, *, begin: int, steps: int):
        self.optimizer, self.begin, self.steps = optimizer, int(begin), int(steps)
        self.rates = [group["lr"] for group in optimizer.param_groups]

    def __call__(self, step: int) -> None:
        """Before step ``step``: every group at its full rate times :func:`factor` of the step's
        index within the phase (after the warm-up, the full rates once more)."""
        i = int(step) - self.begin
        if i > self.steps:  # (set at step begin + steps, left alone since)
            return
        f = factor(i, self.steps)
        for group, rate in zip(self.optimizer.param_groups, self.rates):
            group["lr"] = rate * f


def rate_warm_up(optimizer: torch.optim.Optimizer, *, begin: int, steps: int) -> Optional[RateWarmUp]:
    """A :class:`RateWarmUp` of ``steps`` steps from step ``begin``, or None when ``steps`` is 0."""
    return RateWarmUp(optimizer, begin=begin, steps=steps) if steps > 0 else None
