"""The orthogonally decoupled mean head (Salimbeni et al. 2018, Salimbeni et al. 2018, §3.2, App. A).

Each latent function j gets, next to its inducing inputs Z_j (the seed's beta), an extra set of
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
(:meth:`OrthogonalMeanHead.basis_terms`): autograd through L_zz, or the fused path where L_zz has
no graph and the gradient -(K_zz^-1 dF/dw) w^T goes to K_zz directly.

Why this is exact for a mixture posterior too: the head shifts every component by the
same function h, orthogonal in the RKHS to the Z-basis. The entropy of q is shift-invariant, and
for each Gaussian component the KL to the prior splits into the coupled part plus 1/2 ||h||^2_H
(the cross term <h, mu_k>_H vanishes by orthogonality and the covariance perturbation lives in
span Psi_Z), so the extra term is the same for every component and leaves sum_k pi_k unchanged.
``tests/savigp/test_decoupled.py`` checks this against an explicit construction of the joint Gaussian
over [Z, gamma].

Large G: the quadratic a^T K_gamma a costs O(G^2). ``kl_columns = C`` replaces it by an unbiased
column-sampled estimate (Salimbeni et al. 2018, App. A.3 and App. E): with a uniformly random set J of C of the
G columns (without replacement, so each column is in J with probability C / G),

    a^T A a = sum_j a_j (A_{:, j}^T a)  ~=  (G / C) sum_{j in J} a_j (A_{:, j}^T a),

unbiased in value and, being linear in the inclusion indicators, in gradient. Two choices of A:

* ``kl_sampling="kernel"`` -- A = K_gamma, the seed's estimate; then KL = 1/2 (estimate - ||c||^2).
* ``kl_sampling="residual"`` (default) -- A = K_gamma - K_gamma,Z K_zz^-1 K_Z,gamma directly, whose
  sampled rows are K(gamma_J, gamma) a - K(gamma_J, Z) w, O(C G + C M).
  Same mean, much smaller variance when gamma lies where Z already explains the prior (the
  Nystrom part is handled exactly by b^T w instead of being sampled).

Predictions: when autograd is off, (b, w) are cached, keyed on the identity, storage, version
counter and a random projection of the values of every tensor they depend on (a, gamma, Z and every
kernel parameter and buffer; the values because fused optimizers write parameters in place without
bumping their version counters), so
that a prediction costs O(G + M^2) per point (k(x, gamma) a plus the coupled model's work) and
(b, w) are recomputed only after a parameter changed (optimizer steps, ``load_state_dict``,
``.to()``).

Devices and dtypes: every tensor created here follows ``a`` (the module's own dtype and device);
random column indices are drawn on the CPU with the head's generator and moved.
"""
from __future__ import annotations

import weakref
from typing import Optional

import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from . import _chunks
from ._linalg import jittered

KL_SAMPLING = ("residual", "kernel")


def kernel_matvec(kernel, X1: Tensor, X2: Tensor, a: Tensor, max_entries: Optional[int] = None) -> Tensor:
    """k(X1, X2) a for every latent function, ``(Q, N1)``, without holding a large kernel matrix.

    Args:
        kernel: a :class:`savigp.kernels.Kernel` (Q latent functions).
        X1: ``(N1, D)`` or ``(Q, N1, D)``; X2: ``(Q, N2, D)``; a: ``(Q, N2)``.
        max_entries: above ``Q * N1 * N2`` entries the product is formed in blocks of columns of
            X2; under autograd each block is checkpointed (recomputed in the backward pass), so
            memory stays O(max_entries) instead of a few copies of the full Q x N1 x N2 matrix.
            Default: what :func:`savigp._chunks.memory_budget` allows (2^23 float64 entries on the
            CPU; a tenth of the free memory on CUDA).
    """
    Q, N2 = a.shape
    N1 = X1.shape[-2]
    if max_entries is None:
        max_entries = _chunks.memory_budget(a.device) // a.element_size()
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
    return out


