"""The guide docs/custom_likelihood.md runs: its python blocks are executed in order in one
namespace (a library test: it needs no shared data and no experiment script)."""
from __future__ import annotations

import re

from conftest import ROOT  # the repository root


def test_custom_likelihood_guide_runs(capsys):
    text = (ROOT / "docs" / "custom_likelihood.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 4
    ns: dict = {"__name__": "custom_likelihood_guide"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"docs/custom_likelihood.md[block {i}]", "exec"), ns)
    out = capsys.readouterr().out
    assert "reparam" in out and "score" in out
