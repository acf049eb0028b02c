"""Test kits: each runs on an implementation of one concept the checks savigp runs on its own and
reports every failure (:class:`Report`, raising :class:`CheckError`):

* :func:`check_likelihood` (:mod:`.runner`) for likelihoods, below;
* :func:`check_kernel` (:mod:`.kernels`) for kernels;
* :func:`check_posterior` (:mod:`.posteriors`) for posterior families registered in
  :data:`savigp.posteriors.POSTERIORS`;
* :func:`check_mean_head` (:mod:`.mean_heads`) for mean heads registered in
  :data:`savigp.mean_heads.MEAN_HEADS`, with the closed-form KL reference it uses;
* :func:`check_estimator` (:mod:`.estimators`) for the expected log-likelihood estimators.

The likelihood kit: :func:`check_likelihood` runs on any likelihood (built-in,
``CallableLikelihood`` or your own ``Likelihood`` subclass) the checks savigp runs on its own.

    from savigp.testing import check_likelihood
    report = check_likelihood(MyLikelihood(), y)   # raises LikelihoodCheckError listing failures
    print(report)

Besides the values, expectations, targets, moments and gradients, it integrates exp(log p(y | f))
over y (``normalization``) and compares the mean function with that density's moments
(``moments_of_density``): :mod:`savigp.testing.density_checks`.

Target columns that are not outcomes (a right-censoring indicator, an exposure, a number of trials)
are declared with ``columns=``; a censored row's term is then checked against the tail of the event
density (``censored_tail``).

:mod:`savigp.testing.examples` holds example user likelihoods (negative binomial, ordinal probit,
probit, log-normal survival times, right-censored or not) written as plain numpy and torch
functions for ``CallableLikelihood``.
"""
from .estimators import check_estimator
from .kernels import check_kernel
from .mean_heads import check_mean_head
from .posteriors import check_posterior
from .report import Check, CheckError, LikelihoodCheckError, LikelihoodReport, Report
from .runner import check_likelihood

__all__ = ["check_likelihood", "check_kernel", "check_posterior", "check_mean_head", "check_estimator", "Check",
           "Report", "CheckError", "LikelihoodReport", "LikelihoodCheckError"]
