"""The likelihood's own closed form of the expected log-likelihood, ``"closed-form"`` (Bonilla et al. 2019,
eq. (24); e.g. the Gaussian's):

    E_{N(f_n; b_kn, diag s2_kn)}[log p(y_n | f_n)] = likelihood.expected_log_prob(y, b, s2),

exact and deterministic. It reads the per-latent marginals only: on marginals coupled across the latent
functions, N(b_n, C_n), it is the exact expectation only when log p(y_n | f_n) is a sum of functions of one
f_nj each (the likelihood declares ``separable_latents``, or has one latent function); for a likelihood that
couples them it would drop the cross-covariances, and the estimator refuses
(:meth:`~savigp.estimators.base.Estimator.refusal`).
"""
from __future__ import annotations

from .base import ELLEstimate, Estimator
from .sampling import weighted_sum


class ClosedForm(Estimator):
    """``"closed-form"``: the likelihood's ``expected_log_prob`` of the per-latent marginals."""

    name = "closed-form"
    summary = "the likelihood's exact expected log-likelihood"
    needs_closed_form = True
    takes_coupled_marginals = True
    sees_coupled_marginals = False
    monte_carlo = False

    def factorized(self, likelihood, y, marginals, *, num_samples, scale, generator):
        K, B, _ = marginals.shape
        per = likelihood.expected_log_prob(y, marginals.mean, marginals.var)
        if tuple(per.shape) != (K, B):
            raise ValueError(f"{type(likelihood).__name__}.expected_log_prob returned shape {tuple(per.shape)}, "
                             f"expected {(K, B)}")
        return ELLEstimate(weighted_sum(marginals.weights(), per, scale), per.detach(), 0.0)

    def coupled(self, likelihood, y, marginals, *, num_samples, scale, generator):
        """The per-latent marginals' closed form (``marginals.var`` is the diagonal of C_n), exact for a
        separable likelihood (checked before the call)."""
        return self.factorized(likelihood, y, marginals, num_samples=num_samples, scale=scale, generator=generator)
