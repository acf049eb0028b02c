"""experiments/warm_start_steps.py on the shipped boston split (300 rows), one seed: the warm start's
first 50 steps average within 3 standard errors of the start with the warm-up, in the table it writes."""
import csv

import pytest

from conftest import DATA

pytestmark = pytest.mark.experiments


@pytest.mark.skipif(not DATA.is_dir(), reason=f"shared data not found at {DATA} (boston_housing)")
def test_boston_warm_start_keeps_its_optimum(tmp_path):
    from experiments import warm_start_steps

    assert warm_start_steps.main(["--sets", "boston", "--seeds", "0", "--out", str(tmp_path)]) == 0
    with open(tmp_path / "warm_start_steps.csv") as f:
        (row,) = list(csv.DictReader(f))
    assert row["estimator"] == "reparam" and float(row["se"]) > 0
    assert float(row["z_on"]) >= -3.0
