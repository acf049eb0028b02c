"""The custom autograd functions of the diagonal mixture over u (:class:`savigp.posteriors.UDiagonalMixture`):
its marginal moments and its u-space parameters, with hand-written backward passes that hand the
gradient to K_zz directly (Bonilla et al. 2019, App. D-E), so the training step needs no autograd
through a Cholesky factorization.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..linalg.triangular import solve_lower
from ._autograd import jitter_adjoint


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
                d_kzz = jitter_adjoint(torch.matmul(R, A.transpose(-1, -2)).neg_(), jitter_rel)
            if need_kzx:
                d_kzx = R.addcmul_(A, g_vv)
        return d_kzz, d_kzx, d_mean, d_sd, None, None


def fused_u_space_moments(Kzz, Kzx: Tensor, mean: Tensor, sd: Tensor, L: Tensor,
                    jitter_rel: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """``(a_n^T m_k, sum_m s_km^2 a_nm^2 - v_n^T v_n)``, each ``(K, Q, B)``; see :class:`_USpaceMoments`.

    Args:
        Kzz: ``(Q, M, M)`` receiving the gradient (None: no gradient to the kernel through L).
        Kzx: ``(Q, M, B)``; mean, sd: u-space means and standard deviations ``(K, Q, M)``;
        L: ``(Q, M, M)`` lower Cholesky factor (its graph is not used); jitter_rel: ``(Q,)``.
    """
    if Kzz is None:
        Kzz = L.new_zeros(())
    return _USpaceMoments.apply(Kzz, Kzx, mean, sd, L.detach(), jitter_rel)


class _UParameters(torch.autograd.Function):
    """The prior-dependent u-space parameters of :class:`savigp.posteriors.UDiagonalMixture` with a
    hand-written backward pass. For J = K_zz + rel * mean(diag K_zz) I = L L^T, Linv = L^-1 and
    P = J^-1 = Linv^T Linv:

        mean_k = L w_k,     log c_m = -1/2 log P_mm,     logdet = log|J| = 2 sum_m log L_mm.

    Backward, with a_k = L^T g_mean_k, C = sum_k a_k w_k^T, Phi = lower triangle with halved
    diagonal (the Cholesky adjoint, dL = L Phi(L^-1 dJ L^-T)), h_m = g_logc_m / P_mm:

        dF/dw_k = a_k,      dF/dJ = Linv^T [Phi(C) + 1/2 Linv diag(h) Linv^T + g_logdet I] Linv,

    symmetrized, then carried through the jitter to K_zz. Against autograd's path (a second Cholesky
    factorization with graph, its backward, and the backward of the triangular solve for Linv) it
    needs no factorization: one M x M x M product and two triangular solves per latent function.
    ``L`` is the factor the model computed (no graph); K_zz receives the gradient.
    """

    @staticmethod
    def forward(ctx, Kzz, w, L, jitter_rel):
        eye = torch.eye(L.shape[-1], dtype=L.dtype, device=L.device).expand_as(L)
        Linv = torch.linalg.solve_triangular(L, eye, upper=False)
        pdiag = (Linv * Linv).sum(-2)  # (Q, M): [J^-1]_mm = sum_i (L^-1)_im^2
        mean = torch.matmul(L, w.unsqueeze(-1)).squeeze(-1)  # (K, Q, M)
        log_c = -0.5 * torch.log(pdiag)
        logdet = 2.0 * torch.log(L.diagonal(dim1=-2, dim2=-1)).sum(-1)  # (Q,)
        ctx.save_for_backward(L, Linv, pdiag, w, jitter_rel)
        return mean, log_c, logdet

    @staticmethod
    def backward(ctx, g_mean, g_logc, g_logdet):
        L, Linv, pdiag, w, jitter_rel = ctx.saved_tensors
        need_kzz, need_w = ctx.needs_input_grad[:2]
        a = torch.matmul(L.transpose(-1, -2), g_mean.unsqueeze(-1)).squeeze(-1)  # (K, Q, M): L^T g_k
        d_kzz = None
        if need_kzz:
            X = torch.matmul(a.permute(1, 2, 0), w.transpose(0, 1))  # (Q, M, M): sum_k a_k w_k^T
            X = X.tril_()
            X.diagonal(dim1=-2, dim2=-1).mul_(0.5).add_(g_logdet.unsqueeze(-1))
            X.baddbmm_(Linv * (0.5 * g_logc / pdiag).unsqueeze(-2), Linv.transpose(-1, -2))
            d_kzz = torch.linalg.solve_triangular(L, solve_lower(L, X, transpose=True), upper=False, left=False)
            d_kzz = jitter_adjoint(0.5 * (d_kzz + d_kzz.transpose(-1, -2)), jitter_rel)
        return d_kzz, (a if need_w else None), None, None


def fused_u_parameters(Kzz: Tensor, w: Tensor, L: Tensor, jitter_rel: Tensor | None = None
                       ) -> tuple[Tensor, Tensor, Tensor]:
    """``(L w, -1/2 log diag(J^-1), log|J|)`` for J = L L^T the jittered K_zz; see :class:`_UParameters`.

    Args:
        Kzz: ``(Q, M, M)`` receiving the gradient; w: whitened means ``(K, Q, M)``;
        L: ``(Q, M, M)`` lower Cholesky factor of J (its graph is not used); jitter_rel: ``(Q,)``.

    Returns:
        u-space means ``(K, Q, M)``, log c ``(Q, M)`` and log|J| ``(Q,)``.
    """
    return _UParameters.apply(Kzz, w, L.detach(), jitter_rel)
