"""Mixtures of Gaussians over the whitened inducing values (Bonilla et al. 2019, §4.3, §6.2):

    q(v) = sum_k pi_k prod_j N(v_kj; m_kj, S_kj),     pi = softmax(logits),   k = 1..K, j = 1..Q,

with u_j = mu_j 1 + L_zz^j v_j and K_zz^j = L_zz^j (L_zz^j)^T. This is a change of variables only:
q(u) is the same mixture with means mu_j + L_zz m_kj and covariances L_zz S_kj L_zz^T, and every
term of the ELBO (eq. (17)) has the same value -- the log|L_zz| terms of the entropy (eq. (18)) and
the cross-entropy (eq. (19)) cancel -- while the marginals need one triangular solve per latent
function instead of two, and the optimization is better conditioned. :meth:`MixturePosterior.kl_terms`
returns the terms in v (:meth:`~savigp.posteriors.base.Posterior.u_space_shift` moves them to u).

Shapes: means m ``(K, Q, M)``; full covariances through lower Cholesky factors ``(K, Q, M, M)``
with a positive diagonal (softplus); diagonal covariances ``(K, Q, M)``; logits ``(K,)``.
Mixtures (K > 1) start with their means spread antithetically around the prior mean
(:func:`spread_means`), and their entropy is the pairwise-distance bound of Kolchinsky & Tracey
(2017) (``entropy="pairwise"``, the default), eq. (18) (``entropy="bound"``) or a reparameterized
Monte Carlo estimate of the exact entropy (``entropy="mc"``).
"""
from __future__ import annotations

import copy
import math
from typing import Any, Callable, Optional

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from likelihoods.densities import LOG_2PI
from likelihoods.parameters import inverse_softplus
from ._autograd import SCALE_FLOOR, lower_factor, squared_norm, whitened_moments
from .base import InducingPrior, LatentMarginals, ScaledPosterior, make_posterior, variance_floor
from .entropy import (DEFAULT_ENTROPY, ENTROPY_ESTIMATES, entropy_bound, entropy_monte_carlo, entropy_pairwise,
                      spread_means)
from .moments import check_moments, diagonal_variances, raw_scale
from .natural import NaturalPoint, natural_update


#: a split (:meth:`MixturePosterior.split`) puts the halves at m +- SPLIT_SHIFT sqrt(lambda) v
SPLIT_SHIFT = 0.5


