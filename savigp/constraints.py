"""Positive parameters through softplus, shared by kernels, posteriors and likelihoods.

They live in the lower layer (likelihoods import nothing from savigp):
:mod:`likelihoods.parameters` holds ``PositiveParameter`` and ``inverse_softplus``,
:mod:`likelihoods.densities` holds ``LOG_2PI``. This module re-exports them so that
``savigp.constraints.PositiveParameter`` keeps working.
"""
from likelihoods.densities import LOG_2PI
from likelihoods.parameters import PositiveParameter, inverse_softplus

__all__ = ["PositiveParameter", "inverse_softplus", "LOG_2PI"]
