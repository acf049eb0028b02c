"""Checks that ``log_prob`` is a density in y and that the likelihood's own moments are its moments.

**Normalization.** For a latent value f and the likelihood's parameters theta, p(y | f, theta) =
exp(log_prob(y, f)) must integrate to one over the support of y,

    int p(y | f, theta) dy = 1   (a sum over 0, 1, 2, ... for counts, over the labels for classes),

which the fit never tests: an unnormalized log-density (a von Mises without its log(2 pi I_0(kappa)),
a density whose normaliser does not follow a learned parameter) is maximized by pushing the
parameter wherever the missing normaliser grows, and the NLPD it reports means nothing. The check
evaluates the integral at several f (the mean and +-2 sd of N(f; mean, var) at the first rows) and
parameter values (the current ones and their raw values times 1.3 and divided by 1.3):

* an interval of the real line (the real line, a half line, (lo, hi), the circle): y = T(u) maps
  the real line onto the interval (T(u) = u, lo + e^u, lo + (hi - lo) sigmoid(u)), the mode of
  p(T(u)) T'(u) is found by a search on geometric then uniform grids, u = c + w tan(theta) maps
  (-pi/2, pi/2) onto the real line around it, and adaptive Gauss-Kronrod quadrature
  (:func:`~savigp.testing.quadrature.gauss_kronrod`) integrates over theta, every case at once;
  a density that does not decay (p(T(u)) T'(u) |u - c| not small far from the mode) is reported as
  not integrable instead;
* counts: the sum over 0..N-1, N doubled until the terms' geometric tail is below 1e-13;
* classes: the sum over the labels (the likelihood's ``classes``, else the distinct rows of y when
  they cover every class of ``class_probabilities``).

The tolerance is the quadrature's own error estimate (times 10) plus 1e-6: a failure names f, the
parameter values, the support and the integral's value.

**Moments.** The same integrals with y and y^2 give E[y | f] and Var[y | f], which
``conditional_moments`` (a user's ``mean_fn``) must reproduce to 1e-6 relative to abs(E) + sd (1e-6
of the variance) plus the quadrature error: a mean function that forgets a zero inflation, or a
variance given as a standard deviation, fails and is named.

**Several outputs.** When log p(y | f) is a sum of one term per output (checked: the mixed
difference over every pair of outputs vanishes), y_p is integrated one output at a time with the
others held at the row's values, I_p = int p(y with y_p = t | f) dt, and the density's total
integral is prod_p I_p / p(y | f)^(P - 1); E[y_p | f] is the mean of I_p's integrand. Otherwise
the check is skipped with that reason.

**Columns** (``check_likelihood(columns=)``, :data:`savigp.testing.problem.COLUMN_ROLES`). Only
the ``"outcome"`` columns are integrated over; a right-censoring indicator (``"event"`` or
``"censored"``) is set to "event" and ``"fixed"`` columns (an exposure, a number of trials) stay at
each row's value. :func:`censored_tail` then checks a censored row's term against the tail of the
event density beyond its time. An outcome on a half-line whose density fails while density / y
integrates to one gets the hint that the Jacobian of a log transform is missing; an integral equal
to v^(+-1/2) or v^(+-1) of a positive parameter v at every f and setting, that v is read as a
variance in one place and as a standard deviation in another.

**Support.** Declared by ``check_likelihood(support=)`` or the likelihood's ``support`` attribute
(``CallableLikelihood(support=)``, :func:`likelihoods.callable.parse_support`); else inferred from
y as candidates: counts for non-negative integers, (0, inf) for positive values, the real line,
then the circle for values within [-pi, pi] (or [0, 2 pi]) and (0, 1) for values inside it; the check passes on the first candidate on which p integrates to one, and a failure
lists what it integrates to on each (:func:`_inferred`).

Each check takes a :class:`~savigp.testing.problem.Problem` and returns ``(status, message)``.
"""
from __future__ import annotations

import copy
import math
import warnings
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
from torch import Tensor

from likelihoods.callable import parse_support

from .problem import Problem
from .quadrature import gauss_kronrod
from .report import FAILED, PASSED, SKIPPED

#: rows whose f values are checked (three f values each: mean and mean +- 2 sd)
ROWS = 4
#: the raw likelihood parameters are also checked times and divided by this
PARAMETER_FACTOR = 1.3
#: tolerance = TOL_FACTOR * the quadrature's error estimate + TOL_FLOOR (relative to the integral for moments)
TOL_FACTOR, TOL_FLOOR = 10.0, 1e-6
#: accuracy asked of the quadrature, relative (absolute below 1e-12)
QUAD_RTOL = 1e-9
#: far from the mode, p(T(u)) T'(u) |u - c| must fall below DECAY times its value at the mode
DECAY = 1e-4
#: the tan map is centred this many widths off the mode (see the comment in _integrate_interval)
OFF_CENTRE = 0.3183
#: counts: the sum is cut where the geometric tail estimate is below this; at most MAX_COUNT terms
COUNT_TAIL, MAX_COUNT = 1e-13, 2 ** 16


# ---------------------------------------------------------------------------- the cases
@dataclass
class _Setting:
    """One parameter setting: its label for messages and the raw values to load."""

    label: str
    raw: dict


@dataclass
class _Result:
    """One output's integrals at every case: ``log_total`` log int p dy, ``rel_error`` its
    relative error estimate, ``mean``, ``var`` the density's moments (None where not computed),
    ``moment_error`` their error estimates, each ``(C,)``; ``decays`` False where the density does
    not decay; ``note``: how it was computed."""

    log_total: Tensor
    rel_error: Tensor
    mean: Optional[Tensor]
    var: Optional[Tensor]
    mean_error: Optional[Tensor]
    var_error: Optional[Tensor]
    decays: Tensor
    note: str


