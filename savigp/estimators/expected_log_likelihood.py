"""Estimators of the expected log-likelihood and of its gradients (Bonilla et al. 2019, §4.6, §5, App. F).

    L_ell = (N / B) sum_{n in batch} sum_k pi_k E_{q_k(f_n)}[log p(y_n | f_n)]      (eq. 24, 29, 33)

where q_k(f_n) = prod_j N(f_nj; b_knj, s2_knj) is the diagonal Gaussian marginal of component k
at data point n (eq. 22-23). Each estimator returns a scalar whose *value* is the estimate of
L_ell and whose *gradient*, by autograd, is the estimator's gradient with respect to the marginal
parameters b, s2 (and through them m, S, kernel hyper-parameters and inducing inputs), to the
mixture weights pi, and to the likelihood's own parameters.

* ``"score"`` -- the paper's black-box estimator. Only values of log p are used. For
  lambda in {b_knj, s2_knj} the gradient E_q[log p(y_n | f_n) d/dlambda log q_k(f_n)] (eq. 25) is
  estimated from S samples f = b + sqrt(s2) eps, with scores

      h_b = (f_j - b_j) / s2_j = eps_j / sqrt(s2_j),    h_s2 = (eps_j^2 - 1) / (2 s2_j),

  and the control variate of App. F: g~ = g - a h with a = Cov(g, h) / Var(h), g = h log p
  (eq. 97-103). The paper estimates Cov and Var from the same samples as the gradient, which makes
  the estimate biased: measured on a Gaussian likelihood, by about 40% of the gradient at S = 5,
  20% at S = 10 and 2% at S = 100. Here every coefficient for sample s comes from the *other*
  S - 1 samples only, so it is independent of sample s and the estimator is exactly unbiased:

  - S >= ``CV_REGRESSION_MIN_SAMPLES`` (50): the regression coefficient a_{-s} = Cov_{-s}(G, h) /
    Var_{-s}(h) (leave-one-out), per data point, component and latent function;
  - 3 <= S < 50: a leave-one-out baseline a_{-s} = w gbar_{-s}, gbar_{-s} the mean of log p over
    the other S - 1 samples of the same point and component, shrunk by w in [0, 1] estimated from
    the same other samples (see :func:`_baseline_means`), for both scores;
  - S = 2: one other sample estimates neither a coefficient nor a shrinkage, so the baseline is
    a = log p(y_n | b_kn), the log-likelihood at the marginal mean (one more evaluation per point
    and component): it depends on no sample, so the estimate stays exactly unbiased, and it is
    close to E_q[log p] wherever log p is smooth on the scale of the marginal's spread. For a
    concave log p <= 0 (logistic, Poisson) it provably does not raise the b gradient's variance:
    E[(g - a)^2 eps^2] <= E[g^2 eps^2] iff a^2 <= 2 a E[g eps^2], and E[g eps^2] = E[g] + s2 E[g'']
    <= E[g] <= a <= 0 (Stein's lemma, Jensen's inequality). Non-finite values (a likelihood
    undefined at the mean) fall back to no baseline.

    The regression coefficient is a ratio of two (S - 1)-sample moments: at S = 3 its denominator
    from two samples gives it a Cauchy-like tail; the baseline has no denominator. Measured per gradient element (variance without / with the
    control variate, 400 estimates from the same draws, logistic likelihood; the test
    ``test_small_sample_control_variate_never_worse_and_unbiased``): minimum over elements 1.29
    (S = 3), 1.25 (S = 5), 1.46 (S = 10), medians 1.76-2.19 for S >= 3; at S = 2 the baseline at
    the mean gives minimum 1.39 and median 2.19 (before it: none, 1.00 exactly); with
    independent draws the regression coefficient gave minima 0.00 (S = 3), 0.83 (S = 5), 0.99
    (S = 10), 0.90 (S = 20). At S = 100 the regression keeps its 2.2-2.3x median.

  The gradient of pi_k comes from the
  values E_{q_k}[log p] alone (eq. 26). Wired into autograd as the surrogate
  ``sum (b * g_b + s2 * g_s2)`` (whose value is removed), so the chain rule of App. D-E is autograd's.
* ``"score-nocv"`` -- the same without control variates (for measuring what they buy).
* ``"reparam"`` -- the reparameterization estimator (needs log p differentiable in f).
* ``"quadrature"`` -- Gauss-Hermite quadrature on a tensor grid (small Q only): the values and,
  through the score identity, the gradients, again without likelihood gradients.
* ``"closed-form"`` -- the likelihood's own ``expected_log_prob`` (e.g. Gaussian).

``"auto"`` picks ``"closed-form"`` when the likelihood has one, else ``"reparam"`` when it is
declared differentiable in f, else ``"score"``.

Each is an :class:`Estimator` registered by name in :data:`ESTIMATORS` (``savigp._choices``): the
model builds the one it is asked for (:func:`make_estimator`) and calls it once per ELBO evaluation
with the batch's :class:`~savigp.estimators.marginals.LatentMarginals` -- univariate Gaussians per
latent function (:func:`expected_log_lik`) or, for a family coupled across them, Q-variate ones
(:func:`expected_log_lik_joint`). A new estimator is a subclass of :class:`Estimator` and one
entry in that registry (``ESTIMATORS.register("name", MyEstimator)``).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from likelihoods.base import log_prob_checked
from likelihoods.quadrature import gauss_hermite_grid

from ..linalg import chunks as _chunks
from ..runtime import compilation
from ..runtime import sync_free
from .._choices import ESTIMATORS
from ..linalg.cholesky import point_cholesky
from .marginals import LatentMarginals
from .nonfinite import non_finite_error

#: below this many samples the score estimator's control variate is the leave-one-out baseline,
#: from it on the leave-one-out regression coefficient (see the module docstring)
CV_REGRESSION_MIN_SAMPLES = 50
#: the estimators :func:`expected_log_lik` computes (the built-in entries of :data:`ESTIMATORS` less ``"auto"``)
BUILTIN_ESTIMATORS = ("score", "score-nocv", "reparam", "quadrature", "closed-form")


@dataclass
class ELLEstimate:
    """Result of an estimator.

    Attributes:
        value: scalar; value = the estimate of L_ell (already scaled by N / B); gradient = the
            estimator's gradient.
        per_component: ``(K, B)`` detached estimates of E_{q_k}[log p(y_n | f_n)].
        stderr: Monte Carlo standard error of ``value``, a detached 0-dim tensor (the float 0.0 for
            deterministic estimators).
    """

    value: Tensor
    per_component: Tensor
    stderr: Tensor | float


def resolve_estimator(estimator: str, likelihood) -> str:
    """Turn ``"auto"`` into a concrete estimator name and validate the choice for this likelihood
    (each registered :class:`Estimator` says what it needs, :meth:`Estimator.resolve`).

    Raises:
        ValueError: a name not in :data:`ESTIMATORS` (naming them), or an estimator the likelihood
            does not allow (``"closed-form"`` without ``expected_log_prob``, ``"reparam"`` for a
            likelihood declared non-differentiable).
    """
    name = ESTIMATORS.canonical(estimator)
    return ESTIMATORS[name].resolve(name, likelihood)


def make_estimator(estimator: str, likelihood) -> "Estimator":
    """The :class:`Estimator` that the name ``estimator`` (``"auto"`` resolved for ``likelihood``)
    stands for, built from :data:`ESTIMATORS`."""
    return ESTIMATORS[resolve_estimator(estimator, likelihood)]()


def checked_log_prob(likelihood, y: Tensor, f: Tensor, check_finite: bool = True) -> Tensor:
    """``likelihood.log_prob(y, f)`` with its shapes (by the likelihood's template method, see
    :func:`likelihoods.base.log_prob_checked`) and finiteness checked.

    Args:
        y: ``(B, P)``; f: ``(..., B, Q)``.
        check_finite: check the values (callers that check a reduction of them instead pass False,
            and call again with True to raise the detailed error).

    Returns:
        ``(..., B)``. Raises ``ValueError`` naming the likelihood and the shapes, or
        :class:`~savigp.estimators.nonfinite.NonFiniteLogProb` (a ``ValueError``) naming the likelihood, the
        rows of the batch, their targets and the f values where the values are NaN or infinite.
    """
    out = log_prob_checked(likelihood, y, f)  # shapes: likelihoods.Likelihood.log_prob
    if not check_finite:
        return out
    bad = ~torch.isfinite(out)
    flags = sync_free.active()
    if flags is not None:  # inside fit's step: flagged on the device; fit's read re-evaluates for the message
        flags.note("log_prob", bad)
        return out
    if bool(bad.any()):
        raise non_finite_error(likelihood, y, f, out)
    return out


def _check_means(likelihood, y: Tensor, f: Tensor, per_value: Tensor) -> None:
    """A non-finite value makes its column's mean ``per_value`` non-finite: check the means, and
    evaluate again with the full check (which names the rows) only when one is (inside fit's step,
    flag it instead, see :mod:`savigp.runtime.sync_free`)."""
    bad = ~torch.isfinite(per_value.detach())
    flags = sync_free.active()
    if flags is not None:
        flags.note("log_prob", bad)
    elif bool(bad.any()):
        checked_log_prob(likelihood, y, f)  # raises the error naming the rows


def _sample_eps(shape, like: Tensor, generator: torch.Generator | None) -> Tensor:
    """Standard normal draws ``shape`` with ``like``'s dtype and device.

    On the CPU, float64 draws are generated in float32 and promoted: PyTorch's float64 normal
    sampler is about 5x slower there (1.9 ms against 0.4 ms for 10^5 draws, 2 threads), which was
    ~5 % of a training step at M = 500, B = 1000, S = 100. Each draw is then exact to float32's
    2^-24 relative rounding and the tails are cut at |eps| ~ 5.7 (probability ~1e-8), both far
    below the Monte Carlo error of any estimate made from them; the draws stay independent
    standard normals for every statistical purpose here.
    """
    gen_device = generator.device if generator is not None else like.device
    dtype = like.dtype
    if dtype == torch.float64 and gen_device.type == "cpu":
        dtype = torch.float32
    eps = torch.randn(shape, dtype=dtype, device=gen_device, generator=generator)
    return eps.to(device=like.device, dtype=like.dtype)


def _weighted_sum(weights: Tensor, per_point: Tensor, scale: float) -> Tensor:
    """scale * sum_n sum_k pi_k per_point[k, n] for per_point ``(K, B)``."""
    return scale * (weights.unsqueeze(-1) * per_point).sum()


def _stderr(values: Tensor, weights: Tensor, scale: float, common: bool = False) -> Tensor:
    """MC standard error of scale * sum_n sum_k pi_k mean_s values[s, k, n] (values ``(S, K, B)``):
    draws independent across the components (``common=False``: the variance is sum_k pi_k^2 Var_k / S
    per point) or one draw per sample shared by all of them (``common=True``: the variance of
    sum_k pi_k values[s, k, n] over s, / S)."""
    if common:  # (the mixture's per-sample value: one "component" of weight 1)
        values = (weights.detach().view(1, -1, 1) * values.detach()).sum(1, keepdim=True)
        weights = weights.new_ones(1)
    S = values.shape[0]
    # unbiased variance over the samples from two sums of the values shifted by the first sample
    # (the shift avoids cancellation when the spread is small next to the mean); a sum over the
    # leading axis is a fast vectorized reduction, Tensor.var(dim=0) was ~6x slower for (S, K, B)
    v = values.detach()
    v = v - v[:1]
    s1 = v.sum(0)
    var_mean = ((v * v).sum(0) - s1 * s1 / S).clamp_min(0.0) / ((S - 1) * S)  # (K, B)
    w = weights.detach().unsqueeze(-1)
    return scale * torch.sqrt((w * w * var_mean).sum())  # a 0-dim tensor: no host read


def expected_log_lik(likelihood, y: Tensor, mean: Tensor, var: Tensor, weights: Tensor, *,
                     estimator: str, num_samples: int, scale: float = 1.0,
                     generator: torch.Generator | None = None, quadrature_points: int = 20,
                     common_draws: bool | None = None) -> ELLEstimate:
    """Estimate L_ell and wire its gradient into autograd.

    Args:
        likelihood: a :class:`likelihoods.Likelihood`.
        y: targets of the batch, ``(B, P)``.
        mean: marginal means b, ``(K, B, Q)``.
        var: marginal variances s2, ``(K, B, Q)``.
        weights: mixture weights pi, ``(K,)``.
        estimator: a name from :data:`ESTIMATORS` (``"auto"`` resolved here).
        num_samples: S, Monte Carlo samples per component and data point.
        scale: N / B for a mini-batch (eq. 33).
        generator: torch.Generator for the draws (fix it to reuse draws, e.g. inside L-BFGS).
        quadrature_points: Gauss-Hermite points per latent dimension for ``"quadrature"``.
        common_draws: Monte Carlo estimators: one set of S standard normal draws per data point,
            shared by all K components (f_skn = b_kn + sqrt(s2_kn) eps_sn), instead of independent
            draws per component. None (the default): shared when gradients are off
            (``torch.is_grad_enabled()`` False, an evaluation such as
            :func:`savigp.training.convergence.full_data_elbo`), independent otherwise (training).
            Both are unbiased. Shared draws make the estimate for K components that coincide the
            single Gaussian's estimate from the same generator, exactly, so that ELBOs of fits of
            different K (and a mixture's candidate states) are compared with common random numbers:
            a mixture whose components have merged onto one Gaussian then scores what the K = 1 fit
            with those moments scores, up to the slack of the entropy term, instead of differing
            from it by about one standard error. In training, independent draws give coincident
            components distinct gradients, so that they can still separate. The standard error
            follows the draws (:func:`_stderr`).
    """
    estimator = resolve_estimator(estimator, likelihood)
    if estimator not in BUILTIN_ESTIMATORS:
        raise ValueError(f"expected_log_lik computes the built-in estimators {BUILTIN_ESTIMATORS}; {estimator!r} is "
                         "another registered one: call make_estimator(name, likelihood)")
    K, B, Q = mean.shape
    if estimator == "closed-form":
        per = likelihood.expected_log_prob(y, mean, var)
        if tuple(per.shape) != (K, B):
            raise ValueError(f"{type(likelihood).__name__}.expected_log_prob returned shape {tuple(per.shape)}, expected {(K, B)}")
        return ELLEstimate(_weighted_sum(weights, per, scale), per.detach(), 0.0)

    if estimator == "quadrature":
        return _quadrature(likelihood, y, mean, var, weights, scale, quadrature_points)

    S = int(num_samples)
    if S < 2:
        raise ValueError(f"num_samples must be >= 2 for Monte Carlo estimators, got {S}")
    common = (not torch.is_grad_enabled()) if common_draws is None else bool(common_draws)
    common = common and K > 1
    eps = _sample_eps((S, 1 if common else K, B, Q), mean, generator).expand(S, K, B, Q)
    sd = torch.sqrt(var)

    if estimator == "reparam":
        values = checked_log_prob(likelihood, y, mean + sd * eps)  # (S, K, B), differentiable
        per = values.mean(0)
        return ELLEstimate(_weighted_sum(weights, per, scale), per.detach(), _stderr(values, weights, scale, common))

    # score-function estimators: f is detached, only values of log p are used
    f = torch.addcmul(mean.detach(), sd.detach(), eps)
    values = checked_log_prob(likelihood, y, f, check_finite=False)  # (S, K, B); may carry likelihood-parameter gradients
    per_value = values.mean(0)  # (K, B)
    _check_means(likelihood, y, f, per_value)
    g = values.detach().unsqueeze(-1)  # (S, K, B, 1)
    control = estimator == "score"
    if control and S == 2:  # too few samples for a leave-one-out coefficient: a baseline at the mean
        g = g - _mean_baseline(likelihood, y, mean).unsqueeze(-1)
        control = False
    mean_b, mean_s2 = _score_means_dispatch(g, eps, control)
    grad_b = mean_b / sd.detach()
    grad_s2 = mean_s2 / (2.0 * var.detach())
    surrogate = (mean * grad_b + var * grad_s2).sum(-1)  # (K, B)
    per = per_value + (surrogate - surrogate.detach())
    return ELLEstimate(_weighted_sum(weights, per, scale), per_value.detach(), _stderr(values, weights, scale, common))


def _mean_baseline(likelihood, y: Tensor, mean: Tensor) -> Tensor:
    """The S = 2 control variate's baseline: log p(y_n | f_n = b_kn) ``(K, B)`` at the marginal means
    ``mean`` ``(K, B, Q)``, without graph; 0 where it is not finite (no baseline there). It uses
    none of the draws, so E[(log p(y | f_s) - c) d log q(f_s)] = E[log p d log q] exactly."""
    with torch.no_grad():
        c = checked_log_prob(likelihood, y, mean.detach(), check_finite=False)
    return torch.where(torch.isfinite(c), c, torch.zeros_like(c))


def _score_means(g: Tensor, eps: Tensor, control: bool) -> tuple[Tensor, Tensor]:
    """mean_s (G_s - a_{-s} h_s) for the two scores (or mean_s G_s without control variates).

    For S < ``CV_REGRESSION_MIN_SAMPLES``, a_{-s} is the shrunk leave-one-out baseline (w times the mean
    of g over the other S - 1 samples), see :func:`_baseline_means`; from it on, the regression below.

    The scores are taken up to their per-point scale: h_b = eps (= sqrt(s2) d log q / db) and
    h_s2 = eps^2 - 1 (= 2 s2 d log q / ds2); the scale cancels in a = Cov(g h, h) / Var(h), so the
    caller applies it once at the end. G = g h with g the log-likelihood values.

    a_{-s} is the sample covariance over sample variance estimated without sample s (so that it is
    independent of sample s and the estimate stays unbiased), here from sums over all samples in a
    few passes over the S x K x B x Q samples (both scores stacked, one pass each; tested against the
    brute-force leave-one-out): with sG = sum G, sh = sum h, sGh = sum G h, shh = sum h^2,
    n = S - 1 and u_s = sh - S h_s,

        n^2 Cov_{-s} = (n sGh - sG sh) + h_s (sG + g_s u_s),
        n^2 Var_{-s} = (n shh - sh^2) + h_s (sh + u_s),

    and mean_s (G_s - a_{-s} h_s) = (sG - sum_s a_{-s} h_s) / S.

    Args:
        g: ``(S, K, B, 1)``; eps: ``(S, K, B, Q)``.

    Returns:
        two tensors of shape ``(K, B, Q)`` (for b and for s2).
    """
    S = eps.shape[0]
    if control and S < CV_REGRESSION_MIN_SAMPLES:
        return _baseline_means(g, eps)
    H = eps.new_empty((2,) + tuple(eps.shape))  # h_b = eps, h_s2 = eps^2 - 1
    H[0] = eps
    torch.mul(eps, eps, out=H[1]).sub_(1.0)
    G = g * H  # (2, S, K, B, Q)
    sG = G.sum(1)
    if not control:
        return sG[0] / S, sG[1] / S
    n = S - 1
    sh = H.sum(1)
    sGh = G.mul_(H).sum(1)
    del G
    shh = (H * H).sum(1)
    c0 = (n * sGh - sG * sh).unsqueeze(1)
    d0 = (n * shh - sh * sh).unsqueeze(1)
    u = torch.add(sh.unsqueeze(1), H, alpha=-S)  # sh - S h_s
    num = torch.addcmul(sG.unsqueeze(1), g, u).mul_(H).add_(c0)  # n^2 Cov_{-s}
    den = u.add_(sh.unsqueeze(1)).mul_(H).add_(d0).clamp_min_(n * n * torch.finfo(H.dtype).tiny)  # n^2 Var_{-s}
    a_h = num.div_(den).mul_(H).sum(1)  # sum_s a_{-s} h_s
    out = (sG - a_h) / S
    return out[0], out[1]


def _baseline_means(g: Tensor, eps: Tensor) -> tuple[Tensor, Tensor]:
    """mean_s (g_s - c_{-s}) h_s for h_b = eps and h_s2 = eps^2 - 1 (``g`` ``(S, K, B, 1)``, ``eps``
    ``(S, K, B, Q)``; returns two ``(K, B, Q)``), with the shrunk leave-one-out baseline

        c_{-s} = w_{-s} gbar_{-s},    w_{-s} = max(0, 1 - v_{-s} / ((S - 1) gbar_{-s}^2)),

    gbar_{-s} and v_{-s} the mean and (unbiased) variance of g over the other S - 1 samples. The
    baseline helps by E[g]^2 and costs Var(gbar_{-s}) = Var(g) / (S - 1); w is the estimated
    fraction of the helpful part (w -> 0 where log p varies more than its mean is large, where a
    plain baseline made things worse: measured 0.5x at S = 2). c_{-s} depends on the other samples
    only, so E[(g_s - c_{-s}) h_s] = E[g h] (E[h] = 0): unbiased. S = 2 leaves no variance
    estimate: the plain score estimator here (:func:`expected_log_lik` subtracts the baseline at
    the marginal mean from ``g`` at S = 2 instead, :func:`_mean_baseline`)."""
    S = eps.shape[0]
    if S < 3:
        return (g * eps).mean(0), (g * (eps * eps - 1.0)).mean(0)
    s1, s2 = g.sum(0, keepdim=True), (g * g).sum(0, keepdim=True)
    n = S - 1
    mean = (s1 - g) / n  # gbar_{-s}, (S, K, B, 1)
    var = ((s2 - g * g) - n * mean * mean).clamp_min(0.0) / (n - 1)
    w = (1.0 - var / (n * mean * mean).clamp_min(torch.finfo(g.dtype).tiny)).clamp_min(0.0)
    r = g - w * mean  # g_s - c_{-s}
    return (r * eps).mean(0), (r * (eps * eps - 1.0)).mean(0)


def set_compile(enabled: bool = True) -> None:
    """Use ``torch.compile`` for the step's elementwise work, the score estimator's included (see
    :mod:`savigp.runtime.compilation`; also ``SAVIGP_COMPILE=1``)."""
    compilation.set_compile(enabled)


def _score_means_dispatch(g: Tensor, eps: Tensor, control: bool) -> tuple[Tensor, Tensor]:
    """:func:`_score_means` in chunks of data points whose ~12 S x K x chunk x Q temporaries fit the
    device's memory budget (:mod:`savigp.linalg.chunks`; one chunk at the usual sizes). The points are
    independent and the sums run over samples only, so chunking changes no value."""
    S, K, B, Q = eps.shape
    rows = _chunks.chunk_size(B, 12 * S * K * Q * eps.element_size(), eps.device)
    if rows >= B:
        return compilation.call(_score_means, g, eps, control)
    parts = [compilation.call(_score_means, g[:, :, i:i + rows], eps[:, :, i:i + rows], control) for i in range(0, B, rows)]
    return torch.cat([p[0] for p in parts], dim=1), torch.cat([p[1] for p in parts], dim=1)


def _quadrature(likelihood, y, mean, var, weights, scale, n):
    """Gauss-Hermite tensor-grid quadrature of the values and score-identity gradients."""
    K, B, Q = mean.shape
    if n ** Q > 20000:
        raise ValueError(f"estimator='quadrature' with Q={Q} needs {n}^{Q} grid points; use 'score' or fewer points")
    nodes, wgrid = gauss_hermite_grid(n, Q, mean)  # (G, Q), (G,)
    eps = nodes[:, None, None, :].expand(-1, K, B, Q)  # (G, K, B, Q)
    sd = torch.sqrt(var)
    values = checked_log_prob(likelihood, y, mean.detach() + sd.detach() * eps)  # (G, K, B)
    wv = wgrid[:, None, None]
    g = values.detach().unsqueeze(-1)
    wq = wgrid[:, None, None, None]
    grad_b = (wq * g * eps).sum(0) / sd.detach()
    grad_s2 = (wq * g * (eps * eps - 1.0)).sum(0) / (2.0 * var.detach())
    surrogate = (mean * grad_b + var * grad_s2).sum(-1)
    per = (wv * values).sum(0) + (surrogate - surrogate.detach())
    return ELLEstimate(_weighted_sum(weights, per, scale), (wv * values).detach().sum(0), 0.0)


def expected_log_lik_joint(likelihood, y: Tensor, mean: Tensor, cov: Tensor, *, estimator: str,
                           num_samples: int, scale: float = 1.0,
                           generator: torch.Generator | None = None) -> ELLEstimate:
    """L_ell for a posterior coupled across latent functions (:mod:`savigp.posteriors.joint`):
    q(f_n) = N(b_n, C_n) with a full Q x Q covariance, one component.

    Args:
        likelihood: a :class:`likelihoods.Likelihood`.
        y: targets ``(B, P)``.
        mean: ``(B, Q)``; cov: ``(B, Q, Q)`` (both carrying the graph to the posterior and kernel).
        estimator: ``"reparam"`` (f = b + chol(C) eps, differentiable log p), ``"score"`` (values of
            log p only: the score-function gradient E[(log p(y|f) - c_{-s}) d log q(f)] with the
            leave-one-out mean c_{-s} of the other S - 1 values as baseline, or at S = 2 the value
            log p(y | b) at the mean (:func:`_mean_baseline`), which keeps it exactly unbiased),
            ``"score-nocv"`` (no baseline) or ``"closed-form"`` (the likelihood's ``expected_log_prob``
            of the per-latent marginals: right for likelihoods whose expectation depends on each
            f_nj's marginal only, e.g. independent Gaussian outputs);
            ``"auto"`` resolves as for factorized posteriors.
        num_samples: S draws per data point.
        scale: N / B.
        generator: torch.Generator for the draws.

    Returns:
        an :class:`ELLEstimate` with shapes as for :func:`expected_log_lik` (K = 1).
    """
    estimator = resolve_estimator(estimator, likelihood)
    B, Q = mean.shape
    if tuple(cov.shape) != (B, Q, Q):
        raise ValueError(f"cov must be {(B, Q, Q)} for mean {(B, Q)}, got {tuple(cov.shape)}")
    weights = mean.new_ones(1)
    if estimator == "closed-form":
        var = cov.diagonal(dim1=-2, dim2=-1)
        return expected_log_lik(likelihood, y, mean[None], var[None], weights, estimator="closed-form",
                                num_samples=num_samples, scale=scale)
    if estimator not in ("reparam", "score", "score-nocv"):
        raise ValueError(f"estimator={estimator!r} is not available with posterior='joint'; "
                         "use 'reparam', 'score', 'score-nocv' or 'closed-form'")
    S = int(num_samples)
    if S < 2:
        raise ValueError(f"num_samples must be >= 2 for estimator={estimator!r}, got {S}")
    eps = _sample_eps((S, 1, B, Q), mean, generator)  # (S, 1, B, Q)
    L = point_cholesky(cov)  # (B, Q, Q)
    if estimator == "reparam":
        f = mean + torch.matmul(L, eps.unsqueeze(-1)).squeeze(-1)  # (S, 1, B, Q)
        values = checked_log_prob(likelihood, y, f)  # (S, 1, B)
        per = values.mean(0)
        return ELLEstimate(_weighted_sum(weights, per, scale), per.detach(), _stderr(values, weights, scale))
    with torch.no_grad():
        f = mean + torch.matmul(L, eps.unsqueeze(-1)).squeeze(-1)
    values = checked_log_prob(likelihood, y, f, check_finite=False)  # may carry likelihood-parameter gradients
    per_value = values.mean(0)  # (1, B)
    _check_means(likelihood, y, f, per_value)
    g = values.detach()
    if estimator == "score" and S == 2:  # one other sample: the baseline at the mean, as for factorized q
        g = g - _mean_baseline(likelihood, y, mean.unsqueeze(0))
    elif estimator == "score":
        g = g - (g.sum(0, keepdim=True) - g) / (S - 1)  # leave-one-out baseline
    # log q(f_s) up to a constant, differentiable in b and C: -log|L| - |L^-1 (f - b)|^2 / 2
    z = torch.linalg.solve_triangular(L, (f.detach() - mean).unsqueeze(-1), upper=False).squeeze(-1)  # (S, 1, B, Q)
    logq = -torch.log(L.diagonal(dim1=-2, dim2=-1)).sum(-1) - 0.5 * (z * z).sum(-1)  # (S, 1, B)
    surrogate = (g * logq).mean(0)  # (1, B)
    per = per_value + (surrogate - surrogate.detach())
    return ELLEstimate(_weighted_sum(weights, per, scale), per_value.detach(), _stderr(values, weights, scale))


# ---------------------------------------------------------------------- the registered estimators
class Estimator:
    """An estimator of L_ell (eq. (24), (29), (33)) for the marginals of one batch, built with no
    arguments from :data:`ESTIMATORS` and called once per ELBO evaluation::

        estimate = estimator(likelihood, y, marginals, num_samples=S, scale=N / B, generator=gen)

    with targets ``y (B, P)`` and :class:`~savigp.estimators.marginals.LatentMarginals` (means and
    variances ``(K, B, Q)``, covariances ``(K, B, Q, Q)`` or None, log-weights ``(K,)``); it returns
    an :class:`ELLEstimate` whose value's gradient is the estimator's. A subclass implements
    :meth:`factorized` and, if it can, :meth:`coupled`; :meth:`resolve` says which likelihoods it
    takes.
    """

    def __call__(self, likelihood, y: Tensor, marginals: LatentMarginals, *, num_samples: int, scale: float = 1.0,
                 generator: torch.Generator | None = None) -> ELLEstimate:
        if marginals.coupled:
            return self.coupled(likelihood, y, marginals, num_samples=num_samples, scale=scale, generator=generator)
        return self.factorized(likelihood, y, marginals, num_samples=num_samples, scale=scale, generator=generator)

    @classmethod
    def resolve(cls, name: str, likelihood) -> str:
        """The name this estimator runs under for ``likelihood`` (its own); a ValueError when the
        likelihood does not allow it."""
        return name

    def factorized(self, likelihood, y: Tensor, marginals: LatentMarginals, *, num_samples: int, scale: float,
                   generator: torch.Generator | None) -> ELLEstimate:
        """L_ell for q_k(f_n) = prod_j N(b_knj, s2_knj)."""
        raise NotImplementedError

    def coupled(self, likelihood, y: Tensor, marginals: LatentMarginals, *, num_samples: int, scale: float,
                generator: torch.Generator | None) -> ELLEstimate:
        """L_ell for q(f_n) = N(b_n, C_n) coupled across the latent functions."""
        raise ValueError(f"estimator {type(self).__name__} is not available for a posterior coupled across the latent "
                         "functions (posterior='joint'); use 'reparam', 'score', 'score-nocv' or 'closed-form'")


class _Builtin(Estimator):
    """The estimators of this module's functions, by their name (:func:`expected_log_lik`,
    :func:`expected_log_lik_joint`)."""

    name = ""

    def factorized(self, likelihood, y, marginals, *, num_samples, scale, generator):
        return expected_log_lik(likelihood, y, marginals.mean, marginals.var, marginals.weights(), estimator=self.name,
                                num_samples=num_samples, scale=scale, generator=generator)

    def coupled(self, likelihood, y, marginals, *, num_samples, scale, generator):
        if marginals.shape[0] != 1:
            raise ValueError(f"a coupled q(f_n) has one component here, got K={marginals.shape[0]}")
        return expected_log_lik_joint(likelihood, y, marginals.mean[0], marginals.cov[0], estimator=self.name,
                                      num_samples=num_samples, scale=scale, generator=generator)


class ClosedForm(_Builtin):
    """``"closed-form"``: the likelihood's own ``expected_log_prob`` (coupled marginals: of their
    per-latent marginals, right for likelihoods whose expectation depends on each f_nj alone)."""

    name = "closed-form"

    @classmethod
    def resolve(cls, name, likelihood):
        if not likelihood.has_closed_form_ell:
            raise ValueError(f"estimator='closed-form': {type(likelihood).__name__} has no closed-form expected "
                             "log-likelihood")
        return name


class Quadrature(_Builtin):
    """``"quadrature"``: Gauss-Hermite quadrature on a tensor grid (small Q, factorized marginals)."""

    name = "quadrature"


class Reparameterization(_Builtin):
    """``"reparam"``: f = b + C^(1/2) eps, log p differentiated in f."""

    name = "reparam"

    @classmethod
    def resolve(cls, name, likelihood):
        if not likelihood.differentiable:
            raise ValueError(f"estimator='reparam' needs a likelihood differentiable in f; {type(likelihood).__name__} "
                             "is declared non-differentiable (use 'score')")
        return name


class ScoreFunction(_Builtin):
    """``"score"``: the score-function estimator with the control variates of the module docstring."""

    name = "score"


class ScoreFunctionNoCV(_Builtin):
    """``"score-nocv"``: the score-function estimator without control variates."""

    name = "score-nocv"


class Automatic(Estimator):
    """``"auto"``: ``"closed-form"`` when the likelihood has one, else ``"reparam"`` when it is
    declared differentiable in f, else ``"score"`` (:func:`resolve_estimator`)."""

    @classmethod
    def resolve(cls, name, likelihood):
        if likelihood.has_closed_form_ell:
            return "closed-form"
        return "reparam" if likelihood.differentiable else "score"

    def __call__(self, likelihood, y, marginals, **kwargs):
        return make_estimator("auto", likelihood)(likelihood, y, marginals, **kwargs)
