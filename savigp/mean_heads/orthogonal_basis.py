"""The orthogonally decoupled mean basis (Salimbeni et al. 2018, §3.2, App. A): its mathematics and linear
algebra (:func:`kernel_matvec`, the SPD solve with a fused gradient :class:`SPDSolve`, the initial basis
:func:`initial_mean_basis`), used by the head :class:`savigp.mean_heads.OrthogonalMeanHead` (all mean heads
live in :mod:`savigp.mean_heads`).

Each latent function j gets, next to its inducing inputs Z_j (Salimbeni et al. 2018's beta), an extra set of
``G`` mean-basis inputs gamma_j (``(Q, G, D)``) with coefficients a_j (``(Q, G)``, zero at the
start). The head adds to the mean of every mixture component the function

    r_j(x) = (k(x, gamma_j) - k(x, Z_j) K_zz^-1 K(Z_j, gamma_j)) a_j            (Salimbeni et al. 2018, eq. (11))

which lies in the RKHS orthogonal complement of span{k(., z) : z in Z_j}. With

    b_j = K(Z_j, gamma_j) a_j,   w_j = K_zz^-1 b_j,   c_j = L_zz^-1 b_j   (M,)     O(M G + M^2)

the shift is r_j = K(x, gamma_j) a_j - K(x, Z_j) w_j (or - V_j^T c_j with the model's
V_j = L_zz^-1 K_zx, when the model hands V over): O(G + M) per point on top of the coupled model's
work. The KL divergence gains (Salimbeni et al. 2018, App. A, Prop. A.1)

    1/2 a_j^T (K_gamma - K_gamma,Z K_zz^-1 K_Z,gamma) a_j = 1/2 (a_j^T K_gamma a_j - b_j^T w_j),

b_j^T w_j = ||c_j||^2. The head follows the model's two ways of differentiating through K_zz^-1
(:meth:`savigp.mean_heads.OrthogonalMeanHead.basis_terms`): autograd through L_zz, or the fused path where L_zz has
no graph and the gradient -(K_zz^-1 dF/dw) w^T goes to K_zz directly.

Why this is exact for a mixture posterior too: the head shifts every component by the
same function h, orthogonal in the RKHS to the Z-basis. The entropy of q is shift-invariant, and
for each Gaussian component the KL to the prior splits into the coupled part plus 1/2 ||h||^2_H
(the cross term <h, mu_k>_H vanishes by orthogonality and the covariance perturbation lives in
span Psi_Z), so the extra term is the same for every component and leaves sum_k pi_k unchanged.
``tests/savigp/mean_heads/test_decoupled.py`` checks this against an explicit construction of the joint Gaussian
over [Z, gamma].

Large G: the quadratic a^T K_gamma a costs O(G^2). ``kl_columns = C`` replaces it by an unbiased
column-sampled estimate (Salimbeni et al. 2018, App. A.3 and App. E): with a uniformly random set J of C of the
G columns (without replacement, so each column is in J with probability C / G),

    a^T A a = sum_j a_j (A_{:, j}^T a)  ~=  (G / C) sum_{j in J} a_j (A_{:, j}^T a),

unbiased in value and, being linear in the inclusion indicators, in gradient. Two choices of A:

* ``kl_sampling="kernel"`` -- A = K_gamma, the estimate of Salimbeni et al. 2018; then KL = 1/2 (estimate - ||c||^2).
* ``kl_sampling="residual"`` (default) -- A = K_gamma - K_gamma,Z K_zz^-1 K_Z,gamma directly, whose
  sampled rows are K(gamma_J, gamma) a - K(gamma_J, Z) w, O(C G + C M).
  Same mean, much smaller variance when gamma lies where Z already explains the prior (the
  Nystrom part is handled exactly by b^T w instead of being sampled).

Per evaluation: (b, w) are computed once (:meth:`savigp.mean_heads.OrthogonalMeanHead.evaluation_state`)
and passed explicitly to the mean shift and the KL of a training step, and to every chunk of rows of a
prediction, which then costs O(G + M^2) per point (k(x, gamma) a plus the coupled model's work);
the head keeps no state between calls.

Devices and dtypes: every tensor created here follows ``a`` (the module's own dtype and device);
random column indices are drawn on the CPU with the head's generator and moved.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from ..linalg import chunks

KL_SAMPLING = ("residual", "kernel")


def kernel_matvec(kernel, X1: Tensor, X2: Tensor, a: Tensor, max_entries: Optional[int] = None) -> Tensor:
    """k(X1, X2) a for every latent function, ``(Q, N1)``, without holding a large kernel matrix.

    Args:
        kernel: a :class:`savigp.kernels.Kernel` (Q latent functions).
        X1: ``(N1, D)`` or ``(Q, N1, D)``; X2: ``(Q, N2, D)``; a: ``(Q, N2)``.
        max_entries: above ``Q * N1 * N2`` entries the product is formed in blocks of columns of
            X2; under autograd each block is checkpointed (recomputed in the backward pass), so
            memory stays O(max_entries) instead of a few copies of the full Q x N1 x N2 matrix.
            Default: what :func:`savigp.linalg.chunks.memory_budget` allows (2^23 float64 entries on the
            CPU; a tenth of the free memory on CUDA).
    """
    Q, N2 = a.shape
    N1 = X1.shape[-2]
    if max_entries is None:
        max_entries = chunks.memory_budget(a.device) // a.element_size()
    if Q * N1 * N2 <= max_entries:
        return (kernel(X1, X2) @ a.unsqueeze(-1)).squeeze(-1)
    block = max(1, max_entries // max(1, Q * N1))

    def part(x1, x2, aa):
        return (kernel(x1, x2) @ aa.unsqueeze(-1)).squeeze(-1)

    out = None
    for s in range(0, N2, block):
        x2, aa = X2[:, s:s + block], a[:, s:s + block]
        if torch.is_grad_enabled():
            y = checkpoint(part, X1, x2, aa, use_reentrant=False)
        else:
            y = part(X1, x2, aa)
        out = y if out is None else out + y
    if X1 is X2:  # the blocks are other tensors than X1: add back what only K(X, X) has (White's s I)
        out = _with_identity_part(kernel, X1, out, a)
    return out


def rows_matvec(kernel, XJ: Tensor, X: Tensor, a: Tensor, aJ: Tensor) -> Tensor:
    """Rows J of K(X, X) a, ``(Q, C)``, for the rows ``XJ = X[J]`` ``(Q, C, D)`` gathered from ``X``
    ``(Q, N, D)`` and ``aJ = a[J]`` ``(Q, C)``: K(X_J, X) a, plus on the entries (J_c, J_c) what only
    K(X, X) of the same tensor has (White's s; :meth:`savigp.kernels.Kernel.identity_diag`), which
    K(X_J, X) of a gathered copy lacks."""
    return _with_identity_part(kernel, XJ, kernel_matvec(kernel, XJ, X, a), aJ)


def _with_identity_part(kernel, X: Tensor, out: Tensor, a: Tensor) -> Tensor:
    """``out + identity_diag(X) * a`` for a kernel with an identity part, else ``out``."""
    extra = kernel.identity_diag(X) if hasattr(kernel, "identity_diag") else None
    return out if extra is None else out + extra * a


def chol_solve(L: Tensor, b: Tensor) -> Tensor:
    """A^-1 b for A = L L^T, ``L`` ``(..., M, M)``, ``b`` ``(..., M)``: two triangular solves
    (``torch.cholesky_solve`` reads an error flag back to the host, a synchronization on a GPU)."""
    y = torch.linalg.solve_triangular(L, b.unsqueeze(-1), upper=False)
    return torch.linalg.solve_triangular(L.mT, y, upper=True).squeeze(-1)


class SPDSolve(torch.autograd.Function):
    """w = A^-1 b for symmetric positive definite A = L L^T, with L given without graph.

    Backward: dF/db = A^-1 dF/dw, dF/dA = -(A^-1 dF/dw) w^T (A's entries treated as independent,
    which is what the kernel that built A expects)."""

    @staticmethod
    def forward(ctx, A, b, L):
        w = chol_solve(L, b)
        ctx.save_for_backward(L, w)
        return w

    @staticmethod
    def backward(ctx, gw):
        L, w = ctx.saved_tensors
        gb = chol_solve(L, gw)
        gA = -gb.unsqueeze(-1) * w.unsqueeze(-2) if ctx.needs_input_grad[0] else None
        return gA, gb, None


def initial_mean_basis(X: Tensor, num_latent: int, size: int, seed: int = 0) -> Tensor:
    """Initial gamma ``(Q, G, D)``: for each latent function an independent random subset of the
    rows of X (Salimbeni et al. 2018, App. E). When G > N every row is used and the remaining G - N rows are
    resampled rows perturbed by 1e-3 of each input's standard deviation (distinct, so learnable)."""
    N, D = X.shape
    rng = np.random.default_rng([int(seed), 3])
    std = X.std(0).clamp_min(1e-6) if N > 1 else torch.ones(D, dtype=X.dtype, device=X.device)
    out = []
    for _ in range(int(num_latent)):
        if size <= N:
            idx = torch.as_tensor(rng.choice(N, size=size, replace=False), device=X.device)
            out.append(X[idx])
        else:
            extra = torch.as_tensor(rng.choice(N, size=size - N, replace=True), device=X.device)
            noise = torch.as_tensor(rng.standard_normal((size - N, D)), dtype=X.dtype, device=X.device)
            out.append(torch.cat([X[torch.as_tensor(rng.permutation(N), device=X.device)],
                                  X[extra] + 1e-3 * std * noise]))
    return torch.stack(out).clone()
