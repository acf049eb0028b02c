"""Mauna Loa CO2 with a composite kernel: sparse savigp against an exact GP of the same kernel (issue 42).

Data: ``statsmodels.datasets.co2`` (weekly means in ppm at Mauna Loa, March 1958 - December 2001,
shipped with statsmodels, read offline); the weeks without a value are dropped. Time is in decimal
years; the weeks up to the end of 1990 train, the later ones test (an 11-year forecast). The
targets are standardized with the training mean and standard deviation, as an exact GP is fitted;
RMSE and NLPD are reported in ppm for every method alike (NLPD on the original scale: the
standardized one plus log(std)).

The kernel (the structure of scikit-learn's CO2 example, ``plot_gpr_co2.py``; its noise is a
short RBF plus white noise), with a Gaussian likelihood for the white noise:

    k = s1 RBF(l1)                          long-term trend
      + s2 Periodic(p, lp) x RBF(l2)        seasonal cycle whose shape drifts
      + s3 RQ(l3, alpha)                    medium-term irregularities
      + s4 RBF(l4)                          correlated noise (``--noise white``: left out)
      + sigma^2 [x = x']                    noise (savigp: the Gaussian likelihood; sklearn: WhiteKernel)

started for every method where scikit-learn's example starts (its values in ppm divided by the
training variance of y): s1 = 50^2, l1 = 50, s2 = 2^2, l2 = 100, p = 1, lp = 1, s3 = 0.5^2, l3 = 1,
alpha = 1, s4 = 0.1^2, l4 = 0.1, sigma^2 = 0.1^2. Without the short RBF the exact evidence is
highest where the rational quadratic turns into that noise (alpha -> 0, a length-scale of days),
which M = 200 inducing inputs cannot follow (docs/experiments.md, "Mauna Loa CO2"). The period is held at one year (as the example does; ``--learn-period``
learns it in every method).

Rows of the results table:

* ``exact-gp``: scikit-learn's ``GaussianProcessRegressor`` with that kernel, hyper-parameters by
  L-BFGS-B on the exact log marginal likelihood (wide bounds, 1e-8 to 1e8, so that none binds like
  savigp's floors). It costs O(N^3) per evaluation and takes minutes: its result is cached in
  ``co2_exact.json`` in the output folder and reused when the data and settings match
  (``--refit-exact`` fits again).
* ``savigp``: sparse savigp with M inducing inputs (k-means of the training times, held fixed unless
  ``--learn-inducing``), a full Gaussian q(u), the closed-form Gaussian expected log-likelihood,
  trained by :func:`savigp.fit_orthnat` (a natural-gradient step of size 1 on q(u), which for a
  Gaussian likelihood is the optimal q(u) at the current hyper-parameters, Salimbeni et al. 2018,
  and Adam on the kernel and noise hyper-parameters): its hyper-parameters are its own.
* ``savigp@exact``: the same sparse model (its inducing inputs) at the exact GP's hyper-parameters
  (fixed), q(u) optimal (one natural step): the cost of the M inducing points alone; and so for the
  larger M of ``--sweep-inducing`` (k-means inducing inputs).
* ``savigp-dense@exact``: savigp with the inducing inputs at every training input (``dense=True``,
  M = N) at the exact GP's hyper-parameters: the same model as the exact GP, so its ELBO is the
  exact log marginal likelihood and its predictions the exact GP's (a check of the kernel mapping).
* ``exact-gp@savigp``: the exact GP at savigp's learned hyper-parameters (no optimisation): how much
  of a gap comes from the hyper-parameters the sparse bound chose.
* ``savigp-lbfgs``: the same sparse model trained as :func:`savigp.search_kernels` trains its
  candidates and run on to the ELBO's optimum (L-BFGS, :func:`train_to_optimum`); with ``--search``,
  ``savigp-search`` is the search's chosen structure trained on the same way from its fitted values.
* ``savigp-rbf``: savigp with one RBF kernel (length-scale from the data) trained as ``savigp``.

``objective_per_point`` is the exact log marginal likelihood (exact GP) or the ELBO (savigp) divided
by N, on the standardized targets.

    python -m experiments.co2 --quick                  # every 16th week, M = 15: seconds
    python -m experiments.co2                          # weekly, M = 200 (the exact GP: minutes, cached)

Outputs in ``--out`` (default ``results/co2``): ``co2.csv`` / ``co2.md`` (the table), ``co2.png``
(data, forecasts and 95% bands), ``co2_results.json`` (rows, hyper-parameters, settings) and the
cached ``co2_exact.json``. Needs ``.[experiments]`` (statsmodels, scikit-learn, matplotlib).
"""
from __future__ import annotations

