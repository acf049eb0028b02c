"""experiments/report_screenshots.py: a tiny run trains the sunspots model with the user's negative
binomial through ``savigp train``, writes its report through ``savigp report`` (and its screenshot
where Chromium is installed), and records the commands."""
from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("statsmodels")

from conftest import load_experiment  # noqa: E402

screenshots = load_experiment("report_screenshots")


def test_tiny_run(tmp_path):
    res = screenshots.main(["--quick", "--only", "sunspots", "--samples", "100", "--out", str(tmp_path)])
    (run,) = res["runs"]
    text = (tmp_path / "sunspots_report.html").read_text()
    assert "neg_binomial" in text and "share of zeros" in text and "<td>test</td>" in text
    assert run["commands"][0].startswith("train ") and "--trust-code" in run["commands"][1]
    assert json.loads((tmp_path / "report_screenshots.json").read_text())["runs"][0]["M"] == 20
    assert (run["screenshot"] is not None) == (shutil.which("chromium") is not None)
    if run["screenshot"]:
        assert (tmp_path / "report_sunspots.png").stat().st_size > 20000


def test_tiny_breast_cancer_run_reports_a_part_per_column(tmp_path):
    pytest.importorskip("sklearn")
    res = screenshots.main(["--quick", "--only", "cancer", "--samples", "100", "--out", str(tmp_path)])
    (run,) = res["runs"]
    header = (tmp_path / "cancer_train.csv").read_text().splitlines()[0]
    assert header == "radius,texture,malignant" and len((tmp_path / "cancer_test.csv").read_text().splitlines()) == 190
    text = (tmp_path / "cancer_report.html").read_text()
    assert 'alt="part rbf(radius) against radius"' in text and 'alt="part rbf(texture) against texture"' in text
    assert "Logistic likelihood" in text and "Brier score" in text and "<td>test</td>" in text
    assert "--likelihood logistic" in run["commands"][0] and "--trust-code" not in run["commands"][1]
