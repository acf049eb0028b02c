"""``savigp train --warm-start SOURCE.pt --learn GROUPS`` (savigp/cli/warm_start.py): the two-stage
fit of a mixture at a full Gaussian's hyper-parameters, its refusals, and --learn with --resume.

Every run calls ``main()`` in-process (a subprocess would pay the torch import each time); the
problems are 60 points in 1-D with a Gaussian likelihood, whose expected log-likelihood is in
closed form, so the ELBO and its optimum are deterministic.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from savigp.cli import TEST_SIGINT_ENV, main
from savigp.io.csv_data import write_csv
from savigp.model_files import load_model

QUIET = ["--threads", "1", "--quiet"]
N = 60


def _states_equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _train(*args) -> int:
    return main(["train", *map(str, args), *QUIET])


def _err(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "internal error" not in err and "Traceback" not in err, err
    assert err.startswith("savigp train: error: "), err
    return err


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """``d.csv`` (x, y, z: y = sin 2x + noise, z = y + 1) and ``fg.pt``: a dense full Gaussian fitted
    to y by L-BFGS."""
    t = tmp_path_factory.mktemp("warm")
    gen = np.random.default_rng(3)
    X = np.sort(gen.uniform(-3, 3, size=(N, 1)), axis=0)
    Y = np.sin(2 * X) + 0.2 * gen.standard_normal((N, 1))
    write_csv(str(t / "d.csv"), ["x", "y", "z"], np.column_stack([X, Y, Y + 1]))
    fg = t / "fg.pt"
    assert _train(t / "d.csv", "--targets", "y", "--inputs", "x", "--dense", "--optimizer", "lbfgs",
                  "--iterations", "30", "--out", fg) == 0
    return {"dir": t, "data": t / "d.csv", "fg": fg, "X": X, "Y": Y}


def test_two_stage_fit_learns_only_q_and_reaches_the_diagonal_optimum(files):
    """A diagonal mixture (K = 2) warm-started from the full Gaussian with ``--learn posterior`` keeps
    fg's kernel, noise and inducing inputs bit for bit and ends at the diagonal family's closed-form
    optimum at those hyper-parameters for a dense model with Gaussian noise s2 (Bonilla et al. 2019,
    §3: setting eq. (18)'s gradients to zero): every component's mean K (K + s2 I)^-1 y and variances
    1 / [K^-1 + I / s2]_mm (both components coincide there). Tolerances: L-BFGS stops at its
    relative tolerance, 1e-4 from the mean (measured), a direction in which the bound is nearly
    flat, so atol 1e-3; the variances are exact to 2e-7 (measured), so rtol 1e-5."""
    out = files["dir"] / "mog2.pt"
    assert _train(files["data"], "--targets", "y", "--inputs", "x", "--dense", "--posterior", "diag-u",
                  "--components", "2", "--optimizer", "lbfgs", "--iterations", "30", "--warm-start", files["fg"],
                  "--learn", "posterior", "--out", out) == 0
    saved, fg = load_model(str(out))[0], load_model(str(files["fg"]))[0].model
    model = saved.model
    for name in ("kernel", "likelihood"):
        assert _states_equal(getattr(model, name).state_dict(), getattr(fg, name).state_dict()), name
    assert torch.equal(model.inducing, fg.inducing)
    training = saved.config["training"]
    assert training["options"]["learn"] == ["posterior"] and training["warm_start"] == str(files["fg"])
    with torch.no_grad():
        K = fg.kernel(fg.inducing[0], fg.inducing[0])[0]  # (N, N)
        s2 = float(fg.likelihood.variance().reshape(()))
        y = torch.as_tensor(files["Y"][:, 0])
        mean = K @ torch.linalg.solve(K + s2 * torch.eye(N, dtype=K.dtype), y)
        var = 1.0 / (torch.cholesky_inverse(fg.prior_factor()[0]).diagonal() + 1.0 / s2)
        means, factors = model.posterior.u_moments(model.prior_factor())  # (2, 1, N), (2, 1, N, N)
        variances = (factors ** 2).sum(-1)
    assert means.shape == (2, 1, N)
    for k in range(2):
        assert torch.allclose(means[k, 0], mean, rtol=0, atol=1e-3), (k, (means[k, 0] - mean).abs().max())
        assert torch.allclose(variances[k, 0], var, rtol=1e-5, atol=0), k


def test_learn_kernel_leaves_the_posterior_unchanged(files):
    """``--learn kernel``: 5 Adam steps move the kernel and nothing else (against the same seed's
    model after 0 steps)."""
    t, common = files["dir"], [files["data"], "--targets", "y", "--inputs", "x", "--num-inducing", "6",
                               "--samples", "5", "--lr", "0.1"]
    assert _train(*common, "--iterations", "0", "--out", t / "start.pt") == 0
    assert _train(*common, "--iterations", "5", "--learn", "kernel", "--out", t / "kern.pt") == 0
    a, b = load_model(str(t / "start.pt"))[0].model, load_model(str(t / "kern.pt"))[0].model
    for name in ("posterior", "likelihood"):
        assert _states_equal(getattr(a, name).state_dict(), getattr(b, name).state_dict()), name
    assert torch.equal(a.inducing, b.inducing)
    assert not _states_equal(a.kernel.state_dict(), b.kernel.state_dict())


def test_standardized_warm_start_keeps_the_sources_units(files):
    """With --standardize-*, the new model uses the source's recorded statistics (here on the first
    40 rows, whose own statistics differ), so the copied hyper-parameters keep their units."""
    t = files["dir"]
    sub = t / "sub.csv"
    write_csv(str(sub), ["x", "y", "z"], np.column_stack([files["X"], files["Y"], files["Y"] + 1])[:40])
    std = ["--targets", "y", "--inputs", "x", "--num-inducing", "6", "--standardize-inputs", "--standardize-targets"]
    assert _train(files["data"], *std, "--iterations", "3", "--out", t / "src_std.pt") == 0
    assert _train(sub, *std, "--iterations", "0", "--warm-start", t / "src_std.pt", "--out", t / "ws_std.pt") == 0
    src, ws = load_model(str(t / "src_std.pt"))[0], load_model(str(t / "ws_std.pt"))[0]
    assert ws.config["standardize"] == src.config["standardize"]
    assert ws.config["standardize"]["targets"]["mean"] != [float(files["Y"][:40].mean())]
    assert _states_equal(ws.model.kernel.state_dict(), src.model.kernel.state_dict())


def test_refusals_exit_2_naming_both_values(files, capsys):
    t, data, fg = files["dir"], files["data"], files["fg"]
    base = [data, "--targets", "y", "--inputs", "x", "--dense", "--iterations", "2"]
    ws = ["--warm-start", fg, "--out", t / "new.pt"]
    for post, extra in (("k2", ["--posterior", "diag-u", "--components", "2"]), ("joint", ["--posterior", "joint"])):
        assert _train(*base, *extra, "--iterations", "0", "--out", t / f"{post}.pt") == 0
    (t / "not_a_model.pt").write_text("x,y\n1,2\n")
    cases = [
        ([*base, "--warm-start", t / "k2.pt", "--out", t / "new.pt"], ["k2.pt", "K = 1", "K=2"]),
        ([*base, "--warm-start", t / "joint.pt", "--out", t / "new.pt"], ["joint.pt", "the source has posterior='joint'"]),
        ([*base, "--posterior", "joint", *ws], ["fg.pt", "the model has posterior='joint'"]),
        ([*base[:5], "--num-inducing", "5", "--iterations", "2", *ws], ["(1, 60, 1)", "(1, 5, 1)", "(Q, M, D)"]),
        ([*base, "--kernel", "matern32", *ws], ["kernel", "Matern32", "RBF"]),
        ([*base, "--likelihood", "student-t", *ws], ["likelihood is StudentT here but Gaussian in the source"]),
        ([data, "--targets", "y", "--dense", "--iterations", "2", *ws],
         ["input columns are ['x', 'z'] here but ['x'] in the source"]),
        ([data, "--targets", "z", "--inputs", "x", "--dense", *ws],
         ["target columns are ['z'] here but ['y'] in the source"]),
        ([*base, "--standardize-inputs", *ws], ["--standardize-inputs is True here but False in the source"]),
        ([*base, "--standardize-targets", *ws], ["--standardize-targets is True here but False in the source"]),
        ([*base, *ws, "--resume"], ["--warm-start", "with --resume", "already holds the warm-started model"]),
        ([*base, "--warm-start", t / "missing.pt", "--out", t / "new.pt"], ["--warm-start", "missing.pt: no such model file"]),
        ([*base, "--warm-start", t / "not_a_model.pt", "--out", t / "new.pt"], ["not_a_model.pt: not a savigp model file"]),
        ([*base, "--warm-start", fg, "--out", fg], ["--out", "fg.pt"]),
        ([*base, "--learn", "posterior,kernels"], ["--learn", "'kernels'",
                                                   "posterior, kernel, inducing, likelihood, prior_mean, mean_head"]),
        ([*base, "--learn", ","], ["--learn", "at least one"]),
        ([*base, "--learn", "inducing", "--out", t / "new.pt"], ["--learn inducing", "no trainable parameters"]),
    ]
    for args, needles in cases:
        args = [*args, "--out", t / "new.pt"] if "--out" not in args else args
        capsys.readouterr()
        assert _train(*args) == 2, args
        err = _err(capsys)
        for needle in needles:
            assert needle in err, (needle, err)
    assert not (t / "new.pt").exists()
    assert load_model(str(fg))[0].config["complete"]  # the source is untouched


def test_learn_survives_an_interrupt_and_resume(files, capsys, monkeypatch):
    """A warm-started, --learn posterior run with mini-batches interrupted at step 6 resumes (without
    --warm-start) to the uninterrupted run's parameters bit for bit; a different --learn is refused."""
    t = files["dir"]
    args = [files["data"], "--targets", "y", "--inputs", "x", "--dense", "--posterior", "diag-u", "--components", "2",
            "--iterations", "10", "--batch-size", "20", "--lr", "0.05", "--learn", "posterior",
            "--checkpoint-every", "4"]
    assert _train(*args, "--warm-start", files["fg"], "--out", t / "ref.pt") == 0
    monkeypatch.setenv(TEST_SIGINT_ENV, "6")
    assert _train(*args, "--warm-start", files["fg"], "--out", t / "cut.pt") == 130
    assert "with --resume (without --warm-start)" in capsys.readouterr().err
    monkeypatch.delenv(TEST_SIGINT_ENV)
    assert _train(*args[:-4], "--learn", "posterior,kernel", *args[-2:], "--out", t / "cut.pt", "--resume") == 2
    assert "--learn is ['posterior', 'kernel'] here but" in _err(capsys)
    assert _train(*args, "--out", t / "cut.pt", "--resume") == 0
    ref, cut = load_model(str(t / "ref.pt"))[0], load_model(str(t / "cut.pt"))[0]
    assert cut.config["step"] == 10
    assert _states_equal(cut.model.state_dict(), ref.model.state_dict())
    fg = load_model(str(files["fg"]))[0].model
    assert _states_equal(cut.model.kernel.state_dict(), fg.kernel.state_dict())


