"""Model files as untrusted data (savigp/model_files/): nothing a file
names is imported unless the caller says so; every field is checked before anything is built;
one save/load path for models built in Python and on the command line."""
from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest
import torch

import likelihoods
import savigp
from savigp.cli import main
from savigp.io.csv_data import write_csv
from savigp.model_files import LikelihoodImportError, ModelFileError, load_model

FAST = ["--num-inducing", "6", "--samples", "10", "--threads", "1", "--quiet", "--iterations", "3"]


def _data(n=30, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, 2))
    y = np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.standard_normal(n)
    return X, y[:, None]


def _csv(path, n=30):
    X, Y = _data(n)
    write_csv(str(path), ["x1", "x2", "y"], np.column_stack([X, Y]))
    return str(path)


def _payload(path):
    """A model file's payload to edit: without its content digest (an edited file, as one written before it)."""
    payload = torch.load(str(path), weights_only=True)
    payload.pop("content_sha256", None)
    return payload


PAYLOAD = "import pathlib\npathlib.Path({marker!r}).write_text('ran')\ndef f(y, f):\n    return f[..., 0]\n"


def test_a_crafted_import_path_never_runs(tmp_path, capsys):
    """A downloaded model file edited to name a payload: predict, evaluate and train --resume run
    nothing (the marker file never appears), whichever way the likelihood entry is forged."""
    data = _csv(tmp_path / "d.csv")
    good = str(tmp_path / "good.pt")
    assert main(["train", data, "--targets", "y", "--out", good, "--checkpoint-every", "1", *FAST]) == 0
    marker = tmp_path / "marker"
    payload_py = tmp_path / "payload.py"
    payload_py.write_text(PAYLOAD.format(marker=str(marker)))
    base = _payload(good)
    forged = {
        "callable": {"name": "callable", "class": "CallableLikelihood", "import_path": f"{payload_py}:f", "kwargs": {}},
        "callable-relative": {"name": "callable", "import_path": "payload.py:f", "kwargs": {}},
        "builtin-pointing-at-payload": {**base["config"]["likelihood"], "import_path": f"{payload_py}:f"},
        "class-outside-registry": {"name": "gaussian", "class": "Likelihood", "kwargs": {}},
        "zen": {"name": "callable", "import_path": "this:s", "kwargs": {}},
        "module-class": {"name": "x", "class": "payload", "kwargs": {}},
    }
    cwd = os.getcwd()
    os.chdir(tmp_path)  # a relative import_path would resolve here
    try:
        for name, spec in forged.items():
            bad = tmp_path / f"{name}.pt"
            p = _payload(good)
            p["config"]["likelihood"] = spec
            torch.save(p, str(bad))
            codes = [main(["predict", str(bad), data, "--quiet"]), main(["evaluate", str(bad), data])]
            os.replace(bad, tmp_path / "resume.pt")
            codes.append(main(["train", data, "--targets", "y", "--out", str(tmp_path / "resume.pt"), "--resume", *FAST]))
            out = capsys.readouterr()
            assert not marker.exists(), name
            assert "Beautiful is better than ugly" not in out.out + out.err, name
            # the built-in entry is used as what it says (its import_path is never read; resuming refuses the
            # mismatch with the command line); a user function is
            # not run: latent predictions only, evaluating and resuming fail with exit 2; a class outside the
            # registry is refused
            expected = {"builtin-pointing-at-payload": [0, 0, 2], "class-outside-registry": [2, 2, 2],
                        "module-class": [2, 2, 2]}.get(name, [0, 2, 2])
            assert codes == expected, (name, codes, out.err)
            assert "Traceback" not in out.err and "internal error" not in out.err, (name, out.err)
    finally:
        os.chdir(cwd)
    # the user's explicit consent does run it (so the test above could fail)
    p = _payload(good)
    p["config"]["likelihood"] = forged["callable"]
    torch.save(p, str(tmp_path / "consent.pt"))
    with pytest.raises(ModelFileError, match="Unexpected key"):  # it runs, then its parameters do not fit
        load_model(str(tmp_path / "consent.pt"), trust_code=True)
    assert marker.exists()


