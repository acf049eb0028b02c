"""``check_likelihood``: run on one likelihood every check savigp runs on its own likelihoods and
report what failed."""
from __future__ import annotations

import re
import warnings
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from likelihoods.base import Likelihood

from likelihoods.callable import parse_support

from . import density_checks, gradient_checks, moment_checks, target_checks, value_checks
from .problem import Problem, as_float64, copy_to, likelihood_device, parse_columns
from .report import LikelihoodCheckError, LikelihoodReport, Progress, run_checks

#: numpy's floating-point warnings (np.errstate's kinds), which the checks provoke outside the support of y
_NUMPY_FLOATING = re.compile(r"(divide by zero|invalid value|overflow|underflow) encountered")
# (name, function, checks whose failure makes it meaningless)
_VALUES = ("shapes", "finite")
CHECKS = (
    ("shapes", value_checks.shapes, ()),
    ("factorizes", value_checks.factorizes, ("shapes",)),
    ("finite", value_checks.finite, ("shapes",)),
    ("dtype", value_checks.dtypes, ("shapes",)),
    ("device", value_checks.device, ("shapes",)),
    ("monte_carlo_expectation", value_checks.monte_carlo_expectation, _VALUES),
    ("closed_form_expectation", value_checks.closed_form_expectation, _VALUES),
    ("validate_targets", target_checks.validation, ()),
    ("normalization", density_checks.normalization, _VALUES),
    ("censored_tail", density_checks.censored_tail, _VALUES + ("normalization",)),
    ("conditional_moments", moment_checks.conditional_moments, ()),
    ("moments_of_density", density_checks.moments, _VALUES + ("conditional_moments",)),
    ("predictive_moments", moment_checks.predictive_moments, ()),
    ("predictive_log_prob", moment_checks.predictive_log_prob, _VALUES),
    ("class_probabilities", target_checks.class_probabilities, _VALUES),
    ("gradient_in_f", gradient_checks.gradient_in_f, _VALUES),
    ("parameter_gradients", gradient_checks.parameter_gradients, _VALUES),
)


