"""Tests of every likelihood in ``likelihoods.__all__``.

``CASES`` is the registry: each exported concrete likelihood needs at least one entry, with a
numpy/scipy reference of its log density, a target sampler and examples of bad targets (the guard
test ``test_every_exported_likelihood_is_registered`` fails otherwise). The generic tests run on
every entry: log density against the reference (leading sample axes, float64, 1e-10 relative),
shapes and dtypes, Monte Carlo expected log-likelihood against Gauss-Hermite quadrature (within
4 Monte Carlo standard errors), closed forms against quadrature (1e-8), target validation,
positivity of constrained parameters, and gradients of the likelihood parameters. Family-specific
properties follow below the generic tests.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest
import torch
from scipy import integrate, special, stats

import likelihoods
from likelihoods import (
    GPRN,
    CallableLikelihood,
    Gaussian,
    Likelihood,
    Logistic,
    MultiGaussian,
    Poisson,
    Probit,
    Seismic,
    Softmax,
    StudentT,
    WarpedGaussian,
)
from likelihoods.parameters import PositiveParameter
from savigp.testing.quadrature import gauss_hermite

from conftest import DATA  # noqa: E402  (../shared/data)


# float64 by default: tests/conftest.py's autouse fixture

# ====================================================================== references (numpy / scipy)
def _norm(y, mean, var):
    return stats.norm.logpdf(y, loc=mean, scale=np.sqrt(var))


def _laplace_numpy(y, f):
    """A user likelihood written in numpy (for CallableLikelihood)."""
    return -np.abs(y[:, 0] - f[..., 0]) / 0.7 - np.log(2 * 0.7)


WARP = dict(a=[0.8, 0.5], b=[1.3, 0.7], c=[-0.4, 0.9])


def _warp_numpy(y):
    a, b, c = (np.asarray(WARP[k]) for k in "abc")
    th = np.tanh(b * (y[..., None] + c))
    return y + (a * th).sum(-1), 1 + (a * b * (1 - th ** 2)).sum(-1)


SEISMIC_DEPTH = np.array([200.0, 500.0, 1600.0, 2200.0])
SEISMIC_VEL = np.array([1950.0, 2300.0, 2750.0, 3650.0])
SEISMIC_STD = np.array([0.025, 0.05, 0.075, 0.1])


def seismic_eq43(y, f, P=4, depth_scale=1.0, velocity_scale=1.0, noise_std=SEISMIC_STD):
    """Eq. (43) of Bonilla et al. 2019 written out term by term (noiseless previous time, see seismic.py)."""
    d = depth_scale * f[..., :P]
    v = velocity_scale * f[..., P:]
    out = np.zeros(f.shape[:-1])
    g_prev = 0.0
    for p in range(P):
        thick = d[..., p] if p == 0 else d[..., p] - d[..., p - 1]
        g = 2 * thick / v[..., p] + g_prev
        out = out + stats.norm.logpdf(y[:, p], loc=g, scale=noise_std[p])
        g_prev = g
    return out


# ====================================================================== the registry
@dataclass
class Case:
    """One configuration of a likelihood and what is needed to test it."""

    name: str
    make: Callable[[], Likelihood]
    reference: Callable[[np.ndarray, np.ndarray], np.ndarray]  # y (B, P), f (..., B, Q) -> (..., B)
    latent_mean: Callable[[np.random.Generator, int], np.ndarray]  # (B, Q)
    latent_var: Callable[[np.random.Generator, int], np.ndarray]  # (B, Q)
    sample_y: Callable[[np.random.Generator, np.ndarray], np.ndarray]  # given f (B, Q) -> valid y (B, P)
    bad_targets: list = field(default_factory=list)  # [(y (N, P), bad row index), ...]
    quad_points: int = 40  # Gauss-Hermite points per latent dimension


def _std_normal_mean(Q, scale=1.0):
    return lambda rng, B: scale * rng.standard_normal((B, Q))


def _uniform_var(Q, lo=0.05, hi=0.5):
    return lambda rng, B: rng.uniform(lo, hi, (B, Q))


def _gauss_y(var):
    return lambda rng, f: f + np.sqrt(var) * rng.standard_normal(f.shape)


def _seismic_mean(rng, B):
    return np.concatenate([SEISMIC_DEPTH, SEISMIC_VEL]) * (1 + 0.03 * rng.standard_normal((B, 8)))


def _seismic_var(rng, B):
    return (np.concatenate([SEISMIC_DEPTH, SEISMIC_VEL]) * rng.uniform(0.01, 0.03, (B, 8))) ** 2


def _seismic_y(rng, f):
    return seismic_eq43_times(f) + SEISMIC_STD * rng.standard_normal((f.shape[0], 4))


def seismic_eq43_times(f, P=4):
    d, v = f[..., :P], f[..., P:]
    thick = np.diff(d, axis=-1, prepend=0.0)
    return 2 * np.cumsum(thick / v, axis=-1)


def _softmax_y(one_hot):
    def sample(rng, f):
        p = special.softmax(f, axis=-1)
        idx = np.array([rng.choice(f.shape[-1], p=row) for row in p])
        return np.eye(f.shape[-1])[idx] if one_hot else idx[:, None].astype(float)

    return sample


def _softmax_ref(y, f):
    idx = y.argmax(-1) if y.shape[1] > 1 else y[:, 0].astype(int)
    return np.take_along_axis(f, np.broadcast_to(idx[:, None], f.shape[:-1] + (1,)), -1)[..., 0] - special.logsumexp(
        f, axis=-1
    )


def _gprn_ref(y, f, P=2, Qn=2, var=np.array([0.3, 0.6])):
    g = f[..., :Qn]
    W = f[..., Qn:].reshape(f.shape[:-1] + (P, Qn))
    mean = np.einsum("...pq,...q->...p", W, g)
    return _norm(y, mean, var).sum(-1)


def _gprn_y(rng, f, P=2, Qn=2):
    W = f[..., Qn:].reshape(f.shape[:-1] + (P, Qn))
    return np.einsum("...pq,...q->...p", W, f[..., :Qn]) + np.sqrt([0.3, 0.6]) * rng.standard_normal((f.shape[0], P))


def _warped_y(rng, f):
    # sample z = t(y) ~ N(f, 0.4) and invert t by bisection in numpy (independent of the module)
    z = f[:, 0] + np.sqrt(0.4) * rng.standard_normal(f.shape[0])
    lo, hi = z - 2.0, z + 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        below = _warp_numpy(mid)[0] < z
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return (0.5 * (lo + hi))[:, None]


CASES = [
    Case(
        "gaussian",
        lambda: Gaussian(variance=0.3),
        lambda y, f: _norm(y[:, 0], f[..., 0], 0.3),
        _std_normal_mean(1),
        _uniform_var(1),
        _gauss_y(0.3),
        bad_targets=[(np.array([[0.1], [0.2], [np.nan], [0.3]]), 2)],
    ),
    Case(
        "logistic",
        lambda: Logistic(),
        lambda y, f: -np.logaddexp(0.0, -np.where(y[:, 0] > 0, 1.0, -1.0) * f[..., 0]),
        _std_normal_mean(1, 1.5),
        _uniform_var(1, 0.1, 1.0),
        lambda rng, f: np.where(rng.uniform(size=f.shape) < special.expit(f), 1.0, -1.0),
        bad_targets=[(np.array([[1.0], [-1.0], [1.0], [0.5]]), 3)],
    ),
    Case(
        "probit",
        lambda: Probit(),
        lambda y, f: special.log_ndtr(np.where(y[:, 0] > 0, 1.0, -1.0) * f[..., 0]),
        _std_normal_mean(1, 1.5),
        _uniform_var(1, 0.1, 1.0),
        lambda rng, f: np.where(rng.uniform(size=f.shape) < special.ndtr(f), 1.0, -1.0),
        bad_targets=[(np.array([[1.0], [-1.0], [1.0], [0.5]]), 3)],
    ),
    Case(
        "callable-numpy-laplace",
        lambda: CallableLikelihood(_laplace_numpy, num_latent=1, backend="numpy"),
        lambda y, f: stats.laplace.logpdf(y[:, 0], loc=f[..., 0], scale=0.7),
        _std_normal_mean(1),
        _uniform_var(1),
        lambda rng, f: f + rng.laplace(scale=0.7, size=f.shape),
    ),
    Case(
        "softmax-index",
        lambda: Softmax(3),
        _softmax_ref,
        _std_normal_mean(3, 1.5),
        _uniform_var(3, 0.1, 0.8),
        _softmax_y(False),
        bad_targets=[
            (np.array([[0.0], [2.0], [3.0], [1.0]]), 2),
            (np.array([[0.0], [1.5], [2.0]]), 1),
            (np.array([[-1.0], [1.0], [2.0]]), 0),
        ],
        quad_points=24,
    ),
    Case(
        "softmax-one-hot",
        lambda: Softmax(3, one_hot=True),
        _softmax_ref,
        _std_normal_mean(3, 1.5),
        _uniform_var(3, 0.1, 0.8),
        _softmax_y(True),
        bad_targets=[
            (np.array([[1.0, 0, 0], [0, 1, 0], [0, 1, 1], [0, 0, 1]]), 2),
            (np.array([[1.0, 0, 0], [0, 0, 0]]), 1),
            (np.array([[0.5, 0.5, 0], [0, 0, 1.0]]), 0),
        ],
        quad_points=24,
    ),
    Case(
        "poisson",
        lambda: Poisson(bin_width=0.5, offset=0.3),
        lambda y, f: stats.poisson.logpmf(y[:, 0], 0.5 * np.exp(f[..., 0] + 0.3)),
        lambda rng, B: 1.0 + 0.5 * rng.standard_normal((B, 1)),
        _uniform_var(1, 0.05, 0.4),
        lambda rng, f: rng.poisson(0.5 * np.exp(f + 0.3)).astype(float),
        bad_targets=[(np.array([[0.0], [2.0], [1.0], [-1.0]]), 3), (np.array([[1.5], [2.0]]), 0)],
        quad_points=60,
    ),
    Case(
        "warped",
        lambda: WarpedGaussian(num_tanh=2, variance=0.4, **WARP),
        lambda y, f: _norm(_warp_numpy(y[:, 0])[0], f[..., 0], 0.4) + np.log(_warp_numpy(y[:, 0])[1]),
        _std_normal_mean(1),
        _uniform_var(1),
        _warped_y,
        bad_targets=[(np.array([[0.1], [np.inf], [0.3]]), 1)],
    ),
    Case(
        "multi-gaussian",
        lambda: MultiGaussian(3, variance=[0.2, 0.5, 1.1]),
        lambda y, f: _norm(y, f, np.array([0.2, 0.5, 1.1])).sum(-1),
        _std_normal_mean(3),
        _uniform_var(3),
        _gauss_y(np.array([0.2, 0.5, 1.1])),
        bad_targets=[(np.array([[0.1, 0.2, 0.3], [0.1, np.nan, 0.3]]), 1)],
        quad_points=12,
    ),
    Case(
        "gprn",
        lambda: GPRN(num_outputs=2, num_nodes=2, variance=[0.3, 0.6]),
        _gprn_ref,
        _std_normal_mean(6),
        _uniform_var(6, 0.05, 0.3),
        _gprn_y,
        bad_targets=[(np.array([[0.1, 0.2], [0.1, 0.3], [np.nan, 0.0]]), 2)],
        quad_points=4,  # log p is a polynomial of degree 4 in f: 3 points are already exact
    ),
    Case(
        "seismic",
        lambda: Seismic(),
        seismic_eq43,
        _seismic_mean,
        _seismic_var,
        _seismic_y,
        bad_targets=[(np.array([[0.2, 0.5, 1.2, 1.5], [0.2, 0.5, np.nan, 1.5]]), 1)],
        quad_points=4,
    ),
    Case(
        "student-t",
        lambda: StudentT(df=3.5, scale=0.6),
        lambda y, f: stats.t.logpdf(y[:, 0], 3.5, loc=f[..., 0], scale=0.6),
        _std_normal_mean(1),
        _uniform_var(1),
        lambda rng, f: f + 0.6 * rng.standard_t(3.5, size=f.shape),
        bad_targets=[(np.array([[0.1], [0.2], [0.3], [np.nan], [np.inf]]), 3)],
        quad_points=80,
    ),
]
REGISTRY = {}
for _case in CASES:
    REGISTRY.setdefault(type(_case.make()), []).append(_case)

case_params = pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])


def _data(case: Case, B: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    m = case.latent_mean(rng, B)
    v = case.latent_var(rng, B)
    f_true = m + np.sqrt(v) * rng.standard_normal(m.shape)
    y = case.sample_y(rng, f_true)
    return rng, y, m, v


def gauss_hermite_expectation(lik: Likelihood, y: np.ndarray, m: np.ndarray, v: np.ndarray, n: int) -> np.ndarray:
    """E_{N(f; m, diag v)}[log p(y | f)] by tensor-product Gauss-Hermite quadrature: ``(B,)``."""
    yt = torch.as_tensor(y)
    with torch.no_grad():
        return gauss_hermite(lambda f: lik.log_prob(yt, f), torch.as_tensor(m), torch.as_tensor(v), n).numpy()


# ====================================================================== the guard
def test_every_exported_likelihood_is_registered():
    exported = [getattr(likelihoods, name) for name in likelihoods.__all__]
    concrete = {c for c in exported if isinstance(c, type) and issubclass(c, Likelihood) and c is not Likelihood}
    missing = sorted(c.__name__ for c in concrete - set(REGISTRY))
    assert not missing, f"likelihoods without test cases in tests/likelihoods/test_likelihoods.py CASES: {missing}"
    assert {Gaussian, Logistic, Probit, CallableLikelihood, Softmax, Poisson, WarpedGaussian, MultiGaussian, GPRN,
            Seismic, StudentT} <= concrete


# ====================================================================== generic tests
@case_params
def test_log_prob_matches_reference(case: Case):
    lik = case.make()
    rng, y, m, v = _data(case, B=7)
    f = m + np.sqrt(v) * rng.standard_normal((2, 3) + m.shape)  # leading sample axes (2, 3)
    got = lik.log_prob(torch.as_tensor(y), torch.as_tensor(f))
    assert got.shape == (2, 3, 7) and got.dtype == torch.float64
    np.testing.assert_allclose(got.detach().numpy(), case.reference(y, f), rtol=1e-10, atol=1e-12)


@case_params
def test_shapes_and_dtype_follow_inputs(case: Case):
    lik = case.make()  # parameters in float64
    _, y, m, v = _data(case, B=5)
    y32, m32 = torch.as_tensor(y, dtype=torch.float32), torch.as_tensor(m, dtype=torch.float32)
    out = lik.log_prob(y32, m32)
    assert out.shape == (5,) and out.dtype == torch.float32
    if lik.has_closed_form_ell:
        assert lik.expected_log_prob(y32, m32, torch.as_tensor(v, dtype=torch.float32)).dtype == torch.float32
    f = torch.as_tensor(m).expand(4, 2, *m.shape)
    assert lik.log_prob(torch.as_tensor(y), f).shape == (4, 2, 5)
    try:
        mean, var = lik.conditional_moments(f)
    except NotImplementedError:
        return
    assert mean.shape == var.shape == (4, 2, 5, lik.output_dim)
    assert bool((var >= 0).all())


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_conditional_moments_follow_input_dtype(case: Case):
    lik = case.make()  # parameters in float64
    _, _, m, _ = _data(case, B=5)
    try:
        mean, var = lik.conditional_moments(torch.as_tensor(m, dtype=torch.float32))
    except NotImplementedError:
        return
    assert mean.dtype == var.dtype == torch.float32, (mean.dtype, var.dtype)


@case_params
def test_monte_carlo_ell_matches_quadrature(case: Case):
    lik = case.make()
    _, y, m, v = _data(case, B=3, seed=1)
    S = 4000
    gen = torch.Generator().manual_seed(1234)
    eps = torch.randn((S,) + m.shape, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        vals = lik.log_prob(torch.as_tensor(y), torch.as_tensor(m) + torch.as_tensor(v).sqrt() * eps).numpy()
    mc = vals.mean(0)
    se = vals.std(0, ddof=1) / math.sqrt(S)
    quad = gauss_hermite_expectation(lik, y, m, v, case.quad_points)
    assert np.all(se > 0)
    assert np.all(np.abs(mc - quad) <= 4 * se), f"MC {mc} vs quadrature {quad}, standard errors {se}"


def _closed_form(lik: Likelihood):
    """The protocol's closed-form ELL, or an exact one offered under another name (GPRN)."""
    if lik.has_closed_form_ell:
        return lik.expected_log_prob
    return getattr(lik, "exact_expected_log_prob", None)