def _bad_file(tmp_path, good, edit):
    p = _payload(good)
    edit(p)
    path = tmp_path / "bad.pt"
    torch.save(p, str(path))
    return str(path)


@pytest.mark.parametrize("edit, needle", [
    (lambda p: p["config"]["model"].update(dense=True, num_data=10 ** 9), "num_data is 1000000000 but a dense model"),
    (lambda p: p["config"]["model"].update(num_inducing=-3), "config.model.num_inducing must be between 1"),
    (lambda p: p["config"]["model"].update(num_inducing=5000), "inducing has shape (1, 5000, 2)"),
    (lambda p: p["config"]["model"].update(num_components=10 ** 8), "num_components must be between 1 and 1000"),
    (lambda p: p["config"]["model"].update(input_dim="2"), "config.model.input_dim must be an integer"),
    (lambda p: p["config"]["model"].pop("posterior"), "config.model has no field 'posterior'"),
    (lambda p: p["config"]["model_options"].update(kernel="os.system"), "config.model_options.kernel must be one of"),
    (lambda p: p["config"].update(example_target=[float("inf")]), "config.example_target[0] must be finite"),
    (lambda p: p["config"]["standardize"].update(inputs={"mean": [0.0], "std": [1.0]}), "standardize.inputs has 1 mean"),
    (lambda p: p["config"]["likelihood"]["kwargs"].update(command="rm"), "Gaussian takes no argument 'command'"),
    (lambda p: p["config"]["likelihood"]["kwargs"].update(num_tanh=10 ** 9), "kwargs.num_tanh must be between 0 and 1000"),
    (lambda p: p["config"].update(version=True), "version True is not supported"),
    (lambda p: p.update(training_state={"optimizer": {}, "perm": torch.zeros(3, dtype=torch.long), "pos": 9,
                                        "generator": torch.zeros(2, dtype=torch.uint8)}), "training_state.pos"),
])
def test_every_field_is_checked_before_anything_is_built(tmp_path, capsys, edit, needle):
    data = _csv(tmp_path / "d.csv")
    good = str(tmp_path / "good.pt")
    X, Y = _data()
    model = savigp.SAVIGP(X, Y, likelihoods.Gaussian(), num_inducing=6)
    savigp.save(model, good)
    bad = _bad_file(tmp_path, good, edit)
    with pytest.raises(ModelFileError) as err:
        load_model(bad)
    assert str(err.value).startswith(bad) and needle in str(err.value), str(err.value)
    capsys.readouterr()
    assert main(["predict", bad, data]) == 2
    msg = capsys.readouterr().err.strip()
    assert bad in msg and needle in msg and len(msg.splitlines()) == 1 and "internal error" not in msg


def test_memory_limit_on_building(tmp_path):
    X, Y = _data()
    model = savigp.SAVIGP(X, Y, likelihoods.Gaussian(), num_inducing=20)
    path = str(tmp_path / "m.pt")
    savigp.save(model, path)
    with pytest.raises(ModelFileError, match=r"would need about .* GiB .* more than the limit"):
        load_model(path, max_bytes=10_000)  # 3 Q M^2 doubles alone are 9600 bytes
    assert load_model(path, max_bytes=100_000)[0].model.num_inducing == 20


