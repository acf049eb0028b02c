"""Estimators of the expected log-likelihood L_ell and its gradients (Bonilla et al. 2019, §4.6,
§5, App. F): closed form, Gauss-Hermite quadrature, reparameterization and the score function with
control variates, from values of log p(y | f) only.

* :mod:`savigp.estimators.marginals`: :class:`LatentMarginals`, the marginals q(f_n) of a batch
  with their fixed shapes -- what a posterior family produces and an estimator consumes;
* :mod:`savigp.estimators.expected_log_likelihood`: the estimators (:class:`Estimator` classes
  registered by name in :data:`ESTIMATORS`, built by :func:`make_estimator`), :class:`ELLEstimate`
  (value and standard error) and :func:`resolve_estimator` (what ``"auto"`` stands for);
* :mod:`savigp.estimators.nonfinite`: :class:`NonFiniteLogProb`, the error that names the rows
  where a likelihood returned NaN or infinity.
"""
from .expected_log_likelihood import (ESTIMATORS, ELLEstimate, Estimator, checked_log_prob, expected_log_lik,
                                      expected_log_lik_joint, make_estimator, resolve_estimator)
from .marginals import LatentMarginals
from .nonfinite import NonFiniteLogProb

__all__ = ["ESTIMATORS", "ELLEstimate", "Estimator", "LatentMarginals", "expected_log_lik", "expected_log_lik_joint",
           "checked_log_prob", "make_estimator", "resolve_estimator", "NonFiniteLogProb"]
