"""User likelihoods the library has never seen, written from scratch (here and in
``savigp.testing.examples``), through :class:`likelihoods.CallableLikelihood` in Python: every task
(regression with a predictive mean, binary and multi-class classification, counts), learnable
keyword parameters (autograd for torch, central differences for numpy), honest ``differentiable``,
non-finite values and their floor.

Statistical checks compare with closed forms (probit predictive probabilities, the negative
binomial's derivative in r) or with a built-in likelihood on the same model and draws.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import special, stats

import savigp
from likelihoods import CallableLikelihood, Poisson, Softmax
from likelihoods.callable import MAX_INFERRED_CLASSES, label_set
from likelihoods.parameters import PositiveParameter
from likelihoods.quadrature import gauss_hermite
from savigp.estimators.nonfinite import NonFiniteLogProb
from savigp.testing.examples import (lognormal_dlogp_ds, lognormal_numpy, nb_dlogp_dr, nb_numpy, nb_torch, ordinal_numpy,
                                     ordinal_torch, probit_numpy)


# ---------------------------------------------------------------------------- the user's functions
# nb_numpy, nb_torch, nb_dlogp_dr, ordinal_numpy, ordinal_torch, probit_numpy: savigp/testing/examples.py
def softmax_torch(y, f):
    """Three-class softmax written by hand in torch."""
    return torch.gather(f, -1, y.long().expand(f.shape[:-1] + (1,))).squeeze(-1) - torch.logsumexp(f, -1)


def _counts(n=150, seed=0, r=4.0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, 1))
    f = 1.5 + np.sin(2 * X[:, 0])
    y = rng.poisson(rng.gamma(r, np.exp(f) / r))
    return X, y[:, None].astype(float)


# ---------------------------------------------------------------------------- parameters
def test_numpy_parameter_gradient_by_central_differences_is_exact_to_1e7():
    """The numpy path's gradient in r (central differences in log r) against the closed-form
    derivative, and a vector parameter (ordinal cut-point gaps) against torch autograd."""
    rng = np.random.default_rng(1)
    y = rng.poisson(5.0, (40, 1)).astype(float)
    f = torch.as_tensor(1.0 + 0.7 * rng.standard_normal((6, 1, 40, 1)))
    w = torch.as_tensor(rng.standard_normal((6, 1, 40)))
    lik = CallableLikelihood(nb_numpy, params={"r": 2.5}, constraints={"r": "positive"})
    with torch.no_grad():  # numpy code runs on tensors through __array_wrap__: still detected as numpy
        lik.log_prob(torch.as_tensor(y), f)
    assert lik.backend == "numpy"
    (lik.log_prob(torch.as_tensor(y), f) * w).sum().backward()
    raw = lik.raw_params["r"]
    r = lik.parameter_values()["r"]
    exact = float((w.numpy() * nb_dlogp_dr(y, f.numpy(), r)).sum()) * float(torch.sigmoid(raw.detach()))
    assert raw.grad.item() == pytest.approx(exact, rel=1e-7)
    # a float32 model: the differences are taken in float64 (in float32 they would lose ~1e-2)
    lik32 = CallableLikelihood(nb_numpy, params={"r": 2.5}, constraints={"r": "positive"}).to(torch.float32)
    (lik32.log_prob(torch.as_tensor(y, dtype=torch.float32), f.float()) * w.float()).sum().backward()
    assert lik32.raw_params["r"].grad.dtype == torch.float32
    assert lik32.raw_params["r"].grad.item() == pytest.approx(exact, rel=1e-5)

    yo = rng.integers(0, 4, (30, 1)).astype(float)
    fo = torch.as_tensor(0.5 * rng.standard_normal((5, 1, 30, 1)))
    wo = torch.as_tensor(rng.standard_normal((5, 1, 30)))
    grads = []
    for fn, backend in ((ordinal_numpy, "numpy"), (ordinal_torch, "torch")):
        lik = CallableLikelihood(fn, backend=backend, params={"c0": -0.8, "gaps": [0.9, 1.1]},
                                 constraints={"gaps": "positive"})
        (lik.log_prob(torch.as_tensor(yo), fo) * wo).sum().backward()
        grads.append(torch.cat([lik.raw_params["c0"].grad.reshape(1), lik.raw_params["gaps"].grad]))
    assert torch.allclose(grads[0], grads[1], rtol=1e-6, atol=1e-9)


def test_learned_dispersion_numpy_and_torch_agree_and_move_to_the_truth():
    """r learned from counts with r = 4, starting at 1: the numpy function (finite differences)
    and the torch one (autograd) follow the same path (same draws), and r moves towards 4."""
    X, Y = _counts(n=100)
    learned = []
    for fn in (nb_numpy, nb_torch):
        lik = CallableLikelihood(fn, params={"r": 1.0}, constraints={"r": "positive"})
        model = savigp.SAVIGP(X, Y, lik, num_inducing=10)
        assert model.resolved_estimator() == "score"
        savigp.fit(model, iterations=100, lr=0.1, num_samples=20, progress=False)
        learned.append(lik.parameter_values()["r"])
    assert learned[0] == pytest.approx(learned[1], rel=1e-5)
    assert 2.0 < learned[0] < 8.0  # measured 2.9 after 100 steps (truth 4, start 1)


def test_parameters_checked_at_construction():
    with pytest.raises(TypeError, match=r"does not accept the parameter\(s\) \['r'\].*probit_numpy\(y, f, r=\.\.\.\)"):
        CallableLikelihood(probit_numpy, params={"r": 1.0})
    with pytest.raises(ValueError, match="positive parameter 'r' must start above"):
        CallableLikelihood(nb_numpy, params={"r": -1.0}, constraints={"r": "positive"})
    with pytest.raises(ValueError, match="constraint of 'r' must be one of"):
        CallableLikelihood(nb_numpy, params={"r": 1.0}, constraints={"r": "log"})
    fixed = CallableLikelihood(nb_numpy, params={"r": 2.0}, constraints={"r": "fixed"})
    assert not fixed.raw_params["r"].requires_grad and fixed.parameter_values()["r"] == 2.0
    # a positive user parameter is stored and read through the same transform as PositiveParameter
    pos = CallableLikelihood(ordinal_numpy, params={"c0": -0.8, "gaps": [0.9, 1e-5, 40.0]}, constraints={"gaps": "positive"})
    ref = PositiveParameter([0.9, 1e-5, 40.0])
    assert torch.equal(pos.raw_params["gaps"].detach(), ref.raw.detach())
    assert np.array_equal(pos.parameter_values()["gaps"], ref().detach().numpy())


def test_parameter_values_are_plain_values_and_parameter_tensors_differentiable():
    """``parameter_values()`` gives floats (numpy arrays for several values) that no longer require
    grad: ``float()`` of them says nothing (before, tensors that required grad, on which torch warns
    "Converting a tensor with requires_grad=True to a scalar"); ``parameter_tensors()`` keeps the
    differentiable tensors. A built-in likelihood's learned parameters come the same way."""
    import warnings

    from likelihoods import Gaussian

    lik = CallableLikelihood(ordinal_numpy, params={"c0": -0.8, "gaps": [0.9, 1.5]}, constraints={"gaps": "positive"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        values = lik.parameter_values()
        assert isinstance(values["c0"], float) and float(values["c0"]) == pytest.approx(-0.8, rel=1e-12)
        assert isinstance(values["gaps"], np.ndarray) and values["gaps"] == pytest.approx([0.9, 1.5], rel=1e-12)
        assert Gaussian(0.3).parameter_values() == {"variance": pytest.approx(0.3, rel=1e-12)}
    tensors = lik.parameter_tensors()
    assert tensors["gaps"].requires_grad and tensors["c0"].requires_grad


# ---------------------------------------------------------------------------- classification
def _binary(n=80, seed=2):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (n, 1))
    y = (rng.uniform(size=n) < stats.norm.cdf(1.5 * np.sin(X[:, 0]))).astype(float)
    return X, y[:, None]


def test_user_probit_predicts_the_closed_form_probabilities():
    """p(y* = 1 | x*) = Phi(m / sqrt(1 + v)) for a probit likelihood and q(f*) = N(m, v): the
    class probabilities computed from the user's function over the labels agree within 4 Monte
    Carlo standard errors (sd <= 1/2 per draw), and so does NLP."""
    X, Y = _binary()
    lik = CallableLikelihood(probit_numpy, task="classification")
    model = savigp.SAVIGP(X, Y, lik, num_inducing=10)
    assert lik.classes == [0.0, 1.0]  # from the training labels
    savigp.fit(model, iterations=60, lr=0.05, num_samples=20, progress=False)
    S = 4000
    pred = model.predict(X, num_samples=S, seed=3)
    exact = stats.norm.cdf(pred.latent_mean[:, 0].numpy() / np.sqrt(1 + pred.latent_var[:, 0].numpy()))
    assert pred.probabilities.shape == (80, 2)
    assert np.abs(pred.probabilities[:, 1].numpy() - exact).max() < 4 * 0.5 / math.sqrt(S)
    metrics = savigp.evaluate(model, X, Y, num_samples=S, seed=3)
    p_true = np.where(Y[:, 0] == 1, exact, 1 - exact)
    nlp = -np.mean(np.log(p_true))
    assert set(metrics) == {"n", "error_rate", "nlp"}
    # NLP's Monte Carlo error. Row n's estimate is log p^_n, p^_n the mean of S draws of p(y_n | f*),
    # whose sd is sd_n / sqrt(S) with sd_n^2 = Var_{q(f*)}[Phi(f*)] (the same for y = 0 and 1),
    # here by 60-point Gauss-Hermite quadrature. By the delta method log p^_n - log p_n has sd
    # sd_n / (p_n sqrt(S)) and bias -sd_n^2 / (2 S p_n^2). The draws may be shared by the rows, so
    # the sd of the mean over rows is bounded by the mean of the rows' sds (Minkowski); the
    # tolerance is 4 of those plus the bias plus float rounding (measured: tol 0.0103, error 2.2e-5).
    x, w = gauss_hermite(60, torch.zeros((), dtype=torch.float64))
    f = pred.latent_mean[:, :1].numpy() + np.sqrt(pred.latent_var[:, :1].numpy()) * x.numpy()  # (N, 60)
    sd = np.sqrt(np.clip((w.numpy() * stats.norm.cdf(f) ** 2).sum(-1) - exact ** 2, 0.0, None))
    rel = sd / p_true
    tol = 4 * np.mean(rel) / math.sqrt(S) + np.mean(rel ** 2) / (2 * S) + 1e-12
    assert abs(metrics["nlp"] - nlp) <= tol, (metrics["nlp"], nlp, tol)
    # the error rate agrees with the exact probabilities' except where one of those lies within 4
    # Monte Carlo standard errors of 1/2 (there the estimated class may differ)
    wrong = (exact > 0.5) != (Y[:, 0] == 1)
    undecided = int((np.abs(exact - 0.5) <= 4 * 0.5 / math.sqrt(S)).sum())
    assert abs(metrics["error_rate"] * len(Y) - wrong.sum()) <= undecided
    # E[y | f] without a mean_fn: the label's mean under the class probabilities
    assert torch.allclose(pred.mean[:, 0], pred.probabilities[:, 1], atol=1e-12)


def test_user_softmax_gives_the_builtin_softmax_predictions_on_the_same_model():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((60, 2))
    Y = np.argmax(X @ rng.standard_normal((2, 3)) + 0.3 * rng.standard_normal((60, 3)), 1)[:, None].astype(float)
    model = savigp.SAVIGP(X, Y, Softmax(3), num_inducing=8)
    savigp.fit(model, iterations=30, lr=0.05, num_samples=10, progress=False)
    ref = model.predict(X, num_samples=200, seed=1)
    ref_metrics = savigp.evaluate(model, X, Y, num_samples=200, seed=1)
    user = CallableLikelihood(softmax_torch, num_latent=3, task="classification", num_classes=3)
    model.likelihood = user
    got = model.predict(X, num_samples=200, seed=1)
    assert torch.allclose(got.probabilities, ref.probabilities, rtol=0, atol=1e-12)
    assert savigp.evaluate(model, X, Y, num_samples=200, seed=1) == pytest.approx(ref_metrics, rel=1e-12)


def test_ordinal_cut_points_learned_and_the_floor_for_underflow():
    rng = np.random.default_rng(4)
    X = rng.uniform(-2, 2, (100, 1))
    f = 2.0 * np.sin(X[:, 0])
    Y = np.digitize(f + rng.standard_normal(100), [-1.0, 0.0, 1.0])[:, None].astype(float)
    kw = dict(task="classification", num_classes=4, params={"c0": -0.5, "gaps": [0.5, 0.5]},
              constraints={"gaps": "positive"})
    naive = CallableLikelihood(ordinal_numpy, **kw)
    model = savigp.SAVIGP(X, Y, naive, num_inducing=10)
    far = torch.full((2, 1, 100, 1), 40.0, dtype=torch.float64)  # Phi(b - 40) - Phi(a - 40) = 0 in float64
    with pytest.raises(NonFiniteLogProb, match=r"'ordinal_numpy' \(.*examples.py, line \d+\) returned "
                                               r"NaN or inf .*f = \[40\] -> -inf.*min_log_prob"):
        savigp.estimators.checked_log_prob(naive, model.train_y, far)
    floored = CallableLikelihood(ordinal_numpy, min_log_prob=-200.0, **kw)
    assert float(floored.log_prob(model.train_y, far).detach().min()) == -200.0
    model = savigp.SAVIGP(X, Y, floored, num_inducing=10)
    savigp.fit(model, iterations=150, lr=0.05, num_samples=20, progress=False)
    p = model.predict(X[:20], num_samples=200).probabilities
    assert torch.allclose(p.sum(-1), torch.ones(20, dtype=p.dtype), atol=1e-12)
    metrics = savigp.evaluate(model, X, Y, num_samples=500)
    assert metrics["nlp"] < math.log(4) - 0.3  # well below the uniform guess (measured 0.85)


def test_classification_labels_are_validated_and_unnormalized_functions_warned():
    X, Y = _binary()
    lik = CallableLikelihood(probit_numpy, task="classification", classes=[0, 1])
    with pytest.raises(ValueError, match=r"'probit_numpy'.*1 target row\(s\) are not labels in \{0, 1\}: row 2: \[2.0\]"):
        lik.validate_targets(torch.tensor([[0.0], [1.0], [2.0]]))
    with pytest.raises(ValueError, match="one column of labels"):
        CallableLikelihood(probit_numpy, task="classification", output_dim=2)
    half = CallableLikelihood(lambda y, f: probit_numpy(y, f) - 0.7, task="classification", classes=[0, 1])
    with pytest.warns(RuntimeWarning, match=r"sum to exp\(0.7\) instead of 1"):
        p = half.class_probabilities(torch.zeros(3, 5, 1, dtype=torch.float64))
    assert torch.allclose(p, torch.full_like(p, 0.5))


def test_one_label_set_rule_for_the_constructor_the_training_labels_and_the_command_line():
    """label_set is the one check of a label set: classes, num_classes, or the training labels."""
    assert label_set(num_classes=3) == [0.0, 1.0, 2.0] and label_set() is None
    assert label_set(targets=torch.tensor([2.0, -1.0, 2.0])) == [-1.0, 2.0]
    lik = CallableLikelihood(probit_numpy, task="classification")
    lik.initialize_from_data(torch.tensor([[1.0], [-1.0], [1.0]]))
    assert lik.classes == [-1.0, 1.0]
    for kwargs, needle in [({"num_classes": 1}, "integer >= 2"), ({"classes": [0, 0]}, "distinct"),
                           ({"classes": [0, 1], "num_classes": 3}, "num_classes=3 but 2 classes"),
                           ({"targets": np.ones(4)}, r"only the label\(s\) \[1.0\]"),
                           ({"targets": np.arange(MAX_INFERRED_CLASSES + 1.0)},
                            f"{MAX_INFERRED_CLASSES + 1} distinct")]:
        with pytest.raises(ValueError, match=needle):
            label_set(**kwargs)
    with pytest.raises(ValueError, match=r"CallableLikelihood: num_classes must be an integer >= 2, got 1"):
        CallableLikelihood(probit_numpy, task="classification", num_classes=1)
    with pytest.raises(ValueError, match=r"'probit_numpy'.*only the label\(s\) \[1.0\]"):
        CallableLikelihood(probit_numpy, task="classification").initialize_from_data(torch.ones(3, 1))


# ---------------------------------------------------------------------------- estimator honesty
def test_differentiable_means_what_it_says():
    X, Y = _counts(n=30)
    lik = CallableLikelihood(nb_torch, differentiable=True, params={"r": 2.0}, constraints={"r": "positive"})
    model = savigp.SAVIGP(X, Y, lik, num_inducing=5)
    assert lik.backend == "torch" and model.resolved_estimator() == "reparam"
    savigp.fit(model, iterations=3, num_samples=5, progress=False)
    bad = CallableLikelihood(nb_numpy, differentiable=True, params={"r": 2.0})
    model = savigp.SAVIGP(X, Y, bad, num_inducing=5)
    with pytest.raises(ValueError, match=r"declared differentiable=True, so it is called with torch tensors, but it failed"):
        model.elbo(num_samples=5)
    detached = CallableLikelihood(lambda y, f: torch.as_tensor(stats.norm.logpdf(y[:, 0], f[..., 0].detach())),
                                  differentiable=True)
    with pytest.raises(ValueError, match="declared differentiable=True but its result has no gradient"):
        savigp.SAVIGP(X, Y, detached, num_inducing=5).elbo(num_samples=5)
    with pytest.raises(ValueError, match="differentiable=True needs a torch function"):
        CallableLikelihood(nb_numpy, backend="numpy", differentiable=True)


def test_forgetting_num_latent_names_the_function_and_the_fix():
    X, Y = _counts(n=30)
    lik = CallableLikelihood(lambda y, f: -0.5 * (y[:, 0] - f[..., 0] * np.exp(f[..., 1])) ** 2)
    with pytest.raises(ValueError, match=r"Q = num_latent = 1 .* pass num_latent=\.\.\."):
        savigp.SAVIGP(X, Y, lik, num_inducing=5).elbo(num_samples=5)


# ---------------------------------------------------------------------------- predictive moments
def test_mean_fn_gives_means_and_variances_or_says_there_is_none():
    """A user Poisson with mean_fn returning (E[y|f], Var[y|f]) predicts exactly what the built-in
    Poisson predicts on the same model and draws; a mean-only mean_fn gives variance None."""
    X, Y = _counts(n=60)
    model = savigp.SAVIGP(X, Y, Poisson(), num_inducing=8)
    savigp.fit(model, iterations=40, lr=0.05, num_samples=10, progress=False)
    ref = model.predict(X[:10], num_samples=300, seed=2)
    m = float(model.likelihood.offset)  # the built-in's learned log-mean offset

    def log_lik(y, f):
        return stats.poisson.logpmf(y[:, 0], np.exp(f[..., 0] + m))

    model.likelihood = CallableLikelihood(log_lik, mean_fn=lambda f: (np.exp(f + m), np.exp(f + m)))
    got = model.predict(X[:10], num_samples=300, seed=2)
    assert torch.allclose(got.mean, ref.mean, rtol=1e-12) and torch.allclose(got.variance, ref.variance, rtol=1e-12)
    model.likelihood = CallableLikelihood(log_lik, mean_fn=lambda f: np.exp(f[..., 0] + m))
    got = model.predict(X[:10], num_samples=300, seed=2)
    assert torch.allclose(got.mean, ref.mean, rtol=1e-12) and got.variance is None
    assert set(got.numpy()) == set(got.FIELDS) and got["variance"] is None
    assert set(savigp.evaluate(model, X, Y, num_samples=50)) == {"n", "nlpd", "sse", "mse", "mae"}


def test_plot_fit_from_python_draws_one_panel_per_latent_function_and_the_classes():
    pytest.importorskip("matplotlib")
    from savigp.io.plotting import plot_elbo, plot_fit

    X, Y = _binary(n=40)
    model = savigp.SAVIGP(X, Y, CallableLikelihood(probit_numpy, task="classification"), num_inducing=6)
    history = savigp.fit(model, iterations=25, lr=0.05, num_samples=10, progress=False)
    fig = plot_fit(model, X, Y, num_samples=20)
    assert [ax.get_ylabel() for ax in fig.axes] == ["latent f0", "class probability"]
    assert [t.get_text() for t in fig.axes[1].get_legend().get_texts()] == ["p(y = 0)", "p(y = 1)"]
    assert len(plot_elbo(history.elbo).axes[0].lines) == 2  # the ELBO and its running mean
    with pytest.raises(ValueError, match=r"X must have shape \(N, 1\) or \(N, 2\), got \(4, 3\)"):
        plot_fit(model, np.zeros((4, 3)))


# ---------------------------------------------------------------------------- a probability parameter
def zip_numpy(y, f, pi):
    """Zero-inflated Poisson: y = 0 with probability pi, else Poisson(exp(f)):
    log p(0 | f) = log(pi + (1 - pi) e^-mu), log p(y | f) = log(1 - pi) + y f - mu - log y! (y > 0)."""
    mu, y = np.exp(f[..., 0]), y[:, 0]
    pois = y * f[..., 0] - mu - special.gammaln(y + 1)
    return np.where(y == 0, np.log(pi + (1 - pi) * np.exp(-mu)), np.log1p(-pi) + pois)


def zip_torch(y, f, pi):
    """:func:`zip_numpy` in torch (differentiable in f and pi)."""
    mu, y = torch.exp(f[..., 0]), y[:, 0]
    pois = y * f[..., 0] - mu - torch.lgamma(y + 1)
    return torch.where(y == 0, torch.log(pi + (1 - pi) * torch.exp(-mu)), torch.log1p(-pi) + pois)


def _zero_inflated(n=200, seed=0, pi=0.3):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, 1))
    y = np.where(rng.uniform(size=n) < pi, 0, rng.poisson(np.exp(1.0 + np.sin(2 * X[:, 0]))))
    return X, y[:, None].astype(float)