def test_python_save_and_load_round_trip_builtin(tmp_path):
    X, Y = _data()
    model = savigp.SAVIGP(X, Y, likelihoods.StudentT(df=5.0, learn_df=True), num_inducing=6, posterior="diag-u",
                          num_components=2)
    savigp.fit(model, iterations=3, num_samples=5, progress=False)
    path = str(tmp_path / "m.pt")
    savigp.save(model, path)
    loaded = savigp.load(path)
    assert loaded.config["likelihood"]["kwargs"]["learn_df"] is True
    assert loaded.model.likelihood.df().item() == pytest.approx(model.likelihood.df().item())
    Xt = X[:5]
    a, b = model.predict(Xt, num_samples=30), loaded.predict(Xt, num_samples=30)
    assert np.array_equal(a.latent_mean.numpy(), b["latent_mean"]) and np.array_equal(a.mean.numpy(), b["mean"])


def test_a_multi_output_gaussian_model_round_trips(tmp_path):
    """MultiGaussian's constructor argument num_outputs is recorded (it was not: the file could not
    be written), and the loaded model predicts what the saved one did."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (20, 1))
    Y = np.hstack([np.sin(X), np.cos(X)]) + 0.1 * rng.standard_normal((20, 2))
    model = savigp.SAVIGP(X, Y, likelihoods.MultiGaussian(2, variance=0.05), num_inducing=5, seed=0)
    savigp.fit(model, iterations=3, num_samples=5, progress=False)
    path = str(tmp_path / "m.pt")
    savigp.save(model, path)
    loaded = savigp.load(path)
    assert loaded.config["likelihood"]["kwargs"]["num_outputs"] == 2
    a, b = model.predict(X[:5]), loaded.predict(X[:5])
    assert np.array_equal(a.latent_mean.numpy(), b["latent_mean"]) and np.array_equal(a.mean.numpy(), b["mean"])


def test_python_user_likelihood_consent_hash_and_moved_file(tmp_path, capsys):
    """A user function saved from Python: loading without consent gives latent predictions only;
    ``likelihood=`` / ``trust_code=True`` run it; a changed file is refused unless trusted; the
    command line loads the same file (one path)."""
    src = tmp_path / "userlik.py"
    src.write_text("import torch\n\ndef log_lik(y, f):\n    return -0.5 * (y[:, 0] - f[..., 0]) ** 2 / 0.04\n")
    fn = __import__("savigp.model_files", fromlist=["import_callable"]).import_callable(f"{src}:log_lik")
    X, Y = _data()
    model = savigp.SAVIGP(X, Y, likelihoods.CallableLikelihood(fn), num_inducing=6)
    savigp.fit(model, iterations=3, num_samples=5, progress=False)
    path = str(tmp_path / "u.pt")
    savigp.save(model, path)
    spec = _payload(path)["config"]["likelihood"]
    assert spec["import_path"] == f"{src}:log_lik" and len(spec["sha256"]) == 64 and _payload(path)["config"]["version"] == savigp.model_files.VERSION

    latent = savigp.load(path)
    assert not latent.likelihood_loaded
    ref = model.predict(X[:4], num_samples=20)
    assert np.array_equal(latent.predict(X[:4])["latent_mean"], ref.latent_mean.numpy())
    with pytest.raises(LikelihoodImportError, match="never runs code it names"):
        latent.log_predictive_density(X[:4], Y[:4])
    lpd = model.log_predictive_density(X[:4], Y[:4], num_samples=50).numpy()
    for kw in ({"likelihood": str(src)}, {"likelihood": f"{src}:log_lik"}, {"likelihood": fn}, {"trust_code": True}):
        assert np.array_equal(savigp.load(path, **kw).log_predictive_density(X[:4], Y[:4], num_samples=50), lpd), kw

    # the file moved: the new place is named, and a model saved again records it
    moved = tmp_path / "moved.py"
    src.rename(moved)
    again = savigp.load(path, likelihood=str(moved))
    savigp.save(again.model, str(tmp_path / "again.pt"))
    assert _payload(tmp_path / "again.pt")["config"]["likelihood"]["import_path"] == f"{moved}:log_lik"
    moved.rename(src)

    src.write_text(src.read_text() + "# edited\n")
    with pytest.raises(LikelihoodImportError, match="has changed since the model was trained"):
        savigp.load(path, likelihood=str(src))
    assert savigp.load(path, likelihood=str(src), trust_code=True).likelihood_loaded

    data = _csv(tmp_path / "d.csv")
    capsys.readouterr()
    cols = ["--inputs", "x1,x2", "--targets", "y"]  # a model built in Python has no column names
    assert main(["evaluate", path, data, *cols, "--likelihood", str(src)]) == 2
    assert "has changed since the model was trained" in capsys.readouterr().err
    assert main(["evaluate", path, data, *cols, "--likelihood", str(src), "--trust-code", "--json"]) == 0
    assert np.isfinite(json.loads(capsys.readouterr().out)["nlpd"])


def test_lambdas_and_user_classes_cannot_be_saved_silently(tmp_path):
    X, Y = _data()
    model = savigp.SAVIGP(X, Y, likelihoods.CallableLikelihood(lambda y, f: -(y[:, 0] - f[..., 0]) ** 2), num_inducing=4)
    with pytest.raises(TypeError, match="a lambda, a local function"):
        savigp.save(model, str(tmp_path / "l.pt"))
    assert not (tmp_path / "l.pt").exists()


def test_version_2_files_still_load(tmp_path, capsys):
    data = _csv(tmp_path / "d.csv")
    path = str(tmp_path / "m.pt")
    assert main(["train", data, "--targets", "y", "--out", path, *FAST]) == 0
    p = _payload(path)
    p["config"]["version"] = 2
    torch.save(p, path)
    capsys.readouterr()
    assert main(["evaluate", path, data, "--json"]) == 0
    assert np.isfinite(json.loads(capsys.readouterr().out)["nlpd"])


USER_CODE = """import torch

