"""The DECOUPLED and HYBRID mean bases (Cheng & Boots 2017; Salimbeni et al. 2018, §3.1).

Next to the orthogonally decoupled head of :mod:`savigp.decoupled` (Salimbeni et al. 2018,
eq. (11)), two older ways of adding a mean basis gamma_j (``(Q, G, D)``, coefficients a_j
``(Q, G)``) to the covariance basis beta_j = Z_j of the coupled model. Both add the same function
to the mean of every mixture component,

    h_j(x) = k(x, gamma_j) a_j                  (no projection: O(G) per point, no K_zz^-1),

and leave the covariance of the coupled model (the posterior family over Z, whatever it is)
unchanged, which is Salimbeni et al. 2018, eq. (9)'s parametrization of the covariance
(I - Psi_beta K_beta^-1 Psi_beta^T) + Psi_beta K_beta^-1 S K_beta^-1 Psi_beta^T.

* **DECOUPLED** (Cheng & Boots 2017, eq. (9) of Salimbeni et al. 2018): the mean is h alone,
  mu = Psi_gamma a. The coupled posterior mean m is fixed at zero (:meth:`DecoupledMeanHead.attach`,
  called by :func:`make_mean_head`, zeroes it and turns its gradient off), so mean and covariance have separate bases. The
  covariance is held through the model's posterior family (S over u = beta, or over the whitened
  v); Cheng & Boots' inverse parametrization Sigma = (I + Psi_beta B Psi_beta^T)^-1 spans the
  covariances with S < K_beta, a subset of these, with B = K_beta^-1 (K_beta S^-1 K_beta - K_beta)
  K_beta^-1 (Salimbeni et al. 2018, §2.3: A = -K_beta^-1 + (K_beta B K_beta + K_beta)^-1).
  KL (exact; the joint Gaussian over [beta, gamma] has mean K_[beta,gamma],gamma a, and the
  Mahalanobis term of N(0, K_[beta,gamma]) gives a^T K_gamma a):

      KL = KL_coupled(m = 0, S) + 1/2 sum_j a_j^T K_gamma a_j.

* **HYBRID** (Cheng & Boots 2017, appendix; Salimbeni et al. 2018, eq. (10)): the mean is
  mu = Psi_gamma a + Psi_beta K_beta^-1 m_beta, i.e. h plus the coupled mean. The two parts are not
  orthogonal in the RKHS, so the KL gains a cross term (the inner product <h, mu_k>_H):

      KL = KL_coupled(m, S) + 1/2 sum_j a_j^T K_gamma a_j + sum_k pi_k sum_j <h_j, mu_kj>_H,

  with <h_j, mu_kj>_H = a_j^T K_gamma,Z K_zz^-1 u_kj = c_j^T m_kj (whitened, u = L_zz m,
  c_j = L_zz^-1 K_Z,gamma a_j) or w_j^T m_kj (u-space means, w_j = K_zz^-1 K_Z,gamma a_j). For a mixture the
  entropy is unchanged by a common shift and each component's cross-entropy with the prior gains
  1/2 ||h||^2 + <h, mu_k>, so this is exact for every component, as the model's KL is. The
  orthogonal head of :mod:`savigp.decoupled` is the same basis with h projected off span Psi_Z
  (then the cross term vanishes).

Cost: the mean adds O(G) per point and O(G^2) for a^T K_gamma a per step (``kl_columns=C``
replaces it by the unbiased column-sampled estimate of :mod:`savigp.decoupled`, ``"kernel"``
form: there is no Nystrom part to take out). HYBRID's cross term costs O(M G) for K_Z,gamma a;
on the model's fused path (where L_zz carries no autograd graph) whitened posteriors need the
gradient through L_zz, so the factor is recomputed with a graph: one more O(M^3) Cholesky and its
backward per step.

Natural gradients (:func:`savigp.natural_gradients.fit_orthnat`): the cross term is linear in m,
so it enters the natural step through d ELBO / dm exactly; DECOUPLED keeps m = 0 and takes the
natural step in S alone. (The seed trains both with Adam.)
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from . import _choices
from ._linalg import jittered
from .decoupled import OrthogonalMeanHead, kernel_matvec

#: the mean heads by name (``mean_basis=``): a registry, ``MEAN_HEADS.register("name", cls)``
MEAN_HEADS = _choices.MEAN_HEADS
#: their names (the registry's, read when this module is imported; :data:`MEAN_HEADS` is live)
MEAN_BASES = MEAN_HEADS.names()


class _UnprojectedMeanHead(OrthogonalMeanHead):
    """h_j(x) = k(x, gamma_j) a_j added to every component's mean (module docstring)."""

    orthogonal = False

    def mean_shift(self, X: Tensor, kernel, Z: Tensor, Lzz: Tensor, V: Optional[Tensor] = None, *,
                   Kzx: Optional[Tensor] = None, Kzz: Optional[Tensor] = None,
                   jitter_rel: Optional[Tensor] = None) -> Tensor:
        """h_j(x_n) = k(x_n, gamma_j) a_j, ``(Q, B)``; the arguments other than ``X (B, D)`` are
        those of :meth:`OrthogonalMeanHead.mean_shift` (unused: the basis is not projected)."""
        return kernel_matvec(kernel, X, self.gamma, self.a)

    def _half_norm(self, kernel, columns: Optional[int], generator: Optional[torch.Generator]) -> Tensor:
        """1/2 sum_j a_j^T K_gamma a_j = 1/2 sum_j ||h_j||_H^2: exact, or column-sampled."""
        C = self.kl_columns if columns is None else int(columns)
        return 0.5 * self.quadratic(kernel, columns=C, generator=generator)


