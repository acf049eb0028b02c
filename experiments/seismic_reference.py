"""An exact posterior reference for the seismic model (Bonilla et al. 2019, §9.8) by Hamiltonian Monte Carlo.

The model (``seismic_model.py``) is the one ``seismic.py`` fits with SAVIGP: Q = 8 latent functions over the sensor
location x (4 layer depths, 4 velocities), independent GP priors

    f_q ~ GP(mu_q, sd_q^2 k(x, x')),   k(x, x') = exp(-(x - x')^2 / (2 x_unit^2)),

(a unit length-scale in units of x / x_unit), and at each of the N = 113 sites the two-way times
y_np ~ N(g_np(f_n), sigma_p^2) of ``likelihoods.Seismic`` (the same object, in physical units:
``depth_scale = velocity_scale = 1``). The sampler runs in whitened coordinates

    f_q = mu_q + sd_q L v_q,   L = chol(k(X, X) + jitter I)  (N, N),   v_q ~ N(0, I_N) a priori,

on the log density (up to a constant)

    log p(v | y) = sum_n log p(y_n | f_n(v)) - |v|^2 / 2,

with the gradient from autograd. All chains are one batch: v has shape ``(chains, Q, N)`` and
every leapfrog step moves all chains with one likelihood call on f of shape ``(chains, N, Q)``.

The sampler (:func:`whitened_hmc`) is a static-trajectory HMC with

* a diagonal inverse mass matrix M^-1 (one entry per coordinate of v, pooled over the chains),
  estimated from warm-up draws in doubling windows (Stan's schedule: a 75-iteration initial
  buffer, slow windows of 25, 50, 100, ... iterations, a 50-iteration terminal buffer), regularized
  as (n var + 5e-3) / (n + 5);
* one step size eps for all chains, tuned by dual averaging (Hoffman and Gelman 2014, Alg. 5)
  toward a mean acceptance probability of ``target_accept`` (0.8), restarted after every mass
  matrix update and fixed at the averaged value after warm-up;
* a randomized number of leapfrog steps per iteration, n = ceil(u T / eps) with u ~ U(0.5, 1.5)
  and T = ``trajectory`` (pi / 2 by default: a quarter period of a unit-variance Gaussian in the
  mass-scaled coordinates, where successive draws are independent), capped at ``max_steps``;
* the Hamiltonian H(v, p) = -log p(v | y) + p^T M^-1 p / 2, p ~ N(0, M), and the Metropolis
  acceptance min(1, exp(H_0 - H_1)); a proposal whose H is not finite, whose gradient is not finite
  anywhere on the trajectory, or with H_1 - H_0 > 1000 is *divergent* and rejected.

Diagnostics (:func:`rhat`, :func:`ess`) follow Vehtari et al. (2021): split, rank-normalized
R-hat (the larger of the bulk and folded-tail values) and the bulk effective sample size of the
rank-normalized split chains, with Geyer's initial monotone sequence. The Monte Carlo standard
error of a posterior mean is std / sqrt(ESS_bulk); of a posterior std (delta method)
sd((f - mean)^2) / (2 std sqrt(ESS_sq)), with ESS_sq the ESS of the squared deviations.

:func:`factorized_std` gives, from the draws, the stds of the best Gaussian factorized across the
latent functions (the form of SAVIGP's posterior), to tell how much of a gap between SAVIGP and
the exact posterior is the factorization itself.

Command line (writes ``reference_x<unit>.csv``: x (m), the 8 posterior means and stds in physical
units, their MC standard errors, ESS and R-hat per site; and ``reference_x<unit>.json``: settings,
diagnostics and the comparison with the shipped MCMC reference; non-default chains, draws, warm-up
or seed add ``_c<C>_d<S>_w<W>_s<seed>`` to the name)::

    python -m experiments.seismic_reference --x-unit 1000 --out results/seismic
    python -m experiments.seismic_reference --x-unit 1 --out results/seismic_x_metres

``seismic.py`` loads that file from its output folder when the settings (x unit, chains, draws,
warm-up, seed and a checksum of the data) match, and computes it otherwise.
"""
from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from experiments import _common as common
from experiments._common import write_text_atomic
from experiments import seismic_model  # (the model's definition: prior, noise, latent names, data loader)