import math
import time

import numpy as np

from experiments import _common as common
from experiments._common import Standardizer, gaussian_nlpd, parse_ints
INITIAL = {"long_var": 50.0 ** 2, "long_ls": 50.0, "seas_var": 2.0 ** 2, "seas_decay": 100.0, "seas_ls": 1.0,
           "period": 1.0, "rq_var": 0.5 ** 2, "rq_ls": 1.0, "rq_alpha": 1.0, "short_var": 0.1 ** 2, "short_ls": 0.1,
           "noise": 0.1 ** 2}
#: the hyper-parameters that are variances (divided by the training variance of y)
VARIANCES = ("long_var", "seas_var", "rq_var", "short_var", "noise")
#: the hyper-parameters of the short RBF (absent with ``--noise white``)
SHORT = ("short_var", "short_ls")
#: the split: training weeks before this decimal year
TEST_FROM = 1991.0
METHODS = ("exact-gp", "savigp", "savigp@exact", "savigp-dense@exact", "exact-gp@savigp", "savigp-lbfgs", "savigp-rbf")


# ---------------------------------------------------------------------------------- data
def load_co2():
    """The weekly series as (decimal years ``(n,)``, ppm ``(n,)``), missing weeks dropped, and the
    number dropped."""
    from statsmodels.datasets import co2

    frame = co2.load_pandas().data
    missing = int(frame["co2"].isna().sum())
    frame = frame.dropna()
    idx = frame.index
    days = np.where(idx.is_leap_year, 366.0, 365.0)
    years = idx.year.to_numpy(dtype=float) + (idx.day_of_year.to_numpy(dtype=float) - 1.0) / days
    return years, frame["co2"].to_numpy(dtype=float), missing


def split(t: np.ndarray, y: np.ndarray, every: int = 1):
    """Training weeks before :data:`TEST_FROM`, test weeks after; ``every``: keep every k-th week."""
    keep = np.arange(len(t)) % every == 0
    t, y = t[keep], y[keep]
    train = t < TEST_FROM
    return t[train, None], y[train], t[~train, None], y[~train]


# ---------------------------------------------------------------------------------- hyper-parameters
def standardized(h: dict, y_var: float) -> dict:
    """Hyper-parameters in ppm -> in standardized units (variances divided by ``y_var``)."""
    return {k: (v / y_var if k in VARIANCES else v) for k, v in h.items()}


def without_short(h: dict) -> dict:
    """``h`` without the short RBF's hyper-parameters (the kernel of ``--noise white``)."""
    return {k: v for k, v in h.items() if k not in SHORT}


def kernel_expression(h: dict) -> str:
    """The savigp kernel expression of the composite kernel at hyper-parameters ``h`` (with the short
    RBF when ``h`` has its values)."""
    h = {k: float(v) for k, v in h.items()}
    return (f"rbf(lengthscale={h['long_ls']!r}, variance={h['long_var']!r})"
            f" + periodic(period={h['period']!r}, lengthscale={h['seas_ls']!r}, variance={h['seas_var']!r})"
            f" * rbf(lengthscale={h['seas_decay']!r}, variance=1.0)"
            f" + rq(lengthscale={h['rq_ls']!r}, alpha={h['rq_alpha']!r}, variance={h['rq_var']!r})"
            + (f" + rbf(lengthscale={h['short_ls']!r}, variance={h['short_var']!r})" if "short_ls" in h else ""))