@case_params
def test_closed_form_ell_matches_quadrature(case: Case):
    lik = case.make()
    closed_form = _closed_form(lik)
    if closed_form is None:
        pytest.skip(f"{type(lik).__name__} has no closed-form expected log-likelihood")
    _, y, m, v = _data(case, B=4, seed=2)
    quad = gauss_hermite_expectation(lik, y, m, v, case.quad_points)
    mean = torch.as_tensor(m).expand(2, *m.shape)  # a leading component axis
    var = torch.as_tensor(v).expand(2, *v.shape)
    closed = closed_form(torch.as_tensor(y), mean, var).detach().numpy()
    assert closed.shape == (2, 4)
    np.testing.assert_allclose(closed, np.broadcast_to(quad, (2, 4)), rtol=1e-8, atol=1e-8)


@case_params
def test_validate_targets(case: Case):
    lik = case.make()
    _, y, _, _ = _data(case, B=6)
    lik.validate_targets(torch.as_tensor(y))  # good data passes
    wrong = torch.zeros(4, lik.output_dim + 1)
    with pytest.raises(ValueError, match=r"\(4, %d\)" % (lik.output_dim + 1)):
        lik.validate_targets(wrong)
    for bad, row in case.bad_targets:
        with pytest.raises(ValueError, match=rf"row {row}: ") as err:
            lik.validate_targets(torch.as_tensor(bad, dtype=torch.float64))
        assert type(lik).__name__ in str(err.value)  # the message names the likelihood


