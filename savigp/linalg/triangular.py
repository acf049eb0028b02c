"""Triangular solves and blocked products that skip the zero half of a triangular factor or the
redundant half of a symmetric result (the dense linear algebra of the fused moments,
:mod:`savigp.posteriors`).

Every function takes batched matrices ``(..., M, N)`` and works on any device and dtype. The
blocked products split the M rows into ``nb`` blocks of about :data:`TRIANGULAR_BLOCK` and form
only the blocks that can be nonzero (or that are not the mirror of another), with one batched
BLAS call per block.
"""
from __future__ import annotations

import torch
from torch import Tensor


def solve_lower(L: Tensor, B: Tensor, *, transpose: bool = False) -> Tensor:
    """L^-1 B (or L^-T B with ``transpose``) for lower-triangular L and row-major B.

    Written as the right-hand solve (B^T L^-T)^T: LAPACK then reads B^T, a column-major view of
    B, without copying, and the result comes back row-major (the left-hand solve copies B in
    and returns a column-major result, which slows every elementwise operation that follows).
    """
    if transpose:
        return torch.linalg.solve_triangular(L, B.transpose(-1, -2), upper=False, left=False).transpose(-1, -2)
    return torch.linalg.solve_triangular(L.transpose(-1, -2), B.transpose(-1, -2), upper=True,
                                         left=False).transpose(-1, -2)


#: Block size of the triangular and symmetric products (:func:`lower_mm` and friends): rows of
#: the output are formed in blocks of about this many so that the zero half of a triangular
#: factor (or the redundant half of a symmetric result) is skipped: ~(nb + 1) / (2 nb) of the
#: flops of a dense product with nb blocks. 0 disables blocking.
TRIANGULAR_BLOCK = 128


def block_edges(M: int) -> list:
    nb = max(1, min(8, round(M / TRIANGULAR_BLOCK))) if TRIANGULAR_BLOCK > 0 else 1
    return [round(i * M / nb) for i in range(nb + 1)]


def _dense(*operands: Tensor) -> bool:
    """Whether to use the plain dense product: one block, or an autograd graph to record.

    ``bmm(out=...)`` records no graph, and with one (the K > 1 mixture entropy differentiates
    through :func:`lower_factor_gram`) per-block products copied into place cost more than the
    dense product they save flops on (M = 500, K = 2, forward and backward, 2 threads: 13.6-16.1 ms
    blocked against 11.2-12.5 ms dense in four of five alternating runs, the fifth a tie).
    """
    return torch.is_grad_enabled() and any(x.requires_grad for x in operands)


class _Blocked:
    """The operands of one blocked product as 3-D batches ``(prod(batch), rows, cols)``, broadcast
    once, so that each block is one ``torch.bmm(..., out=...)`` on slices of one output."""

    def __init__(self, out_shape: tuple, *operands: Tensor):
        batches = [x.shape[:-2] for x in operands]
        self.batch = batches[0] if all(b == batches[0] for b in batches) else torch.broadcast_shapes(*batches)
        self.ops = tuple(x.expand(*self.batch, *x.shape[-2:]).reshape(-1, *x.shape[-2:]) for x in operands)
        self.out = operands[0].new_empty((self.ops[0].shape[0],) + out_shape)

    def mm(self, rows: slice, cols: slice, a: Tensor, b: Tensor) -> None:
        """out[:, rows, cols] = a @ b for ``a``, ``b`` sliced from :attr:`ops`."""
        torch.bmm(a, b, out=self.out[:, rows, cols])

    def mirror(self, edges: list) -> None:
        """Copy the blocks below the block diagonal to the blocks above it (a symmetric result)."""
        for a, b in zip(edges[:-1], edges[1:]):
            self.out[:, a:b, b:].copy_(self.out[:, b:, a:b].transpose(-1, -2))

    def zero_above_diagonal(self, edges: list) -> None:
        """Zero the blocks above the block diagonal and the strict upper half of the diagonal blocks."""
        for a, b in zip(edges[:-1], edges[1:]):
            self.out[:, a:b, b:].fill_(0.0)
            self.out[:, a:b, a:b].tril_()

    def result(self) -> Tensor:
        return self.out.view(self.batch + self.out.shape[-2:])