def _parts(kernel):
    """(long RBF, Periodic, seasonal RBF, RQ, short RBF or None) of the composite savigp kernel."""
    long, seasonal, rq, *short = kernel.parts
    periodic, decay = seasonal.parts
    return long, periodic, decay, rq, (short[0] if short else None)


def _value(p) -> float:
    return float(p().detach().reshape(-1)[0])


def savigp_hypers(model) -> dict:
    """The composite kernel's and the noise's values of a savigp model (standardized units)."""
    long, periodic, decay, rq, short = _parts(model.kernel)
    h = {"long_var": _value(long.variance), "long_ls": _value(long.lengthscales),
         "seas_var": _value(periodic.variance) * _value(decay.variance), "seas_decay": _value(decay.lengthscales),
         "seas_ls": _value(periodic.lengthscales), "period": _value(periodic.period), "rq_var": _value(rq.variance),
         "rq_ls": _value(rq.lengthscales), "rq_alpha": _value(rq.alpha)}
    if short is not None:
        h.update(short_var=_value(short.variance), short_ls=_value(short.lengthscales))
    return {**h, "noise": _value(model.likelihood.variance)}


def hold_period(kernel) -> None:
    """Hold the period of every Periodic part of ``kernel`` fixed (its length-scale and variance stay
    learned), as scikit-learn's ``periodicity_bounds="fixed"``."""
    from likelihoods.parameters import PositiveParameter
    from savigp.kernels import Periodic

    for part in kernel.modules():
        if isinstance(part, Periodic):
            part.period = PositiveParameter(part.period().detach().clone(), floor=part.period.floor, learnable=False)


def sklearn_kernel(h: dict, learn_period: bool):
    """scikit-learn's kernel of the same structure at ``h`` (standardized units). Its ExpSineSquared,
    RBF and RationalQuadratic are savigp's Periodic, RBF and RationalQuadratic; the bounds are wide
    (1e-8 to 1e8) so that they act as savigp's floors do, not as constraints."""
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, ExpSineSquared, RationalQuadratic, WhiteKernel

    b = (1e-8, 1e8)
    k = (ConstantKernel(h["long_var"], b) * RBF(h["long_ls"], b)
         + ConstantKernel(h["seas_var"], b) * RBF(h["seas_decay"], b)
         * ExpSineSquared(h["seas_ls"], h["period"], b, b if learn_period else "fixed")
         + ConstantKernel(h["rq_var"], b) * RationalQuadratic(h["rq_ls"], h["rq_alpha"], b, b))
    if "short_ls" in h:
        k = k + ConstantKernel(h["short_var"], b) * RBF(h["short_ls"], b)
    return k + WhiteKernel(h["noise"], b)


def sklearn_hypers(kernel) -> dict:
    """:func:`sklearn_kernel`'s values back as a dict."""
    from sklearn.gaussian_process.kernels import RationalQuadratic

    parts, white = kernel.k1, kernel.k2
    short = None
    if not isinstance(parts.k2.k2, RationalQuadratic):  # ... + s4 RBF(l4): the short RBF is the last part
        parts, short = parts.k1, parts.k2
    (long, seasonal), rq = (parts.k1.k1, parts.k1.k2), parts.k2
    h = {"long_var": long.k1.constant_value, "long_ls": long.k2.length_scale,
         "seas_var": seasonal.k1.k1.constant_value, "seas_decay": seasonal.k1.k2.length_scale,
         "seas_ls": seasonal.k2.length_scale, "period": seasonal.k2.periodicity,
         "rq_var": rq.k1.constant_value, "rq_ls": rq.k2.length_scale, "rq_alpha": rq.k2.alpha}
    if short is not None:
        h.update(short_var=short.k1.constant_value, short_ls=short.k2.length_scale)
    return {**h, "noise": white.noise_level}


