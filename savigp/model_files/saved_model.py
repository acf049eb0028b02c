"""A loaded model file: :class:`SavedModel` (predictions and metrics in the data's original
units), :func:`save` and :func:`load` / :func:`load_model`."""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from .._checks import writable
from ..model import SAVIGP
from .builder import rebuild_model
from .errors import CodeNotAuthorized, LikelihoodImportError, ModelFileError
from .file_format import read_model_file, save_model
from .likelihood_spec import UnloadedLikelihood, resolve_likelihood


class SavedModel:
    """A model together with its file configuration; predictions in the data's original units.

    Inputs given to :meth:`predict`, :meth:`log_predictive_density` and :meth:`evaluate` are raw
    (as in the CSV file): the recorded input standardization is applied here, and the target
    standardization is undone on means, variances and log densities.
    """

    def __init__(self, model: SAVIGP, config: dict):
        self.model = model
        self.config = config
        st = config.get("standardize") or {}
        self.input_stats = st.get("inputs")
        self.target_stats = st.get("targets")

    @property
    def likelihood_loaded(self) -> bool:
        """False when the model's user likelihood was not allowed to run (latent predictions only)."""
        return not isinstance(self.model.likelihood, UnloadedLikelihood)

    def _need_likelihood(self, what: str) -> None:
        if not self.likelihood_loaded:
            raise CodeNotAuthorized(f"{what} needs the likelihood: {self.model.likelihood.note}")

    # ------------------------------------------------------------ transforms
    def transform_inputs(self, X) -> np.ndarray:
        """Raw inputs ``(B, D)`` -> the model's (standardized when recorded), float64."""
        X = np.asarray(X, dtype=np.float64)
        if self.input_stats is None:
            return X
        return (X - np.asarray(self.input_stats["mean"])) / np.asarray(self.input_stats["std"])

    def transform_targets(self, Y) -> np.ndarray:
        """Raw targets ``(B, P)`` -> the model's (standardized when recorded), float64."""
        Y = np.asarray(Y, dtype=np.float64)
        if self.target_stats is None:
            return Y
        return (Y - np.asarray(self.target_stats["mean"])) / np.asarray(self.target_stats["std"])

    def log_jacobian(self) -> float:
        """sum_p log std_p: log p(y) = log p(y_standardized) - this (0 without standardization)."""
        if self.target_stats is None:
            return 0.0
        return float(np.sum(np.log(np.asarray(self.target_stats["std"], dtype=np.float64))))

    # ------------------------------------------------------------ predictions
    def predict(self, X, num_samples: int = 500, seed: int = 0):
        """Predictions at raw inputs ``X (B, D)`` in the targets' original units.

        Returns:
            a :class:`~savigp.model.Prediction`, as :meth:`SAVIGP.predict` gives, with float64
            CPU tensors: ``mean`` and ``variance`` ``(B, P)`` (None when the likelihood has no
            predictive moments; ``variance`` also when it has E[y | f] only), ``probabilities``
            ``(B, C)`` (classification, else None), ``latent_mean`` and ``latent_var`` ``(B, Q)``
            (model units). ``.numpy()`` gives a dict of arrays with the same keys.
        """
        pred = self.model.predict(self.transform_inputs(X), num_samples=num_samples, seed=seed)
        for name in pred.FIELDS:
            value = getattr(pred, name)
            setattr(pred, name, None if value is None else value.detach().cpu().to(torch.float64))
        if self.target_stats is not None and pred.mean is not None:
            mu = torch.as_tensor(self.target_stats["mean"], dtype=torch.float64)
            sd = torch.as_tensor(self.target_stats["std"], dtype=torch.float64)
            pred.mean = mu + sd * pred.mean
            pred.variance = None if pred.variance is None else pred.variance * sd ** 2
        return pred

    def predict_parts(self, X, *, covariance: bool = False, components: bool = False):
        """The posterior of each additive part of the kernel (:func:`savigp.predict_parts`) at raw
        inputs ``X (B, D)``, the parts named by the recorded input columns. With standardized targets
        and a likelihood whose mean is f itself (E[y | f] = f: Gaussian, Student-t, Laplace), the
        parts are in the targets' original units (each times the target's sd, its mean added to the
        ``"mean"`` part); otherwise in the units the likelihood reads f in."""
        from likelihoods.base import mean_is_latent

        from ..parts import predict_parts

        columns = (self.config.get("columns") or {}).get("inputs")
        parts = predict_parts(self.model, self.transform_inputs(X), covariance=covariance, components=components,
                              columns=columns if columns and len(columns) == self.model.input_dim else None)
        if self.target_stats is not None and self.likelihood_loaded and mean_is_latent(self.model.likelihood):
            parts = parts.transformed(self.target_stats["std"], self.target_stats["mean"])
        return parts

    def log_predictive_density(self, X, Y, num_samples: int = 1000, seed: int = 0) -> np.ndarray:
        """log p(y*_n | x*_n) of raw targets ``Y (B, P)`` at raw inputs ``X (B, D)``: ``(B,)``.

        With standardized targets this is the density of the standardized targets minus the
        log-Jacobian sum_p log std_p, i.e. a density in the targets' original units.
        """
        self._need_likelihood("log_predictive_density")
        lpd = self.model.log_predictive_density(self.transform_inputs(X), self.transform_targets(Y),
                                                num_samples=num_samples, seed=seed)
        return lpd.detach().cpu().to(torch.float64).numpy() - self.log_jacobian()

    def evaluate(self, X, Y, num_samples: int = 1000, seed: int = 0) -> dict:
        """The paper's metrics on raw test data (as :func:`savigp.metrics.evaluate`, in original units).

        Returns:
            ``{"n", "sse", "nlpd", "mse", "mae"}`` for regression (``sse``/``mse``/``mae`` only
            when the likelihood has predictive means; ``coverage90`` when it can draw y),
            ``{"n", "error_rate", "nlp"}`` for classification.
        """
        from ..metrics import coverage_entry, evaluate, sse_entries

        self._need_likelihood("evaluate")
        lik = self.model.likelihood
        if lik.task == "classification" or self.target_stats is None:
            return evaluate(self.model, self.transform_inputs(X), np.asarray(Y, dtype=np.float64),
                            num_samples=num_samples, seed=seed)
        Y = np.asarray(Y, dtype=np.float64)
        lpd = self.log_predictive_density(X, Y, num_samples=num_samples, seed=seed)
        out = {"n": int(Y.shape[0]), "nlpd": float(-lpd.mean())}
        mean = self.predict(X, num_samples=num_samples, seed=seed)["mean"]
        if mean is not None:
            y, m = torch.as_tensor(writable(Y)), torch.as_tensor(mean)
            out.update(**sse_entries(y, m), mse=float(((y - m) ** 2).mean()),
                       mae=float((y - m).abs().mean()))
        # (the interval's coverage is unchanged by the standardization, an increasing map of y)
        out.update(coverage_entry(self.model, self.transform_inputs(X), self.transform_targets(Y),
                                  num_samples=num_samples, seed=seed))
        return out

    # ------------------------------------------------------------ files
    def save(self, path: str, training_state: Optional[dict] = None) -> None:
        """Write this model to ``path`` atomically (see :func:`save_model`)."""
        save_model(path, self.model, self.config, training_state)


