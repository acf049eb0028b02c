"""Inputs with a large common offset: kernel matrices and fitted models equal the centred ones
(savigp/kernels/stationary.py computes distances from centred inputs)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import likelihoods
from savigp import SAVIGP, fit
from savigp.kernels.stationary import RBF, Matern32


@pytest.mark.parametrize("dtype, offset", [(torch.float32, 1e4), (torch.float64, 1e8)])
@pytest.mark.parametrize("kernel_cls", [RBF, Matern32])
def test_kernel_matrix_does_not_depend_on_a_common_offset(dtype, offset, kernel_cls):
    g = torch.Generator().manual_seed(0)
    u1 = 6 * torch.rand(40, 2, generator=g, dtype=torch.float64) - 3
    u2 = 6 * torch.rand(30, 2, generator=g, dtype=torch.float64) - 3
    x1, x2 = (offset + u1).to(dtype), (offset + u2).to(dtype)  # what the model holds
    k = kernel_cls(2, 1, lengthscale=[1.3, 0.7]).to(dtype)
    # reference: the same (rounded) inputs, the offset removed exactly in float64, float64 kernel
    ref = kernel_cls(2, 1, lengthscale=[1.3, 0.7])(x1.double() - offset, x2.double() - offset)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    assert (k(x1, x2).double() - ref).abs().max() < tol
    assert (k(x1, x1).double() - kernel_cls(2, 1, lengthscale=[1.3, 0.7])(x1.double() - offset, x1.double() - offset)).abs().max() < tol


def _fit(X, Y, dtype):
    model = SAVIGP(X, Y, likelihoods.Gaussian(variance=0.1), num_inducing=12, inducing_init="subset", dtype=dtype, seed=0)
    fit(model, iterations=150, lr=0.05, progress=False, seed=0)
    return model


@pytest.mark.parametrize("dtype, offset, tol", [(torch.float32, 1e4, 0.01), (torch.float64, 1e8, 1e-4)])
def test_fit_at_an_offset_equals_the_centred_fit(dtype, offset, tol):
    """x = offset + U(-3, 3): SSE of the fit equals the centred fit's (the issue measured 0.926
    against 0.016 at 1e4 in float32, and a CholeskyError at 1e8 in float64)."""
    rng = np.random.default_rng(0)
    u = rng.uniform(-3, 3, (120, 1))
    y = np.sin(2 * u) + 0.1 * rng.standard_normal((120, 1))
    ut = np.linspace(-2.9, 2.9, 50)[:, None]
    yt = np.sin(2 * ut)
    centred = _fit(u, y, dtype)
    shifted = _fit(offset + u, y, dtype)
    m_c = centred.predict(ut).mean.double().numpy()
    m_s = shifted.predict(offset + ut).mean.double().numpy()
    sse_c = float(((m_c - yt) ** 2).mean() / yt.var())
    sse_s = float(((m_s - yt) ** 2).mean() / yt.var())
    assert sse_c < 0.05, sse_c
    assert abs(sse_s - sse_c) < tol and np.abs(m_s - m_c).max() < 10 * tol, (sse_s, sse_c, np.abs(m_s - m_c).max())


def test_a_linear_part_of_an_expression_starts_at_its_columns_mean_and_scale():
    """``linear(0) + rbf(0)`` on calendar years fits as it does on the same years centred: a linear
    part whose offset and variance the expression leaves out starts at its column's mean and at one
    over its variance (Linear.initial_from_data), as the kernel search's do. From offset 0 and
    variance 1, ``linear(t)`` on calendar years trained to ELBO -2.1e7 (issue 57)."""
    import savigp
    from likelihoods import Gaussian

    g = torch.Generator().manual_seed(0)
    years = 1950 + 50 * torch.rand(120, 1, generator=g, dtype=torch.float64)
    y = 0.03 * (years - 1975) + torch.sin(years) + 0.1 * torch.randn(120, 1, generator=g, dtype=torch.float64)
    elbos = []
    for x in (years, years - 1975.0):
        m = savigp.SAVIGP(x, y, Gaussian(0.1), kernel="linear(0) + rbf(0)", num_inducing=15, seed=0)
        savigp.fit(m, iterations=60, lr=0.05, estimator="closed-form", progress=False, final_elbo=False)
        elbos.append(float(m.elbo(None, estimator="closed-form").elbo.detach()))
    assert elbos[0] == pytest.approx(elbos[1], rel=1e-6, abs=1e-6), elbos