def log_lik(y, f, s=1.0):
    return -0.5 * (y[:, 0] - f[..., 0]) ** 2 / s ** 2 - torch.log(s * torch.ones(()))

def moments(f, s=1.0):
    return f, s ** 2 * torch.ones_like(f)

def probit(y, f):
    return torch.special.log_ndtr(torch.where(y[:, 0] > 0, 1.0, -1.0) * f[..., 0])
"""


def _user_module(tmp_path):
    src = tmp_path / "usercode.py"
    src.write_text(USER_CODE)
    from savigp.model_files import import_callable

    return src, {name: import_callable(f"{src}:{name}") for name in ("log_lik", "moments", "probit")}


def test_python_user_likelihood_with_options_round_trips(tmp_path):
    """``savigp.save`` writes ``CallableLikelihood.spec()`` (task, classes, params, constraints,
    min_log_prob) and the mean function under code_kwargs; ``savigp.load`` with consent rebuilds
    it, and its predictions equal the original model's (same draws)."""
    src, fns = _user_module(tmp_path)
    X, Y = _data()
    lik = likelihoods.CallableLikelihood(fns["log_lik"], mean_fn=fns["moments"], params={"s": 0.5},
                                         constraints={"s": "positive"}, min_log_prob=-1e4)
    model = savigp.SAVIGP(X, Y, lik, num_inducing=6)
    savigp.fit(model, iterations=5, num_samples=5, progress=False)
    labels = np.where(Y > 0, 3.0, -3.0)
    clf = savigp.SAVIGP(X, labels, likelihoods.CallableLikelihood(fns["probit"], task="classification"), num_inducing=6)
    savigp.fit(clf, iterations=3, num_samples=5, progress=False)
    for m, name in ((model, "reg.pt"), (clf, "clf.pt")):
        savigp.save(m, str(tmp_path / name))
    spec = _payload(tmp_path / "reg.pt")["config"]["likelihood"]
    kw = spec["kwargs"]
    assert kw["params"] == {"s": 0.5} and kw["constraints"] == {"s": "positive"} and kw["min_log_prob"] == -1e4
    assert spec["code_kwargs"]["mean_fn"]["import_path"] == f"{src}:moments" and len(spec["code_kwargs"]["mean_fn"]["sha256"]) == 64
    assert _payload(tmp_path / "clf.pt")["config"]["likelihood"]["kwargs"]["classes"] == [-3.0, 3.0]
    Xt = X[:6]
    ref = model.predict(Xt, num_samples=40, seed=3)
    assert model.likelihood.parameter_values()["s"] != 0.5  # learned: the state dict must carry it
    for consent in ({"likelihood": str(src)}, {"likelihood": fns["log_lik"]}, {"trust_code": True}):
        got = savigp.load(str(tmp_path / "reg.pt"), **consent).predict(Xt, num_samples=40, seed=3)
        for field in ("mean", "variance", "latent_mean", "latent_var"):
            assert torch.equal(getattr(got, field), getattr(ref, field).double()), (consent, field)
    latent = savigp.load(str(tmp_path / "reg.pt"))  # no consent: latent predictions still work
    assert torch.equal(latent.predict(Xt, num_samples=40, seed=3).latent_mean, ref.latent_mean)
    loaded = savigp.load(str(tmp_path / "clf.pt"), likelihood=f"{src}:probit")
    a, b = clf.predict(Xt, num_samples=40, seed=1), loaded.predict(Xt, num_samples=40, seed=1)
    assert loaded.model.likelihood.classes == [-3.0, 3.0] and torch.equal(a.probabilities, b.probabilities)


