"""The one candidate loop of model selection: fit a candidate, score it, reject it if it failed,
compare it with the incumbent, keep the winner whole.

A search (:mod:`savigp.selection.kernel_search`, :mod:`savigp.selection.components`) proposes
:class:`Candidate` s -- a label and a ``fit`` that builds the candidate's model (afresh, from a copy of
its parent, or the parent itself trained further in place) and fits it -- and
:meth:`CandidateLoop.fit` does the rest the same way for every search:

* **fit**: the candidate's own ``fit``, which fits to convergence by fit's rule
  (:func:`fit_while_rising`: fitted on while :func:`savigp.training.convergence.still_rising` says the
  ELBO still rises, at most ``max_extensions`` more times), within the search's time budget
  (:class:`Budget`: fit's callback stops a running fit within one of its steps of the deadline);
  a search whose candidates end at their optimum settles them by L-BFGS
  (:mod:`savigp.selection.settle`);
* **score**: the full-data ELBO L and its Monte Carlo standard error s (the search's ``score``:
  :func:`savigp.training.convergence.full_data_elbo`, or :func:`savigp.selection.components.elbo_estimate`),
  less the search's ``penalty`` (a BIC term (1/2) p log N for p hyper-parameters, or 0);
* **reject**: a candidate whose fit raises one of :data:`CANDIDATE_ERRORS` (a diverged fit, a kernel
  matrix that is not positive definite, a non-finite log-density) or ends with a non-finite ELBO or
  parameter is rejected with its reason (:attr:`Trial.failed`), and so is one the budget stopped;
  the parent a candidate changes in place is put back bit for bit (its ``state_dict``);
* **compare**: a candidate replaces the incumbent when its score exceeds the incumbent's by more
  than ``min_gain_se`` standard errors of the difference, sqrt(s_child^2 + s_incumbent^2), and by
  more than ``min_gain`` nats (:func:`wins`): with a closed-form ELBO (s = 0) a move needs a gain
  above that stated minimum, not just above zero;
* **keep**: the winner is the candidate's fitted model object itself (:attr:`Trial.model`), not a
  spec to build it again from.

Every trial is recorded in :attr:`CandidateLoop.trials`, in the order tried: the rows the
searches' tables print.
"""
from __future__ import annotations

import copy
import math
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from ..training.fitting import fit

#: seconds (or a tenth of the budget, if more) that a check guarding a move may take once the time
#: budget is spent (:meth:`Budget.grace`): the check is never skipped, and a move whose check does
#: not end in that time is not taken
CHECK_GRACE = 10.0
#: the start of :attr:`Trial.failed` for a candidate whose fit the time budget ended
BUDGET_ENDED = "the time budget"


def candidate_errors() -> tuple:
    """What a candidate's fit may raise and a search survives (the candidate is rejected): a
    diverged fit, a matrix that is not positive definite, a non-finite log-density."""
    import torch

    from ..estimators.nonfinite import NonFiniteLogProb
    from ..linalg.cholesky import CholeskyError
    from ..training.loop import TrainingDiverged

    return (TrainingDiverged, FloatingPointError, CholeskyError, torch.linalg.LinAlgError, NonFiniteLogProb)


def wins(gain: float, se: float, *, min_gain_se: float, min_gain: float) -> bool:
    """Is a ``gain`` in score (nats) with standard error ``se`` a move: above ``min_gain_se``
    standard errors and above ``min_gain`` nats (a closed-form ELBO has s.e. 0: the stated minimum
    is then the whole rule)?"""
    return gain > max(float(min_gain), float(min_gain_se) * se)


class Budget:
    """A search's time budget: ``seconds`` from now (None: none). :meth:`callback` is fit's callback
    that stops the fit in hand within one of its steps of the deadline and records that it did
    (:attr:`stopped`, reset by the loop for every candidate); :meth:`grace` gives a check that
    guards a move a deadline of its own once the budget is spent."""

    def __init__(self, seconds: Optional[float]):
        self.seconds = None if seconds is None else float(seconds)
        self.deadline = None if seconds is None else time.perf_counter() + float(seconds)
        self._end = self.deadline
        self.stopped = False

    def over(self) -> bool:
        """Has the search's deadline passed?"""
        return self.deadline is not None and time.perf_counter() > self.deadline

    def callback(self, step=None, terms=None) -> bool:
        """fit's callback: True (stop) once the fit's deadline has passed."""
        if self._end is not None and time.perf_counter() > self._end:
            self.stopped = True
        return self.stopped

    @contextmanager
    def grace(self):
        """Within: past the search's deadline, a deadline of max(:data:`CHECK_GRACE`, a tenth of the
        budget) seconds from now for the fit in hand; yields whether the budget was spent."""
        spent = self.over()
        if spent:
            self._end = time.perf_counter() + max(CHECK_GRACE, 0.1 * self.seconds)
        try:
            yield spent
        finally:
            self._end = self.deadline


@dataclass
class Fitted:
    """What a candidate's ``fit`` returns: its fitted model, whether its ELBO stopped rising, the
    fits of fit's length it took and the last one's :class:`savigp.TrainingHistory` (or None)."""

    model: Any
    converged: bool
    fits: int = 1
    history: Any = None


