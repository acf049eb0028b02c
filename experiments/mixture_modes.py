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

    OMP_NUM_THREADS=1 python -m experiments.mixture_modes --seeds 20

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
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from experiments._common import add_cli_options, gaussian_log_density, uses_score_function
import savigp
from likelihoods import CallableLikelihood, Gaussian

NOISE = 0.1  # the noise variance of the |f| and f^2 problems
SWITCH_SD = 0.2


@dataclass
class Problem:
    """A two-mode (or unimodal) problem: ``build(K, seed, entropy)`` returns a model, ``modes(model)``
    the per-component coordinate whose sign says which mode a component sits on ``(K,)``, and
    ``scale`` the coordinate's magnitude at a mode (a component within half of it of zero is at
    neither mode). The problems that know their modes (:func:`many_modes_problems`) have
    ``modes_of(model)``: per component, the index of the mode it sits on, None for none, of
    ``num_modes``; and the settings of their fits (``iterations``, ``fit_options``)."""

    name: str
    build: Callable[..., savigp.SAVIGP]
    modes: Callable[[savigp.SAVIGP], torch.Tensor]
    scale: float
    batch_size: Optional[int] = None
    bimodal: bool = True
    modes_of: Optional[Callable[[savigp.SAVIGP], list]] = None
    num_modes: int = 2
    iterations: Optional[int] = None
    fit_options: dict = field(default_factory=dict)


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


# ---------------------------------------------------------------- many modes, and problems at scale
#
# These problems know their modes: ``modes_of(model)`` gives, per component, the index of the mode
# its mean sits on (None: on none), from the distance between the component's mean of f at the
# training inputs and each mode's function (relative root mean square, within ``tolerance``).


def _mode_index(f: torch.Tensor, modes: torch.Tensor, tolerance: float) -> list:
    """Per component of ``f`` ``(K, N, Q)``: the index of the mode ``(J, N, Q)`` within ``tolerance``
    (relative root mean square distance), else None."""
    scale = modes.pow(2).mean((1, 2)).sqrt()  # (J,)
    d = (f.unsqueeze(1) - modes.unsqueeze(0)).pow(2).mean((2, 3)).sqrt() / scale  # (K, J)
    best = d.argmin(1)
    return [int(j) if float(d[k, j]) <= tolerance else None for k, j in enumerate(best)]


def _known_modes(name, build, modes, tolerance, batch_size=None, iterations=None, fit_options=None):
    """A :class:`Problem` whose ``modes_of`` names the mode of each component (see above)."""
    return Problem(name, build, lambda m: torch.zeros(m.posterior.num_components), 1.0, batch_size,
                   modes_of=lambda m: _mode_index(_fmean(m), modes, tolerance), num_modes=modes.shape[0],
                   iterations=iterations, fit_options=dict(fit_options or {}))


def _scale_problem(name, X, Y, g, lik, num_inducing_grid, lengthscale, batch_size):
    """y = |g| or g^2 + noise at many inputs, a sparse model with fixed inducing inputs, mini-batches,
    fit's defaults (lr 0.01, S = 100): modes f ~ +-g."""
    D = X.shape[1]
    axes = [torch.linspace(float(X[:, d].min()), float(X[:, d].max()), num_inducing_grid, dtype=torch.float64)
            for d in range(D)]
    Z = torch.cartesian_prod(*axes).reshape(-1, D)

    def build(K, seed, entropy=None, **kw):
        kw.update({} if entropy is None else {"entropy": entropy})
        kernel = savigp.RBF(D, 1, lengthscale=lengthscale, variance=1.0, learn=False)
        like = CallableLikelihood(lik, backend="torch", differentiable=True)
        return savigp.SAVIGP(X, Y, like, kernel, inducing_inputs=Z, learn_inducing=False, num_components=K,
                             seed=seed, **kw)

    return _known_modes(name, build, torch.stack([g, -g]), 0.3, batch_size, 2000, {"lr": 0.01, "num_samples": 100})


def _abs300():
    """y = |g(x)| + noise (variance 0.1), g = 1.6 + 0.5 sin(1.3 x) at 300 inputs on [0, 10], RBF
    length-scale 1, M = 20 fixed inducing inputs, mini-batches of 30."""
    X = torch.linspace(0, 10, 300, dtype=torch.float64)[:, None]
    g = 1.6 + 0.5 * torch.sin(1.3 * X)
    Y = (g + math.sqrt(NOISE) * torch.randn(300, 1, generator=torch.Generator().manual_seed(1300),
                                            dtype=torch.float64)).abs()
    return _scale_problem("abs300", X, Y, g, _abs_lik, 20, 1.0, 30)


