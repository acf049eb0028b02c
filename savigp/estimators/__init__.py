"""Estimators of the expected log-likelihood L_ell and its gradients (Bonilla et al. 2019, §4.6,
§5, App. F) from the batch's marginals q(f_n) (:class:`savigp.posteriors.marginals.LatentMarginals`),
one class per module on one base class:

* :mod:`savigp.estimators.base`: :class:`Estimator` (the base class and the capabilities each
  estimator declares), :class:`ELLEstimate` (value and standard error), :func:`resolve_estimator`
  and :func:`make_estimator` (a name of :data:`ESTIMATORS` to an estimator);
* :mod:`~savigp.estimators.score` (``"score"``, the paper's black-box estimator with control
  variates), :mod:`~savigp.estimators.score_nocv` (``"score-nocv"``), :mod:`~savigp.estimators.reparam`
  (``"reparam"``), :mod:`~savigp.estimators.quadrature` (``"quadrature"``),
  :mod:`~savigp.estimators.closed_form` (``"closed-form"``) and :mod:`~savigp.estimators.automatic`
  (``"auto"``);
* :mod:`savigp.estimators.sampling`: what they share: :func:`checked_log_prob` (the likelihood's
  values, shapes and finiteness checked), standard normal draws, the weighted sum and the Monte
  Carlo standard error;
* :mod:`savigp.estimators.nonfinite`: :class:`NonFiniteLogProb`, the error that names the rows
  where a likelihood returned NaN or infinity.
"""
from .._choices import ESTIMATORS
from .base import ELLEstimate, Estimator, make_estimator, resolve_estimator
from .nonfinite import NonFiniteLogProb
from .sampling import checked_log_prob, monte_carlo_stderr

__all__ = ["ESTIMATORS", "ELLEstimate", "Estimator", "checked_log_prob", "make_estimator", "monte_carlo_stderr",
           "resolve_estimator", "NonFiniteLogProb"]
