"""ODVFF ("Orthogonally Decoupled Variational Fourier Features", Azzimonti et al. 2020): a
:class:`~savigp.model.SAVIGP` whose covariance basis is the variational Fourier features of an additive
Matern kernel (Hensman et al. 2018; :mod:`savigp.kernels.fourier_features`) and whose mean basis is the
orthogonally decoupled inducing-point basis (:mod:`savigp.mean_heads`). It builds a model, so it lives
beside the model, not among the kernels (which know nothing of the model).
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from ._checks import writable
from .kernels.fourier_features import FourierFeatureKernel
from .model import SAVIGP


def odvff_model(X, Y, likelihood, *, nu: float = 1.5, num_frequencies: int, mean_basis_size: int,
                interval: Optional[Sequence] = None, margin: float = 0.5, lengthscale=None, variance=None,
                learn: bool = True, **model_options):
    """ODVFF (Azzimonti et al. 2020): a :class:`savigp.SAVIGP` with Fourier features as the covariance basis and the
    orthogonally decoupled inducing-point mean basis of size G = ``mean_basis_size``.

    Args:
        X: ``(N, D)``; Y: ``(N, P)``; likelihood: any.
        nu: 0.5, 1.5 or 2.5; num_frequencies: F per input (M = D (2F + 1)).
        interval: ``(lower, upper)``, each a float or ``(D,)``; default the range of X widened by
            ``margin`` times its width on each side.
        lengthscale, variance: initial values (default: the range of each input / 4, and
            1 / D per term); learn: learn them (False fixes them).
        model_options: passed to :class:`savigp.SAVIGP` (``posterior``, ``dtype``, ``device``, ``seed``, ...).
    """
    Xt = torch.as_tensor(writable(X), dtype=torch.float64)
    if Xt.dim() == 1:
        Xt = Xt[:, None]
    if Xt.dim() != 2:
        raise ValueError(f"odvff_model: X must have shape (N, D), got {tuple(Xt.shape)}")
    D = Xt.shape[1]
    if interval is None:
        lo, hi = Xt.min(0).values, Xt.max(0).values
        width = (hi - lo).clamp_min(1e-6)
        lo, hi = lo - margin * width, hi + margin * width
    else:
        lo, hi = (torch.as_tensor(v, dtype=torch.float64).expand(D) for v in interval)
    Q = int(likelihood.num_latent)
    kernel = FourierFeatureKernel(D, Q, nu, lower=lo, upper=hi, num_frequencies=num_frequencies,
                                  lengthscale=(hi - lo) / 4 if lengthscale is None else lengthscale,
                                  variance=1.0 / D if variance is None else variance, learn=learn)
    return SAVIGP(X, Y, likelihood, kernel, inducing_inputs=kernel.placeholder(), learn_inducing=False,
                  mean_basis_size=mean_basis_size, **model_options)
