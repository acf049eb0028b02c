"""Yearly sunspot numbers with a user-written negative binomial: a quasi-periodic kernel against an RBF (issue 42).

Data: ``statsmodels.datasets.sunspots`` (the yearly mean sunspot number 1700-2008, shipped with
statsmodels, read offline), rounded to counts. Time is in years; the last 50 years (1959-2008)
are held out and forecast from the 259 before them.

Likelihood: a negative binomial with a log link and its dispersion r learned, written as a user
writes one (a torch function of (y, f, r) wrapped in ``likelihoods.CallableLikelihood``, as in
docs/custom_likelihood.md section 7):

    log p(y | f, r) = lgamma(y + r) - lgamma(r) - lgamma(y + 1) + r log(r / (r + mu)) + y log(mu / (r + mu)),
    mu = exp(f),        E[y | f] = mu,  Var[y | f] = mu + mu^2 / r.

The latent log-rate f has a learned constant prior mean (started at the log of the training mean)
and one of two kernels, both started at the same values for every seed:

* ``composite``: periodic(p = 11 years, l = 1) x RBF(50 years) + RBF(20 years): an 11-year cycle
  whose shape and amplitude drift over a few cycles, on a slowly varying level;
* ``rbf``: RBF(20 years) alone.

Each is fitted by :func:`savigp.fit` (Adam, the reparameterization estimator since the function is
differentiable) with M inducing inputs (k-means of the years, learned) for every seed in ``--seeds``
(the seed moves the k-means start, the Monte Carlo draws and so the fit). Test NLPD is
-log p(y* | data) per test year, by Monte Carlo over q(f*) (``savigp.evaluate``); the table gives
each seed's and their mean and standard deviation per kernel. The forecast figure draws, for the
first seed, the predictive median and the central 90% interval of the counts: f* from q(f*), then
y* ~ NB(r, exp(f*)), so the bands are quantiles of integers (integer and non-negative).

    python -m experiments.sunspots --quick             # M = 20, 150 steps, 2 seeds: seconds
    python -m experiments.sunspots                     # M = 50, 1000 steps, seeds 0-4

Outputs in ``--out`` (default ``results/sunspots``): ``sunspots.csv`` / ``.md`` (one row per kernel
and seed), ``sunspots_summary.csv`` / ``.md`` (mean and spread over seeds), ``sunspots_forecast.png``,
``sunspots_nlpd.png`` and ``sunspots_results.json``. Needs ``.[experiments]``.
"""
from __future__ import annotations

import math
import time

import numpy as np

from experiments import _common as common
from experiments._common import add_seeds_argument, parse_ints, summarize
TEST_YEARS = 50
#: kernel expressions (time in years), the same starting values for every seed
KERNELS = {
    "composite": "periodic(period=11, lengthscale=1) * rbf(lengthscale=50) + rbf(lengthscale=20)",
    "rbf": "rbf(lengthscale=20)",
}
#: the central interval of the forecast bands
BAND = 0.90


# ---------------------------------------------------------------------------------- data
def load_sunspots():
    """Years ``(n,)`` and the yearly mean sunspot numbers rounded to counts ``(n,)``."""
    from statsmodels.datasets import sunspots

    frame = sunspots.load_pandas().data
    return np.array(frame["YEAR"], dtype=float), np.round(np.array(frame["SUNACTIVITY"], dtype=float))


def split(years, counts, test_years: int = TEST_YEARS):
    """(X_train ``(n, 1)``, Y_train ``(n, 1)``, X_test, Y_test): the last ``test_years`` held out."""
    k = len(years) - test_years
    return years[:k, None], counts[:k, None], years[k:, None], counts[k:, None]