# ---------------------------------------------------------------------------------- the exact GP
def exact_gp(X, y, h: dict, learn_period: bool, max_iter: int = 0):
    """scikit-learn's exact GP on ``X (N, 1)``, standardized ``y (N,)``, started at (or, with
    ``max_iter=0``, held at) ``h``. Returns the fitted regressor, its hyper-parameters, the log
    marginal likelihood, the seconds and the number of evaluations of it."""
    from scipy.optimize import minimize
    from sklearn.gaussian_process import GaussianProcessRegressor

    evaluations = [0]

    def lbfgs(objective, theta0, bounds):
        def f(theta):
            evaluations[0] += 1
            return objective(theta, eval_gradient=True)

        res = minimize(f, theta0, method="L-BFGS-B", jac=True, bounds=bounds, options={"maxiter": max_iter})
        return res.x, res.fun

    gp = GaussianProcessRegressor(sklearn_kernel(h, learn_period), optimizer=lbfgs if max_iter else None)
    t0 = time.perf_counter()
    gp.fit(X, y)
    seconds = time.perf_counter() - t0
    return gp, sklearn_hypers(gp.kernel_), float(gp.log_marginal_likelihood_value_), seconds, evaluations[0]


def cached_exact(path, key: dict, X, y, h0: dict, args) -> dict:
    """The exact GP's fit from ``path`` when its ``key`` matches, else fitted (and written)."""
    import json

    if path.is_file() and not args.refit_exact:
        saved = json.loads(path.read_text())
        if saved.get("key") == key:
            saved["cached"] = True
            return saved
    print(f"[co2] fitting the exact GP (N = {len(y)}, at most {args.exact_max_iter} L-BFGS-B iterations; "
          "cached afterwards) ...", flush=True)
    _, h, lml, seconds, evaluations = exact_gp(X, y, h0, args.learn_period, args.exact_max_iter)
    record = {"key": key, "hypers": h, "log_marginal_likelihood": lml, "seconds": seconds, "evaluations": evaluations}
    common.write_json_atomic(path, record)
    record["cached"] = False
    return record


# ---------------------------------------------------------------------------------- savigp
def savigp_model(X, Y, kernel, noise: float, *, num_inducing=None, inducing_inputs=None, dense=False,
                 learn_inducing=False, learn_period=False, seed=0):
    """A savigp model with a Gaussian likelihood (initial variance ``noise``) and ``kernel`` (an
    expression), its inducing inputs k-means of X (``num_inducing``), ``inducing_inputs`` or X itself
    (``dense``); the period held unless ``learn_period``."""
    import savigp
    from likelihoods import Gaussian

    model = savigp.SAVIGP(X, Y, Gaussian(variance=noise), kernel=kernel,
                          num_inducing=None if (dense or inducing_inputs is not None) else num_inducing,
                          inducing_inputs=inducing_inputs, dense=dense, learn_inducing=learn_inducing and not dense,
                          seed=seed)
    if not learn_period:
        hold_period(model.kernel)
    return model


def train(model, steps: int, lr: float, learn_inducing: bool, seed: int) -> dict:
    """:func:`savigp.fit_orthnat`: natural steps of size 1 on q(u), Adam (``lr``) on the kernel, the
    noise (and the inducing inputs). Returns seconds and the final full-data ELBO."""
    import savigp

    groups = ("kernel", "likelihood") + (("inducing",) if learn_inducing else ())
    t0 = time.perf_counter()
    savigp.fit_orthnat(model, steps, natgrad_step=1.0, hyper_lr=lr, hyper_groups=groups, estimator="closed-form",
                       seed=seed)
    seconds = time.perf_counter() - t0
    return {"train_seconds": seconds, "elbo": optimal_elbo(model)}


