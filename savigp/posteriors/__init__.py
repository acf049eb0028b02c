"""Mixture-of-Gaussians variational posteriors over the inducing variables (seed 004, §4.3, §6.2).

    q(u) = sum_k pi_k prod_j N(u_j; m_kj, S_kj),     pi = softmax(logits),   k = 1..K, j = 1..Q

Parameterization (whitened). Each u_j is written u_j = mu_j 1 + L_zz^j v_j with
K_zz^j = L_zz^j (L_zz^j)^T, and the posterior is held over v:
q(v) = sum_k pi_k prod_j N(v_kj; m_kj, S_kj), prior p(v_j) = N(0, I). This is a change of
variables only: q(u) is the same mixture with means mu_j + L_zz m_kj and covariances
L_zz S_kj L_zz^T, and every term of the ELBO (eq. 17) has the same value -- the log|L_zz| terms
of the entropy (eq. 18) and the cross-entropy (eq. 19) cancel -- while the marginals need one
triangular solve per latent function instead of two, and the optimization is better conditioned.
:meth:`entropy` and :meth:`cross_entropy` return the terms in v; the model adds
``sum_j log|L_zz^j|`` to report them in the paper's u-space convention.

Shapes: means m ``(K, Q, M)``; full covariances through lower Cholesky factors ``(K, Q, M, M)``
with a positive diagonal (softplus); diagonal covariances ``(K, Q, M)``; logits ``(K,)``.

* :class:`FullGaussian` -- K = 1, full S (the paper's "fg"), exact entropy.
* :class:`UDiagonalMixture` -- K >= 1 Gaussians diagonal over u (the paper's "mog1", "mog2"),
  in prior-conditioned coordinates m = L_zz w, s = d / sqrt(diag K_zz^-1) (``posterior="diag"``).

Mixtures (K > 1) start with their means spread antithetically around the prior mean
(:func:`spread_means`), and their entropy is eq. (18) (``entropy="bound"``) or a reparameterized
Monte Carlo estimate of the exact entropy (``entropy="mc"``).
* :class:`DiagonalMixture` -- K >= 1 Gaussians diagonal in whitened coordinates
  (``posterior="diag-whitened"``; full covariances over u, faster steps).
* :class:`FullMixture` -- K > 1 full Gaussians (eq. (8) in its general form).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .. import _compile
from .._triangular import lower_factor_gram, lower_of_product, lower_of_sym_times_lower, lower_mm, solve_lower, upper_t_mm
from ..constraints import LOG_2PI, inverse_softplus


#: The full-covariance moments switch to the "middle matrix" form P = S - I (see
#: :class:`_WhitenedMoments`) when the batch has at least about this many columns per inducing point
#: and component (the exact rule is :func:`use_middle_form`).
MIDDLE_FORM_MIN_RATIO = 1.5


def use_middle_form(num_inducing: int, batch: int, num_components: int = 1) -> bool:
    """Whether to use the P = S - I form rather than the A = L^T V form (see :class:`_WhitenedMoments`).

    A flop-count estimate (A form: (4 + 6K) M^2 B + 2.3 M^3; P form: (2 + 4K) M^2 B + (6K + 2.3) M^3,
    in units that predate the blocked products, which change both); the switch point was checked by
    timing the whole step at M = 500 and 1000, B = 1000, K = 1, where the other form was slower.
    """
    K = num_components
    return (2 + 2 * K) * batch >= MIDDLE_FORM_MIN_RATIO / 1.5 * 6 * K * num_inducing


class _WhitenedMoments(torch.autograd.Function):
    """Means and variance terms of the whitened marginals with a hand-written backward pass.

    Per latent function j and component k, with V = L_zz^-1 K_zx (one triangular solve), it
    returns, column by column (one column per data point n),

        mean_k = m_k^T v_n,        dvar_k = v_n^T (S_k - I) v_n,

    so that the marginal variance is k(x_n, x_n) + dvar_k (seed 004, eq. (22)-(23), whitened).
    Two algebraically equal forms, chosen by flop count (``use_middle_form``):

    * A form (B small): A_k = L_k^T V, dvar_k = ||A_k||^2 - ||V||^2;
    * P form (B large): P_k = S_k - I (an M x M matrix) and R_k = L^-T P_k (an M x M solve);
      with RV_k = R_k V, dvar_k = sum(K_zx * RV_k) (since K_zx = L V). The backward pass then
      needs a single M x B x M product per component, dP_k = V diag(g_k) V^T, and
      dF/dK_zx = L^-T Gbar = 2 sum_k RV_k diag(g_k) + L^-T m g_mean^T with no solve over the batch
      (K solves of M^3 for the R_k replace one of M^2 B: fewer flops whenever B > K M).

    The adjoint of K_zz through its Cholesky factor (seed 004, App. D-E, whitened) is

        dF/dK_zz = -sym(L^-T Phi(Gbar V^T) L^-1),      Phi = lower triangle with halved diagonal,

    with Gbar = dF/dV (in the P form Gbar V^T = sum_k 2 P_k dP_k + m_k (V g_mean_k)^T costs only
    M^3), instead of autograd's tril(L^-T Gbar V^T) plus the generic Cholesky backward; and
    dF/dK_zx = L^-T Gbar (one triangular solve). ``L`` carries no graph: K_zz receives the gradient.
    """

    @staticmethod
    def forward(ctx, Kzz, Kzx, mean, scale, L, diagonal: bool, middle: bool, jitter_rel):
        V = solve_lower(L, Kzx)  # (Q, M, B)
        fmean = torch.matmul(mean.unsqueeze(-2), V).squeeze(-2)  # (K, Q, B)
        A = P = None
        if diagonal:
            s2m1 = scale * scale - 1.0  # (K, Q, M)
            A = V * V  # kept for the backward pass
            dvar = torch.matmul(s2m1.unsqueeze(-2), A).squeeze(-2)  # (K, Q, B)
        elif middle:
            P = lower_factor_gram(scale)  # S_k = L_k L_k^T, (K, Q, M, M)
            P.diagonal(dim1=-2, dim2=-1).sub_(1.0)
            # R_k = L^-T P_k (an M x M solve); A = R_k V = L^-T W_k, so that
            # dvar = v^T P v = (L v)^T L^-T P v = sum(K_zx * R V) and, in the backward pass,
            # dF/dK_zx = L^-T Gbar = 2 (R V) g + (L^-T m) g_mean^T needs no solve over the batch
            R = solve_lower(L, P, transpose=True)
            A = torch.matmul(R, V)  # (K, Q, M, B)
            dvar = _compile.call(_colsum_of_product, Kzx, A)
        else:
            A = upper_t_mm(scale, V.unsqueeze(0).expand(scale.shape[0], *V.shape))  # L_k^T V, (K, Q, M, B)
            dvar = (A * A).sum(-2) - (V * V).sum(-2)
        ctx.diagonal, ctx.middle = diagonal, middle
        ctx.save_for_backward(V, A, P, L, mean, scale, jitter_rel)
        return fmean, dvar

    @staticmethod
    def backward(ctx, g_mean, g_var):
        V, A, P, L, mean, scale, jitter_rel = ctx.saved_tensors
        need_kzz, need_kzx, need_mean, need_scale = ctx.needs_input_grad[:4]
        K, Q = mean.shape[0], mean.shape[1]
        d_kzz = d_kzx = d_mean = d_scale = None
        gT = g_var.transpose(0, 1)  # (Q, K, B)
        gmT = g_mean.transpose(0, 1)  # (Q, K, B)
        mT = mean.permute(1, 2, 0)  # (Q, M, K)
        X = None  # Gbar V^T when it comes cheaper than a product over B
        if need_mean or (need_kzz and ctx.middle):
            d_meanT = torch.matmul(V, gmT.transpose(-1, -2))  # (Q, M, K) = V g_mean^T
            if need_mean:
                d_mean = d_meanT.permute(2, 0, 1)  # (K, Q, M)
        if ctx.diagonal:
            VV = A
            s2 = scale * scale
            # dF/dV = 2 V sum_k (s2_k - 1) g_k + sum_k m_k g_mean_k^T
            w = torch.matmul((2.0 * (s2 - 1.0)).permute(1, 2, 0), gT)  # (Q, M, B)
            Gbar = w.mul_(V).baddbmm_(mT, gmT)
            if need_scale:
                ds2 = torch.matmul(gT, VV.transpose(-1, -2)).transpose(0, 1)  # (K, Q, M)
                d_scale = 2.0 * scale * ds2
        elif ctx.middle:
            RV = A  # L^-T W_k
            Vg = V.unsqueeze(0) * (2.0 * g_var).unsqueeze(-2)  # (K, Q, M, B)
            dP2 = lower_of_product(Vg, V.unsqueeze(0), symmetric=True)  # (K, Q, M, M) = 2 dP_k = 2 V diag(g_k) V^T
            del Vg
            if need_scale:
                # d/dL_k tr(dP_k L_k L_k^T) = 2 dP_k L_k (dP_k symmetric), lower triangle
                d_scale = lower_of_sym_times_lower(dP2, scale)
            if need_kzx:
                # L^-T Gbar with Gbar = 2 sum_k W_k g_k + sum_k m_k g_mean_k^T
                Lm = solve_lower(L, mT, transpose=True)  # L^-T m, (Q, M, K)
                d_kzx = _compile.call(_middle_kzx_adjoint, RV, g_var, Lm, gmT)
            if need_kzz:
                # only the lower triangle of Gbar V^T = sum_k 2 P_k dP_k + m_k (V g_mean_k)^T is used
                X = lower_of_product(P, dP2, upper="any")
                X = X.sum(0) if K > 1 else X[0]
                # negated: the K_zz adjoint below is -L^-T Phi(Gbar V^T) L^-1
                X = X.baddbmm_(mT, d_meanT.transpose(-1, -2), alpha=-1.0, beta=-1.0)
        else:
            dA = A * (2.0 * g_var).unsqueeze(-2)  # (K, Q, M, B)
            if need_scale:
                d_scale = lower_of_product(V.unsqueeze(0), dA)  # tril(V dA_k^T), (K, Q, M, M)
            LdA = lower_mm(scale, dA)  # L_k dA_k, (K, Q, M, B)
            LdA = LdA.sum(0) if K > 1 else LdA[0]
            LdA.addcmul_(V, g_var.sum(0).unsqueeze(-2), value=-2.0)
            Gbar = LdA.baddbmm_(mT, gmT)
        if need_kzx and d_kzx is None:
            d_kzx = solve_lower(L, Gbar, transpose=True)
        if need_kzz:
            if X is None:
                X = lower_of_product(Gbar, V, upper="any").neg_()  # -(Gbar V^T), lower triangle
            Phi = X.tril_()  # X is a temporary of this pass
            Phi.diagonal(dim1=-2, dim2=-1).mul_(0.5)
            # -L^-T Phi(Gbar V^T) L^-1. Its symmetric part is the gradient; K_zz = k(Z, Z) is
            # symmetric in its two arguments, so the kernel's backward pass gives the same result for
            # it and for this unsymmetrized matrix (which saves two passes over M x M)
            d_kzz = torch.linalg.solve_triangular(L, solve_lower(L, Phi, transpose=True), upper=False, left=False)
            _jitter_adjoint(d_kzz, jitter_rel)
        return d_kzz, d_kzx, d_mean, d_scale, None, None, None, None


def _colsum_of_product(X: Tensor, Y: Tensor) -> Tensor:
    """sum over rows of X * Y: ``(..., M, B)`` -> ``(..., B)`` (one fused loop when compiled)."""
    return (X * Y).sum(-2)


def _middle_kzx_adjoint(RV: Tensor, g_var: Tensor, Lm: Tensor, gmT: Tensor) -> Tensor:
    """2 sum_k RV_k diag(g_k) + sum_k (L^-T m_k) g_mean_k^T, ``(Q, M, B)``, for RV ``(K, Q, M, B)``,
    g_var ``(K, Q, B)``, Lm ``(Q, M, K)`` and gmT ``(Q, K, B)`` (one fused loop when compiled)."""
    RVg = (RV * g_var.unsqueeze(-2)).sum(0) if RV.shape[0] > 1 else RV[0] * g_var[0].unsqueeze(-2)
    return RVg.baddbmm_(Lm, gmT, alpha=1.0, beta=2.0)


def whitened_moments(Kzz, Kzx: Tensor, L: Tensor, mean: Tensor, scale: Tensor, diagonal: bool,
                     jitter_rel: Tensor | None = None, middle: bool | None = None) -> tuple[Tensor, Tensor]:
    """``(m_k^T v_n, v_n^T (S_k - I) v_n)`` for V = L^-1 K_zx, columnwise; see :class:`_WhitenedMoments`.

    Args:
        Kzz: ``(Q, M, M)`` kernel matrix whose (jittered) Cholesky factor is ``L``; it only receives
            the gradient (None: no gradient flows to the kernel through L).
        Kzx: ``(Q, M, B)``; L: ``(Q, M, M)`` lower Cholesky factor without autograd graph.
        mean: ``(K, Q, M)``; scale: ``(K, Q, M, M)`` lower factors or ``(K, Q, M)`` standard deviations.
        jitter_rel: ``(Q,)`` relative jitter that was added to K_zz's diagonal (for its gradient).
        middle: force the P form (True) or the A form (False); default by flop count.

    Returns:
        means ``(K, Q, B)`` and variance corrections ``(K, Q, B)``.
    """
    if Kzz is None:
        Kzz = L.new_zeros(())
    if middle is None:
        middle = use_middle_form(Kzx.shape[-2], Kzx.shape[-1], mean.shape[0])
    return _WhitenedMoments.apply(Kzz, Kzx, mean, scale, L.detach(), bool(diagonal), bool(middle) and not diagonal,
                                  jitter_rel)


def _jitter_adjoint(d_kzz: Tensor, jitter_rel: Tensor | None) -> Tensor:
    """Gradient of K_zz from that of J = K_zz + rel * mean(diag K_zz) I (the matrix factorized), in place."""
    if jitter_rel is not None:
        tr = d_kzz.diagonal(dim1=-2, dim2=-1).sum(-1)  # (Q,)
        d_kzz.diagonal(dim1=-2, dim2=-1).add_((jitter_rel * tr / d_kzz.shape[-1]).unsqueeze(-1))
    return d_kzz


class _USpaceMoments(torch.autograd.Function):
    """The u-space diagonal mixture's marginal terms (:class:`UDiagonalMixture`) with a hand-written
    backward pass. With V = L^-1 K_zx and A = L^-T V = K_zz^-1 K_zx (two triangular solves):

        mean_k = m_k^T a_n,        dvar_k = sum_m s_km^2 a_nm^2 - v_n^T v_n.

    Every term depends on K_zz only through K_zz^-1 (not on the choice of factor), so the adjoints
    need no Cholesky backward: with Abar = dF/dA, Atil = K_zz^-1 Abar (two solves), g = dF/d(v^T v)
    and R = Atil + g A,

        dF/dK_zx = R + g A,        dF/dK_zz = -R A^T,

    against two solves, two M x B x M products and the Cholesky backward of autograd's path.
    """

    @staticmethod
    def forward(ctx, Kzz, Kzx, mean, sd, L, jitter_rel):
        V = solve_lower(L, Kzx)  # (Q, M, B)
        vv = (V * V).sum(-2)  # (Q, B)
        A = solve_lower(L, V, transpose=True)  # K_zz^-1 K_zx
        del V
        fmean = torch.matmul(mean.unsqueeze(-2), A).squeeze(-2)  # (K, Q, B)
        AA = A * A
        dvar = torch.matmul((sd * sd).unsqueeze(-2), AA).squeeze(-2).sub_(vv)  # (K, Q, B)
        ctx.save_for_backward(A, AA, L, mean, sd, jitter_rel)
        return fmean, dvar

    @staticmethod
    def backward(ctx, g_mean, g_var):
        A, AA, L, mean, sd, jitter_rel = ctx.saved_tensors
        need_kzz, need_kzx, need_mean, need_sd = ctx.needs_input_grad[:4]
        d_kzz = d_kzx = d_mean = d_sd = None
        gT, gmT = g_var.transpose(0, 1), g_mean.transpose(0, 1)  # (Q, K, B)
        if need_mean:
            d_mean = torch.matmul(A, gmT.transpose(-1, -2)).permute(2, 0, 1)  # (K, Q, M)
        if need_sd:
            d_sd = 2.0 * sd * torch.matmul(gT, AA.transpose(-1, -2)).transpose(0, 1)  # (K, Q, M)
        if need_kzz or need_kzx:
            s2 = sd * sd
            # Abar = 2 A sum_k s2_k g_k + sum_k m_k g_mean_k^T
            Abar = torch.matmul((2.0 * s2).permute(1, 2, 0), gT).mul_(A).baddbmm_(mean.permute(1, 2, 0), gmT)
            R = solve_lower(L, solve_lower(L, Abar), transpose=True)  # K_zz^-1 Abar
            del Abar
            g_vv = -g_var.sum(0).unsqueeze(-2)  # (Q, 1, B): dvar_k carries -v^T v for every k
            R.addcmul_(A, g_vv)
            if need_kzz:
                d_kzz = _jitter_adjoint(torch.matmul(R, A.transpose(-1, -2)).neg_(), jitter_rel)
            if need_kzx:
                d_kzx = R.addcmul_(A, g_vv)
        return d_kzz, d_kzx, d_mean, d_sd, None, None


class _SquaredNorm(torch.autograd.Function):
    """||X||^2 over the last ``ndim`` axes: one pass forward and one back (2 g X), where autograd's
    ``vector_norm(X).square()`` takes three passes back (divide, mask the zero norm, multiply)."""

    @staticmethod
    def forward(ctx, X: Tensor, ndim: int) -> Tensor:
        ctx.save_for_backward(X)
        ctx.ndim = ndim
        return torch.linalg.vector_norm(X, dim=tuple(range(-ndim, 0))).square()

    @staticmethod
    def backward(ctx, grad: Tensor):
        (X,) = ctx.saved_tensors
        return X * (2.0 * grad).reshape(grad.shape + (1,) * ctx.ndim), None


class _LowerFactor(torch.autograd.Function):
    """tril(raw, -1) + diag(softplus(diag(raw)) + 1e-10): one pass over M x M each way."""

    @staticmethod
    def forward(ctx, raw: Tensor) -> Tensor:
        out = torch.tril(raw, -1)
        out.diagonal(dim1=-2, dim2=-1).copy_(F.softplus(raw.diagonal(dim1=-2, dim2=-1)) + 1e-10)
        ctx.save_for_backward(raw)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        (raw,) = ctx.saved_tensors
        out = torch.tril(grad, -1)
        out.diagonal(dim1=-2, dim2=-1).copy_(grad.diagonal(dim1=-2, dim2=-1)
                                             * torch.sigmoid(raw.diagonal(dim1=-2, dim2=-1)))
        return out


ENTROPY_ESTIMATES = ("bound", "mc")


def spread_means(K: int, Q: int, M: int, spread: float = 1.0, generator: torch.Generator | None = None) -> Tensor:
    """Initial component means ``(K, Q, M)`` that break the symmetry of a K-component mixture.

    K = 1: zeros (the prior mean). K > 1: the vertices of a regular simplex centred on zero in a
    random (K - 1)-dimensional subspace of the Q M coordinates (K = 2: +z and -z), each at
    distance spread * sqrt(Q M) from zero (spread^2 per coordinate on average). In the
    coordinates the means are held in (whitened v, or w of the diagonal mixture over u) the initial
    q has unit spread, so with ``spread = 1`` each mean lies where a typical draw of the initial q
    (the prior) lies, the mixture's mean stays the prior mean, and the components start as far
    apart as draws of q are -- in different basins of a multimodal posterior whenever the basins
    lie along the prior's spread, instead of all at one point.
    """
    if K == 1:
        return torch.zeros(1, Q, M, dtype=torch.float64)
    D = Q * M
    if D >= K:  # random orthonormal directions U (D, K); vertex k = U (e_k - 1/K): centred, equidistant
        U, _ = torch.linalg.qr(torch.randn(D, K, dtype=torch.float64, generator=generator))
        coords = (torch.eye(K, dtype=torch.float64) - 1.0 / K) @ U.T  # (K, D)
    else:  # fewer coordinates than components: centred random points
        coords = torch.randn(K, D, dtype=torch.float64, generator=generator)
        coords = coords - coords.mean(0, keepdim=True)
    coords = coords / coords.norm(dim=1, keepdim=True).clamp_min(1e-300) * math.sqrt(D)
    return (spread * coords).reshape(K, Q, M)


def _entropy_bound(mean: Tensor, L: Tensor, log_pi: Tensor, diagonal: bool) -> Tensor:
    """Eq. (18) of seed 004 for means ``(K, Q, M)`` and factors ``(K, Q, M, M)`` / sds ``(K, Q, M)``."""
    K, M = mean.shape[0], mean.shape[-1]
    if diagonal:
        diff = mean.unsqueeze(1) - mean.unsqueeze(0)  # (K, K, Q, M): m_k - m_l
        var = L * L
        C = var.unsqueeze(1) + var.unsqueeze(0)  # (K, K, Q, M)
        log_n = -0.5 * (LOG_2PI + torch.log(C) + diff * diff / C).sum((-1, -2))
    else:
        # l = k: S_k + S_k = 2 L_k L_k^T and m_k - m_k = 0, in closed form; only the K (K - 1) / 2
        # pairs k < l need a Cholesky factorization (the matrix of log N is symmetric)
        logdet_self = M * math.log(2.0) + 2.0 * torch.log(L.diagonal(dim1=-2, dim2=-1)).sum(-1)  # (K, Q)
        log_n = torch.diag_embed(-0.5 * (M * LOG_2PI + logdet_self).sum(-1))  # (K, K)
        k, l = torch.triu_indices(K, K, offset=1, device=L.device)
        S = lower_factor_gram(L)  # (K, Q, M, M)
        Lc = torch.linalg.cholesky(S[k] + S[l])  # (pairs, Q, M, M)
        d = (mean[k] - mean[l]).unsqueeze(-1)  # (pairs, Q, M, 1)
        alpha = torch.linalg.solve_triangular(Lc, d, upper=False).squeeze(-1)
        logdet = 2.0 * torch.log(Lc.diagonal(dim1=-2, dim2=-1)).sum(-1)
        off = -0.5 * (M * LOG_2PI + logdet + (alpha * alpha).sum(-1)).sum(-1)  # (pairs,)
        log_n = log_n.index_put((k, l), off).index_put((l, k), off)
    inner = torch.logsumexp(log_pi.unsqueeze(0) + log_n, dim=1)  # (K,)  over l
    return -(log_pi.exp() * inner).sum()


def _entropy_monte_carlo(mean: Tensor, L: Tensor, log_pi: Tensor, diagonal: bool, S: int,
                         generator: torch.Generator | None) -> Tensor:
    """The reparameterized Monte Carlo entropy of :meth:`MixturePosterior._mixture_entropy`."""
    K, Q, M = mean.shape
    eps = torch.randn((S, K, Q, M), dtype=torch.float64, generator=generator).to(mean)
    if diagonal:
        v = mean + L * eps  # (S, K, Q, M): draws of component k
        z = (v.unsqueeze(2) - mean) / L  # (S, K, K_l, Q, M), standardized by component l
        log_det = torch.log(L).sum((-1, -2))  # (K_l,)
    else:
        v = mean + torch.matmul(L, eps.unsqueeze(-1)).squeeze(-1)  # (S, K, Q, M)
        diff = (v.unsqueeze(2) - mean).permute(2, 3, 4, 0, 1).reshape(K, Q, M, S * K)  # (K_l, Q, M, S K)
        z = torch.linalg.solve_triangular(L, diff, upper=False)  # L_l^-1 (v - m_l)
        z = z.reshape(K, Q, M, S, K).permute(3, 4, 0, 1, 2)  # (S, K, K_l, Q, M)
        log_det = torch.log(L.diagonal(dim1=-2, dim2=-1)).sum((-1, -2))  # (K_l,)
    # a draw's own component: L_k^-1 (v_ks - m_k) = eps_ks exactly (not the round trip through a
    # solve, whose error grows with the condition number of L_k and could make log q(v_ks) fall
    # below log pi_k + log N_k(v_ks), the bound every draw must respect)
    own = torch.eye(K, dtype=torch.bool, device=mean.device)[None, :, :, None, None]
    z = torch.where(own, eps.unsqueeze(2), z)
    log_n = -0.5 * (Q * M * LOG_2PI + (z * z).sum((-1, -2))) - log_det  # (S, K, K_l)
    log_q = torch.logsumexp(log_pi + log_n, dim=-1)  # (S, K)
    return -(log_pi.exp() * log_q.mean(0)).sum()


class MixturePosterior(nn.Module):
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
        entropy: the entropy term for K > 1: ``"bound"`` (eq. (18), the paper's) or ``"mc"`` (a
            reparameterized Monte Carlo estimate of the exact entropy; see :meth:`entropy`).
        entropy_samples: S for ``entropy="mc"``: draws per component and evaluation.
    """

    #: True: the parameters describe q(v), v = L_zz^-1 (u - mu) (the default, see the module docstring).
    #: False: they describe q(u - mu) directly (:class:`UDiagonalMixture`, the paper's "mog").
    whitened: bool = True
    #: the name :func:`make_posterior` builds this class from
    kind: str = "full"

    def __init__(self, num_components: int, num_latent: int, num_inducing: int, diagonal: bool,
                 init_scale: float = 1.0, mean_spread: float = 1.0, generator: torch.Generator | None = None,
                 entropy: str = "bound", entropy_samples: int = 64):
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
        #: ``"bound"`` (eq. (18)) or ``"mc"`` (reparameterized Monte Carlo), for K > 1; see :meth:`entropy`
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
    def weights(self) -> Tensor:
        """Mixture weights pi, shape ``(K,)``."""
        return torch.softmax(self.logits, dim=0)

    def log_weights(self) -> Tensor:
        """log pi, shape ``(K,)``."""
        return torch.log_softmax(self.logits, dim=0)

    def scale(self) -> Tensor:
        """Cholesky factors L_kj ``(K, Q, M, M)`` (full) or standard deviations ``(K, Q, M)`` (diagonal)."""
        if self.diagonal:
            return F.softplus(self.raw_scale) + 1e-10
        return _LowerFactor.apply(self.raw_scale)

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

    # ------------------------------------------------------------------ marginals
    def marginal_quadratic(self, V: Tensor) -> Tensor:
        """v_n^T S_kj v_n for every column of V (seed 004, eq. (23), whitened).

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
        K > 1, ``entropy_estimate="bound"``: the lower bound of seed 004, eq. (18),
        -sum_k pi_k log sum_l pi_l N(m_k; m_l, S_k + S_l), with the Gaussians over all Q*M
        inducing variables (block diagonal over the latent functions). K > 1, ``"mc"``: see
        :meth:`_mixture_entropy`.

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

        ``"bound"``: eq. (18) of seed 004, -sum_k pi_k log sum_l pi_l N(m_k; m_l, S_k + S_l), by
        Jensen's inequality a lower bound. It is D/2 (1 - log 2) = 0.153 D nats (D = Q M) below the
        entropy both for coinciding components and for well-separated ones (each term then
        compares N(m_k; m_k, 2 S_k) with the Gaussian's own entropy), so against K = 1 with its
        exact entropy it costs a mixture 0.153 D nats of ELBO. Deterministic; cost K^2 / 2
        factorizations of M x M per latent function (full) or O(K^2 Q M) (diagonal).

        ``"mc"``: H = -sum_k pi_k E_{q_k}[log q(v)], each expectation from S reparameterized draws
        v_ks = m_k + L_k eps_ks (eps standard normal, ``entropy_samples`` = S per component):

            H_hat = -sum_k pi_k (1/S) sum_s logsumexp_l [log pi_l + log N(v_ks; m_l, S_l)].

        Unbiased for H, and its gradient (through v_ks, the densities and pi_k) unbiased for H's
        gradient; q is differentiable, so no score function is needed. Its standard deviation is
        O(sd(log q) / sqrt(S K)): zero for coinciding components, about sqrt(D / 2) / sqrt(S K) per
        overlap-free component (log q of a Gaussian in D dimensions has variance D / 2), e.g.
        0.125 nats at D = 4, S = 64, K = 2 (measured: 0.122). Cost: K^2 S Q triangular solves of size M (full) or
        O(K^2 S Q M) elementwise (diagonal), plus the draws.
        """
        if self.entropy_estimate == "bound":
            return _entropy_bound(mean, L, self.log_weights(), self.diagonal)
        return _entropy_monte_carlo(mean, L, self.log_weights(), self.diagonal, self.entropy_samples, generator)

    def cross_entropy(self, scale: Tensor | None = None) -> Tensor:
        """Cross-entropy term L_cross = E_q[log p(v)] with p(v_j) = N(0, I) (seed 004, eq. (19), whitened):

            -1/2 sum_k pi_k sum_j [M log 2 pi + m_kj^T m_kj + tr S_kj].

        Args:
            scale: optional precomputed :meth:`scale` (reused within one ELBO evaluation).
        """
        M = self.num_inducing
        L = self.scale() if scale is None else scale
        trace = _SquaredNorm.apply(L, 1 if self.diagonal else 2)  # tr S_kj = ||L_kj||^2, (K, Q)
        per = M * LOG_2PI + (self.mean * self.mean).sum(-1) + trace  # (K, Q)
        return -0.5 * (self.weights() * per.sum(-1)).sum()

    def extra_repr(self) -> str:
        return (f"K={self.num_components}, Q={self.num_latent}, M={self.num_inducing}, "
                f"covariance={'diagonal' if self.diagonal else 'full'}")


