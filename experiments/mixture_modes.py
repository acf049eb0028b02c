"""Do mixtures of Gaussians keep both modes of a symmetric posterior under Adam and Monte Carlo
gradients? (issue 25; docs/mixtures.md, "Mixtures under stochastic training").

Every problem has a posterior with two mirror-image modes of equal mass, kernel and likelihood
fixed, and each is fitted with K = 1 and K = 2 full Gaussians by ``savigp.fit`` (Adam,
``lr=0.05``, S = 50 draws, only the posterior learned), with the reparameterization and with the
score estimator, over seeds. A K = 2 fit *keeps both modes* when its two components sit on
different modes and both weights are in [0.3, 0.7]. Printed per problem x estimator: that count,
the count when K = 2 is fitted from two starts (seeds s and s + 100) and the one with the higher
full-data ELBO kept (what :func:`savigp.choose_components`' restarts do), and the full-data ELBO of K = 2 less K = 1's (median and range over the seeds; each ELBO from
2000 draws per point, the default entropy of the model), plus the unimodal control, where K = 2
should neither gain nor lose.

Problems (all float64, CPU):

* ``abs5``, ``abs10``: y = |f| + noise at 5 or 10 inputs on [0, 2] (RBF, length-scale 1, dense),
  modes f ~ +-y;
* ``abs40b``: the same at 40 inputs with 6 fixed inducing inputs and mini-batches of 10;
* ``switch``: Q = 2, p(y | f1, f2) = 0.5 N(y; f1, 0.2^2) + 0.5 N(y; f2, 0.2^2), targets alternating
  between the curves 1 + 0.5 sin(2x) and -1 + 0.5 cos(2x) at 16 inputs (6 inducing inputs per
  latent function): modes (f1, f2) ~ (A, B) and (B, A) (label switching);
* ``square``: y = f^2 + noise at 8 inputs on [0, 2] (length-scale 1, dense), modes f ~ +-sqrt(y);
* ``laplace2d``: y = |f| + Laplace noise (scale 0.15) at 12 random inputs in [0, 2]^2, a Matern-5/2
  kernel with ARD length-scales (1.5, 2.5), dense, modes f ~ +-y;
* ``unimodal``: y = sin(2x) + noise, a Gaussian likelihood, 20 inputs (control; its ELBOs are also
  compared in closed form, without Monte Carlo error).

    OMP_NUM_THREADS=1 python experiments/mixture_modes.py --seeds 20

``savigp.fit`` explores starts, tries a reflection move and anneals for K > 1 by default
(docs/mixtures.md, "One fit that finds both modes"); ``--options starts=1,reflect=0,anneal=0``
fits K = 2 as before that, ``--k1-options anneal=1`` anneals K = 1 too. ``--no-restart`` and
``--no-gain`` leave out the second K = 2 fit and the K = 1 fit of the two-mode problems (a third
and a half of the time). ``--posterior diag`` (or ``diag-u``) fits that family instead of full
Gaussians, K = 1 and K = 2 alike.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from _common import gaussian_log_density  # the shared runner (it makes savigp and the experiments importable)
import savigp
from likelihoods import CallableLikelihood, Gaussian

NOISE = 0.1  # the noise variance of the |f| and f^2 problems
SWITCH_SD = 0.2


@dataclass
class Problem:
    """A two-mode (or unimodal) problem: ``build(K, seed, entropy)`` returns a model, ``modes(model)``
    the per-component coordinate whose sign says which mode a component sits on ``(K,)``, and
    ``scale`` the coordinate's magnitude at a mode (a component within half of it of zero is at
    neither mode)."""

    name: str
    build: Callable[..., savigp.SAVIGP]
    modes: Callable[[savigp.SAVIGP], torch.Tensor]
    scale: float
    batch_size: Optional[int] = None
    bimodal: bool = True


def _abs_lik(y, f):
    return gaussian_log_density(y[:, 0], f[..., 0].abs(), NOISE)


def _square_lik(y, f):
    return gaussian_log_density(y[:, 0], f[..., 0] ** 2, NOISE)


def _switch_lik(y, f):
    return torch.logsumexp(gaussian_log_density(y[:, :1], f, SWITCH_SD ** 2), -1) - math.log(2)  # f: (..., B, 2)


def _fmean(model):
    """Component means of f at the training inputs, ``(K, N, Q)``."""
    return model.predict_latent(model.train_x)[0]


def _sign_problem(name, n, lik, target, lengthscale, span, num_inducing=None, batch_size=None):
    X = torch.linspace(0, span, n, dtype=torch.float64)[:, None]
    g = torch.Generator().manual_seed(1000 + n)
    Y = (target + 0.2 * torch.randn(n, 1, generator=g, dtype=torch.float64)).abs()

    def build(K, seed, entropy=None, **kw):
        kw.update({} if entropy is None else {"entropy": entropy})
        kernel = savigp.RBF(1, 1, lengthscale=lengthscale, variance=1.0, learn=False)
        like = CallableLikelihood(lik, backend="torch", differentiable=True)
        if num_inducing is None:
            return savigp.SAVIGP(X, Y, like, kernel, dense=True, num_components=K, seed=seed, **kw)
        Z = torch.linspace(0, span, num_inducing, dtype=torch.float64)[:, None]
        return savigp.SAVIGP(X, Y, like, kernel, inducing_inputs=Z, learn_inducing=False, num_components=K, seed=seed, **kw)

    scale = float(Y.mean()) if lik is _abs_lik else float(Y.mean().sqrt())
    return Problem(name, build, lambda m: _fmean(m)[..., 0].mean(-1), scale, batch_size)


def _switch_problem(n=16, num_inducing=6):
    X = torch.linspace(0, 3, n, dtype=torch.float64)[:, None]
    a, b = 1 + 0.5 * torch.sin(2 * X), -1 + 0.5 * torch.cos(2 * X)
    g = torch.Generator().manual_seed(7)
    Y = torch.where(torch.arange(n)[:, None] % 2 == 0, a, b) + 0.05 * torch.randn(n, 1, generator=g,
                                                                                    dtype=torch.float64)
    Z = torch.linspace(0, 3, num_inducing, dtype=torch.float64)[:, None]

    def build(K, seed, entropy=None, **kw):
        kw.update({} if entropy is None else {"entropy": entropy})
        kernel = savigp.RBF(1, 2, lengthscale=1.0, variance=1.0, learn=False)
        like = CallableLikelihood(_switch_lik, backend="torch", differentiable=True, num_latent=2)
        return savigp.SAVIGP(X, Y, like, kernel, inducing_inputs=Z, learn_inducing=False, num_components=K, seed=seed, **kw)

    def modes(m):
        f = _fmean(m)  # (K, N, 2)
        return (f[..., 0] - f[..., 1]).mean(-1)

    return Problem("switch", build, modes, 2.0)


LAPLACE_B = 0.15  # the Laplace noise scale of laplace2d


def _laplace_abs_lik(y, f):
    return -math.log(2 * LAPLACE_B) - (y[:, 0] - f[..., 0].abs()).abs() / LAPLACE_B


def _laplace2d_problem(n=12):
    """y = |f| + Laplace noise at n inputs in [0, 2]^2, a Matern-5/2 kernel with ARD length-scales
    (1.5, 2.5): heavy-tailed noise, 2-D inputs, a rougher kernel than the others."""
    g = torch.Generator().manual_seed(11)
    X = 2 * torch.rand(n, 2, generator=g, dtype=torch.float64)
    target = 1.3 + 0.3 * torch.sin(2 * X[:, :1]) - 0.2 * X[:, 1:]
    u = torch.rand(2, n, 1, generator=g, dtype=torch.float64)
    noise = LAPLACE_B * torch.log(u[0] / u[1])  # Laplace(0, b): a difference of two exponentials
    Y = (target + noise).abs()

    def build(K, seed, entropy=None, **kw):
        kw.update({} if entropy is None else {"entropy": entropy})
        kernel = savigp.Matern52(2, 1, lengthscale=[1.5, 2.5], variance=1.0, ard=True, learn=False)
        like = CallableLikelihood(_laplace_abs_lik, backend="torch", differentiable=True)
        return savigp.SAVIGP(X, Y, like, kernel, dense=True, num_components=K, seed=seed, **kw)

    return Problem("laplace2d", build, lambda m: _fmean(m)[..., 0].mean(-1), float(Y.mean()))


def _unimodal_problem(n=20):
    X = torch.linspace(0, 3, n, dtype=torch.float64)[:, None]
    g = torch.Generator().manual_seed(3)
    Y = torch.sin(2 * X) + 0.3 * torch.randn(n, 1, generator=g, dtype=torch.float64)

    def build(K, seed, entropy=None, **kw):
        kw.update({} if entropy is None else {"entropy": entropy})
        kernel = savigp.RBF(1, 1, lengthscale=1.0, variance=1.0, learn=False)
        return savigp.SAVIGP(X, Y, Gaussian(variance=0.09), kernel, dense=True, num_components=K, seed=seed, **kw)

    return Problem("unimodal", build, lambda m: _fmean(m)[..., 0].mean(-1), 1.0, bimodal=False)


def problems() -> dict:
    return {p.name: p for p in [
        _sign_problem("abs5", 5, _abs_lik, 1.6, 1.0, 2.0),
        _sign_problem("abs10", 10, _abs_lik, 1.6, 1.0, 2.0),
        _sign_problem("abs40b", 40, _abs_lik, 1.6, 1.0, 2.0, num_inducing=6, batch_size=10),
        _switch_problem(),
        _sign_problem("square", 8, _square_lik, 1.5, 1.0, 2.0),
        _laplace2d_problem(),
        _unimodal_problem(),
    ]}


def both_modes(problem: Problem, model, low: float = 0.3, high: float = 0.7) -> bool:
    """Two components on different modes (mode coordinates of opposite sign, each at least half
    the mode's scale from zero) and both weights in [low, high]."""
    c = problem.modes(model)
    w = model.posterior.weights().detach()
    on_modes = bool((c.min() < -0.5 * problem.scale) and (c.max() > 0.5 * problem.scale))
    return on_modes and bool((w >= low).all() and (w <= high).all())


def full_elbo(model, estimator: str, num_samples: int = 2000, seed: int = 12345) -> tuple[float, float]:
    """The ELBO on all the data (default entropy of the model) and the Monte Carlo standard error
    of its expected log-likelihood term. Without gradients, so the draws are shared by the
    components (:func:`savigp.estimators.expected_log_likelihood.expected_log_lik`'s ``common_draws``): the K = 1 and
    K = 2 estimates of one seed are compared with common random numbers."""
    est = "reparam" if estimator == "score" and model.likelihood.differentiable else estimator
    with torch.no_grad():
        t = model.elbo(None, num_samples=num_samples, estimator=est, generator=torch.Generator().manual_seed(seed))
    return float(t.elbo), float(t.ell_stderr)


def train(model, problem: Problem, estimator: str, seed: int, iterations: int, lr: float = 0.05,
          num_samples: int = 50, **options):
    """``savigp.fit`` as the issue's checks call it (``options``: more of fit's arguments)."""
    savigp.fit(model, iterations=iterations, lr=lr, num_samples=num_samples, estimator=estimator,
               batch_size=problem.batch_size, groups=("posterior",), seed=seed, progress=False, **options)
    return model


def exact_elbo(model) -> float:
    """The ELBO with the likelihood's closed-form expected log-likelihood (NaN without one)."""
    if not model.likelihood.has_closed_form_ell:
        return math.nan
    with torch.no_grad():
        return float(model.elbo(None, estimator="closed-form").elbo)


def run_cell(problem: Problem, estimator: str, seed: int, iterations: int, entropy: Optional[str] = None,
             restart: bool = True, gain: bool = True, options: Optional[dict] = None,
             k1_options: Optional[dict] = None, posterior: str = "full") -> dict:
    """K = 1 and K = 2 fits from ``seed``, and a second K = 2 fit from ``seed + 100`` (a restart):
    whether K = 2 keeps both modes, alone and as the better of the two starts by the full-data ELBO,
    and the ELBO gain of K = 2 (the first start) over K = 1. ``restart=False``: no second K = 2 fit
    (``both_best_of_2`` None); ``gain=False``: no K = 1 fit (``gain`` NaN). ``options``: more
    arguments of the K = 2 fits (e.g. ``starts=1``), ``k1_options`` of the K = 1 fit. ``posterior``:
    the family of every fit (``posterior=`` of :class:`savigp.SAVIGP`)."""
    options, k1_options = options or {}, k1_options or {}
    m2 = train(problem.build(2, seed, entropy, posterior=posterior), problem, estimator, seed, iterations, **options)
    e2, se = full_elbo(m2, estimator)
    gain_ = exact = math.nan
    if gain:
        m1 = train(problem.build(1, seed, posterior=posterior), problem, estimator, seed, iterations, **k1_options)
        gain_ = e2 - full_elbo(m1, estimator)[0]
        exact = exact_elbo(m2) - exact_elbo(m1)
    best = None
    if restart:
        m3 = train(problem.build(2, seed + 100, entropy, posterior=posterior), problem, estimator, seed + 100,
                   iterations, **options)
        best = both_modes(problem, m2 if e2 >= full_elbo(m3, estimator)[0] else m3)
    return {"both": both_modes(problem, m2), "both_best_of_2": best,
            "gain": gain_, "exact_gain": exact, "se": se, "weights": [round(float(w), 2) for w in m2.posterior.weights().detach()],
            "modes": [round(float(c), 2) for c in problem.modes(m2)]}


def _options(text: str) -> dict:
    """``"starts=1,reflect=0"`` -> ``{"starts": 1, "reflect": False}`` (ints; 0/1 for the flags)."""
    flags = {"reflect", "anneal"}
    out = {}
    for item in filter(None, text.split(",")):
        key, value = item.split("=")
        out[key.strip()] = bool(int(value)) if key.strip() in flags else float(value) if "." in value else int(value)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--problems", default=",".join(problems()))
    ap.add_argument("--estimators", default="reparam,score")
    ap.add_argument("--iterations", type=int, default=1500)
    ap.add_argument("--entropy", default=None, help="the K = 2 fits' entropy term (default: the library's)")
    ap.add_argument("--verbose", action="store_true", help="one line per seed")
    ap.add_argument("--no-restart", action="store_true", help="no second K = 2 fit (no best-of-2 column)")
    ap.add_argument("--no-gain", action="store_true", help="no K = 1 fit for the two-mode problems (no gain column)")
    ap.add_argument("--options", default="", help="more arguments of the K = 2 fits, e.g. starts=1,reflect=0,anneal=0")
    ap.add_argument("--k1-options", default="", help="more arguments of the K = 1 fits, e.g. anneal=1")
    families = savigp.posteriors.POSTERIORS
    ap.add_argument("--posterior", default="full", choices=families, type=families.resolve,
                    help="the family of every fit (default full; diag: diagonal in whitened coordinates; diag-u: the "
                         "paper's diagonal over u)")
    args = ap.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    table = []
    probs = problems()
    for name in args.problems.split(","):
        p = probs[name]
        for est in args.estimators.split(","):
            t0, rows = time.time(), []
            for s in range(args.first_seed, args.first_seed + args.seeds):
                r = run_cell(p, est, s, args.iterations, args.entropy, restart=not args.no_restart,
                             gain=not (args.no_gain and p.bimodal), options=_options(args.options),
                             k1_options=_options(args.k1_options), posterior=args.posterior)
                rows.append(r)
                if args.verbose:
                    print(f"  {name} {est} seed {s}: {r}", flush=True)
            gains = [r["gain"] for r in rows]
            count = sum(r["both"] for r in rows) if p.bimodal else None
            best = sum(r["both_best_of_2"] for r in rows) if p.bimodal and not args.no_restart else None
            row = (name, est, count, best, len(rows), statistics.median(gains), min(gains), max(gains))
            table.append(row)
            exact = [r["exact_gain"] for r in rows]
            if not any(math.isnan(e) for e in exact):  # (a likelihood with a closed-form expectation)
                print(f"{name:9s} {est:8s} exact ELBO(K=2) - ELBO(K=1) (closed form): median "
                      f"{statistics.median(exact):+.3f} [{min(exact):+.3f}, {max(exact):+.3f}], within 0.05: "
                      f"{sum(abs(e) <= 0.05 for e in exact)}/{len(rows)}; estimated: within 0.05: "
                      f"{sum(abs(g) <= 0.05 for g in gains)}/{len(rows)}", flush=True)
            print(f"{name:9s} {est:8s} both modes {'-' if count is None else count:>2}/{len(rows)} (best of 2 starts "
                  f"{'-' if best is None else best:>2}/{len(rows)})  ELBO(K=2) - ELBO(K=1): median "
                  f"{row[5]:+.2f} [{row[6]:+.2f}, {row[7]:+.2f}] (s.e. <= {max(r['se'] for r in rows):.2f})  "
                  f"{time.time() - t0:.0f} s", flush=True)
    print("\n| problem | estimator | K = 2 keeps both modes, weights in [0.3, 0.7] | the same, better of 2 starts "
          "| ELBO(K=2) - ELBO(K=1), median [min, max] |\n| --- | --- | --- | --- | --- |")
    for name, est, count, best, n, med, lo, hi in table:
        kept = "(unimodal)" if count is None else f"{count}/{n}"
        kept2 = "" if best is None else f"{best}/{n}"
        print(f"| {name} | {est} | {kept} | {kept2} | {med:+.2f} [{lo:+.2f}, {hi:+.2f}] |")


if __name__ == "__main__":
    main()
