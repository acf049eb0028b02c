"""A fuzz test of model files: a fixed seed, a few hundred mutations (byte flips, truncations,
tensor values NaN/inf/huge, wrong shapes, dtypes, stride tricks, missing and extra keys, config
fields of the wrong type or range, compressed records, unknown top-level entries, a damaged
content digest) of small files of every kind (a mixture, a decoupled mean head,
a joint posterior, a user likelihood, softmax with class labels, a checkpoint with an optimizer
state). A mutated payload is written as a forger would: with its content SHA-256 recomputed (so
that the checks behind it are reached) or without one (an older file's layout). Each is loaded and
used as ``savigp predict`` and ``savigp evaluate`` use it, in-process:
every outcome is a one-line error of the kinds the command line reports with exit 2 (or 3, a
likelihood returning NaN/inf), or finite predictions and metrics; never another exception.
Byte flips of a written file never load (the content digest). The archive bounds checked before
anything is unpickled (compressed records, the pickle's size and object count) and a truncated
generator state at ``--resume`` have tests of their own below."""
from __future__ import annotations

import copy
import io
import zipfile

import numpy as np
import pytest
import torch

import likelihoods
import savigp
from savigp.cli import main
from savigp.cli.columns import validate_targets
from savigp.cli.errors import CLIError
from savigp.cli.predict import check_finite_metrics, check_finite_predictions, model_problems, prediction_table
from savigp.io.csv_data import DataError, read_csv, write_csv
from savigp.model_files import LikelihoodImportError, ModelFileError, load_model, save_model
from savigp.model_files.file_format import content_digest
from savigp.estimators.nonfinite import NonFiniteLogProb

#: the errors the command line reports in one line with exit 2 (3: NonFiniteLogProb)
CLEAN = (ModelFileError, LikelihoodImportError, DataError, CLIError, NonFiniteLogProb)
MUTATIONS_PER_FILE = 60

USER_CODE = """import torch

def log_lik(y, f, s=1.0):
    return -0.5 * (y[:, 0] - f[..., 0]) ** 2 / s ** 2 - torch.log(s * torch.ones(()))
"""


def _data(n=16, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, 2))
    return X, (np.sin(2 * X[:, 0]) + 0.5 * X[:, 1])[:, None]


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    """``{kind: (file bytes, consent for load_model, test CSV path)}``."""
    d = tmp_path_factory.mktemp("fuzz")
    X, Y = _data()
    src = d / "userlik.py"
    src.write_text(USER_CODE)
    from savigp.model_files import import_callable

    labels = (X[:, :1] > 0).astype(float) + (X[:, 1:] > 0.5)
    built = {
        "mixture": (savigp.SAVIGP(X, Y, likelihoods.StudentT(df=5.0), num_inducing=4, posterior="diag-u",
                                  num_components=2), {}, Y),
        "decoupled": (savigp.SAVIGP(X, Y, likelihoods.Gaussian(), num_inducing=4, mean_basis_size=3,
                                    mean_basis="decoupled"), {}, Y),
        "joint": (savigp.SAVIGP(X, Y, likelihoods.Gaussian(), num_inducing=3, posterior="joint"), {}, Y),
        "user": (savigp.SAVIGP(X, Y, likelihoods.CallableLikelihood(import_callable(f"{src}:log_lik"),
                                                                    params={"s": 0.5}, constraints={"s": "positive"}),
                               num_inducing=4), {"likelihood": str(src)}, Y),
        "softmax": (savigp.SAVIGP(X, labels, likelihoods.Softmax(num_classes=3), num_inducing=4), {}, labels),
    }
    out = {}
    for kind, (model, consent, targets) in built.items():
        config = {"class_labels": [0.0, 1.0, 2.0]} if kind == "softmax" else {}
        state = None
        if kind == "mixture":  # a checkpoint: an Adam state (as its state_dict), a generator, a permutation
            params = list(model.parameters())
            adam = {"state": {i: {"step": torch.tensor(1.0), "exp_avg": torch.zeros_like(p.detach()),
                                  "exp_avg_sq": torch.zeros_like(p.detach())} for i, p in enumerate(params)},
                    "param_groups": [{"lr": 0.01, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0,
                                      "params": list(range(len(params)))}]}
            state = {"optimizer": adam, "generator": torch.Generator().manual_seed(1).get_state(),
                     "perm": torch.randperm(16), "pos": 3}
        path = d / f"{kind}.pt"
        save_model(str(path), model, config, state)
        csv = d / f"{kind}.csv"
        write_csv(str(csv), ["x1", "x2", "y"], np.column_stack([X, targets]))
        out[kind] = (path.read_bytes(), consent, str(csv))
    return out


def _use(path: str, consent: dict, csv: str) -> str:
    """What ``savigp predict`` and ``savigp evaluate`` do with the file, in-process: "ok" (finite
    predictions and metrics) or the name of the one-line error; other exceptions propagate."""
    try:
        saved, _ = load_model(path, **consent)
        table = read_csv(csv)
        icols, tcols = [0, 1], [2]
        with model_problems(path):
            pred = saved.predict(table.values[:, icols], num_samples=4, seed=0).numpy()
        header, values = prediction_table(saved, pred)
        check_finite_predictions(values, header, table, path)
        if saved.likelihood_loaded:
            Y = table.values[:, tcols]
            validate_targets(saved.model.likelihood, torch.as_tensor(saved.transform_targets(Y)), table, tcols)
            with model_problems(path):
                metrics = saved.evaluate(table.values[:, icols], Y, num_samples=4, seed=0)
            check_finite_metrics(metrics, path)
        return "ok"
    except CLEAN as err:
        assert len(str(err).splitlines()) == 1 and str(err).strip(), (type(err), str(err))
        return type(err).__name__


# ---------------------------------------------------------------------- mutations
VALUES = [float("nan"), float("inf"), -float("inf"), 1e300, -1e300, 1e30, -1e30, 0.0, -1.0, 1e-300, 1e154, 1e150,
          -1e150, -50.0]
CONFIG_VALUES = [None, -1, 0, 1, 2 ** 40, 10 ** 30, 1e300, float("nan"), float("inf"), "x", "", [], [1.0], {}, True,
                 "full", -2 ** 63, [0.0, 0.0]]
DTYPES = [torch.int64, torch.float16, torch.bfloat16, torch.complex64, torch.bool, torch.uint8, torch.float32,
          torch.int32]


def _paths(obj, prefix=()):
    """Every (path, value) of a nested dict/list."""
    yield prefix, obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


def _set(obj, path, value, delete=False):
    for k in path[:-1]:
        obj = obj[k]
    if delete and isinstance(obj, dict):
        del obj[path[-1]]
    else:
        obj[path[-1]] = value


def _tensor_mutation(rng, t: torch.Tensor):
    """A replacement for tensor ``t``: a value edit, another shape, a stride trick or a dtype."""
    kind = int(rng.integers(8))
    if kind <= 2 and t.numel() and t.is_floating_point():
        t = t.clone()
        t.view(-1)[int(rng.integers(t.numel()))] = VALUES[int(rng.integers(len(VALUES)))]
        return t
    if kind == 3:  # one more or one fewer element along a dimension, or a dimension more
        shape = list(t.shape) or [1]
        j = int(rng.integers(len(shape)))
        shape[j] = max(0, shape[j] + int(rng.choice([-1, 1, 1000])))
        return torch.zeros(shape if rng.random() < 0.7 else shape + [2], dtype=t.dtype)
    if kind == 4 and t.dim():  # stride 0: one stored value, the full shape (or a larger one)
        shape = list(t.shape)
        shape[-1] = shape[-1] if rng.random() < 0.5 else 15000
        return torch.zeros(1, dtype=t.dtype).expand(*shape)
    if kind == 5 and t.numel() > 1:  # overlapping strides on a short storage
        return torch.as_strided(torch.zeros(1 + sum(n - 1 for n in t.shape), dtype=t.dtype), t.shape, [1] * t.dim())
    if kind == 6:
        dtype = DTYPES[int(rng.integers(len(DTYPES)))]
        return t.to(dtype) if not dtype.is_complex else t.to(torch.float32).to(dtype)
    return torch.tensor(float(VALUES[int(rng.integers(len(VALUES)))]), dtype=t.dtype) if t.is_floating_point() \
        else torch.zeros((), dtype=t.dtype)


