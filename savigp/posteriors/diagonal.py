"""Diagonal Gaussians in whitened coordinates (``posterior="diag-whitened"``): a mixture of K >= 1
components with diagonal S_kj over v = L_zz^-1 (u - mu) (Bonilla et al. 2019, §6.2, whitened)."""
from __future__ import annotations

from .mixture import MixtureFamily


class DiagonalMixture(MixtureFamily):
    """K >= 1 components with diagonal covariances *in whitened coordinates*: q(v) diagonal, so
    q(u) has covariances L_zz S_kj L_zz^T (full). Cheaper steps than :class:`UDiagonalMixture`
    (the fused whitened path) but not the paper's "mog" family; ``posterior="diag-whitened"``."""

    kind = "diag-whitened"
    covariance_diagonal = True
