"""experiments/sunspots.py: the user's negative binomial is the closed-form pmf, and a tiny run writes
its tables and figures with integer, non-negative forecast bands."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

pytest.importorskip("statsmodels")

from conftest import load_experiment  # noqa: E402

sunspots = load_experiment("sunspots")


def test_negative_binomial_is_scipys():
    from scipy.stats import nbinom

    y = np.array([[0.0], [1.0], [7.0], [154.0], [2000.0]])
    f = torch.tensor([[[-3.0], [0.2], [2.0], [4.9], [12.0]], [[1.0], [1.0], [1.0], [1.0], [1.0]]])  # (S = 2, B, 1)
    for r in (0.3, 4.0, 250.0):
        ours = sunspots.neg_binomial(torch.as_tensor(y), f, torch.tensor(r)).numpy()
        mu = np.exp(f[..., 0].numpy())
        np.testing.assert_allclose(ours, nbinom.logpmf(y[:, 0], r, r / (r + mu)), rtol=1e-10, atol=1e-10)
        mean, var = sunspots.nb_moments(f, torch.tensor(r))
        np.testing.assert_allclose(mean.numpy()[..., 0], nbinom.mean(r, r / (r + mu)), rtol=1e-12)
        np.testing.assert_allclose(var.numpy()[..., 0], nbinom.var(r, r / (r + mu)), rtol=1e-10)


def test_split_holds_out_the_last_fifty_years():
    years, counts = sunspots.load_sunspots()
    Xtr, Ytr, Xte, Yte = sunspots.split(years, counts)
    assert (len(Xte), Xte[0, 0], Xte[-1, 0], Xtr[-1, 0]) == (50, 1959.0, 2008.0, 1958.0)
    assert np.all(Ytr == np.round(Ytr)) and Ytr.min() >= 0 and len(Ytr) + len(Yte) == len(years)


def test_tiny_run(tmp_path):
    res = sunspots.main(["--quick", "--num-inducing", "8", "--steps", "20", "--seeds", "3", "--eval-samples", "200",
                         "--out", str(tmp_path)])
    for name in ("sunspots.csv", "sunspots.md", "sunspots_summary.csv", "sunspots_summary.md",
                 "sunspots_forecast.png", "sunspots_nlpd.png", "sunspots_results.json"):
        assert (tmp_path / name).is_file(), name
    assert [(r["kernel"], r["seed"]) for r in res["rows"]] == [("composite", 3), ("rbf", 3)]
    assert all(math.isfinite(r["test_nlpd"]) and r["r"] > 0 for r in res["rows"])
    for kernel, band in res["bands"].items():
        lo, mid, hi = (np.asarray(band[k]) for k in ("low", "median", "high"))
        assert lo.shape == (309,)
        for b in (lo, mid, hi):
            assert np.all(b == np.round(b)) and b.min() >= 0, kernel
        assert np.all(lo <= mid) and np.all(mid <= hi) and np.any(lo < hi)