def _rezip(raw: bytes, compression=zipfile.ZIP_DEFLATED) -> bytes:
    """The archive ``raw`` with every record written again with ``compression``."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(raw)) as src, zipfile.ZipFile(out, "w", compression) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    return out.getvalue()


def _mutate(rng, raw: bytes, payload: dict) -> tuple:
    """``(description, bytes)`` of one mutation of a file (``raw``, and its ``payload``)."""
    kind = int(rng.integers(12))
    if kind == 10:
        return "records compressed", _rezip(raw)
    if kind == 11:
        p = dict(payload)
        choice = int(rng.integers(3))
        if choice == 0:
            p["content_sha25"] = p.pop("content_sha256")  # a flipped bit in the entry's name
        elif choice == 1:
            p["content_sha256"] = CONFIG_VALUES[int(rng.integers(len(CONFIG_VALUES)))]
        else:
            p["content_sha256"] = "0" * 64
        buf = io.BytesIO()
        torch.save(p, buf)
        return f"top-level entries {sorted(p)}", buf.getvalue()
    if kind == 0:  # byte flips
        data = bytearray(raw)
        where = rng.integers(len(data), size=int(rng.integers(1, 5)))
        for i in where:
            data[i] ^= int(rng.integers(1, 256))
        return f"flip bytes {where.tolist()}", bytes(data)
    if kind == 1:
        n = int(rng.integers(len(raw)))
        return f"truncate at {n}", raw[:n]
    p = copy.deepcopy(payload)
    sd = p["state_dict"]
    keys = sorted(sd)
    if kind in (2, 3, 4, 5):
        key = keys[int(rng.integers(len(keys)))]
        sd[key] = _tensor_mutation(rng, sd[key])
        what = f"state_dict[{key}] -> {tuple(sd[key].shape)} {sd[key].dtype} stride {sd[key].stride()}"
    elif kind == 6:
        key = keys[int(rng.integers(len(keys)))]
        if rng.random() < 0.5:
            del sd[key]
            what = f"delete state_dict[{key}]"
        else:
            sd["extra." + key] = sd[key].clone()
            what = f"extra state_dict key extra.{key}"
    elif kind in (7, 8):
        paths = [q for q, _ in _paths(p["config"]) if q]
        path = paths[int(rng.integers(len(paths)))]
        value = CONFIG_VALUES[int(rng.integers(len(CONFIG_VALUES)))]
        delete = rng.random() < 0.2
        _set(p["config"], path, value, delete)
        what = f"config{list(path)} {'deleted' if delete else '= ' + repr(value)}"
    else:  # the training state, when there is one; else a top-level key
        if p.get("training_state") is not None and rng.random() < 0.7:
            paths = [q for q, _ in _paths(p["training_state"]) if q]
            path = paths[int(rng.integers(len(paths)))]
            old = p["training_state"]
            for k in path:
                old = old[k]
            value = _tensor_mutation(rng, old) if isinstance(old, torch.Tensor) else \
                CONFIG_VALUES[int(rng.integers(len(CONFIG_VALUES)))]
            _set(p["training_state"], path, value)
            what = f"training_state{list(path)} replaced"
        else:
            key = ["config", "state_dict", "training_state"][int(rng.integers(3))]
            p[key] = CONFIG_VALUES[int(rng.integers(len(CONFIG_VALUES)))]
            what = f"payload[{key}] = {p[key]!r}"
    if rng.random() < 0.5:  # the forger recomputes the content digest (the checks behind it are reached)
        try:
            p["content_sha256"] = content_digest(p)
        except TypeError:
            p.pop("content_sha256", None)
    else:  # or leaves it out, as in a file written before it
        p.pop("content_sha256", None)
    buf = io.BytesIO()
    torch.save(p, buf)
    return what, buf.getvalue()


def test_mutated_model_files_give_one_line_errors_or_finite_predictions(bases, tmp_path):
    rng = np.random.default_rng(20261125)
    outcomes: dict = {}
    for kind, (raw, consent, csv) in bases.items():
        assert _use_bytes(tmp_path, raw, consent, csv) == "ok", kind  # the unmutated file works
        payload = torch.load(io.BytesIO(raw), weights_only=True)
        for i in range(MUTATIONS_PER_FILE):
            what, data = _mutate(rng, raw, payload)
            try:
                result = _use_bytes(tmp_path, data, consent, csv)
            except Exception as err:  # noqa: BLE001 - the point: name the mutation that escaped
                raise AssertionError(f"{kind} mutation {i} ({what}): {type(err).__name__}: {err}") from err
            outcomes[result] = outcomes.get(result, 0) + 1
    assert sum(outcomes.values()) == len(bases) * MUTATIONS_PER_FILE
    # the mutations reach both ends: files refused at load and files that still predict
    assert outcomes.get("ModelFileError", 0) > 50 and outcomes.get("ok", 0) > 10, outcomes


def _use_bytes(tmp_path, data: bytes, consent: dict, csv: str) -> str:
    path = tmp_path / "mutated.pt"
    path.write_bytes(data)
    return _use(str(path), consent, csv)


def test_mutated_files_through_the_command_line(bases, tmp_path, capsys):
    """A sample of the same mutations through ``savigp predict`` / ``evaluate`` themselves: exit
    0 with finite numbers, or 2 (3) with one line on stderr and nothing on stdout."""
    rng = np.random.default_rng(7)
    for kind, (raw, consent, csv) in bases.items():
        payload = torch.load(io.BytesIO(raw), weights_only=True)
        for _ in range(3):
            what, data = _mutate(rng, raw, payload)
            path = tmp_path / f"{kind}.pt"
            path.write_bytes(data)
            extra = ["--likelihood", consent["likelihood"]] if consent else []
            for cmd in (["predict", str(path), csv, "--inputs", "x1,x2", "--out", "-", "--quiet", "--samples", "4"],
                        ["evaluate", str(path), csv, "--inputs", "x1,x2", "--targets", "y", "--samples", "4"]):
                code = main(cmd + extra)
                out = capsys.readouterr()
                if code == 0:
                    assert "nan" not in out.out.lower() and "inf" not in out.out.lower(), (kind, what, out.out)
                else:
                    assert code in (2, 3) and out.out == "" and len(out.err.strip().splitlines()) == 1, \
                        (kind, what, code, out.err)
                    assert "internal error" not in out.err, (kind, what, out.err)


# ---------------------------------------------------------------------- before anything is unpickled
def _archive(records: dict, compression=zipfile.ZIP_STORED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression) as z:
        for name, data in records.items():
            z.writestr(name, data)
    return out.getvalue()


def test_compressed_records_are_refused_before_unpickling(tmp_path):
    """20 million empty dicts in a compressed pickle (a 20 KB file that kept torch.load busy for a
    minute and 1.1 GB), and a 256 MiB record in a file of a quarter of a megabyte: refused from the
    zip directory, before anything is read into memory."""
    bomb = tmp_path / "dicts.pt"
    bomb.write_bytes(_archive({"archive/data.pkl": b"\x80\x02(" + b"}" * 20_000_000 + b"l.", "archive/version": b"3\n"},
                              zipfile.ZIP_DEFLATED))
    assert bomb.stat().st_size < 64_000
    with pytest.raises(ModelFileError, match="'archive/data.pkl' is compressed"):
        load_model(str(bomb))
    # a deflated record of 256 MiB of zeros, written stream by stream (never in memory at once)
    big = tmp_path / "big.pt"
    with zipfile.ZipFile(big, "w") as z:
        z.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        info = zipfile.ZipInfo("archive/data/1")
        info.compress_type = zipfile.ZIP_DEFLATED
        with z.open(info, "w", force_zip64=True) as fh:
            chunk = bytes(1 << 24)
            for _ in range(16):
                fh.write(chunk)
    assert big.stat().st_size < 2 ** 20  # a quarter of a megabyte holding 256 MiB
    with pytest.raises(ModelFileError, match="'archive/data/1' is compressed"):
        load_model(str(big))


def test_the_pickle_is_bounded_in_objects_and_records_in_size(bases, tmp_path, monkeypatch):
    import savigp.model_files.file_format as ff

    raw, consent, _ = bases["mixture"]
    good = tmp_path / "good.pt"
    good.write_bytes(raw)
    load_model(str(good))  # within every bound
    monkeypatch.setattr(ff, "MAX_PICKLE_OPS", 300)
    with pytest.raises(ModelFileError, match="builds more than 300 objects"):
        load_model(str(good))
    monkeypatch.undo()
    with pytest.raises(ModelFileError, match="more than the 1000-byte limit"):
        load_model(str(good), max_bytes=1000)  # a record larger than the memory limit, said before it is read
    # a record that claims more bytes than the file holds (an edited zip directory)
    data = bytearray(raw)
    with zipfile.ZipFile(io.BytesIO(raw)) as z:
        info = [i for i in z.infolist() if "/data/" in i.filename][0]
    central = [m for m in range(len(data) - 46) if data[m:m + 4] == b"PK\x01\x02"
               and data[m + 46:m + 46 + len(info.filename)] == info.filename.encode()][0]
    for field in (20, 24):  # compressed and uncompressed sizes
        data[central + field:central + field + 4] = (2 ** 31).to_bytes(4, "little")
    (tmp_path / "claims.pt").write_bytes(bytes(data))
    with pytest.raises(ModelFileError, match="claims 2147483648 bytes, more than the file holds"):
        load_model(str(tmp_path / "claims.pt"))


def test_a_huge_container_or_deep_nesting_is_refused_before_unpickling(bases, tmp_path, monkeypatch):
    """A kernel spec of a million integers in one list (a 2 MB file; 7.8 MB of them cost 5.5 s of
    CPU before the schema refused them), and values nested 20,000 deep: refused from the pickle's
    opcodes, torch.load never called."""
    raw, _, _ = bases["mixture"]
    payload = torch.load(io.BytesIO(raw), weights_only=True)
    payload["config"]["model_options"]["kernel"] = {"kernel": "rbf", "lengthscale": [1] * 1_000_001}
    del payload["content_sha256"]
    torch.save(payload, str(tmp_path / "spec.pt"))
    (tmp_path / "deep.pt").write_bytes(_archive({"archive/data.pkl": b"\x80\x02" + b"]" * 20_000 + b".",
                                                 "archive/version": b"3\n"}))

    def never(*args, **kwargs):
        raise AssertionError("unpickled")

    monkeypatch.setattr(torch, "load", never)
    with pytest.raises(ModelFileError, match=r"spec.pt: not a savigp model file \(its pickle builds a container of "
                                             r"more than 1000000 items"):
        load_model(str(tmp_path / "spec.pt"))
    with pytest.raises(ModelFileError, match=r"deep.pt: not a savigp model file \(its pickle stacks more than 10000 "
                                             r"values: values nested thousands deep"):
        load_model(str(tmp_path / "deep.pt"))


def test_bit_flips_never_load_as_other_numbers(bases, tmp_path):
    """Every flipped bit in the tensors' bytes and in the pickle either fails to load or is refused
    by the content digest; none loads (the same file without the digest loads the flipped numbers)."""
    rng = np.random.default_rng(11)
    for kind in ("mixture", "user"):
        raw, consent, _ = bases[kind]
        with zipfile.ZipFile(io.BytesIO(raw)) as z:
            spans = []
            for info in z.infolist():
                if info.filename.endswith("data.pkl") or "/data/" in info.filename:
                    n, e = int.from_bytes(raw[info.header_offset + 26:info.header_offset + 28], "little"), \
                        int.from_bytes(raw[info.header_offset + 28:info.header_offset + 30], "little")
                    start = info.header_offset + 30 + n + e
                    spans.append((start, start + info.file_size))
        for _ in range(25):
            lo, hi = spans[int(rng.integers(len(spans)))]
            data = bytearray(raw)
            i = int(rng.integers(lo, hi))
            data[i] ^= 1 << int(rng.integers(8))
            path = tmp_path / "flipped.pt"
            path.write_bytes(bytes(data))
            with pytest.raises(CLEAN):
                load_model(str(path), **consent)


def test_a_truncated_generator_state_at_resume_is_one_line(tmp_path, capsys):
    X, Y = _data(30)
    data = str(tmp_path / "d.csv")
    write_csv(data, ["x1", "x2", "y"], np.column_stack([X, Y]))
    out = str(tmp_path / "m.pt")
    fast = ["--num-inducing", "4", "--samples", "3", "--threads", "1", "--quiet"]
    assert main(["train", data, "--targets", "y", "--out", out, "--iterations", "4", "--checkpoint-every", "2",
                 *fast]) == 0
    capsys.readouterr()
    payload = torch.load(out, weights_only=True)
    payload["training_state"] = {"optimizer": {"state": {}, "param_groups": []}, "perm": torch.randperm(30), "pos": 0,
                                 "generator": torch.Generator().manual_seed(0).get_state()[:100]}
    payload["content_sha256"] = content_digest(payload)
    torch.save(payload, out + ".ckpt")
    code = main(["train", data, "--targets", "y", "--out", out, "--iterations", "6", "--resume", *fast])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.splitlines() == [err] and "training_state.generator is not a torch.Generator state" in err


# ---------------------------------------------------------------------- kernel specs
#: values and keys written into a file's kernel spec (config.model_options.kernel)
SPEC_VALUES = [None, -1, 0, 1, 3, 2 ** 40, 1e300, float("nan"), "x", "", [], [0], [0, 0], [-1], [5], [0.5], {}, True,
               "rbf", "os.system", "sum", {"kernel": "rbf"}, {"kernel": "nope"}, {"sum": []}, [{"kernel": "rbf"}],
               {"scale": {"kernel": "white"}, "variance": -1.0}, {"list": [{"num_latent": 1, "kernel": {"kernel": "rbf"}}]},
               {"kernel": "periodic", "active_dims": [1], "ard": False}, {"kernel": "additive-matern", "nu": 2.0},
               [[1.0, 2.0]], [1.0] * 5000]
SPEC_KEYS = ["kernel", "sum", "product", "scale", "list", "active_dims", "ard", "learn", "variance", "lengthscale",
             "period", "nu", "num_latent", "offset", "alpha", "command"]


def _spec_mutation(rng, payload: dict) -> tuple:
    """``(description, bytes)`` of a file whose kernel spec (or Fourier-feature count) was edited, its
    content digest recomputed (or dropped where it cannot encode the edit) so that the schema answers."""
    from savigp.model_files.file_format import content_digest

    p = copy.deepcopy(payload)
    options = p["config"]["model_options"]
    nodes = [q for q, v in _paths(options["kernel"])]
    dicts = [q for q, v in _paths(options["kernel"]) if isinstance(v, dict)]
    kind = int(rng.integers(4))
    value = SPEC_VALUES[int(rng.integers(len(SPEC_VALUES)))]
    if kind == 0:
        path = nodes[int(rng.integers(len(nodes)))]
        if path:
            _set(options["kernel"], path, copy.deepcopy(value))
        else:
            options["kernel"] = copy.deepcopy(value)
        what = f"kernel{list(path)} = {value!r:.60}"
    elif kind == 1:
        path, key = dicts[int(rng.integers(len(dicts)))], SPEC_KEYS[int(rng.integers(len(SPEC_KEYS)))]
        _set(options["kernel"], path + (key,), copy.deepcopy(value)) if path else options["kernel"].update({key: value})
        what = f"kernel{list(path)}[{key!r}] = {value!r:.60}"
    elif kind == 2:
        path = dicts[int(rng.integers(len(dicts)))]
        node = options["kernel"]
        for k in path:
            node = node[k]
        key = sorted(node)[int(rng.integers(len(node)))]
        del node[key]
        what = f"del kernel{list(path)}[{key!r}]"
    else:
        options["fourier_features"] = [None, -1, 0, 1, 2, 3, 10 ** 6, "2", 2.0][int(rng.integers(9))]
        what = f"fourier_features = {options['fourier_features']!r}"
    try:
        p["content_sha256"] = content_digest(p)
    except TypeError:
        del p["content_sha256"]
    buf = io.BytesIO()
    torch.save(p, buf)
    return what, buf.getvalue()


@pytest.fixture(scope="module")
def kernel_bases(tmp_path_factory):
    """``{kind: (file bytes, test CSV path)}`` of models whose kernels are specs of every kind."""
    from savigp.kernels import KernelList, Periodic, RBF
    from savigp.odvff import odvff_model

    d = tmp_path_factory.mktemp("fuzz-kernels")
    X, Y = _data()
    built = {
        "composite": (savigp.SAVIGP(X, Y, likelihoods.Gaussian(), "scale(rbf(0) + periodic(1, period=2) * matern52(1)) + "
                                    "linear(0) + white", num_inducing=4), Y),
        "list": (savigp.SAVIGP(X, Y, likelihoods.Gaussian(), KernelList([RBF(2, 1) * Periodic(2, 1, active_dims=[0])]),
                               num_inducing=4), Y),
        "odvff": (odvff_model(X, Y, likelihoods.Gaussian(), num_frequencies=2, mean_basis_size=3), Y),
    }
    out = {}
    for kind, (model, targets) in built.items():
        path, csv = d / f"{kind}.pt", d / f"{kind}.csv"
        save_model(str(path), model, {})
        write_csv(str(csv), ["x1", "x2", "y"], np.column_stack([X, targets]))
        out[kind] = (path.read_bytes(), str(csv))
    return out


def test_mutated_kernel_specs_give_one_line_errors_or_finite_predictions(kernel_bases, tmp_path):
    """Edits of the kernel's spec (unknown nodes, families and options, wrong types, active_dims out of
    range, lists that do not add up to Q, Fourier features that do not fit the model) are refused in
    one line, or the file still builds and predicts finite values; never another exception."""
    rng = np.random.default_rng(42)
    outcomes: dict = {}
    for kind, (raw, csv) in kernel_bases.items():
        assert _use_bytes(tmp_path, raw, {}, csv) == "ok", kind
        payload = torch.load(io.BytesIO(raw), weights_only=True)
        for i in range(MUTATIONS_PER_FILE):
            what, data = _spec_mutation(rng, payload)
            try:
                result = _use_bytes(tmp_path, data, {}, csv)
            except Exception as err:  # noqa: BLE001 - the point: name the mutation that escaped
                raise AssertionError(f"{kind} mutation {i} ({what}): {type(err).__name__}: {err}") from err
            outcomes[result] = outcomes.get(result, 0) + 1
    assert outcomes.get("ModelFileError", 0) > 100 and outcomes.get("ok", 0) > 5, outcomes