@case_params
def test_positive_parameters_stay_positive(case: Case):
    lik = case.make()
    positives = [m for m in lik.modules() if isinstance(m, PositiveParameter)]
    for p in positives:
        with torch.no_grad():
            p.raw.fill_(-1e4)
        assert bool((p() > 0).all()), f"{p} not positive"
    _, y, m, _ = _data(case, B=5)
    if positives:
        out = lik.log_prob(torch.as_tensor(y), torch.as_tensor(m))
        assert bool(torch.isfinite(out).all()), out


@case_params
def test_likelihood_parameters_get_gradients(case: Case):
    lik = case.make()
    params = dict(lik.named_parameters())
    if not params:
        pytest.skip(f"{type(lik).__name__} has no learnable parameters")
    rng, y, m, v = _data(case, B=6)
    f = torch.as_tensor(m + np.sqrt(v) * rng.standard_normal((3,) + m.shape))  # samples, not learned here
    lik.log_prob(torch.as_tensor(y), f).sum().backward()
    for name, p in params.items():
        assert p.grad is not None and bool(torch.isfinite(p.grad).all()), name
        assert bool((p.grad != 0).any()), f"{name} got a zero gradient"


# ====================================================================== softmax
def test_softmax_encodings_agree_and_probabilities():
    torch.manual_seed(0)
    f = torch.randn(2, 6, 4)
    idx = torch.tensor([0, 3, 1, 2, 3, 0])
    index, one_hot = Softmax(4), Softmax(4, one_hot=True)
    y_idx = idx[:, None].double()
    y_hot = torch.nn.functional.one_hot(idx, 4).double()
    torch.testing.assert_close(index.log_prob(y_idx, f), one_hot.log_prob(y_hot, f), rtol=0, atol=0)
    assert torch.equal(index.class_index(y_idx), idx) and torch.equal(one_hot.class_index(y_hot), idx)
    p = index.class_probabilities(f)
    torch.testing.assert_close(p.sum(-1), torch.ones(2, 6))
    for c in range(4):
        yc = torch.full((6, 1), float(c))
        torch.testing.assert_close(p[..., c], index.log_prob(yc, f).exp())
    mean, var = one_hot.conditional_moments(f)
    torch.testing.assert_close(mean, p)
    torch.testing.assert_close(var, p * (1 - p))
    mean_i, var_i = index.conditional_moments(f)
    c = torch.arange(4.0)
    torch.testing.assert_close(mean_i[..., 0], (p * c).sum(-1))
    torch.testing.assert_close(var_i[..., 0], (p * c * c).sum(-1) - (p * c).sum(-1) ** 2)


