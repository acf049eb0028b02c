"""The README stays the short entry point (issue 28): its two set-up commands are the ones CI runs,
and every relative link in it and in docs/*.md reaches a file that exists (the long sections moved
to docs/ pages)."""
from __future__ import annotations

import re

from conftest import ROOT

INSTALL_AND_DEMO = "pip install torch==2.13.0 && pip install -e . && savigp demo"
INSTALL_AND_TEST = 'pip install torch==2.13.0 && pip install -e ".[test]" && python -m pytest -q -n 2 tests'


def test_the_two_set_up_commands_are_the_ones_ci_runs():
    readme = (ROOT / "README.md").read_text()
    assert f"```bash\n{INSTALL_AND_DEMO}\n```" in readme
    assert f"```bash\n{INSTALL_AND_TEST}\n```" in readme
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == INSTALL_AND_TEST


def test_relative_links_in_the_readme_and_the_docs_reach_files():
    pages = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+://", target) or target.startswith("#"):
                continue
            path = target.split("#", 1)[0]
            if not (page.parent / path).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken
