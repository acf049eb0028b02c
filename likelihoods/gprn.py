"""Gaussian process regression network likelihood (Wilson et al., 2012; Bonilla et al. 2019, §9.4, Table 2).

P outputs are mixed from Q' latent node functions g(x) by a P x Q' matrix W(x) of latent weight
functions, all of them GPs, plus independent noise per output:

    y_n = W(x_n) g(x_n) + eps_n,   eps_np ~ N(0, sigma_p^2),
    log p(y_n | f_n) = sum_p log N(y_np; sum_q W_npq g_nq, sigma_p^2).

Latent layout (Q = Q'(P + 1) functions in the last axis of f):

    f[..., 0:Q']                      node functions g_1, ..., g_Q'
    f[..., Q' + p Q' + q]             weight W_pq (W row-major: p = 0..P-1 outputs, q = 0..Q'-1 nodes)

so that ``f[..., Q':].reshape(..., P, Q')`` is W. :meth:`GPRN.split` does this for you.

Since all latents are independent Gaussians under q(f_n) (diagonal covariance per component),
s_p = sum_q W_pq g_q has E[s_p] = sum_q mW_pq mg_q and Var[s_p] = sum_q (mW_pq^2 vg_q + mg_q^2 vW_pq
+ vW_pq vg_q), so the expected log-likelihood has the closed form

    E_q[log p(y_n | f_n)] = sum_p [-1/2 log(2 pi sigma_p^2) - ((y_np - E[s_p])^2 + Var[s_p]) / (2 sigma_p^2)].

It is offered as :meth:`GPRN.exact_expected_log_prob` (a reference for measuring the bias and
variance of the sampling estimators), deliberately *not* as the protocol's ``expected_log_prob``:
the exact ELBO is stationary at W = 0, g = 0 (every mean-gradient is a product with a zero mean),
so training from the usual zero-mean initialization with the closed form never moves the means,
whereas the paper's Monte Carlo estimators escape that saddle through their noise.
"""
from __future__ import annotations

from typing import Sequence, Union

import torch
from torch import Tensor

from .base import Likelihood, bad_rows_message
from .densities import gaussian_log_density
from .parameters import PositiveParameter


class GPRN(Likelihood):
    """Gaussian process regression network. P = ``num_outputs``, Q = ``num_nodes`` * (P + 1).

    Args:
        num_outputs: P >= 1.
        num_nodes: Q' >= 1, the number of node functions.
        variance: initial noise variance(s) sigma_p^2 > 0: one number for all outputs or P numbers.
        learn_variance: learn the P variances with their own gradient (Bonilla et al. 2019, App. D.2).
    """

    task = "regression"

    def __init__(
        self,
        num_outputs: int,
        num_nodes: int = 1,
        variance: Union[float, Sequence[float]] = 1.0,
        learn_variance: bool = True,
    ):
        super().__init__()
        for name, v in (("num_outputs", num_outputs), ("num_nodes", num_nodes)):
            if int(v) != v or int(v) < 1:
                raise ValueError(f"GPRN: {name} must be an integer >= 1, got {v!r}")
        self.num_outputs = P = int(num_outputs)
        self.num_nodes = Qn = int(num_nodes)
        self.output_dim = P
        self.num_latent = Qn * (P + 1)
        init = torch.as_tensor(variance, dtype=torch.get_default_dtype()).reshape(-1)
        if init.numel() == 1:
            init = init.expand(P).clone()
        if init.numel() != P:
            raise ValueError(f"GPRN: variance must be one number or {P} numbers, got {init.tolist()}")
        self.variance = PositiveParameter(init, floor=1e-8, learnable=learn_variance)

    def split(self, f: Tensor) -> tuple[Tensor, Tensor]:
        """Weights and nodes from latent values ``f`` ``(..., B, Q)``: W ``(..., B, P, Q')``, g ``(..., B, Q')``."""
        if f.shape[-1] != self.num_latent:
            raise ValueError(
                f"GPRN(P={self.num_outputs}, Q'={self.num_nodes}): f must have Q = Q'(P + 1) = "
                f"{self.num_latent} latent values in its last axis, got f of shape {tuple(f.shape)}"
            )
        Qn = self.num_nodes
        g = f[..., :Qn]
        W = f[..., Qn:].reshape(*f.shape[:-1], self.num_outputs, Qn)
        return W, g

    def mix(self, f: Tensor) -> Tensor:
        """The noiseless outputs W g for ``f`` ``(..., B, Q)``: ``(..., B, P)``."""
        W, g = self.split(f)
        return (W * g.unsqueeze(-2)).sum(dim=-1)

    def _log_prob(self, y: Tensor, f: Tensor) -> Tensor:
        """log p(y_n | f_n) for ``y`` ``(B, P)`` and ``f`` ``(..., B, Q)``: ``(..., B)``."""
        return gaussian_log_density(y.to(f), self.mix(f), self.variance().to(f)).sum(dim=-1)

    def exact_expected_log_prob(self, y: Tensor, mean: Tensor, var: Tensor) -> Tensor:
        """Exact E_{N(f; mean, diag var)}[log p(y | f)]; ``mean``, ``var`` ``(..., B, Q)`` -> ``(..., B)``.

        Not used by the engine by default (see the module docstring: zero means are a saddle of it).
        """
        mW, mg = self.split(mean)
        vW, vg = self.split(var)
        mg, vg = mg.unsqueeze(-2), vg.unsqueeze(-2)
        mean_s = (mW * mg).sum(dim=-1)
        var_s = (mW * mW * vg + mg * mg * vW + vW * vg).sum(dim=-1)
        noise = self.variance().to(mean)
        return gaussian_log_density(y.to(mean), mean_s, noise, var_s).sum(dim=-1)

    def conditional_moments(self, f: Tensor) -> tuple[Tensor, Tensor]:
        """E[y | f] = W g and Var[y | f] = sigma^2, each ``(..., B, P)``."""
        mean = self.mix(f)
        return mean, self.variance().to(f).expand_as(mean)

    def validate_targets(self, y: Tensor) -> None:
        super().validate_targets(y)
        msg = bad_rows_message(~torch.isfinite(y), y, "are not finite (missing outputs are not supported)")
        if msg:
            raise ValueError(f"GPRN likelihood: {msg}")

    def extra_repr(self) -> str:
        return (
            f"num_outputs={self.num_outputs}, num_nodes={self.num_nodes}, num_latent={self.num_latent}, "
            f"variance={self.variance().detach().tolist()}"
        )
