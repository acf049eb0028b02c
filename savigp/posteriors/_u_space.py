"""The custom autograd functions of the diagonal mixture over u (:class:`savigp.posteriors.UDiagonalMixture`):
its marginal moments, with a hand-written backward pass that hands the gradient to K_zz directly
(Bonilla et al. 2019, App. D-E), so the training step needs no autograd through a Cholesky
factorization.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .._triangular import solve_lower
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