def test_forged_mean_function_and_user_class_paths_never_run(tmp_path, capsys):
    """A model file edited so that its mean function (code_kwargs, or a mean_import_path among the
    kwargs) or a ``user-class`` likelihood names a payload: consent to the likelihood's own file
    does not run it; only trust_code does (so the test could fail)."""
    src, _ = _user_module(tmp_path)
    data = _csv(tmp_path / "d.csv")
    good = str(tmp_path / "good.pt")
    assert main(["train", data, "--targets", "y", "--likelihood", f"{src}:log_lik", "--mean-function",
                 f"{src}:moments", "--out", good, *FAST]) == 0
    marker = tmp_path / "marker"
    payload_py = tmp_path / "payload.py"
    payload_py.write_text(PAYLOAD.format(marker=str(marker)))
    builtin = str(tmp_path / "builtin.pt")
    assert main(["train", data, "--targets", "y", "--out", builtin, *FAST]) == 0
    base = _payload(good)["config"]["likelihood"]
    ref = {"import_path": f"{payload_py}:f", "sha256": None}
    forged = {
        "mean-in-code-kwargs": ({**base, "code_kwargs": {"mean_fn": ref}}, [2, 2, 2]),
        "mean-in-kwargs": ({**base, "code_kwargs": {}, "kwargs": {**base["kwargs"], "mean_import_path": ref["import_path"]}},
                           [2, 2, 2]),
        "user-class": ({"name": "user-class", "class": "f", "import_path": ref["import_path"], "kwargs": {}}, [0, 2, 2]),
        # a built-in likelihood takes no code: code_kwargs is never read (resuming refuses the
        # --likelihood mismatch)
        "builtin-with-mean": ({**_payload(builtin)["config"]["likelihood"], "code_kwargs": {"mean_fn": ref}}, [0, 0, 2]),
    }
    consent = ["--likelihood", str(src)]
    for name, (spec, expected) in forged.items():
        p = _payload(builtin if name.startswith("builtin") else good)
        p["config"]["likelihood"] = spec
        bad = tmp_path / f"{name}.pt"
        torch.save(p, str(bad))
        user = not name.startswith("builtin")
        codes = [main(["predict", str(bad), data, "--quiet", *(consent if name.startswith("mean") else [])]),
                 main(["evaluate", str(bad), data, *(consent if name.startswith("mean") else [])])]
        os.replace(bad, tmp_path / "resume.pt")
        codes.append(main(["train", data, "--targets", "y", "--out", str(tmp_path / "resume.pt"), "--resume",
                           *(["--likelihood", f"{src}:log_lik", "--mean-function", f"{src}:moments"] if user else []),
                           *FAST]))
        err = capsys.readouterr().err
        assert not marker.exists(), name
        assert codes == expected, (name, codes, err)
        assert "Traceback" not in err and "internal error" not in err, (name, err)
    p = _payload(good)
    p["config"]["likelihood"] = forged["mean-in-code-kwargs"][0]
    torch.save(p, str(tmp_path / "consent.pt"))
    load_model(str(tmp_path / "consent.pt"), trust_code=True)  # the user's trust runs it
    assert marker.exists()