class MixturePosterior(ScaledPosterior):
    """q(v) = sum_k pi_k prod_j N(v_kj; m_kj, S_kj), batched over K components and Q latents.

    Args:
        num_components: K.
        num_latent: Q.
        num_inducing: M.
        diagonal: diagonal S_kj (True) or full S_kj through Cholesky factors (False).
        init_scale: initial standard deviation of every S_kj (1.0 = the prior in whitened space).
        mean_spread: for K > 1, the initial means are spread around the prior mean by
            :func:`spread_means` with this many standard deviations of the initial q (1.0: each
            mean is where a typical draw of the initial q lies); K = 1 starts at m = 0.
        generator: torch.Generator for the random initial means.
        entropy: the entropy term for K > 1: ``"pairwise"`` (Kolchinsky & Tracey 2017, the default),
            ``"bound"`` (eq. (18), the paper's) or ``"mc"`` (a reparameterized Monte Carlo estimate
            of the exact entropy); see :meth:`_mixture_entropy`.
        entropy_samples: S for ``entropy="mc"``: draws per component and evaluation.
    """

    #: True: the parameters describe q(v), v = L_zz^-1 (u - mu) (the default, see the module docstring).
    #: False: they describe q(u - mu) directly (:class:`UDiagonalMixture`, the paper's "mog").
    whitened: bool = True
    #: the name :func:`make_posterior` builds this class from
    kind: str = "full"
    #: capabilities (:class:`~savigp.posteriors.base.Posterior`): the whitened mixtures take a kernel
    #: shared by the latent functions, give and take moments over u, and take the component moves
    shared_kernel: bool = True
    function_moments: bool = True
    component_moves: bool = True

    def __init__(self, num_components: int, num_latent: int, num_inducing: int, diagonal: bool,
                 init_scale: float = 1.0, mean_spread: float = 1.0, generator: torch.Generator | None = None,
                 entropy: str = DEFAULT_ENTROPY, entropy_samples: int = 64):
        super().__init__()
        K, Q, M = int(num_components), int(num_latent), int(num_inducing)
        if K < 1 or Q < 1 or M < 1:
            raise ValueError(f"posterior sizes must be >= 1, got K={K}, Q={Q}, M={M}")
        if entropy not in ENTROPY_ESTIMATES:
            raise ValueError(f"entropy must be one of {ENTROPY_ESTIMATES}, got {entropy!r}")
        if int(entropy_samples) < 2:
            raise ValueError(f"entropy_samples must be >= 2, got {entropy_samples}")
        self.num_components, self.num_latent, self.num_inducing = K, Q, M
        self.diagonal = bool(diagonal)
        #: ``"pairwise"``, ``"bound"`` (eq. (18)) or ``"mc"`` (Monte Carlo), for K > 1; see :meth:`_mixture_entropy`
        self.entropy_estimate = entropy
        self.entropy_samples = int(entropy_samples)
        self.mean = nn.Parameter(spread_means(K, Q, M, mean_spread, generator))
        self.logits = nn.Parameter(torch.zeros(K, dtype=torch.float64))
        raw_diag = inverse_softplus(torch.tensor(float(init_scale), dtype=torch.float64))
        if self.diagonal:
            # S_kj = diag(softplus(raw)^2): raw holds the standard deviations
            self.raw_scale = nn.Parameter(torch.full((K, Q, M), float(raw_diag), dtype=torch.float64))
        else:
            raw = torch.zeros(K, Q, M, M, dtype=torch.float64)
            raw.diagonal(dim1=-2, dim2=-1).fill_(float(raw_diag))
            self.raw_scale = nn.Parameter(raw)

    # ------------------------------------------------------------------ parameters
    @property
    def component_means(self) -> Tensor:
        """The means m ``(K, Q, M)``, the parameter itself (:attr:`Posterior.component_means`)."""
        return self.mean

    @property
    def weight_logits(self) -> Tensor:
        """The logits ``(K,)``, the parameter itself (:attr:`Posterior.weight_logits`)."""
        return self.logits

    def weights(self) -> Tensor:
        """Mixture weights pi, shape ``(K,)``."""
        return torch.softmax(self.logits, dim=0)

    def log_weights(self) -> Tensor:
        """log pi, shape ``(K,)``."""
        return torch.log_softmax(self.logits, dim=0)

    def scale(self) -> Tensor:
        """Cholesky factors L_kj ``(K, Q, M, M)`` (full) or standard deviations ``(K, Q, M)`` (diagonal)."""
        if self.diagonal:
            return F.softplus(self.raw_scale) + SCALE_FLOOR
        return lower_factor(self.raw_scale)

    def covariance(self) -> Tensor:
        """S_kj: ``(K, Q, M, M)`` (full) or its diagonal ``(K, Q, M)`` (diagonal)."""
        L = self.scale()
        return L * L if self.diagonal else L @ L.transpose(-1, -2)

    @torch.no_grad()
    def set_full(self, mean: Tensor, chol: Tensor | None = None) -> None:
        """Set m (``(K, Q, M)``) and, for full posteriors, the Cholesky factors (``(K, Q, M, M)``)."""
        self.mean.copy_(mean.expand_as(self.mean))
        if chol is not None:
            if self.diagonal:
                self.raw_scale.copy_(inverse_softplus(chol.clamp_min(1e-9)).expand_as(self.raw_scale))
            else:
                raw = torch.tril(chol, -1).clone()
                raw.diagonal(dim1=-2, dim2=-1).copy_(inverse_softplus(chol.diagonal(dim1=-2, dim2=-1).clamp_min(1e-9)))
                self.raw_scale.copy_(raw.expand_as(self.raw_scale))

    # ------------------------------------------------------------------ moments over u (warm starts)
    @torch.no_grad()
    def u_moments(self, Lzz: Tensor) -> tuple[Tensor, Tensor]:
        """q(u - mu) per component: means L_zz m_kj ``(K, Q, M)`` and lower factors L_zz L_kj of the
        covariances L_zz S_kj L_zz^T ``(K, Q, M, M)`` (L_kj = diag of the standard deviations for
        diagonal S_kj), for the prior factor ``Lzz`` ``(Q, M, M)``."""
        L = self.scale()
        factor = Lzz @ (torch.diag_embed(L) if self.diagonal else L)
        return (Lzz @ self.mean.unsqueeze(-1)).squeeze(-1), factor

    @torch.no_grad()
    def init_from_moments(self, mean: Tensor, factor: Tensor, Lzz: Tensor, *, variances: str = "mean-field",
                          spread: float = 1.0, generator: torch.Generator | None = None) -> None:
        """Set q(v) from q(u - mu) = N(mean, F F^T) per latent function (see
        :meth:`~savigp.posteriors.base.Posterior.init_from_moments`): in whitened coordinates
        v = L_zz^-1 (u - mu) the source is N(L_zz^-1 mean, B B^T) with B = L_zz^-1 F (lower
        triangular). Full S_kj: L_kj = B (the source itself for K = 1); diagonal S_kj: the
        ``variances`` diagonal of B B^T (:func:`~savigp.posteriors.moments.diagonal_variances`).
        For K > 1 the means are v + spread * L_kj z_k with :func:`spread_means`' z_k (centred, so
        the mixture's mean stays the source's); the weights are equal.

        Args:
            mean: ``(Q, M)``; factor: ``(Q, M, M)`` lower triangular; Lzz: ``(Q, M, M)``.
        """
        K, Q, M = self.num_components, self.num_latent, self.num_inducing
        check_moments(mean, factor, Lzz, Q, M, variances)
        v = torch.linalg.solve_triangular(Lzz, mean.unsqueeze(-1), upper=False).squeeze(-1)  # (Q, M)
        B = torch.linalg.solve_triangular(Lzz, factor, upper=False)  # (Q, M, M)
        z = spread_means(K, Q, M, spread, generator).to(v)  # (K, Q, M), zeros for K = 1
        if self.diagonal:
            sd = diagonal_variances(B, variances).sqrt()  # (Q, M)
            self.mean.copy_(v + sd * z)
            self.raw_scale.copy_(raw_scale(sd).expand_as(self.raw_scale))
        else:
            self.mean.copy_(v + (B @ z.unsqueeze(-1)).squeeze(-1))
            raw = torch.tril(B, -1)
            raw.diagonal(dim1=-2, dim2=-1).copy_(raw_scale(B.diagonal(dim1=-2, dim2=-1)))
            self.raw_scale.copy_(raw.expand_as(self.raw_scale))
        self.logits.zero_()

    @torch.no_grad()
    def respread(self, prior_factor: Callable[[], Tensor], generator: torch.Generator | None = None) -> None:
        """A fresh start for the component means (K > 1; K = 1: nothing): spread them anew around
        their weighted centre c = sum_k pi_k m_k by :func:`spread_means`' centred z_k from
        ``generator``, in units of each component's own standard deviations and at the spread they
        have now,

            m_k <- c + d_k - sum_l pi_l d_l,    d_k = s L_k z_k,
            s^2 = (1 / (K D)) sum_k ||L_k^-1 (m_k - c)||^2    (D = Q M),

        (s = 1 when the means coincide), with L_k the component's Cholesky factor (standard
        deviations for diagonal S_k); the centre c, the covariances and the weights are kept. A fresh model's means
        (L_k = I, s = 1) are then a new draw of the constructor's start, and a warm start's
        (:meth:`init_from_moments`) a new draw of its own. Used by :func:`savigp.fit`'s exploration
        of starts for K > 1. ``prior_factor`` (the prior's Cholesky factor ``(Q, M, M)``, called
        only by families whose coordinates depend on it) is unused here.
        """
        K, Q, M = self.num_components, self.num_latent, self.num_inducing
        if K == 1:
            return
        L = self.scale()
        c = (self.weights().view(K, 1, 1) * self.mean).sum(0)  # (Q, M)
        dev = self.mean - c  # (K, Q, M)
        if self.diagonal:
            white = dev / L
        else:
            white = torch.linalg.solve_triangular(L, dev.unsqueeze(-1), upper=False).squeeze(-1)
        s = float((white * white).sum() / (K * Q * M)) ** 0.5
        z = (s if s > 1e-8 else 1.0) * spread_means(K, Q, M, 1.0, generator).to(self.mean)
        new = L * z if self.diagonal else (L @ z.unsqueeze(-1)).squeeze(-1)  # (K, Q, M)
        self.mean.copy_(c + new - (self.weights().view(K, 1, 1) * new).sum(0))

    @torch.no_grad()
    def restart_means(self, prior_factor: Callable[[], Tensor], generator: torch.Generator | None = None) -> None:
        """A fresh random start of the means, the rest kept: K > 1, :meth:`respread` (new spreads
        around the weighted centre); K = 1, the mean moved from where it is by a draw z of the
        prior's whitened coordinates, z ~ N(0, I) ``(Q, M)`` from ``generator``, by
        :meth:`spread_along` (m <- m +- z). Used by :func:`savigp.fit`'s exploration of starts.
        ``prior_factor()``: the prior's Cholesky factor ``(Q, M, M)`` (for families whose
        coordinates depend on it)."""
        if self.num_components > 1:
            self.respread(prior_factor, generator)
            return
        z = torch.randn(self.mean.shape[1:], generator=generator, dtype=torch.float64)
        self.spread_along(z.unsqueeze(0), generator)

    def component_pairs(self) -> list:
        """Every ordered pair (source, target) of distinct components, the closest (distance of the
        means in the coordinates they are held in) first and, within a pair, the lighter component
        the target first: the order in which :func:`savigp.training.starts.move` tries them."""
        K = self.num_components
        m, w = self.mean.detach().flatten(1), self.weights().detach()
        d = torch.cdist(m, m)
        out = []
        for i, j in sorted(((i, j) for i in range(K) for j in range(i + 1, K)), key=lambda ij: float(d[ij])):
            heavy, light = (i, j) if float(w[j]) <= float(w[i]) else (j, i)
            out += [(heavy, light), (light, heavy)]
        return out

    @torch.no_grad()
    def spread_along(self, directions: Tensor, generator: torch.Generator | None = None) -> None:
        """A start whose component means lie along given directions: with ``directions`` d_1, d_2, ...
        ``(R, Q, M)`` in the coordinates the means are held in (whitened, u - mu = L_zz m) and each
        as long as a component should lie from the centre,

            K = 1:   m <- c + sigma d_1                      (sigma = +-1 from ``generator``),
            K = 2:   m_k <- c +- d_1,
            K >= 3:  m_k <- c + cos(a_k) d_1 + sin(a_k) d_2,  a_k = alpha + 2 pi k / K

        (a regular K-gon in the plane of d_1, d_2, at a rotation alpha from ``generator``), the offsets
        then centred by the weights (K > 1) so that the weighted centre c = sum_k pi_k m_k stays;
        covariances and weights are kept. Used by :func:`savigp.fit`'s starts with the directions
        along which the prior moves f at the data most (:func:`savigp.training.starts.leading_directions`):
        for a sign-, rotation- or permutation-symmetric likelihood the components then start on
        smooth functions related by the symmetry, each on one side of the prior mean at every input,
        instead of at a stationary point (m = c = 0 under a likelihood symmetric about the prior
        mean) or on a random draw that changes sign between inputs.

        Args:
            directions: ``(R, Q, M)``, R >= 1 (R >= 2 for K >= 3).
        """
        K, Q, M = self.num_components, self.num_latent, self.num_inducing
        if directions.dim() != 3 or tuple(directions.shape[1:]) != (Q, M) or directions.shape[0] < (2 if K >= 3 else 1):
            raise ValueError(f"directions must have shape (R, {Q}, {M}) with R >= {2 if K >= 3 else 1}, got "
                             f"{tuple(directions.shape)}")
        d = directions.to(self.mean)
        u = float(torch.rand((), generator=generator, dtype=torch.float64))
        w = self.weights().detach().view(K, 1, 1)
        c = (w * self.mean).sum(0)  # (Q, M)
        if K == 1:
            self.mean.copy_(c + (1.0 if u < 0.5 else -1.0) * d[:1])
            return
        if K == 2:
            off = torch.stack([d[0], -d[0]])
        else:
            a = 2 * math.pi * (u + torch.arange(K, dtype=torch.float64) / K)
            off = a.cos().view(K, 1, 1).to(d) * d[0] + a.sin().view(K, 1, 1).to(d) * d[1]
        self.mean.copy_(c + off - (w * off).sum(0))

    @torch.no_grad()
    def fold(self, component: int, prior_factor: Callable[[], Tensor], smoothing: float = 0.1) -> Tensor:
        """Make component ``component``'s mean of one sign at every inducing input, per latent function
        (a sign flip on part of the inputs): u = L_zz m_kj (u_kj - mu_j) is multiplied by -1 at the
        inducing inputs where its sign is the minority's (the sign of the smaller sum of the absolute values), then
        smoothed as a GP regression of those values with a nugget of ``smoothing`` times the mean
        prior variance, u <- K_zz (K_zz + s I)^-1 u (the fold leaves a kink where the mean crossed
        zero, which the whitened coordinates m_kj = L_zz^-1 u, and the prior term -||m_kj||^2 / 2,
        would otherwise charge as a rough function), and held as m_kj = L_zz^T (K_zz + s I)^-1 u.
        Latent functions of one sign already are left as they are; covariances and weights are
        kept. Under a likelihood symmetric about the prior mean (``y = |f|``, ``y = f^2``) a component that
        changes sign between inputs -- half on each mode, a local optimum that no step size leaves --
        is then on one mode. Returns the mask of the flipped inducing values ``(Q, M)``.

        Args:
            prior_factor: returns the prior's Cholesky factor ``(Q, M, M)`` (or ``(1, M, M)``).
            smoothing: s relative to the mean of diag(K_zz), > 0.
        """
        k = self._component(component)
        if not smoothing > 0:
            raise ValueError(f"smoothing must be > 0, got {smoothing}")
        Q, M = self.num_latent, self.num_inducing
        L = prior_factor().detach().to(self.mean).expand(Q, M, M)
        u = (L @ self.mean[k].unsqueeze(-1)).squeeze(-1)  # (Q, M)
        pos, neg = u.clamp_min(0).sum(-1, keepdim=True), (-u).clamp_min(0).sum(-1, keepdim=True)
        mask = torch.sign(u) == torch.where(pos >= neg, -1.0, 1.0).to(u)
        for j in range(Q):
            if bool(mask[j].any()):
                Kzz = L[j] @ L[j].transpose(-1, -2)
                nugget = float(smoothing) * float(Kzz.diagonal().mean()) * torch.eye(M, dtype=u.dtype, device=u.device)
                flipped = torch.where(mask[j], -u[j], u[j])
                self.mean[k, j] = L[j].transpose(-1, -2) @ torch.linalg.solve(Kzz + nugget, flipped)
        return mask

    @torch.no_grad()
    def reflect(self, source: int, target: int) -> None:
        """Replace component ``target`` by the reflection of component ``source`` through the prior
        mean: m_target <- -m_source and S_target <- S_source (in the coordinates the parameters are
        held in, whitened v or w, both linear in u - mu, so the reflected component is the source's
        image under u - mu -> -(u - mu)), the two weights shared equally, the others kept.

        The prior is symmetric about its mean, so the reflection is exactly as probable a priori;
        when the likelihood is invariant to f -> -f (a sign ambiguity: ``y = |f|``, ``y = f^2``, ...) it is
        the posterior's mirror mode of the source's, otherwise usually a poor component. Used by
        :func:`savigp.training.starts.move`, whose moved copy is kept only if it raises the ELBO.
        """
        self.transform(source, target, -torch.eye(self.num_latent, dtype=torch.float64), lambda: None)

    @torch.no_grad()
    def transform(self, source: int, target: int, matrix: Tensor, prior_factor: Callable[[], Tensor]) -> None:
        """Replace component ``target`` by the image of component ``source`` under a linear map of
        the latent functions, the same at every input: u - mu -> A (u - mu) with A = ``matrix``
        ``(Q, Q)`` acting across the latent functions at each inducing input (A = -I: the
        reflection through the prior mean, :meth:`reflect`; a permutation matrix: a label switch; a
        rotation of two latent functions), m_target <- L_zz^-1 A (L_zz m_source) per inducing input,
        S_target <- S_source, the two weights shared equally, the others kept. When A maps the
        prior to itself (an orthogonal A over latent functions with the same kernel) and the
        likelihood is invariant to it, the image of a mode is a mode of the posterior: the moves of
        :func:`savigp.training.starts.move` try such maps. ``prior_factor()``: the prior's Cholesky
        factor ``(Q, M, M)`` or ``(1, M, M)`` (not called for a multiple of the identity)."""
        K, Q, M = self.num_components, self.num_latent, self.num_inducing
        k, l = int(source), int(target)
        if not (0 <= k < K and 0 <= l < K and k != l):
            raise ValueError(f"source and target must be two different components in [0, {K}), got {source}, {target}")
        A = torch.as_tensor(matrix, dtype=torch.float64)
        if tuple(A.shape) != (Q, Q):
            raise ValueError(f"matrix must have shape ({Q}, {Q}), got {tuple(A.shape)}")
        A = A.to(self.mean)
        if bool((A == A[0, 0] * torch.eye(Q, dtype=A.dtype, device=A.device)).all()):
            self.mean[l] = A[0, 0] * self.mean[k]  # (whitened coordinates are linear in u - mu)
        else:
            L = prior_factor().detach().to(self.mean).expand(Q, M, M)
            u = (L @ self.mean[k].unsqueeze(-1)).squeeze(-1)  # (Q, M)
            self.mean[l] = torch.linalg.solve_triangular(L, (A @ u).unsqueeze(-1), upper=False).squeeze(-1)
        self.raw_scale[l] = self.raw_scale[k]
        log_pi = self.log_weights()
        shared = torch.logsumexp(log_pi[[k, l]], 0) - math.log(2.0)
        # (logits are log pi up to a constant: log_softmax's values give the same weights)
        logits = log_pi.clone()
        logits[k] = logits[l] = shared
        self.logits.copy_(logits)

    # ------------------------------------------------------------------ births (choosing K)
    @torch.no_grad()
    def split_shift(self, component: int) -> Tensor:
        """a = :data:`SPLIT_SHIFT` sqrt(lambda) v ``(Q, M)`` for component k: v the leading eigenvector
        of its covariance over all Q M coordinates (block diagonal over the latent functions), lambda
        its eigenvalue; for diagonal covariances the coordinate of the largest variance. In the
        coordinates the parameters hold (whitened v; the relative scales of the diagonal mixture over u)."""
        k = self._component(component)
        Q, M = self.num_latent, self.num_inducing
        L = self.scale()[k]
        out = torch.zeros(Q, M, dtype=L.dtype, device=L.device)
        if self.diagonal:
            flat = (L * L).flatten()
            i = int(flat.argmax())
            out.view(-1)[i] = flat[i].sqrt()
        else:
            evals, evecs = torch.linalg.eigh(L @ L.transpose(-1, -2))  # (Q, M), (Q, M, M), ascending
            j = int(evals[:, -1].argmax())
            out[j] = evecs[j, :, -1] * evals[j, -1].clamp_min(0).sqrt()
        return SPLIT_SHIFT * out

    @torch.no_grad()
    def split(self, component: int, shift: Tensor | None = None) -> "MixturePosterior":
        """A copy of this mixture with component k (weight pi_k, N(m, S)) split in two (a birth):

            N(m + a, S - a a^T) and N(m - a, S - a a^T), each with weight pi_k / 2,

        a moment-preserving split (Richardson & Green 1997, §3.2; Ueda et al. 2000): the pair has the
        parent's mean and covariance, so the cross-entropy term (eq. (19), which depends on the first
        two moments only) is unchanged and the other terms move little. The new component is the
        last (index K); the other components, the entropy term and every other attribute are
        copied. ``shift``: a ``(Q, M)`` in the coordinates the means are held in (default
        :meth:`split_shift`, along the component's widest direction); it must leave S - a a^T
        positive definite (diagonal covariances: a within the standard deviations)."""
        k = self._component(component)
        K, Q, M = self.num_components, self.num_latent, self.num_inducing
        a = (self.split_shift(k) if shift is None else shift).to(self.mean)
        if tuple(a.shape) != (Q, M):
            raise ValueError(f"shift must have shape ({Q}, {M}), got {tuple(a.shape)}")
        L = self.scale()[k]  # (Q, M, M) lower factors, or (Q, M) standard deviations
        if self.diagonal:
            var = L * L - a * a
            if bool((var <= 0).any()):
                raise ValueError("shift must be smaller than the component's standard deviations")
            raw_k = raw_scale(var.sqrt())
        else:
            C, info = torch.linalg.cholesky_ex(L @ L.transpose(-1, -2) - a.unsqueeze(-1) * a.unsqueeze(-2))
            if bool((info != 0).any()):
                raise ValueError("shift must leave the split covariance S - a a^T positive definite")
            raw_k = torch.tril(C, -1)
            raw_k.diagonal(dim1=-2, dim2=-1).copy_(raw_scale(C.diagonal(dim1=-2, dim2=-1)))
        new = copy.deepcopy(self)
        mean, raw, logits = self.mean.detach().clone(), self.raw_scale.detach().clone(), self.log_weights().detach().clone()
        raw[k] = raw_k
        half = logits[k] - math.log(2.0)
        logits[k] = half
        grads = {name: p.requires_grad for name, p in (("mean", self.mean), ("raw_scale", self.raw_scale),
                                                        ("logits", self.logits))}
        means = torch.cat([mean, mean[k:k + 1]])
        means[k] += a
        means[K] -= a
        new.mean = nn.Parameter(means, requires_grad=grads["mean"])
        new.raw_scale = nn.Parameter(torch.cat([raw, raw[k:k + 1]]), requires_grad=grads["raw_scale"])
        new.logits = nn.Parameter(torch.cat([logits, half.view(1)]), requires_grad=grads["logits"])
        new.num_components = K + 1
        return new

    @torch.no_grad()
    def restarted(self, num_components: int, prior_factor: Callable[[], Tensor], *,
                  generator: torch.Generator | None = None, entropy: str | None = None) -> "MixturePosterior":
        """A fresh posterior of this family (its registered ``kind``) with K = ``num_components``,
        started as a model built by name starts one (means spread by :func:`spread_means` from
        ``generator``, then :meth:`start` with ``prior_factor``, the prior's Cholesky factor
        ``(Q, M, M)``), on this posterior's device and dtype, with the gradients turned on and off
        as this one's. Its entropy term for K > 1: ``entropy`` (None: this posterior's), its
        ``entropy_samples`` this one's. The restarts of :func:`savigp.choose_components`."""
        entropy = self.entropy_estimate if entropy is None else entropy
        new = make_posterior(self.kind, self.num_latent, self.num_inducing, int(num_components), generator=generator,
                             entropy=entropy, entropy_samples=self.entropy_samples)
        new.start(prior_factor)
        new = new.to(device=self.mean.device, dtype=self.mean.dtype)
        for p_new, p_old in zip(new.parameters(), self.parameters()):
            p_new.requires_grad_(p_old.requires_grad)
        return new

    @torch.no_grad()
    def grown(self, component: int, prior_factor: Callable[[], Tensor], *,
              entropy: str | None = None) -> "MixturePosterior":
        """This family with K + 1 components: component ``component`` split in two by :meth:`split`
        (a birth along its widest direction, the pair keeping its first two moments), held by the
        class the family builds for K + 1 components (:meth:`restarted`: a full Gaussian grows into
        a full mixture) with the entropy term ``entropy`` (None: this posterior's). The birth of
        :func:`savigp.selection.components.grow`."""
        split = self.split(component)
        new = self.restarted(self.num_components + 1, prior_factor, generator=None, entropy=entropy)
        new.load_state_dict(split.state_dict())
        return new

    def _component(self, component: int) -> int:
        k = int(component)
        if not 0 <= k < self.num_components:
            raise ValueError(f"component must be in [0, {self.num_components}), got {component}")
        return k

    # ------------------------------------------------------------------ marginals
    def marginal_quadratic(self, V: Tensor) -> Tensor:
        """v_n^T S_kj v_n for every column of V (Bonilla et al. 2019, eq. (23), whitened).

        Args:
            V: ``(Q, M, B)``, the whitened cross-covariances L_zz^-1 K_zx.

        Returns:
            ``(K, Q, B)``.
        """
        L = self.scale()
        if self.diagonal:
            return torch.einsum("kqm,qmb->kqb", L * L, V * V)
        LtV = L.transpose(-1, -2) @ V.unsqueeze(0)  # (K, Q, M, B)
        return (LtV * LtV).sum(-2)

    def moments(self, Kzz, Kzx: Tensor, Lzz: Tensor, scale: Tensor | None = None,
                jitter_rel: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Whitened marginal terms at B inputs with a fused backward pass (see :func:`whitened_moments`).

        Returns ``m_k^T v_n`` and ``v_n^T (S_kj - I) v_n``, each ``(K, Q, B)``, for V = L_zz^-1 K_zx;
        ``Lzz`` carries no graph and ``Kzz`` (or None) receives its gradient.
        """
        if scale is None:
            scale = self.scale()
        return whitened_moments(Kzz, Kzx, Lzz, self.mean, scale, self.diagonal, jitter_rel)

    # ------------------------------------------------------------------ ELBO terms
    def _log_det_scale(self, L: Tensor) -> Tensor:
        """log|S_kj|^(1/2) = sum log diag(L_kj), shape ``(K, Q)``."""
        diag = L if self.diagonal else L.diagonal(dim1=-2, dim2=-1)
        return torch.log(diag).sum(-1)

    def entropy(self, scale: Tensor | None = None, Lzz: Tensor | None = None,
                generator: torch.Generator | None = None) -> Tensor:
        """Entropy term L_ent of q(v) (a scalar).

        K = 1: the exact entropy sum_j [M/2 log(2 pi e) + log|S_j|^(1/2)].
        K > 1: the ``entropy_estimate`` of :meth:`_mixture_entropy` (the pairwise-distance bound, eq.
        (18) or Monte Carlo), with the Gaussians over all Q*M inducing variables (block diagonal
        over the latent functions).

        Args:
            scale: optional precomputed :meth:`scale` (reused within one ELBO evaluation).
            Lzz: unused (the whitened entropy does not depend on the prior).
            generator: torch.Generator for the draws of ``entropy_estimate="mc"``.
        """
        K, Q, M = self.num_components, self.num_latent, self.num_inducing
        L = self.scale() if scale is None else scale
        if K == 1:
            return Q * M * 0.5 * (LOG_2PI + 1.0) + self._log_det_scale(L).sum()
        return self._mixture_entropy(self.mean, L, generator)

    def _mixture_entropy(self, mean: Tensor, L: Tensor, generator: torch.Generator | None) -> Tensor:
        """The entropy of sum_k pi_k prod_j N(m_kj, L_kj L_kj^T) (L: ``(K, Q, M, M)`` lower factors, or
        ``(K, Q, M)`` standard deviations for diagonal components), K > 1.

        ``"pairwise"`` (the default): the lower bound of Kolchinsky & Tracey (2017) with the
        Bhattacharyya distance D_B between components (:func:`~savigp.posteriors.entropy.entropy_pairwise`),
        sum_k pi_k H(q_k) - sum_k pi_k log sum_l pi_l exp(-D_B(q_k, q_l)): exact when the components
        coincide and when they are far apart, so a mixture is not charged for being one and the
        ELBO can rank K. Deterministic; the cost of ``"bound"``.

        ``"bound"``: eq. (18) of Bonilla et al. (2019), -sum_k pi_k log sum_l pi_l N(m_k; m_l, S_k + S_l), by
        Jensen's inequality a lower bound. It is D/2 (1 - log 2) = 0.153 D nats (D = Q M) below the
        entropy both for coinciding components and for well-separated ones (each term then
        compares N(m_k; m_k, 2 S_k) with the Gaussian's own entropy), so against K = 1 with its
        exact entropy it costs a mixture 0.153 D nats of ELBO (with D >= 5 more than the log 2 a
        correct two-mode fit gains). Deterministic; cost K^2 / 2 factorizations of M x M per
        latent function (full) or O(K^2 Q M) (diagonal).

        ``"mc"``: H = -sum_k pi_k E_{q_k}[log q(v)], each expectation from S reparameterized draws
        v_ks = m_k + L_k eps_ks (eps standard normal, ``entropy_samples`` = S per component):

            H_hat = -sum_k pi_k (1/S) sum_s logsumexp_l [log pi_l + log N(v_ks; m_l, S_l)].

        Unbiased for H, and its gradient (through v_ks, the densities and pi_k) unbiased for H's
        gradient; q is differentiable, so no score function is needed. Its standard deviation is
        O(sd(log q) / sqrt(S K)): zero for coinciding components, about sqrt(D / 2) / sqrt(S K) per
        overlap-free component (log q of a Gaussian in D dimensions has variance D / 2), e.g.
        0.125 nats at D = 4, S = 64, K = 2 (exact for equal weights; the sample sd over replicates is in
        docs/performance.md and checked by ``pytest tests/savigp/posteriors/test_mixtures.py -k entropy_sd``).
        Cost: K^2 S Q triangular solves of
        size M (full) or O(K^2 S Q M) elementwise (diagonal), plus the draws.
        """
        if self.entropy_estimate == "pairwise":
            return entropy_pairwise(mean, L, self.log_weights(), self.diagonal)
        if self.entropy_estimate == "bound":
            return entropy_bound(mean, L, self.log_weights(), self.diagonal)
        return entropy_monte_carlo(mean, L, self.log_weights(), self.diagonal, self.entropy_samples, generator)

    def cross_entropy(self, scale: Tensor | None = None) -> Tensor:
        """Cross-entropy term L_cross = E_q[log p(v)] with p(v_j) = N(0, I) (Bonilla et al. 2019, eq. (19), whitened):

            -1/2 sum_k pi_k sum_j [M log 2 pi + m_kj^T m_kj + tr S_kj].

        Args:
            scale: optional precomputed :meth:`scale` (reused within one ELBO evaluation).
        """
        M = self.num_inducing
        L = self.scale() if scale is None else scale
        trace = squared_norm(L, 1 if self.diagonal else 2)  # tr S_kj = ||L_kj||^2, (K, Q)
        per = M * LOG_2PI + (self.mean * self.mean).sum(-1) + trace  # (K, Q)
        return -0.5 * (self.weights() * per.sum(-1)).sum()

    # ------------------------------------------------------------------ the protocol (savigp.posteriors.base)
    def reference_moments(self, V: Tensor, Lzz: Tensor, state: Any = None) -> tuple[Tensor, Tensor]:
        """m_kj^T v_n and v_n^T S_kj v_n at B inputs, each ``(K, Q, B)``, by autograd from
        V = L_zz^-1 K_zx ``(Q, M, B)`` (``Lzz`` unused: the whitened terms need only V)."""
        return torch.einsum("kqm,qmb->kqb", self.mean, V), self.marginal_quadratic(V)

    def marginals(self, prior: InducingPrior, Kzx: Tensor, kxx: Tensor, state: Any = None) -> LatentMarginals:
        """b_knj - mu_j and s2_knj (Bonilla et al. 2019, eq. (22)-(23)), each ``(K, B, Q)``, floored at
        :func:`~savigp.posteriors.base.variance_floor`. On the fused path (``prior.Lzz`` without
        graph) by :meth:`moments`' hand-written backward pass, else by autograd through L_zz."""
        if prior.fused:
            fmean, dvar = self.moments(prior.Kzz, Kzx, prior.Lzz, state, prior.jitter_rel)
            var, V = kxx + dvar, None  # (K, Q, B): k_nn - v^T v + v^T S_k v
        else:
            V = torch.linalg.solve_triangular(prior.Lzz, Kzx, upper=False)  # (Q, M, B)
            fmean, quad = self.reference_moments(V, prior.Lzz, state)
            var = kxx - (V * V).sum(-2) + quad  # (K, Q, B)
        var = torch.clamp_min(var, variance_floor(kxx))
        return LatentMarginals(fmean.transpose(-1, -2), var.transpose(-1, -2), self.log_weights(), V=V)

    @torch.no_grad()
    def precondition_gradients(self) -> None:
        """Divide the gradients of component k's parameters (``mean[k]``, ``raw_scale[k]``) and of its
        logit by its weight pi_k, in place, before a first-order step (Adam, Adadelta); K = 1: nothing.

        Every term of the ELBO (eq. (17)) is a pi_k-weighted sum over the components, so the
        gradient of component k's parameters is pi_k times that of its own contribution, and the
        gradient of logit k is pi_k (c_k - sum_l pi_l c_l) with c_k = dL/dpi_k, the component's own
        ELBO contribution. Under Adam this ties every component's step to its weight's history: a
        weight that falls during the first steps (while components cross between modes) shrinks its
        gradients by pi_k, while Adam's second moment still holds the earlier, larger ones
        (beta_2 = 0.999: a memory of about 1000 steps), so the component and its logit stop moving
        and the weight stays near 0 -- the collapse to (0.0, 1.0) with both modes found.

        Divided by pi_k, the component's gradient is its own contribution's, as in the natural
        gradient of a mixture of exponential-family distributions (Lin, Khan & Schmidt 2019, eq.
        (10)-(11): the Fisher information of component k's parameters in the joint of the indicator
        and the component is pi_k times the component's own), and the logit's is c_k - sum_l pi_l c_l,
        the natural gradient of the categorical in the parameters log pi_k: a step along it is the
        exponentiated-gradient (mirror-descent) update pi_k <- pi_k exp(lr (c_k - c_bar)) / Z of the
        weights by each component's own ELBO contribution (Arenz, Neumann & Zhong 2018, eq. (9); Lin
        et al. 2019, §3). It does not vanish as pi_k -> 0, and for separated components c_k contains
        -log pi_k (the entropy), which pulls a small weight back. Not for L-BFGS: its line search
        needs the true gradient of the objective it evaluates.
        """
        if self.num_components == 1:
            return
        w = self.weights().detach()
        inv = 1.0 / w.clamp_min(torch.finfo(w.dtype).eps)  # (K,); a gradient at pi_k < eps is ~0 anyway
        for p in (self.mean, self.raw_scale, self.logits):
            if p.grad is not None:
                p.grad.mul_(inv.view(-1, *([1] * (p.grad.dim() - 1))))

    def natural_gradient_obstacle(self) -> Optional[str]:
        if self.num_components != 1:
            return (f"natural-gradient updates need a single Gaussian q(v) (posterior='full' or 'diag' with "
                    f"num_components=1); this model has K={self.num_components} components: use savigp.fit (Adam)")
        return None

    # ------------------------------------------------------------------ natural gradients (K = 1)
    def natural_point(self) -> NaturalPoint:
        """q(v) = N(m, S) of the single component, m ``(Q, M)`` and S (``(Q, M, M)``, or its diagonal
        ``(Q, M)``) as autograd leaves (:meth:`~savigp.posteriors.base.Posterior.natural_point`)."""
        obstacle = self.natural_gradient_obstacle()
        if obstacle is not None:
            raise ValueError(obstacle)
        with torch.no_grad():
            m0 = self.mean[0].detach().clone()
            L0 = self.scale()[0].detach().clone()
        S = L0 * L0 if self.diagonal else L0 @ L0.transpose(-1, -2)
        return NaturalPoint(m0.clone().requires_grad_(True), S.requires_grad_(True), m0, L0, self.diagonal)

    def natural_marginals(self, point: NaturalPoint, prior: InducingPrior, Kzx: Tensor, kxx: Tensor) -> LatentMarginals:
        """b_nj - mu_j = v_nj^T m_j and s2_nj = k_nn - v_nj^T v_nj + v_nj^T S_j v_nj (Bonilla et al. 2019,
        eq. (22)-(23), whitened) with S itself the variable (the parameters hold its factor), by
        autograd through ``prior.Lzz``; means and variances ``(1, B, Q)``."""
        V = torch.linalg.solve_triangular(prior.Lzz, Kzx, upper=False)  # (Q, M, B)
        fmean = torch.einsum("qm,qmb->qb", point.mean, V)
        S = point.cov
        quad = (S.unsqueeze(-1) * V * V).sum(-2) if point.diagonal else (V * (S @ V)).sum(-2)
        var = (kxx - (V * V).sum(-2) + quad).clamp_min(variance_floor(kxx))
        return LatentMarginals(fmean.transpose(-1, -2).unsqueeze(0), var.transpose(-1, -2).unsqueeze(0),
                               self.log_weights().detach(), V=V)

    @torch.no_grad()
    def natural_step(self, point: NaturalPoint, g_mean: Tensor, g_cov: Tensor, step: float, *,
                     fix_mean: bool = False) -> float:
        """The update of :func:`~savigp.posteriors.natural.natural_update` from ``point`` (g_cov
        symmetrized for a full S), written to ``mean`` and ``raw_scale``; returns the step taken."""
        if not point.diagonal:
            g_cov = 0.5 * (g_cov + g_cov.transpose(-1, -2))
        new_m, new_L, tau = natural_update(point.start_mean, point.start_scale, g_mean, g_cov, step, point.diagonal)
        if fix_mean:
            new_m = torch.zeros_like(new_m)
        self.set_full(new_m.unsqueeze(0), new_L.unsqueeze(0))
        return tau

    def extra_repr(self) -> str:
        return (f"K={self.num_components}, Q={self.num_latent}, M={self.num_inducing}, "
                f"covariance={'diagonal' if self.diagonal else 'full'}")


class MixtureFamily(MixturePosterior):
    """A mixture family :func:`savigp.posteriors.make_posterior` builds by name: the sizes in
    (Q, M, K) order, the covariance structure fixed by the subclass.

    Args:
        num_latent: Q.
        num_inducing: M.
        num_components: K (None: the subclass's ``default_components``).
        init_scale, mean_spread, generator, entropy, entropy_samples: as :class:`MixturePosterior`.
    """

    #: diagonal S_kj (True) or full S_kj through Cholesky factors (False)
    covariance_diagonal: bool = False
    #: K when ``num_components`` is not given
    default_components: int = 1

    def __init__(self, num_latent: int, num_inducing: int, num_components: int | None = None,
                 init_scale: float = 1.0, mean_spread: float = 1.0, generator: torch.Generator | None = None,
                 entropy: str = DEFAULT_ENTROPY, entropy_samples: int = 64):
        K = self.default_components if num_components is None else num_components
        super().__init__(K, num_latent, num_inducing, diagonal=self.covariance_diagonal, init_scale=init_scale,
                         mean_spread=mean_spread, generator=generator, entropy=entropy,
                         entropy_samples=entropy_samples)