def _settings(lik) -> list:
    """The current parameters, and every learnable raw parameter times and divided by PARAMETER_FACTOR."""
    params = {n: t.detach().clone() for n, t in lik.named_parameters() if t.requires_grad}
    out = [_Setting("", params)]
    if params:
        out.append(_Setting(f"raw parameters x {PARAMETER_FACTOR:g}", {n: t * PARAMETER_FACTOR for n, t in params.items()}))
        out.append(_Setting(f"raw parameters / {PARAMETER_FACTOR:g}", {n: t / PARAMETER_FACTOR for n, t in params.items()}))
    return out


def _load(lik, setting: _Setting) -> str:
    """Load the setting's raw values into ``lik``; returns the parameters as a user reads them."""
    with torch.no_grad():
        for name, t in lik.named_parameters():
            if name in setting.raw:
                t.copy_(setting.raw[name])
    return _describe_parameters(lik)


def _describe_parameters(lik) -> str:
    values = getattr(lik, "parameter_values", None)
    if callable(values):
        named = values()
    else:
        named = {}
        for name, t in lik.named_parameters():
            if not t.requires_grad:
                continue
            owner = name[:-4] if name.endswith(".raw") else None
            module = lik.get_submodule(owner) if owner else None
            named[owner or name] = module() if module is not None and callable(module) else t
    return ", ".join(f"{k} = {_fmt(v)}" for k, v in named.items())


def _fmt(t) -> str:
    t = torch.as_tensor(t).detach().reshape(-1).tolist()
    return f"{t[0]:.4g}" if len(t) == 1 else "[" + ", ".join(f"{v:.4g}" for v in t) + "]"


def _cases(p: Problem):
    """f ``(C, Q)`` at the first rows (mean, mean - 2 sd, mean + 2 sd) and the row of each case ``(C,)``."""
    rows = min(ROWS, p.y.shape[0])
    sd = p.var[:rows].sqrt()
    f = torch.stack([p.mean[:rows], p.mean[:rows] - 2 * sd, p.mean[:rows] + 2 * sd], dim=1)  # (rows, 3, Q)
    return f.reshape(-1, p.num_latent), torch.arange(rows, device=p.y.device).repeat_interleave(3)


def _working_copy(p: Problem):
    """A copy of the likelihood without a ``min_log_prob`` floor (a floored density has no finite
    integral over an unbounded support; the floor is for training, not a part of the density)."""
    lik = copy.deepcopy(p.likelihood)
    if getattr(lik, "min_log_prob", None) is not None:
        lik.min_log_prob = None
    return lik


def _log_density(lik, y_rows: Tensor, f: Tensor) -> Tensor:
    """log p at the rows ``y_rows (N, P)`` and latent values ``f (N, Q)``: ``(N,)``, -inf where it
    is not finite or NaN (outside the support); +inf stays (a failure)."""
    with torch.no_grad(), warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        out = lik.log_prob(y_rows, f)
    return torch.where(torch.isnan(out) | (out == -math.inf), torch.full_like(out, -math.inf), out)


# ---------------------------------------------------------------------------- supports
def _declared(p: Problem):
    """(supports per output, 'declared') or (None, None)."""
    for value, where in ((p.support, "check_likelihood(support=...)"),
                         (getattr(p.likelihood, "support", None), "the likelihood's support")):
        if value is not None:
            if isinstance(value, tuple) and value and isinstance(value[0], tuple) and len(value[0]) == 4 \
                    and isinstance(value[0][0], str):
                return value, where
            return parse_support(value, p.y.shape[1]), where
    return None, None


def _inferred(y: Tensor) -> list:
    """Candidate supports (a tuple of one per output each) for targets ``y (B, P)``: per output,
    counts for non-negative integers (then (0, inf) when they are positive: whole survival days
    are a positive time rounded); (0, inf) for non-negative values; the real line; then, for
    values within [-pi, pi] or [0, 2 pi], the circle, and for values in (0, 1) that interval. A
    value that occurs more than once among non-integer targets is taken for a point mass (a
    censoring point, a zero inflation). The k-th candidate takes each output's k-th choice (its
    last when it has fewer)."""
    choices = []
    for col in y.T:
        c = col[torch.isfinite(col)]
        values, counts = torch.unique(c, return_counts=True)
        atoms = tuple(float(v) for v in values[counts > 1]) if c.numel() and not bool((c == c.round()).all()) else ()
        real, positive = ("interval", -math.inf, math.inf, atoms), ("interval", 0.0, math.inf, atoms)
        if not c.numel():
            choices.append([real])
        elif bool((c >= 0).all()) and bool((c == c.round()).all()):  # counts, or whole days of a positive time
            choices.append([("counts", 0.0, math.inf, ())] + ([positive] if bool((c > 0).all()) else []) + [real])
        elif bool((c >= 0).all()) and (bool((c > 0).all()) or 0.0 in atoms):
            extra = [("circle", 0.0, 2 * math.pi, ())] if bool((c <= 2 * math.pi).all()) else []
            extra += [("interval", 0.0, 1.0, atoms)] if bool((c < 1).all()) else []
            choices.append([positive, real] + extra)
        elif bool((c >= -math.pi).all()) and bool((c <= math.pi).all()):
            choices.append([real, ("circle", -math.pi, math.pi, ())])
        elif bool((c >= 0).all()) and bool((c <= 2 * math.pi).all()):
            choices.append([real, ("circle", 0.0, 2 * math.pi, ())])
        else:
            choices.append([real])
    candidates = []
    for k in range(max(len(c) for c in choices)):
        candidate = tuple(c[min(k, len(c) - 1)] for c in choices)
        if candidate not in candidates:
            candidates.append(candidate)
    return candidates


