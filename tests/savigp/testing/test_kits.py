"""The shipped test kits (savigp.testing: kernels, posterior families, mean heads, estimators) pass
on every built-in implementation, and each catches a broken one (a kit that cannot fail checks
nothing)."""
import math

import pytest
import torch

from likelihoods import Gaussian, Poisson
from savigp import _choices
from savigp.kernels import RBF, Kernel, KernelList, Matern32, Matern52, Stationary
from savigp.mean_heads.heads import MEAN_HEADS, HybridMeanHead, OrthogonalMeanHead
from savigp.posteriors import POSTERIORS, DiagonalMixture
from savigp.testing.estimators import check_estimator
from savigp.testing.kernels import check_kernel
from savigp.testing.mean_heads import check_mean_head
from savigp.testing.posteriors import check_posterior
from savigp.testing.report import CheckError


def _stationary(profile):
    """k(x1, x2) = s profile(r) with r the length-scaled distance, computed directly."""
    def reference(kernel, X1, X2):
        r = ((X1[None, :, None, :] - X2[None, None, :, :]) / kernel.lengthscales()[:, None, None, :]).norm(dim=-1)
        return kernel.variance()[:, None, None] * profile(r)
    return reference


def _pairwise(X1, X2):
    """x1_i - x2_j, (1, N1, N2, D)."""
    return X1[None, :, None, :] - X2[None, None, :, :]


def _periodic(kernel, X1, X2):  # MacKay 1998: s exp(-2 sum_d sin^2(pi (x_d - x'_d) / p_d) / l_d^2)
    p, ls = kernel.period()[:, None, None, :], kernel.lengthscales()[:, None, None, :]
    return kernel.variance()[:, None, None] * torch.exp(-2 * (torch.sin(math.pi * _pairwise(X1, X2) / p) / ls).square().sum(-1))


def _rational_quadratic(kernel, X1, X2):  # Rasmussen & Williams 2006, eq. (4.19)
    r2 = (_pairwise(X1, X2) / kernel.lengthscales()[:, None, None, :]).square().sum(-1)
    a = kernel.alpha()[:, None, None]
    return kernel.variance()[:, None, None] * (1 + r2 / (2 * a)) ** (-a)


def _linear(kernel, X1, X2):  # Duvenaud et al. 2013: s (x - c) . (x' - c)
    c = kernel.offset[:, None, :]
    return kernel.variance()[:, None, None] * ((X1 - c) @ (X2 - c).transpose(-1, -2))


def _constant(kernel, X1, X2):
    return kernel.variance()[:, None, None] * torch.ones(1, X1.shape[0], X2.shape[0], dtype=X1.dtype)


def _white(kernel, X1, X2):  # zero between two different sets of inputs
    return torch.zeros(kernel.num_latent, X1.shape[0], X2.shape[0], dtype=X1.dtype)


def _additive_matern52(kernel, X1, X2):  # Hensman et al. 2018: sum_d s_d (1 + sqrt5 r_d + 5 r_d^2 / 3) exp(-sqrt5 r_d)
    r = _pairwise(X1, X2).abs() / kernel.lengthscales()[:, None, None, :]
    k = (1 + math.sqrt(5) * r + 5 * r * r / 3) * torch.exp(-math.sqrt(5) * r)
    return (kernel.variances()[:, None, None, :] * k).sum(-1)