def test_a_zero_inflation_probability_is_learned_in_the_unit_interval():
    """constraints={"pi": "unit_interval"}: pi = sigmoid(raw) stays in (0, 1) without a hand
    logit; the numpy function's central differences (in logit pi) match torch autograd, and the
    fitted pi moves from 0.6 towards the truth 0.3."""
    X, Y = _zero_inflated()
    f = torch.as_tensor(1.0 + 0.5 * np.random.default_rng(0).standard_normal((4, 1, len(Y), 1)))
    grads = []
    for fn in (zip_numpy, zip_torch):
        lik = CallableLikelihood(fn, params={"pi": 0.2}, constraints={"pi": "unit_interval"})
        assert lik.parameter_values()["pi"] == pytest.approx(0.2, rel=1e-12)
        lik.log_prob(torch.as_tensor(Y), f).sum().backward()
        grads.append(lik.raw_params["pi"].grad.item())
    assert grads[0] == pytest.approx(grads[1], rel=1e-6)
    lik = CallableLikelihood(zip_torch, params={"pi": 0.6}, constraints={"pi": "unit_interval"})
    savigp.fit(savigp.SAVIGP(X, Y, lik, num_inducing=10), iterations=150, lr=0.1, num_samples=10, progress=False)
    learned = lik.parameter_values()["pi"]
    assert 0.2 < learned < 0.45, learned  # measured 0.344; the maximum likelihood given the true f is 0.29
    with pytest.raises(ValueError, match="'pi' in the unit interval must start strictly between 0 and 1"):
        CallableLikelihood(zip_numpy, params={"pi": 1.0}, constraints={"pi": "unit_interval"})
    from savigp.user_likelihood import parse_lik_params

    assert parse_lik_params(["pi=0.2:unit_interval"]) == ({"pi": 0.2}, {"pi": "unit_interval"})


