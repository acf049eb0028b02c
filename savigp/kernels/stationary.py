"""Stationary kernels, functions of the scaled distance between inputs, batched over the Q latent
functions.

Every kernel holds one set of hyper-parameters per latent function: ``variance`` of shape ``(Q,)``
and ARD ``lengthscales`` of shape ``(Q, d)`` (d the number of active input columns, or 1 with
``ard=False``). With r = ||(x - x') / l|| over the active columns (Rasmussen & Williams 2006, §4.2):

* RBF (squared exponential): k = s exp(-r^2 / 2)
* Matern 1/2 (exponential): k = s exp(-r)
* Matern 3/2: k = s (1 + sqrt(3) r) exp(-sqrt(3) r)
* Matern 5/2: k = s (1 + sqrt(5) r + 5 r^2 / 3) exp(-sqrt(5) r)
* rational quadratic: k = s (1 + r^2 / (2 alpha))^(-alpha), alpha > 0 learned (a scale mixture of
  RBFs; the RBF as alpha -> infinity)

Distances are computed after centring both sets of inputs on the mean of the first, c = mean_i x1_i,
and then scaling: r^2 = |a|^2 - 2 a.b + |b|^2 with a = (x1 - c) / l, b = (x2 - c) / l. The terms of the
expansion are then of the size of the spread of the inputs, not of their offset, so inputs with a
large common offset (x = 10^4 + U(-3, 3) in float32, 10^8 in float64) give the kernel matrices of
the centred inputs (the uncentred expansion loses every digit of r^2 to cancellation there, and
even scaling before centring loses the digits that x / l rounds away).
"""
from __future__ import annotations

import math
import weakref
from typing import Optional, Sequence

import torch
from torch import Tensor

from .._choices import KERNELS  # noqa: F401 (the kernels by name: a registry, KERNELS.register(name, cls))
from .base import Hyper, Kernel
from .fused import exp_quadratic


class Stationary(Kernel):
    """A stationary kernel with ARD length-scales.

    Args:
        input_dim: D.
        num_latent: Q, the number of independent latent functions (one hyper-parameter set each).
        lengthscale: initial length-scale(s): a float, or shape ``(D,)`` or ``(Q, D)``.
        variance: initial signal variance(s): a float or shape ``(Q,)``.
        ard: one length-scale per active input column (True) or one shared by all (False).
        learn: learn the hyper-parameters (False fixes them, e.g. for the seismic prior).
        active_dims: the input columns the kernel reads (default all D), e.g. ``[0]`` for a kernel
            of the first column alone.
    """

    hypers = (Hyper("lengthscale", "lengthscales", "columns", floor=1e-6, units="scale"), Hyper("variance"))
    shape_options = ("ard",)
    stationary = True

    def __init__(self, input_dim: int, num_latent: int = 1, lengthscale=1.0, variance=1.0,
                 ard: bool = True, learn: bool = True, active_dims: Optional[Sequence[int]] = None):
        super().__init__()
        self._set_inputs(input_dim, num_latent, active_dims)
        self.ard = bool(ard)
        self._set_hypers(learn, lengthscale=lengthscale, variance=variance)

    def _scaled_sqdist(self, x1: Tensor, x2: Tensor) -> Tensor:
        """Squared scaled distances, shape (Q, N1, N2), from inputs centred on the mean of x1."""
        ls = self.lengthscales().unsqueeze(-2)  # (Q, 1, D or 1)
        x1, x2 = _centred(x1, x2)
        a, b = x1 / ls, x2 / ls
        a2 = (a * a).sum(-1, keepdim=True)
        b2 = (b * b).sum(-1, keepdim=True)
        sq = a2 - 2.0 * a @ b.transpose(-1, -2) + b2.transpose(-1, -2)
        return sq.clamp_min(0.0)

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        r2 = self._scaled_sqdist(x1, x2)
        return self.variance()[:, None, None] * self.profile(r2)

    def forward_diag(self, x: Tensor) -> Tensor:
        n = x.shape[-2]
        return self.variance()[:, None].expand(self.num_latent, n)

    def profile(self, r2: Tensor) -> Tensor:  # pragma: no cover - abstract
        """k(r) / variance as a function of the squared scaled distance r^2."""
        raise NotImplementedError

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, ard={self.ard}"


def _centred(x1: Tensor, x2: Tensor) -> tuple[Tensor, Tensor]:
    """``x1 - c`` and ``x2 - c`` for ``c`` the mean of the rows of ``x1`` (a constant: distances do not
    depend on it, so no gradient flows through it). Rows near c are subtracted exactly."""
    c = x1.detach().mean(-2, keepdim=True)
    return x1 - c, x2 - c


