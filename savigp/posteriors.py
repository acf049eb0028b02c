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
  held in u-space (``posterior="diag"``).
* :class:`DiagonalMixture` -- K >= 1 Gaussians diagonal in whitened coordinates
  (``posterior="diag-whitened"``; full covariances over u, faster steps).
* :class:`FullMixture` -- K > 1 full Gaussians (eq. (8) in its general form).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from . import _compile
from ._triangular import lower_factor_gram, lower_of_product, lower_of_sym_times_lower, lower_mm, solve_lower, upper_t_mm
from .constraints import LOG_2PI, inverse_softplus


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


class _UCrossEntropyTerms(torch.autograd.Function):
    """Per (k, j): log|K_zz| + m_k^T K_zz^-1 m_k + sum_m s_km^2 [K_zz^-1]_mm, ``(K, Q)``, from the
    factor L of K_zz (no graph), with the gradient handed to K_zz directly:

        d/dK_zz = K_zz^-1 - beta_k beta_k^T - K_zz^-1 diag(s_k^2) K_zz^-1,    beta_k = K_zz^-1 m_k.
    """

    @staticmethod
    def forward(ctx, Kzz, mean, sd, L, jitter_rel):
        Kinv = torch.cholesky_inverse(L)  # (Q, M, M)
        beta = torch.matmul(Kinv, mean.unsqueeze(-1)).squeeze(-1)  # (K, Q, M)
        logdet = 2.0 * torch.log(L.diagonal(dim1=-2, dim2=-1)).sum(-1)  # (Q,)
        kinv_diag = Kinv.diagonal(dim1=-2, dim2=-1)  # (Q, M)
        per = logdet + (mean * beta).sum(-1) + (sd * sd * kinv_diag).sum(-1)  # (K, Q)
        ctx.save_for_backward(Kinv, beta, sd, jitter_rel)
        return per

    @staticmethod
    def backward(ctx, g):
        Kinv, beta, sd, jitter_rel = ctx.saved_tensors
        need_kzz, need_mean, need_sd = ctx.needs_input_grad[:3]
        d_kzz = d_mean = d_sd = None
        if need_mean:
            d_mean = 2.0 * g.unsqueeze(-1) * beta
        if need_sd:
            d_sd = 2.0 * g.unsqueeze(-1) * sd * Kinv.diagonal(dim1=-2, dim2=-1)
        if need_kzz:
            gs = g.sum(0)  # (Q,)
            w = (g.unsqueeze(-1) * sd * sd).sum(0)  # (Q, M): sum_k g_k s_k^2
            d_kzz = Kinv * gs[:, None, None] - torch.matmul(Kinv * w.unsqueeze(-2), Kinv)
            bT = (beta * g.unsqueeze(-1)).permute(1, 2, 0)  # (Q, M, K)
            d_kzz = torch.baddbmm(d_kzz, bT, beta.permute(1, 0, 2), alpha=-1.0)
            _jitter_adjoint(d_kzz, jitter_rel)
        return d_kzz, d_mean, d_sd, None, None


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


