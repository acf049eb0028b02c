"""Diagonal Gaussians in whitened coordinates (``posterior="diag-whitened"``): a mixture of K >= 1
components with diagonal S_kj over v = L_zz^-1 (u - mu) (Bonilla et al. 2019, §6.2, whitened)."""
from __future__ import annotations

import torch

from .mixture import MixturePosterior


class DiagonalMixture(MixturePosterior):
    """K >= 1 components with diagonal covariances *in whitened coordinates*: q(v) diagonal, so
    q(u) has covariances L_zz S_kj L_zz^T (full). Cheaper steps than :class:`UDiagonalMixture`
    (the fused whitened path) but not the paper's "mog" family; ``posterior="diag-whitened"``."""

    kind = "diag-whitened"

    def __init__(self, num_latent: int, num_inducing: int, num_components: int = 1, init_scale: float = 1.0,
                 mean_spread: float = 1.0, generator: torch.Generator | None = None, entropy: str = "bound",
                 entropy_samples: int = 64):
        super().__init__(num_components, num_latent, num_inducing, diagonal=True, init_scale=init_scale,
                         mean_spread=mean_spread, generator=generator, entropy=entropy,
                         entropy_samples=entropy_samples)