def _chol_solve(L: Tensor, b: Tensor) -> Tensor:
    """A^-1 b for A = L L^T, ``L`` ``(..., M, M)``, ``b`` ``(..., M)``: two triangular solves
    (``torch.cholesky_solve`` reads an error flag back to the host, a synchronization on a GPU)."""
    y = torch.linalg.solve_triangular(L, b.unsqueeze(-1), upper=False)
    return torch.linalg.solve_triangular(L.mT, y, upper=True).squeeze(-1)


class _SPDSolve(torch.autograd.Function):
    """w = A^-1 b for symmetric positive definite A = L L^T, with L given without graph.

    Backward: dF/db = A^-1 dF/dw, dF/dA = -(A^-1 dF/dw) w^T (A's entries treated as independent,
    which is what the kernel that built A expects)."""

    @staticmethod
    def forward(ctx, A, b, L):
        w = _chol_solve(L, b)
        ctx.save_for_backward(L, w)
        return w

    @staticmethod
    def backward(ctx, gw):
        L, w = ctx.saved_tensors
        gb = _chol_solve(L, gw)
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


_PROJECTIONS: dict = {}


def _fingerprint(ts) -> float:
    """<r, concat(ts)> for a fixed random r (per length, dtype and device): changes whenever any
    value changes, except on a measure-zero set of updates (one scalar and, on a GPU, one sync)."""
    flat = torch.cat([t.detach().reshape(-1).to(ts[0].dtype) for t in ts])
    key = (flat.numel(), flat.dtype, str(flat.device))
    r = _PROJECTIONS.get(key)
    if r is None:
        gen = torch.Generator().manual_seed(0)
        r = _PROJECTIONS[key] = torch.randn(flat.numel(), generator=gen, dtype=torch.float64).to(flat)
    return float(flat @ r)