class MixturePosterior(nn.Module):
    """q(v) = sum_k pi_k prod_j N(v_kj; m_kj, S_kj), batched over K components and Q latents.

    Args:
        num_components: K.
        num_latent: Q.
        num_inducing: M.
        diagonal: diagonal S_kj (True) or full S_kj through Cholesky factors (False).
        init_scale: initial standard deviation of every S_kj (1.0 = the prior in whitened space).
        mean_spread: standard deviation of the random initial means of the components when
            K > 1 (breaks their symmetry); K = 1 starts at m = 0, the prior mean.
        generator: torch.Generator for the random initial means.
    """

    #: True: the parameters describe q(v), v = L_zz^-1 (u - mu) (the default, see the module docstring).
    #: False: they describe q(u - mu) directly (:class:`UDiagonalMixture`, the paper's "mog").
    whitened: bool = True
    #: the name :func:`make_posterior` builds this class from
    kind: str = "full"

    def __init__(self, num_components: int, num_latent: int, num_inducing: int, diagonal: bool,
                 init_scale: float = 1.0, mean_spread: float = 0.1, generator: torch.Generator | None = None):
        super().__init__()
        K, Q, M = int(num_components), int(num_latent), int(num_inducing)
        if K < 1 or Q < 1 or M < 1:
            raise ValueError(f"posterior sizes must be >= 1, got K={K}, Q={Q}, M={M}")
        self.num_components, self.num_latent, self.num_inducing = K, Q, M
        self.diagonal = bool(diagonal)
        mean = torch.zeros(K, Q, M, dtype=torch.float64)
        if K > 1:
            mean = mean_spread * torch.randn(K, Q, M, dtype=torch.float64, generator=generator)
        self.mean = nn.Parameter(mean)
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

    def entropy(self, scale: Tensor | None = None) -> Tensor:
        """Entropy term L_ent of q(v) (a scalar).

        K = 1: the exact entropy sum_j [M/2 log(2 pi e) + log|S_j|^(1/2)].
        K > 1: the lower bound of seed 004, eq. (18),
        -sum_k pi_k log sum_l pi_l N(m_k; m_l, S_k + S_l), with the Gaussians over all Q*M
        inducing variables (block diagonal over the latent functions).

        Args:
            scale: optional precomputed :meth:`scale` (reused within one ELBO evaluation).
        """
        K, Q, M = self.num_components, self.num_latent, self.num_inducing
        L = self.scale() if scale is None else scale
        if K == 1:
            return Q * M * 0.5 * (LOG_2PI + 1.0) + self._log_det_scale(L).sum()
        if self.diagonal:
            diff = self.mean.unsqueeze(1) - self.mean.unsqueeze(0)  # (K, K, Q, M): m_k - m_l
            var = L * L
            C = var.unsqueeze(1) + var.unsqueeze(0)  # (K, K, Q, M)
            log_n = -0.5 * (LOG_2PI + torch.log(C) + diff * diff / C).sum((-1, -2))
        else:
            # l = k: S_k + S_k = 2 L_k L_k^T and m_k - m_k = 0, in closed form; only the K (K - 1) / 2
            # pairs k < l need a Cholesky factorization (the matrix of log N is symmetric)
            logdet_self = M * math.log(2.0) + 2.0 * self._log_det_scale(L)  # (K, Q)
            log_n = torch.diag_embed(-0.5 * (M * LOG_2PI + logdet_self).sum(-1))  # (K, K)
            k, l = torch.triu_indices(K, K, offset=1, device=L.device)
            S = lower_factor_gram(L)  # (K, Q, M, M)
            Lc = torch.linalg.cholesky(S[k] + S[l])  # (pairs, Q, M, M)
            d = (self.mean[k] - self.mean[l]).unsqueeze(-1)  # (pairs, Q, M, 1)
            alpha = torch.linalg.solve_triangular(Lc, d, upper=False).squeeze(-1)
            logdet = 2.0 * torch.log(Lc.diagonal(dim1=-2, dim2=-1)).sum(-1)
            off = -0.5 * (M * LOG_2PI + logdet + (alpha * alpha).sum(-1)).sum(-1)  # (pairs,)
            log_n = log_n.index_put((k, l), off).index_put((l, k), off)
        log_pi = self.log_weights()
        inner = torch.logsumexp(log_pi.unsqueeze(0) + log_n, dim=1)  # (K,)  over l
        return -(self.weights() * inner).sum()

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
                 mean_spread: float = 0.1, generator: torch.Generator | None = None):
        super().__init__(num_components, num_latent, num_inducing, diagonal=True, init_scale=init_scale,
                         mean_spread=mean_spread, generator=generator)