def _name(support: tuple) -> str:
    kind, lo, hi, atoms = support
    extra = f" and the point mass(es) at {', '.join(f'{a:.4g}' for a in atoms)}" if atoms else ""
    return _name_of_set(kind, lo, hi) + extra


def _name_of_set(kind: str, lo: float, hi: float) -> str:
    if kind == "counts":
        return "the counts 0, 1, 2, ..."
    if kind == "circle":
        return f"the circle [{lo:.4g}, {hi:.4g}]"
    if lo == -math.inf and hi == math.inf:
        return "the real line"
    return f"({lo:.4g}, {hi:.4g})"


def _names(supports: tuple) -> str:
    names = [_name(s) for s in supports]
    return names[0] if len(set(names)) == 1 else "; ".join(f"y{j}: {n}" for j, n in enumerate(names))


# ---------------------------------------------------------------------------- one output's integrals
def _transform(support: tuple):
    """(T, log T', T^-1) mapping the real line onto an interval support."""
    _, lo, hi, _ = support
    if lo == -math.inf and hi == math.inf:
        return (lambda u: u), (lambda u: torch.zeros_like(u)), (lambda t: t)
    if hi == math.inf:
        return (lambda u: lo + torch.exp(u)), (lambda u: u), (lambda t: torch.log((t - lo).clamp_min(1e-300)))
    if lo == -math.inf:
        return (lambda u: hi - torch.exp(u)), (lambda u: u), (lambda t: torch.log((hi - t).clamp_min(1e-300)))
    width = hi - lo
    return ((lambda u: lo + width * torch.sigmoid(u)),
            (lambda u: math.log(width) + torch.nn.functional.logsigmoid(u) + torch.nn.functional.logsigmoid(-u)),
            (lambda t: torch.logit(((t - lo) / width).clamp(1e-12, 1 - 1e-12))))


def _integrate_interval(density, support: tuple, start: Tensor, moments: bool, say) -> _Result:
    """int p(y) dy over an interval support for each of C cases; ``density(t (N, C)) -> log p (N, C)``;
    ``start (C,)`` a point of each case's support near its mass (the row's y)."""
    T, log_dT, T_inv = _transform(support)
    like = start
    _, lo, hi, atoms = support

    def log_g(u: Tensor) -> Tensor:  # u (N, C): log of the integrand in u
        t = T(u)  # an end of the interval reached by rounding (e^-1000 = 0) is outside the open interval
        return torch.where((t <= lo) | (t >= hi), -math.inf, density(t) + log_dT(u))

    c, top = _locate(log_g, T_inv(start).nan_to_num(0.0, 0.0, 0.0))
    w = _width(log_g, c, top)
    far = torch.tensor([-1e6, -1e3, 1e3, 1e6], dtype=like.dtype, device=like.device)
    u_far = c[None, :] + w[None, :] * far[:, None]
    tail = (log_g(u_far) - top[None, :] + torch.log(far.abs())[:, None]).amax(0)  # log of p T' |u - c| / peak / w
    decays = tail < math.log(DECAY)
    if not bool(decays.all()):  # no finite integral to compute: say so rather than chase it
        nan = torch.full_like(start, math.nan)
        return _Result(nan, nan, None, None, None, None, decays, "does not decay")
    say(f"adaptive Gauss-Kronrod over {_name(support)}")
    # centred off the mode by a third of w: a kink at the mode (abs(y - f)) would otherwise sit on a
    # partition edge, within a node's distance of it, where abs(Kronrod - Gauss) cannot see it
    centre = c + OFF_CENTRE * w

    def integrand(theta: Tensor) -> Tensor:  # theta (N,) -> (N, k C)
        u = centre[None, :] + w[None, :] * torch.tan(theta)[:, None]
        log_jac = torch.log(w)[None, :] - 2 * torch.log(torch.cos(theta))[:, None]
        g = torch.exp(log_g(u) + log_jac - top[None, :])
        g = torch.where(torch.isfinite(g), g, torch.zeros_like(g)) if not moments else g.nan_to_num(0.0)
        if not moments:
            return g
        t = T(u)
        return torch.cat([g, g * t, g * t * t], dim=-1)

    half = math.pi / 2
    out = gauss_kronrod(integrand, -half, half, abs_tol=1e-12, rel_tol=QUAD_RTOL, like=like, progress=say)
    C = start.shape[0]
    value = out.value
    if atoms:  # point masses: exp(log p) at an atom is a probability, added to the integral
        a = torch.as_tensor(atoms, dtype=like.dtype, device=like.device)[:, None].expand(len(atoms), C)
        mass = torch.exp(density(a) - top[None, :]).nan_to_num(0.0)  # (A, C)
        parts = [mass.sum(0)] + ([(mass * a).sum(0), (mass * a * a).sum(0)] if moments else [])
        value = value + torch.cat(parts)
    total, err = value[:C], out.error[:C]
    log_total = torch.log(total) + top
    rel_error = err / total.abs()
    if not moments:
        return _Result(log_total, rel_error, None, None, None, None, decays, f"{out.intervals} intervals")
    m1, m2 = value[C:2 * C] / total, value[2 * C:] / total
    e1, e2 = out.error[C:2 * C] / total, out.error[2 * C:] / total
    mean, var = m1, m2 - m1 * m1
    mean_error = e1 + m1.abs() * rel_error
    var_error = e2 + m2.abs() * rel_error + 2 * m1.abs() * mean_error
    return _Result(log_total, rel_error, mean, var, mean_error, var_error, decays, f"{out.intervals} intervals")