def _survival(n=60, seed=0, s=0.5):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, 1))
    return X, np.exp(1.0 + np.sin(X) + s * rng.standard_normal((n, 1)))


def test_a_numpy_likelihood_with_a_learned_scale_trains_under_the_default_backend():
    """Issue 54: numpy code that reads a learned parameter (np.log(s)) failed under the default
    backend with "Can't call numpy() on Tensor that requires grad": the backend probe had passed
    the parameters detached, so the function ran on tensors and looked like torch. It is now
    detected as numpy, trains, and its gradient in s is the closed form's."""
    X, Y = _survival()
    lik = CallableLikelihood(lognormal_numpy, params={"s": 1.0}, constraints={"s": "positive"})
    model = savigp.SAVIGP(X, Y, lik, num_inducing=8)
    savigp.fit(model, iterations=60, lr=0.05, num_samples=10, progress=False)
    assert lik.backend == "numpy" and lik.parameter_values()["s"] < 0.9  # from 1 towards the truth 0.5
    rng = np.random.default_rng(1)
    f = torch.as_tensor(1.0 + 0.5 * rng.standard_normal((4, 1, len(Y), 1)))
    w = torch.as_tensor(rng.standard_normal((4, 1, len(Y))))
    lik.raw_params["s"].grad = None
    (lik.log_prob(torch.as_tensor(Y), f) * w).sum().backward()
    raw = lik.raw_params["s"]
    s = lik.parameter_values()["s"]
    exact = float((w.numpy() * lognormal_dlogp_ds(Y, f.numpy(), s)).sum()) * float(torch.sigmoid(raw.detach()))
    assert raw.grad.item() == pytest.approx(exact, rel=1e-7)


