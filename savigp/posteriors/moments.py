"""Setting a posterior family from the moments of q(u) that another posterior holds (a warm start).

A fitted posterior describes, per latent function j, a Gaussian q(u_j - mu_j) = N(m_j, C_j) with
C_j = F_j F_j^T (F_j lower triangular: L_zz F_v for the whitened full Gaussian of Bonilla et al.
2019, §4.3, so no factorization is needed). A family that cannot hold C_j keeps, in its own
coordinates x = A u (A = I for the diagonal mixture over u, A = L_zz^-1 for the whitened ones),
one of two diagonals of the covariance G = A C A^T of x:

* ``"mean-field"``: 1 / diag(G^-1), the variances of the best factorized Gaussian against
  N(A m, G) (the minimizer of KL(q || N), Bishop 2006, eq. (10.12)-(10.13)): for a Gaussian
  likelihood the ELBO at fixed hyper-parameters is log Z - KL(q(u) || q*(u)) (Titsias 2009), so
  these are the diagonal family's own optimum when the source is q*. With H = (A F)^-1 (a
  triangular inverse), diag(G^-1)_m = sum_i H_im^2.
* ``"marginal"``: diag(G), the marginal variances (moment matching, KL(N || q)); wider: by the
  factor by which the inducing values are determined by each other.

Shapes: means ``(Q, M)``, factors ``(Q, M, M)``, prior factor L_zz ``(Q, M, M)`` (``(1, M, M)`` for a kernel
shared by the latent functions: broadcast).
"""
from __future__ import annotations

import torch
from torch import Tensor

from likelihoods.parameters import inverse_softplus
from ._autograd import SCALE_FLOOR

#: the diagonals a factorized family may take from a full covariance (see the module docstring)
VARIANCE_RULES = ("mean-field", "marginal")



def check_moments(mean: Tensor, factor: Tensor, Lzz: Tensor, num_latent: int, num_inducing: int,
                  variances: str) -> None:
    """Raise a ValueError that names the argument, its shape and the shape expected."""
    Q, M = num_latent, num_inducing
    shared = isinstance(Lzz, Tensor) and Lzz.dim() == 3 and Lzz.shape[0] == 1  # one kernel for all Q (broadcast)
    for name, value, shape in (("mean", mean, (Q, M)), ("factor", factor, (Q, M, M)),
                               ("Lzz", Lzz, (1 if shared else Q, M, M))):
        if not isinstance(value, Tensor) or tuple(value.shape) != shape:
            got = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
            raise ValueError(f"{name} must have shape {shape} (Q={Q} latent functions, M={M} inducing values), "
                             f"got {got}")
    if variances not in VARIANCE_RULES:
        raise ValueError(f"variances must be one of {VARIANCE_RULES}, got {variances!r}")
    if not (torch.isfinite(mean).all() and torch.isfinite(factor).all()):
        raise ValueError("mean and factor must be finite (a source posterior with NaN or inf)")


def diagonal_variances(factor: Tensor, variances: str) -> Tensor:
    """``(Q, M)`` variances from lower factors ``(Q, M, M)`` of G = F F^T: diag(G) (``"marginal"``)
    or 1 / diag(G^-1) (``"mean-field"``, through the triangular inverse of F)."""
    if variances == "marginal":
        return (factor * factor).sum(-1)
    eye = torch.eye(factor.shape[-1], dtype=factor.dtype, device=factor.device).expand_as(factor)
    H = torch.linalg.solve_triangular(factor, eye, upper=False)
    return 1.0 / (H * H).sum(-2)


def raw_scale(sd: Tensor) -> Tensor:
    """The raw parameter r with softplus(r) + :data:`SCALE_FLOOR` = ``sd`` (sd at or below the floor:
    the smallest representable scale)."""
    return inverse_softplus((sd - SCALE_FLOOR).clamp_min(1e-300))
