"""The guide docs/custom_likelihood.md runs: its python blocks are executed in order in one
namespace (a library test: it needs no shared data and no experiment script)."""
from __future__ import annotations

from conftest import run_guide


def test_custom_likelihood_guide_runs(capsys):
    run_guide("custom_likelihood.md", min_blocks=4)
    out = capsys.readouterr().out
    assert "reparam" in out and "score" in out
