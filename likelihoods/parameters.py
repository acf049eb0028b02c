"""Positive parameters through softplus, shared by kernels and likelihoods.

A positive quantity theta is stored as an unconstrained raw tensor r with
theta = softplus(r) + floor, so that gradient steps can never make it zero or negative.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F


def inverse_softplus(x: Tensor) -> Tensor:
    """The r with softplus(r) = x, for x > 0 (stable for small and large x)."""
    return x + torch.log(-torch.expm1(-x))


class PositiveParameter(nn.Module):
    """A learnable positive tensor of any shape: ``value = softplus(raw) + floor``.

    Args:
        init: initial value(s), all > floor; shape is kept.
        floor: a small lower bound that keeps the value away from zero.
        learnable: False stores the raw value as a buffer (fixed).
    """

    def __init__(self, init, floor: float = 1e-6, learnable: bool = True):
        super().__init__()
        init = torch.as_tensor(init, dtype=torch.float64)
        if not torch.all(init > floor):
            raise ValueError(f"PositiveParameter: initial value(s) must exceed {floor}, got {init.tolist()}")
        self.floor = floor
        raw = inverse_softplus(init - floor)
        if learnable:
            self.raw = nn.Parameter(raw)
        else:
            self.register_buffer("raw", raw)

    def forward(self) -> Tensor:
        return F.softplus(self.raw) + self.floor

    @torch.no_grad()
    def set(self, value) -> None:
        """Set the positive value in place (keeps dtype and device)."""
        value = torch.as_tensor(value, dtype=self.raw.dtype, device=self.raw.device).expand_as(self.raw)
        self.raw.copy_(inverse_softplus(value - self.floor))

    def extra_repr(self) -> str:
        v = self().detach()
        return f"value={v.tolist() if v.numel() <= 8 else tuple(v.shape)}"

