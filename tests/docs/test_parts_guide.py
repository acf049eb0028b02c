"""docs/parts.md's Python example runs as it stands (the parts add up to the latent mean there)."""
import pytest

from conftest import run_guide


def test_the_parts_guide_runs():
    pytest.importorskip("matplotlib")
    ns = run_guide("parts.md", 1)
    assert ns["parts"].names == [["rbf", "periodic * rbf", "linear"]]
    assert ns["fig"].axes