def check_likelihood(likelihood: Likelihood, y, *, num_latent: Optional[int] = None, mean=None, var=None,
                     bad_targets: Sequence = (), num_samples: int = 4000, seed: int = 0,
                     raise_on_failure: bool = True, support=None, columns: Optional[Sequence[str]] = None,
                     verbose: Optional[bool] = None,
                     progress: Optional[Callable[[str], None]] = None) -> LikelihoodReport:
    """Check a likelihood the way savigp checks its own (shapes, values, expectations, targets,
    moments, classes, gradients) and report every failure.

    The checks (each a :class:`Check` of the report, in this order):

    * ``shapes``: ``log_prob(y, f)`` is ``(..., B)`` for f ``(..., B, Q)`` with leading shapes
      (), (3,), (2, 3), in f's dtype, each leading index as if f[i] were passed alone;
    * ``factorizes``: a subset of rows gives the same values (log p(y_n | f_n) reads row n only);
    * ``finite``: no NaN or inf at draws f ~ N(mean, var);
    * ``dtype``: a float32 copy given float32 inputs returns float32; ``device``: outputs stay on
      a CUDA device (skipped without one);
    * ``monte_carlo_expectation``: the mean of log p(y | f) over at most ``num_samples`` draws
      agrees with a reference expectation within 4 standard errors plus the reference's error (the
      first 4 rows; skipped when n^Q grid points do not fit in 20000 for n >= 3). The draws come
      in rounds of ``num_samples / 8`` and stop once 4 standard errors are below 1% of
      1 + abs(E[log p]). The reference is Gauss-Hermite product quadrature where rules of n, n - 1
      and ~n / 2 points agree; where they do not (a kink or a jump: hard thresholds, abs(y - f),
      censoring) it is adaptive Gauss-Kronrod quadrature for Q = 1 (each round's nodes in one call)
      and Monte Carlo for Q > 1, in rounds until its standard error is a third of the check's (at
      most 25 ``num_samples`` draws) (:func:`savigp.testing.quadrature.reference_expectation`);
    * ``closed_form_expectation``: ``expected_log_prob`` (if declared) agrees with that reference
      (with Monte Carlo within 4 standard errors where Q is too large for quadrature);
    * ``validate_targets``: accepts y; rejects a wrong column count, a NaN row (if the likelihood
      defines its own validation) and each ``bad_targets`` entry, naming the row;
    * ``normalization``: exp(log_prob(y, f)) integrates to one over the support of y (sums over
      the counts or the labels) at 12 f values (the first 4 rows' mean and mean +- 2 sd) and 3
      parameter settings, to the quadrature's own error; a failure names f, the parameters, the
      support and the integral (:mod:`savigp.testing.density_checks`; several outputs: one at a
      time where log p is a sum over them, else skipped saying so);
    * ``censored_tail`` (a censoring indicator among ``columns``): a censored row's term,
      exp(log p(t, censored | f)), equals the event density's tail int_t^hi p(u, event | f) du at
      the same cases, so that a cumulative distribution given where the survival function belongs
      is caught (:func:`savigp.testing.density_checks.censored_tail`);
    * ``conditional_moments`` / ``predictive_moments``: shapes, finiteness, non-negative variances,
      and predictive moments against Monte Carlo over f (laws of total expectation and variance);
    * ``moments_of_density``: ``conditional_moments`` (a ``mean_fn``) equals the mean and variance
      of the density from the same integrals;
    * ``predictive_log_prob`` (when declared, with ``predictive_class_probabilities``): shapes, and
      exp of it (the class probability at each row's class) against the Monte Carlo mean of
      p(y | f) over ``num_samples`` draws, within 4 standard errors;
    * ``class_probabilities`` (classification): non-negative, sum to 1, equal to
      exp(log_prob(y, f)) at each row's class;
    * ``gradient_in_f`` (``differentiable = True``) and ``parameter_gradients``: autograd against
      central differences.

    Numpy's ``RuntimeWarning`` s from the likelihood's own code (``divide by zero``, ``invalid
    value``: the integrals reach values outside the support of y) are collected and reported as
    one warning at the end; other warnings pass through.

    The likelihood is never modified: checks run on a deep copy in float64 (and float32 for
    ``dtype``), after ``initialize_from_data(y)`` as a model would call it.

    Args:
        likelihood: a :class:`likelihoods.Likelihood` (built-in, ``CallableLikelihood`` or a subclass).
        y: valid targets, shape ``(B, P)`` with P = ``likelihood.output_dim``; a few to a few
            dozen rows (the checks evaluate the likelihood thousands of times per row).
        num_latent: Q; default ``likelihood.num_latent``.
        mean, var: the Gaussian N(f; mean, diag var) over the latent values of each row, shape
            ``(B, Q)`` each, var > 0; default mean ~ N(0, 1) and var ~ U(0.05, 0.5) (seeded).
            Give values in the range the likelihood is meant for (e.g. physical depths).
        bad_targets: ``[(y_bad (N, P), row), ...]``: targets the likelihood must reject with a
            ``ValueError`` naming ``row <row>``.
        num_samples: Monte Carlo draws of the expectation checks.
        seed: seeds every draw.
        raise_on_failure: raise :class:`LikelihoodCheckError` (an ``AssertionError``) listing every
            failed check with what was expected and what was got.
        support: where y lives, for ``normalization``: ``"real"``, ``"positive"``,
            ``"unit_interval"``, ``"counts"``, ``"circle"``, ``(lo, hi)`` or a list of those per
            output (:func:`likelihoods.callable.parse_support`); default: the likelihood's
            ``support`` attribute, else candidates inferred from y.
        columns: the role of each of the P columns of y, a sequence of P of ``"outcome"`` (what the
            density is over; the default for every column), ``"event"`` (a 0/1 right-censoring
            indicator: 1 the event was seen at the row's outcome, 0 censored there),
            ``"censored"`` (the same coded 1 for censored) and ``"fixed"`` (a covariate the
            likelihood reads from y without describing it: an exposure, a number of trials);
            ``"indicator"`` means ``"event"``, and ``"exposure"``, ``"trials"``, ``"covariate"``
            mean ``"fixed"``.
            ``normalization`` integrates over the outcome columns only, the indicator set to
            "event" and fixed columns at each row's value; ``censored_tail`` checks the censored
            term. E.g. survival times and a death indicator: ``columns=("outcome", "event")``.
        verbose: None (default): a short line to stderr on what a check is doing once it has run
            2 s, and its time when it ends; True: a line as each check starts and ends and on
            each round of quadrature or Monte Carlo; False: silent.
        progress: called with each such line instead of printing it to stderr.

    Returns:
        the :class:`LikelihoodReport` (``report.passed``, ``report.failures``, ``report["shapes"]``).
    """
    problem = _problem(likelihood, y, num_latent, mean, var, num_samples, seed, bad_targets)
    try:
        problem.columns = parse_columns(columns, problem.y)
    except ValueError as err:
        raise ValueError(f"check_likelihood: {err}") from None
    if support is not None:
        try:
            problem.support = parse_support(support, problem.y.shape[1])
        except ValueError as err:
            raise ValueError(f"check_likelihood: {err}") from None
    reporter = Progress("check_likelihood", verbose, progress)
    problem.report = reporter.step
    caught: list = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            return run_checks(LikelihoodReport(_describe(likelihood)), CHECKS, problem, raise_on_failure,
                              LikelihoodCheckError, progress=reporter)
    finally:  # the caller's warning filters are back: each other warning once, numpy's in one line
        _pass_on(caught)