def lower_mm(L: Tensor, X: Tensor) -> Tensor:
    """L X for lower-triangular L ``(..., M, M)`` and X ``(..., M, N)``, skipping L's zero blocks."""
    e = block_edges(L.shape[-1])
    if len(e) == 2 or _dense(L, X):
        return torch.matmul(L, X)
    op = _Blocked(X.shape[-2:], L, X)
    l, x = op.ops
    for a, b in zip(e[:-1], e[1:]):
        op.mm(slice(a, b), slice(None), l[:, a:b, :b], x[:, :b, :])
    return op.result()


def upper_t_mm(L: Tensor, X: Tensor) -> Tensor:
    """L^T X for lower-triangular L ``(..., M, M)`` and X ``(..., M, N)``, skipping L's zero blocks."""
    e = block_edges(L.shape[-1])
    if len(e) == 2 or _dense(L, X):
        return torch.matmul(L.transpose(-1, -2), X)
    op = _Blocked(X.shape[-2:], L, X)
    l, x = op.ops
    for a, b in zip(e[:-1], e[1:]):
        op.mm(slice(a, b), slice(None), l[:, a:, a:b].transpose(-1, -2), x[:, a:, :])
    return op.result()


def lower_of_product(X: Tensor, Y: Tensor, *, symmetric: bool = False, upper: str = "zero") -> Tensor:
    """The lower triangle of X Y^T for X, Y ``(..., M, N)``, skipping the blocks strictly above the
    block diagonal: ~(nb + 1) / (2 nb) of a dense product's flops.

    ``symmetric``: X Y^T is symmetric; the result is all of it (mirrored). Else the part above the
    diagonal is zero (``upper="zero"``) or left unspecified (``upper="any"``, for callers that
    read only the lower triangle).
    """
    e = block_edges(X.shape[-2])
    if len(e) == 2 or _dense(X, Y):
        out = torch.matmul(X, Y.transpose(-1, -2))
        return out if (symmetric or upper == "any") else torch.tril(out)
    M = X.shape[-2]
    op = _Blocked((M, M), X, Y)
    x, y = op.ops
    for a, b in zip(e[:-1], e[1:]):
        op.mm(slice(a, None), slice(a, b), x[:, a:, :], y[:, a:b, :].transpose(-1, -2))
    if symmetric:
        op.mirror(e)
    elif upper == "zero":
        op.zero_above_diagonal(e)
    return op.result()


def lower_factor_gram(L: Tensor) -> Tensor:
    """L L^T (all of it, symmetric) for lower-triangular L ``(..., M, M)``.

    Block (rows a:, columns a:b) is L[a:, :b] L[a:b, :b]^T: the columns of L beyond b are zero in
    rows a:b, and the blocks above the diagonal are mirrored. About (nb + 1)(nb + 2) / (6 nb^2)
    of the flops of a dense product (0.31 at nb = 4), against (nb + 1) / (2 nb) for
    :func:`lower_of_product`, which does not know that L is triangular.
    """
    e = block_edges(L.shape[-1])
    if len(e) == 2 or _dense(L):
        return torch.matmul(L, L.transpose(-1, -2))
    M = L.shape[-1]
    op = _Blocked((M, M), L)
    (l,) = op.ops
    for a, b in zip(e[:-1], e[1:]):
        op.mm(slice(a, None), slice(a, b), l[:, a:, :b], l[:, a:b, :b].transpose(-1, -2))
    op.mirror(e)
    return op.result()


def lower_of_sym_times_lower(S: Tensor, L: Tensor) -> Tensor:
    """tril(S L) for symmetric (or any) S and lower-triangular L, both ``(..., M, M)``; the part
    above the diagonal is zero.

    Block (rows a:, columns a:b) is S[a:, a:] L[a:, a:b]: rows of L above a are zero in columns
    a:b. About (nb + 1)(2 nb + 1) / (6 nb^2) of a dense product's flops (0.47 at nb = 4).
    """
    e = block_edges(L.shape[-1])
    if len(e) == 2 or _dense(S, L):
        return torch.tril(torch.matmul(S, L))
    M = L.shape[-1]
    op = _Blocked((M, M), S, L)
    s, l = op.ops
    for a, b in zip(e[:-1], e[1:]):
        op.mm(slice(a, None), slice(a, b), s[:, a:, a:], l[:, a:, a:b])
    op.zero_above_diagonal(e)
    return op.result()
