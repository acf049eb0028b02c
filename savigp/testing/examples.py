"""Example user likelihoods written as plain functions ``log_lik(y, f, **params)`` for
:class:`likelihoods.CallableLikelihood`: ``y`` of shape ``(B, P)``, ``f`` of shape ``(..., B, Q)``,
returning ``(..., B)``. The test suite and the experiments use these one definitions; they are
also ready-made inputs for :func:`savigp.testing.check_likelihood`.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from scipy import special, stats


def nb_numpy(y, f, r):
    """Negative binomial counts with mean exp(f) and dispersion r (numpy):

        log p(y | f) = lgamma(y + r) - lgamma(r) - lgamma(y + 1) + r log(r / (r + mu)) + y log(mu / (r + mu)),

    mu = exp(f). ``y (B, 1)``, ``f (..., B, 1)`` -> ``(..., B)``."""
    mu = np.exp(f[..., 0])
    y = y[:, 0]
    return (special.gammaln(y + r) - special.gammaln(r) - special.gammaln(y + 1)
            + r * np.log(r / (r + mu)) + y * np.log(mu / (r + mu)))


def nb_torch(y, f, r):
    """:func:`nb_numpy` in torch (differentiable in f and r)."""
    mu = torch.exp(f[..., 0])
    y = y[:, 0]
    return (torch.lgamma(y + r) - torch.lgamma(r) - torch.lgamma(y + 1)
            + r * torch.log(r / (r + mu)) + y * torch.log(mu / (r + mu)))


def nb_dlogp_dr(y, f, r):
    """The closed-form derivative of :func:`nb_numpy` in r (digamma terms), ``(..., B)``."""
    mu = np.exp(f[..., 0])
    y = y[:, 0]
    return special.digamma(y + r) - special.digamma(r) + np.log(r / (r + mu)) + (mu - y) / (r + mu)


def ordinal_numpy(y, f, c0, gaps):
    """Ordinal probit over labels 0..3 with cut-points c0, c0 + gaps[0], c0 + gaps[0] + gaps[1]:
    log(Phi(b_k - f) - Phi(a_k - f)) for label k, written naively (it underflows to -inf far out,
    which ``CallableLikelihood(min_log_prob=...)`` floors)."""
    cuts = np.concatenate([[-np.inf, c0], c0 + np.cumsum(gaps), [np.inf]])
    k = y[:, 0].astype(int)
    f0 = f[..., 0]
    with np.errstate(divide="ignore"):
        return np.log(stats.norm.cdf(cuts[k + 1] - f0) - stats.norm.cdf(cuts[k] - f0))


def ordinal_torch(y, f, c0, gaps):
    """:func:`ordinal_numpy` in torch (differentiable in f, c0 and gaps)."""
    cuts = torch.cat([c0.reshape(1), c0 + torch.cumsum(gaps, 0)])
    lo = torch.cat([cuts.new_full((1,), -math.inf), cuts])
    hi = torch.cat([cuts, cuts.new_full((1,), math.inf)])
    k = y[:, 0].long()
    n = torch.distributions.Normal(0.0, 1.0)
    return torch.log(n.cdf(hi[k] - f[..., 0]) - n.cdf(lo[k] - f[..., 0]))


def probit_numpy(y, f):
    """Binary probit with labels {0, 1}: log Phi((2y - 1) f)."""
    return stats.norm.logcdf((2 * y[:, 0] - 1) * f[..., 0])


def lognormal_numpy(y, f, s):
    """Log-normal survival times with median exp(f) and log-scale s, as a statistician writes it
    in numpy (it reads the learned s with numpy, so it cannot be handed tensors that require a
    gradient):

        log p(y | f) = -log y - log s - log(2 pi) / 2 - (log y - f)^2 / (2 s^2).

    ``y (B, 1)`` (positive), ``f (..., B, 1)`` -> ``(..., B)``."""
    z = (np.log(y[:, 0]) - f[..., 0]) / s
    return -np.log(y[:, 0]) - np.log(s) - 0.5 * np.log(2 * np.pi) - 0.5 * z ** 2


def lognormal_dlogp_ds(y, f, s):
    """The closed-form derivative of :func:`lognormal_numpy` in s: (z^2 - 1) / s, ``(..., B)``."""
    z = (np.log(y[:, 0]) - f[..., 0]) / s
    return (z ** 2 - 1.0) / s


def censored_lognormal_numpy(y, f, s):
    """Right-censored log-normal survival times: y = (t, d) with d = 1 when the event was seen at
    t and d = 0 when the row was censored at t (the event came later), as in statsmodels'
    ``heart`` (survival, censors); z = (log t - f) / s:

        log p(t, d = 1 | f) = -log t - log s - log(2 pi) / 2 - z^2 / 2     (the density of t)
        log p(t, d = 0 | f) = log P(T > t | f) = log(1 - Phi(z))            (its survival function)

    ``y (B, 2)``, ``f (..., B, 1)`` -> ``(..., B)``."""
    t, d = y[:, 0], y[:, 1]
    z = (np.log(t) - f[..., 0]) / s
    event = -np.log(t) - np.log(s) - 0.5 * np.log(2 * np.pi) - 0.5 * z ** 2
    return np.where(d == 1, event, stats.norm.logsf(z))