LS, VAR = [[0.7, 1.3, 2.0], [1.1, 0.5, 0.9]], [1.5, 0.4]
#: each registered family built with non-trivial hyper-parameters, and its closed form computed directly
FAMILIES = {  # Rasmussen & Williams 2006, eq. (4.9), (4.14), (4.17), (4.19); MacKay 1998; Duvenaud et al. 2013
    "rbf": (dict(lengthscale=LS, variance=VAR), _stationary(lambda r: torch.exp(-0.5 * r * r))),
    "matern12": (dict(lengthscale=LS, variance=VAR), _stationary(lambda r: torch.exp(-r))),
    "matern32": (dict(lengthscale=LS, variance=VAR), _stationary(lambda r: (1 + math.sqrt(3) * r) * torch.exp(-math.sqrt(3) * r))),
    "matern52": (dict(lengthscale=LS, variance=VAR),
                 _stationary(lambda r: (1 + math.sqrt(5) * r + 5 * r * r / 3) * torch.exp(-math.sqrt(5) * r))),
    "rq": (dict(lengthscale=LS, variance=VAR, alpha=[0.6, 3.0]), _rational_quadratic),
    "periodic": (dict(lengthscale=LS, variance=VAR, period=[[1.0, 2.5, 0.7], [3.0, 1.2, 1.9]]), _periodic),
    "linear": (dict(variance=VAR, offset=[[0.3, -0.5, 1.0], [0.0, 0.2, -0.7]]), _linear),
    "constant": (dict(variance=VAR), _constant),
    "white": (dict(variance=VAR), _white),
    "additive-matern": (dict(nu=2.5, lengthscale=LS, variance=[[1.5, 0.3, 0.7], [0.4, 1.0, 0.2]]), _additive_matern52),
}


@pytest.mark.parametrize("name", _choices.KERNELS.names())
def test_every_registered_kernel_passes_the_kit(name):
    """Read from the registry: a family added to it is checked here with no edit, at hyper-parameters
    that differ between the latent functions (its default values moved), and against its closed form
    when FAMILIES gives one."""
    options, reference = FAMILIES.get(name, ({}, None))
    kernel = _choices.KERNELS[name](3, 2, **options)
    if not options:
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for p in kernel.parameters():
                p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    report = check_kernel(kernel, reference=reference)
    assert report["gradients"].status == "passed"
    assert report["closed_form"].status == ("passed" if reference is not None else "skipped")


def test_the_closed_forms_are_of_registered_kernels():
    assert set(FAMILIES) <= set(_choices.KERNELS.names())


def test_isotropic_and_mixed_kernels_pass():
    check_kernel(RBF(2, 3, ard=False))
    check_kernel(KernelList([RBF(2, 1), Matern52(2, 1)]))


def test_composite_kernels_pass_with_the_closed_form_of_their_algebra():
    from savigp.kernels import Periodic, RationalQuadratic, Scale
    k1, k2, k3 = RBF(3, 2, lengthscale=LS), Periodic(3, 2, active_dims=[0], period=0.9), RationalQuadratic(3, 2, active_dims=[1, 2])
    kernel = k1 + Scale(k2 * k3, variance=[0.3, 2.0])

    report = check_kernel(kernel, reference=None)
    assert report["gradients"].status == "passed" and report["positive_semidefinite"].status == "passed"
    X1, X2 = torch.randn(6, 3, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64)
    want = k1(X1, X2) + kernel.parts[1].variance()[:, None, None] * _periodic(k2, X1[:, :1], X2[:, :1]) \
        * _rational_quadratic_on(k3, X1[:, 1:], X2[:, 1:])
    torch.testing.assert_close(kernel(X1, X2), want, rtol=1e-12, atol=1e-12)


def _rational_quadratic_on(kernel, X1, X2):
    return _rational_quadratic(kernel, X1, X2)