def train_to_optimum(model, seed: int, rounds: int = 40, tol: float = 1e-4) -> dict:
    """The hand-built kernel trained as :func:`savigp.search_kernels` trains its candidates, run on to
    the ELBO's optimum (:func:`savigp.selection.settle.to_optimum`): L-BFGS on q(u) alone (3 steps),
    then rounds of 10 L-BFGS steps (strong Wolfe, the closed-form ELBO: deterministic) on everything
    learned until a round gains under ``tol`` nats per training point (at most ``rounds``). A round
    whose line search steps where the kernel matrix is not positive definite is undone and ends the
    training. Returns seconds, the final full-data ELBO and the rounds run."""
    import torch

    from savigp.selection.settle import to_optimum

    def elbo() -> float:
        with torch.no_grad():
            return float(model.elbo(estimator="closed-form").elbo)

    t0 = time.perf_counter()
    options = {"estimator": "closed-form", "seed": seed, "progress": False}
    done, last = to_optimum(model, options, elbo, rounds=rounds, steps=10, tol=tol)
    return {"train_seconds": time.perf_counter() - t0, "elbo": last, "rounds": done}


def optimal_elbo(model) -> float:
    """One natural step of size 1 (q(u) optimal at the current hyper-parameters), then the full-data
    closed-form ELBO."""
    import savigp
    import torch

    savigp.fit_orthnat(model, 1, natgrad_step=1.0, hyper_lr=0.0, estimator="closed-form")
    with torch.no_grad():
        return float(model.elbo(estimator="closed-form").elbo)


def predictive(model, X):
    """Mean and variance of y ``(n,)`` (standardized) of a savigp model (exact for the Gaussian)."""
    pred = model.predict(X)
    return pred.mean[:, 0].numpy(), pred.variance[:, 0].numpy()


def metrics(y, mean, var, scale: Standardizer) -> dict:
    """RMSE, NLPD (both in ppm) and the share of ``y`` in the central 95% interval, from
    standardized predictions; the same function for every method."""
    s = float(scale.std[0])
    z = np.abs(y - mean) / np.sqrt(var)
    return {"test_rmse": float(np.sqrt(np.mean((y - mean) ** 2))) * s,
            "test_nlpd": gaussian_nlpd(y, mean, var) + math.log(s),
            "coverage95": float(np.mean(z <= 1.959963984540054))}


def add_search(add, Xtr, ytr_s, Xte, h0: dict, args, hypers: dict) -> None:
    """:func:`savigp.search_kernels` on the training weeks (Gaussian likelihood, M = ``args.num_inducing``,
    the time budget ``args.search`` seconds), its chosen structure trained on from the search's fitted
    values as the hand-built kernel is in row "savigp-lbfgs" (:func:`train_to_optimum`: both at their
    ELBO's optimum, neither stopped early) and evaluated on the test weeks (row "savigp-search")."""
    import savigp
    from likelihoods import Gaussian

    t0 = time.perf_counter()
    found = savigp.search_kernels(Xtr, ytr_s[:, None], Gaussian(variance=h0["noise"]),
                                  base=("rbf", "periodic", "rq", "linear"), columns=["year"], max_terms=4,
                                  time_budget=args.search, num_inducing=args.num_inducing, seed=args.seed,
                                  progress=True)
    search_seconds = time.perf_counter() - t0
    print(found, flush=True)
    model = found.model
    fitted = train_to_optimum(model, args.seed, rounds=args.lbfgs_rounds)
    hypers["savigp-search"] = {"expression": found.expression}
    add("savigp-search", *predictive(model, Xte), M=args.num_inducing, hypers_from="own",
        train_seconds=search_seconds + fitted["train_seconds"], objective_per_point=fitted["elbo"] / len(ytr_s),
        note=f"chose {found.expression} ({len(found.table)} candidates, {search_seconds:.0f} s"
             f"{'' if found.complete else ', budget spent'}); then L-BFGS to the optimum as savigp-lbfgs "
             f"({fitted['rounds']} rounds)")


