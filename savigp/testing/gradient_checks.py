"""Checks of derivatives: the gradient of ``log_prob`` in f (when the likelihood declares
``differentiable = True``) and in each learnable likelihood parameter, against central finite
differences of the same function,

    d/dx sum_s,n w_sn log p(y_n | f_sn)  ~=  (L(x + h) - L(x - h)) / (2 h),

with fixed random weights w (so that an error in one entry cannot cancel in a plain sum).

Each check takes a :class:`~savigp.testing.problem.Problem` and returns ``(status, message)``.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .problem import Problem, worst
from .report import FAILED, PASSED, SKIPPED

#: rows and leading draws used (each finite difference costs two log_prob calls per entry)
ROWS, DRAWS = 3, 2
#: entries of a parameter checked by finite differences (a random subset beyond this)
MAX_ENTRIES = 12
RTOL = 1e-4


def gradient_in_f(p: Problem):
    """With ``differentiable = True``: ``log_prob`` is differentiable in f and its gradient agrees
    with central differences."""
    if not getattr(p.likelihood, "differentiable", True):
        return SKIPPED, "differentiable = False (the score-function estimator needs no gradient in f)"
    rows = min(ROWS, p.y.shape[0])
    f = p.draws((DRAWS,), rows, offset=6).requires_grad_(True)
    w = torch.randn(f.shape[:-1], generator=p.generator(7), dtype=f.dtype).to(f.device)
    out = p.log_prob(f, rows)
    if not out.requires_grad:
        return FAILED, ("declared differentiable = True but log_prob's result has no gradient with respect to f "
                        "(it leaves torch, e.g. through .numpy() or float())")
    (grad,) = torch.autograd.grad((w * out).sum(), f)
    flat = f.detach().reshape(-1)

    def loss(x: Tensor) -> Tensor:
        return (w * p.log_prob(x.reshape(f.shape), rows)).sum()

    fd = _central(loss, flat, range(flat.numel()))
    return _compare(grad.reshape(-1), fd, "d/df of sum w * log_prob")


def parameter_gradients(p: Problem):
    """Every learnable parameter (``requires_grad``) gets a finite, non-zero gradient from
    ``log_prob`` that agrees with central differences."""
    lik = p.likelihood
    params = [(n, t) for n, t in lik.named_parameters() if t.requires_grad]
    if not params:
        return SKIPPED, "no learnable parameters"
    rows = min(2 * ROWS, p.y.shape[0])
    f = p.draws((DRAWS,), rows, offset=8)
    w = torch.randn(f.shape[:-1], generator=p.generator(9), dtype=f.dtype).to(f.device)
    lik.zero_grad()
    (w * p.log_prob(f, rows)).sum().backward()
    problems, checked = [], []
    for name, t in params:
        if t.grad is None or not bool(torch.isfinite(t.grad).all()) or not bool((t.grad != 0).any()):
            problems.append(f"{name}: gradient {None if t.grad is None else t.grad.tolist()}; expected finite and "
                            "non-zero (does log_prob use the parameter through torch?)")
            continue
        flat = t.detach().reshape(-1)
        picks = range(flat.numel()) if flat.numel() <= MAX_ENTRIES else \
            torch.randperm(flat.numel(), generator=p.generator(10))[:MAX_ENTRIES].tolist()
        original = flat.clone()

        def loss(x: Tensor, t=t, original=original) -> Tensor:
            with torch.no_grad():
                t.copy_(x.reshape(t.shape))
                value = (w * p.log_prob(f, rows)).sum()
                t.copy_(original.reshape(t.shape))
            return value

        fd = _central(loss, flat.clone(), picks)
        status, message = _compare(t.grad.reshape(-1)[list(picks)], fd[list(picks)], f"d/d{name}")
        (problems if status == FAILED else checked).append(message if status == FAILED else name)
    if problems:
        return FAILED, "; ".join(problems)
    return PASSED, ", ".join(checked)


def _central(loss, x: Tensor, picks) -> Tensor:
    """Central differences of the scalar ``loss`` at ``x`` (1-d) in the entries ``picks``; zero elsewhere."""
    out = torch.zeros_like(x)
    for i in picks:
        h = 1e-6 * max(1.0, abs(float(x[i])))
        up, down = x.clone(), x.clone()
        up[i] += h
        down[i] -= h
        with torch.no_grad():
            out[i] = (loss(up) - loss(down)) / (2 * h)
    return out


def _compare(grad: Tensor, fd: Tensor, what: str):
    scale = float(fd.abs().max()) + 1e-8
    excess = (grad - fd).abs() - RTOL * scale
    if bool((excess > 0).any()) or not bool(torch.isfinite(grad).all()):
        return FAILED, worst(grad, fd, excess.nan_to_num(float("inf")), f"{what}: autograd vs central differences "
                             f"beyond {RTOL:g} of the largest entry")
    return PASSED, f"{what}: max |autograd - differences| = {float((grad - fd).abs().max()):.1e}"
