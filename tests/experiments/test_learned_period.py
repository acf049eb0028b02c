"""experiments/learned_period.py, tiny: one seed, 30 steps of each training. The table has a row
with the period read back in years (the expression starts it at 1; 30 steps move it little), both
models scored on the held-out months, and the summary line."""
import csv

import pytest

pytestmark = pytest.mark.experiments


def test_one_seed_of_30_steps_writes_its_row(tmp_path, capsys):
    pytest.importorskip("statsmodels")
    from experiments import learned_period

    assert learned_period.main(["--seeds", "1", "--extra=--iterations 30", "--out", str(tmp_path)]) == 0
    with open(tmp_path / "learned_period.csv") as f:
        (row,) = list(csv.DictReader(f))
    assert abs(float(row["period"]) - 1.0) < 0.05 and int(row["steps"]) == 30
    assert float(row["nlpd_periodic"]) > 0 and float(row["nlpd_rbf"]) > 0
    assert "period within 1 %: " in capsys.readouterr().out
