"""A fuzz test of model files: a fixed seed, a few hundred mutations (byte flips, truncations,
tensor values NaN/inf/huge, wrong shapes, dtypes, stride tricks, missing and extra keys, config
fields of the wrong type or range) of small files of every kind (a mixture, a decoupled mean head,
a joint posterior, a user likelihood, softmax with class labels, a checkpoint with an optimizer
state). Each is loaded and used as ``savigp predict`` and ``savigp evaluate`` use it, in-process:
every outcome is a one-line error of the kinds the command line reports with exit 2 (or 3, a
likelihood returning NaN/inf), or finite predictions and metrics; never another exception."""
from __future__ import annotations

import copy
import io

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


def _mutate(rng, raw: bytes, payload: dict) -> tuple:
    """``(description, bytes)`` of one mutation of a file (``raw``, and its ``payload``)."""
    kind = int(rng.integers(10))
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