def _locate(log_g, u0: Tensor):
    """The mode of each case's integrand ``(C,)`` and its log value: the best of a geometric grid
    around ``u0``, refined three times on uniform grids around the best point."""
    like = u0
    k = torch.arange(-12, 13, dtype=like.dtype, device=like.device)
    steps = torch.cat([torch.zeros(1, dtype=like.dtype, device=like.device), 2.0 ** k, -(2.0 ** k)])
    scale = 1 + u0.abs()
    grid = u0[None, :] + scale[None, :] * steps[:, None]  # (G, C)
    values = log_g(grid)
    best = values.argmax(0)
    c = grid.gather(0, best[None])[0]
    # the gap to the nearest other grid point on either side
    gap = (grid - c[None, :]).abs().masked_fill((grid - c[None, :]).abs() == 0, math.inf).amin(0)
    uniform = torch.linspace(-1, 1, 33, dtype=like.dtype, device=like.device)
    for _ in range(3):
        grid = c[None, :] + gap[None, :] * uniform[:, None]
        values = log_g(grid)
        best = values.argmax(0)
        c = grid.gather(0, best[None])[0]
        gap = gap / 8
    top = log_g(c[None, :])[0]
    return c, torch.where(torch.isfinite(top), top, values.amax(0))


def _width(log_g, c: Tensor, top: Tensor) -> Tensor:
    """The distance from the mode at which the integrand falls by e^2 (the smaller side; from a
    geometric set of distances 2^-30 .. 2^20 times 1 + abs(c))."""
    like = c
    k = torch.arange(-30, 21, dtype=like.dtype, device=like.device)
    h = (2.0 ** k)[:, None] * (1 + c.abs())[None, :]  # (H, C)
    low = torch.minimum(log_g(c[None, :] - h), log_g(c[None, :] + h)) < top[None, :] - 2
    idx = torch.where(low.any(0), low.int().argmax(0), torch.full_like(c, h.shape[0] - 1, dtype=torch.long))
    return h.gather(0, idx[None])[0]


def _sum_counts(density, C: int, like: Tensor, start_max: float, moments: bool, say) -> _Result:
    """sum_k p(k) over k = 0, 1, ..., for each of C cases: N doubles until the geometric tail
    estimate p(N - 1) rho / (1 - rho), rho the ratio of the last terms, is below COUNT_TAIL times the sum."""
    N = int(max(64, 2 ** math.ceil(math.log2(4 * start_max + 16))))
    while True:
        k = torch.arange(N, dtype=like.dtype, device=like.device)
        say(f"sum over the counts 0..{N - 1}")
        lp = density(k[:, None].expand(N, C))  # (N, C)
        top = lp.amax(0)
        top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
        terms = torch.exp(lp - top[None, :])
        total = terms.sum(0)
        last, before = terms[-1], terms[-2]
        rho = torch.where(before > 0, last / before, torch.zeros_like(last))
        tail = torch.where(rho < 1, last * rho / (1 - rho).clamp_min(1e-300), torch.full_like(last, math.inf))
        tail = torch.where(last == 0, torch.zeros_like(tail), tail)
        if bool((tail <= COUNT_TAIL * total).all()) or N >= MAX_COUNT:
            break
        N *= 2
    rel_error = tail / total + N * 1e-16
    decays = tail <= 1e-3 * total
    log_total = torch.log(total) + top
    if not moments:
        return _Result(log_total, rel_error, None, None, None, None, decays, f"{N} terms")
    m1 = (terms * k[:, None]).sum(0) / total
    m2 = (terms * (k * k)[:, None]).sum(0) / total
    err1, err2 = rel_error * (m1.abs() + N), rel_error * (m2.abs() + float(N) ** 2)
    return _Result(log_total, rel_error, m1, m2 - m1 * m1, err1, err2 + 2 * m1.abs() * err1, decays, f"{N} terms")


# ---------------------------------------------------------------------------- the whole density
def _factorizes(lik, y: Tensor, f: Tensor, rows: Tensor, outcomes: list) -> Optional[str]:
    """None when log p(y | f) is a sum of one term per outcome column (``outcomes``: their indices)
    at these cases (the mixed difference over every pair of them vanishes), else a message saying
    where it does not."""
    base = y[rows]  # (C, P)
    other = y[(rows + 1) % y.shape[0]]  # another row's values
    if bool((other == base).all()):
        other = base + 0.5 * (1 + base.abs())
    for i, a in enumerate(outcomes):
        for b in outcomes[i + 1:]:
            ya, yb, yab = base.clone(), base.clone(), base.clone()
            ya[:, a], yb[:, b] = other[:, a], other[:, b]
            yab[:, a], yab[:, b] = other[:, a], other[:, b]
            lp = [_log_density(lik, t, f) for t in (base, ya, yb, yab)]
            mixed = lp[0] - lp[1] - lp[2] + lp[3]
            scale = sum(v.abs() for v in lp)
            bad = ~(mixed.abs() <= 1e-8 * (1 + scale))
            if bool(bad.any()):
                i = int(bad.nonzero()[0, 0])
                return (f"log p(y | f) is not a sum of one term per output: changing y{a} and y{b} together "
                        f"differs from changing each alone by {float(mixed[i]):.3g} (row {int(rows[i])})")
    return None


