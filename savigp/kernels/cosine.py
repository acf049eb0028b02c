"""GPflow's cosine kernel, batched over the Q latent functions:

    k(x, x') = s cos(2 pi sum_d (x_d - x'_d) / l_d)

over the active columns d, with a length-scale l_d per column (one for all, ``ard=False``), in the
inputs' units (the period along column d), and a variance s per latent function. Its functions are
sinusoids of random phase and amplitude: with u = 2 pi sum_d x_d / l_d, cos(u - u') = cos u cos u' +
sin u sin u', the covariance of A cos u + B sin u for A, B ~ N(0, s) independent, so the kernel is
positive semi-definite (of rank 2) and stationary. GPflow's ``Cosine`` (an ``AnisotropicStationary``:
it reads the signed differences, not the distance); GPyTorch's ``CosineKernel`` is another kernel,
cos(pi ||x - x'|| / p), a covariance on the line only.

Inputs are centred on the mean of the first set first (the differences do not depend on it), as the
other stationary kernels do.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from .stationary import Stationary, _centred


class Cosine(Stationary):
    """k(x, x') = s cos(2 pi sum_d (x_d - x'_d) / l_d) (GPflow's ``Cosine``).

    Args: as :class:`~savigp.kernels.stationary.Stationary` (``lengthscale``: the period along each
    active column, a float, ``(d,)`` or ``(Q, d)``).
    """

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        x1, x2 = _centred(x1, x2)
        ls = self.lengthscales().unsqueeze(-2)  # (Q, 1, d or 1)
        u1 = (x1 / ls).sum(-1)  # (Q, N1): sum_d x_d / l_d
        u2 = u1 if x2 is x1 else (x2 / ls).sum(-1)
        return self.variance()[:, None, None] * torch.cos((2.0 * math.pi) * (u1.unsqueeze(-1) - u2.unsqueeze(-2)))