# ---------------------------------------------------------------------------------- script
def parse(argv=None):
    p = common.script_parser(__doc__, "co2", quick_help="every 16th week, M = 15, 40 steps, the exact GP <= 30 iterations (seconds)")
    common.add_cli_options(p, "--num-inducing", "--lr", defaults={"--num-inducing": None, "--lr": 0.1},
                           default_help={"--num-inducing": "200; 15 quick", "--lr": "0.1, Adam's for the hyper-parameters"})
    p.add_argument("--steps", type=int, default=None, help="training steps of each savigp model (default 500; 40 quick)")
    p.add_argument("--every", type=int, default=None, help="keep every k-th week (default 1; 16 quick)")
    p.add_argument("--sweep-inducing", default=None,
                   help="more M (comma-separated) for savigp at the exact GP's hyper-parameters (default 400,800; none quick)")
    p.add_argument("--learn-inducing", action="store_true", help="learn the inducing inputs too (Adam, lr)")
    p.add_argument("--noise", choices=("rbf+white", "white"), default="rbf+white",
                   help="the noise part of the kernel: scikit-learn's example's short RBF plus white noise (default), "
                        "or white noise alone")
    p.add_argument("--learn-period", action="store_true", help="learn the period in every method (default: 1 year)")
    p.add_argument("--exact-max-iter", type=int, default=None, help="L-BFGS-B iterations of the exact GP (default 200; 30 quick)")
    p.add_argument("--lbfgs-rounds", type=int, default=40,
                   help="at most this many rounds of 10 L-BFGS steps in rows savigp-lbfgs and savigp-search (default 40; "
                        "a round gaining under 1e-4 nats per point ends them sooner)")
    p.add_argument("--refit-exact", action="store_true", help="fit the exact GP even if co2_exact.json matches")
    p.add_argument("--search", type=float, default=None, metavar="SECONDS",
                   help="also run savigp.search_kernels (base rbf, periodic, rq, linear; up to 4 terms; this time "
                        "budget) on the training weeks, train its choice as the hand-built kernel is trained and "
                        "compare their test NLPD (issue 42's clause: a structure with a periodic part within 0.05)")
    common.add_seed_argument(p, help="seeds the k-means of the inducing inputs")
    common.add_threads_argument(p, help="torch threads (default 1: the steps are small)")
    args = p.parse_args(argv)
    if args.lbfgs_rounds < 0:
        p.error(f"--lbfgs-rounds must be 0 or more, got {args.lbfgs_rounds}")
    q = args.quick
    args.num_inducing = args.num_inducing or (15 if q else 200)
    args.steps = args.steps or (40 if q else 500)
    args.every = args.every or (16 if q else 1)
    args.exact_max_iter = args.exact_max_iter or (30 if q else 200)
    sweep = args.sweep_inducing if args.sweep_inducing is not None else ("" if q else "400,800")
    args.sweep_inducing = parse_ints(p, sweep, "--sweep-inducing") if sweep.strip() else []
    return args