def _integrate(p: Problem, lik, supports: tuple, f: Tensor, rows: Tensor, moments: bool) -> list:
    """One :class:`_Result` per outcome column (``supports``: one each) at the C cases (f ``(C, Q)``,
    rows ``(C,)``); the other columns held at the row's values, a censoring indicator at "event"."""
    y = p.y
    C = f.shape[0]
    base = p.as_event(y[rows])  # (C, P)
    results = []
    for j, support in zip(p.outcomes, supports):
        say = (lambda line, j=j: p.say(f"output y{j}: {line}")) if len(supports) > 1 else p.say

        density = _outcome_density(lik, base, f, j)
        if support[0] == "counts":
            results.append(_sum_counts(density, C, f, float(y[:, j].max()), moments, say))
        else:
            start = base[:, j].clone()
            _, lo, hi, _ = support
            inside = (start > lo) & (start < hi)
            mid = 0.5 * (lo + hi) if math.isfinite(lo) and math.isfinite(hi) else \
                (lo + 1.0 if math.isfinite(lo) else hi - 1.0 if math.isfinite(hi) else 0.0)
            start = torch.where(inside, start, torch.full_like(start, mid))
            results.append(_integrate_interval(density, support, start, moments and support[0] != "circle", say))
    return results


def _outcome_density(lik, base: Tensor, f: Tensor, j: int):
    """``density(t (N, C)) -> log p (N, C)``: the log density with column j of the cases' targets
    ``base (C, P)`` set to t, at their latent values ``f (C, Q)``."""
    C = base.shape[0]

    def density(t: Tensor) -> Tensor:
        N = t.shape[0]
        y_rows = base[None].expand(N, C, base.shape[1]).clone()
        y_rows[..., j] = t
        out = _log_density(lik, y_rows.reshape(N * C, -1), f[None].expand(N, C, f.shape[1]).reshape(N * C, -1))
        return out.reshape(N, C)

    return density


def _jacobian_hint(p: Problem, run: dict) -> str:
    """For an outcome on a half-line (lo, inf) on which p(y | f) does not integrate to one: a hint
    when p(y | f) / (y - lo) does, at the current parameters -- the density was written for
    log(y - lo) and the Jacobian of that transform, -log(y - lo) in log p, is missing (a log-normal
    or log-logistic time written as the normal density of log t)."""
    lik, f, rows = run["lik"], run["f"], run["rows"]
    base = p.as_event(p.y[rows])
    for supports, _ in run["tried"]:
        for j, (kind, lo, hi, _) in zip(p.outcomes, supports):
            if kind != "interval" or not math.isfinite(lo) or hi != math.inf:
                continue
            density = _outcome_density(lik, base, f, j)
            start = torch.where(base[:, j] > lo, base[:, j], torch.full_like(base[:, j], lo + 1.0))
            res = _integrate_interval(lambda t: density(t) - torch.log(t - lo), (kind, lo, hi, ()), start, False, p.say)
            if bool(_normalized(res.log_total, res.rel_error, res.decays).all()):
                name = "y" if len(p.outcomes) == 1 else f"y{j}"
                shift = name if lo == 0 else f"({name} - {lo:.4g})"
                return (f"p(y | f) / {shift} integrates to 1 over {_name_of_set(kind, lo, hi)}: it is the density of "
                        f"log {shift}, and the Jacobian of the log, -log {shift} in log p(y | f), is missing; ")
    return ""


def _power_hint(run: dict) -> str:
    """A hint when, on some candidate support, the integral equals a power v^k (k = +-1/2, +-1) of
    one positive scalar parameter v at every case and parameter setting: a scale used as a variance
    in one place and as a standard deviation in another (sd^2 where sd is meant, or the reverse)."""
    lik = run["lik"]
    values = getattr(lik, "parameter_values", None)
    if not callable(values):
        return ""
    for supports, per_setting in run["tried"]:
        totals, named = [], []
        for setting, _, log_total, *_ in per_setting:
            _load(lik, setting)
            totals.append(log_total)
            named.append({k: float(np.asarray(v).reshape(-1)[0]) for k, v in values().items()
                          if np.size(v) == 1 and float(np.asarray(v).reshape(-1)[0]) > 0})
        _load(lik, per_setting[0][0])  # the parameters as given (the first setting)
        for name in named[0]:
            if not all(name in n for n in named):
                continue
            for k in (0.5, -0.5, 1.0, -1.0):
                expected = [k * math.log(n[name]) for n in named]
                if all(bool(torch.isfinite(t).all()) and float((t - e).abs().max()) <= 1e-6
                       for t, e in zip(totals, expected)) and any(abs(e) > 1e-3 for e in expected):
                    return (f"p(y | f) integrates to {name}^{k:g} at every f and {name}: {name} is read as a variance "
                            "in one place and as a standard deviation in another (or the reverse); ")
    return ""


def _combine(lik, results: list, base: Tensor, f: Tensor):
    """log of the density's total integral ``(C,)`` and its relative error from per-output results
    at the cases' targets ``base (C, P)``: sum_p log I_p - (P - 1) log p(y | f)."""
    log_total = sum(r.log_total for r in results)
    if len(results) > 1:
        log_total = log_total - (len(results) - 1) * _log_density(lik, base, f)
    return log_total, sum(r.rel_error for r in results)