def test_softmax_rejects_one_hot_rows_in_index_mode_with_a_hint():
    with pytest.raises(ValueError, match="one_hot=True"):
        Softmax(3).validate_targets(torch.eye(3))
    with pytest.raises(ValueError, match="num_classes"):
        Softmax(1)
    with pytest.raises(ValueError, match=r"Softmax reads Q=3 latent functions but f has shape \(2, 4\)"):
        Softmax(3).log_prob(torch.zeros(2, 1), torch.zeros(2, 4))


# ====================================================================== Poisson
def test_probit_predictive_probability_matches_its_closed_form():
    """Mean of class_probabilities over draws f ~ N(mu, s^2) against Phi(mu / sqrt(1 + s^2))
    (Rasmussen & Williams 2006, eq. (3.80)), to 5 Monte Carlo standard errors; the positive class is
    the second column, as for the logistic likelihood, and the tails stay finite."""
    lik = Probit()
    g = torch.Generator().manual_seed(3)
    mu = torch.tensor([-2.0, -0.3, 0.0, 1.1, 3.0], dtype=torch.float64)
    sd = torch.tensor([0.2, 1.0, 2.0, 0.7, 1.5], dtype=torch.float64)
    S = 200_000
    f = (mu + sd * torch.randn(S, 5, generator=g, dtype=torch.float64)).unsqueeze(-1)  # (S, B, 1)
    probs = lik.class_probabilities(f)  # (S, B, 2)
    assert probs.shape == (S, 5, 2)
    p1 = probs[..., 1]
    se = p1.std(0) / math.sqrt(S)
    exact = torch.tensor(special.ndtr((mu / torch.sqrt(1 + sd ** 2)).numpy()))
    assert (p1.mean(0) - exact).abs().le(5 * se).all(), (p1.mean(0), exact, se)
    torch.testing.assert_close(probs.sum(-1), torch.ones(S, 5, dtype=torch.float64))
    y = torch.tensor([[1.0], [0.0]], dtype=torch.float64)
    far = torch.tensor([[[-40.0], [40.0]]], dtype=torch.float64)  # both labels 40 sd against the latent
    lp = lik.log_prob(y, far)
    assert torch.isfinite(lp).all() and (lp < -700).all()
    assert lik.class_index(y).tolist() == [1, 0]