class DecoupledMeanHead(_UnprojectedMeanHead):
    """DECOUPLED (Cheng & Boots 2017): mean k(x, gamma) a alone, coupled mean m fixed at 0.

    Same arguments and parameters as :class:`savigp.decoupled.OrthogonalMeanHead`. Build it with
    :func:`make_mean_head` (or ``SAVIGP(..., mean_basis="decoupled")``), which fixes the
    posterior mean at zero.
    """

    coupled_mean = False

    def attach(self, posterior) -> None:
        """Fix the ``posterior``'s mean (``(K, Q, M)``) at zero and turn its gradient off: the mean
        then lives in the gamma basis alone (module docstring)."""
        if posterior is None:
            raise ValueError("make_mean_head('decoupled') needs the posterior (its mean is fixed at zero)")
        with torch.no_grad():
            posterior.mean.zero_()
        posterior.mean.requires_grad_(False)

    def kl(self, kernel, Z: Tensor, Lzz: Tensor, *, Kzz: Optional[Tensor] = None, jitter_rel: Optional[Tensor] = None,
           columns: Optional[int] = None, generator: Optional[torch.Generator] = None, posterior=None,
           mean: Optional[Tensor] = None) -> Tensor:
        """1/2 sum_j a_j^T K_gamma a_j (a scalar); the other arguments as in
        :meth:`OrthogonalMeanHead.kl` (the coupled KL with m = 0 is the model's)."""
        return self._half_norm(kernel, columns, generator)


