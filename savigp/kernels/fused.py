"""The fused exponential of a squared distance, shared by every kernel of that form.

:class:`ScaledRBF` computes k_ij = exp(log s - ||a_i - b_j||^2 / 2) for features a, b with a
hand-written backward pass. The kernels of this form give their features
(:meth:`savigp.kernels.Kernel.exp_features`):

* the RBF: a = x / l (Rasmussen & Williams 2006, eq. (4.9));
* MacKay's periodic kernel: a = sqrt(w) [cos(2 pi x / p), sin(2 pi x / p)], w = 1 / l^2, since
  -2 sum_d w_d sin^2(pi (x_d - x'_d) / p_d) = -||a - b||^2 / 2 (MacKay 1998; Rasmussen & Williams 2006,
  eq. (4.31));
* a scale s' of such a kernel: log s + log s';
* a product of such kernels: the features side by side and the log-variances added, since
  exp(e_1) exp(e_2) = exp(e_1 + e_2) and ||[a_1, a_2] - [b_1, b_2]||^2 = ||a_1 - b_1||^2 + ||a_2 - b_2||^2.

So ``periodic * rbf`` is one :class:`ScaledRBF` of 2 d + d columns: one product, one exponential and one
backward pass over the (Q, N1, N2) matrix instead of one per factor and the product's. The seam the
algebra uses is :func:`fused_product` (a :class:`~savigp.kernels.base.Product`'s matrix, and a
:class:`~savigp.kernels.scale.Scale`'s of a product) and :func:`joined_features` (a product's features).
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import Tensor


class ScaledRBF(torch.autograd.Function):
    """k_ij = exp(log s - ||a_i - b_j||^2 / 2) for scaled inputs a = x1 / l ``(Q, N1, D)`` and
    b = x2 / l ``(Q, N2, D)``, in a few passes over the ``(Q, N1, N2)`` matrix.

    The inputs arrive centred (:mod:`savigp.kernels.stationary`). Forward: one batched product (``torch.bmm``: a and b are both (Q, ., D), and ``matmul``'s
    broadcasting costs a dozen dispatcher calls per product) of inputs augmented with two columns,

        [a, log s - |a|^2 / 2, 1] [b, 1, -|b|^2 / 2]^T = log s - r^2 / 2,

    so that the (Q, N1, N2) matrix is written once by BLAS, then a clamp (r^2 >= 0) and an
    exponential in place. Backward: with W = dF/dk * k (= dF/d log k),
    dF/da_i = sum_j W_ij (b_j - a_i) = (W b)_i - rowsum(W)_i a_i, likewise for b, and
    dF/d log s = sum W; W [b, 1] gives W b and the row sums in one product (and W^T [a, 1] the
    column sums): one pass over the (Q, N1, N2) matrix besides the two products, instead of
    autograd's chain through every intermediate.
    """

    @staticmethod
    def forward(ctx, a: Tensor, b: Tensor, log_var: Tensor) -> Tensor:
        ones_a = a.new_ones(a.shape[:-1] + (1,))
        ones_b = b.new_ones(b.shape[:-1] + (1,))
        lv = log_var.reshape(-1, 1, 1)
        a_aug = torch.cat([a, lv - 0.5 * (a * a).sum(-1, keepdim=True), ones_a], dim=-1)  # (Q, N1, D + 2)
        b_aug = torch.cat([b, ones_b, -0.5 * (b * b).sum(-1, keepdim=True)], dim=-1)  # (Q, N2, D + 2)
        k = torch.bmm(a_aug, b_aug.transpose(-1, -2))  # log s - r^2 / 2, (Q, N1, N2)
        torch.minimum(k, lv, out=k)  # r^2 >= 0
        k.exp_()
        ctx.save_for_backward(a, b, k)
        return k

    @staticmethod
    def backward(ctx, grad: Tensor):
        a, b, k = ctx.saved_tensors
        W = grad * k  # (Q, N1, N2)
        D = a.shape[-1]
        da = db = dlv = ra = None
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[2]:
            Wb = torch.bmm(W, torch.cat([b, b.new_ones(b.shape[:-1] + (1,))], dim=-1))  # [W b, rowsum W]
            ra = Wb[..., D:]  # (Q, N1, 1)
            if ctx.needs_input_grad[0]:
                da = Wb[..., :D] - a * ra
        if ctx.needs_input_grad[1]:
            # ([a, 1]^T W)^T: BLAS reads W row by row (W^T [a, 1] reads it transposed, ~2x slower)
            Wa = torch.bmm(torch.cat([a, a.new_ones(a.shape[:-1] + (1,))], dim=-1).transpose(-1, -2), W)
            Wa = Wa.transpose(-1, -2)  # (Q, N2, D + 1)
            db = Wa[..., :D] - b * Wa[..., D:]
        if ctx.needs_input_grad[2]:
            dlv = ra.sum((-2, -1))
        return da, db, dlv


def exp_quadratic(a: Tensor, b: Tensor, log_var: Tensor) -> Tensor:
    """exp(log s - ||a_i - b_j||^2 / 2), ``(Q, N1, N2)``, for features ``a (Q, N1, d)``, ``b (Q, N2, d)``
    and ``log_var (Q,)`` (:class:`ScaledRBF`: fused forward and backward)."""
    return ScaledRBF.apply(a, b, log_var)


def joined_features(factors: Sequence, x1: Tensor, x2: Tensor, num_latent: int):
    """The features of the exp-form factors of a product (:meth:`savigp.kernels.Kernel.exp_features`)
    side by side, ``(a (Q, N1, d), b (Q, N2, d), log_var (Q,))``, and the other factors (a list); None
    when fewer than two factors are of the exp form."""
    feats, rest = [], []
    for k in factors:
        f = k.exp_features(x1, x2)
        (rest if f is None else feats).append(k if f is None else f)
    if len(feats) < 2:
        return None
    Q = num_latent
    a = torch.cat([f[0].expand(Q, *f[0].shape[-2:]) for f in feats], dim=-1)
    b = torch.cat([f[1].expand(Q, *f[1].shape[-2:]) for f in feats], dim=-1)
    return (a, b, sum(f[2] for f in feats)), rest


def fused_product(factors: Sequence, x1: Tensor, x2: Tensor, num_latent: int,
                  log_scale: Optional[Tensor] = None) -> Optional[Tensor]:
    """prod_i k_i(x1, x2) ``(Q, N1, N2)`` for the ``factors`` of a product, the exp-form ones as one
    fused exponential (:func:`joined_features`, :func:`exp_quadratic`) and the others multiplied in;
    with ``log_scale`` (Q,), times exp(log_scale) inside the exponential, only when every factor is of
    the exp form. None when the product has fewer than two exp-form factors, or a scale and other
    factors: the caller then multiplies."""
    joined = joined_features(factors, x1, x2, num_latent)
    if joined is None or (log_scale is not None and joined[1]):
        return None
    (a, b, log_var), rest = joined
    out = exp_quadratic(a, b, log_var if log_scale is None else log_var + log_scale)
    for k in rest:
        out = out * k(x1, x2)
    return out
