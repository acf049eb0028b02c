"""Estimators of the expected log-likelihood L_ell and its gradients (Bonilla et al. 2019, §4.6,
§5, App. F): closed form, Gauss-Hermite quadrature, reparameterization and the score function with
control variates, from values of log p(y | f) only.

* :mod:`savigp.estimators.expected_log_likelihood`: the estimators, :class:`ELLEstimate` (value and
  standard error) and :func:`resolve_estimator` (what ``"auto"`` stands for);
* :mod:`savigp.estimators.nonfinite`: :class:`NonFiniteLogProb`, the error that names the rows
  where a likelihood returned NaN or infinity.
"""
from .expected_log_likelihood import (ESTIMATORS, ELLEstimate, checked_log_prob, expected_log_lik, expected_log_lik_joint,
                               resolve_estimator)
from .nonfinite import NonFiniteLogProb

__all__ = ["ESTIMATORS", "ELLEstimate", "expected_log_lik", "expected_log_lik_joint", "checked_log_prob",
           "resolve_estimator", "NonFiniteLogProb"]
