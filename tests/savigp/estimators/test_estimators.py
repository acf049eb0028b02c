"""Issue 2, check 2: the ELL gradient estimators are unbiased (within Monte Carlo standard error
of analytic gradients) and the control variates cut the variance by a measured factor."""
import math

import numpy as np
import pytest
import torch

from likelihoods import Gaussian, Logistic
from savigp.estimators import make_estimator
from savigp.estimators.score import CV_REGRESSION_MIN_SAMPLES, _score_means
from savigp.posteriors.marginals import LatentMarginals

K, B, Q = 2, 12, 1
R = 300  # independent estimates per estimator
S = 10  # samples per estimate


def _ell(lik, y, mean, var, weights, *, estimator, num_samples, generator=None):
    """The registered estimator ``estimator`` on factorized marginals: means and variances ``(K, B, Q)``,
    mixture weights ``(K,)``."""
    q = LatentMarginals(mean, var, torch.log(weights))
    return make_estimator(estimator, lik)(lik, y, q, num_samples=num_samples, generator=generator)


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    mean = (torch.randn(K, B, Q, generator=g)).requires_grad_(True)
    var = (0.2 + torch.rand(K, B, Q, generator=g)).requires_grad_(True)
    logits = torch.randn(K, generator=g).requires_grad_(True)
    return mean, var, logits


def _estimates(lik, y, estimator, seed=0, num_samples=S, reps=R):
    """R independent gradient estimates wrt (mean, var, logits), flattened: (R, 2*K*B*Q + K)."""
    mean, var, logits = _inputs()
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(reps):
        est = _ell(lik, y, mean, var, torch.softmax(logits, 0), estimator=estimator, num_samples=num_samples,
                   generator=gen)
        gm, gv, gl = torch.autograd.grad(est.value, (mean, var, logits))
        out.append(torch.cat([gm.flatten(), gv.flatten(), gl.flatten()]))
    return torch.stack(out)


def _gaussian_truth(lik, y):
    """Analytic gradients of sum_n sum_k pi_k E[log N(y; f, s^2)]."""
    mean, var, logits = _inputs()
    est = _ell(lik, y, mean, var, torch.softmax(logits, 0), estimator="closed-form", num_samples=2)
    return torch.cat([g.flatten() for g in torch.autograd.grad(est.value, (mean, var, logits))])


def _logistic_truth(y):
    """Gradients by 100-point Gauss-Hermite quadrature of E[log sigmoid(y f)] and its derivatives."""
    mean, var, logits = _inputs()
    x, w = np.polynomial.hermite_e.hermegauss(100)
    x = torch.as_tensor(x)
    w = torch.as_tensor(w / w.sum())
    m, v = mean.detach(), var.detach()
    pi = torch.softmax(logits.detach(), 0)
    s = torch.where(y[:, 0] > 0, 1.0, -1.0)[None, :, None]
    f = m[..., None] + v.sqrt()[..., None] * x  # (K, B, Q, 100)
    sig = torch.sigmoid(-s[..., None] * f)
    d1 = (w * s[..., None] * sig).sum(-1)  # E[d/df log sigmoid(s f)]
    d2 = (w * (-sig * (1 - sig))).sum(-1)  # E[d2/df2]
    values = (w * torch.nn.functional.logsigmoid(s[..., None] * f)).sum(-1).sum((-1, -2))  # (K,)
    g_mean = pi[:, None, None] * d1
    g_var = pi[:, None, None] * 0.5 * d2
    g_logits = pi * (values - (pi * values).sum())
    return torch.cat([g_mean.flatten(), g_var.flatten(), g_logits.flatten()])


def _assert_unbiased(G, truth):
    se = G.std(0) / math.sqrt(G.shape[0])
    z = (G.mean(0) - truth) / se
    assert float(z.abs().max()) < 4.5, f"max |z| = {float(z.abs().max()):.2f}"
    assert float((z * z).mean()) < 1.6, f"mean z^2 = {float((z * z).mean()):.2f}"


@pytest.fixture(scope="module")
def gaussian_case():
    torch.set_default_dtype(torch.float64)
    lik = Gaussian(0.3)
    y = torch.randn(B, 1, generator=torch.Generator().manual_seed(3))
    return lik, y, _gaussian_truth(lik, y)


@pytest.mark.parametrize("estimator", ["score", "score-nocv", "reparam"])
def test_gradients_are_unbiased_gaussian(gaussian_case, estimator):
    lik, y, truth = gaussian_case
    _assert_unbiased(_estimates(lik, y, estimator), truth)


