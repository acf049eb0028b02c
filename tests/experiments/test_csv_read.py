"""experiments/csv_read.py: its smallest run reads one file with savigp's reader and numpy's, in
child processes, and reports sane figures (speed is measured by the script, never asserted here)."""
from __future__ import annotations

import math

import numpy as np

from experiments import csv_read


def test_the_file_has_the_rows_asked_for_repeating_its_unique_ones(tmp_path):
    path = tmp_path / "t.csv"
    csv_read.write_table(path, 250, 3, unique=100)
    a = np.loadtxt(path, delimiter=",", skiprows=1)
    assert path.read_text().splitlines()[0] == "x0,x1,y" and a.shape == (250, 3)
    assert np.array_equal(a[100:200], a[:100]) and np.array_equal(a[200:], a[:50]) and len(np.unique(a[:100, 0])) == 100


def test_a_small_run_reports_each_reader(tmp_path):
    rows = csv_read.main(["--rows", "300", "--columns", "4", "--repeats", "1", "--no-pandas", "--folder", str(tmp_path),
                          "--out", str(tmp_path / "out")])
    assert [r["reader"] for r in rows] == ["loadtxt", "savigp"]
    for r in rows:
        assert r["rows"] == 300 and r["same"] == "yes" and r["median_s"] > 0 and math.isfinite(r["x_loadtxt"])
    assert rows[0]["x_loadtxt"] == 1.0
    assert (tmp_path / "out" / "csv_read.md").read_text().startswith("| rows |")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # the data file is deleted