def _square2d():
    """y = g(x)^2 + noise (variance 0.1), g = 1.5 + 0.4 sin(x_1) cos(0.8 x_2) at 400 random inputs in
    [0, 5]^2, RBF length-scale 1.2, M = 25 fixed inducing inputs on a grid, mini-batches of 40."""
    gen = torch.Generator().manual_seed(2400)
    X = 5 * torch.rand(400, 2, generator=gen, dtype=torch.float64)
    g = 1.5 + 0.4 * torch.sin(X[:, :1]) * torch.cos(0.8 * X[:, 1:])
    Y = g ** 2 + math.sqrt(NOISE) * torch.randn(400, 1, generator=gen, dtype=torch.float64)
    return _scale_problem("square2d", X, Y, g, _square_lik, 5, 1.2, 40)


ROT_NOISE = 0.1  # the noise variance of each output of the rotation problems


def _rotation_problem(power: int, n: int = 10):
    """Q = 2, y = (f_1 + i f_2)^power + noise (its real and imaginary parts, variance 0.1 each) at n
    inputs on [0, 2], the same RBF kernel (length-scale 1) for both latent functions, dense: the
    likelihood and the prior are invariant under the rotations of (f_1, f_2) by 2 pi / power, so
    the posterior has ``power`` modes, z ~ z_true exp(2 pi i j / power), j = 0, ..., power - 1."""
    X = torch.linspace(0, 2, n, dtype=torch.float64)[:, None]
    z = (1.3 + 0.2 * torch.sin(2 * X[:, 0])) * torch.exp(1j * (0.3 + 0.6 * torch.sin(1.5 * X[:, 0])))
    w = z ** power
    gen = torch.Generator().manual_seed(5000 + power)
    Y = torch.stack([w.real, w.imag], -1) + math.sqrt(ROT_NOISE) * torch.randn(n, 2, generator=gen, dtype=torch.float64)

    def lik(y, f):  # f (..., B, 2) -> (..., B)
        p = torch.complex(f[..., 0], f[..., 1]) ** power
        return gaussian_log_density(y[:, 0], p.real, ROT_NOISE) + gaussian_log_density(y[:, 1], p.imag, ROT_NOISE)

    def build(K, seed, entropy=None, **kw):
        kw.update({} if entropy is None else {"entropy": entropy})
        kernel = savigp.RBF(1, 2, lengthscale=1.0, variance=1.0, learn=False)
        like = CallableLikelihood(lik, backend="torch", differentiable=True, num_latent=2, output_dim=2)
        return savigp.SAVIGP(X, Y, like, kernel, dense=True, num_components=K, seed=seed, **kw)

    rotations = torch.stack([z * complex(math.cos(2 * math.pi * j / power), math.sin(2 * math.pi * j / power))
                             for j in range(power)])
    modes = torch.stack([rotations.real, rotations.imag], -1)  # (J, N, 2)
    return _known_modes(f"rot{power}", build, modes, 0.5, None, 1000, {"lr": 0.05, "num_samples": 50})


def keeps_modes(problem: Problem, model, low: float = 0.6, high: float = 1.4) -> bool:
    """Every component on a mode (``problem.modes_of``), no two on the same one (K <= the modes), and
    every weight in [low / K, high / K] ([0.3, 0.7] for K = 2). K = 1: on a mode."""
    idx = problem.modes_of(model)
    K = len(idx)
    w = model.posterior.weights().detach()
    distinct = len(set(idx)) == min(K, problem.num_modes)
    return None not in idx and distinct and bool((w >= low / K).all() and (w <= high / K).all())


ROUND_SD = 0.3  # the noise sd of the rounded problem


def _rounded_lik(y, f):
    """log p(y | f) = log[Phi((y + 1/2 - |f|) / sd) - Phi((y - 1/2 - |f|) / sd)]: |f| plus Gaussian noise,
    rounded to an integer, written in numpy/scipy (a black box: no gradient, a score-function
    estimator). ``y`` (B, 1), ``f`` (..., B, 1) numpy arrays -> (..., B)."""
    import numpy as np
    from scipy.special import log_ndtr

    a = (y[:, 0] + 0.5 - np.abs(f[..., 0])) / ROUND_SD
    b = (y[:, 0] - 0.5 - np.abs(f[..., 0])) / ROUND_SD
    return log_ndtr(a) + np.log1p(-np.exp(np.minimum(log_ndtr(b) - log_ndtr(a), -1e-12)))


