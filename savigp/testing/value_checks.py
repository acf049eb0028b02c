"""Checks of the values of ``log_prob`` and ``expected_log_prob``: shapes under leading sample
axes, factorization over data points, finiteness, dtype and device following, and the Monte Carlo
and closed-form expectations against Gauss-Hermite quadrature.

Each check takes a :class:`~savigp.testing.problem.Problem` and returns ``(status, message)``.
"""
from __future__ import annotations

import itertools
import math

import torch

from .problem import Problem, copy_to, worst
from .quadrature import draw_rounds, points_per_dimension, reference_expectation
from .report import FAILED, PASSED, SKIPPED

LEADING_SHAPES = ((), (3,), (2, 3))
#: rows used by the expectation checks (quadrature costs n^Q evaluations per row)
EXPECTATION_ROWS = 4
#: Monte Carlo estimates may differ from their reference by this many standard errors
Z = 4.0
#: the discrepancy a Monte Carlo check must resolve, relative to the size of what it compares
#: (1 + abs(E[log p]) for the expectations): its draws stop, in rounds of ``ROUNDS``-ths of
#: ``num_samples``, once Z standard errors are below RESOLUTION times that size (at the latest after
#: ``num_samples`` draws), so a likelihood whose log p hardly varies over q(f) is not drawn 4000 times
RESOLUTION = 0.01
ROUNDS = 8


def shapes(p: Problem):
    """``log_prob(y, f)`` returns ``(..., B)`` for f of shape ``(..., B, Q)``, for several leading
    shapes, in the dtype of f; each leading index gives what the same f alone gives."""
    B = p.y.shape[0]
    for lead in LEADING_SHAPES:
        f = p.draws(lead, offset=1)
        with torch.no_grad():
            out = p.log_prob(f)
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != lead + (B,):
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            return FAILED, (f"log_prob(y {tuple(p.y.shape)}, f {tuple(f.shape)}) returned shape {got}; "
                            f"expected {lead + (B,)} (one value per leading index and data point)")
        if out.dtype != f.dtype:
            return FAILED, f"log_prob returned {out.dtype} for f in {f.dtype}; expected {f.dtype}"
        if lead:
            with torch.no_grad():
                each = [p.log_prob(f[idx]) for idx in itertools.product(*map(range, lead))]
                alone = torch.stack(each).reshape(out.shape)
            if not _close(out, alone):
                return FAILED, worst(out, alone, _excess(out, alone),
                                     f"with f of shape {tuple(f.shape)} the values differ from f[i] passed alone")
    return PASSED, f"leading shapes {[lead for lead in LEADING_SHAPES]}"


def factorizes(p: Problem):
    """log p(y_n | f_n) depends on row n only, as the likelihood factorizes over data points
    (Bonilla et al. 2019, eq. (1)): a subset of the rows gives the same values."""
    B = p.y.shape[0]
    if B < 2:
        return SKIPPED, "needs at least 2 rows of y"
    f = p.draws((2,), offset=2)
    rows = torch.arange(B - 1, -1, -2, device=p.y.device)  # reversed, every other row
    with torch.no_grad():
        full = p.log_prob(f)[..., rows]
        sub = p.likelihood.log_prob(p.y[rows], f[..., rows, :])
    if not _close(sub, full):
        return FAILED, worst(sub, full, _excess(sub, full), "log_prob on rows y[idx] differs from log_prob(y)[..., idx]")
    return PASSED, ""


def finite(p: Problem):
    """``log_prob`` is finite at draws of f ~ N(mean, var) for every row."""
    f = p.draws((8,), offset=3)
    with torch.no_grad():
        out = p.log_prob(f)
    bad = ~torch.isfinite(out).all(0)
    if bool(bad.any()):
        rows = torch.nonzero(bad).flatten()[:5].tolist()
        shown = "; ".join(f"row {r}: y = {p.y[r].tolist()}, values {out[:, r][:3].tolist()}" for r in rows)
        return FAILED, f"{int(bad.sum())} of {len(bad)} rows give NaN or inf at f ~ N(mean, var): {shown}"
    return PASSED, f"{tuple(out.shape)} values"