class UDiagonalMixture(MixturePosterior):
    """The paper's "mog1" / "mog2" (seed 004, §6.2): K >= 1 components, each a Gaussian over u with
    *diagonal* covariance, q(u) = sum_k pi_k prod_j N(u_j; mu_j 1 + m_kj, diag(s_kj^2)).

    ``mean`` holds m_kj = E_k[u_j] - mu_j ``(K, Q, M)`` and :meth:`scale` the standard deviations
    s_kj ``(K, Q, M)``. With V = L_zz^-1 K_zx and A = L_zz^-T V = K_zz^-1 K_zx (eq. 22-23):

        b_knj = mu_j + a_jn^T m_kj,     s2_knj = k_j(x_n, x_n) - v_jn^T v_jn + sum_m s_kjm^2 a_jnm^2,

    the entropy (exact for K = 1, eq. (18) for K > 1) is that of the parameters themselves, and the
    cross-entropy is eq. (19) with tr(K_zz^-1 diag(s^2)) = sum_m s_m^2 [K_zz^-1]_mm. ``posterior="diag"``.
    """

    whitened = False
    kind = "diag"

    def __init__(self, num_latent: int, num_inducing: int, num_components: int = 1, init_scale: float = 1.0,
                 mean_spread: float = 0.1, generator: torch.Generator | None = None):
        super().__init__(num_components, num_latent, num_inducing, diagonal=True, init_scale=init_scale,
                         mean_spread=mean_spread, generator=generator)

    def moments(self, Kzz, Kzx: Tensor, Lzz: Tensor, scale: Tensor | None = None,
                jitter_rel: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``a_n^T m_kj`` and ``sum_m s_kjm^2 a_nm^2 - v_n^T v_n``, each ``(K, Q, B)``, with a fused
        backward pass (:class:`_USpaceMoments`); ``Lzz`` carries no graph, ``Kzz`` (or None)
        receives the gradient."""
        sd = self.scale() if scale is None else scale
        if Kzz is None:
            Kzz = Lzz.new_zeros(())
        return _USpaceMoments.apply(Kzz, Kzx, self.mean, sd, Lzz.detach(), jitter_rel)

    def u_space_moments(self, V: Tensor, Lzz: Tensor, scale: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """a_n^T m_kj and sum_m s_kjm^2 a_nm^2 at B inputs, each ``(K, Q, B)``.

        Args:
            V: L_zz^-1 K_zx, ``(Q, M, B)``; Lzz: ``(Q, M, M)`` (both carrying their graphs).
        """
        A = torch.linalg.solve_triangular(Lzz.transpose(-1, -2), V, upper=True)  # K_zz^-1 K_zx, (Q, M, B)
        sd = self.scale() if scale is None else scale
        return (torch.einsum("kqm,qmb->kqb", self.mean, A),
                torch.einsum("kqm,qmb->kqb", sd * sd, A * A))

    def cross_entropy(self, scale: Tensor | None = None, Lzz: Tensor | None = None, Kzz: Tensor | None = None,
                      jitter_rel: Tensor | None = None) -> Tensor:
        """E_q[log p(u)] (seed 004, eq. (19)) in u-space:

            -1/2 sum_k pi_k sum_j [M log 2 pi + log|K_zz^j| + m_kj^T (K_zz^j)^-1 m_kj + tr((K_zz^j)^-1 S_kj)].

        Args:
            Lzz: the prior factors ``(Q, M, M)`` (required: the term depends on the prior).
            Kzz: with an ``Lzz`` that carries no graph, the matrix it factorizes (plus ``jitter_rel``):
                the gradient is then handed to K_zz directly (:class:`_UCrossEntropyTerms`).
        """
        if Lzz is None:
            raise ValueError("UDiagonalMixture.cross_entropy needs the prior factor Lzz (Q, M, M)")
        M = self.num_inducing
        sd = self.scale() if scale is None else scale
        if Kzz is not None and not Lzz.requires_grad:
            per = M * LOG_2PI + _UCrossEntropyTerms.apply(Kzz, self.mean, sd, Lzz, jitter_rel)  # (K, Q)
            return -0.5 * (self.weights() * per.sum(-1)).sum()
        eye = torch.eye(M, dtype=Lzz.dtype, device=Lzz.device).expand_as(Lzz)
        Linv = torch.linalg.solve_triangular(Lzz, eye, upper=False)  # L_zz^-1, for diag(K_zz^-1) only
        kinv_diag = (Linv * Linv).sum(-2)  # (Q, M): [K_zz^-1]_mm = sum_i (L^-1)_im^2
        alpha = torch.linalg.solve_triangular(Lzz, self.mean.unsqueeze(-1), upper=False).squeeze(-1)  # (K, Q, M)
        logdet = 2.0 * torch.log(Lzz.diagonal(dim1=-2, dim2=-1)).sum(-1)  # (Q,)
        per = M * LOG_2PI + logdet + (alpha * alpha).sum(-1) + (sd * sd * kinv_diag).sum(-1)  # (K, Q)
        return -0.5 * (self.weights() * per.sum(-1)).sum()

    @torch.no_grad()
    def start_at_prior_variances(self, Kzz: Tensor) -> None:
        """Set every s_kj^2 to the prior variances diag(K_zz^j) (``Kzz`` of shape ``(Q, M, M)``)."""
        sd = Kzz.diagonal(dim1=-2, dim2=-1).clamp_min(1e-12).sqrt()
        self.raw_scale.copy_(inverse_softplus(sd).expand_as(self.raw_scale))


class FullMixture(MixturePosterior):
    """K > 1 components with full covariances (seed 004, eq. (8))."""

    kind = "full"

    def __init__(self, num_latent: int, num_inducing: int, num_components: int = 2, init_scale: float = 1.0,
                 mean_spread: float = 0.1, generator: torch.Generator | None = None):
        super().__init__(num_components, num_latent, num_inducing, diagonal=False, init_scale=init_scale,
                         mean_spread=mean_spread, generator=generator)


POSTERIOR_KINDS = ("full", "diag", "diag-whitened", "joint")


def make_posterior(kind: str, num_latent: int, num_inducing: int, num_components: int = 1,
                   generator: torch.Generator | None = None) -> MixturePosterior:
    """Build a posterior by name.

    * ``"full"`` (or ``"fg"``): full covariances, whitened; K = 1 is :class:`FullGaussian`.
    * ``"diag"`` (or ``"mog"``): the paper's diagonal mixture over u, :class:`UDiagonalMixture`.
    * ``"diag-whitened"``: diagonal in whitened coordinates, :class:`DiagonalMixture`.
    * ``"joint"``: one Gaussian over all Q * M whitened values, coupled across the latent
      functions (:class:`savigp.joint_posterior.JointGaussian`; K = 1).
    """
    if kind in ("full", "fg"):
        if num_components == 1:
            return FullGaussian(num_latent, num_inducing)
        return FullMixture(num_latent, num_inducing, num_components, generator=generator)
    if kind in ("diag", "diagonal", "mog"):
        return UDiagonalMixture(num_latent, num_inducing, num_components, generator=generator)
    if kind == "diag-whitened":
        return DiagonalMixture(num_latent, num_inducing, num_components, generator=generator)
    if kind == "joint":
        from .joint_posterior import JointGaussian

        if num_components != 1:
            raise ValueError(f"posterior='joint' has one component, got num_components={num_components}")
        return JointGaussian(num_latent, num_inducing)
    raise ValueError(f"posterior must be one of {POSTERIOR_KINDS}, got {kind!r}")
