"""Kernels that do not depend on the distance between inputs, batched over the Q latent functions:

* :class:`Constant`: k(x, x') = s, a constant function of unknown level (its variance s);
* :class:`White`: k(x, x') = s [x and x' are the same input], independent noise at every input.

As in GPflow, :class:`White` is s I for a set of inputs against itself (``kernel(X, X)`` with the
same tensor twice, and ``kernel.diag(X)``) and zero between two sets (``kernel(Z, X)``): noise at
the training inputs that the inducing variables cannot explain.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import Tensor

from .base import Hyper, Kernel


class _Level(Kernel):
    """A variance s ``(Q,)`` and nothing else."""

    hypers = (Hyper("variance"),)
    stationary = True

    def __init__(self, input_dim: int, num_latent: int = 1, variance=1.0, learn: bool = True,
                 active_dims: Optional[Sequence[int]] = None):
        super().__init__()
        self._set_inputs(input_dim, num_latent, active_dims)
        self._set_hypers(learn, variance=variance)

    def forward_diag(self, x: Tensor) -> Tensor:
        return self.variance()[:, None].expand(self.num_latent, x.shape[-2])


class Constant(_Level):
    """k(x, x') = s.

    Args:
        input_dim: D; num_latent: Q; variance: initial s, a float or ``(Q,)``; learn: learn s.
    """

    in_words = "offset"

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        ones = x1.new_ones(self.num_latent, x1.shape[-2], x2.shape[-2])
        return ones * self.variance()[:, None, None]


class White(_Level):
    """k(x, x') = s if x and x' are the same input (``kernel(X, X)``, ``diag``), else 0.

    Args:
        input_dim: D; num_latent: Q; variance: initial s, a float or ``(Q,)``; learn: learn s.
    """

    identity_terms = True
    in_words = "noise"

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        n1, n2 = x1.shape[-2], x2.shape[-2]
        if x2 is not x1:  # kernel(Z, X): two sets (kernel(X) and kernel(X, X) give the same object twice)
            return x1.new_zeros(self.num_latent, n1, n2)
        eye = torch.eye(n1, dtype=x1.dtype, device=x1.device)
        return eye * self.variance()[:, None, None]