def test_poisson_initialization_rate_and_fixed_offset():
    y = torch.tensor([[0.0], [3.0], [5.0], [4.0]])
    lik = Poisson(bin_width=2.0)
    lik.initialize_from_data(y)
    assert math.isclose(float(lik.offset.detach()), math.log(3.0 / 2.0), rel_tol=1e-12)
    mean, var = lik.conditional_moments(torch.zeros(4, 1))  # rate at f = 0 is the mean count
    torch.testing.assert_close(mean, torch.full((4, 1), 3.0))
    torch.testing.assert_close(var, mean)
    fixed = Poisson(offset=0.7, learn_offset=False)
    fixed.initialize_from_data(y)
    assert float(fixed.offset) == 0.7 and not list(fixed.parameters())
    with pytest.raises(ValueError, match="bin_width"):
        Poisson(bin_width=0.0)


# ====================================================================== warped Gaussian
def _warped():
    return WarpedGaussian(num_tanh=2, variance=0.4, **WARP)


def test_warp_jacobian_matches_finite_differences():
    lik = _warped()
    y = torch.linspace(-4, 4, 41)
    t, dt = lik.warp(y)
    h = 1e-5
    fd = (lik.warp(y + h)[0] - lik.warp(y - h)[0]) / (2 * h)
    torch.testing.assert_close(dt, fd, rtol=1e-9, atol=1e-9)
    yy = y.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(lik.warp(yy)[0].sum(), yy)
    torch.testing.assert_close(dt, g, rtol=1e-12, atol=1e-12)
    assert bool((dt >= 1).all())


