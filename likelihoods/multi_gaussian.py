"""Independent multi-output Gaussian likelihood with one noise variance per output (Bonilla et al. 2019, §9.3.1
for one output; eq. (1) for the factorization).

P outputs, one latent function per output (Q = P):

    log p(y_n | f_n) = sum_p log N(y_np; f_np, sigma_p^2)
                     = sum_p [-1/2 log(2 pi sigma_p^2) - (y_np - f_np)^2 / (2 sigma_p^2)].

Its expected log-likelihood under q(f_n) = N(m, diag v) has the closed form

    E_q[log p(y_n | f_n)] = sum_p [-1/2 log(2 pi sigma_p^2) - ((y_np - m_p)^2 + v_p) / (2 sigma_p^2)],

which the engine uses by default. Missing targets (NaN) are not supported: they are rejected.
"""
from __future__ import annotations

from typing import Sequence, Union

import torch
from torch import Tensor

from .base import Likelihood, bad_rows_message
from .densities import gaussian_log_density
from .parameters import PositiveParameter


class MultiGaussian(Likelihood):
    """y_np = f_np + eps_np, eps_np ~ N(0, sigma_p^2) independently. Q = P = ``num_outputs``.

    Args:
        num_outputs: P >= 1.
        variance: initial noise variance(s) sigma_p^2 > 0: one number for all outputs or P numbers.
        learn_variance: learn the P variances with their own gradient (Bonilla et al. 2019, App. D.2).
    """

    #: log p(y_n | f_n) = sum_p log N(y_np; f_np, sigma_p^2): one latent function per term
    separable_latents = True
    #: y_p = f_p + eps_p: the posterior over f is Gaussian
    conjugate = True

    task = "regression"

    def __init__(self, num_outputs: int, variance: Union[float, Sequence[float]] = 1.0, learn_variance: bool = True):
        super().__init__()
        if int(num_outputs) != num_outputs or int(num_outputs) < 1:
            raise ValueError(f"MultiGaussian: num_outputs must be an integer >= 1, got {num_outputs!r}")
        P = int(num_outputs)
        self.num_latent = P
        self.output_dim = P
        init = torch.as_tensor(variance, dtype=torch.get_default_dtype()).reshape(-1)
        if init.numel() == 1:
            init = init.expand(P).clone()
        if init.numel() != P:
            raise ValueError(f"MultiGaussian: variance must be one number or {P} numbers, got {init.tolist()}")
        self.variance = PositiveParameter(init, floor=1e-8, learnable=learn_variance)

    @property
    def num_outputs(self) -> int:
        """P, the constructor's ``num_outputs`` (what a model file records to rebuild this likelihood)."""
        return self.output_dim

    def _check(self, y: Tensor, f: Tensor) -> None:
        if f.shape[-1] != self.num_latent or y.shape[-1] != self.output_dim:
            raise ValueError(
                f"MultiGaussian({self.output_dim}): expected y (B, {self.output_dim}) and f (..., B, "
                f"{self.num_latent}), got y {tuple(y.shape)} and f {tuple(f.shape)}"
            )

    def _log_prob(self, y: Tensor, f: Tensor) -> Tensor:
        """log p(y_n | f_n) for ``y`` ``(B, P)`` and ``f`` ``(..., B, P)``: ``(..., B)``."""
        return gaussian_log_density(y.to(f), f, self.variance().to(f)).sum(dim=-1)

    def expected_log_prob(self, y: Tensor, mean: Tensor, var: Tensor) -> Tensor:
        """Closed-form E_{N(f; mean, diag var)}[log p(y | f)]; ``mean``, ``var`` ``(..., B, P)`` -> ``(..., B)``."""
        self._check(y, mean)
        noise = self.variance().to(mean)
        return gaussian_log_density(y.to(mean), mean, noise, var).sum(dim=-1)

    def conditional_moments(self, f: Tensor) -> tuple[Tensor, Tensor]:
        """E[y | f] = f and Var[y | f] = sigma^2, each ``(..., B, P)``."""
        return f, self.variance().to(f).expand_as(f)

    def validate_targets(self, y: Tensor) -> None:
        super().validate_targets(y)
        msg = bad_rows_message(~torch.isfinite(y), y, "are not finite (missing outputs are not supported)")
        if msg:
            raise ValueError(f"MultiGaussian likelihood: {msg}")

    def extra_repr(self) -> str:
        return f"num_outputs={self.output_dim}, variance={self.variance().detach().tolist()}"