@pytest.mark.parametrize("estimator", ["score", "score-nocv"])
def test_gradients_are_unbiased_logistic(estimator):
    y = torch.where(torch.rand(B, 1, generator=torch.Generator().manual_seed(4)) > 0.5, 1.0, -1.0)
    _assert_unbiased(_estimates(Logistic(), y, estimator), _logistic_truth(y))


def test_quadrature_estimator_matches_analytic_gradients(gaussian_case):
    lik, y, truth = gaussian_case
    mean, var, logits = _inputs()
    est = _ell(lik, y, mean, var, torch.softmax(logits, 0), estimator="quadrature", num_samples=2)
    got = torch.cat([g.flatten() for g in torch.autograd.grad(est.value, (mean, var, logits))])
    assert torch.allclose(got, truth, rtol=1e-8, atol=1e-10)


def control_variate_variance_ratio(lik, y, num_samples):
    """Per-element variance of the score estimator without / with control variates: (median, min)."""
    nocv = _estimates(lik, y, "score-nocv", num_samples=num_samples, reps=200).var(0)
    cv = _estimates(lik, y, "score", num_samples=num_samples, reps=200).var(0)
    n = 2 * K * B * Q  # the b and s2 gradients (the logits' come from values alone)
    ratio = nocv[:n] / cv[:n]
    return float(ratio.median()), float(ratio.min())


@pytest.mark.parametrize("num_samples, least", [(10, 1.3), (100, 1.8)])
def test_control_variates_cut_the_variance(gaussian_case, capsys, num_samples, least):
    """The median per-element variance ratio (no CV / CV) of the b and s2 gradients, measured with
    200 independent estimates each (the ratio's sampling error is about 10%)."""
    lik, y, _ = gaussian_case
    med_g, min_g = control_variate_variance_ratio(lik, y, num_samples)
    yl = torch.where(torch.rand(B, 1, generator=torch.Generator().manual_seed(4)) > 0.5, 1.0, -1.0)
    med_l, min_l = control_variate_variance_ratio(Logistic(), yl, num_samples)
    with capsys.disabled():
        print(f"\n[control variates] variance reduction (no CV / CV), S={num_samples}: Gaussian median "
              f"{med_g:.2f}x (min {min_g:.2f}x); logistic median {med_l:.2f}x (min {min_l:.2f}x)")
    assert med_g > least and med_l > least


def test_score_means_match_brute_force_leave_one_out():
    """The score estimator's control-variate algebra (savigp.estimators.score._score_means, from sums over
    the samples) against the definition: for each sample s, a_{-s} = Cov(G, h) / Var(h) over the
    other S - 1 samples (unbiased sample moments), for h_b = eps and h_s2 = eps^2 - 1 (S >= 50),
    and a_{-s} = w gbar over the other samples (3 <= S < 50; gbar their mean, w = max(0, 1 - their
    variance / ((S - 1) gbar^2)))."""
    gen = torch.Generator().manual_seed(4)
    S_, K_, B_, Q_ = 5, 2, 5, 3
    eps = torch.randn(S_, K_, B_, Q_, generator=gen, dtype=torch.float64)
    g = torch.randn(S_, K_, B_, 1, generator=gen, dtype=torch.float64) + 2.0
    got = _score_means(g, eps, True)
    for h, out in ((eps, got[0]), (eps * eps - 1.0, got[1])):
        terms = []
        for s in range(S_):
            rest = torch.cat([g[:s], g[s + 1:]])
            w = (1 - rest.var(0) / ((S_ - 1) * rest.mean(0) ** 2)).clamp_min(0)
            terms.append((g[s] - w * rest.mean(0)) * h[s])
        want = torch.stack(terms).mean(0)
        assert torch.allclose(out, want, rtol=1e-10, atol=1e-12), float((out - want).abs().max())
    S_ = CV_REGRESSION_MIN_SAMPLES + 3
    eps = torch.randn(S_, K_, B_, Q_, generator=gen, dtype=torch.float64)
    g = torch.randn(S_, K_, B_, 1, generator=gen, dtype=torch.float64) + 2.0
    got = _score_means(g, eps, True)
    for h, out in ((eps, got[0]), (eps * eps - 1.0, got[1])):
        G = g * h
        terms = []
        for s in range(S_):
            rest = torch.cat([torch.arange(s), torch.arange(s + 1, S_)])
            Gr, hr = G[rest], h[rest]
            cov = ((Gr - Gr.mean(0)) * (hr - hr.mean(0))).sum(0) / (S_ - 2)
            a = cov / hr.var(0)
            terms.append(G[s] - a * h[s])
        want = torch.stack(terms).mean(0)
        assert torch.allclose(out, want, rtol=1e-10, atol=1e-12), float((out - want).abs().max())
    plain = _score_means(g, eps, False)
    assert torch.allclose(plain[0], (g * eps).mean(0)) and torch.allclose(plain[1], (g * (eps * eps - 1)).mean(0))