def _pass_on(caught: list) -> None:
    """Warn again, once each, the warnings the checks raised, except numpy's floating-point ones
    (``divide by zero encountered in log``, ``invalid value``, overflow, underflow), which the
    integrals over y provoke outside its support: one warning counts them."""
    numpy_messages, seen = [], set()
    for w in caught:
        text = str(w.message)
        if issubclass(w.category, RuntimeWarning) and _NUMPY_FLOATING.search(text):
            numpy_messages.append(text)
            continue
        key = (w.category, text, w.filename, w.lineno)
        if key not in seen:
            seen.add(key)
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if numpy_messages:
        kinds = sorted(set(numpy_messages))
        warnings.warn(f"check_likelihood: the likelihood's numpy code warned {len(numpy_messages)} time(s) "
                      f"({'; '.join(kinds[:3])}{'; ...' if len(kinds) > 3 else ''}), shown once here: the checks "
                      "evaluate it outside the data (e.g. at y outside its support, where -inf or NaN is "
                      "read as zero density)", RuntimeWarning, stacklevel=3)


def _problem(lik, y, num_latent, mean, var, num_samples, seed, bad_targets) -> Problem:
    if not isinstance(lik, Likelihood):
        raise TypeError(f"check_likelihood: likelihood must be a likelihoods.Likelihood, got {type(lik).__name__}")
    device = likelihood_device(lik)
    y = as_float64(y, "y", device)
    P, Q = lik.output_dim, int(num_latent if num_latent is not None else lik.num_latent)
    if y.dim() != 2 or y.shape[1] != P or y.shape[0] < 1:
        raise ValueError(f"check_likelihood: y must have shape (B, {P}) (B >= 1 rows, output_dim = {P}), "
                         f"got {tuple(y.shape)}")
    B = y.shape[0]
    g = torch.Generator().manual_seed(seed)
    mean = torch.randn(B, Q, generator=g, dtype=torch.float64) if mean is None else mean
    var = 0.05 + 0.45 * torch.rand(B, Q, generator=g, dtype=torch.float64) if var is None else var
    mean, var = as_float64(mean, "mean", device), as_float64(var, "var", device)
    for name, t in (("mean", mean), ("var", var)):
        if tuple(t.shape) != (B, Q):
            raise ValueError(f"check_likelihood: {name} must have shape (B, Q) = {(B, Q)}, got {tuple(t.shape)}")
    if not bool((var > 0).all()) or not bool(torch.isfinite(mean).all()):
        raise ValueError("check_likelihood: var must be positive and mean finite")
    if num_samples < 100:
        raise ValueError(f"check_likelihood: num_samples must be at least 100, got {num_samples}")
    work = copy_to(lik, torch.float64)
    work.initialize_from_data(y)
    _check_bad_targets(bad_targets, P)
    return Problem(work, y, mean, var, int(num_samples), int(seed), bad_targets)


def _check_bad_targets(bad_targets, P: int) -> None:
    for i, entry in enumerate(bad_targets):
        try:
            bad, row = entry
            shape = np.shape(bad)
        except (TypeError, ValueError):
            raise ValueError(f"check_likelihood: bad_targets[{i}] must be a pair (y_bad (N, {P}), row), got {entry!r}")
        if len(shape) != 2 or shape[1] != P or not 0 <= int(row) < shape[0]:
            raise ValueError(f"check_likelihood: bad_targets[{i}] must be (y_bad of shape (N, {P}), a row index in "
                             f"[0, N)), got y_bad of shape {shape} and row {row}")


def _describe(lik: Likelihood) -> str:
    describe = getattr(lik, "describe", None)
    return describe() if callable(describe) else type(lik).__name__