LogLik = Callable[["torch.Tensor"], "torch.Tensor"]  # noqa: F821

DIVERGENCE = 1000.0  # H_1 - H_0 above which a proposal counts as divergent
FULL = {"chains": 4, "draws": 2000, "warmup": 1000}
QUICK = {"chains": 2, "draws": 150, "warmup": 150}


@dataclass
class HMCResult:
    """Posterior summaries from :func:`whitened_hmc`, per site and latent function, each ``(N, Q)``
    in the units of f: ``mean``, ``std`` (ddof 1 over all chains' draws), ``ess_bulk`` (ESS of the
    mean), ``ess_sq`` (ESS of (f - mean)^2), ``rhat``, and the Monte Carlo standard errors

        mcse_mean = std / sqrt(ess_bulk),
        mcse_std = sd_draws((f - mean)^2) / (2 std sqrt(ess_sq))   (delta method on std = sqrt(var)).

    ``diagnostics`` is a JSON-able dict; ``draws`` ``(chains, draws, N, Q)`` if kept."""

    mean: np.ndarray
    std: np.ndarray
    ess_bulk: np.ndarray
    ess_sq: np.ndarray
    rhat: np.ndarray
    mcse_mean: np.ndarray
    mcse_std: np.ndarray
    diagnostics: dict = field(default_factory=dict)
    draws: Optional[np.ndarray] = None


# ------------------------------------------------------------------------------ diagnostics
def _split(x: np.ndarray) -> np.ndarray:
    """Chains ``(C, S, D)`` -> their halves ``(2C, S // 2, D)`` (an odd draw is dropped)."""
    h = x.shape[1] // 2
    return np.concatenate([x[:, :h], x[:, x.shape[1] - h:]], 0)


def _rank_normalize(x: np.ndarray) -> np.ndarray:
    """z = Phi^-1((r - 3/8) / (n + 1/4)) with r the rank of each draw among all n = C S draws of
    its coordinate (ties averaged): ``(C, S, D)`` -> same shape."""
    from scipy.special import ndtri
    from scipy.stats import rankdata

    C, S, D = x.shape
    r = rankdata(x.reshape(C * S, D), axis=0)
    return ndtri((r - 0.375) / (C * S + 0.25)).reshape(C, S, D)


def _rhat_raw(x: np.ndarray) -> np.ndarray:
    """R-hat = sqrt(var_plus / W) of chains ``(C, S, D)``: W the mean within-chain variance,
    var_plus = (S - 1) / S W + B / S, B / S the variance of the chain means. ``(D,)``."""
    S = x.shape[1]
    W = x.var(1, ddof=1).mean(0)
    var_plus = (S - 1) / S * W + x.mean(1).var(0, ddof=1)
    return np.sqrt(var_plus / np.maximum(W, 1e-300))


def rhat(draws: np.ndarray) -> np.ndarray:
    """Split rank-normalized R-hat of ``draws`` ``(C, S, D)`` (C >= 1 chains of S >= 4 draws):
    max(R-hat of the rank-normalized split chains, R-hat of the rank-normalized |x - median|). ``(D,)``."""
    x = _split(np.asarray(draws, dtype=np.float64))
    bulk = _rhat_raw(_rank_normalize(x))
    folded = np.abs(x - np.median(x.reshape(-1, x.shape[-1]), 0))
    return np.maximum(bulk, _rhat_raw(_rank_normalize(folded)))


