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


def test_the_help_lists_the_registered_builtins():
    """The parser's torch-free list of built-in likelihood names is the registry's."""
    from likelihoods import registry

    from savigp._choices import BUILTIN_LIKELIHOODS

    builtins = [n for n, c in registry._CLASSES.items() if c.__module__.startswith("likelihoods.") and not c.cli_user_code]
    assert tuple(builtins) == BUILTIN_LIKELIHOODS


def test_lazy_package_names_resolve():
    """Every public name and submodule of the lazy package resolves; savigp.warm_start stays the function
    once the submodule of that name is imported."""
    import importlib

    import savigp

    for name in savigp.__all__:
        assert getattr(savigp, name) is not None, name
    assert set(savigp.__all__) <= set(dir(savigp))
    importlib.import_module("savigp.warm_start")
    assert callable(savigp.warm_start) and savigp.warm_start.__module__ == "savigp.warm_start"
    assert savigp.kernels.RBF is savigp.RBF
    from savigp import fit, warm_start  # noqa: F401
    assert callable(warm_start)
    try:
        savigp.no_such_name
    except AttributeError as err:
        assert "no_such_name" in str(err)
    else:
        raise AssertionError("an unknown name must raise AttributeError")
