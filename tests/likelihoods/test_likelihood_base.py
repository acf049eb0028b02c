"""The base class's template method (``Likelihood.log_prob`` checks shapes, subclasses implement
``_log_prob``), the path for classes that still override ``log_prob`` themselves, and the one
Gaussian log-density of ``likelihoods.densities``."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from numpy.polynomial.hermite_e import hermegauss
from scipy import stats

from likelihoods import GPRN, Gaussian, Likelihood, MultiGaussian, Seismic, WarpedGaussian
from likelihoods.base import log_prob_checked
from likelihoods.densities import LOG_2PI, gaussian_log_density
from savigp.estimators import checked_log_prob


class _Flat(Likelihood):
    """log p = -|y - f| summed over Q = 2 latents; ``bad`` makes it return a wrong shape."""

    num_latent, output_dim = 2, 1

    def __init__(self, bad: bool = False):
        super().__init__()
        self.bad = bad

    def _log_prob(self, y, f):
        out = -(y - f).abs().sum(-1)
        return out.unsqueeze(-1) if self.bad else out


class _Legacy(Likelihood):
    """Code written before the template: overrides ``log_prob`` itself."""

    def __init__(self, bad: bool = False):
        super().__init__()
        self.bad = bad

    def log_prob(self, y, f):
        out = -(y[:, 0] - f[..., 0]) ** 2
        return out.unsqueeze(-1) if self.bad else out


class _LegacyOnTopOfGaussian(Gaussian):
    """Overrides ``log_prob`` and calls the built-in's through ``super()`` (no recursion)."""

    def log_prob(self, y, f):
        return super().log_prob(y, f) + 1.0


def test_template_calls_the_subclass_and_keeps_leading_axes():
    y, f = torch.randn(4, 1), torch.randn(3, 5, 4, 2)
    out = _Flat().log_prob(y, f)
    assert out.shape == (3, 5, 4)
    torch.testing.assert_close(out, -(y - f).abs().sum(-1), rtol=0, atol=0)


@pytest.mark.parametrize("y_shape, f_shape, match", [
    ((4, 1), (3, 4, 3), r"_Flat reads Q=2 latent functions but f has shape \(3, 4, 3\); expected \(\.\.\., B, 2\) "
                        r"for y of shape \(4, 1\)"),
    ((4,), (3, 4, 2), r"_Flat\.log_prob: expected y of shape \(B, 1\) and f of shape \(\.\.\., B, 2\) with the same B, "
                      r"got y of shape \(4,\) and f of shape \(3, 4, 2\)"),
    ((4, 2), (4, 2), r"expected y of shape \(B, 1\).*got y of shape \(4, 2\)"),
    ((4, 1), (3, 5, 2), r"with the same B, got y of shape \(4, 1\) and f of shape \(3, 5, 2\)"),
    ((4, 1), (2,), r"got y of shape \(4, 1\) and f of shape \(2,\)"),
])
def test_wrong_input_shapes_name_the_class_both_shapes_and_the_expected_ones(y_shape, f_shape, match):
    with pytest.raises(ValueError, match=match):
        _Flat().log_prob(torch.zeros(y_shape), torch.zeros(f_shape))


def test_wrong_output_shape_is_reported_once_by_the_base():
    with pytest.raises(ValueError, match=r"_Flat\.log_prob returned shape \(3, 4, 1\) for y of shape \(4, 1\) and f of "
                                         r"shape \(3, 4, 2\); expected \(3, 4\)"):
        _Flat(bad=True).log_prob(torch.zeros(4, 1), torch.zeros(3, 4, 2))


def test_a_class_without_an_implementation_says_what_to_implement():
    with pytest.raises(NotImplementedError, match=r"_Bare must implement _log_prob\(y, f\)"):
        type("_Bare", (Likelihood,), {})().log_prob(torch.zeros(2, 1), torch.zeros(2, 1))


def test_classes_that_override_log_prob_keep_working_and_are_still_checked():
    y, f = torch.randn(4, 1), torch.randn(3, 4, 1)
    for check in (log_prob_checked, checked_log_prob):
        torch.testing.assert_close(check(_Legacy(), y, f), -(y[:, 0] - f[..., 0]) ** 2, rtol=0, atol=0)
        with pytest.raises(ValueError, match=r"_Legacy\.log_prob returned shape \(3, 4, 1\) .* expected \(3, 4\)"):
            check(_Legacy(bad=True), y, f)
        with pytest.raises(ValueError, match=r"_Legacy reads Q=1 latent functions but f has shape \(3, 4, 2\)"):
            check(_Legacy(), y, torch.zeros(3, 4, 2))
    torch.testing.assert_close(log_prob_checked(_LegacyOnTopOfGaussian(), y, f), Gaussian().log_prob(y, f) + 1.0)