def ess(draws: np.ndarray, rank_normalize: bool = True) -> np.ndarray:
    """Effective sample size of ``draws`` ``(C, S, D)`` over its split chains: ``(D,)``.

    With m = 2C split chains of n draws, autocovariances acov_t per chain (FFT, biased),
    W the mean within-chain variance and var_plus = (n - 1) / n W + B / n,

        rho_t = 1 - (W - mean_chains acov_t) / var_plus,    rho_0 = 1,
        P_k = rho_2k + rho_2k+1, kept while positive and made non-increasing (Geyer),
        tau = -1 + 2 sum_k P_k,   ESS = m n / max(tau, 1 / log10(m n)).

    ``rank_normalize=True`` gives the bulk ESS; False the ESS of the raw values (e.g. of squares).
    """
    x = _split(np.asarray(draws, dtype=np.float64))
    if rank_normalize:
        x = _rank_normalize(x)
    m, n, D = x.shape
    xc = x - x.mean(1, keepdims=True)
    nfft = 1 << (2 * n - 1).bit_length()
    spec = np.fft.rfft(xc, n=nfft, axis=1)
    acov = np.fft.irfft(spec * spec.conj(), n=nfft, axis=1)[:, :n] / n  # (m, n, D)
    W = acov[:, 0].mean(0) * n / (n - 1)
    var_plus = (n - 1) / n * W + x.mean(1).var(0, ddof=1) if m > 1 else (n - 1) / n * W
    var_plus = np.maximum(var_plus, 1e-300)
    rho = 1.0 - (W - acov.mean(0)) / var_plus  # (n, D)
    rho[0] = 1.0
    K = n // 2
    P = rho[: 2 * K: 2] + rho[1: 2 * K: 2]  # (K, D)
    positive = np.cumprod(P > 0, axis=0).astype(bool)
    P = np.minimum.accumulate(np.where(positive, P, 0.0), axis=0)
    tau = -1.0 + 2.0 * P.sum(0)
    return m * n / np.maximum(tau, 1.0 / math.log10(m * n))


def factorized_std(log_lik: LogLik, draws: np.ndarray, prior_std, chol, max_draws: int = 2000) -> np.ndarray:
    """Stds ``(N, Q)`` of the best Gaussian factorized across the Q latent functions (full across the
    N sites: the form of SAVIGP's q(f) = prod_q q(f_q)), from posterior ``draws`` ``(C, S, N, Q)``.

    The q_q minimizing KL(q || p(f | y)) satisfy the fixed-point condition (the likelihood
    factorizes over sites, so its second derivatives within f_q are diagonal)

        Cov_q(f_q)^-1 = (sd_q^2 K)^-1 + diag_n E_q[-d^2 log p(y_n | f_n) / d f_nq^2],   K = L L^T,

    evaluated here with the expectation under the exact posterior (at most ``max_draws`` of the
    draws, evenly thinned) in place of q. Exact for a linear-Gaussian likelihood; the stds are
    below the marginal posterior stds wherever the latent functions are a-posteriori correlated.

    Args:
        log_lik: as for :func:`whitened_hmc`, f ``(B, N, Q)`` -> ``(B,)``, for any batch size B.
        draws: ``(C, S, N, Q)``.  prior_std: sd ``(Q,)``.  chol: L ``(N, N)``.
    """
    import torch

    C, S, N, Q = draws.shape
    F = torch.as_tensor(np.asarray(draws, dtype=np.float64).reshape(C * S, N, Q))
    F = F[:: max(1, math.ceil(C * S / max_draws))].clone().requires_grad_(True)
    with torch.enable_grad():
        (g,) = torch.autograd.grad(log_lik(F).sum(), F, create_graph=True)
        W = torch.stack([-torch.autograd.grad(g[..., q].sum(), F, retain_graph=q < Q - 1)[0][..., q]
                         for q in range(Q)], -1).mean(0)  # (N, Q)
    L = torch.as_tensor(chol, dtype=torch.float64)
    Kinv = torch.cholesky_inverse(L)
    sd = torch.as_tensor(prior_std, dtype=torch.float64).reshape(-1)
    # the precision of each factor, K^-1 / sd_q^2 + diag(W_q), batched over q; its inverse's
    # diagonal through the Cholesky factor of the precision
    prec = Kinv / (sd * sd)[:, None, None] + torch.diag_embed(W.detach().T)  # (Q, N, N)
    out = torch.cholesky_inverse(torch.linalg.cholesky(prec)).diagonal(dim1=-2, dim2=-1).T  # (N, Q)
    return out.sqrt().numpy()


