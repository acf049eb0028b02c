"""experiments/converged_defaults.py on its smallest data set (statsmodels' heart, 69 rows): the
fixed run and the run to convergence from the same start, in the table it writes."""
import pytest

pytest.importorskip("statsmodels")
pytestmark = pytest.mark.experiments


def test_heart_fixed_against_converged(tmp_path):
    from experiments import converged_defaults

    assert converged_defaults.main(["--sets", "heart", "--out", str(tmp_path)]) == 0
    rows = (tmp_path / "converged_defaults.csv").read_text().splitlines()
    fixed, converged = rows[1].split(","), rows[2].split(",")
    header = rows[0].split(",")
    at = {name: i for i, name in enumerate(header)}
    assert fixed[at["steps"]] == "500" and converged[at["ended"]] == "converged"
    assert int(converged[at["steps"]]) > 500 and float(converged[at["elbo"]]) > float(fixed[at["elbo"]])
