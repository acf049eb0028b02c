"""What a model file's tensors hold, checked at load (savigp/model_files/schema.py): every tensor
stores the elements it claims (no stride tricks), floating values are finite and bounded; the
K_zz jitter training settled on is saved and restored; predict and evaluate never print a
non-finite number with exit status 0."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import likelihoods
import savigp
from savigp.cli import main
from savigp.io.csv_data import write_csv
from savigp.model_files import ModelFileError, load_model


def _data(n=30, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, 2))
    y = np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.standard_normal(n)
    return X, y[:, None]


@pytest.fixture
def saved_file(tmp_path):
    X, Y = _data()
    model = savigp.SAVIGP(X, Y, likelihoods.Gaussian(), num_inducing=6, posterior="diag-u")
    path = tmp_path / "m.pt"
    savigp.save(model, str(path))
    test = tmp_path / "t.csv"
    write_csv(str(test), ["x1", "x2", "y"], np.column_stack([X, Y]))
    return path, test


def _edited(path, tmp_path, edit, name="bad.pt"):
    payload = torch.load(str(path), weights_only=True)
    edit(payload)
    payload.pop("content_sha256", None)  # (edited: as a file written before the content digest)
    out = tmp_path / name
    torch.save(payload, str(out))
    return str(out)


def test_a_stride_zero_tensor_cannot_claim_a_huge_size(saved_file, tmp_path):
    """A file of a few KB whose inducing inputs and posterior are ``expand``-ed views claiming
    M = 15000 is refused at load, naming the tensor, before anything of size M is built."""
    path, _ = saved_file
    M = 15000

    def claim(p):
        sd = p["state_dict"]
        for key in list(sd):
            t = sd[key]
            if key == "inducing":
                sd[key] = torch.zeros(1, dtype=t.dtype).expand(1, M, 2)
            elif key.startswith("posterior."):
                sd[key] = torch.zeros(1, dtype=t.dtype).expand(*t.shape[:-1], M)
        p["config"]["model"]["num_inducing"] = M

    bad = _edited(path, tmp_path, claim)
    import os
    assert os.path.getsize(bad) < 20_000
    with pytest.raises(ModelFileError, match=r"state_dict\['inducing'\] claims shape \(1, 15000, 2\)"):
        load_model(bad)


def test_overlapping_strides_and_short_storage_are_refused(saved_file, tmp_path):
    path, _ = saved_file
    base = torch.load(str(path), weights_only=True)["state_dict"]["inducing"]  # (1, 6, 2)
    overlap = torch.as_strided(torch.zeros(7, dtype=base.dtype), (1, 6, 2), (1, 1, 1))  # 12 elements on 7 stored
    bad = _edited(path, tmp_path, lambda p: p["state_dict"].__setitem__("inducing", overlap))
    with pytest.raises(ModelFileError, match=r"claims shape \(1, 6, 2\) \(12 elements\) but the file stores 7"):
        load_model(bad)


@pytest.mark.parametrize("key,value,needle", [
    ("posterior.mean", float("nan"), "non-finite value"),
    ("kernel.variance.raw", 1e300, "at most 1.34e\\+154"),
    ("kernel.lengthscales.raw", -float("inf"), "non-finite value"),
    ("likelihood.variance.raw", 1e200, "at most"),
])
def test_non_finite_or_huge_parameters_are_refused_naming_the_field(saved_file, tmp_path, capsys, key, value, needle):
    """NaN/inf anywhere, or a value whose square overflows (a kernel variance of 1e300 gave means
    of 3e149 with exit 0), is refused at load: exit 2, one line naming the state-dict key."""
    path, test = saved_file

    def edit(p):
        p["state_dict"][key].view(-1)[0] = value

    bad = _edited(path, tmp_path, edit)
    with pytest.raises(ModelFileError, match=needle) as err:
        load_model(bad)
    assert key in str(err.value)
    assert main(["predict", bad, str(test), "--inputs", "x1,x2", "--quiet", "--out", "-"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and len(out.err.strip().splitlines()) == 1 and key in out.err


def test_a_non_finite_prediction_is_never_written(saved_file, tmp_path, capsys):
    """The last guard: a model whose finite, bounded parameters still overflow (a likelihood
    variance of 1e150 squared in the predictive variance) exits 2 naming the row's line and the
    column, and writes nothing."""
    path, test = saved_file

    def edit(p):  # variance = softplus(raw) + floor ~ 1e154: finite, but mean^2 + var overflows downstream
        p["state_dict"]["posterior.mean"].fill_(1e154)

    bad = _edited(path, tmp_path, edit)
    out_csv = tmp_path / "pred.csv"
    assert main(["predict", bad, str(test), "--inputs", "x1,x2", "--quiet", "--out", str(out_csv)]) == 2
    err = capsys.readouterr().err
    assert "prediction is not finite" in err and ", line " in err and "var_y0" in err and len(err.strip().splitlines()) == 1
    assert not out_csv.exists()
    # evaluate: the likelihood's log-density of these f is itself not finite (exit 3, the
    # documented status of a likelihood returning NaN/inf), or a metric is (exit 2)
    assert main(["evaluate", bad, str(test), "--targets", "y", "--inputs", "x1,x2"]) in (2, 3)
    out = capsys.readouterr()
    assert out.out == "" and len(out.err.strip().splitlines()) == 1


def test_old_files_and_negative_jitter_floor(saved_file, tmp_path):
    path, _ = saved_file
    old = _edited(path, tmp_path, lambda p: p["config"].pop("jitter_floor"), "old.pt")
    assert not hasattr(load_model(old)[0].model, "jitter_floor")
    bad = _edited(path, tmp_path, lambda p: p["config"].__setitem__("jitter_floor", -1.0))
    with pytest.raises(ModelFileError, match="jitter_floor must be between 0 and 1"):
        load_model(bad)


def test_the_grown_jitter_is_saved_and_restored(tmp_path):
    """Duplicated inducing inputs make K_zz singular: training grows the relative jitter
    (savigp.training.loop.grow_jitter). Saved and loaded, the model factorizes with that jitter:
    predictions are bit-for-bit those of the model in memory (they differ at the base jitter)."""
    from savigp.training.loop import grow_jitter

    X, Y = _data()
    Z = np.repeat(X[:3], 2, axis=0)  # each inducing input twice
    model = savigp.SAVIGP(X, Y, likelihoods.Gaussian(), inducing_inputs=Z)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        grow_jitter(model, step=0)
        assert model.jitter_floor > 1e-8
        path = str(tmp_path / "m.pt")
        savigp.save(model, path)
        loaded = savigp.load(path)
        assert loaded.model.jitter_floor == model.jitter_floor
        ref = model.predict(X[:5], num_samples=20)
        got = loaded.predict(X[:5], num_samples=20)
        assert torch.equal(ref.latent_mean, got.latent_mean) and torch.equal(ref.latent_var, got.latent_var)
        del loaded.model.jitter_floor  # what a file without the field gave: another factorization
        other = loaded.predict(X[:5], num_samples=20)
    assert not torch.equal(ref.latent_var, other.latent_var)


def test_a_kernel_matrix_that_overflows_is_a_model_file_error(saved_file, tmp_path, capsys):
    """Finite, bounded values can still overflow K_zz (inducing inputs +-1e150 apart at the
    smallest length-scale): predict and evaluate exit 2 naming the model file, not 1."""
    path, test = saved_file

    def edit(p):
        p["state_dict"]["inducing"][0, 0, 0], p["state_dict"]["inducing"][0, 1, 0] = 1e150, -1e150
        p["state_dict"]["kernel.lengthscales.raw"].fill_(-50.0)

    bad = _edited(path, tmp_path, edit)
    for cmd in (["predict", bad, str(test), "--inputs", "x1,x2", "--out", "-", "--quiet"],
                ["evaluate", bad, str(test), "--inputs", "x1,x2", "--targets", "y"]):
        assert main(cmd) == 2
        err = capsys.readouterr().err
        assert bad in err and "K_zz" in err and len(err.strip().splitlines()) == 1


def test_a_zip_record_claiming_several_disks_is_not_a_model_file(saved_file, tmp_path):
    """zipfile.is_zipfile raises BadZipFile (not False) for a zip64 locator that claims more than
    one disk: a one-byte edit found by fuzzing; the loader names the file instead."""
    path, _ = saved_file
    raw = bytearray(path.read_bytes())
    i = raw.rfind(b"PK\x06\x07")  # the zip64 end-of-central-directory locator; +16: the number of disks
    raw[i + 16] = 2
    bad = tmp_path / "disks.pt"
    bad.write_bytes(bytes(raw))
    with pytest.raises(ModelFileError, match="not a savigp model file"):
        load_model(str(bad))
