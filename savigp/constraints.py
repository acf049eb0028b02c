"""Positive parameters through softplus, shared by kernels, posteriors and likelihoods.

They live in the lower layer, :mod:`likelihoods.parameters` (likelihoods import nothing from
savigp); this module re-exports them so that ``savigp.constraints.PositiveParameter`` keeps
working.
"""
from likelihoods.parameters import LOG_2PI, PositiveParameter, inverse_softplus

__all__ = ["PositiveParameter", "inverse_softplus", "LOG_2PI"]
