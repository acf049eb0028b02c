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

import torch

from .. import _choices
from ._autograd import MIDDLE_FORM_MIN_RATIO, use_middle_form, whitened_moments
from .base import InducingPrior, Marginals, Posterior
from .diagonal import DiagonalMixture
from .entropy import DEFAULT_ENTROPY, ENTROPY_ESTIMATES, spread_means
from .full import FullGaussian, FullMixture
from .joint import JointGaussian
from .mixture import MixturePosterior
from .u_diagonal import UDiagonalMixture, USpaceParameters

__all__ = ["DEFAULT_ENTROPY", "DiagonalMixture", "ENTROPY_ESTIMATES",
           "FullGaussian", "FullMixture", "InducingPrior", "JointGaussian",
           "MIDDLE_FORM_MIN_RATIO", "Marginals", "MixturePosterior", "POSTERIORS", "POSTERIOR_KINDS", "Posterior",
           "UDiagonalMixture", "USpaceParameters", "make_posterior", "spread_means", "use_middle_form",
           "whitened_moments"]


#: the families by name (``posterior=``): a registry, ``POSTERIORS.register("name", cls)``
POSTERIORS = _choices.POSTERIORS
#: their names (the registry's, read when this module is imported; :data:`POSTERIORS` is live)
POSTERIOR_KINDS = POSTERIORS.names()


def make_posterior(kind: str, num_latent: int, num_inducing: int, num_components: int = 1,
                   generator: torch.Generator | None = None, entropy: str = DEFAULT_ENTROPY,
                   entropy_samples: int = 64) -> Posterior:
    """Build a posterior by name (an entry of :data:`POSTERIORS`, by its class's ``build``).

    * ``"full"`` (or ``"fg"``): full covariances, whitened; K = 1 is :class:`FullGaussian`.
    * ``"diag"`` (or ``"diag-whitened"``, ``"diagonal"``): diagonal in whitened coordinates,
      :class:`DiagonalMixture`.
    * ``"diag-u"`` (or ``"mog"``): the paper's diagonal mixture over u, :class:`UDiagonalMixture`.
    * ``"joint"``: one Gaussian over all Q * M whitened values, coupled across the latent
      functions (:class:`JointGaussian`; K = 1).

    ``entropy`` (``"pairwise"``, the default; ``"bound"``, eq. (18); or ``"mc"``) and
    ``entropy_samples`` choose the entropy term of mixtures with K > 1 (see
    :meth:`MixturePosterior.entropy`).

    Raises:
        ValueError: an unknown ``kind``, naming the registered ones.
    """
    family = POSTERIORS[POSTERIORS.canonical(kind)]
    return family.build(num_latent, num_inducing, num_components, generator=generator, entropy=entropy,
                        entropy_samples=entropy_samples)
