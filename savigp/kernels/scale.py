"""A learned variance on any kernel: :class:`Scale`, k(x, x') = s k_1(x, x') with s ``(Q,)`` positive
(GPyTorch's ``ScaleKernel``), e.g. one amplitude for a product of kernels whose own variances are fixed.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .base import Hyper, Kernel, Product
from .fused import fused_product


class Scale(Kernel):
    """k(x, x') = s k_1(x, x') with a learned variance s ``(Q,)`` (GPyTorch's ``ScaleKernel``).

    Args:
        kernel: the kernel to scale.
        variance: initial s, a float or ``(Q,)``.
        learn: learn s (False fixes it).
    """

    hypers = (Hyper("variance"),)

    def __init__(self, kernel: Kernel, variance=1.0, learn: bool = True):
        super().__init__()
        if not isinstance(kernel, Kernel):
            raise TypeError(f"Scale: kernel is a {type(kernel).__name__}, not a savigp Kernel")
        self.base = kernel
        self._set_inputs(kernel.input_dim, kernel.num_latent, None)
        self._set_hypers(learn, variance=variance)

    def forward_exp_features(self, x1: Tensor, x2: Tensor):
        f = self.base.exp_features(x1, x2)
        return None if f is None else (f[0], f[1], f[2] + torch.log(self.variance()))

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        if isinstance(self.base, Product):  # s inside the product's fused exponential (savigp.kernels.fused)
            out = fused_product(self.base.parts, x1, x2, self.num_latent, torch.log(self.variance()))
            if out is not None:
                return out
        return self.variance()[:, None, None] * self.base(x1, x2)

    def forward_diag(self, x: Tensor) -> Tensor:
        return self.variance()[:, None] * self.base.diag(x)