@dataclass
class Candidate:
    """A candidate: ``label`` and ``fit()`` -> :class:`Fitted`, which builds its model (afresh, from
    a copy of its parent, or ``parent`` itself, trained further in place) and fits it. ``parent``:
    the model ``fit`` changes in place, put back as it was when the candidate fails."""

    label: str
    fit: Callable[[], Fitted]
    parent: Any = None


@dataclass
class Trial:
    """One candidate fitted and scored.

    Attributes:
        label: the candidate's. model: its fitted model (the very object; None when it failed with
            no model to keep: an error or a non-finite value, and no parent).
        elbo, se: the full-data ELBO and its standard error (NaN when it failed before them).
        score: ``elbo`` less the search's penalty; -inf when the fit failed (an error or a
            non-finite value).
        converged, fits, history: of its :class:`Fitted`. seconds: its wall time.
        failed: None, or why it was rejected. error: the exception that failed it, or None.
    """

    label: str
    model: Any
    elbo: float
    se: float
    score: float
    converged: bool
    seconds: float
    failed: Optional[str] = None
    error: Optional[BaseException] = None
    fits: int = 0
    history: Any = None

    @property
    def broken(self) -> bool:
        """Failed by an error or a non-finite value (not only stopped by the budget): no score."""
        return self.score == -math.inf


@dataclass
class CandidateLoop:
    """The loop (module docstring): ``score(model) -> (elbo, se)``, ``penalty(model)`` (nats taken
    off the score; None: 0), the ``budget``, the rule of a move (``min_gain_se``, ``min_gain``), and
    the trials so far."""

    score: Callable[[Any], tuple]
    penalty: Optional[Callable[[Any], float]] = None
    budget: Budget = field(default_factory=lambda: Budget(None))
    min_gain_se: float = 2.0
    min_gain: float = 1.0
    trials: list = field(default_factory=list)

    def fit(self, candidate: Candidate) -> Trial:
        """Fit and score ``candidate`` (module docstring); a failure is a :class:`Trial` with its reason,
        its parent as it was."""
        t0 = time.perf_counter()
        self.budget.stopped = False
        parent = candidate.parent
        before = None if parent is None else copy.deepcopy(parent.state_dict())
        model, error, result = parent, None, Fitted(parent, False, 0)
        try:
            result = candidate.fit()
            model = result.model
            elbo, se = self.score(model)
            failed = _nonfinite(model, elbo)
        except candidate_errors() as err:
            error, failed = err, f"{type(err).__name__}: {_first_line(err)}"
            elbo, se, result.converged = math.nan, math.nan, False
        broken = failed is not None
        if failed is None and self.budget.stopped:
            failed = f"{BUDGET_ENDED} ({self.budget.seconds:g} s) ended its fit"
        if failed is not None and before is not None:
            parent.load_state_dict(before)
            model = parent
        score = -math.inf if broken else float(elbo) - (self.penalty(model) if self.penalty else 0.0)
        trial = Trial(candidate.label, model, float(elbo), float(se), score, bool(result.converged),
                      time.perf_counter() - t0, failed, error, result.fits, result.history)
        self.trials.append(trial)
        return trial

    def wins(self, child: Trial, incumbent: Trial) -> bool:
        """Does ``child`` replace ``incumbent``: a gain in score above ``min_gain_se`` standard errors
        of the difference and above ``min_gain`` nats (:func:`wins`)?"""
        return wins(child.score - incumbent.score, math.hypot(child.se, incumbent.se),
                    min_gain_se=self.min_gain_se, min_gain=self.min_gain)


def best(trials: Sequence[Trial]) -> Optional[Trial]:
    """The trial of the highest score among those not failed (the first of equals), or None."""
    kept = [t for t in trials if t.failed is None]
    return max(kept, key=lambda t: t.score) if kept else None


def fit_while_rising(model, options: dict, *, again: Optional[dict] = None, max_extensions: int = 0,
                     stop: Optional[Callable[[], bool]] = None, quiet: Sequence[type] = ()) -> tuple:
    """fit's convergence rule for a candidate: :func:`savigp.training.fitting.fit` with ``options``,
    then with ``again`` (default ``options``) while its history says the ELBO is still rising
    (:func:`savigp.training.convergence.still_rising`), at most ``max_extensions`` more times, and
    not once ``stop()`` is True (the budget ended the fit). Warnings of the ``quiet`` categories are
    not shown (the search's table says whether each candidate converged). Returns ``(history of the
    last fit, fits)``."""
    with warnings.catch_warnings():
        for category in quiet:
            warnings.simplefilter("ignore", category)
        history, fits = fit(model, **options), 1
        while history.still_rising and fits <= int(max_extensions) and not (stop is not None and stop()):
            history, fits = fit(model, **(options if again is None else again)), fits + 1
    return history, fits


def _nonfinite(model, elbo: float) -> Optional[str]:
    """Why a fitted candidate cannot be ranked (a non-finite full-data ELBO or parameter), or None."""
    import torch

    if not math.isfinite(elbo):
        return f"its full-data ELBO is {elbo}"
    bad = [name for name, p in model.named_parameters() if not bool(torch.isfinite(p).all())]
    return f"non-finite parameters: {', '.join(bad[:4])}" if bad else None


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:200] if text else type(err).__name__