def test_user_function_fields_are_checked(tmp_path, capsys):
    src, _ = _user_module(tmp_path)
    data = _csv(tmp_path / "d.csv")
    good = str(tmp_path / "good.pt")
    assert main(["train", data, "--targets", "y", "--likelihood", f"{src}:log_lik", "--lik-param", "s=0.5:positive",
                 "--out", good, *FAST]) == 0
    edits = [({"task": "regresion"}, "kwargs.task must be one of"), ({"classes": [1.0]}, "kwargs.classes has 1 item"),
             ({"params": {"s": "x"}}, "kwargs.params.s must be a number"),
             ({"params": {"not ok": 1.0}}, "is not of the expected form"),
             ({"constraints": {"s": "negative"}}, "kwargs.constraints.s must be one of"),
             ({"min_log_prob": float("-inf")}, "kwargs.min_log_prob must be finite"),
             ({"backend": "os"}, "kwargs.backend must be one of"),
             ({"mean_import_path": "x.py:f"}, "code is recorded under code_kwargs")]
    for edit, needle in edits:
        bad = _bad_file(tmp_path, good, lambda p: p["config"]["likelihood"]["kwargs"].update(edit))
        capsys.readouterr()
        assert main(["predict", bad, data, "--likelihood", str(src)]) == 2, edit
        err = capsys.readouterr().err
        assert needle in err and "bad.pt" in err, (edit, err)


GOOD_LIK = "def log_lik(y, f):\n    return -0.5 * ((y[:, 0] - f[..., 0]) ** 2)\n"
EVIL_LIK = ("import pathlib\npathlib.Path({marker!r}).write_text('ran')\n"
            "def log_lik(y, f):\n    return -0.5 * ((y[:, 0] - f[..., 0]) ** 2)\n")


