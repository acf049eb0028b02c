"""The custom autograd functions of the posterior families: marginal moments with hand-written
backward passes of the whitened mixtures, ||X||^2 and the softplus-diagonal lower factor (the
diagonal mixture over u's are in :mod:`savigp.posteriors._u_space`).

Every function here hands its gradient to the kernel matrix K_zz directly (Bonilla et al. 2019, App. D-E),
so that the model's training step needs no autograd through the Cholesky factor L_zz (which
carries no graph on that path).
"""
from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F

from ..runtime import compilation
from ..linalg.triangular import lower_factor_gram, lower_of_product, lower_of_sym_times_lower, lower_mm, solve_lower, upper_t_mm

#: The full-covariance moments switch to the "middle matrix" form P = S - I (see
#: :class:`_WhitenedMoments`) when the batch has at least about this many columns per inducing point
#: and component (the exact rule is :func:`use_middle_form`).
MIDDLE_FORM_MIN_RATIO = 1.5


def use_middle_form(num_inducing: int, batch: int, num_components: int = 1) -> bool:
    """Whether to use the P = S - I form rather than the A = L^T V form (see :class:`_WhitenedMoments`).

    With K = 1 the switch is at B >= MIDDLE_FORM_MIN_RATIO * M. A flop-count estimate (A form: (4 + 6K) M^2 B + 2.3 M^3; P form: (2 + 4K) M^2 B + (6K + 2.3) M^3,
    in units that predate the blocked products, which change both); the switch point was checked by
    timing the whole step at M = 500 and 1000, B = 1000, K = 1, where the other form was slower.
    """
    K = num_components
    return (1 + K) * batch >= 2.0 * MIDDLE_FORM_MIN_RATIO * K * num_inducing


class _WhitenedMoments(torch.autograd.Function):
    """Means and variance terms of the whitened marginals with a hand-written backward pass.

    Per latent function j and component k, with V = L_zz^-1 K_zx (one triangular solve), it
    returns, column by column (one column per data point n),

        mean_k = m_k^T v_n,        dvar_k = v_n^T (S_k - I) v_n,

    so that the marginal variance is k(x_n, x_n) + dvar_k (Bonilla et al. 2019, eq. (22)-(23), whitened).
    Two algebraically equal forms, chosen by flop count (``use_middle_form``):

    * A form (B small): A_k = L_k^T V, dvar_k = ||A_k||^2 - ||V||^2;
    * P form (B large): P_k = S_k - I (an M x M matrix) and R_k = L^-T P_k (an M x M solve);
      with RV_k = R_k V, dvar_k = sum(K_zx * RV_k) (since K_zx = L V). The backward pass then
      needs a single M x B x M product per component, dP_k = V diag(g_k) V^T, and
      dF/dK_zx = L^-T Gbar = 2 sum_k RV_k diag(g_k) + L^-T m g_mean^T with no solve over the batch
      (K solves of M^3 for the R_k replace one of M^2 B: fewer flops whenever B > K M).

    The adjoint of K_zz through its Cholesky factor (Bonilla et al. 2019, App. D-E, whitened) is

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
            dvar = compilation.call(_colsum_of_product, Kzx, A)
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
        K = mean.shape[0]
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
                d_kzx = compilation.call(_middle_kzx_adjoint, RV, g_var, Lm, gmT)
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
        if not ctx.middle:  # one kernel shared by the Q latent functions: the adjoints are linear in Gbar
            Gbar = shared_prior_sum(Gbar, L)
        if need_kzx and d_kzx is None:
            d_kzx = solve_lower(L, Gbar, transpose=True)
        if need_kzz:
            if X is None:
                X = lower_of_product(Gbar, V, upper="any").neg_()  # -(Gbar V^T), lower triangle
            Phi = shared_prior_sum(X, L).tril_()  # X is a temporary of this pass
            Phi.diagonal(dim1=-2, dim2=-1).mul_(0.5)
            # -L^-T Phi(Gbar V^T) L^-1. Its symmetric part is the gradient; K_zz = k(Z, Z) is
            # symmetric in its two arguments, so the kernel's backward pass gives the same result for
            # it and for this unsymmetrized matrix (which saves two passes over M x M)
            d_kzz = torch.linalg.solve_triangular(L, solve_lower(L, Phi, transpose=True), upper=False, left=False)
            # LAPACK leaves it column-major; its transpose has the same symmetric part (the same
            # argument) and is row-major, so the kernel's backward pass (an elementwise product with
            # the row-major K_zz) does not walk it across the rows (docs/performance.md, "Measurements
            # moved from the posteriors' docstrings")
            if d_kzz.mT.is_contiguous() and not d_kzz.is_contiguous():
                d_kzz = d_kzz.mT
            jitter_adjoint(d_kzz, jitter_rel)
        if d_kzx is not None:
            d_kzx = shared_prior_sum(d_kzx, L)
        return d_kzz, d_kzx, d_mean, d_scale, None, None, None, None


def shared_prior_sum(X: Tensor, L: Tensor) -> Tensor:
    """``X (Q, ...)`` summed over the latent functions to ``(1, ...)`` when the prior factor ``L`` is
    ``(1, M, M)`` (one kernel and one set of inducing inputs shared by all Q latent functions, so that
    K_zz and K_zx are ``(1, ., .)`` and every adjoint that is linear in X is wanted summed over Q):
    the solves and products that follow then run once instead of Q times. Else X itself."""
    if L.shape[-3] == 1 and X.dim() >= 3 and X.shape[-3] > 1:
        return X.sum(-3, keepdim=True)
    return X


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


def jitter_adjoint(d_kzz: Tensor, jitter_rel: Tensor | None) -> Tensor:
    """Gradient of K_zz from that of J = K_zz + rel * mean(diag K_zz) I (the matrix factorized), in place."""
    if jitter_rel is not None:
        tr = d_kzz.diagonal(dim1=-2, dim2=-1).sum(-1)  # (Q,)
        d_kzz.diagonal(dim1=-2, dim2=-1).add_((jitter_rel * tr / d_kzz.shape[-1]).unsqueeze(-1))
    return d_kzz


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


#: the floor the mixture families add to their softplus scales (``softplus(raw) + SCALE_FLOOR``)
SCALE_FLOOR = 1e-10


class _LowerFactor(torch.autograd.Function):
    """tril(raw, -1) + diag(softplus(diag(raw)) + SCALE_FLOOR): one pass over M x M each way."""

    @staticmethod
    def forward(ctx, raw: Tensor) -> Tensor:
        out = raw.clone().tril_(-1)  # (in place rather than torch.tril's out-of-place kernel: docs/performance.md)
        out.diagonal(dim1=-2, dim2=-1).copy_(F.softplus(raw.diagonal(dim1=-2, dim2=-1)) + SCALE_FLOOR)
        ctx.save_for_backward(raw)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        (raw,) = ctx.saved_tensors
        out = grad.clone().tril_(-1)
        out.diagonal(dim1=-2, dim2=-1).copy_(grad.diagonal(dim1=-2, dim2=-1)
                                             * torch.sigmoid(raw.diagonal(dim1=-2, dim2=-1)))
        return out


def squared_norm(X: Tensor, ndim: int) -> Tensor:
    """||X||^2 over the last ``ndim`` axes, with a one-pass backward (:class:`_SquaredNorm`)."""
    return _SquaredNorm.apply(X, ndim)


def lower_factor(raw: Tensor) -> Tensor:
    """The lower factor tril(raw, -1) + diag(softplus(diag raw) + SCALE_FLOOR), ``(..., M, M)``."""
    return _LowerFactor.apply(raw)
