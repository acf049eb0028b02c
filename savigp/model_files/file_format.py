"""The model file itself: what is written (plain values and CPU tensors only, so that
``torch.load(weights_only=True)`` reads it), atomically, and what is checked when it is read.

A model file is ``{"config": plain dict, "state_dict": SAVIGP.state_dict() (CPU tensors),
"training_state": None or {"optimizer", "generator", "perm", "pos"}}``; see :mod:`savigp.model_files`.
"""
from __future__ import annotations

import os
import warnings
import zipfile
from typing import Optional

import numpy as np
import torch

from .._choices import KERNELS
from ..io.atomic_files import atomic_write
from .errors import ModelFileError
from .likelihood_spec import likelihood_spec
from .migrations import READABLE_VERSIONS, VERSION, upgrade_config
from .schema import SchemaError, check_config, check_tensors

FORMAT = "savigp-model"
# the versions and what changed between them: :mod:`savigp.model_files.migrations`


def atomic_torch_save(obj, path: str) -> None:
    """``torch.save(obj)`` to ``path`` atomically (:func:`savigp.io.atomic_files.atomic_write`): a
    failure leaves any existing file at ``path`` untouched."""
    with atomic_write(path, "wb") as fh:
        torch.save(obj, fh)


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


def save_model(path: str, model, config: dict, training_state: Optional[dict] = None) -> None:
    """Write a model file atomically (see the module docstring for its layout).

    Args:
        model: the trained model.
        config: the plain configuration dict; ``config["model"]`` is refreshed from ``model.config``;
            ``"likelihood"`` and ``"example_target"`` are read from the model when absent
            (:func:`likelihood_spec`), so ``{}`` describes a model built in Python.
        training_state: ``{"optimizer": state_dict, "generator": ByteTensor, "perm": LongTensor (N,),
            "pos": int}`` to allow resuming, or None.
    """
    config = plain(dict(config))
    config["format"], config["version"] = FORMAT, VERSION
    if "likelihood" not in config:  # a model built in Python: describe its likelihood
        config["likelihood"] = likelihood_spec(model.likelihood)
    if "example_target" not in config:
        config["example_target"] = [float(v) for v in model.train_y[0].detach().cpu().double()]
    config.setdefault("standardize", {"inputs": None, "targets": None})
    config.setdefault("class_labels", None)
    config["model"] = plain(dict(model.config))
    # the K_zz jitter training settled on: a loaded or resumed model factorizes as it trained
    config["jitter_floor"] = float(getattr(model, "jitter_floor", 0.0))
    # what the module itself is, whatever the caller's config says
    kernel = KERNELS.name_of(type(model.kernel))
    if kernel is None:
        raise TypeError(f"cannot save a model with kernel {type(model.kernel).__name__}: model files support "
                        f"the registered kernels ({', '.join(KERNELS)}; savigp.kernels.KERNELS.register adds one)")
    options = dict(config.get("model_options") or {})
    options.update(kernel=kernel, dtype=str(model.dtype).replace("torch.", ""))
    if isinstance(getattr(model.kernel, "ard", None), bool):  # one length-scale per input, or one for all
        options["kernel_ard"] = model.kernel.ard
    config["model_options"] = options
    payload = {
        "config": config,
        "state_dict": {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()},
        "training_state": _cpu(training_state) if training_state is not None else None,
    }
    atomic_torch_save(payload, path)


def read_model_file(path: str, max_bytes: Optional[int] = None) -> dict:
    """The contents of a model file, loaded with ``weights_only=True`` onto the CPU, every
    configuration field checked (types, ranges, sizes against the state dict, memory needed to
    build the model: at most ``max_bytes``, default ``SAVIGP_MAX_MODEL_BYTES`` or 8 GiB).

    Raises:
        ModelFileError: a missing file, one that is not a savigp model file, or a bad field
            (one line naming the file and the field).
    """
    path = str(path)
    if not os.path.exists(path):
        raise ModelFileError(f"{path}: no such model file")
    if os.path.isdir(path):
        raise ModelFileError(f"{path}: is a directory, not a model file")
    try:
        archive = zipfile.is_zipfile(path)
    except (zipfile.BadZipFile, OSError, ValueError):  # e.g. a zip64 record claiming several disks
        archive = False
    if not archive:
        raise ModelFileError(f"{path}: not a savigp model file (not a PyTorch archive)")
    try:
        with warnings.catch_warnings():  # a damaged pickle's warnings (TypedStorage, unknown reduce): the error says it
            warnings.simplefilter("ignore")
            payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # pickle / zip errors of every kind
        raise ModelFileError(f"{path}: not a savigp model file (damaged, or it holds objects other than tensors "
                             f"and plain values: {type(err).__name__})") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("config"), dict) \
            or payload["config"].get("format") != FORMAT:
        raise ModelFileError(f"{path}: not a savigp model file (no {FORMAT!r} configuration)")
    version = payload["config"].get("version")
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        raise ModelFileError(f"{path}: model file format version {version!r} is not supported (this savigp reads "
                             f"versions {', '.join(map(str, READABLE_VERSIONS))})")
    upgrade_config(payload["config"])
    try:
        check_config(payload["config"], payload.get("state_dict"), max_bytes)
        _check_training_state(payload.get("training_state"))
    except SchemaError as err:
        raise ModelFileError(f"{path}: bad model file: {err}") from None
    return payload


def _check_training_state(ts) -> None:
    if ts is None:
        return
    if not isinstance(ts, dict) or not isinstance(ts.get("optimizer"), dict):
        raise SchemaError("training_state must be None or a dict with an optimizer state")
    check_tensors(ts, "training_state", values=False)  # storage only: an optimizer state may hold large values
    perm, pos, gen = ts.get("perm"), ts.get("pos"), ts.get("generator")
    if not (isinstance(perm, torch.Tensor) and perm.dim() == 1 and perm.dtype == torch.int64):
        raise SchemaError("training_state.perm must be a 1-D LongTensor")
    if isinstance(pos, bool) or not isinstance(pos, int) or not 0 <= pos <= perm.numel():
        raise SchemaError(f"training_state.pos must be an integer between 0 and {perm.numel()}, got {pos!r}")
    if not (isinstance(gen, torch.Tensor) and gen.dtype == torch.uint8):
        raise SchemaError("training_state.generator must be a ByteTensor (a torch.Generator state)")