def _classes(p: Problem, lik, f: Tensor):
    """For classification: (labels (L, P) or None, why not)."""
    classes = getattr(lik, "classes", None)
    if classes is not None:
        return torch.as_tensor(classes, dtype=p.y.dtype, device=p.y.device)[:, None], ""
    labels = torch.unique(p.y, dim=0)
    try:
        with torch.no_grad():
            C = lik.class_probabilities(f[:1]).shape[-1]
    except Exception as err:  # noqa: BLE001 - a failing class_probabilities has its own check
        return None, f"class_probabilities failed ({type(err).__name__})"
    if labels.shape[0] != C:
        return None, (f"y holds {labels.shape[0]} of the {C} classes: give rows of every class to check the sum "
                      "over the labels")
    return labels, ""


def _class_sums(p: Problem, lik, f: Tensor, labels: Tensor):
    """sum over the labels of p(label | f) ``(C,)`` and the label's mean ``(C, P)`` and variance."""
    L, C = labels.shape[0], f.shape[0]
    y_rows = labels[:, None, :].expand(L, C, labels.shape[1]).reshape(L * C, -1)
    lp = _log_density(lik, y_rows, f[None].expand(L, C, f.shape[1]).reshape(L * C, -1)).reshape(L, C)
    probs = lp.exp()
    total = probs.sum(0)
    w = probs / total
    mean = torch.einsum("lc,lp->cp", w, labels)
    second = torch.einsum("lc,lp->cp", w, labels * labels)
    return total, mean, second - mean * mean


def _run(p: Problem):
    """Everything both checks read, computed once per problem: a dict or (status, message)."""
    cached = getattr(p, "_density_cache", None)
    if cached is not None:
        return cached
    lik = _working_copy(p)
    f, rows = _cases(p)
    out: dict = {"f": f, "rows": rows, "lik": lik, "settings": []}
    if lik.task == "classification":
        labels, why = _classes(p, lik, f)
        if labels is None:
            out = (SKIPPED, why)
        else:
            out["kind"] = "classes"
            for setting in _settings(lik):
                params = _load(lik, setting)
                total, mean, var = _class_sums(p, lik, f, labels)
                out["settings"].append((setting, params, torch.log(total), torch.full_like(total, 1e-12), mean, var))
            _load(lik, _settings(lik)[0])
        p._density_cache = out
        return out
    P = len(p.outcomes)
    if P > 1:
        why = _factorizes(lik, p.as_event(p.y), f, rows, p.outcomes)
        if why is not None:
            p._density_cache = (SKIPPED, f"{why}: the {P}-dimensional integral over y is not checked (give the "
                                         "columns that are not outcomes, e.g. a censoring indicator, as "
                                         "check_likelihood(columns=...))")
            return p._density_cache
    declared, where = _declared(p)
    if declared is not None:
        declared = tuple(declared[j] for j in p.outcomes) if len(declared) == p.y.shape[1] else declared
    candidates = [declared] if declared is not None else _inferred(p.y[:, p.outcomes])
    out["declared"] = where
    settings = _settings(lik)
    tried = []
    for supports in candidates:
        per_setting = []
        for setting in settings:
            params = _load(lik, setting)
            results = _integrate(p, lik, supports, f, rows, moments=True)
            log_total, rel_error = _combine(lik, results, p.as_event(p.y[rows]), f)
            decays = torch.stack([r.decays for r in results]).all(0)
            per_setting.append((setting, params, log_total, rel_error, results, decays))
        _load(lik, settings[0])
        tried.append((supports, per_setting))
        if all(_normalized(s[2], s[3], s[5]).all() for s in per_setting):
            break
    out["kind"] = "interval"
    out["tried"] = tried
    p._density_cache = out
    return out


def _normalized(log_total: Tensor, rel_error: Tensor, decays: Tensor) -> Tensor:
    tol = TOL_FACTOR * rel_error.nan_to_num(math.inf) + TOL_FLOOR
    return decays & torch.isfinite(log_total) & ((log_total.exp() - 1).abs() <= tol)


def _where(f: Tensor, params: str, row) -> str:
    at = "f = (" + ", ".join(f"{v:.4g}" for v in f.tolist()) + ")"
    return f"{at}{', ' + params if params else ''} (row {int(row)})"


# ---------------------------------------------------------------------------- the checks
def normalization(p: Problem):
    """exp(log_prob(y, f)) integrates (sums) to one over the support of y at several f and
    parameter values (module docstring); a failure names f, the parameters, the support and the
    integral."""
    run = _run(p)
    if isinstance(run, tuple):
        return run
    f, rows = run["f"], run["rows"]
    if run["kind"] == "classes":
        problems = []
        for setting, params, log_total, _, _, _ in run["settings"]:
            total = log_total.exp()
            bad = ~((total - 1).abs() <= TOL_FLOOR)
            if bool(bad.any()):
                i = int(((total - 1).abs().nan_to_num(math.inf)).argmax())
                problems.append(f"p(y | f) sums to {float(total[i]):.4g} over the labels at "
                                f"{_where(f[i], params, rows[i])}, not 1: is the normaliser missing?")
        if problems:
            return FAILED, "; ".join(problems[:2])
        return PASSED, f"sums to 1 over the labels at {f.shape[0]} f values x {len(run['settings'])} parameter settings"
    supports, per_setting = run["tried"][-1]
    if all(_normalized(s[2], s[3], s[5]).all() for s in per_setting):
        err = max(float(s[3].max()) for s in per_setting)
        how = f"declared by {run['declared']}" if run["declared"] else "inferred from y"
        return PASSED, (f"integrates to 1 over {_names(supports)} ({how}) at {f.shape[0]} f values x "
                        f"{len(per_setting)} parameter settings; max quadrature error {err:.1e}")
    lines = []
    for supports, per_setting in run["tried"]:
        lines.append(_failure_line(supports, per_setting, f, rows))
    lines[0] = _power_hint(run) + lines[0]
    lines[0] = _jacobian_hint(p, run) + lines[0]
    hint = "" if run["declared"] else (" (the support was inferred from y; declare it with check_likelihood(support=...) "
                                       "or CallableLikelihood(support=...): 'real', 'positive', 'unit_interval', "
                                       "'counts', 'circle' or (lo, hi))")
    return FAILED, "; ".join(lines) + hint