# ====================================================================== the Gaussian log-density
def test_gaussian_log_density_against_scipy():
    g = torch.Generator().manual_seed(0)
    y, mean, var = torch.randn(7, generator=g), torch.randn(5, 7, generator=g), torch.rand(7, generator=g) + 0.05
    ref = stats.norm.logpdf(y.numpy(), loc=mean.numpy(), scale=np.sqrt(var.numpy()))
    np.testing.assert_allclose(gaussian_log_density(y, mean, var).numpy(), ref, rtol=1e-12, atol=1e-14)
    assert LOG_2PI == math.log(2 * math.pi)


def test_expected_gaussian_log_density_against_quadrature():
    """E_{m ~ N(mu, v)}[log N(y; m, s)] by 20-point Gauss-Hermite quadrature (exact for this
    quadratic in m up to rounding)."""
    g = torch.Generator().manual_seed(1)
    y, mu = torch.randn(6, generator=g), torch.randn(6, generator=g)
    v, s = torch.rand(6, generator=g) + 0.1, torch.rand(6, generator=g) + 0.2
    x, w = hermegauss(20)
    w = w / w.sum()
    m = mu.numpy()[:, None] + np.sqrt(v.numpy())[:, None] * x
    ref = (w * stats.norm.logpdf(y.numpy()[:, None], loc=m, scale=np.sqrt(s.numpy())[:, None])).sum(-1)
    np.testing.assert_allclose(gaussian_log_density(y, mu, s, v).numpy(), ref, rtol=1e-12, atol=1e-13)


def test_the_likelihoods_give_the_formulas_they_wrote_out_before_bit_for_bit():
    """The five likelihoods that wrote the density out now call the helper: same values, exactly."""
    g = torch.Generator().manual_seed(2)
    y1, f1 = torch.randn(5, 1, generator=g), torch.randn(3, 5, 1, generator=g)
    lik = Gaussian(variance=0.3)
    var = lik.variance()
    assert torch.equal(lik.log_prob(y1, f1), -0.5 * (LOG_2PI + torch.log(var)) - 0.5 * (y1[:, 0] - f1[..., 0]) ** 2 / var)
    m, v = torch.randn(3, 5, 1, generator=g), torch.rand(3, 5, 1, generator=g)
    assert torch.equal(lik.expected_log_prob(y1, m, v),
                       -0.5 * (LOG_2PI + torch.log(var)) - 0.5 * ((y1[:, 0] - m[..., 0]) ** 2 + v[..., 0]) / var)

    lik = WarpedGaussian()
    t, dt = lik.warp(y1[:, 0])
    var = lik.variance()
    assert torch.equal(lik.log_prob(y1, f1),
                       -0.5 * (LOG_2PI + torch.log(var)) - 0.5 * (t - f1[..., 0]) ** 2 / var + torch.log(dt))

    y3, f3 = torch.randn(5, 3, generator=g), torch.randn(2, 5, 3, generator=g)
    lik = MultiGaussian(3, variance=[0.2, 0.5, 1.5])
    var = lik.variance()
    assert torch.equal(lik.log_prob(y3, f3), (-0.5 * (LOG_2PI + torch.log(var)) - 0.5 * (y3 - f3) ** 2 / var).sum(-1))

    lik = GPRN(num_outputs=3, num_nodes=2)
    fg = torch.randn(2, 5, 8, generator=g)
    var, r = lik.variance(), y3 - lik.mix(fg)
    assert torch.equal(lik.log_prob(y3, fg), (-0.5 * (LOG_2PI + torch.log(var)) - 0.5 * r * r / var).sum(-1))

    lik = Seismic(num_layers=2, noise_std=[0.05, 0.1])
    ys, fs = torch.rand(5, 2, generator=g) + 1.0, torch.rand(2, 5, 4, generator=g) + 0.5
    var, r = lik.noise_variance(), ys - lik.travel_times(fs)
    assert torch.equal(lik.log_prob(ys, fs), (-0.5 * (LOG_2PI + torch.log(var)) - 0.5 * r * r / var).sum(-1))