def test_warm_start_and_learn_on_two_ranks(files):
    """``--nproc 2`` (two ranks, a subprocess): every rank warm-starts from the source and trains only
    q(u); with the closed-form expected log-likelihood the two ranks' summed gradient is the one
    process's, so the parameters agree with a one-process run to rounding (5e-11 measured)."""
    import os
    import subprocess
    import sys

    from conftest import ROOT

    t = files["dir"]
    args = [files["data"], "--targets", "y", "--inputs", "x", "--dense", "--posterior", "diag-u", "--components", "2",
            "--iterations", "10", "--batch-size", "20", "--lr", "0.05", "--learn", "posterior",
            "--warm-start", files["fg"]]
    assert _train(*args, "--out", t / "one.pt") == 0
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), "OMP_NUM_THREADS": "1"}
    env.pop(TEST_SIGINT_ENV, None)
    r = subprocess.run([sys.executable, "-m", "savigp.cli", "train", *map(str, args), "--out", str(t / "two.pt"),
                        "--nproc", "2", *QUIET], capture_output=True, text=True, env=env, timeout=240)
    assert r.returncode == 0, r.stderr
    one, two = load_model(str(t / "one.pt"))[0].model, load_model(str(t / "two.pt"))[0].model
    fg = load_model(str(files["fg"]))[0].model
    assert _states_equal(two.kernel.state_dict(), fg.kernel.state_dict())
    a, b = one.posterior.state_dict(), two.posterior.state_dict()
    for k in a:
        assert torch.allclose(a[k], b[k], rtol=0, atol=1e-8), (k, (a[k] - b[k]).abs().max())