@pytest.mark.parametrize("f", [-2.0, 0.3, 1.7])
def test_warped_density_integrates_to_one(f):
    lik = _warped()

    def density(y):
        with torch.no_grad():
            return float(lik.log_prob(torch.tensor([[y]]), torch.tensor([[f]])).exp())

    total, err = integrate.quad(density, -np.inf, np.inf, epsabs=1e-12, epsrel=1e-12, limit=200)
    assert abs(total - 1) < 1e-9, (total, err)


def test_inverse_warp_round_trip_and_gradients():
    lik = _warped()
    z = torch.cat([torch.linspace(-50, 50, 101), torch.tensor([0.0, 1e-12, -3.3])]).reshape(8, 13)
    y = lik.inverse_warp(z)
    torch.testing.assert_close(lik.warp(y)[0], z, rtol=1e-13, atol=1e-13)
    zz = z.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(lik.inverse_warp(zz).sum(), zz)
    torch.testing.assert_close(g, 1 / lik.warp(y.detach())[1], rtol=1e-10, atol=1e-12)
    # gradients with respect to the warping parameters by the implicit-function theorem
    c = lik.c
    (gc,) = torch.autograd.grad(lik.inverse_warp(z).sum(), c)
    h = 1e-6
    with torch.no_grad():
        fd = []
        for i in range(2):
            c[i] += h
            up = lik.inverse_warp(z).sum()
            c[i] -= 2 * h
            down = lik.inverse_warp(z).sum()
            c[i] += h
            fd.append((up - down) / (2 * h))
    torch.testing.assert_close(gc, torch.stack(fd), rtol=1e-6, atol=1e-6)