@pytest.mark.parametrize("num_samples", [2, 3, 5, 10])
def test_small_sample_control_variate_never_worse_and_unbiased(num_samples, capsys):
    """S = 2..10, logistic likelihood, 400 estimates with and without the control variate from the
    same draws: no b or s2 gradient element has a larger variance with it (ratio > 0.9: the minimum
    over 50 ratios of 400-draw variances has a sampling spread of about 10%; measured minima 1.39,
    1.29, 1.25, 1.46 at S = 2, 3, 5, 10; at S = 2 there was none before the baseline at the
    marginal mean, ratio 1 exactly, which fails the median check), the median ratio is above 1.3,
    and the estimates are unbiased against 100-point quadrature (max |z|
    < 4.5, mean z^2 < 2 over the 50 elements, which are correlated through the shared logits). The
    former regression coefficient failed the first check at S = 3 (minimum ratio 0.00) and S = 5
    (0.83)."""
    yl = torch.where(torch.rand(B, 1, generator=torch.Generator().manual_seed(4)) > 0.5, 1.0, -1.0)
    lik = Logistic()
    n = 2 * K * B * Q
    nocv = _estimates(lik, yl, "score-nocv", num_samples=num_samples, reps=400, seed=11)
    cv = _estimates(lik, yl, "score", num_samples=num_samples, reps=400, seed=11)  # the same draws
    ratio = nocv.var(0)[:n] / cv.var(0)[:n]
    with capsys.disabled():
        print(f"\n[control variates] S={num_samples}: variance ratio (no CV / CV) min {float(ratio.min()):.2f}, "
              f"median {float(ratio.median()):.2f}")
    assert float(ratio.min()) > 0.9
    assert float(ratio.median()) > 1.3
    truth = _logistic_truth(yl)
    z = (cv.mean(0) - truth) / (cv.std(0) / math.sqrt(cv.shape[0]))
    assert float(z.abs().max()) < 4.5 and float((z * z).mean()) < 2.0, (float(z.abs().max()), float((z * z).mean()))


def _poisson_case():
    from likelihoods import Poisson

    mean, var, _ = _inputs()
    rate = torch.exp(mean.detach()[0, :, 0] + 0.5 * var.detach()[0, :, 0])
    y = torch.poisson(rate, generator=torch.Generator().manual_seed(5))[:, None]
    lik = Poisson(learn_offset=False)
    return lik, y, _gaussian_truth(lik, y)  # the closed-form expected log-likelihood's gradients


def test_two_sample_control_variate_is_unbiased_and_cuts_the_variance_poisson(capsys):
    """S = 2 (issue 25: the score estimator had no control variate there), Poisson likelihood (the
    logistic case: ``test_small_sample_control_variate_never_worse_and_unbiased[2]``): 2000
    estimates with and without it from the same draws. Unbiased: every element of the mean gradient
    within 4.5 standard errors of the closed form's and mean z^2 < 2 over the 50 correlated
    elements (the s2 gradients' excess kurtosis is ~100-400, so fewer estimates make the standard
    errors themselves unreliable: the same check at 1000 gave one |z| of 4.5 on logistic, 0.35 at
    8000). Lower variance: the median over the b and s2 gradient elements of the variance ratio
    without / with it exceeds 1 by more than 3 bootstrap standard errors (200 resamples of the
    estimates: the margin comes from their own heavy-tailed spread), and no element is
    significantly worse (the paired difference of squared deviations has z > -3 everywhere).
    Measured: 1.36 +- 0.03; the test fails without the control variate (ratio 1 exactly)."""
    lik, y, truth = _poisson_case()
    reps, n = 2000, 2 * K * B * Q
    nocv = _estimates(lik, y, "score-nocv", num_samples=2, reps=reps, seed=21)
    cv = _estimates(lik, y, "score", num_samples=2, reps=reps, seed=21)
    z = (cv.mean(0) - truth) / (cv.std(0) / math.sqrt(reps))
    assert float(z.abs().max()) < 4.5 and float((z * z).mean()) < 2.0, (float(z.abs().max()), float((z * z).mean()))
    nocv, cv = nocv[:, :n], cv[:, :n]  # the b and s2 gradients (the logits' come from values alone)

    def median_ratio(idx):
        return float((nocv[idx].var(0) / cv[idx].var(0)).median())

    ratio = median_ratio(torch.arange(reps))
    gen = torch.Generator().manual_seed(0)
    se = float(torch.tensor([median_ratio(torch.randint(reps, (reps,), generator=gen)) for _ in range(200)]).std())
    d = (nocv - nocv.mean(0)) ** 2 - (cv - cv.mean(0)) ** 2  # (reps, n): paired, same draws
    paired_z = d.mean(0) / (d.std(0) / math.sqrt(reps))
    with capsys.disabled():
        print(f"\n[control variates] S=2, poisson: median variance ratio (no CV / CV) {ratio:.2f} +- {se:.2f}, "
              f"least paired z {float(paired_z.min()):.1f}")
    assert ratio - 3 * se > 1.0, (ratio, se)
    assert float(paired_z.min()) > -3.0


