"""Checks of what a likelihood says about targets: ``validate_targets`` accepts the given rows and
rejects bad ones naming the row, and a classification likelihood's ``class_probabilities`` are
probabilities that agree with its own ``log_prob``.

Each check takes a :class:`~savigp.testing.problem.Problem` and returns ``(status, message)``.
"""
from __future__ import annotations

import math
import re
import warnings

import torch

from likelihoods.base import Likelihood

from .problem import Problem, worst
from .report import FAILED, PASSED, SKIPPED


def validation(p: Problem):
    """``validate_targets`` accepts ``y``, rejects a wrong number of columns naming the shape, and,
    when the likelihood defines its own, rejects a row set to NaN and each ``(y_bad, row)`` of
    ``p.bad_targets`` with a ``ValueError`` naming ``row <index>``."""
    lik = p.likelihood
    try:
        lik.validate_targets(p.y)
    except ValueError as err:
        return FAILED, f"rejected the targets given as valid: {err}"
    P = p.y.shape[1]
    wide = p.y.new_zeros(4, P + 1)
    problems = []
    try:
        lik.validate_targets(wide)
        problems.append(f"accepted y of shape {(4, P + 1)} (the likelihood has output_dim = {P})")
    except ValueError as err:
        if f"(4, {P + 1})" not in str(err):
            problems.append(f"the message for y of shape {(4, P + 1)} does not name that shape: {err}")
    cases = [(torch.as_tensor(b, dtype=p.y.dtype, device=p.y.device), int(r)) for b, r in p.bad_targets]
    if type(lik).validate_targets is not Likelihood.validate_targets:
        row = min(2, p.y.shape[0] - 1)
        nan = p.y.clone()
        nan[row, 0] = math.nan
        cases.insert(0, (nan, row))
    for bad, row in cases:
        try:
            lik.validate_targets(bad)
            problems.append(f"accepted bad targets (row {row}: {bad[row].tolist()})")
        except ValueError as err:
            if not re.search(rf"\brow {row}\b", str(err)):
                problems.append(f"the message for bad row {row} does not name 'row {row}': {err}")
    if problems:
        return FAILED, "; ".join(problems)
    return PASSED, f"{len(cases)} bad target set(s) rejected"


def class_probabilities(p: Problem):
    """Classification only: ``class_probabilities(f)`` has shape ``(..., B, C)``, is non-negative,
    sums to 1 over the classes, and at each row's class (``class_index(y)``) equals
    ``exp(log_prob(y, f))``."""
    lik = p.likelihood
    if lik.task != "classification":
        return SKIPPED, f"task = {lik.task!r}"
    f = p.draws((3,), offset=5)
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        probs = lik.class_probabilities(f)
        own = lik.log_prob(p.y, f).exp()
    B = p.y.shape[0]
    if probs.dim() != 3 or tuple(probs.shape[:-1]) != (3, B):
        return FAILED, f"class_probabilities(f {tuple(f.shape)}) returned shape {tuple(probs.shape)}; expected (3, {B}, C)"
    problems = [f"warned: {w.message}" for w in caught]
    total = probs.sum(-1)
    off = (total - 1).abs()
    if bool((probs < 0).any()) or not bool((off <= 1e-8).all()):
        problems.append(worst(total, torch.ones_like(total), off, "probabilities over the classes do not sum to 1"))
    idx = lik.class_index(p.y)
    if tuple(idx.shape) != (B,) or bool(((idx < 0) | (idx >= probs.shape[-1])).any()):
        problems.append(f"class_index(y) must give (B,) = ({B},) indices in [0, {probs.shape[-1]}), got {idx.tolist()}")
    else:
        at = probs.gather(-1, idx.expand(3, B).unsqueeze(-1)).squeeze(-1)
        excess = (at - own).abs() - 1e-8 * (1 + own.abs())
        if bool((excess > 0).any()):
            problems.append(worst(at, own, excess, "class_probabilities(f) at the class of y differs from exp(log_prob(y, f))"))
    if problems:
        return FAILED, "; ".join(problems)
    return PASSED, f"C = {probs.shape[-1]}"
