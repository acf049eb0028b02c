"""The orthogonally decoupled mean heads (Salimbeni et al. 2018): a large, cheap basis for the
posterior mean beside the inducing points.

* :mod:`savigp.mean_heads.base`: the protocol, :class:`MeanHead`, and the zero head of a model
  without a basis, :class:`ZeroMeanHead`;
* :mod:`savigp.mean_heads.heads`: :class:`OrthogonalMeanHead`, :class:`DecoupledMeanHead`,
  :class:`HybridMeanHead` and :func:`make_mean_head`;
* :mod:`savigp.mean_heads.orthogonal_basis`: the basis's linear algebra (kernel-vector products in
  chunks, the SPD solve, the initial basis).

:data:`MEAN_HEADS` names them for ``SAVIGP(mean_basis=...)``, ``savigp train --mean-basis`` and
model files.
"""
from .base import GAMMA_PRECONDITIONERS, ZERO_HEAD, MeanHead, ZeroMeanHead
from .heads import DEFAULT_MEAN_BASIS, MEAN_HEADS, BasisTerms, DecoupledMeanHead, HybridMeanHead, OrthogonalMeanHead, make_mean_head

__all__ = ["MEAN_HEADS", "DEFAULT_MEAN_BASIS", "GAMMA_PRECONDITIONERS", "BasisTerms", "MeanHead", "ZeroMeanHead", "ZERO_HEAD", "OrthogonalMeanHead",
           "DecoupledMeanHead", "HybridMeanHead", "make_mean_head"]
