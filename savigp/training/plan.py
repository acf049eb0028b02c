"""fit's options as one object: :class:`FitPlan`, frozen and checked when it is made, and
:class:`ResolvedPlan`, what it comes to for one model (the batch size, the steps of ``epochs``, the
estimator, the threads, the interval between host reads), resolved once by :meth:`FitPlan.for_model`.

``savigp.fit(model, plan)`` runs a plan; ``savigp.fit(model, iterations=..., lr=...)`` builds one
from its keywords (the same run, bit for bit). A caller that runs several fits of one set of options
(the ``savigp`` command: the run, the two-stage fit's first stage, the search over K) builds the plan
once and derives the others with :meth:`FitPlan.replace`; what the plan resolves for a model (the
batch size and the run's length that a model file records) it reads from the plan, never works out
again.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import torch

from .._choices import ESTIMATORS, OPTIMIZERS, PARAMETER_GROUPS
from .starts import DEFAULT_FRACTION, DEFAULT_STARTS


#: the default cap on the steps of a run to convergence (:mod:`savigp.training.until_converged`)
MAX_ITERATIONS = 20000


def default_log_every(device: torch.device) -> int:
    """Steps between fit's host reads by default: 1 on the CPU (a read costs nothing there: the
    CPU has no queue of work to drain), 100 on an accelerator."""
    return 1 if torch.device(device).type == "cpu" else 100


def _at_least(name: str, value, low, *, strict: bool = False) -> None:
    """``value`` (a number, or None: not given) is ``>= low`` (``> low`` when ``strict``), else a
    ``ValueError`` naming ``name`` and what it expected."""
    if value is None:
        return
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and (
        value > low if strict else value >= low)  # (numpy's numbers too)
    if not ok:
        raise ValueError(f"{name} must be {'>' if strict else '>='} {low}, got {value!r}")


@dataclass(frozen=True)
class FitPlan:
    """Every option of :func:`savigp.fit` (its arguments of these names, documented there), checked
    when the plan is made: a bad value raises a ``ValueError`` that names the option and what it
    expected. What depends on the model (the batch size against N, the estimator for the likelihood,
    the trained groups) is checked by :meth:`for_model`.

    ``callback_every``: steps at whose multiples fit must read the device and call ``callback`` (a
    caller's checkpoints); the default interval between reads (``log_every`` not given) is then
    the greatest common divisor of it and :func:`default_log_every`.

    ``state`` and ``callback`` are the run's live objects (a dict fit keeps its run in, a function):
    the plan holds them, never copies them, and leaves them out of its comparisons.
    """

    iterations: Optional[int] = None
    epochs: Optional[float] = None
    batch_size: Optional[int] = None
    optimizer: str = "adam"
    lr: float = 0.01
    num_samples: int = 100
    estimator: str = "auto"
    groups: Optional[Sequence[str]] = None
    seed: int = 0
    progress: bool = True
    callback: Optional[Callable] = field(default=None, compare=False)
    lbfgs_max_iter: int = 20
    state: Optional[dict] = field(default=None, compare=False, repr=False)
    tune_allocator: bool = True
    log_every: Optional[int] = None
    callback_every: Optional[int] = None
    cuda_graphs: Optional[bool] = None
    weight_lr: Optional[float] = None
    threads: Optional[int] = None
    final_elbo: bool = True
    starts: Optional[int] = None
    start_fraction: float = DEFAULT_FRACTION
    reflect: Optional[bool] = None
    anneal: Optional[bool] = None
    max_iterations: Optional[int] = None
    time_budget: Optional[float] = None
    warmup: Optional[bool] = None

    def __post_init__(self):
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS.names()}, got {self.optimizer!r}")
        if ESTIMATORS.get(self.estimator) is None:
            raise ValueError(f"estimator must be one of {', '.join(ESTIMATORS.names())}, got {self.estimator!r}")
        if self.groups is not None:
            if isinstance(self.groups, str):
                raise ValueError(f"groups must be a list of parameter groups ({', '.join(PARAMETER_GROUPS)}), "
                                 f"got the string {self.groups!r}")
            unknown = sorted(set(self.groups) - set(PARAMETER_GROUPS))
            if unknown:
                raise ValueError(f"unknown parameter group(s) {unknown}; choose from {PARAMETER_GROUPS}")
            object.__setattr__(self, "groups", tuple(self.groups))
        if self.iterations is not None and self.epochs is not None:
            raise ValueError(f"give iterations= or epochs=, not both (got iterations={self.iterations}, "
                             f"epochs={self.epochs})")
        _at_least("iterations", self.iterations, 0)
        _at_least("epochs", self.epochs, 0, strict=True)
        _at_least("batch_size", self.batch_size, 1)
        _at_least("lr", self.lr, 0, strict=True)
        _at_least("num_samples", self.num_samples, 1)
        _at_least("lbfgs_max_iter", self.lbfgs_max_iter, 1)
        _at_least("log_every", self.log_every, 1)
        _at_least("callback_every", self.callback_every, 1)
        _at_least("weight_lr", self.weight_lr, 0, strict=True)
        _at_least("threads", self.threads, 1)
        _at_least("starts", self.starts, 1)
        if not (isinstance(self.start_fraction, numbers.Real) and 0 < float(self.start_fraction) < 1):
            raise ValueError(f"start_fraction must be in (0, 1), got {self.start_fraction!r}")
        _at_least("max_iterations", self.max_iterations, 1)
        _at_least("time_budget", self.time_budget, 0, strict=True)
        if self.state is not None and not isinstance(self.state, dict):
            raise ValueError(f"state must be a dict (fit keeps its run in it), got {type(self.state).__name__}")
        if self.callback is not None and not callable(self.callback):
            raise ValueError(f"callback must be a function callback(step, terms), got {self.callback!r}")

    def replace(self, **changes) -> "FitPlan":
        """The plan with ``changes`` (checked again)."""
        return dataclasses.replace(self, **changes)

    @property
    def to_convergence(self) -> bool:
        """Neither ``iterations`` nor ``epochs``: fit runs until the ELBO has stopped rising
        (:mod:`savigp.training.until_converged`), at most ``max_iterations`` steps."""
        return self.iterations is None and self.epochs is None

    def batch_for(self, num_data: int) -> int:
        """The batch size on ``num_data`` rows: ``batch_size``, all of them when not given or for an
        optimizer with a line search (L-BFGS); a ``ValueError`` when above ``num_data``."""
        B = num_data if (self.batch_size is None or OPTIMIZERS[self.optimizer].line_search) else int(self.batch_size)
        if not 1 <= B <= num_data:
            raise ValueError(f"batch_size must be between 1 and N={num_data}, got {self.batch_size}")
        return B

    def steps_for(self, num_data: int) -> int:
        """The run's length on ``num_data`` rows: ``iterations``, ``ceil(epochs N / B)`` (at least 1),
        or for a run to convergence its cap (``max_iterations``, default :data:`MAX_ITERATIONS`)."""
        if self.iterations is not None:
            return int(self.iterations)
        if self.epochs is not None:
            return max(1, int(math.ceil(self.epochs * num_data / self.batch_for(num_data))))
        return MAX_ITERATIONS if self.max_iterations is None else int(self.max_iterations)

    def log_every_on(self, device) -> int:
        """The steps between host reads on ``device``: ``log_every``, else :func:`default_log_every`
        (with ``callback_every``: their greatest common divisor)."""
        if self.log_every is not None:
            return int(self.log_every)
        every = default_log_every(device)
        return every if self.callback_every is None else math.gcd(int(self.callback_every), every)

    def for_model(self, model) -> "ResolvedPlan":
        """What this plan comes to for ``model``: checked against it (the batch size against N, the
        estimator for its likelihood, at least one trainable parameter in ``groups``), resolved once."""
        from ..runtime.threads import choose_threads, step_work
        from .groups import parameter_groups

        B = self.batch_for(model.num_data)
        estimator = model.resolved_estimator(self.estimator)
        trained = parameter_groups(model, self.groups)
        if not trained:
            raise ValueError(f"no trainable parameters in groups {None if self.groups is None else list(self.groups)}")
        threads = (choose_threads(step_work(model, B, self.num_samples), self.threads)
                   if model.device.type == "cpu" or self.threads is not None else None)
        return ResolvedPlan(self, batch_size=B, iterations=None if self.to_convergence else self.steps_for(model.num_data),
                            estimator=estimator, log_every=self.log_every_on(model.device), threads=threads,
                            trained=trained, starts=DEFAULT_STARTS if self.starts is None else int(self.starts),
                            reflect=True if self.reflect is None else bool(self.reflect))


@dataclass(frozen=True)
class ResolvedPlan:
    """A :class:`FitPlan` for one model (:meth:`FitPlan.for_model`).

    Attributes:
        plan: the plan.
        batch_size: B (all N for L-BFGS or when not given).
        iterations: the steps (``epochs`` read as ``ceil(epochs N / B)``); None for a run to convergence.
        estimator: the estimator's name, resolved for the model's likelihood (``"auto"`` chosen).
        log_every: the steps between host reads.
        threads: the torch threads of the steps (None: as they are).
        trained: the trainable parameters of ``groups``.
        starts, reflect: a mixture's starts and its move, their defaults filled in.
    """

    plan: FitPlan
    batch_size: int
    iterations: Optional[int]
    estimator: str
    log_every: int
    threads: Optional[int]
    trained: list = field(compare=False, repr=False)
    starts: int = DEFAULT_STARTS
    reflect: bool = True
