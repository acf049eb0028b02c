"""Only the hashed bytes run (savigp/model_files/user_code.py): checked user code (a recorded
SHA-256, no trust_code) cannot reach unhashed code from its folder -- a sibling imported inside a
function (after loading), a file run through ``importlib.util.spec_from_file_location`` or
``runpy``, ``exec(open(...).read())`` -- and a model file cannot point a mean function that moves
with the likelihood's consent at another function of the same file. Each unhashed file writes a
marker when it runs: the marker never appears without trust_code, and does with it."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import likelihoods
import savigp
from savigp.model_files import LikelihoodImportError, import_callable, load_model, save_model

HELPER = "import pathlib\npathlib.Path({marker!r}).write_text('ran')\ndef g(y, f):\n    return -0.5 * (y[:, 0] - f[..., 0]) ** 2\n"

LIKELIHOODS = {
    "import-in-function": "def log_lik(y, f):\n    import {mod}\n    return {mod}.g(y, f)\n",
    "importlib-in-function": "def log_lik(y, f):\n    import importlib\n    return importlib.import_module({mod!r}).g(y, f)\n",
    "spec_from_file_location": (
        "import importlib.util\n"
        "def log_lik(y, f):\n"
        "    spec = importlib.util.spec_from_file_location('h', {helper!r})\n"
        "    m = importlib.util.module_from_spec(spec)\n"
        "    spec.loader.exec_module(m)\n"
        "    return m.g(y, f)\n"),
    "runpy": "import runpy\ndef log_lik(y, f):\n    return runpy.run_path({helper!r})['g'](y, f)\n",
    "exec-open": "def log_lik(y, f):\n    ns = {{}}\n    exec(open({helper!r}).read(), ns)\n    return ns['g'](y, f)\n",
    "exec-compile": ("def log_lik(y, f):\n    ns = {{}}\n"
                     "    exec(compile(open({helper!r}).read(), {helper!r}, 'exec'), ns)\n    return ns['g'](y, f)\n"),
}


def _data(n=12):
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (n, 1))
    return X, np.sin(X)


@pytest.mark.parametrize("how", sorted(LIKELIHOODS))
def test_checked_code_never_reaches_unhashed_code(tmp_path, monkeypatch, how):
    mod = f"helper_{how.replace('-', '_')}"
    marker = tmp_path / "marker"
    helper = tmp_path / f"{mod}.py"
    helper.write_text(HELPER.format(marker=str(marker)))
    src = tmp_path / f"lik_{mod}.py"
    src.write_text(LIKELIHOODS[how].format(mod=mod, helper=str(helper)))
    monkeypatch.syspath_prepend(str(tmp_path))  # the sibling is importable, as from the working folder
    X, Y = _data()
    # the model is built from the file without a recorded hash (as train does: nothing to check yet); a
    # prior mean given, so that building it does not call the function (the search for the targets' best
    # constant would import the sibling into this process, where the load below would find it imported)
    model = savigp.SAVIGP(X, Y, likelihoods.CallableLikelihood(import_callable(f"{src}:log_lik")), num_inducing=3,
                          prior_mean=0.0)
    path = str(tmp_path / "m.pt")
    save_model(path, model, {})
    marker.unlink(missing_ok=True)  # (in case building the model ran it: no hash was recorded then)
    saved, _ = load_model(path, likelihood=str(src))  # checked against the recorded SHA-256
    with pytest.raises(ValueError, match="the recorded SHA-256 does not cover"):
        saved.log_predictive_density(X[:4], Y[:4], num_samples=3)
    assert not marker.exists()
    trusted, _ = load_model(path, likelihood=str(src), trust_code=True)  # the user's trust runs it
    assert np.isfinite(trusted.log_predictive_density(X[:4], Y[:4], num_samples=3)).all()
    assert marker.exists()


def test_checked_code_keeps_installed_packages_and_its_own_helpers(tmp_path):
    """What checked code may do at run time: import installed packages inside a function, build a
    namedtuple or a dataclass (which exec generated code), call its own functions."""
    src = tmp_path / "lik_ok.py"
    src.write_text("import collections\n"
                   "def _sq(r):\n    return r * r\n"
                   "def log_lik(y, f):\n"
                   "    import json, fractions, dataclasses\n"
                   "    P = collections.namedtuple('P', 'a b')\n"
                   "    D = dataclasses.make_dataclass('D', ['x'])\n"
                   "    return -0.5 * _sq(y[:, 0] - f[..., 0]) + 0 * P(1, 2).a * D(0).x\n")
    X, Y = _data()
    model = savigp.SAVIGP(X, Y, likelihoods.CallableLikelihood(import_callable(f"{src}:log_lik")), num_inducing=3)
    path = str(tmp_path / "m.pt")
    save_model(path, model, {})
    saved, _ = load_model(path, likelihood=str(src))
    assert np.isfinite(saved.log_predictive_density(X[:4], Y[:4], num_samples=3)).all()


USER = ("import pathlib\n"
        "def log_lik(y, f):\n    return -0.5 * (y[:, 0] - f[..., 0]) ** 2\n"
        "def mean(f):\n    return f\n"
        "def other(f):\n    pathlib.Path({marker!r}).write_text('ran')\n    return f\n")


def test_a_model_file_cannot_pick_another_function_of_a_consented_file(tmp_path):
    marker = tmp_path / "marker"
    src = tmp_path / "usermean.py"
    src.write_text(USER.format(marker=str(marker)))
    X, Y = _data()
    lik = likelihoods.CallableLikelihood(import_callable(f"{src}:log_lik"), mean_fn=import_callable(f"{src}:mean"))
    model = savigp.SAVIGP(X, Y, lik, num_inducing=3)
    good = str(tmp_path / "good.pt")
    save_model(good, model, {})
    payload = torch.load(good, weights_only=True)
    ref = payload["config"]["likelihood"]["code_kwargs"]["mean_fn"]
    assert ref["import_path"] == f"{src}:mean" and len(ref["function_sha256"]) == 64
    for consent in ({"likelihood": str(src)}, {"likelihood": f"{src}:log_lik"}):
        saved, _ = load_model(good, **consent)  # the recorded mean function moves with the consent
        assert saved.predict(X[:3], num_samples=3).mean is not None
    # the same file hash, the mean function pointed at another function of the file
    forged = {k: v for k, v in payload.items() if k != "content_sha256"}  # (a forger recomputes it anyway)
    forged["config"]["likelihood"]["code_kwargs"]["mean_fn"] = {**ref, "import_path": f"{src}:other"}
    torch.save(forged, str(tmp_path / "forged.pt"))
    for consent in ({"likelihood": str(src)}, {"likelihood": f"{src}:log_lik"}):
        with pytest.raises(LikelihoodImportError, match="was not trained with the function 'other'"):
            load_model(str(tmp_path / "forged.pt"), **consent)
    # without the binding (a file written before it, or one with it taken out): named, or trusted
    old = {k: v for k, v in ref.items() if k != "function_sha256"}
    forged["config"]["likelihood"]["code_kwargs"]["mean_fn"] = {**old, "import_path": f"{src}:other"}
    torch.save(forged, str(tmp_path / "unbound.pt"))
    with pytest.raises(LikelihoodImportError, match="records no binding of the function 'other'"):
        load_model(str(tmp_path / "unbound.pt"), likelihood=str(src))
    assert not marker.exists()
    forged["config"]["likelihood"]["code_kwargs"]["mean_fn"] = old
    torch.save(forged, str(tmp_path / "older.pt"))
    saved, _ = load_model(str(tmp_path / "older.pt"), likelihood=str(src), code={"mean_fn": f"{src}:mean"})
    assert saved.predict(X[:3], num_samples=3).mean is not None