def test_two_sample_baseline_is_dropped_where_log_p_at_the_mean_is_not_finite():
    """log p = log |f| is -inf at the marginal mean b = 0: that point gets no baseline (the plain
    score estimate from the same draws) and the estimate stays finite; the others get one."""
    from likelihoods import CallableLikelihood

    lik = CallableLikelihood(lambda y, f: torch.log(f[..., 0].abs()), backend="torch")
    y = torch.zeros(3, 1, dtype=torch.float64)
    mean = torch.tensor([[[0.0], [2.0], [3.0]]], dtype=torch.float64, requires_grad=True)
    var = torch.full((1, 3, 1), 0.5, dtype=torch.float64, requires_grad=True)
    grads = {}
    for est in ("score", "score-nocv"):
        value = _ell(lik, y, mean, var, torch.ones(1, dtype=torch.float64), estimator=est, num_samples=2,
                     generator=torch.Generator().manual_seed(3)).value
        grads[est] = torch.cat([g.flatten() for g in torch.autograd.grad(value, (mean, var))])
    assert bool(torch.isfinite(grads["score"]).all())
    same = torch.isclose(grads["score"], grads["score-nocv"], rtol=1e-12, atol=1e-12)
    assert same.tolist() == [True, False, False, True, False, False]  # (b, s2) of point 0 only


def test_joint_score_estimator_at_two_samples_uses_the_same_baseline():
    """posterior='joint' with Q = 1 is the factorized case written with a 1 x 1 covariance: from the
    same draws its S = 2 score gradients equal the factorized estimator's (the baseline at the
    marginal mean; the joint path used the other sample's value before)."""
    y = torch.where(torch.rand(B, 1, generator=torch.Generator().manual_seed(4)) > 0.5, 1.0, -1.0)
    g = torch.Generator().manual_seed(1)
    mean = torch.randn(B, 1, generator=g, dtype=torch.float64).requires_grad_(True)
    var = (0.2 + torch.rand(B, 1, generator=g, dtype=torch.float64)).requires_grad_(True)
    coupled = LatentMarginals(mean[None], var[None], torch.zeros(1, dtype=torch.float64), cov=var.unsqueeze(-1)[None])
    joint = make_estimator("score", Logistic(), coupled=True)(Logistic(), y, coupled, num_samples=2,
                                                              generator=torch.Generator().manual_seed(7)).value
    fact = _ell(Logistic(), y, mean[None], var[None], torch.ones(1, dtype=torch.float64), estimator="score",
                num_samples=2, generator=torch.Generator().manual_seed(7)).value
    for a, b in zip(torch.autograd.grad(joint, (mean, var)), torch.autograd.grad(fact, (mean, var))):
        assert torch.allclose(a, b, rtol=1e-9, atol=1e-12), float((a - b).abs().max())


def test_quadrature_refuses_a_grid_too_large_when_it_is_resolved_not_after_training_starts():
    """20^Q Gauss-Hermite points: Q = 3 is 8000 (built), Q = 4 is 160000 (refused in one line, by the
    estimator's own declaration, so `fit` and the CLI refuse it before the first step)."""
    from likelihoods import Softmax
    from savigp.estimators.base import make_estimator, resolve_estimator

    assert resolve_estimator("quadrature", Softmax(3)) == "quadrature"
    with pytest.raises(ValueError, match=r"Q=4 latent functions needs a grid of 20\^4 points"):
        make_estimator("quadrature", Softmax(4))
