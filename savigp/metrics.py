"""The paper's performance measures (Bonilla et al. 2019, §9.1).

* regression: SSE, the mean squared error normalized by the variance of the test targets
  (mean over outputs), and NLPD, the mean negative log predictive density;
* classification: the error rate and NLP, the mean negative log probability of the true labels;

and, for regression likelihoods that can draw y given f, the coverage of the central 90% predictive
interval (:func:`interval_coverage`): how often the test target falls inside it, 0.9 for a calibrated
predictive distribution.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ._checks import as_targets

#: the central predictive interval whose coverage :func:`evaluate` reports (``"coverage90"``)
COVERAGE_LEVEL = 0.9


#: why SSE is missing from :func:`evaluate`'s results when the test targets have no variance
SSE_UNDEFINED = "SSE is undefined: a test target has no variance (one row, or a constant column)"


def standardized_squared_error(y: Tensor, mean: Tensor) -> float:
    """mean_n (y_n - mean_n)^2 / var(y), averaged over the P outputs; y, mean ``(B, P)``.

    NaN when an output's test targets have no variance (SSE is undefined there)."""
    mse = ((y - mean) ** 2).mean(0)
    var = y.var(0, unbiased=False)
    if not bool((var > 0).all()):
        return float("nan")
    return float((mse / var).mean())


def sse_entries(y: Tensor, mean: Tensor) -> dict:
    """``{"sse": value}``, or ``{"sse": None, "sse_note": SSE_UNDEFINED}`` when it is undefined."""
    if not bool((y.var(0, unbiased=False) > 0).all()):  # not a NaN of the predictions: that stays NaN
        return {"sse": None, "sse_note": SSE_UNDEFINED}
    return {"sse": standardized_squared_error(y, mean)}


@torch.no_grad()
def interval_coverage(model, X, Y, level: float = COVERAGE_LEVEL, num_samples: int = 1000, seed: int = 0) -> float:
    """The fraction of test targets inside the central ``level`` interval of the predictive distribution.

    The predictive distribution of y*_n is the mixture sum_k pi_k int p(y | f) q_k(f*_n) df (Bonilla
    et al. 2019, §7); its CDF at the target, the probability integral transform
    u_n = P(y* <= y*_n | x*_n), is estimated with the S draws f*_ks of
    :meth:`~savigp.SAVIGP.log_predictive_density` and one draw y_ks ~ p(y | f*_ks) each
    (``likelihood.sample``): u_n ~= sum_k pi_k mean_s 1{y_ks <= y*_n}. y*_n lies inside the central
    interval exactly when (1 - level) / 2 <= u_n <= (1 + level) / 2, so no quantile is computed. The
    figure is the mean over rows and outputs; it is unchanged by an increasing map of y (standardized
    targets give the coverage in the original units).

    Args:
        model: a :class:`~savigp.SAVIGP` whose likelihood implements ``sample``.
        X: test inputs ``(B, D)`` in the model's units; Y: test targets ``(B, P)``.
        level: in (0, 1).

    Returns:
        the coverage in [0, 1]. Raises ``NotImplementedError`` when the likelihood cannot draw y.
    """
    if not 0.0 < float(level) < 1.0:
        raise ValueError(f"interval_coverage: level must be in (0, 1), got {level!r}")
    X = model.as_model_inputs(X, "X")
    Y = as_targets(Y, "Y", num_rows=X.shape[0], dtype=model.dtype, device=model.device)
    lo, hi = (1.0 - float(level)) / 2.0, (1.0 + float(level)) / 2.0
    rows = model._rows_per_chunk(X.shape[0], num_samples, model.num_latent + 2 * int(model.likelihood.output_dim),
                                 None)
    gen = torch.Generator(device=model.device).manual_seed(int(seed) + 1)  # y draws (f draws: ``seed``)
    inside = 0.0
    for i in range(0, X.shape[0], rows):
        f, log_pi, _, _ = model._draws(X[i:i + rows], num_samples, seed)  # (S, K, B, Q), (K,)
        y = model.likelihood.sample(f, gen)  # (S, K, B, P)
        below = (y <= Y[i:i + rows]).to(f.dtype).mean(0)  # (K, B, P)
        u = torch.einsum("k,kbp->bp", log_pi.exp().to(f.dtype), below)
        inside += float(((u >= lo) & (u <= hi)).to(f.dtype).sum())
    return inside / (X.shape[0] * Y.shape[1])


def evaluate(model, X, Y, num_samples: int = 1000, seed: int = 0) -> dict:
    """The paper's metrics for ``model`` on test data ``X (B, D)``, ``Y (B, P)``.

    Returns a dict: ``{"sse", "nlpd", "mse", "mae"}`` for regression likelihoods, ``{"error_rate",
    "nlp"}`` for classification ones (NLP = NLPD of the labels), plus ``"n"``. When the test
    targets have no variance SSE is undefined: ``"sse"`` is None and ``"sse_note"`` says why. A
    regression likelihood that can draw y given f (``sample``: Gaussian, Poisson) adds
    ``"coverage90"``, :func:`interval_coverage` at level 0.9.
    """
    X = model.as_model_inputs(X, "X")
    Y = as_targets(Y, "Y", num_rows=X.shape[0], dtype=model.dtype, device=model.device)
    lik = model.likelihood
    lik.validate_targets(Y)
    lpd = model.log_predictive_density(X, Y, num_samples=num_samples, seed=seed)
    pred = model.predict(X, num_samples=num_samples, seed=seed)
    out = {"n": int(X.shape[0])}
    if lik.task == "classification":
        wrong = pred.probabilities.argmax(-1) != lik.class_index(Y)
        out.update(error_rate=float(wrong.double().mean()), nlp=float(-lpd.mean()))
    else:
        out.update(nlpd=float(-lpd.mean()))
        if pred.mean is not None:
            out.update(**sse_entries(Y, pred.mean), mse=float(((Y - pred.mean) ** 2).mean()),
                       mae=float((Y - pred.mean).abs().mean()))
        out.update(coverage_entry(model, X, Y, num_samples=num_samples, seed=seed))
    return out


def coverage_entry(model, X, Y, num_samples: int = 1000, seed: int = 0) -> dict:
    """``{"coverage90": value}`` (:func:`interval_coverage`), or ``{}`` when the likelihood cannot draw y."""
    from likelihoods.base import Likelihood

    if type(model.likelihood).sample is Likelihood.sample:  # draws no y: no interval to check
        return {}
    try:
        return {"coverage90": interval_coverage(model, X, Y, num_samples=num_samples, seed=seed)}
    except NotImplementedError:
        return {}