def _round320():
    """y = round(|g(x)| + noise (sd 0.3)), g = 2 + 1.2 sin(0.9 x), at 320 inputs on [0, 10], a black-box
    numpy likelihood (:func:`_rounded_lik`), RBF length-scale 1, M = 20 fixed inducing inputs,
    mini-batches of 32, fit's defaults (lr 0.01, S = 100): modes f ~ +-g."""
    X = torch.linspace(0, 10, 320, dtype=torch.float64)[:, None]
    g = 2 + 1.2 * torch.sin(0.9 * X)
    noise = ROUND_SD * torch.randn(320, 1, generator=torch.Generator().manual_seed(1320), dtype=torch.float64)
    Y = torch.round((g + noise).abs())
    Z = torch.linspace(0, 10, 20, dtype=torch.float64)[:, None]

    def build(K, seed, entropy=None, **kw):
        kw.update({} if entropy is None else {"entropy": entropy})
        kernel = savigp.RBF(1, 1, lengthscale=1.0, variance=1.0, learn=False)
        like = CallableLikelihood(_rounded_lik, backend="numpy", differentiable=False)
        return savigp.SAVIGP(X, Y, like, kernel, inducing_inputs=Z, learn_inducing=False, num_components=K,
                             seed=seed, **kw)

    return _known_modes("round320", build, torch.stack([g, -g]), 0.3, 32, 2000, {"lr": 0.01, "num_samples": 100})


