"""End-to-end tests of the ``savigp`` command line (savigp/cli/, savigp/io/csv_data.py,
savigp/model_files/).

Subprocess tests run ``python -m savigp.cli`` exactly as a user would; every process pays the torch
import (~2 s), so independent ones are started together (``run_many``) and the heavier functional
checks (exact resume, the NLPD log-Jacobian, every likelihood) call ``main()`` in-process.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from savigp._choices import LIKELIHOODS

from savigp.cli import TEST_SIGINT_ENV, main
from savigp.io.csv_data import DataError, read_csv, resolve_columns, split_columns, write_csv
from savigp.model_files import ModelFileError, SavedModel, build_model, load_model, save_model

from conftest import ROOT  # noqa: E402  (the repository root)
REPO = str(ROOT)
ENV = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", ""), "OMP_NUM_THREADS": "1"}
ENV.pop(TEST_SIGINT_ENV, None)
ENV.pop("SAVIGP_DEBUG", None)


# ---------------------------------------------------------------------------- helpers
def _cmd(args):
    return [sys.executable, "-m", "savigp.cli", *map(str, args)]


def run_cli(*args, env=None, cwd=None, timeout=240):
    return subprocess.run(_cmd(args), capture_output=True, text=True, cwd=cwd, env=env or ENV, timeout=timeout)


def run_many(arg_lists, cwd=None, timeout=240, env=None, envs=None):
    """Start every command at once (the torch imports overlap) and return their results in order;
    ``env`` is used for the commands whose entry in ``envs`` is True (all when ``envs`` is None)."""
    envs = envs or [True] * len(arg_lists)
    procs = [subprocess.Popen(_cmd(a), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                              env=(env or ENV) if use else ENV) for a, use in zip(arg_lists, envs)]
    out = []
    for p, a in zip(procs, arg_lists):
        stdout, stderr = p.communicate(timeout=timeout)
        out.append(subprocess.CompletedProcess(a, p.returncode, stdout, stderr))
    return out


def write(path, text):
    path.write_text(text)
    return str(path)


def regression_csv(path, n=60, seed=0, scale=1.0, shift=0.0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, 2))
    y = scale * (np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.standard_normal(n)) + shift
    write_csv(str(path), ["x1", "x2", "y"], np.column_stack([X, y]))
    return str(path), X, y[:, None]


def classification_csv(path, n=60, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 2))
    lab = (X[:, 0] + X[:, 1] > 0).astype(float)
    write_csv(str(path), ["a", "b", "label"], np.column_stack([X, lab]))
    return str(path)


def load_payload(path):
    return torch.load(str(path), weights_only=True)  # the file must hold tensors and plain values only


def states_equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


FAST = ["--num-inducing", "8", "--samples", "10", "--threads", "1", "--quiet"]


# ---------------------------------------------------------------------------- CSV reading (in-process)
def test_csv_reading_header_columns_and_locations(tmp_path):
    p = write(tmp_path / "a.csv", 'x,"y z",t\n\n1,2,3\n 4 , 5 ,6\n')
    t = read_csv(p)
    assert t.header == ["x", "y z", "t"] and t.values.tolist() == [[1, 2, 3], [4, 5, 6]]
    assert t.lines.tolist() == [3, 4]  # blank line 2 skipped, line numbers kept
    assert resolve_columns("t", t) == [2] and resolve_columns("-1", t) == [2]
    assert resolve_columns("0:2", t) == [0, 1] and resolve_columns("y z,0", t) == [1, 0]
    assert split_columns(t, "x") == ([1, 2], [0])
    assert split_columns(t, "t", "x") == ([0], [2])
    for spec, msg in [("q", "column 'q' does not exist"), ("3", "index 3 does not exist"), ("0,x", "selected twice"),
                      ("2:2", "selects no columns")]:
        with pytest.raises(DataError, match=msg):
            resolve_columns(spec, t)
    with pytest.raises(DataError, match="both an input and a target"):
        split_columns(t, "t", "x,t")
    # no header: forced, and auto-detected for an all-numeric first row
    p2 = write(tmp_path / "b.csv", "1,2\n3,4\n")
    assert read_csv(p2).header is None and read_csv(p2).values.shape == (2, 2)
    assert read_csv(p2, header=True).header == ["1", "2"]
    with pytest.raises(DataError, match=r"b.csv, line 1, column index 0: 'a' is not a number"):
        read_csv(write(tmp_path / "b.csv", "a,b\n1,2\n"), header=False)
    with pytest.raises(DataError, match=r"line 3, column 'b' \(index 1\): empty cell"):
        read_csv(write(tmp_path / "c.csv", "a,b\n1,2\n3,\n"))
    with pytest.raises(DataError, match="has a header but no data rows"):
        read_csv(write(tmp_path / "d.csv", "a,b\n"))
    with pytest.raises(DataError, match="line 2.*'inf' is not a finite number"):
        read_csv(write(tmp_path / "e.csv", "1,2\ninf,3\n"))


def test_atomic_writes_never_leave_a_truncated_file(tmp_path, monkeypatch):
    target = tmp_path / "model.pt"
    target.write_bytes(b"previous model")
    model = build_model(np.linspace(0, 1, 10)[:, None], np.zeros((10, 1)), _lik("Gaussian"), {"num_inducing": 3})
    cfg = _minimal_config()

    def broken_save(obj, fh, *a, **k):
        fh.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        save_model(str(target), model, cfg)
    assert target.read_bytes() == b"previous model"
    assert sorted(os.listdir(tmp_path)) == ["model.pt"]  # the temporary file is removed
    monkeypatch.undo()
    save_model(str(target), model, cfg)
    assert load_payload(target)["config"]["format"] == "savigp-model"
    # CSV output is atomic too
    out = tmp_path / "p.csv"
    write_csv(str(out), ["a"], np.ones((2, 1)))
    assert out.read_text() == "a\n1.0\n1.0\n"


def _lik(name, **kw):
    import likelihoods

    return getattr(likelihoods, name)(**kw)


def _minimal_config(lik=("gaussian", "Gaussian", {}), example=(0.0,), standardize=None):
    return {"model_options": {"kernel": "rbf", "inducing_init": "kmeans", "seed": 0, "dtype": "float64",
                              "prior_mean": None},
            "likelihood": {"name": lik[0], "class": lik[1], "kwargs": lik[2]},
            "standardize": standardize or {"inputs": None, "targets": None}, "example_target": list(example)}


def test_version_1_diag_files_load_as_the_whitened_mixture_they_were(tmp_path):
    """Version-1 files called the whitened diagonal mixture "diag"; in versions 2-3 that name was the
    paper's mixture over u (now "diag-u"), with parameters of the same names and shapes, and the
    whitened one "diag-whitened" (now "diag" again). A version-1 "diag" file must come back as the
    whitened mixture, with the same predictions; an unknown version is refused."""
    from savigp.posteriors import DiagonalMixture

    X = np.linspace(-1, 1, 30)[:, None]
    model = build_model(X, np.sin(3 * X), _lik("Gaussian"), {"num_inducing": 5, "posterior": "diag",
                                                               "num_components": 2})
    with torch.no_grad():
        model.posterior.mean.normal_(generator=torch.Generator().manual_seed(0))
    target = tmp_path / "m.pt"
    save_model(str(target), model, _minimal_config())
    payload = load_payload(target)
    payload.pop("content_sha256", None)  # (edited: as a file written before the content digest)
    payload["config"]["version"] = 1
    payload["config"]["model"]["posterior"] = "diag"
    torch.save(payload, str(target))
    loaded, _ = load_model(str(target))
    assert isinstance(loaded.model.posterior, DiagonalMixture) and loaded.config["model"]["posterior"] == "diag"
    Xt = torch.linspace(-1, 1, 7, dtype=torch.float64)[:, None]
    assert torch.equal(loaded.model.predict(Xt).latent_mean, model.predict(Xt).latent_mean)
    payload["config"]["version"] = 99
    torch.save(payload, str(target))
    with pytest.raises(ModelFileError, match="version 99 is not supported"):
        load_model(str(target))


# ---------------------------------------------------------------------------- round trip (in-process)
@pytest.mark.parametrize("case", ["gaussian-float32", "logistic-diag-mixture", "softmax-mean-head"])
def test_round_trip_predictions_identical(tmp_path, case):
    from savigp import fit

    rng = np.random.default_rng(3)
    X = rng.standard_normal((30, 2))
    if case == "gaussian-float32":
        Y, lik, spec, opts = np.sin(X[:, :1]), _lik("Gaussian"), ("gaussian", "Gaussian", {}), {"dtype": "float32"}
    elif case == "logistic-diag-mixture":
        Y = (X[:, :1] > 0).astype(float)
        lik, spec, opts = _lik("Logistic"), ("logistic", "Logistic", {}), {"posterior": "diag-u", "num_components": 2}
    else:
        Y = (X[:, :1] > 0).astype(float) + (X[:, 1:] > 1)
        lik, spec = _lik("Softmax", num_classes=3), ("softmax", "Softmax", {"num_classes": 3})
        opts = {"mean_basis_size": 6, "learn_prior_mean": True}
    model = build_model(X, Y, lik, {"num_inducing": 5, **opts})
    fit(model, iterations=5, num_samples=5, progress=False, lr=0.05)
    stats = {"inputs": {"mean": [0.1, -0.2], "std": [2.0, 0.5]}, "targets": None}
    saved = SavedModel(model, _minimal_config(spec, Y[0], stats))
    path = str(tmp_path / "m.pt")
    saved.save(path)
    loaded, tstate = load_model(path)
    assert tstate is None and isinstance(loaded.model, type(model))
    Xt = rng.standard_normal((7, 2))
    a, b = model.predict(saved.transform_inputs(Xt), num_samples=50), loaded.model.predict(loaded.transform_inputs(Xt), num_samples=50)
    for field in ("latent_mean", "latent_var", "mean", "variance", "probabilities"):
        u, v = getattr(a, field), getattr(b, field)
        assert (u is None) == (v is None)
        assert u is None or (u.dtype == v.dtype and torch.equal(u, v)), field
    assert torch.equal(model.log_predictive_density(Xt, Y[:7]), loaded.model.log_predictive_density(Xt, Y[:7]))
    assert loaded.model.num_data == 30 and loaded.model.config == model.config


# ---------------------------------------------------------------------------- help
def test_help_shows_examples(capsys):
    r = run_cli("--help")
    assert r.returncode == 0, r.stderr
    assert "examples:" in r.stdout and "savigp train data.csv --targets y" in r.stdout
    for command in ("train", "predict", "evaluate", "report", "demo"):
        assert main([command, "--help"]) == 0
        out = capsys.readouterr().out
        assert "example" in out and f"savigp {command}" in out, command
        if command == "train":
            assert "--checkpoint-every" in out and "--resume" in out
            for name in LIKELIHOODS:
                assert name in out


# ---------------------------------------------------------------------------- train / predict / evaluate
def test_train_predict_evaluate_end_to_end(tmp_path, capsys):
    data, X, Y = regression_csv(tmp_path / "train.csv")
    model = tmp_path / "model.pt"
    r = run_cli("train", data, "--targets", "y", "--out", model, "--iterations", "30", "--lr", "0.05",
                "--standardize-inputs", "--standardize-targets", "--checkpoint-every", "10", "--num-inducing", "8",
                "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert "trained 30 step(s)" in r.stdout and "ELBO" in r.stdout
    assert "elbo=" in r.stderr  # the tqdm bar shows the running ELBO
    assert sorted(os.listdir(tmp_path)) == ["model.pt", "train.csv"]  # the checkpoint is removed at the end
    payload = load_payload(model)
    cfg = payload["config"]
    assert cfg["step"] == 30 and cfg["complete"] and cfg["likelihood"]["name"] == "gaussian"
    assert cfg["columns"]["inputs"] == ["x1", "x2"] and cfg["columns"]["targets"] == ["y"]
    assert np.allclose(cfg["standardize"]["targets"]["mean"], Y.mean(0))
    assert set(payload["training_state"]) == {"optimizer", "generator", "perm", "pos", "schedule"}
    assert [p["kind"] for p in payload["training_state"]["schedule"]["phases"]] == ["main"]  # (30 steps: no annealing)
    assert "train_x" not in payload["state_dict"]  # no training data in the file

    pred, test = tmp_path / "pred.csv", tmp_path / "test.csv"
    write_csv(str(test), ["x2", "x1"], X[:10, ::-1])  # columns found by name, in any order
    r1, r2 = run_many([["predict", model, test, "--out", pred, "--latent"],
                       ["evaluate", model, data, "--targets", "y", "--json"]])
    assert r1.returncode == 0, r1.stderr
    lines = pred.read_text().splitlines()
    assert lines[0] == "mean_y,var_y,latent_mean_0,latent_var_0" and len(lines) == 11
    got = np.loadtxt(pred, delimiter=",", skiprows=1)
    saved, _ = load_model(str(model))
    ref = saved.predict(X[:10])
    assert np.array_equal(got[:, 0], ref["mean"][:, 0]) and np.array_equal(got[:, 1], ref["variance"][:, 0])
    # predictions are in the original units: close to the targets, variances above the noise floor
    assert np.mean((got[:, 0] - Y[:10, 0]) ** 2) < np.var(Y)
    assert r2.returncode == 0, r2.stderr
    metrics = json.loads(r2.stdout)
    assert set(metrics) == {"n", "sse", "nlpd", "mse", "mae", "coverage90"} and metrics["n"] == 60
    assert metrics == saved.evaluate(X, Y)
    capsys.readouterr()
    assert main(["evaluate", str(model), data]) == 0  # --targets defaults to the training target names
    table = capsys.readouterr().out
    assert "SSE" in table and "NLPD" in table and f"{metrics['sse']:.6g}" in table


def test_classification_predict_columns_and_error_rate(tmp_path, capsys):
    data = classification_csv(tmp_path / "c.csv")
    model, pred = str(tmp_path / "c.pt"), str(tmp_path / "p.csv")
    assert main(["train", data, "--targets", "label", "--likelihood", "logistic", "--iterations", "20",
                 "--lr", "0.05", "--out", model, *FAST]) == 0
    assert main(["predict", model, data, "--out", pred, "--quiet"]) == 0
    header = open(pred).readline().strip().split(",")
    assert header == ["prob_0", "prob_1", "predicted_label"]  # no mean of unordered labels
    P = np.loadtxt(pred, delimiter=",", skiprows=1)
    assert np.allclose(P[:, 0] + P[:, 1], 1) and set(P[:, 2]) <= {0.0, 1.0}
    capsys.readouterr()
    assert main(["evaluate", model, data, "--targets", "label", "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert set(m) == {"n", "error_rate", "nlp"} and m["error_rate"] < 0.3 and m["nlp"] > 0


def test_shared_kernel_from_the_command_line(tmp_path, capsys):
    """``--shared-kernel``: one kernel and one set of inducing inputs for the Q = 3 latent functions,
    recorded in the model file, so that predict and evaluate rebuild the same model."""
    rng = np.random.default_rng(2)
    X = rng.standard_normal((90, 2))
    lab = np.argmax(np.column_stack([X[:, 0], X[:, 1], -X[:, 0] - X[:, 1]]), 1).astype(float)
    data = str(tmp_path / "three.csv")
    write_csv(data, ["a", "b", "label"], np.column_stack([X, lab]))
    model = str(tmp_path / "m.pt")
    assert main(["train", data, "--targets", "label", "--likelihood", "softmax", "--num-classes", "3",
                 "--shared-kernel", "--posterior", "diag", "--iterations", "60", "--lr", "0.05", "--out", model,
                 *FAST]) == 0
    loaded = load_model(model)[0].model
    assert loaded.config["shared_kernel"] and loaded.kernel.num_latent == 1 and loaded.inducing.shape[0] == 1
    capsys.readouterr()
    assert main(["evaluate", model, data, "--targets", "label", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["error_rate"] < 0.3
    assert main(["train", data, "--targets", "label", "--likelihood", "softmax", "--num-classes", "3",
                 "--shared-kernel", "--posterior", "diag-u", "--iterations", "5", "--out", model, *FAST]) == 2
    assert "posterior='diag-u'" in capsys.readouterr().err


def test_standardized_targets_nlpd_includes_log_jacobian(tmp_path, capsys):
    """Scaling the targets by c changes NLPD by exactly log c and leaves SSE unchanged."""
    results = {}
    for c in (1.0, 1000.0):
        data, _, _ = regression_csv(tmp_path / f"d{c}.csv", scale=c, shift=5 * c)
        model = str(tmp_path / f"m{c}.pt")
        assert main(["train", data, "--targets", "y", "--standardize-targets", "--iterations", "15", "--lr", "0.05",
                     "--out", model, *FAST]) == 0
        capsys.readouterr()
        assert main(["evaluate", model, data, "--json"]) == 0
        results[c] = json.loads(capsys.readouterr().out)
    assert results[1000.0]["nlpd"] - results[1.0]["nlpd"] == pytest.approx(math.log(1000.0), abs=1e-5)
    assert results[1000.0]["sse"] == pytest.approx(results[1.0]["sse"], rel=1e-6)
    assert results[1000.0]["mse"] == pytest.approx(1e6 * results[1.0]["mse"], rel=1e-6)


# ---------------------------------------------------------------------------- every likelihood
LIKELIHOOD_CASES = {
    "gaussian": ([], 1, None),
    "student-t": (["--df", "5"], 1, None),
    "warped": (["--num-tanh", "2"], 1, None),
    "poisson": ([], 1, "counts"),
    "logistic": ([], 1, "binary"),
    "probit": ([], 1, "binary"),
    "softmax": (["--num-classes", "3"], 1, "classes"),
    "multi-gaussian": ([], 2, None),
    "gprn": (["--num-nodes", "1"], 2, None),
    "seismic": (["--prior-mean", "1,2,4,4", "--lik-option", "noise_std=0.1"], 2, "times"),
}


@pytest.mark.parametrize("name", sorted(set(LIKELIHOODS) | set(LIKELIHOOD_CASES)))
def test_every_builtin_likelihood_trains_and_predicts(tmp_path, name):
    if name not in LIKELIHOODS:
        pytest.skip(f"likelihoods has no module for {name}")
    extra, P, kind = LIKELIHOOD_CASES[name]
    rng = np.random.default_rng(0)
    N = 30
    X = rng.uniform(-1, 1, (N, 1))
    if kind == "counts":
        Y = rng.poisson(3, (N, 1)).astype(float)
    elif kind == "binary":
        Y = (X > 0).astype(float)
    elif kind == "classes":
        Y = np.digitize(X, [-0.3, 0.3]).astype(float)
    elif kind == "times":
        Y = np.column_stack([0.5 + 0.1 * X[:, 0], 1.0 + 0.1 * X[:, 0]])
    else:
        Y = np.column_stack([np.sin(3 * X[:, 0]) + 0.1 * p for p in range(P)])
    names = [f"t{p}" for p in range(P)]
    data = str(tmp_path / "d.csv")
    write_csv(data, ["x", *names], np.column_stack([X, Y]))
    model, pred = str(tmp_path / "m.pt"), str(tmp_path / "p.csv")
    assert main(["train", data, "--targets", ",".join(names), "--likelihood", name, "--iterations", "3",
                 "--lr", "0.01", "--out", model, *FAST, *extra]) == 0
    saved, _ = load_model(model)
    assert type(saved.model.likelihood).__name__ == load_payload(model)["config"]["likelihood"]["class"]
    assert main(["predict", model, data, "--out", pred, "--quiet"]) == 0
    header = open(pred).readline().strip().split(",")
    # unordered classes get class probabilities and a label, no mean of a class index
    wanted = f"predicted_{names[0]}" if kind in ("binary", "classes") else f"mean_{names[0]}"
    assert wanted in header and len(np.loadtxt(pred, delimiter=",", skiprows=1, ndmin=2)) == N
    assert (f"mean_{names[0]}" in header) == (kind not in ("binary", "classes"))


# ---------------------------------------------------------------------------- checkpoints and resume
def test_interrupt_checkpoint_and_exact_resume(tmp_path, capsys):
    data, _, _ = regression_csv(tmp_path / "d.csv", n=50)
    out = tmp_path / "m.pt"
    out.write_bytes(b"an older model that a failed or interrupted run must not touch")
    ckpt = tmp_path / "m.pt.ckpt"
    args = ["train", data, "--targets", "y", "--out", out, "--iterations", "40", "--checkpoint-every", "10",
            "--batch-size", "20", *FAST]
    ref = tmp_path / "ref.pt"
    ref_args = [*args[:4], "--out", ref, *args[6:]]
    # the uninterrupted reference runs alongside (both processes import the same code)
    r, r_ref = run_many([args, ref_args], env={**ENV, TEST_SIGINT_ENV: "25"}, envs=[True, False])
    assert r_ref.returncode == 0, r_ref.stderr
    assert r.returncode == 130, r.stderr
    assert "interrupted at step 25 of 40" in r.stderr and "--resume" in r.stderr
    assert out.read_bytes().startswith(b"an older model")
    mid = load_payload(ckpt)
    assert mid["config"]["step"] == 25 and not mid["config"]["complete"]
    assert load_model(str(ckpt))[0].model.num_data == 50  # a checkpoint is a usable model file

    # resuming with a different option is refused, naming it
    capsys.readouterr()
    assert main([*map(str, args), "--resume", "--lr", "0.5"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--lr" in err and "resume with the same options" in err and len(err.splitlines()) == 1

    r = run_cli(*args, "--resume")
    assert r.returncode == 0, r.stderr
    assert not ckpt.exists()
    final = load_payload(out)
    assert final["config"]["step"] == 40 and final["config"]["complete"]

    # the resumed model is bit-identical to the uninterrupted run
    assert states_equal(final["state_dict"], load_payload(ref)["state_dict"])

    # resuming a finished model to the same total is a no-op; to a larger total continues
    assert main([*map(str, args), "--resume"]) == 0
    assert main([*map(str, args[:7]), "60", *map(str, args[8:]), "--resume"]) == 0
    assert load_payload(out)["config"]["step"] == 60


# ---------------------------------------------------------------------------- user likelihood
def test_user_likelihood_numpy_file(tmp_path, capsys):
    data, X, Y = regression_csv(tmp_path / "d.csv", n=40)
    lik = tmp_path / "my_lik.py"
    lik.write_text(
        "import numpy as np\n\n"
        "def log_lik(y, f):\n"
        "    \"\"\"Gaussian noise with variance 0.25, in numpy; y (B, 1), f (..., B, 1) -> (..., B).\"\"\"\n"
        "    f = np.asarray(f)\n"
        "    return -0.5 * (np.asarray(y)[:, 0] - f[..., 0]) ** 2 / 0.25 - 0.5 * np.log(2 * np.pi * 0.25)\n"
    )
    model = tmp_path / "u.pt"
    r = run_cli("train", data, "--targets", "y", "--likelihood", "my_lik.py:log_lik", "--iterations", "20",
                "--lr", "0.05", "--out", model, *FAST, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    spec = load_payload(model)["config"]["likelihood"]
    assert spec["name"] == "callable" and spec["import_path"] == f"{lik}:log_lik"  # absolute path recorded
    capsys.readouterr()
    assert main(["evaluate", str(model), data, "--json"]) == 2  # the model file alone never runs the function
    assert "never runs code it names" in capsys.readouterr().err
    assert main(["evaluate", str(model), data, "--json", "--likelihood", str(lik)]) == 0
    m = json.loads(capsys.readouterr().out)
    assert set(m) == {"n", "nlpd"} and math.isfinite(m["nlpd"])  # no predictive mean without mean_fn
    assert main(["predict", str(model), data, "--quiet"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0] == "latent_mean_0,latent_var_0" and len(rows) == 41


# ---------------------------------------------------------------------------- bad input
def test_bad_inputs_exit_2_with_one_clear_line(tmp_path, capsys):
    t = tmp_path
    good, _, _ = regression_csv(t / "good.csv", n=12)
    write(t / "empty.csv", "")
    write(t / "ragged.csv", "x1,x2,y\n1,2,3\n4,5\n")
    write(t / "text.csv", "x1,x2,y\n1,2,3\n4,5,6\n7,abc,9\n")
    write(t / "nan.csv", "x1,x2,y\n1,2,3\n4,nan,6\n")
    write(t / "labels.csv", "a,label\n0.1,0\n0.2,1\n0.3,1\n0.4,3\n0.5,0\n")
    write(t / "wrong_shape.py", "def log_lik(y, f):\n    return y[:, 0]\n")
    write(t / "crash.py", "def log_lik(y, f):\n    return f[..., 5]\n")
    write(t / "syntax.py", "def log_lik(y, f) return 0\n")
    write(t / "not_a_model.pt", "x,y\n1,2\n")
    out = t / "existing.pt"
    out.write_bytes(b"keep me")
    train = ["train", "--out", out, "--threads", "1", "--quiet", "--iterations", "2"]
    cases = [
        (train + [t / "missing.csv", "--targets", "y"], ["missing.csv: no such file"]),
        (train + [t / "empty.csv", "--targets", "y"], ["empty.csv", "empty"]),
        (train + [t / "ragged.csv", "--targets", "y"], ["ragged.csv, line 3", "ragged", "2 field(s)"]),
        (train + [t / "text.csv", "--targets", "y"], ["text.csv, line 4, column 'x2' (index 1)", "'abc' is not a number"]),
        (train + [t / "nan.csv", "--targets", "y"], ["nan.csv, line 3, column 'x2'", "not a finite number"]),
        (train + [good, "--targets", "z"], ["--targets", "column 'z' does not exist in", "good.csv"]),
        (train + [good, "--targets", "7"], ["column index 7 does not exist", "3 column(s)"]),
        (train + [t / "labels.csv", "--targets", "label", "--likelihood", "logistic"],
         ["labels.csv, line 5, column 'label'", "Logistic likelihood", "line 5: [3.0]"]),
        (train + [t / "labels.csv", "--targets", "label", "--likelihood", "softmax", "--num-classes", "3"],
         ["labels.csv, line 5, column 'label'", "not class indices in {0, ..., 2}"]),
        (train + [good, "--targets", "y", "--num-inducing", "20"], ["good.csv: has 12 data row(s), fewer than --num-inducing 20"]),
        (train + [good, "--targets", "y", "--likelihood", "nowhere.py:log_lik"], ["no such file", "nowhere.py"]),
        (train + [good, "--targets", "y", "--likelihood", f"{t / 'wrong_shape.py'}:nope"], ["defines no function 'nope'"]),
        (train + [good, "--targets", "y", "--likelihood", "no_such_pkg.mod:fn"], ["cannot import module 'no_such_pkg.mod'"]),
        (train + [good, "--targets", "y", "--likelihood", f"{t / 'syntax.py'}:log_lik"], ["syntax.py failed (line 1)", "SyntaxError"]),
        (train + [good, "--targets", "y", "--likelihood", f"{t / 'wrong_shape.py'}:log_lik"],
         ["returned shape (3,)", "expected (2, 3)"]),
        (train + [good, "--targets", "y", "--likelihood", f"{t / 'crash.py'}:log_lik"], ["failed when called", "IndexError"]),
        (["predict", t / "missing.pt", good], ["missing.pt: no such model file"]),
        (["predict", t / "not_a_model.pt", good], ["not_a_model.pt: not a savigp model file"]),
    ]
    def check(args, needles, code, err):
        err = err.strip()
        assert code == 2, (args, code, err)
        assert len(err.splitlines()) == 1 and "Traceback" not in err, (args, err)
        assert err.startswith("savigp "), err
        for n in needles:
            assert n in err, (args, n, err)

    for args, needles in cases:  # in-process: the same main() that the console script calls
        capsys.readouterr()
        code = main([str(a) for a in args])
        check(args, needles, code, capsys.readouterr().err)
    # end to end, one of each kind (CSV, labels, user function, model file), started together: each
    # train run its own --out (two runs on one --out contend for its lock and one is refused first)
    subset = [cases[i] for i in (3, 7, 14, 17)]
    outs = [t / f"existing{i}.pt" for i in range(len(subset))]
    for o in outs:
        o.write_bytes(b"keep me")
    argv = [[outs[i] if a == out else a for a in c[0]] for i, c in enumerate(subset)]
    for (_, needles), args, r in zip(subset, argv, run_many(argv)):
        check(args, needles, r.returncode, r.stderr)
    assert all(o.read_bytes() == b"keep me" for o in [out, *outs])
    assert sorted(p.name for p in t.iterdir() if p.name.startswith(".")) == []  # no temporary files left


def test_model_whose_user_likelihood_is_gone(tmp_path, capsys):
    data, _, _ = regression_csv(tmp_path / "d.csv", n=20)
    lik = tmp_path / "gone.py"
    lik.write_text("import torch\n\ndef log_lik(y, f):\n    return -0.5 * (y[:, 0] - f[..., 0]) ** 2\n")
    model = str(tmp_path / "g.pt")
    assert main(["train", data, "--targets", "y", "--likelihood", f"{lik}:log_lik", "--iterations", "2",
                 "--out", model, *FAST]) == 0
    moved = tmp_path / "moved.py"
    lik.rename(moved)
    capsys.readouterr()
    assert main(["predict", model, data, "--trust-code"]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot be imported" in err and "gone.py" in err and len(err.splitlines()) == 1
    # latent predictions need no likelihood; --likelihood says where the file is now
    assert main(["predict", model, data]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines()[0] == "latent_mean_0,latent_var_0" and "latent predictions only" in out.err
    assert main(["evaluate", model, data, "--likelihood", str(moved), "--json"]) == 0
    assert math.isfinite(json.loads(capsys.readouterr().out)["nlpd"])


# ---------------------------------------------------------------------------- demo
def test_demo_runs_and_prints_the_papers_metrics(tmp_path):
    """... and both of its fits converge: no "still rising" note (before, the regression's 250 Adam
    steps at lr 0.05 ended 1.08 nats below its optimum, still rising; now 12 L-BFGS steps, 0.011).
    With ``--dir`` it writes exactly the files it checks before writing (``savigp.cli.demo.FILES``)."""
    from savigp.cli.demo import FILES

    r = run_cli("demo", "--quiet", "--dir", tmp_path / "demo")
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(tmp_path / "demo")) == sorted(FILES)
    assert "still rising" not in r.stderr, r.stderr
    for needle in ("SSE", "NLPD", "error rate", "NLP", "savigp train", "savigp evaluate", "demo finished"):
        assert needle in r.stdout, needle
    sse = float(r.stdout.split("SSE")[1].split()[0])
    err = float(r.stdout.split("error rate")[1].split()[0])
    assert sse < 0.3 and err < 0.3