def _failure_line(supports, per_setting, f, rows) -> str:
    worst, where = None, None
    for setting, params, log_total, rel_error, results, decays in per_setting:
        ok = _normalized(log_total, rel_error, decays)
        if bool(ok.all()):
            continue
        if not bool(decays.all()):
            i = int((~decays).nonzero()[0, 0])
            return (f"p(y | f) does not decay over {_names(supports)} at {_where(f[i], params, rows[i])}: it has no "
                    "finite integral there (is y bounded, an angle or a count?)")
        off = (log_total.exp() - 1).abs().nan_to_num(math.inf)
        off = torch.where(ok, torch.zeros_like(off), off)
        i = int(off.argmax())
        if worst is None or float(off[i]) > worst[0]:
            worst, where = (float(off[i]), float(log_total[i].exp()), float(rel_error[i])), _where(f[i], params, rows[i])
    n_bad = sum(int((~_normalized(s[2], s[3], s[5])).sum()) for s in per_setting)
    n_all = sum(s[2].numel() for s in per_setting)
    _, value, err = worst
    guess = "is the normaliser missing?" if value > 1 + 1e-3 or value < 1 - 1e-3 else "is a constant slightly off?"
    return (f"integrates to {value:.4g} over {_names(supports)} at {where}, not 1 (quadrature error {err:.1e}; "
            f"{n_bad} of {n_all} points off): {guess}")


def moments(p: Problem):
    """``conditional_moments(f)`` (a user's ``mean_fn``) equals the mean (and the variance, when it
    gives one) of the density at the same f and parameter values, from the integrals of
    :func:`normalization`; a failure names both values and what the difference looks like."""
    run = _run(p)
    if isinstance(run, tuple):
        return run
    lik, f, rows = run["lik"], run["f"], run["rows"]
    if run["kind"] == "classes" and not (getattr(lik, "mean_fn", None) is not None):
        return SKIPPED, ("classification: E[y | f] depends on how the labels are coded; class_probabilities is "
                         "checked against log_prob instead")
    try:
        with torch.no_grad():
            lik.conditional_moments(f[:1].unsqueeze(0))
    except NotImplementedError as err:
        return SKIPPED, f"no conditional moments ({err})"
    if run["kind"] == "classes":
        entries = [(s, params, mean, var, torch.zeros_like(mean), torch.zeros_like(var))
                   for s, params, _, _, mean, var in run["settings"]]
    else:
        supports, per_setting = run["tried"][-1]
        if any(s[0] == "circle" for s in supports):
            return SKIPPED, "y is an angle: its mean depends on where the circle is cut"
        if any(r.mean is None for s in per_setting for r in s[4]):
            return SKIPPED, f"p(y | f) has no finite integral over {_names(supports)} (see normalization)"
        entries = []
        for setting, params, log_total, rel_error, results, decays in per_setting:
            stack = lambda attr: torch.stack([getattr(r, attr) for r in results], dim=-1)  # noqa: E731
            entries.append((setting, params, stack("mean"), stack("var"), stack("mean_error"), stack("var_error")))
    problems, hints = [], []
    checked_var = False
    for setting, params, mean, var, mean_err, var_err in entries:
        _load(lik, setting)
        with torch.no_grad():
            got_mean, got_var = lik.conditional_moments(f)  # (C, P) each: the outcome columns are compared
        if run["kind"] != "classes" and got_mean.shape[-1] == p.y.shape[1]:
            got_mean = got_mean[:, p.outcomes]
            got_var = None if got_var is None else got_var[:, p.outcomes]
        sd = var.clamp_min(0).sqrt()
        finite = torch.isfinite(mean) & torch.isfinite(var)
        tol = TOL_FLOOR * (mean.abs() + sd) + TOL_FACTOR * mean_err.nan_to_num(math.inf)
        bad = finite & ~((got_mean - mean).abs() <= tol)
        if bool(bad.any()):
            problems.append(_moment_line("E[y | f]", got_mean, mean, bad, f, rows, params))
            hints.append(_mean_hint(got_mean, mean, finite))
        if got_var is not None:
            checked_var = True
            ok_var = finite & torch.isfinite(got_var) & (var_err <= 1e-3 * var.abs())
            tol_v = TOL_FLOOR * var.abs() + TOL_FACTOR * var_err.nan_to_num(math.inf)
            bad = ok_var & ~((got_var - var).abs() <= tol_v)
            if bool(bad.any()):
                problems.append(_moment_line("Var[y | f]", got_var, var, bad, f, rows, params))
                hints.append(_var_hint(got_var, var, ok_var))
    _load(lik, _settings(lik)[0])
    if problems:
        hint = next((h for h in hints if h), "")
        return FAILED, "; ".join(problems[:2]) + (f" ({hint})" if hint else "")
    what = "E[y | f] and Var[y | f]" if checked_var else "E[y | f] (no variance given)"
    return PASSED, f"{what} equal the density's at {f.shape[0]} f values x {len(entries)} parameter settings"


