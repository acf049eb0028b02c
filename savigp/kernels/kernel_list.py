"""Latent functions with kernels of different families: :class:`KernelList`."""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor, nn

from .base import Kernel


class KernelList(Kernel):
    """Latent functions with kernels of different families: Q = sum of the parts' Q.

    ``KernelList([RBF(D), Matern32(D, num_latent=2)])`` gives Q = 3; outputs are concatenated
    along the latent axis in the order given. Any kernel, composites included, can be a part.
    """

    def __init__(self, kernels: Sequence[Kernel]):
        super().__init__()
        if not kernels:
            raise ValueError("KernelList needs at least one kernel")
        dims = {k.input_dim for k in kernels}
        if len(dims) != 1:
            raise ValueError(f"KernelList: all kernels must share input_dim, got {sorted(dims)}")
        self.parts = nn.ModuleList(kernels)
        self._set_inputs(dims.pop(), sum(k.num_latent for k in kernels), None)
        self._splits = [k.num_latent for k in kernels]

    def _slices(self, x: Tensor):
        if x.dim() == 3 and x.shape[0] == self.num_latent and self.num_latent > 1:
            return torch.split(x, self._splits, dim=0)
        return [x] * len(self.parts)

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        if x2 is x1:  # keep K(X, X) recognisable to the parts
            return torch.cat([k(a) for k, a in zip(self.parts, self._slices(x1))], dim=0)
        return torch.cat([k(a, b) for k, a, b in zip(self.parts, self._slices(x1), self._slices(x2))], dim=0)

    def forward_diag(self, x: Tensor) -> Tensor:
        return torch.cat([k.diag(a) for k, a in zip(self.parts, self._slices(x))], dim=0)
