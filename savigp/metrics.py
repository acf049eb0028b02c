"""The paper's performance measures (Bonilla et al. 2019, §9.1).

* regression: SSE, the mean squared error normalized by the variance of the test targets
  (mean over outputs), and NLPD, the mean negative log predictive density;
* classification: the error rate and NLP, the mean negative log probability of the true labels.
"""
from __future__ import annotations

from torch import Tensor

from ._checks import as_targets


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


def evaluate(model, X, Y, num_samples: int = 1000, seed: int = 0) -> dict:
    """The paper's metrics for ``model`` on test data ``X (B, D)``, ``Y (B, P)``.

    Returns a dict: ``{"sse", "nlpd", "mse", "mae"}`` for regression likelihoods, ``{"error_rate",
    "nlp"}`` for classification ones (NLP = NLPD of the labels), plus ``"n"``. When the test
    targets have no variance SSE is undefined: ``"sse"`` is None and ``"sse_note"`` says why.
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
    return out
