"""The reparameterization estimator of the expected log-likelihood, ``"reparam"`` (Bonilla et al. 2019, §5;
Kingma & Welling 2014): with f = b + C^(1/2) eps, eps ~ N(0, I),

    E_{q_k(f_n)}[log p(y_n | f_n)] ~= (1 / S) sum_s log p(y_n | b_kn + C_kn^(1/2) eps_s),

differentiated through f by autograd, so it needs log p differentiable in f (the likelihood's
``differentiable``). C^(1/2) is sqrt(s2) for factorized marginals and the lower Cholesky factor of C_n
for marginals coupled across the latent functions.
"""
from __future__ import annotations

from typing import ClassVar

import torch

from .base import ELLEstimate, Estimator
from .sampling import checked_log_prob, coupled_draws, factorized_draws, monte_carlo_stderr, weighted_sum


class Reparameterization(Estimator):
    """``"reparam"``: f = b + C^(1/2) eps, log p differentiated in f."""

    name = "reparam"
    summary = "gradients through f: the likelihood is differentiable"
    needs_differentiable_likelihood = True
    takes_coupled_marginals = True
    #: see :func:`~savigp.estimators.sampling.factorized_draws` (None: shared without gradients)
    common_draws: ClassVar[bool | None] = None

    def factorized(self, likelihood, y, marginals, *, num_samples, scale, generator):
        mean, var, weights = marginals.mean, marginals.var, marginals.weights()
        eps, common = factorized_draws(mean, num_samples, generator, self.common_draws)
        sd = torch.sqrt(var)
        values = checked_log_prob(likelihood, y, mean + sd * eps)  # (S, K, B), differentiable
        per = values.mean(0)
        return ELLEstimate(weighted_sum(weights, per, scale), per.detach(), monte_carlo_stderr(values, weights, scale, common))

    def coupled(self, likelihood, y, marginals, *, num_samples, scale, generator):
        mean, cov = marginals.mean[0], marginals.cov[0]  # (B, Q), (B, Q, Q)
        weights = mean.new_ones(1)
        eps, L = coupled_draws(mean, cov, num_samples, generator, self.name)  # (S, 1, B, Q), (B, Q, Q)
        f = mean + torch.matmul(L, eps.unsqueeze(-1)).squeeze(-1)  # (S, 1, B, Q)
        values = checked_log_prob(likelihood, y, f)  # (S, 1, B)
        per = values.mean(0)
        return ELLEstimate(weighted_sum(weights, per, scale), per.detach(), monte_carlo_stderr(values, weights, scale))
