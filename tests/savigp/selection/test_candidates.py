"""The candidate loop's contract (savigp.selection.candidates), small and seeded: a failing candidate
leaves its parent's parameters bit for bit as they were, a candidate within 2 standard errors (or
under the stated minimum gain with a closed-form ELBO) does not replace the incumbent, the winner is
the very fitted object, and the budget stops a running candidate."""
import math
import time

import numpy as np
import pytest
import torch

import savigp
from likelihoods import Gaussian
from savigp.linalg.cholesky import CholeskyError
from savigp.selection.candidates import BUDGET_ENDED, Budget, Candidate, CandidateLoop, Fitted, best, fit_while_rising
from savigp.training.convergence import ConvergenceWarning, full_data_elbo


def _model(seed=0):
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(0, 5, (20, 1)), 0)
    return savigp.SAVIGP(X, np.sin(X) + 0.1 * rng.normal(size=X.shape), Gaussian(), kernel="rbf", num_inducing=5,
                         seed=seed)


def _loop(**kw):
    return CandidateLoop(score=lambda m: full_data_elbo(m, estimator="closed-form"), **kw)


def _state(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("failure", ["error", "nan"])
def test_a_failing_candidate_leaves_its_parent_bit_identical_with_its_reason(failure):
    """The candidate trains its parent in place for a few steps, then raises (a Cholesky failure)
    or leaves a non-finite parameter: rejected with its reason, the parent's state as before."""
    parent = _model()
    before = _state(parent)

    def fit_in_place() -> Fitted:
        savigp.fit(parent, iterations=3, lr=0.1, progress=False, final_elbo=False)
        if failure == "error":
            raise CholeskyError("K_zz is not positive definite")
        with torch.no_grad():
            next(parent.kernel.parameters()).fill_(float("nan"))
        return Fitted(parent, True)

    trial = _loop().fit(Candidate("child", fit_in_place, parent=parent))
    assert trial.failed and ("CholeskyError" in trial.failed if failure == "error" else "non-finite" in trial.failed)
    assert trial.broken and trial.score == -math.inf
    after = parent.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before), [k for k in before if not torch.equal(before[k], after[k])]


class _Scored(torch.nn.Module):
    """A stand-in model whose score is ``(elbo, se)`` as given."""

    def __init__(self, elbo, se):
        super().__init__()
        self.elbo, self.se = elbo, se
        self.theta = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))


def _trial(loop, elbo, se, label="c"):
    m = _Scored(elbo, se)
    return loop.fit(Candidate(label, lambda: Fitted(m, True))), m


def test_a_candidate_within_two_standard_errors_or_under_the_stated_minimum_is_not_accepted():
    loop = CandidateLoop(score=lambda m: (m.elbo, m.se), min_gain_se=2.0, min_gain=1.0)
    incumbent, _ = _trial(loop, 0.0, 1.0)
    assert not loop.wins(_trial(loop, 2.8, 1.0)[0], incumbent)  # 2 s.e. of the difference = 2.83
    assert loop.wins(_trial(loop, 2.9, 1.0)[0], incumbent)
    exact, _ = _trial(loop, 0.0, 0.0)  # a closed-form ELBO: no standard error
    assert not loop.wins(_trial(loop, 0.5, 0.0)[0], exact)  # above zero, under the minimum of 1 nat
    assert loop.wins(_trial(loop, 1.01, 0.0)[0], exact)


def test_the_winner_is_the_very_fitted_object_and_a_failed_one_never_wins():
    loop = CandidateLoop(score=lambda m: (m.elbo, m.se), penalty=lambda m: 1.0)
    low, m_low = _trial(loop, 1.0, 0.1, "low")
    high, m_high = _trial(loop, 5.0, 0.1, "high")
    nan, _ = _trial(loop, float("nan"), 0.1, "nan")
    assert high.model is m_high and low.model is m_low and high.score == 4.0
    assert best(loop.trials) is high and best(loop.trials).model is m_high
    assert nan.failed and "ELBO is nan" in nan.failed and best([nan, low]) is low
    assert [t.label for t in loop.trials] == ["low", "high", "nan"]


def test_the_budget_stops_a_running_candidate():
    """A candidate of 20000 steps (about a minute) under a 0.3 s budget: fit's callback stops it
    within a step of the deadline, and the loop rejects it as ended by the budget."""
    budget = Budget(0.3)
    loop = _loop(budget=budget)
    model = _model()

    def long_fit() -> Fitted:
        history, fits = fit_while_rising(model, {"iterations": 20000, "progress": False, "final_elbo": False,
                                                 "callback": budget.callback}, max_extensions=2,
                                         stop=lambda: budget.stopped, quiet=(ConvergenceWarning,))
        return Fitted(model, history.still_rising is None, fits, history)

    t0 = time.perf_counter()
    trial = loop.fit(Candidate("long", long_fit))
    assert time.perf_counter() - t0 < 5.0 and trial.fits == 1
    assert trial.failed and trial.failed.startswith(BUDGET_ENDED) and not trial.broken
    assert trial.model is model and len(trial.history.elbo) < 20000
