"""The API reference (docs/conf.py, docs/index.rst, docs/api/) builds from the docstrings with
Sphinx, warnings as errors: a docstring that breaks the markup fails here, and so does a guide
(docs/*.md, read by MyST) whose link points at no page or section. Skipped only where Sphinx is not
installed (it and myst-parser are in the ``test`` extra)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT

pytest.importorskip("sphinx")


def test_the_api_reference_builds_without_warnings(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1")
    out = tmp_path / "html"
    run = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(ROOT / "docs"),
                          str(out)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-4000:]
    pages = {name: (out / "api" / f"{name}.html").read_text() for name in ("savigp", "likelihoods", "testing")}
    for name, anchor in (("savigp", "savigp.SAVIGP.predict"), ("savigp", "savigp.fit"), ("savigp", "savigp.load"),
                         ("likelihoods", "likelihoods.CallableLikelihood"), ("likelihoods", "likelihoods.Likelihood.sample"),
                         ("testing", "savigp.testing.check_likelihood")):
        assert f'id="{anchor}"' in pages[name], f"{anchor} is missing from docs/api/{name}"
    # the guides are part of the site (MyST reads the Markdown), linked from the index
    index = (out / "index.html").read_text()
    for guide, heading in (("cli", "Threads"), ("custom_likelihood", "check_likelihood")):
        page = out / f"{guide}.html"
        assert page.exists() and heading in page.read_text(), f"docs/{guide}.md is missing from the site"
        assert f'href="{guide}.html"' in index, f"the index does not link docs/{guide}.md"
