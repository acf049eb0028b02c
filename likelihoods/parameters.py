"""Positive parameters through softplus, shared by kernels, likelihoods and user likelihoods' parameters,
and parameters in the unit interval through the logistic function.

A positive quantity theta is stored as an unconstrained raw tensor r with
theta = softplus(r) + floor, so that gradient steps can never make it zero or negative; a quantity
in (0, 1) (a probability, e.g. a zero-inflation probability) as theta = sigmoid(r), r = logit(theta).
"""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F


#: the default floor of a positive parameter
POSITIVE_FLOOR = 1e-6


def inverse_softplus(x: Tensor) -> Tensor:
    """The r with softplus(r) = x, for x > 0 (stable for small and large x)."""
    return x + torch.log(-torch.expm1(-x))


def positive_from_raw(raw: Tensor, floor: float = POSITIVE_FLOOR) -> Tensor:
    """theta = softplus(raw) + floor, elementwise (differentiable in ``raw``)."""
    return F.softplus(raw) + floor


def raw_from_positive(value: Tensor, floor: float = POSITIVE_FLOOR) -> Tensor:
    """The raw r with softplus(r) + floor = value, elementwise, for value > floor."""
    return inverse_softplus(value - floor)


def unit_from_raw(raw: Tensor) -> Tensor:
    """theta = sigmoid(raw) = 1 / (1 + exp(-raw)) in (0, 1), elementwise (differentiable in ``raw``)."""
    return torch.sigmoid(raw)


def raw_from_unit(value: Tensor) -> Tensor:
    """The raw r = logit(value) = log(value / (1 - value)) with sigmoid(r) = value, for 0 < value < 1."""
    return torch.logit(value)


class PositiveParameter(nn.Module):
    """A learnable positive tensor of any shape: ``value = softplus(raw) + floor``.

    Args:
        init: initial value(s), all > floor; shape is kept.
        floor: a small lower bound that keeps the value away from zero.
        learnable: False stores the raw value as a buffer (fixed).
    """

    def __init__(self, init, floor: float = POSITIVE_FLOOR, learnable: bool = True):
        super().__init__()
        init = torch.as_tensor(init, dtype=torch.float64)
        if not torch.all(init > floor):
            raise ValueError(f"PositiveParameter: initial value(s) must exceed {floor}, got {init.tolist()}")
        self.floor = floor
        raw = raw_from_positive(init, floor)
        if learnable:
            self.raw = nn.Parameter(raw)
        else:
            self.register_buffer("raw", raw)

    def forward(self) -> Tensor:
        return positive_from_raw(self.raw, self.floor)

    @torch.no_grad()
    def set(self, value) -> None:
        """Set the positive value in place (keeps dtype and device)."""
        value = torch.as_tensor(value, dtype=self.raw.dtype, device=self.raw.device).expand_as(self.raw)
        self.raw.copy_(raw_from_positive(value, self.floor))

    def extra_repr(self) -> str:
        v = self().detach()
        return f"value={v.tolist() if v.numel() <= 8 else tuple(v.shape)}"