def test_a_user_likelihood_source_runs_only_this_runs_code(files, capsys):
    """A source trained with a user function: the warm start runs the function of this run's own
    --likelihood and copies the learned keyword parameter; once the file changes it is refused
    (exit 2, naming --trust-code) unless --trust-code."""
    t = files["dir"]
    lik = t / "noise.py"
    lik.write_text("import numpy as np\n\n"
                   "def log_lik(y, f, s=0.25):\n"
                   "    f = np.asarray(f)\n"
                   "    return -0.5 * (np.asarray(y)[:, 0] - f[..., 0]) ** 2 / s - 0.5 * np.log(2 * np.pi * s)\n")
    common = [files["data"], "--targets", "y", "--inputs", "x", "--likelihood", f"{lik}:log_lik", "--num-inducing", "4",
              "--samples", "5", "--lik-param", "s=0.25:positive", "--lr", "0.1"]
    assert _train(*common, "--iterations", "3", "--out", t / "user.pt") == 0
    assert _train(*common, "--iterations", "0", "--posterior", "diag-u", "--warm-start", t / "user.pt",
                  "--out", t / "user_ws.pt") == 0
    src = load_model(str(t / "user.pt"), likelihood=str(lik))[0].model.likelihood.state_dict()
    ws = load_model(str(t / "user_ws.pt"), likelihood=str(lik))[0].model.likelihood.state_dict()
    assert _train(*common, "--iterations", "0", "--out", t / "user_0.pt") == 0  # s where training starts
    start = load_model(str(t / "user_0.pt"), likelihood=str(lik))[0].model.likelihood.state_dict()
    assert src and _states_equal(src, ws) and not _states_equal(src, start)
    with open(lik, "a") as f:
        f.write("# changed\n")
    capsys.readouterr()
    assert _train(*common, "--iterations", "0", "--warm-start", t / "user.pt", "--out", t / "user_ws.pt") == 2
    err = _err(capsys)
    assert "--warm-start" in err and "has changed since the model was trained" in err and "--trust-code" in err
    assert _train(*common, "--iterations", "0", "--warm-start", t / "user.pt", "--out", t / "user_ws.pt",
                  "--trust-code") == 0


