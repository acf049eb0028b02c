"""experiments/kernel_search.py runs end to end, tiny, and writes its record."""
import json

import pytest

pytestmark = pytest.mark.experiments


def test_the_search_experiment_runs_tiny(tmp_path, capsys):
    from experiments import kernel_search

    assert kernel_search.main(["--seeds", "0", "--likelihoods", "gaussian,poisson", "--n", "40", "--num-inducing", "10",
                               "--iterations", "20", "--max-terms", "1", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "kernel_search.json").read_text())
    assert [r["likelihood"] for r in record["runs"]] == ["gaussian", "poisson"]
    assert all(len(r["table"]) == 3 for r in record["runs"])  # rbf, periodic, linear: one base kernel at most
    assert "recovered" in capsys.readouterr().out
