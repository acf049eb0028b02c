"""The model file itself: what is written (plain values and CPU tensors only, so that
``torch.load(weights_only=True)`` reads it), atomically, and what is checked when it is read.

A model file is ``{"config": plain dict, "state_dict": SAVIGP.state_dict() (CPU tensors),
"training_state": None or {"optimizer", "generator", "perm", "pos"}, "content_sha256": hex}``;
see :mod:`savigp.model_files`.

**Before anything is unpickled** (:func:`_check_archive`) the archive is read as a zip file: every
record must be stored uncompressed, as ``torch.save`` writes them (so no record is larger than
the file: a compressed 1 MB file could claim a 1 GiB record), lie inside the file, and hold at
most ``max_bytes``; the pickle itself (``data.pkl``) is at most :data:`MAX_PICKLE_BYTES` and
builds at most :data:`MAX_PICKLE_OPS` objects, no container of more than the schema's
:data:`~savigp.model_files.fields.MAX_ITEMS` items and nothing nested thousands deep, read from
its opcodes (:mod:`savigp.model_files.pickle_scan`; a 33 KB file of 20 million empty dicts kept
``torch.load`` busy for a minute and 1.1 GB, a 7.8 MB kernel spec of 3.9 million integers 5.5 s).

**The content's SHA-256** (``"content_sha256"``, :func:`content_digest`) is written with every
model file: a SHA-256 over the configuration, the state dict and the training state in a
canonical encoding (each tensor by its dtype, shape, strides, offset and storage bytes), checked
when the file is read, so a bit flipped in a tensor or in the configuration is refused instead of
loading with other numbers. A file without it was written before savigp recorded one (a layout
step without a version, :mod:`savigp.model_files.migrations`): it loads as before, unverified; an unknown top-level
entry (a flipped bit in the name ``content_sha256`` included) is refused. The digest is an
integrity check against damage, not a signature: whoever edits a file can recompute it.
"""
from __future__ import annotations

import hashlib
import os
import struct
import warnings
import zipfile
from typing import Optional

import numpy as np
import torch

from ..io.atomic_files import atomic_write
from .errors import ModelFileError
from .fields import MAX_ITEMS
from .kernel_record import kernel_record
from .likelihood_spec import likelihood_spec
from .migrations import READABLE_VERSIONS, VERSION, upgrade_config
from .pickle_scan import scan_pickle
from .schema import SchemaError, check_config, check_tensors

FORMAT = "savigp-model"
# the versions and what changed between them: :mod:`savigp.model_files.migrations`
#: the top-level entries of a model file (``content_sha256`` absent in files written before it)
ENTRIES = ("config", "state_dict", "training_state", "content_sha256")
#: the largest pickle (``data.pkl``) a model file may hold: its configuration and the tensors'
#: descriptions (a model of 100,000 named inputs needs about 5 MB)
MAX_PICKLE_BYTES = 64 * 2 ** 20
#: the most opcodes that pickle may hold (each builds at most one object; about 2 million for the
#: largest configuration the schema allows)
MAX_PICKLE_OPS = 4_000_000


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
    kernel = kernel_record(model.kernel)  # its spec (and Fourier features), or a TypeError naming an unregistered part
    options = dict(config.get("model_options") or {})
    for key in ("kernel_ard", "fourier_features"):  # (a format-4 record, or the caller's)
        options.pop(key, None)
    options.update(kernel, dtype=str(model.dtype).replace("torch.", ""))
    config["model_options"] = options
    payload = {
        "config": config,
        # (plain tensors: Fourier features' inducing placeholder is a Tensor subclass, which weights_only refuses)
        "state_dict": {k: v.detach().to("cpu", copy=True).as_subclass(torch.Tensor) for k, v in model.state_dict().items()},
        "training_state": _cpu(training_state) if training_state is not None else None,
    }
    payload["content_sha256"] = content_digest(payload)
    atomic_torch_save(payload, path)


def content_digest(payload: dict) -> str:
    """The SHA-256 of a model file's content: ``config``, ``state_dict`` and ``training_state`` in
    a canonical encoding (dict entries by key, each value tagged by its type; a tensor by its
    dtype, shape, strides, storage offset and the bytes of its storage), so that the reader
    computes the same digest from what it unpickled.

    Raises:
        TypeError: a value that a model file does not hold (reading: the file is refused).
    """
    h = hashlib.sha256(b"savigp-model content 1\0")
    for key in ENTRIES[:3]:
        _encode(h, key)
        _encode(h, payload.get(key))
    return h.hexdigest()


def _encode(h, obj, depth: int = 0) -> None:
    if depth > 32:
        raise TypeError("nested more than 32 levels deep")
    if obj is None:
        h.update(b"N")
    elif obj is True or obj is False:
        h.update(b"T" if obj else b"F")
    elif isinstance(obj, int):
        text = str(int(obj)).encode()
        h.update(b"i" + struct.pack("<Q", len(text)) + text)
    elif isinstance(obj, float):
        h.update(b"f" + struct.pack("<d", obj))
    elif isinstance(obj, str):
        data = obj.encode("utf-8", "surrogatepass")
        h.update(b"s" + struct.pack("<Q", len(data)) + data)
    elif isinstance(obj, torch.Tensor):
        t = obj.detach()
        if t.device.type != "cpu" or t.layout != torch.strided:
            raise TypeError(f"a {t.device.type} {t.layout} tensor")
        meta = f"{t.dtype}|{tuple(t.shape)}|{t.stride()}|{t.storage_offset()}".encode()
        storage = t.untyped_storage()
        h.update(b"t" + struct.pack("<QQ", len(meta), storage.nbytes()) + meta)
        if storage.nbytes():
            h.update(torch.empty(0, dtype=torch.uint8).set_(storage).numpy().data)
    elif isinstance(obj, dict):
        h.update(b"d" + struct.pack("<Q", len(obj)))
        keys = sorted(obj, key=lambda k: (type(k).__name__, str(k)))
        for k in keys:
            _encode(h, k, depth + 1)
            _encode(h, obj[k], depth + 1)
    elif isinstance(obj, (list, tuple)):
        h.update((b"l" if isinstance(obj, list) else b"u") + struct.pack("<Q", len(obj)))
        for v in obj:
            _encode(h, v, depth + 1)
    else:
        raise TypeError(f"a value of type {type(obj).__name__}")


def _check_archive(path: str, max_bytes: Optional[int]) -> None:
    """The bounds checked before anything is unpickled (module docstring).

    Raises:
        ModelFileError: naming the file and the bound.
    """
    from .. import settings

    limit = settings.max_model_bytes() if max_bytes is None else int(max_bytes)
    size = os.path.getsize(path)
    try:
        with zipfile.ZipFile(path) as archive:
            records = archive.infolist()
            pickles = [r for r in records if r.filename.endswith("data.pkl")]
            for r in records:
                if r.compress_type != zipfile.ZIP_STORED:
                    raise ModelFileError(f"{path}: not a savigp model file (its record {_short(r.filename)} is "
                                         "compressed; torch.save and savigp never compress a record)")
                if r.file_size != r.compress_size or r.header_offset + r.file_size > size:
                    raise ModelFileError(f"{path}: not a savigp model file (its record {_short(r.filename)} claims "
                                         f"{r.file_size} bytes, more than the file holds)")
                if r.file_size > limit:
                    raise ModelFileError(f"{path}: its record {_short(r.filename)} holds {r.file_size} bytes, more "
                                         f"than the {limit}-byte limit (--max-memory, SAVIGP_MAX_MODEL_BYTES)")
            if len(pickles) != 1:
                raise ModelFileError(f"{path}: not a savigp model file ({len(pickles)} pickles in the archive)")
            if pickles[0].file_size > MAX_PICKLE_BYTES:
                raise ModelFileError(f"{path}: not a savigp model file (its pickle holds {pickles[0].file_size} "
                                     f"bytes; a model file's needs at most {MAX_PICKLE_BYTES})")
            data = archive.read(pickles[0])
    except ModelFileError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError, NotImplementedError) as err:
        raise ModelFileError(f"{path}: not a savigp model file (damaged archive: {type(err).__name__})") from None
    try:
        refused = scan_pickle(data, MAX_PICKLE_OPS, MAX_ITEMS)
    except Exception as err:  # a damaged pickle: opcodes pickletools does not know, truncated arguments
        raise ModelFileError(f"{path}: not a savigp model file (damaged pickle: {type(err).__name__})") from None
    if refused:
        raise ModelFileError(f"{path}: not a savigp model file ({refused})")


def _short(text: str, limit: int = 80) -> str:
    """``text`` for a one-line message: at most ``limit`` characters, the rest counted."""
    text = repr(text)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


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
    _check_archive(path, max_bytes)
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
    _check_content(path, payload)
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
    try:  # the state a CPU generator takes back (a truncated or edited one is refused here, not at --resume)
        torch.Generator().set_state(gen.detach().contiguous().view(-1).clone())
    except (RuntimeError, ValueError, TypeError) as err:
        raise SchemaError(f"training_state.generator is not a torch.Generator state ({gen.numel()} bytes: "
                          f"{str(err).splitlines()[0][:120] if str(err) else type(err).__name__})") from None


def _check_content(path: str, payload: dict) -> None:
    """The top-level entries known, and the content's SHA-256 where the file records one (module docstring)."""
    unknown = [k for k in payload if k not in ENTRIES]
    if unknown:
        raise ModelFileError(f"{path}: not a savigp model file (an unknown entry {_short(str(unknown[0]))}; "
                             "damaged?)")
    recorded = payload.get("content_sha256")
    if "content_sha256" not in payload:
        return  # written before savigp recorded the digest: read as before
    if not isinstance(recorded, str):
        raise ModelFileError(f"{path}: damaged model file (its content_sha256 is not a SHA-256)")
    try:
        digest = content_digest(payload)
    except TypeError as err:
        raise ModelFileError(f"{path}: not a savigp model file (it holds {err})") from None
    if digest != recorded:
        raise ModelFileError(f"{path}: damaged model file: the SHA-256 of its content ({digest[:16]}...) is not the one "
                             f"written with it ({recorded[:16]}...); a changed byte would load as other numbers")