# ---------------------------------------------------------------------------------- the user's likelihood
def neg_binomial(y, f, r):
    """log NB(y | mean exp(f), dispersion r), ``y (B, 1)``, ``f (..., B, 1)`` -> ``(..., B)``; torch,
    written in log space (log(r + mu) = logaddexp(log r, f)) so that large f does not overflow."""
    import torch

    f, y = f[..., 0], y[:, 0]
    log_r = torch.log(r)
    log_total = torch.logaddexp(log_r, f)
    return (torch.lgamma(y + r) - torch.lgamma(r) - torch.lgamma(y + 1.0)
            + r * (log_r - log_total) + y * (f - log_total))


def nb_moments(f, r):
    """E[y | f] = exp(f) and Var[y | f] = exp(f) + exp(2 f) / r, each ``(..., B, 1)``."""
    import torch

    mu = torch.exp(f)
    return mu, mu + mu * mu / r


def likelihood(r0: float = 5.0):
    from likelihoods import CallableLikelihood

    return CallableLikelihood(neg_binomial, differentiable=True, params={"r": r0}, constraints={"r": "positive"},
                              mean_fn=nb_moments)


def dispersion(model) -> float:
    """The learned dispersion r."""
    return float(model.likelihood.parameter_values()["r"])


def count_bands(model, X, num_samples: int = 4000, seed: int = 0, level: float = BAND):
    """Median and central ``level`` interval of the predictive counts at ``X (n, 1)``, each ``(n,)``
    integers: f* from q(f*) (``model.draws``), y* ~ NB(r, exp(f*)) (numpy's negative binomial with
    n = r and p = r / (r + exp(f*)), whose mean is exp(f*)), then the empirical quantiles
    (``inverted_cdf``: values of the draws, so integers >= 0)."""
    f, _, _, _ = model.draws(X, num_samples, seed=seed)  # (S, K = 1, n, 1)
    mu = np.exp(f[:, 0, :, 0].numpy())
    r = dispersion(model)
    y = np.random.default_rng(seed).negative_binomial(r, r / (r + mu))
    lo, mid, hi = np.quantile(y, [(1 - level) / 2, 0.5, (1 + level) / 2], axis=0, method="inverted_cdf")
    return mid, lo, hi


# ---------------------------------------------------------------------------------- one fit
def run(kernel: str, seed: int, data, args) -> tuple[dict, object]:
    import savigp

    Xtr, Ytr, Xte, Yte = data
    model = savigp.SAVIGP(Xtr, Ytr, likelihood(args.r0), kernel=KERNELS[kernel], num_inducing=args.num_inducing,
                          prior_mean=float(np.log(Ytr.mean())), learn_prior_mean=True, seed=seed)
    t0 = time.perf_counter()
    history = savigp.fit(model, iterations=args.steps, lr=args.lr, num_samples=args.samples, seed=seed,
                         progress=False)
    seconds = time.perf_counter() - t0
    test = savigp.evaluate(model, Xte, Yte, num_samples=args.eval_samples, seed=seed)
    train = savigp.evaluate(model, Xtr, Ytr, num_samples=args.eval_samples, seed=seed)
    row = {"kernel": kernel, "seed": seed, "M": args.num_inducing, "test_nlpd": test["nlpd"],
           "test_mae": test["mae"], "train_nlpd": train["nlpd"], "elbo": history.final_elbo,
           "r": dispersion(model), "prior_mean": float(model.prior_mean.detach()[0]), "train_seconds": seconds,
           "still_rising": bool(history.still_rising)}
    if kernel == "composite":
        periodic = model.kernel.parts[0].parts[0]
        row["period"] = float(periodic.period().detach().reshape(-1)[0])
    print(f"[sunspots] {kernel:9s} seed {seed}: test NLPD {row['test_nlpd']:.4f}, MAE {row['test_mae']:.1f}, "
          f"train NLPD {row['train_nlpd']:.4f}, r {row['r']:.2f}"
          + (f", period {row['period']:.2f} years" if "period" in row else "") + f", {seconds:.0f} s", flush=True)
    return row, model