# ------------------------------------------------------------------------------ sampler
def _adaptation_windows(warmup: int) -> tuple[int, list[int]]:
    """Where warm-up draws start to be collected for the mass matrix, and the iterations (exclusive
    ends) at which it is re-estimated: Stan's schedule, a 75-draw initial buffer, slow windows of
    25, 50, 100, ... draws, a 50-draw terminal buffer (15 % / 75 % / 10 % of ``warmup`` below 150
    iterations, in one slow window; no adaptation below 20)."""
    if warmup < 20:
        return warmup, []
    if warmup < 150:
        return int(0.15 * warmup), [warmup - int(0.1 * warmup)]
    init, term, size = 75, 50, 25
    ends, start = [], init
    while True:
        end = start + size
        if end + 2 * size > warmup - term:
            return init, ends + [warmup - term]
        ends.append(end)
        start, size = end, 2 * size


def whitened_hmc(log_lik: LogLik, prior_mean, prior_std, chol, *, chains: int = 4, draws: int = 2000,
                 warmup: int = 1000, seed: int = 0, target_accept: float = 0.8, trajectory: float = math.pi / 2,
                 max_steps: int = 512, init_scale: float = 0.5, step_size: float = 0.1, keep_draws: bool = False,
                 progress: bool = False) -> HMCResult:
    """HMC on the whitened GP posterior p(v | y), v ``(Q, N)``, f_q = mu_q + sd_q L v_q (module docstring).

    Args:
        log_lik: f ``(C, N, Q)`` -> ``(C,)``, sum over sites of log p(y_n | f_n) per chain; a torch
            expression differentiable in f (it is called once per leapfrog step for all chains).
        prior_mean, prior_std: mu and sd, ``(Q,)`` (sd > 0).
        chol: L ``(N, N)``, lower Cholesky factor of the unit-variance prior correlation of the sites.
        chains: C >= 1 chains, run as one batch (C >= 2 for a meaningful R-hat).
        draws: S >= 4 kept draws per chain after warm-up.
        warmup: adaptation iterations (step size and mass matrix), discarded.
        seed: seeds the one torch generator used (initial points, momenta, steps, acceptances).
        target_accept: the mean acceptance probability the step size is tuned to, in (0, 1).
        trajectory: T > 0, the mean integration time; steps per iteration n = ceil(u T / eps).
        max_steps: the cap on n (counted in ``diagnostics["capped"]``).
        init_scale: chains start at v = init_scale * N(0, I) (over-dispersed within the prior).
        step_size: the initial step size.
        keep_draws: also return all draws of f ``(C, S, N, Q)``.
        progress: print a line per 10 % of the iterations to stderr.

    Returns:
        :class:`HMCResult` (summaries ``(N, Q)`` and the diagnostics: ``rhat_max``,
        ``ess_bulk_min``, ``ess_bulk_median``, ``ess_sq_min``, ``acceptance`` (mean post-warm-up
        acceptance probability), ``step_size``, ``mean_steps``, ``divergences`` (post-warm-up),
        ``capped``, ``gradient_evaluations``, ``seconds``).
    """
    import torch

    for name, v, lo in (("chains", chains, 1), ("draws", draws, 4), ("warmup", warmup, 0),
                        ("max_steps", max_steps, 1)):
        if int(v) != v or int(v) < lo:
            raise ValueError(f"whitened_hmc: {name} must be an integer >= {lo}, got {v!r}")
    if not 0.0 < target_accept < 1.0:
        raise ValueError(f"whitened_hmc: target_accept must lie in (0, 1), got {target_accept!r}")
    for name, v in (("trajectory", trajectory), ("step_size", step_size)):
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"whitened_hmc: {name} must be a finite number > 0, got {v!r}")
    if not (math.isfinite(init_scale) and init_scale >= 0):
        raise ValueError(f"whitened_hmc: init_scale must be a finite number >= 0, got {init_scale!r}")
    dt = torch.float64
    mu = torch.as_tensor(prior_mean, dtype=dt).reshape(-1, 1)
    sd = torch.as_tensor(prior_std, dtype=dt).reshape(-1, 1)
    L = torch.as_tensor(chol, dtype=dt)
    Q, N = mu.shape[0], L.shape[0]
    if sd.shape[0] != Q or not bool((sd > 0).all()):
        raise ValueError(f"whitened_hmc: prior_std must be {Q} numbers > 0 (one per prior mean), "
                         f"got {sd.flatten().tolist()}")
    if L.shape != (N, N):
        raise ValueError(f"whitened_hmc: chol must be a square (N, N) matrix, got shape {tuple(L.shape)}")
    C, S = int(chains), int(draws)
    gen = torch.Generator().manual_seed(int(seed))
    Lt = L.T.contiguous()

    def to_f(v):  # (C, Q, N) -> (C, N, Q)
        return (mu + sd * (v @ Lt)).transpose(1, 2)

    def logp_grad(v):
        with torch.enable_grad():
            v = v.detach().requires_grad_(True)
            lp = log_lik(to_f(v))
            if lp.shape != (C,):
                raise ValueError(f"whitened_hmc: log_lik must return one value per chain, shape ({C},), "
                                 f"got {tuple(lp.shape)} for f of shape ({C}, {N}, {Q})")
            lp = lp - 0.5 * (v * v).sum((1, 2))
            (g,) = torch.autograd.grad(lp.sum(), v)
        bad = ~torch.isfinite(lp) | ~torch.isfinite(g).all(2).all(1)
        return lp.detach(), torch.where(bad[:, None, None], torch.zeros_like(g), g), bad

    v = init_scale * torch.randn(C, Q, N, generator=gen, dtype=dt)
    lp, g, bad = logp_grad(v)
    if bool(bad.any()):
        raise RuntimeError("whitened_hmc: the log density is not finite at the initial points; lower init_scale")
    minv = torch.ones(Q, N, dtype=dt)
    eps = float(step_size)
    win_start, windows = _adaptation_windows(int(warmup))

    # dual averaging state (Hoffman and Gelman 2014): gamma 0.05, t0 10, kappa 0.75
    def da_reset(e):
        return {"mu": math.log(10 * e), "t": 0, "hbar": 0.0, "logbar": 0.0}

    da = da_reset(eps)
    out = torch.empty(C, S, N, Q, dtype=dt)
    window_draws: list = []
    acc_sum, divergences, capped, grads, steps_sum = 0.0, 0, 0, 1, 0
    total = int(warmup) + S
    t0 = time.perf_counter()
    for it in range(total):
        n_steps = math.ceil(float(torch.empty(()).uniform_(0.5, 1.5, generator=gen)) * trajectory / eps)
        if n_steps > max_steps:
            n_steps, capped = max_steps, capped + 1
        p = torch.randn(C, Q, N, generator=gen, dtype=dt) / minv.sqrt()
        H0 = -lp + 0.5 * (p * p * minv).sum((1, 2))
        v1, g1, diverged = v, g, torch.zeros(C, dtype=torch.bool)
        p1 = p + 0.5 * eps * g1
        for k in range(n_steps):
            v1 = v1 + eps * minv * p1
            lp1, g1, b = logp_grad(v1)
            diverged |= b
            p1 = p1 + (eps if k < n_steps - 1 else 0.5 * eps) * g1
        grads += n_steps
        H1 = -lp1 + 0.5 * (p1 * p1 * minv).sum((1, 2))
        dH = H0 - H1
        diverged |= ~torch.isfinite(dH) | (dH < -DIVERGENCE)
        a = torch.exp(torch.clamp(torch.nan_to_num(dH, nan=-1e300), max=0.0))
        a = torch.where(diverged, torch.zeros_like(a), a)  # the Metropolis acceptance probability
        accept = torch.rand(C, generator=gen, dtype=dt) < a
        v = torch.where(accept[:, None, None], v1, v)
        lp = torch.where(accept, lp1, lp)
        g = torch.where(accept[:, None, None], g1, g)
        a_mean = float(a.mean())
        if it < warmup:
            da["t"] += 1
            t = da["t"]
            da["hbar"] = (1 - 1 / (t + 10)) * da["hbar"] + (target_accept - a_mean) / (t + 10)
            log_eps = da["mu"] - math.sqrt(t) / 0.05 * da["hbar"]
            w = t ** -0.75
            da["logbar"] = w * log_eps + (1 - w) * da["logbar"]
            eps = math.exp(log_eps)
            if it >= win_start:
                window_draws.append(v.clone())
            if windows and it + 1 == windows[0]:
                windows.pop(0)
                W = torch.stack(window_draws)  # (n, C, Q, N)
                n = W.shape[0] * C
                var = W.reshape(n, Q, N).var(0)
                minv = (n * var + 5e-3) / (n + 5)
                window_draws = []
                da = da_reset(eps)
            if it + 1 == warmup:
                eps = math.exp(da["logbar"])
        else:
            out[:, it - warmup] = to_f(v)
            acc_sum += a_mean
            divergences += int(diverged.sum())
            steps_sum += n_steps
        if progress and (it + 1) % max(1, total // 10) == 0:
            print(f"[hmc] {it + 1}/{total} eps {eps:.4g} steps {n_steps} accept {a_mean:.2f} "
                  f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    seconds = time.perf_counter() - t0
    F = out.numpy()
    flat = F.reshape(C, S, N * Q)
    mean, std = flat.mean((0, 1)), flat.std((0, 1), ddof=1)
    dev2 = (flat - mean) ** 2
    ess_bulk, ess_sq = ess(flat), ess(dev2, rank_normalize=False)
    mcse_mean = std / np.sqrt(ess_bulk)
    mcse_std = dev2.reshape(C * S, -1).std(0, ddof=1) / (2 * std * np.sqrt(ess_sq))
    r = rhat(flat) if C * S >= 8 else np.full(N * Q, np.nan)
    diag = {"chains": C, "draws": S, "warmup": int(warmup), "seed": int(seed), "target_accept": target_accept,
            "trajectory": trajectory, "step_size": eps, "acceptance": acc_sum / S,
            "mean_steps": steps_sum / S, "divergences": divergences, "capped": capped,
            "gradient_evaluations": grads, "rhat_max": float(np.nanmax(r)), "ess_bulk_min": float(ess_bulk.min()),
            "ess_bulk_median": float(np.median(ess_bulk)), "ess_sq_min": float(ess_sq.min()),
            "seconds": seconds}
    shape = (N, Q)
    return HMCResult(*(a.reshape(shape) for a in (mean, std, ess_bulk, ess_sq, r, mcse_mean, mcse_std)),
                     diagnostics=diag, draws=F if keep_draws else None)


# ------------------------------------------------------------------------------ the seismic model
def prior_cholesky(X, x_unit: float, lengthscale: float = 1.0):
    """L ``(N, N)`` = chol(k(X, X) + jitter I) of the unit-variance SE kernel on X / x_unit ``(N,)``
    or ``(N, 1)`` (metres), k = exp(-(x - x')^2 / (2 lengthscale^2)); the relative jitter of
    ``savigp.linalg.cholesky.robust_cholesky`` (1e-8 in float64, as in the SAVIGP model's K_zz)."""
    import torch

    from savigp import robust_cholesky

    if not (math.isfinite(x_unit) and x_unit > 0):
        raise ValueError(f"x_unit must be a finite number > 0 (metres per unit of x), got {x_unit!r}")
    x = torch.as_tensor(np.asarray(X, dtype=np.float64).reshape(-1)) / x_unit
    K = torch.exp(-0.5 * ((x[:, None] - x[None, :]) / lengthscale) ** 2)
    return robust_cholesky(K, name="seismic prior correlation")


def seismic_log_lik(Y) -> LogLik:
    """log p(y | f) summed over sites for times ``Y`` ``(N, 4)``, f ``(C, N, 8)`` in physical units
    (m, m/s) -> ``(C,)``: ``likelihoods.Seismic`` with the experiment's noise, unit scales."""
    import torch

    from likelihoods import Seismic

    lik = Seismic(4, noise_std=seismic_model.NOISE_STD, depth_scale=1.0, velocity_scale=1.0)
    y = torch.as_tensor(np.asarray(Y, dtype=np.float64))
    return lambda f: lik.log_prob(y, f).sum(-1)


def hmc_reference(Y, X, *, x_unit: float = 1000.0, chains: int = FULL["chains"], draws: int = FULL["draws"],
                  warmup: int = FULL["warmup"], seed: int = 0, progress: bool = False, **kwargs) -> HMCResult:
    """The exact posterior of the seismic model by :func:`whitened_hmc`.

    Args:
        Y: two-way times ``(N, 4)`` (s).  X: sensor locations ``(N,)`` or ``(N, 1)`` (m).
        x_unit: metres per unit of the GP input (the kernel's length-scale is 1 unit).
        chains, draws, warmup, seed, progress, **kwargs: passed to :func:`whitened_hmc`.

    Returns:
        :class:`HMCResult` with ``mean`` and ``std`` ``(N, 8)`` in m and m/s (depths 1-4, then
        velocities 1-4); ``diagnostics`` also holds ``x_unit``, ``data_sha1`` and
        ``factorized_std_ratio`` (Q,): the median over sites of :func:`factorized_std` / std, what
        a Gaussian factorized across the latent functions (SAVIGP's q) reaches at its optimum.
    """
    Y = np.asarray(Y, dtype=np.float64)
    if Y.ndim != 2 or Y.shape[1] != 4 or not np.isfinite(Y).all():
        raise ValueError(f"hmc_reference: Y must be a finite (N, 4) array of two-way times, got shape {Y.shape}")
    if np.asarray(X).size != Y.shape[0]:
        raise ValueError(f"hmc_reference: X must hold one location per row of Y ({Y.shape[0]}), "
                         f"got shape {np.asarray(X).shape}")
    keep = kwargs.pop("keep_draws", False)
    mean, std = seismic_model.prior()
    log_lik, L = seismic_log_lik(Y), prior_cholesky(X, x_unit)
    res = whitened_hmc(log_lik, mean, std, L, chains=chains, draws=draws, warmup=warmup, seed=seed,
                       progress=progress, keep_draws=True, **kwargs)
    ratio = np.median(factorized_std(log_lik, res.draws, std, L) / res.std, 0)
    res.diagnostics.update(x_unit=float(x_unit), data_sha1=data_sha1(Y, X),
                           factorized_std_ratio=[float(r) for r in ratio])
    if not keep:
        res.draws = None
    return res


def data_sha1(Y, X) -> str:
    """A checksum of the data (float64 bytes of Y and X), to validate a cached reference."""
    h = hashlib.sha1(np.ascontiguousarray(Y, dtype=np.float64).tobytes())
    h.update(np.ascontiguousarray(X, dtype=np.float64).tobytes())
    return h.hexdigest()


# ------------------------------------------------------------------------------ files
def reference_stem(out: Path, x_unit: float, chains: int, draws: int, warmup: int, seed: int) -> Path:
    """``out/reference_x<unit>``, with ``_c<chains>_d<draws>_w<warmup>_s<seed>`` appended unless
    these are the defaults (4, 2000, 1000, 0): a quick run does not overwrite the full reference."""
    name = f"reference_x{x_unit:g}"
    if (chains, draws, warmup, seed) != (FULL["chains"], FULL["draws"], FULL["warmup"], 0):
        name += f"_c{chains}_d{draws}_w{warmup}_s{seed}"
    return Path(out) / name


SUMMARIES = ("mean", "std", "mcse_mean", "mcse_std", "ess_bulk", "ess_sq", "rhat")  # CSV blocks, in order


def write_reference(res: HMCResult, X, out: Path) -> Path:
    """``<stem>.csv`` in ``out`` (:func:`reference_stem`): x (m), then per summary of
    :data:`SUMMARIES` one column per latent function (``mean_depth_1``, ...); and ``<stem>.json``
    (``res.diagnostics``). Returns the CSV path."""
    d = res.diagnostics
    stem = reference_stem(out, d["x_unit"], d["chains"], d["draws"], d["warmup"], d["seed"])
    cols = [f"{k}_{n}" for k in SUMMARIES for n in seismic_model.LATENT_NAMES]
    buf = StringIO()  # written atomically: the next run reads it back as its cached reference
    np.savetxt(buf, np.hstack([np.reshape(X, (-1, 1))] + [getattr(res, k) for k in SUMMARIES]),
               delimiter=",", header="x," + ",".join(cols), comments="")
    write_text_atomic(stem.with_suffix(".csv"), buf.getvalue())
    common.write_json_atomic(stem.with_suffix(".json"), res.diagnostics)
    return stem.with_suffix(".csv")


def load_reference(out: Path, x_unit: float, settings: dict) -> Optional[HMCResult]:
    """The reference written by :func:`write_reference` in ``out`` for ``x_unit`` and ``settings``
    (chains, draws, warmup, seed; other keys such as data_sha1 are checked too) if its diagnostics
    match every key of ``settings``, else None."""
    stem = reference_stem(out, x_unit, settings["chains"], settings["draws"], settings["warmup"], settings["seed"])
    try:
        diag = json.loads(stem.with_suffix(".json").read_text())
        table = np.loadtxt(stem.with_suffix(".csv"), delimiter=",", skiprows=1, ndmin=2)
    except (OSError, ValueError):
        return None
    Q = len(seismic_model.LATENT_NAMES)
    if table.shape[1] != 1 + Q * len(SUMMARIES):
        return None
    if any(diag.get(k) != v for k, v in {**settings, "x_unit": float(x_unit)}.items()):
        return None
    blocks = {k: table[:, 1 + i * Q: 1 + (i + 1) * Q] for i, k in enumerate(SUMMARIES)}
    return HMCResult(**blocks, diagnostics=diag)


# ------------------------------------------------------------------------------ CLI
def parse(argv=None):
    p = common.script_parser(__doc__, "seismic", data_folder="seismic", epilog=True)
    p.add_argument("--x-unit", type=float, default=1000.0, help="metres per unit of the GP input (default 1000: km)")
    p.add_argument("--chains", type=int, default=FULL["chains"])
    p.add_argument("--draws", type=int, default=FULL["draws"], help="kept draws per chain")
    p.add_argument("--warmup", type=int, default=FULL["warmup"])
    common.add_seed_argument(p)
    common.add_threads_argument(p, 1, help="torch threads (default 1)")
    p.add_argument("--progress", action="store_true")
    return p.parse_args(argv)


def main(argv=None) -> HMCResult:
    import torch

    args = parse(argv)
    torch.set_num_threads(args.threads)
    out = common.out_dir(args.out, "seismic")
    Y, X, mcmc_mean, mcmc_std = seismic_model.load(common.resolve_data_dir(args.data_dir))
    res = hmc_reference(Y, X, x_unit=args.x_unit, chains=args.chains, draws=args.draws, warmup=args.warmup,
                        seed=args.seed, progress=args.progress)
    err, ratio = seismic_model.agreement(res.mean, res.std, mcmc_mean, mcmc_std)
    res.diagnostics.update({f"mcmc_err_{n}": float(e) for n, e in zip(seismic_model.LATENT_NAMES, err)})
    res.diagnostics.update({f"mcmc_ratio_{n}": float(r) for n, r in zip(seismic_model.LATENT_NAMES, ratio)})
    path = write_reference(res, X, out)
    d = res.diagnostics
    print(f"[seismic_reference] {path}: {d['seconds']:.0f} s, R-hat max {d['rhat_max']:.3f}, bulk ESS min "
          f"{d['ess_bulk_min']:.0f}, acceptance {d['acceptance']:.2f}, step {d['step_size']:.3g}, "
          f"{d['divergences']} divergences")
    print("  vs shipped MCMC: mean err", np.round(err, 2), "std ratio", np.round(ratio, 2))
    if "factorized_std_ratio" in d:
        print("  best factorized-across-latents Gaussian: std / exact std", np.round(d["factorized_std_ratio"], 2))
    return res


if __name__ == "__main__":
    main()