def dtypes(p: Problem):
    """A float32 copy of the likelihood given float32 inputs returns float32 (log_prob,
    expected_log_prob, conditional_moments)."""
    lik = copy_to(p.likelihood, torch.float32, p.y.device)
    y, m, v = p.y.float(), p.mean.float(), p.var.float()
    got = {"log_prob": lik.log_prob(y, m).dtype}
    if lik.has_closed_form_ell:
        got["expected_log_prob"] = lik.expected_log_prob(y, m, v).dtype
    try:
        moments = lik.conditional_moments(m)
        got["conditional_moments"] = moments[0].dtype
    except NotImplementedError:
        pass
    wrong = {k: str(d) for k, d in got.items() if d != torch.float32}
    if wrong:
        return FAILED, f"float32 inputs gave {wrong}; expected torch.float32 throughout"
    return PASSED, ", ".join(got)


def device(p: Problem):
    """On a CUDA device (when there is one) the likelihood's outputs stay on that device."""
    if not torch.cuda.is_available():
        return SKIPPED, "no CUDA device"
    dev = torch.device("cuda")
    lik = copy_to(p.likelihood, torch.float64, dev)
    out = lik.log_prob(p.y.to(dev), p.mean.to(dev))
    if out.device.type != "cuda":
        return FAILED, f"log_prob of CUDA inputs returned a tensor on {out.device}; expected cuda"
    return PASSED, str(dev)


def monte_carlo_expectation(p: Problem):
    """The Monte Carlo mean of log p(y | f) over draws f ~ N(mean, var) agrees with the reference
    expectation within Z combined standard errors plus the reference's quadrature error. The
    draws come in rounds until Z standard errors are below ``RESOLUTION * (1 + abs(mean))`` or
    ``num_samples`` have been drawn. The check's standard error is the larger of its draws' and
    sd / sqrt(S) with the reference's standard deviation of log p (S draws may all miss a jump
    crossed with probability ~1 / S); the reference's own, if Monte Carlo, is added in quadrature."""
    rows = min(EXPECTATION_ROWS, p.y.shape[0])
    ref = _reference(p, rows)
    if ref is None:
        return SKIPPED, f"Q = {p.num_latent} is too large for a product quadrature rule"
    mc, se, S = _monte_carlo(p, rows, offset=4, floor_sd=ref.sd)
    se = torch.maximum(se, ref.sd / math.sqrt(S))
    combined = (se * se + ref.se * ref.se).sqrt()
    tol = Z * combined + ref.error + 1e-10 * (1 + ref.value.abs())
    excess = (mc - ref.value).abs() - tol
    if bool((excess > 0).any()) or not bool(torch.isfinite(mc).all()):
        return FAILED, worst(mc, ref.value, excess.nan_to_num(math.inf),
                             f"Monte Carlo (S = {S}) vs {ref.method} beyond {Z:g} standard errors")
    ratio = float(torch.where(combined > 0, (mc - ref.value).abs() / combined.clamp_min(1e-300), 0.0).max())
    return PASSED, f"S = {S} draws against {ref.method}: max |MC - reference| / se = {ratio:.2f}"