def _moment_line(what, got, expected, bad, f, rows, params) -> str:
    off = torch.where(bad, (got - expected).abs(), torch.zeros_like(got))
    i, j = divmod(int(off.reshape(-1).argmax()), got.shape[-1])
    out = f"y{j}: " if got.shape[-1] > 1 else ""
    return (f"{out}conditional_moments (the mean function) gives {what} = {float(got[i, j]):.6g} at "
            f"{_where(f[i], params, rows[i])}, but the density's is {float(expected[i, j]):.6g} "
            f"({int(bad.sum())} of {bad.numel()} values off)")


def _mean_hint(got, expected, ok) -> str:
    ratio = (got / expected)[ok & (expected.abs() > 1e-12)]
    if ratio.numel() >= 2 and float(ratio.std()) <= 1e-3 * float(ratio.abs().mean()):
        return (f"the mean function is {float(ratio.mean()):.4g} times the density's mean at every f: a factor is "
                "missing, e.g. a zero-inflation or mixture weight")
    if ratio.numel() >= 1:
        return "the mean function does not describe this density: is a part of the model (a zero inflation, a mixture component) left out?"
    return ""


def _var_hint(got, expected, ok) -> str:
    g, e = got[ok], expected[ok]
    if not g.numel():
        return ""
    if bool(((g - e.sqrt()).abs() <= 1e-4 * (1 + e.sqrt())).all()):
        return "the variance given is the standard deviation"
    if bool(((g.sqrt() - e).abs() <= 1e-4 * (1 + e)).all()):
        return "the variance given is the square of the density's"
    ratio = g / e
    if float(ratio.std()) <= 1e-3 * float(ratio.abs().mean()):
        return f"the variance given is {float(ratio.mean()):.4g} times the density's at every f"
    return "the variance given does not follow the density"


def censored_tail(p: Problem):
    """Right-censoring (a column declared ``"event"`` or ``"censored"`` by
    ``check_likelihood(columns=)``): a censored row's term is the tail of the event density over
    the outcome beyond the row's value t,

        exp(log p(t, censored | f)) = P(T > t | f) = int_t^hi exp(log p(u, event | f)) du,

    at the cases and parameter settings of :func:`normalization` (which checks that the event
    density integrates to one), by the same quadrature over (t, hi). A failure names f, t and both
    values, and says when the term is the probability before t (the CDF, where a right-censored
    row needs the survival function 1 - CDF)."""
    if p.indicator is None:
        return SKIPPED, "no censoring indicator among the columns (check_likelihood(columns=...))"
    run = _run(p)
    if isinstance(run, tuple):
        return run
    supports, _ = run["tried"][-1]
    kind, lo, hi, _ = supports[0]
    if kind != "interval":
        return SKIPPED, f"the outcome lives on {_name(supports[0])}: only the tail of a continuous outcome is checked"
    lik, f, rows = run["lik"], run["f"], run["rows"]
    (j,) = p.outcomes
    base = p.as_event(p.y[rows])  # (C, P)
    censored = p.as_event(p.y[rows], event=False)
    problems, checked = [], 0
    settings = _settings(lik)
    for setting in settings:
        params = _load(lik, setting)
        term = _log_density(lik, censored, f).exp()  # (C,)
        for i in range(f.shape[0]):
            tail, err = _tail(lik, base[i], f[i], j, (kind, lo, hi), p.say)
            checked += 1
            if abs(float(term[i]) - tail) <= (TOL_FACTOR * err + TOL_FLOOR) * max(tail, 1e-300):
                continue
            at = f"{_where(f[i], params, rows[i])}, t = {float(base[i, j]):.6g}"
            if abs(float(term[i]) - (1 - tail)) <= (TOL_FACTOR * err + TOL_FLOOR) * max(1 - tail, 1e-300):
                problems.append(f"the censored term is {float(term[i]):.6g} at {at}, the event density's probability "
                                f"before t (its CDF), not after it ({tail:.6g}): a right-censored row's term is the "
                                "survival function, 1 - CDF")
            else:
                problems.append(f"the censored term is {float(term[i]):.6g} at {at}, but the event density's tail "
                                f"beyond t integrates to {tail:.6g} (quadrature error {err:.1e}): the censored and the "
                                "event terms do not describe one distribution (a parameter read differently in each, "
                                "e.g. a variance as a standard deviation?)")
            break
    _load(lik, settings[0])
    if problems:
        return FAILED, "; ".join(problems[:2])
    return PASSED, f"the censored term equals the event density's tail beyond t at {checked} cases"


def _tail(lik, y_row: Tensor, f_row: Tensor, j: int, interval: tuple, say) -> tuple:
    """int_t^hi exp(log p(y with y_j = u | f)) du, t = ``y_row[j]`` (``y_row (P,)``, ``f_row (Q,)``),
    over ``interval`` = (kind, lo, hi) of the outcome: (value, relative error estimate)."""
    _, lo, hi = interval
    t = max(float(y_row[j]), lo)
    if not t < hi:
        return 0.0, 0.0

    def density(u: Tensor) -> Tensor:  # u (N, 1) -> log p (N, 1)
        rows = y_row[None].expand(u.shape[0], -1).clone()
        rows[:, j] = u[:, 0]
        return _log_density(lik, rows, f_row[None].expand(u.shape[0], -1))[:, None]

    start = t + 0.5 * (1 + abs(t)) if hi == math.inf else 0.5 * (t + hi)
    res = _integrate_interval(density, ("interval", t, hi, ()), y_row.new_tensor([start]), False, say)
    if not bool(res.decays.all()):
        return math.nan, math.inf
    return float(res.log_total.exp()[0]), float(res.rel_error[0])