def test_jointly_learned_diagonal_mixture_on_a_dense_model_warns_in_one_line(files, capsys):
    """``--posterior diag --components 2 --dense --hypers joint`` learning everything (issue 25: NLP 0.175
    against fg's 0.118 on wisconsin, silently): one stderr line, also with --quiet, naming the two-stage
    recipe and no Python warning; none with ``--learn posterior`` (the Python side's cases:
    tests/savigp/training/test_joint_factorized_warning.py)."""
    # (the whitened family: "diag-u" would add its line on narrower intervals, test_cli_two_stage.py)
    base = [files["data"], "--targets", "y", "--inputs", "x", "--dense", "--iterations", "1"]
    assert _train(*base, "--posterior", "diag", "--components", "2", "--hypers", "joint",
                  "--out", files["dir"] / "j.pt") == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("savigp train: warning: "), err
    assert "--warm-start fg.pt --learn posterior" in err[0] and "UserWarning" not in err[0]
    assert _train(*base, "--posterior", "diag", "--components", "2", "--warm-start", files["fg"],
                  "--learn", "posterior", "--out", files["dir"] / "p.pt") == 0
    assert "warning" not in capsys.readouterr().err


def test_entropy_option_reaches_the_model_file(files, capsys):
    """``--entropy`` chooses the mixture's entropy term and the model file records it (``bound``: the
    paper's eq. (18); the default, the pairwise bound, is the model's own, tested in
    tests/savigp/posteriors/test_mixture_entropy.py); an unknown name is a usage error."""
    base = [files["data"], "--targets", "y", "--inputs", "x", "--num-inducing", "5", "--components", "2",
            "--iterations", "1"]
    out = files["dir"] / "ent_bound.pt"
    assert _train(*base, "--entropy", "bound", "--out", out) == 0
    assert load_model(str(out))[0].model.posterior.entropy_estimate == "bound"
    capsys.readouterr()
    assert _train(*base, "--entropy", "jensen", "--out", files["dir"] / "x.pt") == 2
    assert "--entropy" in capsys.readouterr().err


def test_a_warm_start_never_saves_a_model_below_its_start(files, capsys):
    """A fresh Adam's first steps move every parameter by the learning rate, and from a fitted model
    they fall off its optimum (elnino: ELBO -489.7 to -562.5 after 10 steps; issue 57). A warm-started
    run whose steps end more than 2 standard errors below where they began keeps its start, and says
    so; here 5 steps at lr 0.2 from an L-BFGS optimum (closed form: no Monte Carlo error)."""
    from savigp.training.convergence import full_data_elbo

    out = files["dir"] / "kept.pt"
    capsys.readouterr()
    assert main(["train", str(files["data"]), "--targets", "y", "--inputs", "x", "--dense", "--warm-start",
                 str(files["fg"]), "--iterations", "5", "--lr", "0.2", "--threads", "1", "--out", str(out)]) == 0
    assert "kept the warm start from" in capsys.readouterr().err
    source = load_model(str(files["fg"]), X=files["X"], Y=files["Y"])[0].model
    kept = load_model(str(out), X=files["X"], Y=files["Y"])[0].model
    start = full_data_elbo(source, estimator="closed-form")[0]
    assert full_data_elbo(kept, estimator="closed-form")[0] == pytest.approx(start, abs=1e-6 * abs(start))
