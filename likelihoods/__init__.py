"""Likelihoods for savigp: the protocol (:class:`Likelihood`) and the shipped families."""
from .base import Likelihood
from .callable import CallableLikelihood
from .gaussian import Gaussian
from .logistic import Logistic

__all__ = ["Likelihood", "CallableLikelihood", "Gaussian", "Logistic"]