class _WrongBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.exp(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.exp(x) * 1.01  # 1% off


class _BrokenRBF(Stationary):
    """The squared exponential through a profile whose backward pass is 1% off, and a diagonal twice too large."""

    def profile(self, r2):
        return _WrongBackward.apply(-0.5 * r2)

    def diag(self, x):
        return 2 * super().diag(x)


def test_the_kernel_kit_catches_a_wrong_diagonal_and_a_wrong_gradient():
    with pytest.raises(CheckError) as info:
        check_kernel(_BrokenRBF(2, 2))
    failed = {c.name for c in info.value.report.failures}
    assert failed == {"diagonal", "gradients"}, str(info.value)


class _Cosine(Kernel):
    """s cos(||x - x'|| / l): a covariance on the line, not in two dimensions (Rasmussen & Williams 2006, §4.2.1)."""

    def __init__(self, input_dim, num_latent=1):
        super().__init__()
        self._set_inputs(input_dim, num_latent, None)
        self.variance = torch.nn.Parameter(torch.full((num_latent,), 1.3, dtype=torch.float64))

    def forward(self, x1, x2):
        r2 = (x1.unsqueeze(-2) - x2.unsqueeze(-3)).square().sum(-1)
        return self.variance[:, None, None] * torch.cos(torch.sqrt(r2 + 1e-30))

    def diag(self, x):
        return self.variance[:, None].expand(self.num_latent, x.shape[-2])


class _RBFTimesShiftedLinear(Kernel):
    """RBF times (x . x' - 1): meant as RBF x (linear + constant), the constant's sign wrong."""

    def __init__(self, input_dim, num_latent=1):
        super().__init__()
        self._set_inputs(input_dim, num_latent, None)
        self.rbf = RBF(input_dim, num_latent)

    def forward(self, x1, x2):
        return self.rbf(x1, x2) * (x1 @ x2.transpose(-1, -2) - 1.0)

    def diag(self, x):
        return self.rbf.diag(x) * ((x * x).sum(-1) - 1.0)


class _Drifting(RBF):
    """RBF times (1 + tanh(x_0 - x'_0) / 5): not symmetric."""

    def forward(self, x1, x2):
        return super().forward(x1, x2) * (1.0 + 0.2 * torch.tanh(x1[..., :, None, 0] - x2[..., None, :, 0]))


class _WholeInput(RBF):
    """An RBF that reads every column, whatever its active_dims (its ``__call__`` is nn.Module's, which
    skips the base class's slicing of the active columns)."""

    __call__ = torch.nn.Module.__call__

    def forward(self, x1, x2):
        r2 = ((x1.unsqueeze(-2) - x2.unsqueeze(-3)) / self.lengthscales()[:, None, None, :]).square().sum(-1)  # (Q, N1, N2)
        return self.variance()[:, None, None] * torch.exp(-0.5 * r2)


class _BatchLengthscale(RBF):
    """An RBF whose squared length-scale is the mean squared distance of the batch (a heuristic from
    the data inside the kernel): symmetric and PSD, but entry (i, j) depends on the other rows."""

    def forward(self, x1, x2):
        r2 = (x1.unsqueeze(-2) - x2.unsqueeze(-3)).square().sum(-1)
        return self.variance()[:, None, None] * torch.exp(-0.5 * r2 / r2.mean())


class _Float64Jitter(RBF):
    """Adds a jitter made in float64, whatever the inputs' dtype."""

    def forward(self, x1, x2):
        K = super().forward(x1, x2)
        return K + 1e-12 * torch.ones(K.shape[-1], dtype=torch.float64)


class _NotStationary(RBF):
    """A Stationary subclass (so it claims stationarity) with a linear term added."""

    def forward(self, x1, x2):
        return super().forward(x1, x2) + 0.1 * x1 @ x2.transpose(-1, -2)

    def diag(self, x):
        return super().diag(x) + 0.1 * (x * x).sum(-1)


@pytest.mark.parametrize("kernel, expected", [
    (_Cosine(2, 2), {"positive_semidefinite"}),
    (_RBFTimesShiftedLinear(2, 1), {"positive_semidefinite"}),
    (_Drifting(2, 1), {"symmetric"}),
    (_WholeInput(3, 2, active_dims=[0, 2], ard=False), {"active_dims"}),
    (_WholeInput(3, 2, active_dims=[1]) + RBF(3, 2, active_dims=[1]), {"active_dims"}),
    (_BatchLengthscale(2, 2), {"rows_independent"}),
    (_Float64Jitter(2, 1), {"dtype"}),
    (_NotStationary(2, 2), {"stationary"}),
], ids=["cosine-2d", "wrong-product", "asymmetric", "ignores-active-dims", "ignores-active-dims-in-a-sum",
        "batch-statistics", "float64-inside", "not-stationary"])
def test_the_kernel_kit_catches_a_broken_kernel(kernel, expected):
    with pytest.raises(CheckError) as info:
        check_kernel(kernel)
    assert {c.name for c in info.value.report.failures} == expected, str(info.value)


@pytest.mark.parametrize("estimator", _choices.ESTIMATORS)
def test_every_estimator_is_unbiased_against_the_gaussian_closed_form(estimator):
    report = check_estimator(estimator)
    assert report["unbiased"].status == "passed"


@pytest.mark.parametrize("estimator", ["score", "reparam", "quadrature"])
def test_estimators_on_a_poisson_likelihood(estimator):
    check_estimator(estimator, Poisson(), [[0.0], [2.0], [5.0]])


class _OffByOne(Gaussian):
    """A Gaussian whose closed form is 0.1 nats too high: every Monte Carlo estimator disagrees with it."""

    def expected_log_prob(self, y, mean, var):
        return super().expected_log_prob(y, mean, var) + 0.1


def test_the_estimator_kit_catches_a_bias_of_a_tenth_of_a_nat():
    with pytest.raises(CheckError, match="unbiased: value: .* standard errors"):
        check_estimator("reparam", _OffByOne(0.5))


@pytest.mark.parametrize("kind, K", [(kind, K) for kind in _choices.POSTERIORS.names() for K in (1, 2) if
                                     not (kind == "joint" and K == 2)])
def test_every_registered_posterior_family_passes(kind, K):
    report = check_posterior(kind, K)
    if kind != "joint":  # the joint family gives no per-latent moments over u
        assert report["marginals_over_u"].status == "passed"


class _MisreportedMoments(DiagonalMixture):
    """Its moments over u say twice its actual means."""

    kind = "diag-misreported"

    def u_moments(self, Lzz):
        mean, factor = super().u_moments(Lzz)
        return 2 * mean, factor


def test_the_posterior_kit_catches_marginals_that_are_not_those_of_q_u():
    POSTERIORS.register("diag-misreported", _MisreportedMoments)
    try:
        with pytest.raises(CheckError) as info:
            check_posterior("diag-misreported", 1)
    finally:
        POSTERIORS.unregister("diag-misreported")
    assert {c.name for c in info.value.report.failures} == {"marginals_over_u", "kl_terms"}, str(info.value)


@pytest.mark.parametrize("basis", _choices.MEAN_HEADS.names())
@pytest.mark.parametrize("posterior", ["full", "diag-u"])
def test_every_registered_mean_head_passes(basis, posterior):
    assert check_mean_head(basis, posterior=posterior)["kl_reference"].status == "passed"


class _DoubleKL(HybridMeanHead):
    def kl(self, *args, **kwargs):
        return 2 * super().kl(*args, **kwargs)


def test_the_mean_head_kit_catches_a_wrong_kl():
    MEAN_HEADS.register("hybrid-double", _DoubleKL)
    try:
        with pytest.raises(CheckError) as info:
            check_mean_head("hybrid-double")
    finally:
        MEAN_HEADS.unregister("hybrid-double")
    assert {c.name for c in info.value.report.failures} == {"kl_reference"}, str(info.value)


class _RemembersItsTerms(OrthogonalMeanHead):
    """Keeps the basis terms of its first call and serves them afterwards (hidden state between calls)."""

    def basis_terms(self, *args, **kwargs):
        if getattr(self, "_kept", None) is None:
            self._kept = super().basis_terms(*args, **kwargs)
        return self._kept


def test_the_mean_head_kit_catches_state_kept_between_calls():
    MEAN_HEADS.register("orthogonal-remembers", _RemembersItsTerms)
    try:
        with pytest.raises(CheckError) as info:
            check_mean_head("orthogonal-remembers")
    finally:
        MEAN_HEADS.unregister("orthogonal-remembers")
    assert "explicit_state" in {c.name for c in info.value.report.failures}, str(info.value)