def _plant_pyc(src, evil: str) -> None:
    """A ``__pycache__`` entry for ``src`` compiled from ``evil`` (padded to the same size) and
    stamped with ``src``'s size and mtime: Python's own import would run it instead of ``src``."""
    import importlib.util
    import py_compile

    good = src.read_bytes()
    stat = os.stat(src)
    evil = evil + "#" * (len(good) - len(evil.encode())) if len(evil.encode()) < len(good) else evil
    assert len(evil.encode()) == len(good)
    src.write_text(evil)
    os.utime(src, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    py_compile.compile(str(src), cfile=importlib.util.cache_from_source(str(src)), doraise=True)
    src.write_bytes(good)
    os.utime(src, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_the_hash_is_of_the_bytes_that_run(tmp_path, capsys, monkeypatch):
    """One rule for user code (module names and files alike): the bytes are read once, hashed, and
    exactly those run -- a module name is checked too, a planted ``__pycache__`` never runs, a file
    that changes after it was read is recorded as it ran, a file with no recorded SHA-256 or naming
    another function is refused without --trust-code."""
    monkeypatch.chdir(tmp_path)
    data = _csv(tmp_path / "d.csv")
    marker = tmp_path / "marker"
    evil = EVIL_LIK.format(marker=str(marker)) + "def helper(y, f):\n    return f[..., 0] * 0\n"
    (tmp_path / "mylikmod.py").write_text(GOOD_LIK + "def helper(y, f):\n    return f[..., 0] * 0\n" + "#" * 200 + "\n")
    # a module name: its file is found (without running anything) and its SHA-256 recorded
    assert main(["train", data, "--targets", "y", "--likelihood", "mylikmod:log_lik", "--out", "mod.pt", *FAST]) == 0
    ref = _payload("mod.pt")["config"]["likelihood"]
    good = (tmp_path / "mylikmod.py").read_bytes()
    import hashlib

    assert ref["import_path"] == "mylikmod:log_lik" and ref["sha256"] == hashlib.sha256(good).hexdigest()
    # a planted .pyc (Python's import would run it): never read; the .py's bytes run, the prediction is made
    _plant_pyc(tmp_path / "mylikmod.py", evil)
    sys.modules.pop("mylikmod", None)  # as in a fresh process
    assert main(["predict", "mod.pt", data, "--likelihood", "mylikmod:log_lik", "--out", "p.csv", "--quiet"]) == 0
    assert not marker.exists()
    # the module edited: refused like a file
    (tmp_path / "mylikmod.py").write_text(evil)
    os.utime(tmp_path / "mylikmod.py", (1, 1))  # not the planted .pyc's stamp
    sys.modules.pop("mylikmod", None)
    for cmd in (["predict", "mod.pt", data, "--likelihood", "mylikmod:log_lik", "--out", "p.csv"],
                ["evaluate", "mod.pt", data, "--likelihood", "mylikmod"]):
        assert main(cmd) == 2
        assert "has changed since the model was trained" in capsys.readouterr().err
    assert not marker.exists()
    (tmp_path / "mylikmod.py").write_bytes(good)
    # no SHA-256 recorded: `--likelihood FILE` alone does not let the file pick a function to run
    p = _payload("mod.pt")
    p["config"]["likelihood"].update(import_path=f"{tmp_path}/mylikmod.py:helper", sha256=None)
    torch.save(p, "nohash.pt")
    p["config"]["likelihood"].update(sha256=ref["sha256"])
    torch.save(p, "helper.pt")
    assert main(["evaluate", "nohash.pt", data, "--likelihood", "mylikmod.py"]) == 2
    assert "records no SHA-256" in capsys.readouterr().err
    # a function other than the one the file records is refused too
    assert main(["evaluate", "helper.pt", data, "--likelihood", "mylikmod.py:log_lik"]) == 2
    assert "names the function 'log_lik' but" in capsys.readouterr().err
    assert main(["evaluate", "nohash.pt", data, "--likelihood", "mylikmod.py", "--trust-code"]) == 0  # trust runs it
    # a file that rewrites itself once read: the model records the bytes that ran, not those left behind
    selfish = tmp_path / "selfish.py"
    selfish.write_text(GOOD_LIK + f"import pathlib\npathlib.Path({str(selfish)!r}).write_text('x = 1\\n')\n")
    ran = hashlib.sha256(selfish.read_bytes()).hexdigest()
    assert main(["train", data, "--targets", "y", "--likelihood", "selfish.py:log_lik", "--out", "s.pt",
                 "--iterations", "1", *FAST[:-2]]) == 0
    assert _payload("s.pt")["config"]["likelihood"]["sha256"] == ran
    assert main(["evaluate", "s.pt", data, "--likelihood", "selfish.py"]) == 2  # what is left is not what ran
    assert "has changed since the model was trained" in capsys.readouterr().err


def test_a_planted_pycache_never_runs_for_a_file(tmp_path, capsys):
    from savigp.model_files import import_callable

    src = tmp_path / "lik.py"
    src.write_text(GOOD_LIK + "#" * 200 + "\n")
    marker = tmp_path / "marker"
    _plant_pyc(src, EVIL_LIK.format(marker=str(marker)))
    fn = import_callable(f"{src}:log_lik")
    assert not marker.exists() and fn.__code__.co_filename == str(src)


def test_a_likelihood_module_from_another_folder_names_the_file_path_alternative(tmp_path, monkeypatch):
    """Issue 28: a function imported as module ``zip_lik`` from another folder is recorded as
    ``zip_lik:log_lik``; ``trust_code=True`` cannot import it elsewhere, and the error says how to
    name the file instead (which works)."""
    folder = tmp_path / "mylibs"
    folder.mkdir()
    (folder / "zip_lik.py").write_text("def log_lik(y, f):\n    return -0.5 * (y[:, 0] - f[..., 0]) ** 2 / 0.04\n")
    monkeypatch.syspath_prepend(str(folder))
    fn = __import__("zip_lik").log_lik
    X, Y = _data()
    model = savigp.SAVIGP(X, Y, likelihoods.CallableLikelihood(fn), num_inducing=6)
    path = str(tmp_path / "z.pt")
    savigp.save(model, path)
    assert _payload(path)["config"]["likelihood"]["import_path"] == "zip_lik:log_lik"
    monkeypatch.undo()  # a fresh session elsewhere: the folder is not on sys.path
    monkeypatch.delitem(__import__("sys").modules, "zip_lik")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LikelihoodImportError) as err:
        savigp.load(path, trust_code=True)
    message = str(err.value)
    assert "cannot import module 'zip_lik'" in message
    assert "likelihood='path/to/zip_lik.py:log_lik'" in message and "--likelihood path/to/zip_lik.py:log_lik" in message
    assert savigp.load(path, likelihood=str(folder / "zip_lik.py"), trust_code=True).likelihood_loaded


def test_a_sibling_module_the_hash_does_not_cover_is_not_run_without_trust(tmp_path, capsys, monkeypatch):
    """A likelihood file that imports a module from its own folder: training runs it (the user's
    own command); a later predict refuses the unhashed import (an edited sibling would run) unless
    --trust-code; installed packages (numpy) import as usual."""
    lib = tmp_path / "lib"
    lib.mkdir()
    monkeypatch.syspath_prepend(str(lib))  # the sibling is importable, as with PYTHONPATH=lib
    monkeypatch.chdir(tmp_path)
    data = _csv(tmp_path / "d.csv")
    marker = tmp_path / "marker"
    (lib / "sibhelper_x1.py").write_text("def scale():\n    return 1.0\n")
    (lib / "uselik.py").write_text("import numpy as np\nimport sibhelper_x1\n"
                                   "def log_lik(y, f):\n    return -0.5 * sibhelper_x1.scale() * ((y[:, 0] - f[..., 0]) ** 2)\n")
    assert main(["train", data, "--targets", "y", "--likelihood", "lib/uselik.py:log_lik", "--out", "m.pt", *FAST]) == 0
    (lib / "sibhelper_x1.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
                                         "def scale():\n    return 1.0\n")
    _fresh_process(monkeypatch)
    assert main(["predict", "m.pt", data, "--likelihood", "lib/uselik.py", "--out", "p.csv", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "imports sibhelper_x1" in err and "--trust-code" in err and not marker.exists()
    _fresh_process(monkeypatch)
    assert main(["predict", "m.pt", data, "--likelihood", "lib/uselik.py", "--trust-code", "--out", "p.csv",
                 "--quiet"]) == 0
    assert marker.exists()  # with consent the (edited) sibling runs
    _fresh_process(monkeypatch)


def _fresh_process(monkeypatch):
    """Forget the modules the user code loaded in this process, as a new ``savigp`` command would."""
    from savigp.model_files.user_code import USER_MODULE_PREFIX

    for name in [n for n in sys.modules if n.startswith(USER_MODULE_PREFIX) or n == "sibhelper_x1"]:
        monkeypatch.delitem(sys.modules, name)
