"""The score-function estimator of the expected log-likelihood with control variates, ``"score"``: the paper's
black-box estimator (Bonilla et al. 2019, §5, eq. (25)-(26), App. F). Only values of log p(y | f) are used.

For lambda in {b_knj, s2_knj} the gradient E_q[log p(y_n | f_n) d/dlambda log q_k(f_n)] (eq. 25) is
estimated from S samples f = b + sqrt(s2) eps, with scores

    h_b = (f_j - b_j) / s2_j = eps_j / sqrt(s2_j),    h_s2 = (eps_j^2 - 1) / (2 s2_j),

and the control variate of App. F: g~ = g - a h with a = Cov(g, h) / Var(h), g = h log p
(eq. 97-103). The paper estimates Cov and Var from the same samples as the gradient, which makes
the estimate biased (a depends on the sample it multiplies). Here every coefficient for sample s comes from the *other* S - 1 samples only, so it is independent of
sample s and the estimator is exactly unbiased:

- S >= ``CV_REGRESSION_MIN_SAMPLES`` (50): the regression coefficient a_{-s} = Cov_{-s}(G, h) /
  Var_{-s}(h) (leave-one-out), per data point, component and latent function;
- 3 <= S < 50: a leave-one-out baseline a_{-s} = w gbar_{-s}, gbar_{-s} the mean of log p over
  the other S - 1 samples of the same point and component, shrunk by w in [0, 1] estimated from
  the same other samples (see :func:`_baseline_means`), for both scores: the regression
  coefficient is a ratio of two (S - 1)-sample moments, and at S = 3 its denominator from two samples
  gives it a Cauchy-like tail; the baseline has no denominator;
- S = 2: one other sample estimates neither a coefficient nor a shrinkage, so the baseline is
  a = log p(y_n | b_kn), the log-likelihood at the marginal mean (one more evaluation per point
  and component): it depends on no sample, so the estimate stays exactly unbiased, and it is
  close to E_q[log p] wherever log p is smooth on the scale of the marginal's spread. For a
  concave log p <= 0 (logistic, Poisson) it provably does not raise the b gradient's variance:
  E[(g - a)^2 eps^2] <= E[g^2 eps^2] iff a^2 <= 2 a E[g eps^2], and E[g eps^2] = E[g] + s2 E[g'']
  <= E[g] <= a <= 0 (Stein's lemma, Jensen's inequality). Non-finite values (a likelihood
  undefined at the mean) fall back to no baseline.

The variance each of them removes is measured in docs/performance.md ("Score-function control
variates"). The gradient of pi_k comes from the values E_{q_k}[log p] alone (eq. 26). Wired into
autograd as the surrogate ``sum (b * g_b + s2 * g_s2)`` (whose value is removed), so the chain rule of
App. D-E is autograd's.

For marginals coupled across the latent functions, q(f_n) = N(b_n, C_n), the gradient is
E[(log p(y | f) - c_{-s}) d log q(f)] with the leave-one-out mean c_{-s} of the other S - 1 values as
baseline (at S = 2 the value log p(y | b) at the mean), through log q(f_s) = -log|L| - |L^-1 (f - b)|^2 / 2
differentiated in b and C = L L^T.
"""
from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from ..linalg import chunks as _chunks
from ..runtime import compilation
from .base import ELLEstimate, Estimator
from .sampling import check_means, checked_log_prob, coupled_draws, factorized_draws, monte_carlo_stderr, weighted_sum

#: below this many samples the score estimator's control variate is the leave-one-out baseline,
#: from it on the leave-one-out regression coefficient (see the module docstring)
CV_REGRESSION_MIN_SAMPLES = 50


class ScoreFunction(Estimator):
    """``"score"``: the score-function estimator with the control variates of the module docstring."""

    name = "score"
    summary = "values of the likelihood only, with control variates"
    takes_coupled_marginals = True
    score_function = True
    #: subtract the control variates (:class:`~savigp.estimators.score_nocv.ScoreFunctionNoCV`: False)
    control: ClassVar[bool] = True
    #: see :func:`~savigp.estimators.sampling.factorized_draws` (None: shared without gradients)
    common_draws: ClassVar[bool | None] = None

    def factorized(self, likelihood, y, marginals, *, num_samples, scale, generator):
        mean, var, weights = marginals.mean, marginals.var, marginals.weights()
        eps, common = factorized_draws(mean, num_samples, generator, self.common_draws)
        S = eps.shape[0]
        sd = torch.sqrt(var)
        # f is detached: only values of log p are used
        f = torch.addcmul(mean.detach(), sd.detach(), eps)
        values = checked_log_prob(likelihood, y, f, check_finite=False)  # (S, K, B); may carry likelihood-parameter gradients
        per_value = values.mean(0)  # (K, B)
        check_means(likelihood, y, f, per_value)
        g = values.detach().unsqueeze(-1)  # (S, K, B, 1)
        control = self.control
        if control and S == 2:  # too few samples for a leave-one-out coefficient: a baseline at the mean
            g = g - _mean_baseline(likelihood, y, mean).unsqueeze(-1)
            control = False
        mean_b, mean_s2 = _score_means_dispatch(g, eps, control)
        grad_b = mean_b / sd.detach()
        grad_s2 = mean_s2 / (2.0 * var.detach())
        surrogate = (mean * grad_b + var * grad_s2).sum(-1)  # (K, B)
        per = per_value + (surrogate - surrogate.detach())
        return ELLEstimate(weighted_sum(weights, per, scale), per_value.detach(),
                           monte_carlo_stderr(values, weights, scale, common))

    def coupled(self, likelihood, y, marginals, *, num_samples, scale, generator):
        mean, cov = marginals.mean[0], marginals.cov[0]  # (B, Q), (B, Q, Q)
        weights = mean.new_ones(1)
        eps, L = coupled_draws(mean, cov, num_samples, generator, self.name)  # (S, 1, B, Q), (B, Q, Q)
        S = eps.shape[0]
        with torch.no_grad():
            f = mean + torch.matmul(L, eps.unsqueeze(-1)).squeeze(-1)
        values = checked_log_prob(likelihood, y, f, check_finite=False)  # may carry likelihood-parameter gradients
        per_value = values.mean(0)  # (1, B)
        check_means(likelihood, y, f, per_value)
        g = values.detach()
        if self.control and S == 2:  # one other sample: the baseline at the mean, as for factorized q
            g = g - _mean_baseline(likelihood, y, mean.unsqueeze(0))
        elif self.control:
            g = g - (g.sum(0, keepdim=True) - g) / (S - 1)  # leave-one-out baseline
        # log q(f_s) up to a constant, differentiable in b and C: -log|L| - |L^-1 (f - b)|^2 / 2
        z = torch.linalg.solve_triangular(L, (f.detach() - mean).unsqueeze(-1), upper=False).squeeze(-1)  # (S, 1, B, Q)
        logq = -torch.log(L.diagonal(dim1=-2, dim2=-1)).sum(-1) - 0.5 * (z * z).sum(-1)  # (S, 1, B)
        surrogate = (g * logq).mean(0)  # (1, B)
        per = per_value + (surrogate - surrogate.detach())
        return ELLEstimate(weighted_sum(weights, per, scale), per_value.detach(), monte_carlo_stderr(values, weights, scale))


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
    plain baseline made things worse). c_{-s} depends on the other samples
    only, so E[(g_s - c_{-s}) h_s] = E[g h] (E[h] = 0): unbiased. S = 2 leaves no variance
    estimate: the plain score estimator here (:meth:`ScoreFunction.factorized` subtracts the baseline at
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