def main(argv=None) -> dict:
    args = parse(argv)
    threads = common.set_threads(True, args.threads)  # 1 unless --threads: a small problem (docs/cli.md, "Threads")
    out = common.out_dir(args.out, "co2")
    t_all, y_all, missing = load_co2()
    Xtr, ytr, Xte, yte = split(t_all, y_all, args.every)
    scale = Standardizer(ytr[:, None])
    ytr_s, yte_s = scale(ytr[:, None])[:, 0], scale(yte[:, None])[:, 0]
    y_var = float(scale.std[0]) ** 2
    h0 = standardized(INITIAL if args.noise == "rbf+white" else without_short(INITIAL), y_var)
    print(f"[co2] statsmodels co2: {len(t_all)} weeks ({missing} missing dropped), every {args.every}: train "
          f"{len(ytr)} (to {TEST_FROM:.0f}), test {len(yte)}; M = {args.num_inducing}, {args.steps} steps, "
          f"{threads} thread(s)", flush=True)

    rows, hypers, curves = [], {}, {}

    def add(method, mean, var, **fields):
        rows.append({"method": method, **fields, **metrics(yte_s, mean, var, scale)})
        curves.setdefault(method, (mean, var))
        r = rows[-1]
        print(f"[co2] {method:18s} M = {r['M']:4d}  RMSE {r['test_rmse']:.3f} ppm  NLPD {r['test_nlpd']:.4f}  "
              f"objective/N {r.get('objective_per_point', float('nan')):.4f}", flush=True)

    # the exact GP, its hyper-parameters optimised (cached)
    key = {"n_train": len(ytr), "every": args.every, "learn_period": args.learn_period,
           "max_iter": args.exact_max_iter, "initial": h0}
    exact = cached_exact(out / "co2_exact.json", key, Xtr, ytr_s, h0, args)
    gp, _, lml, _, _ = exact_gp(Xtr, ytr_s, exact["hypers"], args.learn_period)
    hypers["exact-gp"] = exact["hypers"]
    mean, std = gp.predict(Xte, return_std=True)
    add("exact-gp", mean, std ** 2, M=len(ytr), hypers_from="own", train_seconds=exact["seconds"],
        objective_per_point=lml / len(ytr), note=f"{exact['evaluations']} evaluations" + (", cached" if exact["cached"] else ""))

    # sparse savigp, its own hyper-parameters
    model = savigp_model(Xtr, ytr_s[:, None], kernel_expression(h0), h0["noise"], num_inducing=args.num_inducing,
                         learn_inducing=args.learn_inducing, learn_period=args.learn_period, seed=args.seed)
    fitted = train(model, args.steps, args.lr, args.learn_inducing, args.seed)
    hypers["savigp"] = savigp_hypers(model)
    add("savigp", *predictive(model, Xte), M=args.num_inducing, hypers_from="own",
        train_seconds=fitted["train_seconds"], objective_per_point=fitted["elbo"] / len(ytr))
    Z = model.inducing.detach()[0].clone()

    # the same sparse model (and larger ones, and the dense one) at the exact GP's hyper-parameters
    he = exact["hypers"]
    at_exact = [("savigp@exact", args.num_inducing, Z)] + [("savigp@exact", m, None) for m in args.sweep_inducing]
    for method, num, inducing in at_exact + [("savigp-dense@exact", len(ytr), None)]:
        dense = method == "savigp-dense@exact"
        m = savigp_model(Xtr, ytr_s[:, None], kernel_expression(he), he["noise"], num_inducing=num,
                         inducing_inputs=inducing, dense=dense, learn_period=args.learn_period, seed=args.seed)
        t0 = time.perf_counter()
        elbo = optimal_elbo(m)
        add(method, *predictive(m, Xte), M=num, hypers_from="exact-gp", train_seconds=time.perf_counter() - t0,
            objective_per_point=elbo / len(ytr), note="" if inducing is not None or dense else "k-means inducing inputs")

    # the exact GP at savigp's hyper-parameters
    gp_s, _, lml_s, _, _ = exact_gp(Xtr, ytr_s, hypers["savigp"], args.learn_period)
    mean, std = gp_s.predict(Xte, return_std=True)
    add("exact-gp@savigp", mean, std ** 2, M=len(ytr), hypers_from="savigp", objective_per_point=lml_s / len(ytr))

    # the hand-built kernel trained as the structure search trains its candidates, to the ELBO's optimum
    opt = savigp_model(Xtr, ytr_s[:, None], kernel_expression(h0), h0["noise"], num_inducing=args.num_inducing,
                       learn_period=args.learn_period, seed=args.seed)
    fitted = train_to_optimum(opt, args.seed, rounds=args.lbfgs_rounds)
    hypers["savigp-lbfgs"] = savigp_hypers(opt)
    add("savigp-lbfgs", *predictive(opt, Xte), M=args.num_inducing, hypers_from="own",
        train_seconds=fitted["train_seconds"], objective_per_point=fitted["elbo"] / len(ytr),
        note=f"L-BFGS to the ELBO's optimum ({fitted['rounds']} rounds of 10 steps)")

    if args.search is not None:
        add_search(add, Xtr, ytr_s, Xte, h0, args, hypers)

    # savigp with one RBF kernel
    rbf = savigp_model(Xtr, ytr_s[:, None], "rbf", h0["noise"], num_inducing=args.num_inducing,
                       learn_inducing=args.learn_inducing, seed=args.seed)
    fitted = train(rbf, args.steps, args.lr, args.learn_inducing, args.seed)
    hypers["savigp-rbf"] = {"ls": _value(rbf.kernel.lengthscales), "var": _value(rbf.kernel.variance),
                            "noise": _value(rbf.likelihood.variance)}
    add("savigp-rbf", *predictive(rbf, Xte), M=args.num_inducing, hypers_from="own",
        train_seconds=fitted["train_seconds"], objective_per_point=fitted["elbo"] / len(ytr))

    for r in rows:
        r["nlpd_minus_exact"] = r["test_nlpd"] - rows[0]["test_nlpd"]
    columns = ["method", "M", "hypers_from", "objective_per_point", "test_rmse", "test_nlpd", "nlpd_minus_exact",
               "coverage95", "train_seconds", "note"]
    names = [n for n in INITIAL if n in h0]
    hyper_rows = [{"method": k, **{n: (v[n] * y_var if n in VARIANCES else v[n]) for n in names}}
                  for k, v in hypers.items() if k not in ("savigp-rbf", "savigp-search")]
    notes = [f"train {len(ytr)} weeks to {TEST_FROM:.0f}, test {len(yte)}; RMSE and NLPD in ppm; objective_per_point: "
             "log marginal likelihood (exact) or ELBO (savigp) / N on standardized y.",
             f"savigp: M = {args.num_inducing} k-means inducing inputs ({'learned' if args.learn_inducing else 'fixed'}), "
             f"{args.steps} fit_orthnat steps (natural step 1 on q(u), Adam lr {args.lr} on the hyper-parameters); "
             f"period {'learned' if args.learn_period else 'held at 1 year'}; {threads} torch thread(s)."]
    common.write_table(rows, out / "co2", columns, title="Mauna Loa CO2 (weekly): forecast 1991-2001", notes=notes)
    common.write_table(hyper_rows, out / "co2_hypers", title="CO2: hyper-parameters (variances in ppm^2, lengths in years)")
    plot(out / "co2.png", (Xtr[:, 0], ytr), (Xte[:, 0], yte), curves, scale, args)
    return common.write_result(out / "co2_results.json", argv, rows=rows, hypers=hypers, y_mean=float(scale.mean[0]),
                           y_std=float(scale.std[0]), settings=vars(args))