class _IsotropicRBF(torch.autograd.Function):
    """k_qij = exp(log s_q + c_q r_ij^2) with c_q = -1 / (2 l_q^2), for one length-scale per latent
    function and inputs shared by all of them: x1 ``(N1, D)``, x2 ``(N2, D)`` (centred, see the module
    docstring). The distances r^2 ``(N1, N2)`` are computed once, by one product, for all Q latent
    functions (the ARD path, :class:`~savigp.kernels.fused.ScaledRBF`, needs one product of D columns per latent function,
    forward and twice backward). Backward, with W_q = dF/dk_q * k_q: dF/d log s_q = sum W_q,
    dF/dc_q = sum W_q * r^2, and only when the inputs need a gradient, with G = sum_q c_q W_q,
    dF/dx1_i = 2 (rowsum(G)_i x1_i - (G x2)_i), dF/dx2_j = 2 (colsum(G)_j x2_j - (G^T x1)_j).
    """

    @staticmethod
    def forward(ctx, x1: Tensor, x2: Tensor, log_var: Tensor, c: Tensor, r2=None) -> Tensor:
        if r2 is None:  # else the distances of inputs that need no gradient, computed earlier
            r2 = _isotropic_sqdist(x1, x2)
        k = torch.addcmul(log_var.reshape(-1, 1, 1), c.reshape(-1, 1, 1), r2)  # (Q, N1, N2)
        k.exp_()
        ctx.save_for_backward(x1, x2, c, r2, k)
        return k

    @staticmethod
    def backward(ctx, grad: Tensor):
        x1, x2, c, r2, k = ctx.saved_tensors
        Q = k.shape[0]
        W = (grad * k).reshape(Q, -1)  # (Q, N1 N2)
        dlv = W.sum(-1) if ctx.needs_input_grad[2] else None
        dc = W @ r2.reshape(-1) if ctx.needs_input_grad[3] else None
        dx1 = dx2 = None
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
            G = (c.reshape(1, Q) @ W).reshape(r2.shape)  # dF/dr^2, (N1, N2)
            if ctx.needs_input_grad[0]:
                dx1 = 2.0 * (G.sum(-1, keepdim=True) * x1 - G @ x2)
            if ctx.needs_input_grad[1]:
                dx2 = 2.0 * (G.sum(0).unsqueeze(-1) * x2 - G.transpose(0, 1) @ x1)
        return dx1, dx2, dlv, dc, None


def _isotropic_sqdist(x1: Tensor, x2: Tensor) -> Tensor:
    """||x1_i - x2_j||^2 ``(N1, N2)`` of centred inputs ``(N1, D)``, ``(N2, D)``: one product."""
    a2 = (x1 * x1).sum(-1, keepdim=True)  # (N1, 1)
    b2 = (x2 * x2).sum(-1)  # (N2,)
    return torch.addmm(b2.unsqueeze(0), x1, x2.transpose(0, 1), alpha=-2.0).add_(a2).clamp_min_(0.0)


@torch.no_grad()
def _self_sqdist(x: Tensor) -> Tensor:
    """||x_i - x_j||^2 ``(N, N)`` of inputs ``(N, D)`` or ``(1, N, D)``, centred first."""
    xc = _centred(x.reshape(x.shape[-2:]), x.reshape(x.shape[-2:]))[0]
    return _isotropic_sqdist(xc, xc)


