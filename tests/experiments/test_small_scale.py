"""Smoke tests of the small-scale suite (experiments/small_scale.py, Bonilla et al. 2019 §9.3) and of the
shared experiment helpers. The suite tests run ``--quick`` (one split, fg, SF 0.2, few iterations)
on three datasets and skip when ../shared/data is absent."""
import csv
import math

import numpy as np
import pytest

from experiments import _common

needs_data = pytest.mark.skipif(not _common.DEFAULT_DATA_DIR.is_dir(),
                                reason=f"shared data not found at {_common.DEFAULT_DATA_DIR}")


def _run_quick(dataset, tmp_path):
    from experiments import small_scale

    out = small_scale.main([dataset, "--quick", "--out", str(tmp_path)])
    folder = tmp_path / dataset
    for name in ("results.csv", "summary.md", "figure.png"):
        assert (folder / name).is_file() and (folder / name).stat().st_size > 0, name
    with open(folder / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(out["rows"]) >= 1
    return [r for r in rows if r["method"] == "savigp"], [r for r in rows if r["method"] != "savigp"]


@needs_data
def test_quick_wisconsin(tmp_path):
    runs, _ = _run_quick("wisconsin", tmp_path)
    (r,) = runs
    assert (r["posterior"], float(r["sf"]), r["estimator_used"]) == ("fg", 0.2, "reparam")
    assert float(r["error_rate"]) < 0.15
    assert 0 < float(r["nlp"]) < 0.5
    assert math.isfinite(float(r["elbo"])) and float(r["train_seconds"]) > 0


@needs_data
def test_quick_boston_with_exact_gp(tmp_path):
    runs, base = _run_quick("boston", tmp_path)
    (r,) = runs
    (gp,) = base
    assert gp["method"] == "exact_gp"
    for row in (r, gp):
        assert 0 < float(row["sse"]) < 0.6  # standardized squared error: 1 = predicting the mean
        assert 1.5 < float(row["nlpd"]) < 4.5  # house prices in $1000s
    assert int(float(r["M"])) == 60 and r["estimator_used"] == "closed-form"


@needs_data
def test_quick_mining_intensity(tmp_path):
    runs, _ = _run_quick("mining", tmp_path)
    (r,) = runs
    assert math.isfinite(float(r["train_nlpd"])) and 0 < float(r["train_nlpd"]) < 1.5
    # the known drop in the disaster rate around 1890
    assert float(r["intensity_before_1890"]) > 1.5 * float(r["intensity_after_1900"]) > 0
    assert float(r["band_width_mean"]) > 0


def test_nested_subsets_are_nested():
    sets = _common.nested_subsets(100, [10, 20, 50], seed=3)
    assert set(sets[10]) <= set(sets[20]) <= set(sets[50])
    assert len(set(sets[50])) == 50


def test_csv_roundtrip_and_summary(tmp_path):
    rows = [{"posterior": "fg", "sf": 0.1, "sse": 0.2}, {"posterior": "fg", "sf": 0.1, "sse": 0.4},
            {"posterior": "mog1", "sf": 0.1, "sse": float("nan")}]
    path = tmp_path / "t.csv"
    _common.write_csv_atomic(path, rows)
    back = _common.read_csv_rows(path)
    assert back[0]["sse"] == 0.2 and math.isnan(back[2]["sse"])
    summ = _common.summarize(back, ["posterior", "sf"], ["sse"])
    assert summ[0]["n"] == 2 and summ[0]["sse_mean"] == pytest.approx(0.3) and summ[0]["sse_std"] == pytest.approx(0.1)
    assert "sse_mean" not in summ[1]
    assert "| fg |" in _common.markdown_table(summ, ["posterior", "sse_mean"])
    assert not list(tmp_path.glob(".*tmp"))  # no temporary file left behind


def test_standardizer_log_scale():
    x = np.array([[1.0, 5.0], [3.0, 5.0]])
    s = _common.Standardizer(x)
    np.testing.assert_allclose(s(x), [[-1, 0], [1, 0]])
    np.testing.assert_allclose(s.inverse(s(x)), x)
    assert s.log_scale == pytest.approx(0.0)  # std 1 for the first column, constant column kept at 1


def test_mixture_quantiles_match_normal():
    from scipy.stats import norm
    from experiments.small_scale import mixture_normal_quantiles

    m, s = np.array([[0.0, 1.0]]), np.array([[1.0, 2.0]])
    q = mixture_normal_quantiles(m, s, np.array([1.0]), [0.025, 0.975])
    np.testing.assert_allclose(q, [norm.ppf(0.025, m[0], s[0]), norm.ppf(0.975, m[0], s[0])], atol=1e-9)
    m2, s2, w = np.array([[0.0], [3.0]]), np.array([[1.0], [0.5]]), np.array([0.3, 0.7])
    (q2,) = mixture_normal_quantiles(m2, s2, w, [0.4])
    assert 0.3 * norm.cdf(q2[0], 0, 1) + 0.7 * norm.cdf(q2[0], 3, 0.5) == pytest.approx(0.4, abs=1e-9)


@needs_data
def test_exact_baseline_retried_at_a_smaller_step_is_not_reported_diverged(tmp_path, monkeypatch):
    """The exact baseline retries L-BFGS with step 0.1 when step 1.0 fails; a retry that succeeds
    must not leave the first failure's note on the row (the summary would list it as diverged)."""
    from experiments import small_scale

    real = small_scale.exact_gp_baseline

    def fails_at_unit_step(*args, lr=1.0, **kwargs):
        if lr == 1.0:
            raise RuntimeError("cholesky failed (simulated)")
        return real(*args, lr=lr, **kwargs)

    monkeypatch.setattr(small_scale, "exact_gp_baseline", fails_at_unit_step)
    _, base = _run_quick("boston", tmp_path)
    (gp,) = base
    assert float(gp["baseline_lr"]) == 0.1 and not gp.get("diverged")
    assert "diverged" not in (tmp_path / "boston" / "summary.md").read_text()


def test_early_stop_default_per_optimizer_waits_for_lbfgs_to_converge():
    """L-BFGS (deterministic ELBO) stops only once converged: a plateau that improves by 1e-6
    relative per window (abalone's mixtures crossed one at the former 1e-4 default) goes on; an
    exactly flat ELBO stops. Adam keeps 1e-4; an explicit --tol wins."""
    from experiments import small_scale

    assert small_scale.parse_args(["boston"]).tol == small_scale.DEFAULT_TOL["lbfgs"] == 1e-9
    assert small_scale.parse_args(["wisconsin"]).tol == small_scale.DEFAULT_TOL["adam"] == 1e-4
    assert small_scale.parse_args(["boston", "--tol", "1e-3"]).tol == 1e-3
    assert small_scale.parse_args(["wisconsin", "--optimizer", "lbfgs"]).tol == 1e-9

    class Terms:
        def __init__(self, v):
            import torch

            self.elbo = torch.tensor(v)

    def stops_at(values, tol):
        stop = small_scale._EarlyStop(window=5, tol=tol)
        for i, v in enumerate(values):
            if stop(i, Terms(v)):
                return i + 1
        return None

    creeping = [-937.0 * (1 - 1e-6 * i) for i in range(40)]  # improves by ~1e-6 relative per step
    assert stops_at(creeping, 1e-4) == 10  # the former default stopped here
    assert stops_at(creeping, small_scale.DEFAULT_TOL["lbfgs"]) is None
    assert stops_at([-674.0] * 40, small_scale.DEFAULT_TOL["lbfgs"]) == 10


def test_closed_form_diagonal_optimum_matches_the_trained_diagonal_family():
    """experiments/diagonal_gap.py's closed form of the best diagonal q(u) (dense, Gaussian
    likelihood, hyper-parameters fixed) gives the test SSE and NLPD that training the diagonal
    family with L-BFGS reaches (a wrong mean or variance formula misses by far more than 1e-4)."""
    import torch

    import savigp
    from likelihoods import Gaussian
    from experiments.diagonal_gap import closed_form_diagonal_nlpd

    g = torch.Generator().manual_seed(3)
    X = torch.rand(40, 1, generator=g, dtype=torch.float64) * 6
    y = torch.sin(X) + 0.3 * torch.randn(40, 1, generator=g, dtype=torch.float64)
    Xs = torch.linspace(0.1, 5.9, 30, dtype=torch.float64)[:, None]
    ys = torch.sin(Xs) + 0.3 * torch.randn(30, 1, generator=g, dtype=torch.float64)
    kernel = savigp.RBF(1, 1, lengthscale=1.0, variance=1.0, learn=False)
    model = savigp.SAVIGP(X, y, Gaussian(variance=0.09, learn_variance=False), kernel, dense=True, posterior="diag-u")
    savigp.fit(model, iterations=30, optimizer="lbfgs", lr=1.0, progress=False, lbfgs_max_iter=10)
    cf = closed_form_diagonal_nlpd(model, y.numpy(), Xs.numpy(), ys.numpy())
    met = savigp.evaluate(model, Xs.numpy(), ys.numpy(), seed=0)
    assert cf["nlpd"] == pytest.approx(met["nlpd"], abs=1e-4) and cf["sse"] == pytest.approx(met["sse"], rel=1e-4)


@needs_data
def test_diagonal_gap_runs_and_freezes_the_hyper_parameters(tmp_path):
    """experiments/diagonal_gap.py end to end on boston split 1 at SF 0.1: the four fits, each
    "@" fit at the other's kernel and noise (copied, not trained), and the CSV written."""
    from experiments import diagonal_gap

    rows = diagonal_gap.main(["boston", "--splits", "1", "--sf", "0.1", "--out", str(tmp_path / "gap.csv")])
    by = {r["case"]: r for r in rows}
    assert set(by) == {"fg", "mog1", "mog1@fg", "fg@mog1"} and (tmp_path / "gap.csv").is_file()
    for frozen, source in (("mog1@fg", "fg"), ("fg@mog1", "mog1")):
        for key in ("signal_variance", "lengthscale_gmean", "noise_variance"):
            assert by[frozen][key] == by[source][key], (frozen, key)
    assert all(0 < r["sse"] < 0.6 and math.isfinite(r["nlpd"]) for r in rows)


def test_lbfgs_stop_is_confirmed_by_a_restart(monkeypatch):
    """A stalled L-BFGS (flat ELBO) is restarted; training ends when a restarted round does not
    improve, or when the budget is spent. Adam (noisy ELBO) is never restarted."""
    import types

    from experiments import small_scale

    rounds = iter([[-1000.0 + 10 * min(i, 12) for i in range(60)],  # improves, then stalls at step 12
                   [-880.0 + 5 * min(i, 20) for i in range(60)],  # a fresh L-BFGS improves again, stalls
                   [-780.0] * 60])  # converged: no progress
    calls = []
    import torch

    def fake_fit(model, iterations, callback, **kw):
        values = next(rounds)
        calls.append(iterations)
        elbo = []
        for i in range(iterations):
            elbo.append(values[i])
            if callback(i, types.SimpleNamespace(elbo=torch.tensor(values[i]))):
                break
        return types.SimpleNamespace(steps=len(elbo), elbo=elbo, estimator="closed-form")

    monkeypatch.setattr(small_scale.savigp, "fit", fake_fit)
    args = small_scale.parse_args(["boston", "--iterations", "100"])
    res = small_scale.train(None, args, "auto", 1, 0)
    assert res["lbfgs_restarts"] == 2 and res["early_stopped"]  # windows of 5: stops at 25, 30, 10 steps
    assert calls == [100, 100 - 25, 100 - 25 - 30] and res["iterations"] == 25 + 30 + 10
    args = small_scale.parse_args(["boston", "--iterations", "40"])  # the budget ends the second round
    rounds = iter([[-1000.0 + 10 * min(i, 12) for i in range(60)], [-880.0 + 5 * i for i in range(60)]])
    res = small_scale.train(None, args, "auto", 1, 0)
    assert res["iterations"] == 40 and res["lbfgs_restarts"] == 1 and not res["early_stopped"]
    args = small_scale.parse_args(["wisconsin"])
    rounds = iter([[-100.0] * 500])
    res = small_scale.train(None, args, "auto", 1, 0)
    assert res["iterations"] == 200 and res["lbfgs_restarts"] == 0 and res["early_stopped"]



def test_mixture_fits_q_and_likelihood_first_with_q_warmup(monkeypatch):
    """With --q-warmup N a mixture (K > 1) under L-BFGS first fits q and the likelihood for N outer
    steps, within the budget; by default, for K = 1, Adam, and runs given their own groups (mining)
    everything is trained from the start."""
    import types

    import torch

    from experiments import small_scale

    calls = []

    def fake_fit(model, iterations, groups=None, callback=None, **kw):
        calls.append((iterations, groups))
        elbo = [-100.0] * iterations
        for i in range(iterations):
            if callback is not None and callback(i, types.SimpleNamespace(elbo=torch.tensor(elbo[i]))):
                return types.SimpleNamespace(steps=i + 1, elbo=elbo[:i + 1], estimator="closed-form")
        return types.SimpleNamespace(steps=iterations, elbo=elbo, estimator="closed-form")

    monkeypatch.setattr(small_scale.savigp, "fit", fake_fit)
    mixture = types.SimpleNamespace(posterior=types.SimpleNamespace(num_components=2))
    single = types.SimpleNamespace(posterior=types.SimpleNamespace(num_components=1))
    args = small_scale.parse_args(["boston", "--iterations", "40", "--q-warmup", "5"])
    res = small_scale.train(mixture, args, "auto", 1, 0)
    assert calls[0] == (5, ["posterior", "likelihood"]) and calls[1] == (35, None) and res["q_warmup_steps"] == 5
    assert res["iterations"] == 5 + 10  # then the flat ELBO stops the joint round after two windows of 5
    for model, argv, groups in ((mixture, ["boston"], None), (single, ["boston", "--q-warmup", "5"], None),
                                (mixture, ["wisconsin", "--q-warmup", "5"], None),
                                (mixture, ["mining", "--q-warmup", "5"], ["posterior"])):
        calls.clear()
        res = small_scale.train(model, small_scale.parse_args(argv + ["--iterations", "40"]), "auto", 1, 0,
                                groups=groups)
        assert calls[0] == (40, groups) and res["q_warmup_steps"] == 0


@needs_data
def test_q_warmup_keeps_creep_mog2_from_a_pure_noise_fit():
    """The cheapest reproduction of creep split 1, SF 1, mog2's pure-noise fit: the first 300 training
    points, dense, the script's defaults (6 s). Learned jointly from the spread initial means, the signal
    variance falls below 1e-3 and the test SSE is that of predicting the mean (about 1); with
    --q-warmup 5 the fit is a real one (SSE 0.150 after 15 outer steps; mog1: 0.133)."""
    import torch

    from experiments import small_scale as ss

    spec = ss.DATASETS["creep"]
    Xtr, Ytr, Xte, Yte = ss.read_split(ss.resolve_data_dir(None) / spec.folder, 1, spec.target_cols)
    xs = ss.Standardizer(Xtr[:300])
    ys = ss.Standardizer(Ytr[:300])

    def fitted(warmup):
        args = ss.parse_args(["creep", "--iterations", "15", "--q-warmup", str(warmup)])
        torch.manual_seed(1007)
        model = ss.build_model(xs(Xtr[:300]), ys(Ytr[:300]), ss.make_likelihood("warped"),
                               ss.make_kernel(spec, xs(Xtr[:300]), 1), "mog2", 1.0, None, False, 1007)
        ss.train(model, args, "auto", spec.num_samples, 1007)
        sse = ss.savigp.evaluate(model, xs(Xte), ys(Yte), seed=1)["sse"]
        return sse, float(model.kernel.variance().detach().max())

    sse, variance = fitted(0)
    assert sse > 0.9 and variance < 1e-3  # the collapse
    sse, variance = fitted(5)
    assert sse < 0.3 and variance > 0.1


def test_mixture_keeps_the_start_with_the_higher_training_elbo(monkeypatch):
    """--mixture-starts: each start is trained; the fit with the higher training ELBO is kept (a
    non-finite ELBO never wins); the row names the winner, both ELBOs and the loser's test metrics;
    'default' alone is today's single fit; unknown starts are refused."""
    import types

    from experiments import small_scale

    elbos = {}
    monkeypatch.setattr(small_scale, "train", lambda model, *a, **k: {"iterations": 3})
    monkeypatch.setattr(small_scale, "final_elbo", lambda model, *a: (elbos[model.start], 0.0))
    monkeypatch.setattr(small_scale.savigp, "warm_start", lambda model, source, seed: setattr(model, "start", "fg"))
    sources = []

    def make_model():
        return types.SimpleNamespace(start="default")

    def fg_source():
        sources.append(1)
        return "fg model"

    args = small_scale.parse_args(["boston"])
    assert args.mixture_starts == ["default", "fg"]
    for default, fg, winner in ((-200.0, -150.0, "fg"), (-120.0, -150.0, "default"),
                                (-120.0, float("-inf"), "default"), (float("-inf"), -150.0, "fg")):
        elbos.update(default=default, fg=fg)
        model, info = small_scale.fit_mixture(make_model, fg_source, args, "auto", 1, 0,
                                              lambda m: {"sse": 0.5 if m.start == "default" else 0.1})
        loser = "fg" if winner == "default" else "default"
        assert model.start == info["start"] == winner
        assert (info["elbo_default_start"], info["elbo_fg_start"]) == (default, fg)
        assert info[f"sse_{loser}_start"] == (0.5 if loser == "default" else 0.1)
        assert f"sse_{winner}_start" not in info
    args = small_scale.parse_args(["boston", "--mixture-starts", "default"])
    assert args.mixture_starts == ["default"]
    with pytest.raises(SystemExit):
        small_scale.parse_args(["boston", "--mixture-starts", "default,prior"])


@needs_data
def test_fg_start_keeps_creep_mog2_from_a_pure_noise_fit():
    """The 300-point creep reproduction (above), with the script's default --mixture-starts: from the
    default start mog2 collapses (SSE about 1.01, ELBO -418), from the fitted fg's optimum it does not
    (SSE 0.126, ELBO -167); the ELBO picks the fg start (measured: 15 outer steps each)."""
    import torch

    from experiments import small_scale as ss

    spec = ss.DATASETS["creep"]
    Xtr, Ytr, Xte, Yte = ss.read_split(ss.resolve_data_dir(None) / spec.folder, 1, spec.target_cols)
    xs, ys = ss.Standardizer(Xtr[:300]), ss.Standardizer(Ytr[:300])
    args = ss.parse_args(["creep", "--iterations", "15"])

    def make(post):
        torch.manual_seed(1007)
        return ss.build_model(xs(Xtr[:300]), ys(Ytr[:300]), ss.make_likelihood("warped"),
                              ss.make_kernel(spec, xs(Xtr[:300]), 1), post, 1.0, None, False, 1007)

    def sse(model):
        return {"sse": ss.savigp.evaluate(model, xs(Xte), ys(Yte), seed=1)["sse"]}

    fg, _ = ss.fit_from(make("fg"), args, "auto", spec.num_samples, 1007)
    model, info = ss.fit_mixture(lambda: make("mog2"), lambda: fg, args, "auto", spec.num_samples, 1007, sse)
    assert info["start"] == "fg" and info["elbo_fg_start"] > info["elbo_default_start"] + 100
    assert info["sse_default_start"] > 0.9 and sse(model)["sse"] < 0.3


def test_mixture_hypers_fg_learns_only_q_and_reaches_the_diagonal_optimum():
    """``--mixture-hypers fg``: a diagonal mixture (mog1, mog2) takes the fitted full Gaussian's kernel,
    noise and inducing inputs, learns only q(u), and for a dense model with a Gaussian likelihood ends
    at the diagonal family's closed-form optimum at those hyper-parameters (Bonilla et al. 2019, §3):
    every component's mean K (K + s2 I)^-1 y and variances s_m = 1 / [K^-1 + I / s2]_mm (mog2's two
    components coincide: eq. (18)'s gradient in S and m is the single Gaussian's there). With "joint"
    the same mixture moves the kernel away from fg's (the family's ELBO prefers other hyper-parameters)."""
    import torch

    import likelihoods as L
    import savigp
    from experiments import small_scale as ss

    gen = np.random.default_rng(3)
    X = np.sort(gen.uniform(-3, 3, size=(40, 1)), axis=0)
    Y = np.sin(2 * X) + 0.2 * gen.standard_normal((40, 1))
    args = ss.parse_args(["boston", "--iterations", "60"])
    assert args.mixture_hypers == ["joint", "fg"]
    seed = 5

    def make(post):
        torch.manual_seed(seed)
        kernel = savigp.RBF(1, 1, lengthscale=1.0, variance=1.0)
        return ss.build_model(X, Y, L.Gaussian(variance=0.1), kernel, post, 1.0, None, False, seed)

    fg = ss.fit_from(make("fg"), args, "auto", 1, seed)[0]
    with torch.no_grad():
        K = fg.kernel(fg.inducing[0], fg.inducing[0])[0]
        s2 = float(fg.likelihood.variance().reshape(()))
        eye = torch.eye(40, dtype=K.dtype)
        y = torch.as_tensor(Y[:, 0])
        mean = K @ torch.linalg.solve(K + s2 * eye, y)
        var = 1.0 / (torch.cholesky_inverse(fg.prior_factor()[0]).diagonal() + 1.0 / s2)
    for post in ("mog1", "mog2"):
        model, info = ss.fit_mixture(lambda post=post: make(post), lambda: fg, args, "auto", 1, seed,
                                     lambda m: {}, hypers="fg")
        for name in ("kernel", "likelihood"):
            ours, theirs = getattr(model, name).state_dict(), getattr(fg, name).state_dict()
            assert all(torch.equal(ours[k], theirs[k]) for k in theirs), f"{post}: {name} was trained"
        with torch.no_grad():
            means, factors = model.posterior.u_moments(model.prior_factor())  # (K, 1, M), (K, 1, M, M)
            variances = (factors ** 2).sum(-1)
        # L-BFGS stops at the script's relative tolerance: mog2's components stay up to 3e-4 apart
        # (measured), a direction in which eq. (18)'s bound is nearly flat; their variances are exact
        for k in range(means.shape[0]):
            assert torch.allclose(means[k, 0], mean, rtol=0, atol=1e-3), (post, k, (means[k, 0] - mean).abs().max())
            assert torch.allclose(variances[k, 0], var, rtol=1e-5, atol=0), (post, k)
    joint = ss.fit_mixture(lambda: make("mog1"), lambda: fg, args, "auto", 1, seed, lambda m: {}, hypers="joint")[0]
    assert abs(float(joint.kernel.lengthscales().mean()) - float(fg.kernel.lengthscales().mean())) > 1e-3


def test_posterior_names_and_mixture_hypers_arguments():
    """The paper's three posteriors by default; the library's other mixture families by name; each
    mixture once per --mixture-hypers, fg first; rows told apart on --resume and in the tables."""
    from experiments import small_scale as ss

    args = ss.parse_args(["boston"])
    assert args.posteriors == ["fg", "mog1", "mog2"]
    assert ss.fit_cases(args) == [("fg", "joint"), ("mog1", "joint"), ("mog1", "fg"), ("mog2", "joint"),
                                  ("mog2", "fg")]
    args = ss.parse_args(["boston", "--posteriors", "wmog2,fmog2,fg", "--mixture-hypers", "fg"])
    assert ss.fit_cases(args) == [("fg", "joint"), ("wmog2", "fg"), ("fmog2", "fg")]
    assert [ss.POSTERIORS[p] for p in ("wmog1", "wmog2", "fmog2")] == [("diag", 1), ("diag", 2), ("full", 2)]
    assert [ss.POSTERIORS[p] for p in ("mog1", "mog2")] == [("diag-u", 1), ("diag-u", 2)]  # the paper's family
    row = {"method": "savigp", "posterior": "mog1", "split": 1, "sf": 0.5}
    assert ss.variant(row) == "mog1" and ss.variant(dict(row, mixture_hypers="fg")) == "mog1@fg"
    assert ss.run_key(row) == ss.run_key(dict(row, mixture_hypers="joint")) != ss.run_key(dict(row, mixture_hypers="fg"))
    for bad in (["--mixture-hypers", "prior"], ["--posteriors", "mog3"]):
        with pytest.raises(SystemExit):
            ss.parse_args(["boston", *bad])


def test_identical_splits_are_named_in_the_summary():
    """Splits whose files hold the same points are reported (their spread is over seeds only)."""
    from experiments import small_scale as ss

    a, b = np.arange(6.0).reshape(3, 2), np.ones((3, 1))
    same, other = ss.split_digest(a, b, a, b), ss.split_digest(a, b + 1, a, b)
    assert same == ss.split_digest(a.copy(), b.copy(), a, b) != other
    rows = [{"split": s, "data_digest": d} for s, d in ((5, same), (6, same), (7, other), (8, same))]
    (line, _) = ss.identical_splits_note(rows)
    assert "splits 5, 6, 8 hold the same" in line and "7" not in line
    assert ss.identical_splits_note(rows[2:3]) == []
