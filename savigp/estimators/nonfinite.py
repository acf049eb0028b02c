"""The error raised when a likelihood returns NaN or inf, with what a user needs to find the cause.

A log-density must be finite for every f a Gaussian posterior can draw: the score-function
gradient (Bonilla et al. 2019, eq. (25)) is undefined at -inf. :class:`NonFiniteLogProb` names the
likelihood (a user function by its name, file and line), the data rows (as data-row indices, which
the command line turns into file lines), the targets and the f values that produced the bad
values, so that the cause can be reproduced by calling the function by hand.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import Tensor

#: at most this many bad points are shown in a message
SHOWN = 3


def likelihood_name(likelihood) -> str:
    """How messages name a likelihood: a user function by name, file and line, a class by its name."""
    describe = getattr(likelihood, "describe", None)
    return describe() if callable(describe) else type(likelihood).__name__ + ".log_prob"


class NonFiniteLogProb(ValueError):
    """``log_prob`` returned NaN or inf.

    Attributes:
        who: the likelihood's name (see :func:`likelihood_name`).
        rows: the data rows of the shown points (row indices of the batch it was called on, remapped
            to training-data indices by the model), ``list[int]``.
        examples: per shown point ``(row, y list, f list, value)``.
        count, total: how many values were not finite, out of how many.
        hint: an extra sentence (e.g. the ``min_log_prob`` option).
    """

    def __init__(self, who: str, examples: list, count: int, total: int, hint: str = ""):
        self.who, self.examples, self.count, self.total, self.hint = who, examples, count, total, hint
        super().__init__(self.render())

    @property
    def rows(self) -> list:
        return [e[0] for e in self.examples]

    def remap_rows(self, index: Optional[Tensor] = None, offset: int = 0) -> "NonFiniteLogProb":
        """The same error with batch rows r replaced by ``index[r]`` (a mini-batch's data indices) or
        ``r + offset`` (a chunk's first row)."""
        examples = [(int(index[r]) if index is not None else r + offset, *rest) for r, *rest in self.examples]
        return NonFiniteLogProb(self.who, examples, self.count, self.total, self.hint)

    def render(self, where: Callable[[int], str] = lambda r: f"data row {r}") -> str:
        """One line; ``where(row)`` names a data row (the CLI passes one that gives file lines)."""
        shown = "; ".join(f"{where(r)}: y = {_fmt(y)}, f = {_fmt(f)} -> {v}" for r, y, f, v in self.examples)
        return (f"{self.who} returned NaN or inf for {self.count} of {self.total} values ({shown}); a log-density "
                f"must be finite for every f (score-function gradients are undefined at -inf){self.hint}")


def _fmt(values: list) -> str:
    return "[" + ", ".join(f"{v:.4g}" for v in values) + "]"


def non_finite_error(likelihood, y: Tensor, f: Tensor, out: Tensor) -> NonFiniteLogProb:
    """The error for ``out = log_prob(y, f)`` (``out (..., B)``, ``y (B, P)``, ``f (..., B, Q)``)."""
    bad = ~torch.isfinite(out)
    B = out.shape[-1]
    flat_bad = bad.reshape(-1, B)
    flat_f = f.detach().reshape(-1, B, f.shape[-1])
    flat_out = out.detach().reshape(-1, B)
    rows = torch.nonzero(flat_bad.any(0)).flatten()[:SHOWN].tolist()
    examples = []
    for r in rows:
        s = int(torch.nonzero(flat_bad[:, r]).flatten()[0])
        examples.append((r, y[r].tolist(), flat_f[s, r].tolist(), float(flat_out[s, r])))
    hint = ""
    if getattr(likelihood, "min_log_prob", "absent") is None and bool(torch.isneginf(out).any()):
        hint = ("; for a simulator whose density underflows, a floor replaces -inf: min_log_prob=... "
                "(command line: --min-log-prob)")
    return NonFiniteLogProb(likelihood_name(likelihood), examples, int(bad.sum()), out.numel(), hint)
