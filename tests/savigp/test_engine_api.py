"""Engine behaviour a user meets: bad input, predictions, user likelihoods, kernels, devices."""
import math
import warnings

import numpy as np
import pytest
import torch

import savigp
from likelihoods import CallableLikelihood, Gaussian, Logistic, Softmax

from conftest import exact_gp, requires_cuda


def _data(N=60, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(N, 1, generator=g) * 6
    Y = torch.sin(X) + 0.1 * torch.randn(N, 1, generator=g)
    return X, Y


# ---------------------------------------------------------------- bad input
def test_mismatched_rows_name_both_shapes():
    X, Y = _data()
    with pytest.raises(ValueError, match=r"Y has 59 rows \(shape \(59, 1\)\) but the inputs have 60 rows"):
        savigp.SAVIGP(X, Y[:-1], Gaussian())


def test_nan_in_inputs_names_the_row():
    X, Y = _data()
    X[7, 0] = float("nan")
    with pytest.raises(ValueError, match=r"X of shape \(60, 1\) contains 1 NaN/inf value\(s\) at row 7"):
        savigp.SAVIGP(X, Y, Gaussian())


def test_inf_in_targets_names_the_row():
    X, Y = _data()
    Y[3, 0] = float("inf")
    with pytest.raises(ValueError, match="Y of shape .* row 3"):
        savigp.SAVIGP(X, Y, Gaussian())


def test_bad_labels_are_named_by_the_likelihood():
    X, _ = _data()
    Y = torch.ones(60, 1)
    Y[5] = 2.0
    with pytest.raises(ValueError, match=r"row 5: \[2.0\]"):
        savigp.SAVIGP(X, Y, Logistic())


def test_kernel_with_wrong_number_of_latents():
    X, _ = _data()
    Y = torch.zeros(60, 1, dtype=torch.long)
    # num_latent=1 is a kernel shared by the Q functions (tests/savigp/test_shared_kernel.py); 2 fits neither
    with pytest.raises(ValueError, match="kernel has num_latent=2 but the likelihood Softmax needs Q=3"):
        savigp.SAVIGP(X, Y, Softmax(3), savigp.RBF(1, 2))


def test_prediction_inputs_with_wrong_dimension():
    X, Y = _data()
    model = savigp.SAVIGP(X, Y, Gaussian(), num_inducing=5)
    with pytest.raises(ValueError, match=r"X must have shape \(N, 1\) to match the model, got \(4, 3\)"):
        model.predict(torch.zeros(4, 3))


def test_user_likelihood_returning_wrong_shape():
    X, Y = _data()
    lik = CallableLikelihood(lambda y, f: f.sum(-1, keepdim=True), num_latent=1, backend="torch")
    model = savigp.SAVIGP(X, Y, lik, num_inducing=5)
    with pytest.raises(ValueError, match=r"returned shape \(20, 1, 60, 1\) .* expected \(20, 1, 60\)"):
        model.elbo(num_samples=20)


def test_user_likelihood_returning_nan_names_rows():
    X, Y = _data()

    def log_lik(y, f):
        out = -0.5 * (y[:, 0] - f[..., 0]) ** 2
        return torch.where(y[:, 0] == float(Y[11, 0]), float("nan"), out)  # NaN at training row 11

    model = savigp.SAVIGP(X, Y, CallableLikelihood(log_lik, backend="torch"), num_inducing=5)
    with pytest.raises(ValueError, match=r"'.*log_lik' \(.*test_engine_api.py, line \d+\) returned NaN or inf .*data row 11: "
                                         r"y = \[.*\], f = \[.*\] -> nan"):
        model.elbo(num_samples=20)
    # a mini-batch's rows are reported as training-data rows
    with pytest.raises(ValueError, match=r"data row 11: "):
        model.elbo(torch.tensor([3, 11, 5]), num_samples=20)


def test_jitter_grows_with_a_warning_then_fails_clearly():
    from savigp.linalg.cholesky import robust_cholesky

    g = torch.Generator().manual_seed(0)
    Qm, _ = torch.linalg.qr(torch.randn(6, 6, generator=g))
    eig = torch.tensor([1.0, 0.5, 0.2, 0.1, 0.05, -1e-7])  # slightly indefinite, as rounding leaves it
    A = Qm @ torch.diag(eig) @ Qm.T
    with pytest.warns(RuntimeWarning, match=r"K_zz of shape \(6, 6\) needed relative jitter"):
        L = robust_cholesky(A, name="K_zz")
    assert torch.allclose(L @ L.T, A, atol=1e-5)
    L, rel = robust_cholesky(A, name="K_zz", return_jitter=True)
    assert rel > 1e-8  # grew from the base jitter
    shift = rel * A.diagonal().mean()
    assert torch.allclose(L @ L.T, A + shift * torch.eye(6), rtol=0, atol=1e-12)
    import warnings as _warnings
    with _warnings.catch_warnings():
        _warnings.simplefilter("error")  # the first try works: no warning
        _, rel_from = robust_cholesky(A, name="K_zz", return_jitter=True, initial_jitter=1e-3)
    assert rel_from == 1e-3  # starts where training's jitter floor is, never below
    with pytest.warns(RuntimeWarning, match="needed relative jitter"):
        _, rel_up = robust_cholesky(A, name="K_zz", return_jitter=True, initial_jitter=rel / 100)
    assert rel_up == pytest.approx(rel, rel=1e-12)  # from below: grows to the same jitter as from the base
    eig[-1] = -1.0  # far from positive definite: no jitter helps
    with pytest.raises(savigp.CholeskyError, match=r"K_zz of shape \(6, 6\) is not positive definite even with relative jitter"):
        robust_cholesky(Qm @ torch.diag(eig) @ Qm.T, name="K_zz")
    X, Y = _data()
    model = savigp.SAVIGP(X, Y, Gaussian(), num_inducing=6)
    with torch.no_grad():
        model.inducing[:, 2] = float("nan")
    with pytest.raises(savigp.CholeskyError, match=r"K_zz .* shape \(1, 6, 6\) has .* non-finite"):
        model.elbo()


def test_training_divergence_keeps_the_last_good_state():
    X, Y = _data()
    calls = {"n": 0}

    def log_lik(y, f):  # becomes NaN on the 4th evaluation
        calls["n"] += 1
        return -0.5 * (y[:, 0] - f[..., 0]) ** 2 + (float("nan") if calls["n"] >= 4 else 0.0)

    model = savigp.SAVIGP(X, Y, CallableLikelihood(log_lik, backend="torch"), num_inducing=5)
    with pytest.raises(ValueError, match="NaN"):
        savigp.fit(model, iterations=10, num_samples=10, progress=False)
    assert all(torch.isfinite(p).all() for p in model.parameters())


# ---------------------------------------------------------------- predictions
def test_monte_carlo_predictive_density_matches_the_closed_form():
    """log p(y*|x*) by Monte Carlo (log-sum-exp) vs log N(y*; mean, var + noise), within 4 SE."""
    X, Y = _data()
    lik = Gaussian(0.05)
    model = savigp.SAVIGP(X, Y, lik, num_inducing=10)
    savigp.fit(model, iterations=10, optimizer="lbfgs", lr=1.0, progress=False)
    Xs, Ys = _data(20, seed=5)
    S = 4000
    lpd = model.log_predictive_density(Xs, Ys, num_samples=S)
    mean, var, _ = model.predict_latent(Xs)
    exact = torch.distributions.Normal(mean[0, :, 0], (var[0, :, 0] + lik.variance()).sqrt()).log_prob(Ys[:, 0])
    # delta-method SE of log(mean of p): sd(p) / (sqrt(S) mean(p)) per point
    f = mean[0, :, 0] + var[0, :, 0].sqrt() * torch.randn(S, 20, generator=torch.Generator().manual_seed(0))
    p = torch.distributions.Normal(f, lik.variance().sqrt()).log_prob(Ys[:, 0]).exp()
    se = p.std(0) / (math.sqrt(S) * p.mean(0))
    assert bool(((lpd - exact).abs() < 4 * se + 1e-12).all())
    pred = model.predict(Xs, num_samples=S)  # Gaussian.predictive_moments: exact, no Monte Carlo
    assert torch.allclose(pred.mean[:, 0], mean[0, :, 0], rtol=0, atol=1e-12)
    assert torch.allclose(pred.variance[:, 0], var[0, :, 0] + lik.variance(), rtol=1e-12)


def test_predictive_moments_by_monte_carlo_match_the_lognormal_closed_form():
    """A likelihood without ``predictive_moments`` (Poisson, rate exp(f)) goes through Monte Carlo
    over q(f*) and ``conditional_moments``: E[y] = exp(m + v/2) and Var[y] = E[exp f] + Var[exp f]
    (law of total variance), within 4 standard errors of the estimator (its spread over 100
    independent replicates of the same computation)."""
    from likelihoods import Poisson

    g = torch.Generator().manual_seed(7)
    X = torch.rand(40, 1, generator=g, dtype=torch.float64) * 4 - 2
    Y = torch.poisson(torch.exp(torch.sin(2 * X)), generator=g)
    model = savigp.SAVIGP(X, Y, Poisson(learn_offset=False), num_inducing=6)
    savigp.fit(model, iterations=30, optimizer="lbfgs", lr=1.0, progress=False)
    Xs = torch.linspace(-2, 2, 9, dtype=torch.float64)[:, None]
    S = 40000
    pred = model.predict(Xs, num_samples=S, seed=3)
    mean, var, _ = model.predict_latent(Xs)
    m, v = mean[0, :, 0], var[0, :, 0]
    exact_mean = torch.exp(m + v / 2)
    exact_var = exact_mean + (torch.exp(v) - 1) * torch.exp(2 * m + v)
    f = m + v.sqrt() * torch.randn(100, S, 9, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    rate = torch.exp(f)
    se_mean = rate.mean(1).std(0)
    se_var = (rate.mean(1) + rate.var(1)).std(0)
    assert bool(((pred.mean[:, 0] - exact_mean).abs() < 4 * se_mean).all())
    assert bool(((pred.variance[:, 0] - exact_var).abs() < 4 * se_var).all())


def test_mixture_predictive_moments_follow_the_law_of_total_variance():
    X, Y = _data()
    model = savigp.SAVIGP(X, Y, Gaussian(0.1), num_inducing=8, posterior="diag-u", num_components=2)
    mean, var, pi = model.predict_latent(X[:5])
    pred = model.predict(X[:5])
    m = (pi[:, None] * mean[..., 0]).sum(0)
    v = (pi[:, None] * (var[..., 0] + mean[..., 0] ** 2)).sum(0) - m ** 2
    assert torch.allclose(pred.latent_mean[:, 0], m) and torch.allclose(pred.latent_var[:, 0], v)


def test_classification_metrics_and_probabilities():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(200, 2, generator=g)
    Y = torch.where(X[:, :1] + X[:, 1:] > 0, 1.0, -1.0)
    model = savigp.SAVIGP(X, Y, Logistic(), num_inducing=20)
    savigp.fit(model, iterations=300, lr=0.05, estimator="score", num_samples=20, progress=False)
    out = savigp.evaluate(model, X, Y, num_samples=200)
    assert out["error_rate"] < 0.08 and 0 < out["nlp"] < 0.4
    probs = model.predict(X[:4]).probabilities
    assert probs.shape == (4, 2) and torch.allclose(probs.sum(-1), torch.ones(4))


# ---------------------------------------------------------------- user likelihoods (check 5)
def test_numpy_non_differentiable_likelihood_trains_end_to_end():
    """A Laplace likelihood written in numpy (|.| is not differentiable at 0) through the
    score-function path: the fit tracks the true function."""
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 6, size=(300, 1))
    F = np.sin(X[:, 0])
    Y = (F + rng.laplace(scale=0.2, size=300))[:, None]

    def laplace(y, f):
        assert isinstance(f, np.ndarray)
        return -np.log(2 * 0.2) - np.abs(y[:, 0] - f[..., 0]) / 0.2

    lik = CallableLikelihood(laplace, num_latent=1, backend="numpy")
    model = savigp.SAVIGP(X, Y, lik, num_inducing=15)
    assert model.resolved_estimator() == "score"
    savigp.fit(model, iterations=600, batch_size=100, lr=0.03, num_samples=20, progress=False)
    Xs = np.linspace(0.2, 5.8, 50)[:, None]
    mean = model.predict(Xs).latent_mean[:, 0].numpy()
    assert np.sqrt(np.mean((mean - np.sin(Xs[:, 0])) ** 2)) < 0.12


def test_auto_estimator_choice():
    X, Y = _data()
    assert savigp.SAVIGP(X, Y, Gaussian(), num_inducing=4).resolved_estimator() == "closed-form"
    Yb = (Y > 0).double()
    assert savigp.SAVIGP(X, Yb, Logistic(), num_inducing=4).resolved_estimator() == "reparam"
    with pytest.raises(ValueError, match="needs a likelihood differentiable in f"):
        savigp.SAVIGP(X, Y, CallableLikelihood(lambda y, f: f[..., 0]), num_inducing=4).resolved_estimator("reparam")


# ---------------------------------------------------------------- kernels, mini-batches, dtypes, devices
@pytest.mark.parametrize("kernel", [savigp.Matern32, savigp.Matern52, savigp.RBF])
def test_kernels_are_positive_definite_and_match_their_formula(kernel):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(30, 3, generator=g)
    k = kernel(3, 2, lengthscale=torch.tensor([[0.5, 1.0, 2.0], [1.0, 1.0, 1.0]]), variance=torch.tensor([1.5, 0.7]))
    K = k(X, X)
    assert K.shape == (2, 30, 30)
    assert torch.linalg.eigvalsh(K).min() > -1e-10
    r = ((X[:, None, :] - X[None, :, :]) / k.lengthscales()[0]).norm(dim=-1)
    ref = {savigp.RBF: torch.exp(-0.5 * r ** 2),
           savigp.Matern32: (1 + math.sqrt(3) * r) * torch.exp(-math.sqrt(3) * r),
           savigp.Matern52: (1 + math.sqrt(5) * r + 5 * r ** 2 / 3) * torch.exp(-math.sqrt(5) * r)}[kernel]
    assert torch.allclose(K[0], 1.5 * ref, atol=1e-7)
    assert torch.allclose(k.diag(X), torch.diagonal(K, dim1=-2, dim2=-1))


def test_kernel_list_mixes_families():
    X = torch.randn(10, 2)
    k = savigp.KernelList([savigp.RBF(2), savigp.Matern32(2, 2)])
    assert k(X, X).shape == (3, 10, 10) and k.num_latent == 3


def test_minibatch_elbo_is_unbiased_for_the_full_data_elbo():
    X, Y = _data(100)
    model = savigp.SAVIGP(X, Y, Gaussian(0.1), num_inducing=8)
    full = float(model.elbo().elbo.detach())
    g = torch.Generator().manual_seed(0)
    vals = torch.tensor([float(model.elbo(torch.randperm(100, generator=g)[:10]).elbo.detach()) for _ in range(400)])
    assert abs(float(vals.mean()) - full) < 4 * float(vals.std()) / 20


def test_float32_model():
    X, Y = _data()
    model = savigp.SAVIGP(X, Y, Gaussian(0.1), num_inducing=8, dtype=torch.float32)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    h = savigp.fit(model, iterations=50, lr=0.05, progress=False)
    assert math.isfinite(h.elbo[-1]) and model.predict(X[:3]).mean.dtype == torch.float32


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_training_step_runs_on_cuda(dtype):
    X, Y = _data()
    Yb = torch.where(Y > 0, 1.0, -1.0)  # Logistic takes labels in {-1, 1} (or {0, 1}), checked at construction
    model = savigp.SAVIGP(X, Yb, Logistic(), num_inducing=8, posterior="diag-u", num_components=2,
                          device="cuda", dtype=dtype)
    h = savigp.fit(model, iterations=20, lr=0.05, estimator="score", progress=False)
    assert math.isfinite(h.elbo[-1])
    assert model.predict(X[:3]).probabilities.device.type == "cuda"


def test_a_rows_prediction_does_not_depend_on_the_other_rows():
    X, Y = _data()
    model = savigp.SAVIGP(X, Y, Gaussian(0.1), num_inducing=6)
    Xs, Ys = _data(30, seed=3)
    a = model.predict(Xs[:5], num_samples=200)
    b = model.predict(Xs, num_samples=200)
    assert torch.allclose(a.mean, b.mean[:5], rtol=0, atol=1e-12)
    assert torch.allclose(a.variance, b.variance[:5], rtol=0, atol=1e-12)
    lpd_a = model.log_predictive_density(Xs[:5], Ys[:5], num_samples=200)
    lpd_b = model.log_predictive_density(Xs, Ys, num_samples=200, chunk_size=7)
    assert torch.allclose(lpd_a, lpd_b[:5], rtol=0, atol=1e-12)


@pytest.mark.parametrize("optimizer, lr, iterations", [("adadelta", 1.0, 150), ("lbfgs", 1.0, 4)])
def test_adadelta_and_lbfgs_with_black_box_gradients(optimizer, lr, iterations):
    """Both optimizers improve the ELBO through the score-function path (L-BFGS with the same
    Monte Carlo draws within each outer step) and give a usable classifier."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(150, 2, generator=g)
    Y = torch.where(X[:, :1] - X[:, 1:] > 0, 1.0, -1.0)
    model = savigp.SAVIGP(X, Y, Logistic(), num_inducing=15)
    before = float(model.elbo(estimator="score", num_samples=500, generator=torch.Generator().manual_seed(1)).elbo.detach())
    savigp.fit(model, iterations=iterations, optimizer=optimizer, lr=lr, estimator="score", num_samples=100,
               progress=False)
    after = float(model.elbo(estimator="score", num_samples=500, generator=torch.Generator().manual_seed(1)).elbo.detach())
    assert after > before + 10
    assert savigp.evaluate(model, X, Y, num_samples=200)["error_rate"] < 0.1
