"""Seismic inversion likelihood: two-way reflection times from layer depths and velocities
(Bonilla et al. 2019, §9.8, eq. (43); Bonilla et al., 2016).

At each site n there are P interfaces. With layer depths d_n1 < ... < d_nP (d_n0 = 0) and
propagation velocities v_n1, ..., v_nP, the two-way travel time to interface p is

    g_np = 2 (d_n1 / v_n1)                                   for p = 1,
    g_np = 2 (d_np - d_n(p-1)) / v_np + g_n(p-1)             for 1 < p <= P,

i.e. g_np = 2 sum_{j <= p} (d_nj - d_n(j-1)) / v_nj, and the observed times are

    y_np = g_np + eps_np,   eps_np ~ N(0, sigma_p^2) independently,
    log p(y_n | f_n) = sum_p log N(y_np; g_np, sigma_p^2).

Eq. (43) as printed adds the previous *observed* time y_n(p-1) where this module adds the previous
*noiseless* time g_n(p-1); the latter is what the original implementation and the MCMC reference
(a Stan model) the paper compares against compute, and it keeps the noise of each interface
independent with the stated standard deviations (0.025, 0.05, 0.075, 0.1 s).

Latent layout (Q = 2P functions in the last axis of f):

    f[..., 0:P]     depths d_1, ..., d_P, in units of ``depth_scale`` (physical d = depth_scale * f)
    f[..., P:2P]    velocities v_1, ..., v_P, in units of ``velocity_scale``

The original code modelled depths and velocities divided by 10 (``depth_scale = velocity_scale =
10``). Velocities are divided by: q(f) must keep them well away from zero (the paper's prior has
means of 1950-3650 m/s and 10% standard deviations).
"""
from __future__ import annotations

import math
from typing import Sequence, Union

import torch
from torch import Tensor

from .base import Likelihood, bad_rows_message
from .densities import gaussian_log_density
from .parameters import PositiveParameter


class Seismic(Likelihood):
    """Two-way travel times of P interfaces from P depths and P velocities. P outputs, Q = 2P.

    Args:
        num_layers: P >= 1, the number of layers (interfaces).
        noise_std: observation noise standard deviations sigma_p (seconds): one number or P numbers.
        depth_scale: physical depth per unit of the depth latents.
        velocity_scale: physical velocity per unit of the velocity latents.
        learn_noise: learn the noise variances (fixed by default, as in the paper).
    """

    task = "regression"

    def __init__(
        self,
        num_layers: int = 4,
        noise_std: Union[float, Sequence[float]] = (0.025, 0.05, 0.075, 0.1),
        depth_scale: float = 1.0,
        velocity_scale: float = 1.0,
        learn_noise: bool = False,
    ):
        super().__init__()
        if int(num_layers) != num_layers or int(num_layers) < 1:
            raise ValueError(f"Seismic: num_layers must be an integer >= 1, got {num_layers!r}")
        P = int(num_layers)
        for name, v in (("depth_scale", depth_scale), ("velocity_scale", velocity_scale)):
            if not (math.isfinite(float(v)) and float(v) > 0):
                raise ValueError(f"Seismic: {name} must be a finite number > 0, got {v!r}")
        std = torch.as_tensor(noise_std, dtype=torch.get_default_dtype()).reshape(-1)
        if std.numel() == 1:
            std = std.expand(P).clone()
        if std.numel() != P or not bool((std > 0).all()):
            raise ValueError(f"Seismic: noise_std must be one or {P} numbers > 0, got {std.tolist()}")
        self.num_layers = P
        self.output_dim = P
        self.num_latent = 2 * P
        self.depth_scale = float(depth_scale)
        self.velocity_scale = float(velocity_scale)
        self.noise_variance = PositiveParameter(std * std, floor=1e-12, learnable=learn_noise)

    def split(self, f: Tensor) -> tuple[Tensor, Tensor]:
        """Physical depths and velocities from latent values ``f`` ``(..., B, 2P)``: each ``(..., B, P)``."""
        if f.shape[-1] != self.num_latent:
            raise ValueError(
                f"Seismic(num_layers={self.num_layers}): f must have Q = 2P = {self.num_latent} latent "
                f"values in its last axis (P depths, then P velocities), got f of shape {tuple(f.shape)}"
            )
        P = self.num_layers
        return self.depth_scale * f[..., :P], self.velocity_scale * f[..., P:]

    def travel_times(self, f: Tensor) -> Tensor:
        """Noiseless two-way travel times g for ``f`` ``(..., B, 2P)``: ``(..., B, P)``."""
        depth, velocity = self.split(f)
        thickness = torch.diff(depth, dim=-1, prepend=torch.zeros_like(depth[..., :1]))
        return 2 * torch.cumsum(thickness / velocity, dim=-1)

    def _log_prob(self, y: Tensor, f: Tensor) -> Tensor:
        """log p(y_n | f_n) for times ``y`` ``(B, P)`` and ``f`` ``(..., B, 2P)``: ``(..., B)``."""
        return gaussian_log_density(y.to(f), self.travel_times(f), self.noise_variance().to(f)).sum(dim=-1)

    def conditional_moments(self, f: Tensor) -> tuple[Tensor, Tensor]:
        """E[y | f] = g (travel times) and Var[y | f] = sigma^2, each ``(..., B, P)``."""
        g = self.travel_times(f)
        return g, self.noise_variance().to(f).expand_as(g)

    def validate_targets(self, y: Tensor) -> None:
        super().validate_targets(y)
        msg = bad_rows_message(~torch.isfinite(y), y, "are not finite")
        if msg:
            raise ValueError(f"Seismic likelihood: {msg}")

    def extra_repr(self) -> str:
        std = self.noise_variance().detach().sqrt().tolist()
        return (
            f"num_layers={self.num_layers}, noise_std={[round(s, 6) for s in std]}, "
            f"depth_scale={self.depth_scale}, velocity_scale={self.velocity_scale}"
        )
