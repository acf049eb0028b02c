"""The linear kernel with an offset, batched over the Q latent functions (Duvenaud et al. 2013, "LIN"):

    k(x, x') = s (x - c) . (x' - c)

over the active columns, with a variance s ``(Q,)`` and an offset c ``(Q, d)`` learned (unconstrained).
It is the covariance of f(x) = w . (x - c) with w ~ N(0, s I): Bayesian linear regression, whose
functions cross zero at c; add a :class:`~savigp.kernels.constant.Constant` for an intercept, and
multiply by another kernel for an amplitude that grows linearly. GPyTorch's ``LinearKernel`` is
this kernel with c = 0.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import Tensor

from .base import Hyper, Kernel


class Linear(Kernel):
    """k(x, x') = s (x - c) . (x' - c).

    Args:
        input_dim: D; num_latent: Q.
        variance: initial s, a float or ``(Q,)``.
        offset: initial c, a float, ``(d,)`` or ``(Q, d)`` (d the active columns).
        learn: learn the hyper-parameters (False fixes them).
        active_dims: the input columns the kernel reads (default all D).
    """

    hypers = (Hyper("variance", units="variance"), Hyper("offset", shape="columns", floor=None, units="offset"))
    starts_from_data, in_words = True, "trend"

    def __init__(self, input_dim: int, num_latent: int = 1, variance=1.0, offset=0.0, learn: bool = True,
                 active_dims: Optional[Sequence[int]] = None):
        super().__init__()
        self._set_inputs(input_dim, num_latent, active_dims)
        self._set_hypers(learn, variance=variance, offset=offset)

    @classmethod
    def initial_from_data(cls, columns: Tensor) -> dict:
        """The initial values of a linear part on ``columns`` ``(N, d)`` (its active input columns)
        that a spec leaves out: the offset c at the columns' means and the variance s at one over the
        sum of their variances, so that s (x - c) . (x - c) is about 1 over the data. From c = 0 and
        s = 1 a linear part of inputs far from 0 starts with a kernel matrix of order 1e6 and rank
        one: on calendar years ``linear(t)`` trained to ELBO -2.1e7 and a test NLPD of 7.55 (issue 57),
        and the kernel search's fit of one failed (CO2: ELBO -2343 against rbf's 519)."""
        c = columns.double().mean(0) if columns.shape[0] else torch.zeros(columns.shape[1], dtype=torch.float64)
        var = float(columns.double().var(0, unbiased=False).sum()) if columns.shape[0] > 1 else 0.0
        return {"offset": [float(v) for v in c], "variance": 1.0 / var if var > 0 else 1.0}

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        c = self.offset.unsqueeze(-2)  # (Q, 1, d)
        a = (x1 - c) * self.variance().sqrt()[:, None, None]  # (Q, N1, d)
        b = a if x2 is x1 else (x2 - c) * self.variance().sqrt()[:, None, None]
        return torch.bmm(a, b.transpose(-1, -2))

    def forward_diag(self, x: Tensor) -> Tensor:
        d = x - self.offset.unsqueeze(-2)
        return self.variance()[:, None] * (d * d).sum(-1)