class RBF(Stationary):
    """Squared exponential: k(x, x') = s exp(-||(x - x') / l||^2 / 2) (a fused forward and backward,
    :class:`~savigp.kernels.fused.ScaledRBF`, instead of the distance-then-profile path of :class:`Stationary`; with
    ``ard=False`` and inputs shared by the latent functions, :class:`_IsotropicRBF`, which computes
    the distances once for all of them)."""

    in_words, smoothness, search_neutral_factor, repeat_is_redundant = "variation", "a smooth", True, True

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        if not self.ard and (x1.dim() == 2 or x1.shape[0] == 1) and (x2.dim() == 2 or x2.shape[0] == 1):
            c = -0.5 / self.lengthscales()[:, 0].square()  # (Q,)
            r2 = self._fixed_sqdist(x1) if x2 is x1 and not x1.requires_grad else None  # K(X, X)
            x1, x2 = _centred(x1.reshape(x1.shape[-2:]), x2.reshape(x2.shape[-2:]))
            return _IsotropicRBF.apply(x1, x2, torch.log(self.variance()), c, r2)
        return exp_quadratic(*self.forward_exp_features(x1, x2))  # centred: a large common offset stays accurate

    def forward_exp_features(self, x1: Tensor, x2: Tensor):
        """x1 / l, x2 / l ``(Q, N, d)`` of the centred active columns and log s (:mod:`savigp.kernels.fused`)."""
        x1, x2 = _centred(x1, x2)
        ls = self.lengthscales().unsqueeze(-2)  # (Q, 1, d or 1)
        Q = self.num_latent
        a, b = x1 / ls, x2 / ls
        return a.expand(Q, *a.shape[-2:]), b.expand(Q, *b.shape[-2:]), torch.log(self.variance())

    def _fixed_sqdist(self, x: Tensor) -> Tensor:
        """The distances ||x_i - x_j||^2 ``(N, N)`` of the active columns ``x`` ``(N, d)`` or
        ``(1, N, d)`` of inputs that need no gradient (K_zz of fixed
        inducing inputs, recomputed at every training step otherwise: 2 N^2 D flops, 33 ms of a
        0.5 s step at N = 2400, D = 784), kept from the last call. The entry is keyed on the tensor
        that owns the memory (a weak reference: a freed tensor never matches, even if a new one
        takes its address), the view's offset, shape and strides, its dtype and device, and the
        in-place version counter (shared by all views: ``copy_``, ``load_state_dict`` and any edit
        invalidate it). Inference tensors have no version counter and are not cached, and neither is
        anything while a CUDA graph is being captured (a replay runs no Python to check the key, so
        the graph computes the distances itself, as it did before the cache). A gathered copy of the
        active columns (:meth:`Kernel._columns`) is new every call: the key is then the given tensor's."""
        given = self.columns_source(x)
        if x.is_inference() or given.is_inference() or (x.is_cuda and torch.cuda.is_current_stream_capturing()):
            return _self_sqdist(x)
        base = given if given._base is None else given._base
        key = (given.data_ptr(), given.storage_offset(), tuple(given.shape), tuple(given.stride()), given.dtype,
               given.device, given._version)
        hit = getattr(self, "_sqdist_cache", None)
        if hit is not None and hit[0] == key and hit[1]() is base:
            return hit[2]
        r2 = _self_sqdist(x)
        self._sqdist_cache = (key, weakref.ref(base), r2)
        return r2

    def __getstate__(self):
        state = self.__dict__.copy()  # the cache (a weak reference) is neither pickled nor copied
        state.pop("_sqdist_cache", None)
        return state


class Matern12(Stationary):
    """Matern 1/2 (exponential, the Ornstein-Uhlenbeck process in one dimension): k = s exp(-r)."""

    in_words, smoothness, search_neutral_factor = "variation", "a rough", True

    def profile(self, r2: Tensor) -> Tensor:
        return torch.exp(-torch.sqrt(r2 + 1e-36))


class Matern32(Stationary):
    """Matern 3/2: k = s (1 + sqrt(3) r) exp(-sqrt(3) r)."""

    in_words, smoothness, search_neutral_factor = "variation", "a rougher", True

    def profile(self, r2: Tensor) -> Tensor:
        r = torch.sqrt(r2 + 1e-36)
        return (1.0 + math.sqrt(3.0) * r) * torch.exp(-math.sqrt(3.0) * r)


class Matern52(Stationary):
    """Matern 5/2: k = s (1 + sqrt(5) r + 5 r^2 / 3) exp(-sqrt(5) r)."""

    in_words, smoothness, search_neutral_factor = "variation", "a fairly smooth", True

    def profile(self, r2: Tensor) -> Tensor:
        r = torch.sqrt(r2 + 1e-36)
        return (1.0 + math.sqrt(5.0) * r + (5.0 / 3.0) * r2) * torch.exp(-math.sqrt(5.0) * r)


class RationalQuadratic(Stationary):
    """Rational quadratic: k = s (1 + r^2 / (2 alpha))^(-alpha) (Rasmussen & Williams 2006, eq. (4.19)),
    a scale mixture of RBF kernels with a gamma distribution over their inverse squared
    length-scales; ``alpha`` ``(Q,)`` is learned (positive).

    Args:
        alpha: initial shape alpha, a float or ``(Q,)``; the other arguments as :class:`Stationary`.
    """

    hypers = Stationary.hypers + (Hyper("alpha", floor=1e-6),)
    in_words, smoothness, search_neutral_factor = "variation", "a smooth, many-scaled", True

    def __init__(self, input_dim: int, num_latent: int = 1, lengthscale=1.0, variance=1.0, alpha=1.0,
                 ard: bool = True, learn: bool = True, active_dims: Optional[Sequence[int]] = None):
        super().__init__(input_dim, num_latent, lengthscale, variance, ard=ard, learn=learn, active_dims=active_dims)
        self._set_hypers(learn, alpha=alpha)

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        alpha = self.alpha()[:, None, None]
        base = torch.log1p(self._scaled_sqdist(x1, x2) / (2.0 * alpha))
        return self.variance()[:, None, None] * torch.exp(-alpha * base)