def test_warped_moments_and_quantiles_against_direct_integration():
    lik = _warped()
    fs = [-1.0, 0.5]
    with torch.no_grad():
        mean, var = lik.conditional_moments(torch.tensor(fs)[:, None])
    for k, f in enumerate(fs):
        def dens(y):
            with torch.no_grad():
                return float(lik.log_prob(torch.tensor([[y]]), torch.tensor([[f]])).exp())

        m1 = integrate.quad(lambda y: y * dens(y), -np.inf, np.inf, epsabs=1e-12, limit=200)[0]
        m2 = integrate.quad(lambda y: (y - m1) ** 2 * dens(y), -np.inf, np.inf, epsabs=1e-12, limit=200)[0]
        assert abs(float(mean[k, 0]) - m1) < 1e-6 and abs(float(var[k, 0]) - m2) < 1e-6, (mean[k], var[k], m1, m2)
        levels = [0.05, 0.5, 0.9]
        quant = lik.predictive_quantiles(torch.tensor([[f]]), torch.zeros(1, 1), levels).detach()
        assert quant.shape == (1, 3)
        for j, q in enumerate(levels):
            cdf = integrate.quad(dens, -np.inf, float(quant[0, j]), epsabs=1e-13, limit=200)[0]
            assert abs(cdf - q) < 1e-8, (q, cdf)
    # with var_f > 0 the predictive distribution is the warped Gaussian with variance sigma^2 + var_f
    wider = WarpedGaussian(num_tanh=2, variance=0.4 + 0.25, **WARP)
    mf, vf = torch.tensor([[0.2], [-0.7]]), torch.full((2, 1), 0.25)
    pm, pv = lik.predictive_moments(mf, vf)
    wm, wv = wider.conditional_moments(mf)
    torch.testing.assert_close(pm, wm)
    torch.testing.assert_close(pv, wv)
    torch.testing.assert_close(lik.predictive_quantiles(mf, vf, 0.3), wider.predictive_quantiles(mf, 0 * vf, 0.3))
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        lik.predictive_quantiles(mf, vf, [0.5, 1.0])


def test_warped_without_tanh_terms_is_gaussian_and_initialization():
    torch.manual_seed(3)
    y, f = torch.randn(5, 1), torch.randn(2, 5, 1)
    torch.testing.assert_close(WarpedGaussian(num_tanh=0, variance=0.3).log_prob(y, f), Gaussian(0.3).log_prob(y, f))
    lik = WarpedGaussian(num_tanh=3)
    data = 10 + 4 * torch.randn(200, 1)
    lik.initialize_from_data(data)
    q = torch.quantile(data[:, 0], torch.tensor([0.25, 0.5, 0.75]))
    torch.testing.assert_close(lik.c.detach(), -q)
    torch.testing.assert_close(lik.b(), torch.full((3,), 1 / float(data.std())))
    given = _warped()
    given.initialize_from_data(data)
    torch.testing.assert_close(given.c.detach(), torch.tensor(WARP["c"]))
    with pytest.raises(ValueError, match="b must"):
        WarpedGaussian(num_tanh=2, b=[1.0, -1.0])


# ====================================================================== GPRN
def test_gprn_layout_and_mixing():
    lik = GPRN(num_outputs=3, num_nodes=2)
    assert lik.num_latent == 8 and GPRN(2).num_latent == 3 and GPRN(7).num_latent == 8  # Bonilla et al. 2019 Table 2
    g = torch.tensor([1.5, -2.0])
    W = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    f = torch.cat([g, W.reshape(-1)]).expand(4, 1, 8)  # nodes first, then W row-major
    W_got, g_got = lik.split(f)
    torch.testing.assert_close(W_got[0, 0], W)
    torch.testing.assert_close(g_got[0, 0], g)
    mean, var = lik.conditional_moments(f)
    torch.testing.assert_close(mean[0, 0], W @ g)
    torch.testing.assert_close(var, torch.ones(4, 1, 3))
    # the exact ELL is not the default: zero means are a stationary point of it (see gprn.py)
    assert not lik.has_closed_form_ell
    m0, v0 = torch.zeros(5, 8), torch.rand(5, 8) + 0.1
    m0.requires_grad_(True)
    (grad,) = torch.autograd.grad(lik.exact_expected_log_prob(torch.randn(5, 3), m0, v0).sum(), m0)
    assert bool((grad == 0).all())
    with pytest.raises(ValueError, match=r"GPRN reads Q=8 latent functions but f has shape \(1, 7\)"):
        lik.log_prob(torch.zeros(1, 3), torch.zeros(1, 7))
    with pytest.raises(ValueError, match="Q = Q'"):
        lik.conditional_moments(torch.zeros(1, 7))
    with pytest.raises(ValueError, match="variance"):
        GPRN(3, variance=[1.0, 2.0])