def many_modes_problems() -> dict:
    return {p.name: p for p in [_abs300(), _square2d(), _rotation_problem(3), _rotation_problem(4), _round320()]}


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
    components (:func:`savigp.estimators.sampling.factorized_draws`'s ``common_draws``): the K = 1 and
    K = 2 estimates of one seed are compared with common random numbers."""
    est = ("reparam" if uses_score_function(estimator)
           and model.likelihood.differentiable else estimator)
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


def run_known(problem: Problem, estimator: str, seed: int, K: int, options: Optional[dict] = None,
              converge: bool = False, model_options: Optional[dict] = None) -> dict:
    """One ``savigp.fit`` with fit's defaults at the problem's settings (its ``iterations``, ``lr``, S,
    mini-batches; only q(u) learned; ``converge``: no ``iterations``, fit's convergence rule ends it):
    whether it keeps the modes (:func:`keeps_modes`), the mode of each component, the weights, the
    full-data ELBO (:func:`full_elbo`, with its standard error) and fit's last estimate, the steps
    and seconds, whether fit warned that it ended below a start or a move of its own, and every
    warning fit gave that says a fit may have stopped short (``short``: still rising, below a start
    or branch, a component of little weight or on another's mode)."""
    import warnings

    from savigp.training.component_checks import ComponentWarning
    from savigp.training.starts import LocalOptimumWarning

    model = problem.build(K, seed, **(model_options or {}))
    t0 = time.time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        h = savigp.fit(model, iterations=None if converge else problem.iterations, batch_size=problem.batch_size,
                       estimator=estimator, groups=("posterior",), seed=seed, progress=False,
                       **dict(problem.fit_options, **(options or {})))
    seconds = time.time() - t0
    below = any("below" in str(w.message) and "start" in str(w.message) for w in caught)
    short = sorted({w.category.__name__ for w in caught
                    if issubclass(w.category, (ComponentWarning, LocalOptimumWarning)) or "still rising" in str(w.message)})
    elbo, se = full_elbo(model, estimator, num_samples=4000)
    conv = getattr(h, "convergence", None)
    return {"keeps": keeps_modes(problem, model), "modes": problem.modes_of(model),
            "weights": [round(float(w), 2) for w in model.posterior.weights().detach()],
            "elbo": round(float(h.final_elbo), 2), "full_elbo": round(elbo, 2), "se": round(se, 3),
            "steps": len(h.elbo), "converged": None if conv is None else bool(conv.converged),
            "seconds": round(seconds, 1), "warned": below, "short": short}


def run_search(problem: Problem, estimator: str, seed: int, max_components: int, restarts: int) -> dict:
    """:func:`savigp.choose_components` from K = 1 (fit's settings as :func:`run_known`): the chosen K,
    whether it keeps the modes (for a problem that knows them), its seconds and its table."""
    model = problem.build(1, seed)
    options = dict(iterations=problem.iterations or 1500, lr=0.05, num_samples=50)
    options.update(problem.fit_options)
    t0 = time.time()
    found = savigp.choose_components(model, max_components=max_components, restarts=restarts, verbose=False,
                                     batch_size=problem.batch_size, estimator=estimator, groups=("posterior",),
                                     seed=seed, **options)
    keeps = keeps_modes(problem, found.model) if problem.modes_of is not None else None
    return {"K": found.num_components, "keeps": keeps, "seconds": round(time.time() - t0, 1),
            "table": found.format()}


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
    add_cli_options(ap, "--iterations", "--posterior", defaults={"--iterations": 1500, "--posterior": "full"},
                    helps={"--posterior": "the family of every fit (default full; diag: diagonal in whitened "
                                          "coordinates; diag-u: the paper's diagonal over u)"})
    ap.add_argument("--entropy", default=None, help="the K = 2 fits' entropy term (default: the library's)")
    ap.add_argument("--verbose", action="store_true", help="one line per seed")
    ap.add_argument("--no-restart", action="store_true", help="no second K = 2 fit (no best-of-2 column)")
    ap.add_argument("--no-gain", action="store_true", help="no K = 1 fit for the two-mode problems (no gain column)")
    ap.add_argument("--options", default="", help="more arguments of the K = 2 fits, e.g. starts=1,reflect=0,anneal=0")
    ap.add_argument("--k1-options", default="", help="more arguments of the K = 1 fits, e.g. anneal=1")
    ap.add_argument("--ks", default="1,2", help="the problems that know their modes (abs300, square2d, rot3, rot4): "
                    "the K of the fits, e.g. 3")
    ap.add_argument("--search", type=int, default=0, metavar="MAX_K",
                    help="run savigp.choose_components up to MAX_K on each problem and seed instead")
    ap.add_argument("--search-restarts", type=int, default=2, help="the search's restarts per K (default 2)")
    ap.add_argument("--prior-mean", type=float, default=None,
                    help="the problems that know their modes: this prior mean for every latent function "
                         "(default: the model's, the targets' best constant where far from 0)")
    ap.add_argument("--converge", action="store_true",
                    help="the problems that know their modes: fit without iterations (fit's convergence rule), and "
                         "count the fits more than 1 nat below the best of their cell with and without a warning")
    args = ap.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if args.search or any(n in many_modes_problems() for n in args.problems.split(",")):
        return _main_known(args)
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


def _main_known(args) -> None:
    """``--search`` or the problems that know their modes: one line per cell (and per seed with
    ``--verbose``)."""
    probs = dict(problems(), **many_modes_problems())
    for name in args.problems.split(","):
        p = probs[name]
        for est in args.estimators.split(","):
            ks = [0] if args.search else [int(k) for k in args.ks.split(",")]
            for K in ks:
                t0, rows = time.time(), []
                for s in range(args.first_seed, args.first_seed + args.seeds):
                    if args.search:
                        r = run_search(p, est, s, args.search, args.search_restarts)
                    else:
                        r = run_known(p, est, s, K, _options(args.options), converge=args.converge,
                                      model_options=None if args.prior_mean is None else {"prior_mean": [args.prior_mean]})
                    rows.append(r)
                    if args.verbose:
                        print(f"  {name} {est} {'search' if args.search else f'K={K}'} seed {s}: "
                              f"{ {k: v for k, v in r.items() if k != 'table'} }", flush=True)
                        if args.search:
                            print(r["table"], flush=True)
                n, secs = len(rows), [r["seconds"] for r in rows]
                if args.search:
                    Ks = [r["K"] for r in rows]
                    kept = sum(bool(r["keeps"]) for r in rows) if rows[0]["keeps"] is not None else None
                    print(f"{name:9s} {est:8s} search up to K = {args.search}: chose "
                          + ", ".join(f"K = {k} in {Ks.count(k)}/{n}" for k in sorted(set(Ks)))
                          + ("" if kept is None else f"; the chosen fit holds every mode with balanced weights in {kept}/{n}")
                          + f"; {statistics.median(secs):.0f} s per search (median; {min(secs):.0f}-{max(secs):.0f})",
                          flush=True)
                else:
                    kept = sum(r["keeps"] for r in rows)
                    warned = sum(r["warned"] for r in rows)
                    print(f"{name:9s} {est:8s} K = {K}: {'on one mode' if K == 1 else 'keeps the modes'} in {kept}/{n}; "
                          f"warned below a start or move in {warned}/{n}; {statistics.median(secs):.0f} s per fit "
                          f"(median); {time.time() - t0:.0f} s", flush=True)
                    _short_of_best(name, est, K, rows)


def _short_of_best(name: str, estimator: str, K: int, rows: list) -> None:
    """The fits of one cell against its best full-data ELBO: how many end more than 1 nat below it,
    and how many of those without a warning that they may have stopped short (issue 57's criterion:
    none)."""
    best = max(r["full_elbo"] for r in rows)
    low = [r for r in rows if r["full_elbo"] < best - 1.0]
    silent = [r for r in low if not r["short"]]
    steps = [r["steps"] for r in rows]
    conv = sum(bool(r["converged"]) for r in rows)
    print(f"{name:9s} {estimator:8s} K = {K}: best full-data ELBO {best:.2f} (s.e. <= {max(r['se'] for r in rows):.2f}); "
          f"{len(low)}/{len(rows)} more than 1 nat below it, {len(silent)} of them without a warning "
          f"({', '.join(format(r['full_elbo'], '.2f') for r in silent) or 'none'}); converged {conv}/{len(rows)}; steps "
          f"{statistics.median(steps):.0f} (median; {min(steps)}-{max(steps)})", flush=True)


if __name__ == "__main__":
    main()