# ---------------------------------------------------------------------------------- script
def parse(argv=None):
    p = common.script_parser(__doc__, "sunspots", quick_help="M = 20, 150 steps, seeds 0,1 (seconds)")
    common.add_cli_options(p, "--num-inducing", "--lr", "--samples",
                           defaults={"--num-inducing": None, "--lr": 0.02, "--samples": None},
                           default_help={"--num-inducing": "50; 20 quick", "--samples": "10; 5 quick"})
    p.add_argument("--steps", type=int, default=None, help="Adam steps per fit (default 1000; 150 quick)")
    p.add_argument("--eval-samples", type=int, default=None, help="draws per test point (default 4000; 500 quick)")
    p.add_argument("--r0", type=float, default=5.0, help="initial dispersion r")
    add_seeds_argument(p, default=None, help="comma-separated seeds (default 0,1,2,3,4; 0,1 quick)")
    common.add_threads_argument(p, help="torch threads (default 1: the steps are small)")
    args = p.parse_args(argv)
    q = args.quick
    args.num_inducing = args.num_inducing or (20 if q else 50)
    args.steps = args.steps or (150 if q else 1000)
    args.samples = args.samples or (5 if q else 10)
    args.eval_samples = args.eval_samples or (500 if q else 4000)
    args.seed_list = parse_ints(p, args.seeds or ("0,1" if q else "0,1,2,3,4"))
    return args


def main(argv=None) -> dict:
    args = parse(argv)
    threads = common.set_threads(True, args.threads)  # 1 unless --threads: a small problem (docs/cli.md, "Threads")
    out = common.out_dir(args.out, "sunspots")
    years, counts = load_sunspots()
    data = split(years, counts)
    Xtr, Ytr, Xte, Yte = data
    print(f"[sunspots] statsmodels sunspots: {len(years)} years {years[0]:.0f}-{years[-1]:.0f}; train "
          f"{len(Ytr)} to {Xtr[-1, 0]:.0f}, test {len(Yte)}; M = {args.num_inducing}, {args.steps} steps, seeds "
          f"{args.seed_list}, {threads} thread(s)", flush=True)
    rows, first = [], {}
    for kernel in KERNELS:
        for seed in args.seed_list:
            row, model = run(kernel, seed, data, args)
            rows.append(row)
            first.setdefault(kernel, model)
    summary = summarize(rows, ["kernel"], ["test_nlpd", "test_mae", "train_nlpd", "r", "train_seconds"])
    by = {s["kernel"]: s for s in summary}
    diffs = [a["test_nlpd"] - b["test_nlpd"] for a, b in zip([r for r in rows if r["kernel"] == "composite"],
                                                              [r for r in rows if r["kernel"] == "rbf"])]
    for s in summary:
        s["test_nlpd_min"] = min(r["test_nlpd"] for r in rows if r["kernel"] == s["kernel"])
        s["test_nlpd_max"] = max(r["test_nlpd"] for r in rows if r["kernel"] == s["kernel"])
    notes = [f"train {len(Ytr)} years ({Xtr[0, 0]:.0f}-{Xtr[-1, 0]:.0f}), test {len(Yte)} ({Xte[0, 0]:.0f}-"
             f"{Xte[-1, 0]:.0f}); counts = rounded yearly means; negative binomial (user callable, r learned).",
             f"M = {args.num_inducing} learned inducing inputs, {args.steps} Adam steps at lr {args.lr}, S = "
             f"{args.samples}; test NLPD by {args.eval_samples} draws per year; std: population std over the "
             f"{len(args.seed_list)} seeds; {threads} torch thread(s).",
             "composite minus rbf, per seed: " + ", ".join(f"{d:+.3f}" for d in diffs)]
    common.write_table(rows, out / "sunspots", ["kernel", "seed", "M", "test_nlpd", "test_mae", "train_nlpd", "elbo", "r",
                                            "period", "prior_mean", "train_seconds", "still_rising"],
                   title="Sunspots: test NLPD per seed (1959-2008 held out)")
    common.write_table(summary, out / "sunspots_summary", ["kernel", "n", "test_nlpd_mean", "test_nlpd_std", "test_nlpd_min",
                                                       "test_nlpd_max", "test_mae_mean", "train_nlpd_mean", "r_mean",
                                                       "train_seconds_mean"],
                   title="Sunspots: test NLPD over seeds", notes=notes)
    bands = {k: count_bands(m, np.concatenate([Xtr, Xte]), seed=args.seed_list[0]) for k, m in first.items()}
    plot_forecast(out / "sunspots_forecast.png", data, bands, rows, args)
    plot_nlpd(out / "sunspots_nlpd.png", rows)
    return common.write_result(out / "sunspots_results.json", argv, rows=rows, summary=summary,
                           nlpd_difference_per_seed=diffs, settings={k: v for k, v in vars(args).items()},
                           bands={k: {"median": b[0], "low": b[1], "high": b[2]} for k, b in
                                  ((k, tuple(a.tolist() for a in v)) for k, v in bands.items())},
                           composite_better_by=by["rbf"]["test_nlpd_mean"] - by["composite"]["test_nlpd_mean"])


