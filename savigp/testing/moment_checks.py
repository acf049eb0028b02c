"""Checks of the predictive side of a likelihood: ``conditional_moments(f)`` (E[y | f] and
Var[y | f]) and ``predictive_moments(mean, var)`` against Monte Carlo over f ~ N(mean, var) by the
laws of total expectation and variance,

    E[y] = E_f[E[y | f]],   Var[y] = E_f[Var[y | f] + E[y | f]^2] - E[y]^2,

with the standard error of the variance by the delta method (per-draw influence
Var[y | f] + E[y | f]^2 - 2 E[y] E[y | f]).

Each check takes a :class:`~savigp.testing.problem.Problem` and returns ``(status, message)``.
"""
from __future__ import annotations

import math

import torch

from .problem import Problem, worst
from .quadrature import draw_rounds
from .report import FAILED, PASSED, SKIPPED
from .value_checks import EXPECTATION_ROWS, RESOLUTION, ROUNDS, Z, enough_draws

#: Monte Carlo draws of the predictive check at most (conditional moments may be costly per point,
#: e.g. by quadrature for a warped Gaussian)
MAX_DRAWS = 1000


def conditional_moments(p: Problem):
    """``conditional_moments(f)`` returns E[y | f] and Var[y | f] (or None) of shape ``(..., B, P)``,
    the mean finite and the variance non-negative."""
    f = p.draws((3,), offset=11)
    try:
        with torch.no_grad():
            mean, var = p.likelihood.conditional_moments(f)
    except NotImplementedError as err:
        return SKIPPED, f"not implemented ({err})"
    expected = (3,) + tuple(p.y.shape)
    for label, t in (("E[y | f]", mean), ("Var[y | f]", var)):
        if t is not None and tuple(t.shape) != expected:
            return FAILED, f"{label} has shape {tuple(t.shape)} for f of shape {tuple(f.shape)}; expected {expected}"
    if not bool(torch.isfinite(mean).all()):
        return FAILED, "E[y | f] is not finite at draws of f"
    if var is not None and bool((var < 0).any()):
        return FAILED, f"Var[y | f] is negative: min {float(var.min()):.3g}"
    return PASSED, "variance None (mean only)" if var is None else ""


