"""``check_likelihood(columns=)`` (issue 54): target columns that are not outcomes -- a
right-censoring indicator, a fixed covariate such as a number of trials -- are declared, the
density is integrated over the outcome alone, and a censored row's term is checked against the
tail of the event density. A correct right-censored log-normal passes on whole-number survival
days (which the kit took for counts); a missing Jacobian, a cumulative distribution where the
survival function belongs and a variance read as a standard deviation each fail, named. Numpy's
floating-point warnings from the kit's calls come back as one warning."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy import stats

from likelihoods import CallableLikelihood
from savigp.testing import check_likelihood
from savigp.testing.examples import censored_lognormal_numpy

B = 10
SCALE = dict(params={"s": 1.5}, constraints={"s": "positive"})


def _days(seed=0):
    """Whole survival days and a death indicator (1: died on that day, 0: censored), as statsmodels' heart."""
    rng = np.random.default_rng(seed)
    t = np.round(np.exp(3.0 + rng.standard_normal(B))) + 1
    return np.column_stack([t, np.arange(B) % 3 != 0]).astype(float)


def _z(y, f, s):
    return (np.log(y[:, 0]) - f[..., 0]) / s


def missing_jacobian(y, f, s):
    """The normal density of log t given as the density of t."""
    event = -np.log(s) - 0.5 * np.log(2 * np.pi) - 0.5 * _z(y, f, s) ** 2
    return np.where(y[:, 1] == 1, event, stats.norm.logsf(_z(y, f, s)))


def wrong_tail(y, f, s):
    """The censored term is the CDF (the probability of death before t)."""
    event = -np.log(y[:, 0]) - np.log(s) - 0.5 * np.log(2 * np.pi) - 0.5 * _z(y, f, s) ** 2
    return np.where(y[:, 1] == 1, event, stats.norm.logcdf(_z(y, f, s)))


def variance_as_sd(y, f, s):
    """s is the variance of log t in the event term, but the censored term reads it as the sd."""
    r = np.log(y[:, 0]) - f[..., 0]
    event = -np.log(y[:, 0]) - 0.5 * np.log(2 * np.pi * s) - 0.5 * r ** 2 / s
    return np.where(y[:, 1] == 1, event, stats.norm.logsf(r / s))


def sd_in_the_quadratic(y, f, s):
    """The event density's normaliser reads s as the variance of log t, its quadratic as the sd."""
    event = -np.log(y[:, 0]) - 0.5 * np.log(2 * np.pi * s) - 0.5 * _z(y, f, s) ** 2
    return np.where(y[:, 1] == 1, event, stats.norm.logsf(_z(y, f, s)))


def _check(fn, y, columns=("outcome", "event")):
    lik = CallableLikelihood(fn, output_dim=y.shape[1], **SCALE)
    return check_likelihood(lik, y, mean=np.full((B, 1), 3.0), columns=columns, raise_on_failure=False)


def test_a_right_censored_lognormal_on_whole_days_passes():
    report = _check(censored_lognormal_numpy, _days())
    assert report.passed, report
    assert "integrates to 1 over (0, inf)" in report["normalization"].message
    assert report["censored_tail"].status == "passed"
    assert _check(censored_lognormal_numpy, _days(), columns=("outcome", "indicator")).passed  # "indicator": "event"
    # the indicator coded the other way (1: censored) is declared as such
    flipped = _days()
    flipped[:, 1] = 1 - flipped[:, 1]
    report = _check(lambda y, f, s: censored_lognormal_numpy(np.column_stack([y[:, 0], 1 - y[:, 1]]), f, s), flipped,
                    columns=("outcome", "censored"))
    assert report.passed, report


@pytest.mark.parametrize("fn, check, words", [
    (missing_jacobian, "normalization", "the Jacobian of the log, -log y in log p(y | f), is missing"),
    (wrong_tail, "censored_tail", "(its CDF), not after it"),
    (variance_as_sd, "censored_tail", "the censored and the event terms do not describe one distribution"),
    (sd_in_the_quadratic, "normalization", "integrates to s^0.5 at every f and s: s is read as a variance in one "
                                           "place and as a standard deviation in another"),
])
def test_each_subtly_wrong_censored_likelihood_fails_named(fn, check, words):
    report = _check(fn, _days())
    assert report[check].status == "failed" and words in report[check].message, report
    assert [c.name for c in report.failures] == [check]


def test_a_fixed_column_is_held_at_each_rows_value():
    """A binomial count out of n trials: y = (k, n); the density sums to one over k = 0..n."""
    rng = np.random.default_rng(1)
    n = rng.integers(1, 20, B).astype(float)
    y = np.column_stack([rng.binomial(n.astype(int), 0.4), n])

    def binomial(y, f):
        return stats.binom.logpmf(y[:, 0], y[:, 1], 1 / (1 + np.exp(-f[..., 0])))

    lik = CallableLikelihood(binomial, output_dim=2)
    report = check_likelihood(lik, y, columns=("outcome", "fixed"), raise_on_failure=False)
    assert report["normalization"].status == "passed" and "counts" in report["normalization"].message, report
    assert report["censored_tail"].status == "skipped"


def test_columns_are_checked_naming_the_column_and_row():
    lik = CallableLikelihood(censored_lognormal_numpy, output_dim=2, **SCALE)
    y = _days()
    with pytest.raises(ValueError, match=r"each one of outcome, event, censored, fixed \(or indicator, exposure, "
                                         r"trials, covariate\); got"):
        check_likelihood(lik, y, columns=("outcome", "death"))
    y[4, 1] = 2.0
    with pytest.raises(ValueError, match=r"column 1 is the indicator 'event' \(0 or 1\), but row 4 holds 2"):
        check_likelihood(lik, y, columns=("outcome", "event"))
    with pytest.raises(ValueError, match="name no 'outcome'"):
        check_likelihood(lik, _days(), columns=("fixed", "event"))


def test_numpys_warnings_come_back_as_one():
    """A log of a negative number on every call: one RuntimeWarning reaches the caller, not one per call."""
    def noisy(y, f, s):
        np.log(-y[:, 0])  # invalid value encountered in log, discarded
        return censored_lognormal_numpy(y, f, s)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = _check(noisy, _days())
    assert report.passed, report
    numpy_warnings = [w for w in caught if "encountered" in str(w.message)]
    assert len(numpy_warnings) == 1 and "warned" in str(numpy_warnings[0].message), [str(w.message) for w in caught]