class HybridMeanHead(_UnprojectedMeanHead):
    """HYBRID (Salimbeni et al. 2018, eq. (10)): mean k(x, gamma) a + the coupled mean.

    Same arguments and parameters as :class:`savigp.decoupled.OrthogonalMeanHead`.
    """

    coupled_mean = True

    def kl(self, kernel, Z: Tensor, Lzz: Tensor, *, Kzz: Optional[Tensor] = None, jitter_rel: Optional[Tensor] = None,
           columns: Optional[int] = None, generator: Optional[torch.Generator] = None, posterior=None,
           mean: Optional[Tensor] = None) -> Tensor:
        """1/2 sum_j a_j^T K_gamma a_j + sum_k pi_k sum_j <h_j, mu_kj>_H (a scalar).

        Args:
            kernel, Z, Lzz, Kzz, jitter_rel, columns, generator: as in :meth:`OrthogonalMeanHead.kl`.
            posterior: the model's posterior (its ``mean`` ``(K, Q, M)``, ``weights()`` ``(K,)``
                and whether it is ``whitened``), or
            mean: whitened coupled means ``(Q, M)`` or ``(K, Q, M)`` with equal weights (the
                natural-gradient step passes its autograd leaf here). One of the two is required.
        """
        if mean is not None:
            m = mean if mean.dim() == 2 else mean.mean(0)
            whitened = True
        elif posterior is not None:
            m = torch.einsum("k,kqm->qm", posterior.weights(), posterior.mean)
            # whitened coordinates of the means (also the diagonal mixture over u's w, m = L_zz w)
            whitened = bool(posterior.mean_whitened)
        else:
            raise ValueError("HybridMeanHead.kl needs the coupled means: pass posterior= or mean=")
        Q, M = Z.shape[0], Z.shape[1]
        if tuple(m.shape) != (Q, M):
            raise ValueError(f"HybridMeanHead.kl: coupled means must have shape ({Q}, {M}) (or (K, {Q}, {M})), "
                             f"got {tuple(m.shape)}")
        return self._half_norm(kernel, columns, generator) + self.coupling(kernel, Z, Lzz, m, whitened, Kzz=Kzz, jitter_rel=jitter_rel)

    def coupling(self, kernel, Z: Tensor, Lzz: Tensor, m: Tensor, whitened: bool = True, *,
                 Kzz: Optional[Tensor] = None, jitter_rel: Optional[Tensor] = None) -> Tensor:
        """sum_j <h_j, mu_j>_H for the coupled mean m ``(Q, M)`` (a scalar): c^T m (whitened
        coordinates) or w^T m (u-space means); Z ``(Q, M, D)``, Lzz ``(Q, M, M)``, Kzz and
        jitter_rel as in :meth:`OrthogonalMeanHead.basis_terms`."""
        if not whitened:
            _, w = self.basis_terms(kernel, Z, Lzz, Kzz, jitter_rel)  # fused gradient to K_zz when Kzz is given
            return (w * m).sum()
        b = kernel_matvec(kernel, Z, self.gamma, self.a)  # (Q, M)
        L = Lzz
        if Kzz is not None and torch.is_grad_enabled() and Kzz.requires_grad and not Lzz.requires_grad:
            # the model's fused path: refactorize with a graph (the same jittered matrix) so the
            # gradient through L_zz reaches K_zz
            L = torch.linalg.cholesky(jittered(Kzz, 0.0 if jitter_rel is None else jitter_rel))
        c = torch.linalg.solve_triangular(L, b.unsqueeze(-1), upper=False).squeeze(-1)
        return (c * m).sum()


def make_mean_head(basis: str, X: Tensor, num_latent: int, size: int, seed: int = 0, *, posterior=None, **options):
    """The mean head of ``basis`` (a name in :data:`MEAN_HEADS`) for Q = ``num_latent`` latent functions
    with G = ``size`` mean-basis inputs each, initialized from the rows of ``X (N, D)``, then
    attached to the model's ``posterior`` (``head.attach(posterior)``: for ``"decoupled"`` the
    posterior's mean ``(K, Q, M)`` is set to zero and its gradient turned off, so that the mean lives
    in the gamma basis alone, module docstring). ``options`` go to the head (``learn_inputs``,
    ``gamma_inputs``, ``kl_columns``, ``kl_sampling``).

    Raises:
        ValueError: an unknown ``basis``, naming the registered ones.
    """
    head = MEAN_HEADS[MEAN_HEADS.canonical(basis)](X, num_latent, size, seed=seed, **options)
    head.attach(posterior)
    return head