# ====================================================================== seismic
def test_seismic_hand_example_and_scales():
    lik = Seismic(num_layers=2, noise_std=(0.1, 0.2))
    f = torch.tensor([[200.0, 500.0, 2000.0, 2500.0]])
    torch.testing.assert_close(lik.travel_times(f), torch.tensor([[0.2, 0.2 + 2 * 300 / 2500]]))
    rng = np.random.default_rng(5)
    f = _seismic_mean(rng, 6)[None].repeat(3, 0)
    y = seismic_eq43_times(f[0]) + SEISMIC_STD * rng.standard_normal((6, 4))
    physical = Seismic().log_prob(torch.as_tensor(y), torch.as_tensor(f))
    scaled = Seismic(depth_scale=10, velocity_scale=10).log_prob(torch.as_tensor(y), torch.as_tensor(f / 10))
    torch.testing.assert_close(physical, scaled, rtol=1e-12, atol=1e-12)
    ref = seismic_eq43(y, f / 10, depth_scale=10, velocity_scale=10)
    np.testing.assert_allclose(scaled.numpy(), ref, rtol=1e-10)
    lik = Seismic()
    assert not list(lik.parameters()) and len(list(Seismic(learn_noise=True).parameters())) == 1
    torch.testing.assert_close(lik.conditional_moments(torch.as_tensor(f))[1][0, 0], torch.as_tensor(SEISMIC_STD ** 2))
    with pytest.raises(ValueError, match=r"Seismic reads Q=8 latent functions but f has shape \(6, 6\)"):
        lik.log_prob(torch.as_tensor(y), torch.zeros(6, 6))
    with pytest.raises(ValueError, match="2P = 8"):
        lik.conditional_moments(torch.zeros(6, 6))


@pytest.mark.skipif(not (DATA / "seismic" / "mcmc_reference.csv").exists(), reason="shared seismic data not found")
def test_seismic_mcmc_reference_reproduces_observed_times():
    Y = np.loadtxt(DATA / "seismic" / "data.csv", delimiter=",")[:, :4]
    ref = np.genfromtxt(DATA / "seismic" / "mcmc_reference.csv", delimiter=",", names=True)
    f = np.stack([ref[n] for n in ref.dtype.names[:8]], -1)  # 4 mean depths, then 4 mean velocities
    times = Seismic().travel_times(torch.as_tensor(f)).numpy()
    z = (Y - times) / SEISMIC_STD
    assert np.all((z ** 2).mean(0) < 1.0), (z ** 2).mean(0)


# ====================================================================== Student-t and multi-Gaussian
def test_student_t_moments_and_learnable_df():
    f = torch.randn(3, 4, 1)
    mean, var = StudentT(df=5.0, scale=0.5).conditional_moments(f)
    torch.testing.assert_close(mean, f)
    torch.testing.assert_close(var, torch.full_like(f, 0.25 * 5 / 3))
    assert bool(torch.isinf(StudentT(df=2.0).conditional_moments(f)[1]).all())
    assert {n for n, _ in StudentT(learn_df=True).named_parameters()} == {"df.raw", "scale.raw"}
    assert {n for n, _ in StudentT().named_parameters()} == {"scale.raw"}


def test_multi_gaussian_variances_and_shapes():
    lik = MultiGaussian(2, variance=[0.5, 2.0])
    f = torch.zeros(3, 1, 2)
    torch.testing.assert_close(lik.conditional_moments(f)[1], torch.tensor([0.5, 2.0]).expand(3, 1, 2))
    with pytest.raises(ValueError, match="variance"):
        MultiGaussian(3, variance=[1.0, 2.0])
    with pytest.raises(ValueError, match=r"MultiGaussian reads Q=2 latent functions but f has shape \(1, 3\)"):
        lik.log_prob(torch.zeros(1, 2), torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r"f \(\.\.\., B, 2\)"):
        lik.expected_log_prob(torch.zeros(1, 2), torch.zeros(1, 3), torch.ones(1, 3))