def save(model: SAVIGP, path: str) -> None:
    """Write ``model`` (a :class:`~savigp.model.SAVIGP` built in Python) to ``path`` atomically: a
    model file with its parameters, configuration and the likelihood's description, not the
    training data; read it back with :func:`load`.

    A user likelihood (:class:`likelihoods.CallableLikelihood`) is recorded by where its function
    is defined (its ``import_path``, or the module/file of a top-level function) and the SHA-256
    of that file; loading runs it only when asked to.
    """
    if not isinstance(model, SAVIGP):
        raise TypeError(f"savigp.save(model, path): model must be a savigp.SAVIGP, got {type(model).__name__} "
                        "(a SavedModel writes itself with its .save(path))")
    save_model(str(path), model, {})


def load_model(path: str, device=None, X=None, Y=None, likelihood=None, trust_code: bool = False,
               max_bytes: Optional[int] = None, code: Optional[dict] = None) -> tuple:
    """Load a model file (see the module docstring for what is checked and what may run).

    Args:
        path: the file.
        device: where to put the model (default the CPU).
        X, Y: optional training data ``(N, D)``, ``(N, P)`` in the model's (standardized) units,
            to continue training; without them the model can predict only.
        likelihood, trust_code, code: for a model trained with user code, the consent to run it
            (see :func:`resolve_likelihood`); without either, latent predictions only.
        max_bytes: the most memory building the model may need (see :func:`read_model_file`).

    Returns:
        ``(SavedModel, training_state)``; ``training_state`` is the file's dict or None.

    Raises:
        ModelFileError, LikelihoodImportError: with one-line messages naming the file.
    """
    payload = read_model_file(path, max_bytes=max_bytes)
    config = payload["config"]
    try:
        lik = resolve_likelihood(config, likelihood, trust_code, source=str(path), code=code)
        model = rebuild_model(config, payload["state_dict"], X=X, Y=Y, device=device, likelihood=lik)
        model.fitted = True  # (its values were trained: a fit of it warms up, savigp.training.warmup)
    except LikelihoodImportError as err:
        msg = str(err)
        raise type(err)(msg if msg.startswith(str(path)) else f"{path}: the model's likelihood cannot be imported: {msg}") from None
    except ModelFileError as err:
        raise ModelFileError(f"{path}: {err}") from None
    except (KeyError, TypeError, ValueError) as err:
        raise ModelFileError(f"{path}: the model cannot be built from this file ({type(err).__name__}: {err})") from None
    return SavedModel(model, config), payload.get("training_state")


def load(path: str, likelihood=None, trust_code: bool = False, device=None, code: Optional[dict] = None) -> SavedModel:
    """Load a model file written by :func:`save` or ``savigp train``.

    Predictions of the returned :class:`SavedModel` take raw inputs and are in the targets'
    original units. A model file never runs code by itself: for a model trained with a user
    likelihood pass ``likelihood="my_lik.py:log_lik"`` (also where the file is now, if it moved;
    a path without ``:function`` keeps the recorded name), the function itself, or
    ``trust_code=True`` to import the recorded one; without them only the latent functions can be
    predicted. A file changed since training (SHA-256) is refused unless ``trust_code=True``.
    Further user functions (a mean function) come from the likelihood's own module, or from where
    ``code={"mean_fn": "mean.py:mean"}`` says.
    """
    return load_model(path, device=device, likelihood=likelihood, trust_code=trust_code, code=code)[0]
