"""What a user meets in the first hour (issue 28): the command answers --help and argument errors
without importing torch, numpy or scipy; ``import savigp`` is lazy and its names still resolve."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from conftest import ROOT

ENV = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), "OMP_NUM_THREADS": "1"}
ENV.pop("SAVIGP_DEBUG", None)

HEAVY = ("torch", "numpy", "scipy", "likelihoods")


def test_help_and_argument_errors_import_no_torch():
    """--help of every command and argparse's errors are answered before anything heavy is imported
    (measured: 3-21 s per call before, 0.3-0.4 s after, on the shared 2-core machine)."""
    script = textwrap.dedent(f"""
        import contextlib, io, sys
        from savigp.cli import main
        calls = [["--help"], ["--version"], ["train", "--help"], ["predict", "--help"], ["evaluate", "--help"],
                 ["demo", "--help"], ["train"], ["train", "d.csv", "--targets", "y", "--out", "m.pt",
                 "--estimator", "nope"], ["nope"], []]
        codes = []
        for argv in calls:
            with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()) as err:
                codes.append(main(argv))
            assert out.getvalue() or err.getvalue(), argv
        print(codes)
        print(sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r}))
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=ENV, timeout=120)
    assert r.returncode == 0, r.stderr
    codes, heavy = r.stdout.splitlines()
    assert codes == "[0, 0, 0, 0, 0, 0, 2, 2, 2, 2]"
    assert heavy == "[]", heavy
    # and `python -m savigp --help` (the package's __main__) likewise
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "savigp", "--help"], capture_output=True, text=True,
                       env=ENV, timeout=120)
    assert r.returncode == 0 and "savigp train" in r.stdout
    imported = {line.split("|")[-1].strip().split(".")[0] for line in r.stderr.splitlines() if "|" in line}
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))


def test_every_named_likelihood_is_a_class_of_the_package_with_its_options():
    """The parser's torch-free names (savigp._choices.LIKELIHOODS) build the package's classes, and the
    command line declares the options of each."""
    import likelihoods

    from savigp._choices import LIKELIHOODS
    from savigp.cli.likelihood_options import OPTIONS

    for name in LIKELIHOODS:
        assert LIKELIHOODS[name] is getattr(likelihoods, LIKELIHOODS[name].__name__), name
        assert name in OPTIONS, name


def test_lazy_package_names_resolve():
    """Every public name and subpackage of the lazy package resolves; savigp.warm_start is the function
    (its module is savigp.training.warm_start, so no submodule of the package shadows it)."""
    import importlib

    import savigp

    for name in savigp.__all__:
        assert getattr(savigp, name) is not None, name
    assert set(savigp.__all__) <= set(dir(savigp))
    module = importlib.import_module("savigp.training.warm_start")
    assert callable(savigp.warm_start) and savigp.warm_start is module.warm_start
    assert savigp.kernels.RBF is savigp.RBF
    for package in ("kernels", "mean_heads", "estimators", "training", "linalg", "runtime", "io", "posteriors"):
        assert getattr(savigp, package).__name__ == f"savigp.{package}"
    from savigp import fit  # noqa: F401
    try:
        savigp.no_such_name
    except AttributeError as err:
        assert "no_such_name" in str(err)
    else:
        raise AssertionError("an unknown name must raise AttributeError")


# ---------------------------------------------------------------------------- train's readout and notes
def _write(path, text):
    path.write_text(text)
    return str(path)


def test_train_prints_the_full_data_elbo_the_rising_note_and_the_differentiable_hint(tmp_path, capsys):
    import numpy as np

    from savigp.cli import main
    from savigp.io.csv_data import write_csv

    rng = np.random.default_rng(0)
    X = rng.uniform(0, 6, (60, 1))
    data = str(tmp_path / "d.csv")
    write_csv(data, ["x", "y"], np.column_stack([X, np.sin(X) + 0.3 * rng.standard_normal((60, 1))]))
    lik = _write(tmp_path / "lik.py", "def log_lik(y, f):\n    return -0.5 * (y[:, 0] - f[..., 0]) ** 2 / 0.09\n")
    base = ["train", data, "--targets", "y", "--num-inducing", "5", "--seed", "0"]
    # a truncated fit: still rising, said after the summary; Monte Carlo: the ELBO with its standard error
    assert main(base + ["--iterations", "100", "--lr", "0.01", "--estimator", "reparam", "--samples", "20",
                        "--out", str(tmp_path / "a.pt")]) == 0
    out, err = capsys.readouterr()
    assert "final ELBO " in out and " +- " in out and "(on all 60 rows; +- its Monte Carlo standard error)" in out
    assert "savigp train: note: the ELBO was still rising at the end" in err and "--resume" in err
    assert "(mean of the last 10 steps, sd " in err
    # a torch user function that is differentiable: the hint, once, on stderr (and no Python warning)
    assert main(base + ["--iterations", "3", "--likelihood", f"{lik}:log_lik", "--samples", "5",
                        "--out", str(tmp_path / "b.pt")]) == 0
    out, err = capsys.readouterr()
    assert err.count("is differentiable in f with torch") == 1
    assert "note: --likelihood " in err and "--lik-option differentiable=True" in err
    assert "UserWarning" not in err and "note: the ELBO was still rising" not in err
    # declared differentiable: reparam, nothing to suggest
    assert main(base + ["--iterations", "3", "--likelihood", f"{lik}:log_lik", "--samples", "5",
                        "--lik-option", "differentiable=True", "--out", str(tmp_path / "c.pt")]) == 0
    out, err = capsys.readouterr()
    assert "estimator: reparam" in err and "differentiable in f" not in err


def test_nproc_says_it_starts_the_ranks(tmp_path, monkeypatch, capsys):
    """``train --nproc 2`` says on stderr that it starts two processes, with the backend and the
    threads per rank (the ranks themselves are not started here: Popen is replaced)."""
    import subprocess as sp

    from savigp.cli import build_parser, ranks
    from savigp.cli.plan import TrainPlan

    started = {}

    class FakePopen:  # a rank that ends at once with status 0
        returncode = 0

        def __init__(self, cmd, env):
            started.update(cmd=cmd, env=env)

        def poll(self):
            return 0

    monkeypatch.setattr(sp, "Popen", FakePopen)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    argv = ["train", "d.csv", "--targets", "y", "--out", "m.pt", "--nproc", "2"]
    args = build_parser().parse_args(argv)
    args.argv = argv
    assert ranks.launch_ranks(TrainPlan.from_args(args)) == 0
    err = capsys.readouterr().err
    threads = max(1, (os.cpu_count() or 1) // 2)
    assert err.strip() == (f"savigp train: starting 2 data-parallel processes on this machine (ranks 0-1, "
                           f"gloo backend, {threads} thread(s) per rank); rank 0 reports")
    assert started["env"]["OMP_NUM_THREADS"] == str(threads) and "--nproc" not in started["cmd"]
    args = build_parser().parse_args(argv + ["--threads", "1", "--device", "cuda"])
    args.argv = argv
    assert ranks.launch_ranks(TrainPlan.from_args(args)) == 0
    assert "nccl backend, 1 thread(s) per rank" in capsys.readouterr().err
