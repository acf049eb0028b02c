"""Model files: save a trained :class:`~savigp.model.SAVIGP` and rebuild it without its data.

A model file is a ``torch.save`` of a dict of tensors and plain Python values only, so it loads
with ``torch.load(path, weights_only=True)``::

    {
      "config":         plain dict (below),
      "state_dict":     SAVIGP.state_dict() (tensors, on the CPU),
      "training_state": None or {"optimizer": optimizer.state_dict(), "generator": ByteTensor
                        (torch.Generator state), "perm": LongTensor (N,), "pos": int},
    }

``config`` holds everything needed to rebuild the module around the state dict and to use it:

* ``"model"``: SAVIGP's own ``config`` (input_dim D, num_data N, num_latent Q, num_inducing M,
  dense, learn_inducing, posterior, num_components, learn_prior_mean, mean_basis_size);
* ``"model_options"``: kernel name, inducing_init, seed, dtype name, prior_mean;
* ``"likelihood"``: ``{"name", "class", "kwargs"}`` for a class of :mod:`likelihoods`, or
  ``{"name": "callable" | "user-class", "import_path", "kwargs"}`` for a user function or
  ``Likelihood`` subclass (re-imported on load; see :mod:`savigp.user_likelihood`);
* ``"standardize"``: ``{"inputs": None | {"mean": [D floats], "std": [D floats]},
  "targets": None | {"mean": [P floats], "std": [P floats]}}``, undone at prediction;
* ``"example_target"``: one valid target row (P floats), used to build the placeholder data;
* ``"class_labels"``: the label of each class (classification) or None;
* ``"columns"``, ``"training"``, ``"step"``, ``"complete"``: what the command line recorded.

The training data are not stored (``train_x``/``train_y`` are non-persistent buffers): a model
rebuilt by :func:`rebuild_model` without data holds placeholders and can predict, not train.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import math
import os
import sys
import tempfile
import zipfile
from typing import Callable, Optional

import numpy as np
import torch

from .model import SAVIGP

FORMAT = "savigp-model"
#: 2: ``posterior="diag"`` became the paper's diagonal mixture over u (:class:`UDiagonalMixture`);
#: version-1 files meant the whitened one, read back as ``"diag-whitened"`` (see :func:`_upgrade`)
VERSION = 2
#: the names of the whitened diagonal mixture in version-1 files
_V1_DIAGONAL_NAMES = ("diag", "diagonal", "mog")


class ModelFileError(ValueError):
    """A model file that cannot be read or used; ``str(err)`` is one line naming the file."""


class LikelihoodImportError(ValueError):
    """A user likelihood ``module:function`` or ``file.py:function`` that cannot be imported."""


# ---------------------------------------------------------------------- user likelihoods
def _is_file_spec(target: str) -> bool:
    return target.endswith(".py") or "/" in target or os.sep in target


def _split_spec(spec: str, also: str = "") -> tuple[str, str]:
    """``"target:function"`` -> (target, function), or a one-line error naming what was expected."""
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name:
        raise LikelihoodImportError(
            f"likelihood {spec!r}: expected {also}'package.module:function' or 'path/to/file.py:function'"
        )
    return target, name


def canonical_import_path(spec: str) -> str:
    """``spec`` with a file path made absolute (``/abs/file.py:fn``); module paths unchanged."""
    target, name = _split_spec(spec, "a built-in name, ")
    if _is_file_spec(target):
        target = os.path.abspath(os.path.expanduser(target))
    return f"{target}:{name}"


def import_callable(spec: str) -> Callable:
    """Import the function named by ``"package.module:function"`` or ``"path/to/file.py:function"``.

    A module path is looked up on ``sys.path`` and then in the current folder.

    Raises:
        LikelihoodImportError: one line saying what is missing (file, module, function).
    """
    target, name = _split_spec(spec)
    if _is_file_spec(target):
        path = os.path.abspath(os.path.expanduser(target))
        if not os.path.isfile(path):
            raise LikelihoodImportError(f"likelihood {spec!r}: no such file {path}")
        modname = "savigp_user_likelihood_" + hashlib.sha1(path.encode()).hexdigest()[:12]
        if modname in sys.modules:
            module = sys.modules[modname]
        else:
            loader_spec = importlib.util.spec_from_file_location(modname, path)
            if loader_spec is None or loader_spec.loader is None:
                raise LikelihoodImportError(f"likelihood {spec!r}: cannot load {path} as a Python file")
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[modname] = module
            try:
                loader_spec.loader.exec_module(module)
            except BaseException as err:
                del sys.modules[modname]
                if isinstance(err, KeyboardInterrupt):
                    raise
                where = f" (line {err.lineno})" if isinstance(err, SyntaxError) and err.lineno else ""
                raise LikelihoodImportError(
                    f"likelihood {spec!r}: running {path} failed{where}: {type(err).__name__}: {err}"
                ) from None
    else:
        added = os.getcwd() not in sys.path
        if added:
            sys.path.append(os.getcwd())
        try:
            module = importlib.import_module(target)
        except BaseException as err:
            if isinstance(err, KeyboardInterrupt):
                raise
            raise LikelihoodImportError(f"likelihood {spec!r}: cannot import module {target!r}: {type(err).__name__}: {err}") from None
        finally:
            if added:
                sys.path.remove(os.getcwd())
    fn = getattr(module, name, None)
    if fn is None:
        raise LikelihoodImportError(f"likelihood {spec!r}: {target} has no attribute {name!r}")
    if not callable(fn):
        raise LikelihoodImportError(f"likelihood {spec!r}: {target}.{name} is a {type(fn).__name__}, not a function")
    return fn


def make_likelihood(spec: dict):
    """Construct the likelihood that ``config["likelihood"]`` describes.

    Raises:
        LikelihoodImportError: a user function that cannot be re-imported.
        ModelFileError: a likelihood class that this installation does not have.
    """
    import likelihoods

    kwargs = dict(spec.get("kwargs") or {})
    # ---- user likelihoods (functions and Likelihood subclasses in user code): every field of
    # their spec (task, classes, params, constraints, min_log_prob, mean_import_path, ...) is
    # read back by build_user_likelihood; CallableLikelihood.spec() writes them
    from .user_likelihood import USER_KINDS, build_user_likelihood

    if spec.get("name") in USER_KINDS:
        return build_user_likelihood(spec, import_callable)
    cls = getattr(likelihoods, str(spec.get("class")), None)
    if cls is None:
        raise ModelFileError(f"likelihood {spec.get('name')!r} (class {spec.get('class')!r}) is not available in this installation")
    return cls(**kwargs)


# ---------------------------------------------------------------------- building models
def _dtype(name: str) -> torch.dtype:
    dt = getattr(torch, str(name), None)
    if not isinstance(dt, torch.dtype) or not dt.is_floating_point:
        raise ModelFileError(f"unknown floating-point dtype {name!r}")
    return dt


def build_model(X, Y, likelihood, options: dict) -> SAVIGP:
    """A new :class:`SAVIGP` on data ``X (N, D)``, ``Y (N, P)`` from command-line style options.

    ``options`` keys (all optional): ``kernel``, ``num_inducing``, ``inducing_inputs``
    (``(M, D)`` or ``(Q, M, D)``), ``inducing_init``, ``dense``,
    ``learn_inducing``, ``posterior``, ``num_components``, ``prior_mean``, ``learn_prior_mean``,
    ``mean_basis_size``, ``dtype`` (a name: ``"float32"``/``"float64"``), ``device``, ``seed``.
    """
    o = dict(options)
    return SAVIGP(
        X, Y, likelihood, o.get("kernel") or "rbf",
        num_inducing=o.get("num_inducing"), inducing_inputs=o.get("inducing_inputs"),
        inducing_init=o.get("inducing_init") or "kmeans",
        learn_inducing=bool(o.get("learn_inducing", True)), dense=bool(o.get("dense", False)),
        posterior=o.get("posterior") or "full", num_components=int(o.get("num_components") or 1),
        prior_mean=o["prior_mean"] if o.get("prior_mean") is not None else 0.0,
        learn_prior_mean=bool(o.get("learn_prior_mean", False)),
        mean_basis_size=int(o.get("mean_basis_size") or 0), dtype=_dtype(o.get("dtype") or "float64"),
        device=o.get("device"), seed=int(o.get("seed") or 0),
    )


def rebuild_model(config: dict, state_dict: dict, X=None, Y=None, device=None) -> SAVIGP:
    """The model a file describes, with its parameters loaded from ``state_dict``.

    Without ``X``/``Y`` the module is built around placeholder data of the recorded shapes (it
    can predict but not train); with them (``X (N, D)``, ``Y (N, P)``, e.g. to resume training)
    they become its training data. Inducing inputs are placeholders in both cases (no k-means
    is run) and are then overwritten by the state dict.
    """
    mc, mo = config["model"], config.get("model_options", {})
    likelihood = make_likelihood(config["likelihood"])
    D, N, Q, M = int(mc["input_dim"]), int(mc["num_data"]), int(mc["num_latent"]), int(mc["num_inducing"])
    with_data = X is not None
    if not with_data:
        n = N if mc["dense"] else max(2, int(mc.get("mean_basis_size") or 0))
        gen = torch.Generator().manual_seed(0)
        X = torch.randn(n, D, generator=gen, dtype=torch.float64)
        example = torch.as_tensor(config["example_target"], dtype=torch.float64).reshape(1, -1)
        Y = example.expand(n, example.shape[1]).clone()
    options = {
        "kernel": mo.get("kernel"), "inducing_init": mo.get("inducing_init"), "seed": mo.get("seed", 0),
        "dtype": mo.get("dtype", "float64"), "prior_mean": mo.get("prior_mean", 0.0),
        "dense": mc["dense"], "learn_inducing": mc["learn_inducing"], "posterior": mc["posterior"],
        "num_components": mc["num_components"], "learn_prior_mean": mc["learn_prior_mean"],
        "mean_basis_size": mc.get("mean_basis_size", 0), "device": device,
    }
    if not mc["dense"]:
        options["inducing_inputs"] = torch.zeros(Q, M, D, dtype=torch.float64)
    model = build_model(X, Y, likelihood, options)
    if not with_data:
        model.num_data = N
        model.config["num_data"] = N
    try:
        model.load_state_dict(state_dict, strict=True)
    except RuntimeError as err:
        first = str(err).strip().splitlines()
        raise ModelFileError(f"the parameters do not fit the model the file describes: {' '.join(s.strip() for s in first[:3])}") from None
    return model


# ---------------------------------------------------------------------- writing and reading files
def atomic_torch_save(obj, path: str) -> None:
    """``torch.save(obj)`` to ``path`` atomically: a temporary file in the same folder, flushed and
    fsync'ed, then ``os.replace``d over ``path`` (and the folder fsync'ed). A failure leaves any
    existing file at ``path`` untouched."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(obj, fh)
            fh.flush()
            os.fsync(fh.fileno())
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    try:
        dfd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory handles
        return
    try:
        os.fsync(dfd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(dfd)


def _cpu(obj):
    """A copy of a nested dict/list of tensors with every tensor detached on the CPU."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cpu(v) for v in obj)
    return obj


def plain(obj, where: str = "config"):
    """``obj`` as plain Python values only (dict, list, str, int, float, bool, None), which is what
    ``torch.load(weights_only=True)`` accepts besides tensors: numpy scalars and arrays become
    numbers and lists, tuples become lists; anything else raises ``TypeError`` naming the key."""
    if isinstance(obj, np.generic):  # before float: np.float64 is a float subclass
        return obj.item()
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, (np.ndarray, torch.Tensor)):
        return np.asarray(obj.detach().cpu() if isinstance(obj, torch.Tensor) else obj).tolist()
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if not isinstance(k, str):
                raise TypeError(f"{where}: keys must be strings, got {k!r}")
            out[k] = plain(v, f"{where}[{k!r}]")
        return out
    if isinstance(obj, (list, tuple)):
        return [plain(v, f"{where}[{i}]") for i, v in enumerate(obj)]
    raise TypeError(f"{where}: {type(obj).__name__} is not a plain value (model files hold tensors and plain values only)")


def save_model(path: str, model: SAVIGP, config: dict, training_state: Optional[dict] = None) -> None:
    """Write a model file atomically (see the module docstring for its layout).

    Args:
        model: the trained model.
        config: the plain configuration dict; ``config["model"]`` is refreshed from ``model.config``.
        training_state: ``{"optimizer": state_dict, "generator": ByteTensor, "perm": LongTensor (N,),
            "pos": int}`` to allow resuming, or None.
    """
    config = plain(dict(config))
    config["format"], config["version"] = FORMAT, VERSION
    config["model"] = plain(dict(model.config))
    # what the module itself is, whatever the caller's config says
    from .kernels import KERNELS

    kernel = [name for name, cls in KERNELS.items() if type(model.kernel) is cls]
    if not kernel:
        raise TypeError(f"cannot save a model with kernel {type(model.kernel).__name__}: model files support "
                        f"the built-in kernels {sorted(KERNELS)}")
    options = dict(config.get("model_options") or {})
    options.update(kernel=kernel[0], dtype=str(model.dtype).replace("torch.", ""))
    config["model_options"] = options
    payload = {
        "config": config,
        "state_dict": {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()},
        "training_state": _cpu(training_state) if training_state is not None else None,
    }
    atomic_torch_save(payload, path)


def read_model_file(path: str) -> dict:
    """The raw contents of a model file, loaded with ``weights_only=True`` onto the CPU.

    Raises:
        ModelFileError: a missing file, or one that is not a savigp model file.
    """
    path = str(path)
    if not os.path.exists(path):
        raise ModelFileError(f"{path}: no such model file")
    if os.path.isdir(path):
        raise ModelFileError(f"{path}: is a directory, not a model file")
    if not zipfile.is_zipfile(path):
        raise ModelFileError(f"{path}: not a savigp model file (not a PyTorch archive)")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # pickle / zip errors of every kind
        raise ModelFileError(f"{path}: not a savigp model file (damaged, or it holds objects other than tensors "
                             f"and plain values: {type(err).__name__})") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("config"), dict) \
            or payload["config"].get("format") != FORMAT:
        raise ModelFileError(f"{path}: not a savigp model file (no {FORMAT!r} configuration)")
    version = payload["config"].get("version")
    if version == 1:
        _upgrade(payload["config"])
    elif version != VERSION:
        raise ModelFileError(f"{path}: model file format version {version} is not supported (this savigp reads "
                             f"versions 1 and {VERSION})")
    return payload


def _upgrade(config: dict) -> None:
    """A version-1 configuration in version-2 terms, in place: its ``"diag"`` posterior (also
    ``"diagonal"``, ``"mog"``) was the whitened diagonal mixture, now named ``"diag-whitened"``
    (the parameters have the same names and shapes, so loading them as ``"diag"`` would silently
    give another model)."""
    for section in ("model", "model_options"):
        part = config.get(section)
        if isinstance(part, dict) and part.get("posterior") in _V1_DIAGONAL_NAMES:
            part["posterior"] = "diag-whitened"
    config["version"] = VERSION


# ---------------------------------------------------------------------- a loaded model
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

    def log_predictive_density(self, X, Y, num_samples: int = 1000, seed: int = 0) -> np.ndarray:
        """log p(y*_n | x*_n) of raw targets ``Y (B, P)`` at raw inputs ``X (B, D)``: ``(B,)``.

        With standardized targets this is the density of the standardized targets minus the
        log-Jacobian sum_p log std_p, i.e. a density in the targets' original units.
        """
        lpd = self.model.log_predictive_density(self.transform_inputs(X), self.transform_targets(Y),
                                                num_samples=num_samples, seed=seed)
        return lpd.detach().cpu().to(torch.float64).numpy() - self.log_jacobian()

    def evaluate(self, X, Y, num_samples: int = 1000, seed: int = 0) -> dict:
        """The paper's metrics on raw test data (as :func:`savigp.metrics.evaluate`, in original units).

        Returns:
            ``{"n", "sse", "nlpd", "mse", "mae"}`` for regression (``sse``/``mse``/``mae`` only
            when the likelihood has predictive means), ``{"n", "error_rate", "nlp"}`` for
            classification.
        """
        from .metrics import evaluate, standardized_squared_error

        lik = self.model.likelihood
        if lik.task == "classification" or self.target_stats is None:
            return evaluate(self.model, self.transform_inputs(X), np.asarray(Y, dtype=np.float64),
                            num_samples=num_samples, seed=seed)
        Y = np.asarray(Y, dtype=np.float64)
        lpd = self.log_predictive_density(X, Y, num_samples=num_samples, seed=seed)
        out = {"n": int(Y.shape[0]), "nlpd": float(-lpd.mean())}
        mean = self.predict(X, num_samples=num_samples, seed=seed)["mean"]
        if mean is not None:
            y, m = torch.as_tensor(Y), torch.as_tensor(mean)
            out.update(sse=standardized_squared_error(y, m), mse=float(((y - m) ** 2).mean()),
                       mae=float((y - m).abs().mean()))
        return out

    # ------------------------------------------------------------ files
    def save(self, path: str, training_state: Optional[dict] = None) -> None:
        """Write this model to ``path`` atomically (see :func:`save_model`)."""
        save_model(path, self.model, self.config, training_state)


def load_model(path: str, device=None, X=None, Y=None) -> tuple:
    """Load a model file.

    Args:
        path: the file.
        device: where to put the model (default the CPU).
        X, Y: optional training data ``(N, D)``, ``(N, P)`` in the model's (standardized) units,
            to continue training; without them the model can predict only.

    Returns:
        ``(SavedModel, training_state)``; ``training_state`` is the file's dict or None.

    Raises:
        ModelFileError, LikelihoodImportError: with one-line messages naming the file.
    """
    payload = read_model_file(path)
    config = payload["config"]
    try:
        model = rebuild_model(config, payload["state_dict"], X=X, Y=Y, device=device)
    except LikelihoodImportError as err:
        raise LikelihoodImportError(f"{path}: the model's likelihood cannot be re-imported: {err}") from None
    except ModelFileError as err:
        raise ModelFileError(f"{path}: {err}") from None
    except (KeyError, TypeError) as err:
        raise ModelFileError(f"{path}: incomplete model configuration ({type(err).__name__}: {err})") from None
    return SavedModel(model, config), payload.get("training_state")


def standardization_stats(A: np.ndarray) -> dict:
    """Column means and standard deviations of ``A (N, C)`` as plain float lists; a constant
    column gets std 1 (it is only centred)."""
    A = np.asarray(A, dtype=np.float64)
    mean = A.mean(axis=0)
    std = A.std(axis=0)
    std = np.where((std > 0) & np.isfinite(std), std, 1.0)
    if not all(math.isfinite(v) for v in mean):
        raise ValueError("cannot standardize: non-finite column means")
    return {"mean": [float(v) for v in mean], "std": [float(v) for v in std]}
