"""The paper's diagonal mixture over u ("mog1", "mog2"; Bonilla et al. 2019, §6.2),
``posterior="diag-u"`` (``"diag"`` before; ``"diag"`` is now diagonal in whitened coordinates), in
prior-conditioned coordinates (see :class:`UDiagonalMixture`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from torch import Tensor
from likelihoods.densities import LOG_2PI

from ..linalg.cholesky import jittered
from ..runtime import sync_free
from ._u_space import fused_u_parameters, fused_u_space_moments
from .base import InducingPrior
from .entropy import DEFAULT_ENTROPY, spread_means
from .mixture import MixtureFamily
from .moments import check_moments, diagonal_variances, raw_scale


@dataclass
class USpaceParameters:
    """What :class:`UDiagonalMixture`'s parameters mean in u-space for the current prior, computed
    once per ELBO evaluation (with the autograd graph to K_zz).

    Attributes:
        mean: m_kj = L_zz^j w_kj, ``(K, Q, M)`` (u-space means less mu_j).
        sd: s_kj = d_kj * c_j, ``(K, Q, M)`` (u-space standard deviations).
        rel: d_kj, ``(K, Q, M)`` (the parameters' own relative scales).
        log_cond_sd: log c_j = -1/2 log diag((K_zz^j)^-1), ``(Q, M)``.
        logdet: log|K_zz^j|, ``(Q,)``.
        white_mean: w_kj, ``(K, Q, M)``.
    """

    mean: Tensor
    sd: Tensor
    rel: Tensor
    log_cond_sd: Tensor
    logdet: Tensor
    white_mean: Tensor


class UDiagonalMixture(MixtureFamily):
    """The paper's "mog1" / "mog2" (Bonilla et al. 2019, §6.2): K >= 1 components, each a Gaussian over u with
    *diagonal* covariance, q(u) = sum_k pi_k prod_j N(u_j; mu_j 1 + m_kj, diag(s_kj^2)).
    ``posterior="diag-u"`` (also ``"mog"``; model files of format versions 2-3 call it ``"diag"``).

    A mean-field family over u: for a Gaussian likelihood on a dense model its optimum at fixed
    hyper-parameters has variances 1 / diag(C^-1) of the exact posterior covariance C, never more
    than diag(C) (Bishop 2006, §10.1.2), so its predictive intervals are narrower than the full
    Gaussian's (boston, SF 1: 90% coverage 0.026-0.033 below it; docs/mixtures.md). For calibrated
    intervals from a diagonal family take ``posterior="diag"`` (diagonal in whitened coordinates).

    Parametrization (prior-conditioned). The family is the paper's; its coordinates are chosen so
    that the optimization is as well conditioned as the whitened full Gaussian's:

        m_kj = L_zz^j w_kj,        s_kjm = d_kjm c_jm,      c_jm = [(K_zz^j)^-1]_mm^(-1/2),

    with ``mean`` holding w ``(K, Q, M)`` and :meth:`scale` the relative scales d ``(K, Q, M)``
    (softplus of ``raw_scale``). c_jm is the standard deviation of u_jm given all other inducing
    values under the prior, which is also the best diagonal Gaussian against the prior alone
    (the minimizer of KL(q || p(u)) over diagonal q): the start d = 1, w = 0 is that optimum, and
    the optimum under the data has d_m^2 = [K_zz^-1]_mm / Lambda_mm in (0, 1] for a Gaussian
    posterior with precision Lambda. Held in u-space coordinates instead (m and s directly, s
    started at the prior variances diag(K_zz)), the cross-entropy m^T K_zz^-1 m + sum s_m^2
    [K_zz^-1]_mm has the condition number of K_zz (about 1e9 on the paper's sets) in m and
    per-coordinate scales spread over the same range in s, which Adam's per-coordinate steps do
    not undo: after 500 steps tr(K_zz^-1 S) was still ~4e5 on wisconsin. Here the cross-entropy
    is -1/2 sum_k pi_k sum_j [M log 2 pi + log|K_zz^j| + ||w_kj||^2 + ||d_kj||^2]: unit scale in
    every coordinate. Both maps depend on the kernel, like whitening: the gradient of the
    kernel hyper-parameters is taken at fixed (w, d).

    With V = L_zz^-1 K_zx and A = L_zz^-T V = K_zz^-1 K_zx (eq. 22-23):

        b_knj = mu_j + a_jn^T m_kj,     s2_knj = k_j(x_n, x_n) - v_jn^T v_jn + sum_m s_kjm^2 a_jnm^2,

    the entropy is that of the u-space Gaussians (exact for K = 1; for K > 1 the estimate of
    :meth:`MixturePosterior._mixture_entropy`: the pairwise-distance bound, eq. (18) or Monte Carlo).
    """

    whitened = False
    #: the means w are whitened coordinates of u (m = L_zz w), whatever the covariance's space: a
    #: linear functional of the mean (the hybrid head's <h, mu>_H) is taken as for a whitened family
    mean_whitened = True
    kind = "diag-u"
    #: its u-space parameters are per latent function's prior factor: no kernel shared by the latent functions
    shared_kernel = False
    #: value of the ``parametrization`` buffer: 1 = (w, d) above; files written before it have no
    #: buffer and hold m and s directly (converted by :mod:`savigp.model_files.migrations`)
    PARAMETRIZATION = 1

    covariance_diagonal = True
    diagonal = True
    mean_field_over_u = True

    def __init__(self, num_latent: int, num_inducing: int, num_components: int | None = None, init_scale: float = 1.0,
                 mean_spread: float = 1.0, generator: torch.Generator | None = None, entropy: str = DEFAULT_ENTROPY,
                 entropy_samples: int = 64):
        super().__init__(num_latent, num_inducing, num_components, init_scale=init_scale, mean_spread=mean_spread,
                         generator=generator, entropy=entropy, entropy_samples=entropy_samples)
        self.register_buffer("parametrization", torch.tensor(self.PARAMETRIZATION))

    # ------------------------------------------------------------------ the u-space parameters
    def u_parameters(self, Kzz: Tensor | None = None, Lzz: Tensor | None = None,
                     jitter_rel: Tensor | None = None) -> USpaceParameters:
        """m, s and the prior terms for the current prior, with autograd to the prior.

        Args:
            Kzz: ``(Q, M, M)`` with its graph, and ``jitter_rel`` ``(Q,)``: the factor is computed
                here from K_zz + rel * mean(diag K_zz) I (the matrix the model factorizes).
            Lzz: ``(Q, M, M)``: the prior factor to use instead (with or without graph).

        Given both (``Kzz`` with its graph, ``Lzz`` the factor of that matrix without one: the model's
        fused path), the prior-dependent terms come from :func:`fused_u_parameters`, whose backward
        pass hands the gradient to K_zz without a second factorization (the same values as the
        autograd path that factorizes K_zz again with graph).
        """
        if (Kzz is not None and Lzz is not None and Kzz.dim() == 3 and Kzz.requires_grad and not Lzz.requires_grad
                and torch.is_grad_enabled()):
            if Kzz.dtype == torch.float32:  # the factor the autograd path below uses: float64, rounded
                J = Kzz.detach() if jitter_rel is None else jittered(Kzz.detach(), jitter_rel)
                Lzz = sync_free.cholesky(J.to(torch.float64)).to(J.dtype)
            mean, log_c, logdet = fused_u_parameters(Kzz, self.mean, Lzz, jitter_rel)
            d = self.scale()
            return USpaceParameters(mean=mean, sd=d * log_c.exp(), rel=d, log_cond_sd=log_c, logdet=logdet,
                                    white_mean=self.mean)
        if Lzz is None or (Kzz is not None and Kzz.dim() == 3 and Kzz.requires_grad and not Lzz.requires_grad):
            if Kzz is None or Kzz.dim() != 3:
                raise ValueError("UDiagonalMixture.u_parameters needs Kzz (Q, M, M) or the prior factor Lzz (Q, M, M)")
            J = Kzz if jitter_rel is None else jittered(Kzz, jitter_rel)
            # float32: factorized in float64 (as the model's own factorization may have been)
            Lzz = sync_free.cholesky(J.to(torch.float64) if J.dtype == torch.float32 else J).to(J.dtype)
        M = self.num_inducing
        if tuple(Lzz.shape[-3:]) != (self.num_latent, M, M):
            raise ValueError(f"Lzz must have shape {(self.num_latent, M, M)}, got {tuple(Lzz.shape)}")
        eye = torch.eye(M, dtype=Lzz.dtype, device=Lzz.device).expand_as(Lzz)
        Linv = torch.linalg.solve_triangular(Lzz, eye, upper=False)
        log_c = -0.5 * torch.log((Linv * Linv).sum(-2))  # (Q, M): [K_zz^-1]_mm = sum_i (L^-1)_im^2
        d = self.scale()
        return USpaceParameters(
            mean=torch.matmul(Lzz, self.mean.unsqueeze(-1)).squeeze(-1), sd=d * log_c.exp(), rel=d,
            log_cond_sd=log_c, logdet=2.0 * torch.log(Lzz.diagonal(dim1=-2, dim2=-1)).sum(-1),
            white_mean=self.mean)

    def _resolve(self, scale, Lzz=None) -> USpaceParameters:
        if isinstance(scale, USpaceParameters):
            return scale
        if Lzz is None:
            raise ValueError("UDiagonalMixture needs the prior factor Lzz (Q, M, M) or u_parameters(...)")
        return self.u_parameters(Lzz=Lzz)

    def covariance(self, Lzz: Tensor | None = None) -> Tensor:
        """The u-space variances s_kj^2 ``(K, Q, M)`` for the prior factor ``Lzz`` ``(Q, M, M)``."""
        return self._resolve(None, Lzz).sd ** 2

    def moments(self, Kzz, Kzx: Tensor, Lzz: Tensor, scale=None,
                jitter_rel: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``a_n^T m_kj`` and ``sum_m s_kjm^2 a_nm^2 - v_n^T v_n``, each ``(K, Q, B)``, with a fused
        backward pass (:class:`_USpaceMoments`); ``Lzz`` carries no graph, ``Kzz`` (or None)
        receives the gradient; ``scale``: :meth:`u_parameters` of this step (or None)."""
        if not isinstance(scale, USpaceParameters):
            scale = self.u_parameters(Kzz, Lzz if Kzz is None or Kzz.dim() != 3 or not Kzz.requires_grad else None,
                                      jitter_rel)
        return fused_u_space_moments(Kzz, Kzx, scale.mean, scale.sd, Lzz, jitter_rel)

    def u_space_moments(self, V: Tensor, Lzz: Tensor, scale=None) -> tuple[Tensor, Tensor]:
        """a_n^T m_kj and sum_m s_kjm^2 a_nm^2 at B inputs, each ``(K, Q, B)`` (autograd throughout).

        Args:
            V: L_zz^-1 K_zx, ``(Q, M, B)``; Lzz: ``(Q, M, M)`` (both carrying their graphs).
        """
        p = self._resolve(scale, Lzz)
        A = torch.linalg.solve_triangular(Lzz.transpose(-1, -2), V, upper=True)  # K_zz^-1 K_zx, (Q, M, B)
        return (torch.einsum("kqm,qmb->kqb", p.mean, A),
                torch.einsum("kqm,qmb->kqb", p.sd * p.sd, A * A))

    def entropy(self, scale=None, Lzz: Tensor | None = None, generator: torch.Generator | None = None) -> Tensor:
        """Entropy of q(u) (a scalar): exact for K = 1, else eq. (18) or the Monte Carlo estimate
        (see :meth:`MixturePosterior.entropy`), of the u-space components (m_kj, diag(s_kj^2))."""
        p = self._resolve(scale, Lzz)
        if self.num_components == 1:
            QM = self.num_latent * self.num_inducing
            return QM * 0.5 * (LOG_2PI + 1.0) + torch.log(p.rel).sum() + p.log_cond_sd.sum()
        return self._mixture_entropy(p.mean, p.sd, generator)

    def cross_entropy(self, scale=None, Lzz: Tensor | None = None, Kzz: Tensor | None = None,
                      jitter_rel: Tensor | None = None) -> Tensor:
        """E_q[log p(u)] (Bonilla et al. 2019, eq. (19)) in u-space, which in these coordinates is

            -1/2 sum_k pi_k sum_j [M log 2 pi + log|K_zz^j| + ||w_kj||^2 + ||d_kj||^2]

        (m^T K_zz^-1 m = ||w||^2 and tr(K_zz^-1 diag(s^2)) = sum_m d_m^2).

        Args:
            scale: :meth:`u_parameters` of this step, or None with ``Lzz`` the prior factor
                ``(Q, M, M)`` (the term depends on the prior through log|K_zz|).
        """
        if scale is None and Lzz is None and Kzz is not None:
            scale = self.u_parameters(Kzz, jitter_rel=jitter_rel)
        p = self._resolve(scale, Lzz)
        M = self.num_inducing
        per = M * LOG_2PI + p.logdet + (p.white_mean ** 2).sum(-1) + (p.rel ** 2).sum(-1)  # (K, Q)
        return -0.5 * (self.weights() * per.sum(-1)).sum()

    @torch.no_grad()
    def spread_within_components(self, Lzz: Tensor) -> None:
        """Rescale the initial component means (from :func:`spread_means`, unit spread per
        coordinate of w) to the spread of the components themselves: m_k = c * z_k in u-space,
        w_k = L_zz^-1 (c * z_k), so that each mean lies where a typical draw of the initial
        component lies. (Unit spread in w would put the means at draws of the prior, whose
        marginal standard deviations exceed the components' c by the factor by which the inducing
        values are determined by each other -- orders of magnitude for dense, correlated inputs --
        and start every component far from the data.) ``Lzz``: the initial prior factor ``(Q, M, M)``."""
        if self.num_components == 1:
            return
        p = self.u_parameters(Lzz=Lzz)
        z = self.mean * p.sd / p.rel  # c * z_k, (K, Q, M)
        self.mean.copy_(torch.linalg.solve_triangular(Lzz, z.unsqueeze(-1), upper=False).squeeze(-1))

    @torch.no_grad()
    def respread(self, prior_factor: Callable[[], Tensor], generator: torch.Generator | None = None) -> None:
        """:meth:`MixturePosterior.respread` in u-space, where this family spreads its start
        (:meth:`spread_within_components`): the u-space means m_k = L_zz w_k are spread anew around
        c = sum_k pi_k m_k as c + d_k - sum_l pi_l d_l, d_k = s * s_k z_k (s_k the component's u-space
        standard deviations, s the spread they have now in those units), and held as w_k = L_zz^-1 m_k. ``prior_factor()``:
        the prior's Cholesky factor ``(Q, M, M)``."""
        K, Q, M = self.num_components, self.num_latent, self.num_inducing
        if K == 1:
            return
        Lzz = prior_factor().detach().to(self.mean)
        p = self.u_parameters(Lzz=Lzz)
        c = (self.weights().view(K, 1, 1) * p.mean).sum(0)  # (Q, M)
        white = (p.mean - c) / p.sd
        s = float((white * white).sum() / (K * Q * M)) ** 0.5
        d = (s if s > 1e-8 else 1.0) * p.sd * spread_means(K, Q, M, 1.0, generator).to(p.sd)  # (K, Q, M)
        m = c + d - (self.weights().view(K, 1, 1) * d).sum(0)
        self.mean.copy_(torch.linalg.solve_triangular(Lzz, m.unsqueeze(-1), upper=False).squeeze(-1))

    # ------------------------------------------------------------------ moments over u (warm starts)
    @torch.no_grad()
    def u_moments(self, Lzz: Tensor) -> tuple[Tensor, Tensor]:
        """q(u - mu) per component: means m_kj = L_zz w_kj ``(K, Q, M)`` and the diagonal factors
        diag(s_kj) ``(K, Q, M, M)``, for the prior factor ``Lzz`` ``(Q, M, M)``."""
        p = self.u_parameters(Lzz=Lzz)
        return p.mean, torch.diag_embed(p.sd)

    @torch.no_grad()
    def init_from_moments(self, mean: Tensor, factor: Tensor, Lzz: Tensor, *, variances: str = "mean-field",
                          spread: float = 1.0, generator: torch.Generator | None = None) -> None:
        """Set q(u) from q(u - mu) = N(mean, F F^T) per latent function (see
        :meth:`~savigp.posteriors.base.Posterior.init_from_moments`): the u-space standard
        deviations s_j are the square roots of the ``variances`` diagonal of F F^T
        (:func:`~savigp.posteriors.moments.diagonal_variances`), the means m_kj = mean_j +
        spread * s_j z_kj (:func:`spread_means`' centred z_k; K = 1: the source's mean), held as
        w = L_zz^-1 m and d = s / c (the prior-conditioned coordinates of the class docstring);
        equal weights.

        Args:
            mean: ``(Q, M)``; factor: ``(Q, M, M)`` lower triangular; Lzz: ``(Q, M, M)``.
        """
        K, Q, M = self.num_components, self.num_latent, self.num_inducing
        check_moments(mean, factor, Lzz, Q, M, variances)
        sd = diagonal_variances(factor, variances).sqrt()  # (Q, M)
        m = mean + sd * spread_means(K, Q, M, spread, generator).to(sd)  # (K, Q, M)
        self.mean.copy_(torch.linalg.solve_triangular(Lzz, m.unsqueeze(-1), upper=False).squeeze(-1))
        d = sd * torch.exp(-self.u_parameters(Lzz=Lzz).log_cond_sd)  # s / c
        self.raw_scale.copy_(raw_scale(d).expand_as(self.raw_scale))
        self.logits.zero_()

    # ------------------------------------------------------------------ the protocol (savigp.posteriors.base)
    def evaluation_state(self, prior: InducingPrior) -> USpaceParameters:
        """:meth:`u_parameters` for this evaluation's prior, shared by the marginals and the KL terms."""
        return self.u_parameters(prior.Kzz, prior.Lzz, prior.jitter_rel)

    def reference_moments(self, V: Tensor, Lzz: Tensor, state: Any = None) -> tuple[Tensor, Tensor]:
        """:meth:`u_space_moments` (autograd through ``Lzz``)."""
        return self.u_space_moments(V, Lzz, state)

    def kl_terms(self, prior: InducingPrior, state: Any = None,
                 generator: Optional[torch.Generator] = None) -> tuple[Tensor, Tensor]:
        """(:meth:`entropy`, :meth:`cross_entropy`) in u-space (the paper's convention)."""
        state = self.evaluation_state(prior) if state is None else state
        return (self.entropy(state, generator=generator),
                self.cross_entropy(state, prior.Lzz, Kzz=prior.Kzz, jitter_rel=prior.jitter_rel))

    def start(self, prior_factor: Callable[[], Tensor]) -> None:
        """Spread a mixture's initial means within its components (:meth:`spread_within_components`)."""
        if self.num_components > 1:
            self.spread_within_components(prior_factor())

    def natural_gradient_obstacle(self) -> Optional[str]:
        return (f"natural-gradient updates are derived for the whitened q(v); this model's posterior is "
                f"{type(self).__name__} (kind {self.kind!r}): use posterior='full' or 'diag', or savigp.fit (Adam)")