class OrthogonalMeanHead(nn.Module):
    """The orthogonally decoupled mean basis of Salimbeni et al. 2018 for Q latent functions.

    Args:
        X: training inputs ``(N, D)`` (gamma is initialized from random rows).
        num_latent: Q.
        size: G = len(gamma) per latent function (Salimbeni et al. 2018 uses G a few times M).
        seed: seeds the initial subset and the head's generator for column sampling.
        learn_inputs: learn gamma (otherwise it is a fixed buffer).
        gamma_inputs: explicit initial gamma ``(G, D)`` or ``(Q, G, D)`` instead of a subset of X.
        kl_columns: None (exact quadratic, O(G^2)) or C < G sampled columns per evaluation.
        kl_sampling: ``"residual"`` or ``"kernel"`` (see the module docstring).

    Parameters: ``gamma`` ``(Q, G, D)`` and ``a`` ``(Q, G)`` (the seed's a_gamma, zero-initialized,
    so a fresh head leaves the coupled model exactly unchanged).

    The DECOUPLED and HYBRID bases (:mod:`savigp.mean_bases`) subclass this head without the
    projection; ``orthogonal`` and ``coupled_mean`` (whether the posterior's own mean m is part of
    the mean) tell the training loops which one they have.
    """

    orthogonal = True
    coupled_mean = True

    def __init__(self, X: Tensor, num_latent: int, size: int, seed: int = 0, *, learn_inputs: bool = True,
                 gamma_inputs=None, kl_columns: Optional[int] = None, kl_sampling: str = "residual"):
        super().__init__()
        X = torch.as_tensor(X)
        if X.dim() != 2:
            raise ValueError(f"OrthogonalMeanHead: X must have shape (N, D), got {tuple(X.shape)}")
        Q, G = int(num_latent), int(size)
        if Q < 1 or G < 1:
            raise ValueError(f"OrthogonalMeanHead: need num_latent >= 1 and size >= 1, got Q={Q}, G={G}")
        D = X.shape[1]
        if gamma_inputs is not None:
            gamma = torch.as_tensor(gamma_inputs, dtype=X.dtype, device=X.device)
            if gamma.dim() == 2:
                gamma = gamma.unsqueeze(0).expand(Q, *gamma.shape).clone()
            if tuple(gamma.shape) != (Q, G, D):
                raise ValueError(f"gamma_inputs must have shape ({G}, {D}) or ({Q}, {G}, {D}), got {tuple(gamma.shape)}")
        else:
            gamma = initial_mean_basis(X, Q, G, seed=seed)
        if not torch.isfinite(gamma).all():
            raise ValueError("gamma_inputs contain NaN or inf")
        if learn_inputs:
            self.gamma = nn.Parameter(gamma)
        else:
            self.register_buffer("gamma", gamma)
        self.a = nn.Parameter(torch.zeros(Q, G, dtype=gamma.dtype, device=gamma.device))
        self.num_latent, self.size, self.input_dim = Q, G, D
        self.kl_columns = kl_columns
        self.kl_sampling = kl_sampling
        self.generator = torch.Generator().manual_seed(int(seed) + 1_000_003)
        self._cache_key = None
        self._cache_terms: Optional[tuple] = None
        self._stash = None  # (weakref to Lzz, b, w) from the last mean_shift under autograd, reused by kl
        self.cache_hits = 0

    def attach(self, posterior) -> None:
        """Called once by :func:`savigp.mean_bases.make_mean_head` with the model's posterior (or
        None) after the head is built: a head that constrains the posterior does it here (the
        DECOUPLED head fixes its mean at zero); this one leaves it as it is."""

    # ------------------------------------------------------------------ settings
    @property
    def kl_columns(self) -> Optional[int]:
        return self._kl_columns

    @kl_columns.setter
    def kl_columns(self, value: Optional[int]) -> None:
        if value is not None and int(value) < 1:
            raise ValueError(f"kl_columns must be None (exact) or >= 1, got {value}")
        self._kl_columns = None if value is None else int(value)

    @property
    def kl_sampling(self) -> str:
        return self._kl_sampling

    @kl_sampling.setter
    def kl_sampling(self, value: str) -> None:
        if value not in KL_SAMPLING:
            raise ValueError(f"kl_sampling must be one of {KL_SAMPLING}, got {value!r}")
        self._kl_sampling = value

    # ------------------------------------------------------------------ the shared vectors b, w
    def _key(self, kernel, Z: Tensor) -> tuple:
        ts = [self.a, self.gamma, Z, *kernel.parameters(), *kernel.buffers()]
        layout = tuple((id(t), t.data_ptr(), t._version, t.dtype, t.device, tuple(t.shape)) for t in ts)
        return layout + (_fingerprint(ts),)

    def basis_terms(self, kernel, Z: Tensor, Lzz: Tensor, Kzz: Optional[Tensor] = None,
                    jitter_rel: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
        """b_j = K(Z_j, gamma_j) a_j and w_j = K_zz^-1 b_j, each ``(Q, M)`` (so c_j = L_zz^-1 b_j has
        ||c_j||^2 = b_j^T w_j and V_j^T c_j = K_xz w_j).

        Two ways to differentiate through K_zz^-1, matching the model's two paths:

        * ``Kzz`` None: autograd through ``Lzz`` (which then carries the graph, the reference path);
        * ``Kzz`` given (with the relative ``jitter_rel`` that was added before factorizing, and
          ``Lzz`` without graph, the model's fused path): the gradient dF/dK_zz = -(K_zz^-1 dF/dw) w^T
          is handed to K_zz directly, with no Cholesky backward.

        Under ``torch.no_grad`` the result is cached until a parameter changes (module docstring).
        """
        if not torch.is_grad_enabled():
            key = self._key(kernel, Z)
            if key == self._cache_key and self._cache_terms is not None:
                self.cache_hits += 1
                return self._cache_terms
            out = self._basis_terms(kernel, Z, Lzz, Kzz, jitter_rel)
            self._cache_key, self._cache_terms = key, out
            return out
        return self._basis_terms(kernel, Z, Lzz, Kzz, jitter_rel)

    def _basis_terms(self, kernel, Z, Lzz, Kzz, jitter_rel):
        b = kernel_matvec(kernel, Z, self.gamma, self.a)  # (Q, M)
        if Kzz is not None and torch.is_grad_enabled() and Kzz.requires_grad:
            A = jittered(Kzz, 0.0 if jitter_rel is None else jitter_rel)  # the matrix that Lzz factorizes
            w = _SPDSolve.apply(A, b, Lzz.detach())
        else:
            w = _chol_solve(Lzz, b)
        return b, w

    def coefficients(self, kernel, Z: Tensor, Lzz: Tensor) -> Tensor:
        """c_j = L_zz^-1 K(Z_j, gamma_j) a_j, ``(Q, M)`` (= L_zz^T w_j)."""
        _, w = self.basis_terms(kernel, Z, Lzz)
        return (Lzz.transpose(-1, -2) @ w.unsqueeze(-1)).squeeze(-1)

    def clear_cache(self) -> None:
        self._cache_key, self._cache_terms, self._stash = None, None, None

    def _apply(self, fn, *args, **kwargs):
        self.clear_cache()
        return super()._apply(fn, *args, **kwargs)

    # ------------------------------------------------------------------ marginal means
    def mean_shift(self, X: Tensor, kernel, Z: Tensor, Lzz: Tensor, V: Optional[Tensor] = None, *,
                   Kzx: Optional[Tensor] = None, Kzz: Optional[Tensor] = None,
                   jitter_rel: Optional[Tensor] = None) -> Tensor:
        """r_j(x_n) = k(x_n, gamma_j) a_j - k(x_n, Z_j) K_zz^-1 K(Z_j, gamma_j) a_j, shape ``(Q, B)``
        (broadcasts to ``(K, Q, B)``).

        Args:
            X: ``(B, D)``; Z: inducing inputs ``(Q, M, D)``; Lzz: Cholesky factors of K_zz
                ``(Q, M, M)``.
            V: L_zz^-1 K_zx ``(Q, M, B)`` as formed by the model's reference path (then
                r = K_x,gamma a - V^T c), or
            Kzx: K_zx ``(Q, M, B)`` (then r = K_x,gamma a - K_xz w), with ``Kzz`` / ``jitter_rel``
                for the fused gradient (see :meth:`basis_terms`).
        """
        if (V is None) == (Kzx is None):
            raise ValueError("mean_shift needs exactly one of V (= L_zz^-1 K_zx) and Kzx")
        b, w = self.basis_terms(kernel, Z, Lzz, Kzz, jitter_rel)
        if torch.is_grad_enabled():
            self._stash = (weakref.ref(Lzz), b, w)
        if V is not None:
            c = (Lzz.transpose(-1, -2) @ w.unsqueeze(-1)).squeeze(-1)
            proj = (V * c.unsqueeze(-1)).sum(-2)
        else:
            proj = (Kzx * w.unsqueeze(-1)).sum(-2)
        return kernel_matvec(kernel, X, self.gamma, self.a) - proj

    # ------------------------------------------------------------------ KL
    def kl(self, kernel, Z: Tensor, Lzz: Tensor, *, Kzz: Optional[Tensor] = None, jitter_rel: Optional[Tensor] = None,
           columns: Optional[int] = None, generator: Optional[torch.Generator] = None, posterior=None,
           mean: Optional[Tensor] = None) -> Tensor:
        """The extra KL term sum_j 1/2 a_j^T (K_gamma - K_gamma,Z K_zz^-1 K_Z,gamma) a_j (a scalar).

        Args:
            Kzz, jitter_rel: as in :meth:`basis_terms` (the model's fused path).
            columns: sampled columns (default ``self.kl_columns``; None or >= G means exact).
            generator: CPU torch.Generator for the column draws (default the head's own).
            posterior, mean: the coupled means, unused here (by orthogonality the KL does not
                depend on them; the HYBRID head of :mod:`savigp.mean_bases` needs them).
        """
        bw = None
        if self._stash is not None:
            ref, b, w = self._stash
            self._stash = None
            if ref() is Lzz:  # reuse this step's mean_shift terms (same graph, no recomputation)
                bw = (b, w)
        b, w = bw if bw is not None else self.basis_terms(kernel, Z, Lzz, Kzz, jitter_rel)
        nystrom = (b * w).sum()  # sum_j ||c_j||^2
        C = self.kl_columns if columns is None else int(columns)
        G = self.size
        if C is None or C >= G:
            quad = (self.a * kernel_matvec(kernel, self.gamma, self.gamma, self.a)).sum()
            return 0.5 * (quad - nystrom)
        idx = self.sample_columns(C, generator)
        if self.kl_sampling == "kernel":
            return 0.5 * (self._sampled_kernel_quadratic(kernel, idx) - nystrom)
        return 0.5 * self._sampled_residual_quadratic(kernel, Z, w, idx)

    def sample_columns(self, columns: int, generator: Optional[torch.Generator] = None) -> Tensor:
        """C distinct column indices per latent function, uniformly at random, ``(Q, C)``."""
        gen = self.generator if generator is None else generator
        Q, G = self.num_latent, self.size
        idx = torch.stack([torch.randperm(G, generator=gen)[:columns] for _ in range(Q)])
        return idx.to(self.a.device)

    def _gather(self, idx: Tensor) -> tuple[Tensor, Tensor]:
        gJ = torch.gather(self.gamma, 1, idx.unsqueeze(-1).expand(-1, -1, self.input_dim))  # (Q, C, D)
        aJ = torch.gather(self.a, 1, idx)  # (Q, C)
        return gJ, aJ

    def _sampled_kernel_quadratic(self, kernel, idx: Tensor) -> Tensor:
        """(G / C) sum_{j in J} a_j (K_gamma a)_j: unbiased for sum_q a_q^T K_gamma a_q."""
        gJ, aJ = self._gather(idx)
        colJ = kernel_matvec(kernel, gJ, self.gamma, self.a)  # (Q, C): K(gamma_J, gamma) a
        return (self.size / idx.shape[1]) * (aJ * colJ).sum()

    def _sampled_residual_quadratic(self, kernel, Z: Tensor, w: Tensor, idx: Tensor) -> Tensor:
        """(G / C) sum_{j in J} a_j (R a)_j with R = K_gamma - K_gamma,Z K_zz^-1 K_Z,gamma, whose
        sampled rows are (R a)_J = K(gamma_J, gamma) a - K(gamma_J, Z) w."""
        gJ, aJ = self._gather(idx)
        colJ = kernel_matvec(kernel, gJ, self.gamma, self.a) - kernel_matvec(kernel, gJ, Z, w)  # (Q, C)
        return (self.size / idx.shape[1]) * (aJ * colJ).sum()

    def quadratic(self, kernel, *, columns: Optional[int] = None, generator: Optional[torch.Generator] = None) -> Tensor:
        """sum_j a_j^T K_gamma a_j: exact (``columns=None``) or the seed's column-sampled estimate."""
        if columns is None or columns >= self.size:
            return (self.a * kernel_matvec(kernel, self.gamma, self.gamma, self.a)).sum()
        return self._sampled_kernel_quadratic(kernel, self.sample_columns(int(columns), generator))

    def extra_repr(self) -> str:
        return (f"Q={self.num_latent}, G={self.size}, D={self.input_dim}, kl_columns={self.kl_columns}, "
                f"kl_sampling={self.kl_sampling!r}, learn_inputs={isinstance(self.gamma, nn.Parameter)}")
