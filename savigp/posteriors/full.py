"""Full-covariance Gaussians over the whitened inducing values (Bonilla et al. 2019, §4.3):
S_kj = L_kj L_kj^T through lower Cholesky factors with a positive (softplus) diagonal.

* :class:`FullGaussian` -- K = 1 (the paper's "fg"), with the exact entropy.
* :class:`FullMixture` -- K > 1 full Gaussians (eq. (8) in its general form).
"""
from __future__ import annotations

from .mixture import MixtureFamily, MixturePosterior


def _full_cost_terms(K: int, Q: int, M: int, B: int) -> tuple[int, int, float]:
    """K Q M^2 numbers for the factors L_kj; S_k V per mini-batch (K B Q M); K Q M^3 flops a step
    for the products with L_kj L_kj^T."""
    return K * Q * M * M, K * B * Q * M, float(K * Q * M ** 3)


class FullGaussian(MixturePosterior):
    """K = 1 Gaussian with full covariances S_j = L_j L_j^T (the paper's "fg")."""

    kind = "full"

    @classmethod
    def cost_terms(cls, num_components: int, num_latent: int, num_inducing: int, batch: int) -> tuple[int, int, float]:
        """Full covariances (see :meth:`Posterior.cost_terms`)."""
        return _full_cost_terms(num_components, num_latent, num_inducing, batch)

    def __init__(self, num_latent: int, num_inducing: int, init_scale: float = 1.0, **_):
        super().__init__(1, num_latent, num_inducing, diagonal=False, init_scale=init_scale)


class FullMixture(MixtureFamily):
    """K > 1 components with full covariances (Bonilla et al. 2019, eq. (8))."""

    kind = "full"
    default_components = 2

    @classmethod
    def cost_terms(cls, num_components: int, num_latent: int, num_inducing: int, batch: int) -> tuple[int, int, float]:
        """Full covariances (see :meth:`Posterior.cost_terms`)."""
        return _full_cost_terms(num_components, num_latent, num_inducing, batch)

    @classmethod
    def build(cls, num_latent: int, num_inducing: int, num_components: int = 1, **options) -> MixturePosterior:
        """``posterior="full"``: :class:`FullGaussian` for K = 1 (its exact entropy), else this mixture."""
        if num_components == 1:
            return FullGaussian(num_latent, num_inducing)
        return cls(num_latent, num_inducing, num_components, **options)
