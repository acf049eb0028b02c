"""The periodic kernel of MacKay (1998), the exp-sine-squared kernel, batched over the Q latent
functions:

    k(x, x') = s exp(-2 sum_d sin^2(pi (x_d - x'_d) / p_d) / l_d^2)

over the active columns d, with a period p_d and a length-scale l_d per column (or one of each for
all columns, ``ard=False``) and a variance s per latent function. It is the RBF kernel of the warped
input u(x) = (cos(2 pi x / p), sin(2 pi x / p)) (MacKay 1998; Rasmussen & Williams 2006, eq. (4.31)),
so it is positive semi-definite. scikit-learn's ``ExpSineSquared`` is this kernel; GPyTorch's
``PeriodicKernel`` is it with its ``lengthscale`` standing for l^2 (GPflow's ``Periodic`` of a squared
exponential has 1/2 where this has 2).

With A = 2 pi x / p and w = 1 / l^2, sin^2((A - B) / 2) = (1 - cos A cos B - sin A sin B) / 2, so the
exponent is -||u(x) - u(x')||^2 / 2 for the features u = [sqrt(w) cos A, sqrt(w) sin A]: the RBF kernel's
fused exponential (:mod:`savigp.kernels.fused`) of 2d columns per latent function writes the (Q, N1, N2)
matrix and its backward pass, and a product with an RBF joins their features into one.
Inputs are centred on the mean of the first set first (distances do not depend on it), so years
(x ~ 2000) keep their digits in float32.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
from torch import Tensor

from .base import Hyper, Kernel
from .fused import exp_quadratic


class Periodic(Kernel):
    """k(x, x') = s exp(-2 sum_d sin^2(pi (x_d - x'_d) / p_d) / l_d^2) (MacKay 1998).

    Args:
        input_dim: D, the number of input columns.
        num_latent: Q, one hyper-parameter set per latent function.
        period: initial period(s) p: a float, ``(d,)`` or ``(Q, d)`` (d the active columns, 1 with
            ``ard=False``), in the units of the inputs.
        lengthscale: initial length-scale(s) l, shaped as ``period``: how far from a sinusoid one
            period may be (small l: sharp, many harmonics).
        variance: initial variance(s) s: a float or ``(Q,)``.
        ard: a period and length-scale per active column (True) or one of each for all (False).
        learn: learn the hyper-parameters (False fixes them).
        active_dims: the input columns the kernel reads (default all D).
    """

    #: the period is in the inputs' units; the length-scale is not (it is relative to the sinusoid
    #: sin(pi d / p), whatever the units of d), so it is not given the columns' spread as a default
    hypers = (Hyper("lengthscale", "lengthscales", "columns", floor=1e-6, units="none"),
              Hyper("period", shape="columns", floor=1e-6, units="scale"), Hyper("variance"))
    shape_options = ("ard",)
    stationary, has_period, in_words = True, True, "cycle"

    def __init__(self, input_dim: int, num_latent: int = 1, lengthscale=1.0, variance=1.0, period=1.0,
                 ard: bool = True, learn: bool = True, active_dims: Optional[Sequence[int]] = None):
        super().__init__()
        self._set_inputs(input_dim, num_latent, active_dims)
        self.ard = bool(ard)
        self._set_hypers(learn, lengthscale=lengthscale, period=period, variance=variance)

    def forward_step_scales(self, columns: Tensor) -> dict:
        """The period's step scaled by p / L (L the inputs' extent along its column, at most 1): a
        change dp of the period moves the phase at the far end of the data by L dp / p^2 cycles, so
        a step of the learning rate's size in p (elnino: 48 cycles, p = 1 year) turns the season
        by about half a cycle there, and Adam's steps of that size throw the learned period away
        (issue 57: to 0.95, 1.10 or 0.80 years). Scaled, a step moves the far phase by about the
        learning rate in cycles, whatever the units or the number of cycles. None for a fixed
        period or fewer than one cycle."""
        if not self.learn or columns.shape[0] < 2:
            return {}
        x = columns.detach()
        span = (x.max(0).values - x.min(0).values).to(torch.float64)  # (d,)
        if not self.ard:
            span = span.max().reshape(1)
        factor = float((self.period().detach().to(torch.float64) / span.clamp_min(1e-300)).min())
        return {self.period.raw: factor} if factor < 1.0 else {}

    def _features(self, x: Tensor, centre: Tensor) -> Tensor:
        """[sqrt(w) cos A, sqrt(w) sin A] ``(Q, N, 2 d)`` of inputs ``(N, d)`` or ``(Q, N, d)``."""
        p = self.period().unsqueeze(-2)  # (Q, 1, d or 1)
        sw = 1.0 / self.lengthscales().unsqueeze(-2)  # sqrt(w), (Q, 1, d or 1)
        angle = (2.0 * math.pi) * (x - centre) / p  # (Q, N, d): broadcasts one p over the columns
        return torch.cat([sw * torch.cos(angle), sw * torch.sin(angle)], dim=-1)

    def forward_exp_features(self, x1: Tensor, x2: Tensor):
        """u(x1), u(x2) ``(Q, N, 2 d)`` and log s: k = s exp(-||u(x) - u(x')||^2 / 2) (module docstring)."""
        centre = x1.detach().mean(-2, keepdim=True)
        a = self._features(x1, centre)
        b = a if x2 is x1 else self._features(x2, centre)
        Q = self.num_latent
        return a.expand(Q, *a.shape[-2:]), b.expand(Q, *b.shape[-2:]), torch.log(self.variance())

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return exp_quadratic(*self.forward_exp_features(x1, x2))

    def forward_diag(self, x: Tensor) -> Tensor:
        return self.variance()[:, None].expand(self.num_latent, x.shape[-2])

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, ard={self.ard}"
