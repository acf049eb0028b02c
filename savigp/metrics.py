"""The paper's performance measures (seed 004, §9.1).

* regression: SSE, the mean squared error normalized by the variance of the test targets
  (mean over outputs), and NLPD, the mean negative log predictive density;
* classification: the error rate and NLP, the mean negative log probability of the true labels.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ._checks import as_targets


def standardized_squared_error(y: Tensor, mean: Tensor) -> float:
    """mean_n (y_n - mean_n)^2 / var(y), averaged over the P outputs; y, mean ``(B, P)``."""
    mse = ((y - mean) ** 2).mean(0)
    var = y.var(0, unbiased=False).clamp_min(1e-300)
    return float((mse / var).mean())


def evaluate(model, X, Y, num_samples: int = 1000, seed: int = 0) -> dict:
    """The paper's metrics for ``model`` on test data ``X (B, D)``, ``Y (B, P)``.

    Returns a dict: ``{"sse", "nlpd", "mse", "mae"}`` for regression likelihoods, ``{"error_rate",
    "nlp"}`` for classification ones (NLP = NLPD of the labels), plus ``"n"``.
    """
    X = model._as_model_tensor(X, "X")
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
            out.update(sse=standardized_squared_error(Y, pred.mean), mse=float(((Y - pred.mean) ** 2).mean()),
                       mae=float((Y - pred.mean).abs().mean()))
    return out