def test_numpy_code_met_after_the_backend_was_chosen_switches_to_numpy_or_says_what_to_write():
    """A function whose numpy use shows only on some mini-batches (a branch on the data) moves to
    numpy when it first fails on tensors; declared backend="torch", the error says what to write."""
    def branchy(y, f, s):
        if bool((y[:, 0] > 50).any()):  # only some batches reach the numpy branch
            return lognormal_numpy(y, f, s)
        return -0.5 * (y[:, 0] - f[..., 0]) ** 2 / s ** 2 - torch.log(s)

    y = torch.ones(5, 1)
    f = torch.zeros(3, 5, 1, dtype=torch.float64)
    lik = CallableLikelihood(branchy, params={"s": 1.0}, constraints={"s": "positive"})
    lik.log_prob(y.double(), f)
    assert lik.backend == "torch"
    big = torch.full((5, 1), 100.0, dtype=torch.float64)
    out = lik.log_prob(big, f)
    assert lik.backend == "numpy" and torch.allclose(out, torch.as_tensor(lognormal_numpy(big.numpy(), f.numpy(), 1.0)))
    declared = CallableLikelihood(lognormal_numpy, backend="torch", params={"s": 1.0}, constraints={"s": "positive"})
    with pytest.raises(ValueError, match=r"computes with numpy .*pass backend='numpy' or 'auto' \(on the command "
                                         r"line: --lik-option backend=numpy\)"):
        declared.log_prob(big, f)
