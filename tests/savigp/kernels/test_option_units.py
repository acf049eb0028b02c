"""Each kernel family declares the units of its options once (``option_units``): the builders give a
data-scaled default length-scale only where the length-scale is in the inputs' units, and the
command line carries options into standardized inputs by the same declaration (issue 57, item 3)."""
import math

import pytest
import torch

import savigp
from likelihoods import Gaussian
from savigp._choices import KERNELS
from savigp.kernels import Periodic, RBF
from savigp.kernels.spec import build_kernel, default_lengthscale


def _years(n=240):
    return (1950 + torch.arange(n, dtype=torch.float64) / 12)[:, None]  # 20 years of months: std ~5.8


def test_every_registered_family_declares_known_units():
    for name in KERNELS.names():
        units = KERNELS[name].option_units
        assert isinstance(units, dict), name
        assert set(units.values()) <= {"scale", "offset", "variance", "none"}, (name, units)


def test_a_periodic_length_scale_has_no_units_and_is_not_given_the_columns_spread():
    X = _years()
    k = build_kernel({"sum": [{"kernel": "rbf"}, {"product": [{"kernel": "periodic", "period": 1.0}, {"kernel": "rbf"}]}]},
                     1, 1, lengthscale=default_lengthscale(X), inputs=X)
    periodic = [m for m in k.modules() if isinstance(m, Periodic)]
    rbfs = [m for m in k.modules() if isinstance(m, RBF)]
    std = float(X.std())
    assert len(periodic) == 1 and len(rbfs) == 2
    assert float(periodic[0].lengthscales().detach()) == pytest.approx(1.0)  # the class default: relative to sin(pi d / p)
    for r in rbfs:  # length-scales in years: the column's spread
        assert float(r.lengthscales().detach()) == pytest.approx(std, rel=1e-9)


def test_a_periodic_part_of_an_expression_keeps_its_season_in_raw_years():
    """In years (std ~5.8), the periodic part's length-scale at the column's spread made the kernel
    nearly constant (exp(-2 sin^2 / 34)): the season started almost invisible. At 1 it varies
    over each year by a factor exp(-2) from peak to trough."""
    X = _years()
    Y = torch.sin(2 * math.pi * X)
    m = savigp.SAVIGP(X, Y, Gaussian(0.1),
                      kernel="periodic(0, period=1)", num_inducing=20, seed=0)
    K = m.kernel(X[:13], X[:13]).detach()[0]  # one year of months
    assert float(K[0, 6] / K[0, 0]) < math.exp(-1.5)  # half a period away: well below the peak