def closed_form_expectation(p: Problem):
    """``expected_log_prob(y, mean, var)`` (when the likelihood declares it) agrees with the
    reference expectation, with a leading mixture-component axis, to 1e-6 relative plus twice the
    quadrature error (within Z standard errors where the reference is Monte Carlo: Q too large for
    a product rule, or a non-smooth likelihood with Q > 1)."""
    lik = p.likelihood
    if not lik.has_closed_form_ell:
        return SKIPPED, "no closed-form expected_log_prob"
    rows = min(EXPECTATION_ROWS, p.y.shape[0])
    ref = _reference(p, rows)
    if ref is None:
        reference, se, S = _monte_carlo(p, rows, offset=13)
        slack = Z * se + 1e-10 * (1 + reference.abs())
        against = f"Monte Carlo (S = {S}; Q = {p.num_latent} is too large for quadrature)"
    else:
        reference, against = ref.value, ref.method
        slack = 1e-6 * (1 + reference.abs()) + 2 * ref.error + Z * ref.se
    m, v = p.mean[:rows], p.var[:rows]
    with torch.no_grad():
        closed = lik.expected_log_prob(p.y[:rows], m.expand(2, *m.shape), v.expand(2, *v.shape))
    if tuple(closed.shape) != (2, rows):
        return FAILED, f"expected_log_prob with mean and var of shape {(2,) + tuple(m.shape)} returned shape " \
                       f"{tuple(closed.shape)}; expected {(2, rows)}"
    reference = reference.expand(2, rows)
    excess = (closed - reference).abs() - slack
    if bool((excess > 0).any()) or not bool(torch.isfinite(closed).all()):
        return FAILED, worst(closed, reference, excess.nan_to_num(math.inf), f"closed form vs {against}")
    return PASSED, f"max |closed form - {against}| = {float((closed - reference).abs().max()):.2e}"


def _monte_carlo(p: Problem, rows: int, offset: int, floor_sd=None):
    """The mean of log p(y | f) over draws f ~ N(mean, var) and its standard error, each ``(rows,)``,
    and the number of draws S: in rounds (:func:`enough_draws`), at most ``num_samples``."""
    gen = p.generator(offset)

    def draw(k: int):
        with torch.no_grad():
            return p.log_prob(p.draws((k,), rows, generator=gen), rows)

    values = draw_rounds(draw, first=_round(p), step=_round(p), cap=p.num_samples,
                         enough=lambda v: enough_draws(v, floor_sd), progress=p.say, what="Monte Carlo of log p")
    S = values.shape[0]
    return values.mean(0), values.std(0) / math.sqrt(S), S


def _round(p: Problem) -> int:
    return max(100, -(-p.num_samples // ROUNDS))


def enough_draws(values, floor_sd=None, size=None) -> bool:
    """True once Z standard errors of the mean of ``values`` ``(n, ...)`` are below ``RESOLUTION``
    times ``size`` (default 1 + abs(mean)) for every entry; the standard deviation counts as at
    least ``floor_sd`` (a reference's: draws may all miss a rare jump)."""
    n = values.shape[0]
    if n < 2:
        return False
    sd = values.std(0)
    if floor_sd is not None:
        sd = torch.maximum(sd, floor_sd)
    size = 1 + values.mean(0).abs() if size is None else size
    return bool((Z * sd / math.sqrt(n) <= RESOLUTION * size).all())


def _reference(p: Problem, rows: int):
    """The reference expectation of log p(y | f) at the first ``rows`` rows (``None`` where Q is too
    large for a product rule); computed once per problem and shared by both checks."""
    cached = getattr(p, "_reference_cache", None)
    if cached is not None and cached[0] == rows:
        return cached[1]
    if points_per_dimension(p.num_latent) == 0:
        ref = None
    else:
        y = p.y[:rows]
        with torch.no_grad():
            ref = reference_expectation(lambda f: p.likelihood.log_prob(y, f), p.mean[:rows], p.var[:rows],
                                        draws=p.num_samples, generator=p.generator(offset=14),
                                        resolution=RESOLUTION / Z, progress=p.say)
    p._reference_cache = (rows, ref)
    return ref


def _excess(a, b):
    return (a - b).abs() - (1e-8 * b.abs() + 1e-10)


def _close(a, b) -> bool:
    """Equal to 1e-8 relative (NaN where the other is NaN: finiteness is its own check)."""
    return a.shape == b.shape and bool(torch.isclose(a, b, rtol=1e-8, atol=1e-10, equal_nan=True).all())
