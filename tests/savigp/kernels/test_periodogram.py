"""A period given in a kernel expression is checked against the targets' periodogram on its column
(savigp.kernels.periodogram, issue 57): a period in other units than the column's (12 for a yearly
season of a column in years) trained silently to no season."""
import warnings

import numpy as np
import pytest

import savigp
from likelihoods import Gaussian
from savigp.kernels import parse_kernel
from savigp.kernels.periodogram import PeriodWarning, period_warnings


def _season(n=400, years=40.0, seed=0):
    """A yearly season over ``years`` years in monthly-ish steps, a trend and noise."""
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(0, years, n))[:, None]
    y = 0.05 * t + np.sin(2 * np.pi * t) + 0.3 * rng.standard_normal(t.shape)
    return t, y


@pytest.mark.parametrize("period, says", [(1.0, None), (1.04, None), (0.5, None), (2.0, None), (12.0, "far from"),
                                          (0.01, "outside"), (100.0, "outside")])
def test_a_given_period_is_checked_against_the_peaks_and_their_harmonics(period, says):
    t, y = _season()
    lines = period_warnings(parse_kernel(f"rbf(0) + periodic(0, period={period}) * rbf(0)", input_dim=1), t, y, ["t"])
    if says is None:
        assert lines == [], lines
    else:
        assert len(lines) == 1 and says in lines[0] and lines[0].startswith("periodic(t)"), lines


def test_a_period_not_given_or_too_few_rows_says_nothing():
    t, y = _season()
    assert period_warnings(parse_kernel("periodic(0) + rbf(0)", input_dim=1), t, y) == []
    assert period_warnings(parse_kernel("periodic(0, period=12)", input_dim=1), t[:6], y[:6]) == []


def test_savigp_warns_of_a_period_in_other_units_and_the_command_line_says_so(tmp_path, capsys):
    from savigp.cli import main
    from savigp.io.csv_data import write_csv

    t, y = _season(200)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        savigp.SAVIGP(t, y, Gaussian(0.3), kernel="periodic(0, period=12)", num_inducing=10)
    assert [w for w in caught if issubclass(w.category, PeriodWarning) and "far from" in str(w.message)]
    write_csv(str(tmp_path / "s.csv"), ["year", "y"], np.column_stack([t[:, 0], y[:, 0]]))
    capsys.readouterr()
    assert main(["train", str(tmp_path / "s.csv"), "--targets", "y", "--kernel", "periodic(year, period=12) + rbf(year)",
                 "--iterations", "2", "--threads", "1", "--out", str(tmp_path / "m.pt")]) == 0
    assert "savigp train: note: --kernel periodic(year): its period starts at 12, far from" in capsys.readouterr().err