def plot(path, train, test, curves, scale, args):
    plt = common.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [1.3, 1]})
    styles = {"exact-gp": ("tab:blue", "exact GP"), "savigp": ("tab:orange", f"savigp, M = {args.num_inducing}"),
              "savigp-rbf": ("tab:green", "savigp, RBF alone")}
    for ax, zoom in zip(axes, (False, True)):
        lo = TEST_FROM - 4 if zoom else -np.inf
        k = train[0] >= lo
        ax.plot(train[0][k], train[1][k], ".", ms=2, color="black", label="training weeks")
        ax.plot(test[0], test[1], ".", ms=2, color="tab:red", label="test weeks")
        for method, (color, label) in styles.items():
            mean, var = curves[method]
            m = scale.inverse(mean[:, None])[:, 0]
            s = np.sqrt(var) * float(scale.std[0])
            ax.plot(test[0], m, color=color, lw=1, label=label, ls="--" if method == "exact-gp" else "-",
                    zorder=4 if method == "exact-gp" else 3)  # the exact GP's dashes over savigp's line
            ax.fill_between(test[0], m - 1.96 * s, m + 1.96 * s, color=color, alpha=0.2, lw=0)
        ax.axvline(TEST_FROM, color="grey", ls=":")
        ax.set_xlabel("year")
        ax.set_ylabel("CO2 (ppm)")
        ax.grid(alpha=0.3)
        if zoom:
            ax.set_xlim(lo, test[0].max() + 0.3)
            ax.set_ylim(min(train[1][k].min(), test[1].min()) - 3, test[1].max() + 5)
            ax.set_title("the test years (bands: 95% of y)", fontsize=9)
        else:
            ax.legend(fontsize="small", loc="upper left")
    common.save_figure(fig, path, title="Mauna Loa CO2, weekly: trained to 1990, forecast 1991-2001")


if __name__ == "__main__":
    main()
