"""Variational posteriors over the inducing variables (Bonilla et al. 2019, §4.3, §6.2).

    q(u) = sum_k pi_k prod_j N(u_j; m_kj, S_kj),     pi = softmax(logits),   k = 1..K, j = 1..Q

Every family implements the protocol of :mod:`savigp.posteriors.base` (marginals at inputs, the
expected log-likelihood of those marginals, the entropy and cross-entropy terms, draws), so the
model never asks which family it holds. One family per module:

* :class:`FullGaussian` / :class:`FullMixture` (:mod:`.full`) -- full covariances over the whitened
  v = L_zz^-1 (u - mu) (the paper's "fg", and eq. (8) in its general form), ``posterior="full"``.
* :class:`DiagonalMixture` (:mod:`.diagonal`) -- diagonal in whitened coordinates,
  ``posterior="diag"`` (``"diag-whitened"`` before; GPflow's ``q_diag`` and GPyTorch's mean-field
  distribution under whitening are this family).
* :class:`UDiagonalMixture` (:mod:`.u_diagonal`) -- the paper's "mog1", "mog2": diagonal over u,
  in prior-conditioned coordinates, ``posterior="diag-u"`` (``"diag"`` before). Its variances at
  the optimum are the mean-field ones, 1 / diag(C^-1), so its intervals are narrower than the full
  Gaussian's on dense models (Bishop 2006, §10.1.2). Its ELBO, maximized jointly with the
  kernel, favours hyper-parameters where the u are weakly correlated (the bias of variational
  hyper-parameter learning, Turner and Sahani 2011); on dense models take the kernel from a full
  Gaussian (:func:`savigp.warm_start`) and learn q(u) only.
* :class:`JointGaussian` (:mod:`.joint`) -- one Gaussian over all Q * M whitened values, coupled
  across the latent functions, ``posterior="joint"``.

The whitened mixtures share :class:`MixturePosterior` (:mod:`.mixture`); the entropy of a mixture
(the pairwise-distance bound, eq. (18) or Monte Carlo) is :mod:`.entropy`; the hand-written backward passes are
:mod:`._autograd`. A family is set from another's moments over u (:meth:`Posterior.u_moments`,
:meth:`Posterior.init_from_moments`: the warm start of :func:`savigp.warm_start`) with the rules of
:mod:`.moments`.
"""
from __future__ import annotations

from .. import _choices
from ._autograd import MIDDLE_FORM_MIN_RATIO, use_middle_form, whitened_moments
from .base import InducingPrior, Posterior, make_posterior
from .diagonal import DiagonalMixture
from .entropy import DEFAULT_ENTROPY, ENTROPY_ESTIMATES, spread_means
from .full import FullGaussian, FullMixture
from .joint import JointGaussian
from .mixture import MixturePosterior
from .u_diagonal import UDiagonalMixture, USpaceParameters

__all__ = ["DEFAULT_ENTROPY", "DiagonalMixture", "ENTROPY_ESTIMATES",
           "FullGaussian", "FullMixture", "InducingPrior", "JointGaussian",
           "MIDDLE_FORM_MIN_RATIO", "MixturePosterior", "POSTERIORS", "Posterior",
           "UDiagonalMixture", "USpaceParameters", "make_posterior", "spread_means", "use_middle_form",
           "whitened_moments"]


#: the families by name (``posterior=``): a registry, ``POSTERIORS.register("name", cls)``
POSTERIORS = _choices.POSTERIORS