def plot_forecast(path, data, bands, rows, args):
    plt = common.pyplot()
    Xtr, Ytr, Xte, Yte = data
    x = np.concatenate([Xtr, Xte])[:, 0]
    fig, axes = plt.subplots(len(bands), 1, figsize=(12, 3.3 * len(bands)), sharex=True, sharey=True)
    for ax, (kernel, (mid, lo, hi)) in zip(np.atleast_1d(axes), bands.items()):
        row = next(r for r in rows if r["kernel"] == kernel and r["seed"] == args.seed_list[0])
        ax.fill_between(x, lo, hi, step="mid", color="tab:blue", alpha=0.25, lw=0,
                        label=f"central {BAND:.0%} of the predictive counts")
        ax.step(x, mid, where="mid", color="tab:blue", lw=1, label="predictive median")
        ax.plot(Xtr[:, 0], Ytr[:, 0], ".", ms=3, color="black", label="training years")
        ax.plot(Xte[:, 0], Yte[:, 0], ".", ms=4, color="tab:red", label="held-out years")
        ax.axvline(Xte[0, 0] - 0.5, color="grey", ls=":")
        ax.set_ylabel("sunspot number (count)")
        ax.set_title(f"{kernel}: {KERNELS[kernel]} (seed {row['seed']}: test NLPD {row['test_nlpd']:.3f}, "
                     f"r = {row['r']:.2f})", fontsize=9)
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
    np.atleast_1d(axes)[0].legend(fontsize="small", loc="upper left", ncol=2)
    np.atleast_1d(axes)[-1].set_xlabel("year")
    common.save_figure(fig, path, title=f"Sunspots, negative binomial: trained to {Xtr[-1, 0]:.0f}, "
                                    f"forecast {Xte[0, 0]:.0f}-{Xte[-1, 0]:.0f}")


def plot_nlpd(path, rows):
    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(4.5, 3.5))
    for i, kernel in enumerate(KERNELS):
        vals = [r["test_nlpd"] for r in rows if r["kernel"] == kernel]
        ax.scatter(np.full(len(vals), i) + np.linspace(-0.08, 0.08, len(vals)), vals, s=16, color="black", zorder=3)
        ax.errorbar(i + 0.2, np.mean(vals), yerr=np.std(vals), fmt="o", color="tab:blue", capsize=4)
    ax.set_xticks(range(len(KERNELS)))
    ax.set_xticklabels(list(KERNELS))
    ax.set_xlim(-0.5, len(KERNELS) - 0.5)
    ax.set_ylabel("test NLPD per year (nats)")
    ax.grid(axis="y", alpha=0.3)
    common.save_figure(fig, path, title="Sunspots 1959-2008: every seed, mean +- std")


if __name__ == "__main__":
    main()
