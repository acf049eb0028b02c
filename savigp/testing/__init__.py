"""A test kit for likelihood authors: :func:`check_likelihood` runs on any likelihood (built-in,
``CallableLikelihood`` or your own ``Likelihood`` subclass) the checks savigp runs on its own.

    from savigp.testing import check_likelihood
    report = check_likelihood(MyLikelihood(), y)   # raises LikelihoodCheckError listing failures
    print(report)

:mod:`savigp.testing.examples` holds example user likelihoods (negative binomial, ordinal probit,
probit) written as plain numpy and torch functions for ``CallableLikelihood``.
"""
from .report import Check, LikelihoodCheckError, LikelihoodReport
from .runner import check_likelihood

__all__ = ["check_likelihood", "Check", "LikelihoodReport", "LikelihoodCheckError"]