class FullGaussian(MixturePosterior):
    """K = 1 Gaussian with full covariances S_j = L_j L_j^T (the paper's "fg")."""

    kind = "full"

    def __init__(self, num_latent: int, num_inducing: int, init_scale: float = 1.0, **_):
        super().__init__(1, num_latent, num_inducing, diagonal=False, init_scale=init_scale)


class DiagonalMixture(MixturePosterior):
    """K >= 1 components with diagonal covariances *in whitened coordinates*: q(v) diagonal, so
    q(u) has covariances L_zz S_kj L_zz^T (full). Cheaper steps than :class:`UDiagonalMixture`
    (the fused whitened path) but not the paper's "mog" family; ``posterior="diag-whitened"``."""

    kind = "diag-whitened"

    def __init__(self, num_latent: int, num_inducing: int, num_components: int = 1, init_scale: float = 1.0,
                 mean_spread: float = 1.0, generator: torch.Generator | None = None, entropy: str = "bound",
                 entropy_samples: int = 64):
        super().__init__(num_components, num_latent, num_inducing, diagonal=True, init_scale=init_scale,
                         mean_spread=mean_spread, generator=generator, entropy=entropy,
                         entropy_samples=entropy_samples)


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


class UDiagonalMixture(MixturePosterior):
    """The paper's "mog1" / "mog2" (seed 004, §6.2): K >= 1 components, each a Gaussian over u with
    *diagonal* covariance, q(u) = sum_k pi_k prod_j N(u_j; mu_j 1 + m_kj, diag(s_kj^2)).
    ``posterior="diag"``.

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

    the entropy is that of the u-space Gaussians (exact for K = 1; for K > 1 eq. (18), or the
    Monte Carlo estimate of :meth:`MixturePosterior.entropy`).
    """

    whitened = False
    #: the means w are whitened coordinates of u (m = L_zz w), whatever the covariance's space: a
    #: linear functional of the mean (the hybrid head's <h, mu>_H) is taken as for a whitened family
    mean_whitened = True
    kind = "diag"
    #: value of the ``parametrization`` buffer: 1 = (w, d) above; files written before it have no
    #: buffer and hold m and s directly (converted by :meth:`convert_legacy_state`)
    PARAMETRIZATION = 1

    def __init__(self, num_latent: int, num_inducing: int, num_components: int = 1, init_scale: float = 1.0,
                 mean_spread: float = 1.0, generator: torch.Generator | None = None, entropy: str = "bound",
                 entropy_samples: int = 64):
        super().__init__(num_components, num_latent, num_inducing, diagonal=True, init_scale=init_scale,
                         mean_spread=mean_spread, generator=generator, entropy=entropy,
                         entropy_samples=entropy_samples)
        self.register_buffer("parametrization", torch.tensor(self.PARAMETRIZATION))

    # ------------------------------------------------------------------ the u-space parameters
    def u_parameters(self, Kzz: Tensor | None = None, Lzz: Tensor | None = None,
                     jitter_rel: Tensor | None = None) -> USpaceParameters:
        """m, s and the prior terms for the current prior, with autograd to the prior.

        Args:
            Kzz: ``(Q, M, M)`` with its graph, and ``jitter_rel`` ``(Q,)``: the factor is computed
                here from K_zz + rel * mean(diag K_zz) I (the matrix the model factorizes).
            Lzz: ``(Q, M, M)``: the prior factor to use instead (with or without graph).
        """
        if Lzz is None or (Kzz is not None and Kzz.dim() == 3 and Kzz.requires_grad and not Lzz.requires_grad):
            if Kzz is None or Kzz.dim() != 3:
                raise ValueError("UDiagonalMixture.u_parameters needs Kzz (Q, M, M) or the prior factor Lzz (Q, M, M)")
            J = Kzz
            if jitter_rel is not None:
                diag = Kzz.diagonal(dim1=-2, dim2=-1)
                J = Kzz + torch.diag_embed((jitter_rel.unsqueeze(-1) * diag.mean(-1, keepdim=True)).expand_as(diag))
            # float32: factorized in float64 (as the model's own factorization may have been)
            Lzz = torch.linalg.cholesky(J.to(torch.float64) if J.dtype == torch.float32 else J).to(J.dtype)
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
        if Kzz is None:
            Kzz = Lzz.new_zeros(())
        return _USpaceMoments.apply(Kzz, Kzx, scale.mean, scale.sd, Lzz.detach(), jitter_rel)

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
        """E_q[log p(u)] (seed 004, eq. (19)) in u-space, which in these coordinates is

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

    # ------------------------------------------------------------------ files written before
    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        # a state without the buffer holds the former u-space coordinates (m, s): mark it, and let
        # the model convert it once the kernel and inducing inputs are loaded
        if prefix + "raw_scale" in state_dict and prefix + "parametrization" not in state_dict:
            state_dict[prefix + "parametrization"] = torch.tensor(0)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    @torch.no_grad()
    def convert_legacy_state(self, Lzz: Tensor) -> bool:
        """If the loaded parameters are the former u-space ones (``mean`` = m, ``raw_scale`` =
        softplus^-1(s), no ``parametrization`` buffer in the file), rewrite them as (w, d) for the
        prior factor ``Lzz`` ``(Q, M, M)``: w = L_zz^-1 m, d = s / c. The same q(u). Returns
        whether it converted."""
        if int(self.parametrization) == self.PARAMETRIZATION:
            return False
        sd = self.scale()  # the file's s
        w = torch.linalg.solve_triangular(Lzz, self.mean.unsqueeze(-1), upper=False).squeeze(-1)
        d = sd * torch.exp(-self.u_parameters(Lzz=Lzz).log_cond_sd)  # s / c
        self.mean.copy_(w)
        self.raw_scale.copy_(inverse_softplus(d.clamp_min(1e-12)))
        self.parametrization.fill_(self.PARAMETRIZATION)
        return True


class FullMixture(MixturePosterior):
    """K > 1 components with full covariances (seed 004, eq. (8))."""

    kind = "full"

    def __init__(self, num_latent: int, num_inducing: int, num_components: int = 2, init_scale: float = 1.0,
                 mean_spread: float = 1.0, generator: torch.Generator | None = None, entropy: str = "bound",
                 entropy_samples: int = 64):
        super().__init__(num_components, num_latent, num_inducing, diagonal=False, init_scale=init_scale,
                         mean_spread=mean_spread, generator=generator, entropy=entropy,
                         entropy_samples=entropy_samples)


POSTERIOR_KINDS = ("full", "diag", "diag-whitened", "joint")


def make_posterior(kind: str, num_latent: int, num_inducing: int, num_components: int = 1,
                   generator: torch.Generator | None = None, entropy: str = "bound",
                   entropy_samples: int = 64) -> MixturePosterior:
    """Build a posterior by name.

    * ``"full"`` (or ``"fg"``): full covariances, whitened; K = 1 is :class:`FullGaussian`.
    * ``"diag"`` (or ``"mog"``): the paper's diagonal mixture over u, :class:`UDiagonalMixture`.
    * ``"diag-whitened"``: diagonal in whitened coordinates, :class:`DiagonalMixture`.
    * ``"joint"``: one Gaussian over all Q * M whitened values, coupled across the latent
      functions (:class:`savigp.joint_posterior.JointGaussian`; K = 1).

    ``entropy`` (``"bound"``, eq. (18), or ``"mc"``) and ``entropy_samples`` choose the entropy
    term of mixtures with K > 1 (see :meth:`MixturePosterior.entropy`).
    """
    options = dict(generator=generator, entropy=entropy, entropy_samples=entropy_samples)
    if kind in ("full", "fg"):
        if num_components == 1:
            return FullGaussian(num_latent, num_inducing)
        return FullMixture(num_latent, num_inducing, num_components, **options)
    if kind in ("diag", "diagonal", "mog"):
        return UDiagonalMixture(num_latent, num_inducing, num_components, **options)
    if kind == "diag-whitened":
        return DiagonalMixture(num_latent, num_inducing, num_components, **options)
    if kind == "joint":
        from ..joint_posterior import JointGaussian

        if num_components != 1:
            raise ValueError(f"posterior='joint' has one component, got num_components={num_components}")
        return JointGaussian(num_latent, num_inducing)
    raise ValueError(f"posterior must be one of {POSTERIOR_KINDS}, got {kind!r}")