def predictive_moments(p: Problem):
    """``predictive_moments(mean, var)`` (when declared) agrees with Monte Carlo over f of
    ``conditional_moments`` within Z standard errors."""
    lik = p.likelihood
    rows = min(EXPECTATION_ROWS, p.y.shape[0])
    expected = (rows, p.y.shape[1])
    try:
        with torch.no_grad():
            pm, pv = lik.predictive_moments(p.mean[:rows], p.var[:rows])
    except NotImplementedError:
        return SKIPPED, "no predictive_moments"
    if tuple(pm.shape) != expected or tuple(pv.shape) != expected:
        return FAILED, f"predictive_moments(mean {(rows, p.num_latent)}, var) returned shapes {tuple(pm.shape)} and " \
                       f"{tuple(pv.shape)}; expected {expected} each"
    cap = min(p.num_samples, MAX_DRAWS)
    gen = p.generator(12)
    has_var = []

    def draw(k: int):
        with torch.no_grad():
            a, v = lik.conditional_moments(p.draws((k,), rows, generator=gen))
        has_var.append(v is not None)
        return torch.stack([a, a * a if v is None else v + a * a], dim=-1)  # (k, rows, P, 2): E[y | f], E[y^2 | f]

    def enough(values) -> bool:  # Z se of E[y] and Var[y] below RESOLUTION (|E[y]| + sd[y]) and RESOLUTION Var[y]
        a, second = values.unbind(-1)
        mu = a.mean(0)
        total = (second.mean(0) - mu * mu).clamp_min(0)
        if not enough_draws(a, size=mu.abs() + total.sqrt()):
            return False
        se_v = (second - 2 * mu * a).std(0) / math.sqrt(values.shape[0])
        return not has_var[-1] or bool((Z * se_v <= RESOLUTION * total).all())

    try:
        values = draw_rounds(draw, first=max(100, cap // ROUNDS), step=max(100, cap // ROUNDS), cap=cap,
                             enough=enough, progress=p.say, what="Monte Carlo of the predictive moments")
    except NotImplementedError:
        return PASSED, "shapes only (no conditional_moments to compare with)"
    S = values.shape[0]
    a, second = values.unbind(-1)
    v = second - a * a if has_var[-1] else None
    mu = a.mean(0)
    problems = []
    se_mu = a.std(0) / math.sqrt(S)
    excess = (pm - mu).abs() - (Z * se_mu + 1e-10 * (1 + mu.abs()))
    if bool((excess > 0).any()):
        problems.append(worst(pm, mu, excess, f"E[y] vs Monte Carlo (S = {S}) beyond {Z:g} standard errors"))
    if v is not None:
        total = second.mean(0) - mu * mu
        se_v = (second - 2 * mu * a).std(0) / math.sqrt(S)
        ok = torch.isfinite(total) & torch.isfinite(pv)
        excess = torch.where(ok, (pv - total).abs() - (Z * se_v + 1e-10 * (1 + total.abs())), -1.0)
        if bool((excess > 0).any()):
            problems.append(worst(pv, total, excess, f"Var[y] vs Monte Carlo (S = {S}) beyond {Z:g} standard errors"))
    if problems:
        return FAILED, "; ".join(problems)
    return PASSED, f"S = {S}"


def predictive_log_prob(p: Problem):
    """``predictive_log_prob(y, mean, var)`` and ``predictive_class_probabilities(mean, var)`` (when
    declared): the right shapes, and agreement with Monte Carlo over f ~ N(mean, var),

        p(y_n) = E_f[p(y_n | f)] ~= mean_s exp(log_prob(y_n, f_s)),

    within Z standard errors of that mean (compared as probabilities, so that the check holds
    wherever the Monte Carlo mean is informative); the class probabilities at each row's class
    must equal exp(predictive_log_prob) and sum to one over the classes."""
    lik = p.likelihood
    rows = min(EXPECTATION_ROWS, p.y.shape[0])
    y, mean, var = p.y[:rows], p.mean[:rows], p.var[:rows]
    try:
        with torch.no_grad():
            lp = lik.predictive_log_prob(y, mean, var)
    except NotImplementedError:
        lp = None
    probs = None
    if lik.task == "classification":
        try:
            with torch.no_grad():
                probs = lik.predictive_class_probabilities(mean, var)
        except NotImplementedError:
            pass
    if lp is None and probs is None:
        return SKIPPED, "no predictive_log_prob or predictive_class_probabilities"
    if lp is not None and tuple(lp.shape) != (rows,):
        return FAILED, f"predictive_log_prob(y {tuple(y.shape)}, mean {tuple(mean.shape)}, var) returned shape " \
                       f"{tuple(lp.shape)}; expected ({rows},)"
    if probs is not None and (probs.dim() != 2 or probs.shape[0] != rows):
        return FAILED, f"predictive_class_probabilities(mean {tuple(mean.shape)}, var) returned shape " \
                       f"{tuple(probs.shape)}; expected ({rows}, C)"
    gen = p.generator(13)

    def draw(k: int):
        with torch.no_grad():
            return p.log_prob(p.draws((k,), rows, generator=gen), rows).exp()  # (k, rows)

    lik_f = draw_rounds(draw, first=max(100, p.num_samples // ROUNDS), step=max(100, p.num_samples // ROUNDS),
                        cap=p.num_samples, enough=lambda v: enough_draws(v, size=v.mean(0)), progress=p.say,
                        what="Monte Carlo of p(y | f)")
    S = lik_f.shape[0]
    mc, se = lik_f.mean(0), lik_f.std(0) / math.sqrt(S)
    problems = []
    got = {}
    if lp is not None:
        got["predictive_log_prob"] = lp.exp()
    if probs is not None:
        total = probs.sum(-1)
        off = (total - 1).abs()
        if bool((probs < 0).any()) or not bool((off <= 1e-8).all()):
            problems.append(worst(total, torch.ones_like(total), off, "predictive class probabilities do not sum to 1"))
        got["predictive_class_probabilities at the class of y"] = probs.gather(-1, lik.class_index(y)[:, None])[:, 0]
    for what, value in got.items():
        excess = (value - mc).abs() - (Z * se + 1e-10 * (1 + mc.abs()))
        if not bool(torch.isfinite(value).all()):
            problems.append(f"{what} is not finite: {value.tolist()}")
        elif bool((excess > 0).any()):
            problems.append(worst(value, mc, excess, f"{what} (as a probability) vs Monte Carlo (S = {S}) beyond "
                                                     f"{Z:g} standard errors"))
    if problems:
        return FAILED, "; ".join(problems)
    return PASSED, f"S = {S}"
