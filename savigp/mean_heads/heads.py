"""The mean heads (``mean_basis=``, registered in :data:`MEAN_HEADS`): the orthogonally decoupled head
:class:`OrthogonalMeanHead` (Salimbeni et al. 2018, eq. (11); its derivation and linear algebra in
:mod:`savigp.mean_heads.orthogonal_basis`) and the DECOUPLED and HYBRID bases (Cheng & Boots 2017; Salimbeni et al. 2018, §3.1).

Next to the orthogonally decoupled head, two older ways of adding a mean basis gamma_j (``(Q, G, D)``, coefficients a_j
``(Q, G)``) to the covariance basis beta_j = Z_j of the coupled model. Both add the same function
to the mean of every mixture component,

    h_j(x) = k(x, gamma_j) a_j                  (no projection: O(G) per point, no K_zz^-1),

and leave the covariance of the coupled model (the posterior family over Z, whatever it is)
unchanged, which is Salimbeni et al. 2018, eq. (9)'s parametrization of the covariance
(I - Psi_beta K_beta^-1 Psi_beta^T) + Psi_beta K_beta^-1 S K_beta^-1 Psi_beta^T.

* **DECOUPLED** (Cheng & Boots 2017, eq. (9) of Salimbeni et al. 2018): the mean is h alone,
  mu = Psi_gamma a. The coupled posterior mean m is fixed at zero (:meth:`DecoupledMeanHead.attach`,
  called by :func:`make_mean_head`, zeroes it and turns its gradient off), so mean and covariance have separate bases. The
  covariance is held through the model's posterior family (S over u = beta, or over the whitened
  v); Cheng & Boots' inverse parametrization Sigma = (I + Psi_beta B Psi_beta^T)^-1 spans the
  covariances with S < K_beta, a subset of these, with B = K_beta^-1 (K_beta S^-1 K_beta - K_beta)
  K_beta^-1 (Salimbeni et al. 2018, §2.3: A = -K_beta^-1 + (K_beta B K_beta + K_beta)^-1).
  KL (exact; the joint Gaussian over [beta, gamma] has mean K_[beta,gamma],gamma a, and the
  Mahalanobis term of N(0, K_[beta,gamma]) gives a^T K_gamma a):

      KL = KL_coupled(m = 0, S) + 1/2 sum_j a_j^T K_gamma a_j.

* **HYBRID** (Cheng & Boots 2017, appendix; Salimbeni et al. 2018, eq. (10)): the mean is
  mu = Psi_gamma a + Psi_beta K_beta^-1 m_beta, i.e. h plus the coupled mean. The two parts are not
  orthogonal in the RKHS, so the KL gains a cross term (the inner product <h, mu_k>_H):

      KL = KL_coupled(m, S) + 1/2 sum_j a_j^T K_gamma a_j + sum_k pi_k sum_j <h_j, mu_kj>_H,

  with <h_j, mu_kj>_H = a_j^T K_gamma,Z K_zz^-1 u_kj = c_j^T m_kj (whitened, u = L_zz m,
  c_j = L_zz^-1 K_Z,gamma a_j) or w_j^T m_kj (u-space means, w_j = K_zz^-1 K_Z,gamma a_j). For a mixture the
  entropy is unchanged by a common shift and each component's cross-entropy with the prior gains
  1/2 ||h||^2 + <h, mu_k>, so this is exact for every component, as the model's KL is. The
  orthogonal head of :mod:`savigp.mean_heads.orthogonal_basis` is the same basis with h projected off span Psi_Z
  (then the cross term vanishes).

Cost: the mean adds O(G) per point and O(G^2) for a^T K_gamma a per step (``kl_columns=C``
replaces it by the unbiased column-sampled estimate of :mod:`savigp.mean_heads.orthogonal_basis`, ``"kernel"``
form: there is no Nystrom part to take out). HYBRID's cross term costs O(M G) for K_Z,gamma a;
on the model's fused path (where L_zz carries no autograd graph) whitened posteriors need the
gradient through L_zz, so the factor is recomputed with a graph: one more O(M^3) Cholesky and its
backward per step.

Natural gradients (:func:`savigp.training.natural_gradients.fit_orthnat`): the cross term is linear in m,
so it enters the natural step through d ELBO / dm exactly; DECOUPLED keeps m = 0 and takes the
natural step in S alone. (Salimbeni et al. 2018 train both with Adam.)
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import Tensor, nn

from .. import _choices
from .._checks import writable
from ..linalg.cholesky import jittered
from ..runtime import sync_free
from .base import GAMMA_PRECONDITIONERS, MeanHead
from .orthogonal_basis import KL_SAMPLING, SPDSolve, chol_solve, initial_mean_basis, kernel_matvec, rows_matvec

#: the mean heads by name (``mean_basis=``): a registry, ``MEAN_HEADS.register("name", cls)``
MEAN_HEADS = _choices.MEAN_HEADS
#: the basis a model's ``mean_basis_size`` takes when ``mean_basis`` is not given
DEFAULT_MEAN_BASIS = "orthogonal"


class BasisTerms(NamedTuple):
    """What one evaluation of the model computes once for an orthogonal head and passes to both its
    mean shift and its KL (:meth:`OrthogonalMeanHead.evaluation_state`): b_j = K(Z_j, gamma_j) a_j
    and w_j = K_zz^-1 b_j, each ``(Q, M)``, with their autograd graphs."""

    b: Tensor
    w: Tensor


class OrthogonalMeanHead(MeanHead):
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

    Parameters: ``gamma`` ``(Q, G, D)`` and ``a`` ``(Q, G)`` (Salimbeni et al. 2018's a_gamma, zero-initialized,
    so a fresh head leaves the coupled model exactly unchanged).

    The DECOUPLED and HYBRID bases (:mod:`savigp.mean_heads`) subclass this head without the
    projection (``orthogonal`` False); the capabilities of :class:`~savigp.mean_heads.base.MeanHead`
    (``fixes_mean``, :meth:`mean_coupling`, :meth:`natural_preconditioner`, ...) are what the model
    and the training loops read.
    """

    orthogonal = True

    @classmethod
    def state_shapes(cls, *, num_latent: int, num_inducing: int, input_dim: int, size: int) -> dict[str, tuple]:
        """The basis inputs ``gamma`` ``(Q, G, D)`` (see :meth:`MeanHead.state_shapes`)."""
        return {"gamma": (num_latent, size, input_dim)}

    def __init__(self, X: Tensor, num_latent: int, size: int, seed: int = 0, *, learn_inputs: bool = True,
                 gamma_inputs=None, kl_columns: Optional[int] = None, kl_sampling: str = "residual"):
        super().__init__()
        X = torch.as_tensor(writable(X))
        if X.dim() != 2:
            raise ValueError(f"OrthogonalMeanHead: X must have shape (N, D), got {tuple(X.shape)}")
        Q, G = int(num_latent), int(size)
        if Q < 1 or G < 1:
            raise ValueError(f"OrthogonalMeanHead: need num_latent >= 1 and size >= 1, got Q={Q}, G={G}")
        D = X.shape[1]
        if gamma_inputs is not None:
            gamma = torch.as_tensor(writable(gamma_inputs), dtype=X.dtype, device=X.device)
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

    def attach(self, posterior) -> None:
        """Called once by :func:`savigp.mean_heads.make_mean_head` with the model's posterior (or
        None) after the head is built: a head that constrains the posterior does it here (the
        DECOUPLED head fixes its mean at zero); this one leaves it as it is."""

    def graph_obstacle(self) -> Optional[str]:
        """Column-sampled KL (``kl_columns`` below G) draws its columns on the host, which a CUDA graph
        would freeze at the capture."""
        if self.kl_columns is not None and self.kl_columns < self.size:
            return f"the mean head samples its KL columns on the host (kl_columns={self.kl_columns})"
        return None

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
    def evaluation_state(self, kernel, Z: Tensor, Lzz: Tensor, Kzz: Optional[Tensor] = None,
                         jitter_rel: Optional[Tensor] = None) -> Optional[BasisTerms]:
        """What one evaluation of the model computes once and passes to :meth:`mean_shift` and
        :meth:`kl` (``state=``): :meth:`basis_terms` (None for a head that needs nothing). The
        model holds it for the evaluation (a training step, or every chunk of a prediction); the
        head keeps nothing between calls."""
        return self.basis_terms(kernel, Z, Lzz, Kzz, jitter_rel)

    def basis_terms(self, kernel, Z: Tensor, Lzz: Tensor, Kzz: Optional[Tensor] = None,
                    jitter_rel: Optional[Tensor] = None) -> BasisTerms:
        """b_j = K(Z_j, gamma_j) a_j and w_j = K_zz^-1 b_j, each ``(Q, M)`` (so c_j = L_zz^-1 b_j has
        ||c_j||^2 = b_j^T w_j and V_j^T c_j = K_xz w_j).

        Two ways to differentiate through K_zz^-1, matching the model's two paths:

        * ``Kzz`` None: autograd through ``Lzz`` (which then carries the graph, the reference path);
        * ``Kzz`` given (with the relative ``jitter_rel`` that was added before factorizing, and
          ``Lzz`` without graph, the model's fused path): the gradient dF/dK_zz = -(K_zz^-1 dF/dw) w^T
          is handed to K_zz directly, with no Cholesky backward.
        """
        return BasisTerms(*self._basis_terms(kernel, Z, Lzz, Kzz, jitter_rel))

    def _basis_terms(self, kernel, Z, Lzz, Kzz, jitter_rel):
        b = kernel_matvec(kernel, Z, self.gamma, self.a)  # (Q, M)
        if Kzz is not None and torch.is_grad_enabled() and Kzz.requires_grad:
            A = jittered(Kzz, 0.0 if jitter_rel is None else jitter_rel)  # the matrix that Lzz factorizes
            w = SPDSolve.apply(A, b, Lzz.detach())
        else:
            w = chol_solve(Lzz, b)
        return b, w

    def coefficients(self, kernel, Z: Tensor, Lzz: Tensor) -> Tensor:
        """c_j = L_zz^-1 K(Z_j, gamma_j) a_j, ``(Q, M)`` (= L_zz^T w_j)."""
        _, w = self.basis_terms(kernel, Z, Lzz)
        return (Lzz.transpose(-1, -2) @ w.unsqueeze(-1)).squeeze(-1)

    # ------------------------------------------------------------------ marginal means
    def shifted(self, q, X: Tensor, kernel, Z: Tensor, prior, Kzx: Tensor, state: Optional[BasisTerms] = None):
        """``q`` with r(x_n) (:meth:`mean_shift`) added to every component's mean (Salimbeni et al. 2018,
        eq. (11)): from the marginals' whitened cross-covariances V when they carry them (the
        reference path), else from ``Kzx`` ``(Q, M, B)`` with the fused gradient to K_zz."""
        if state is None:
            state = self.evaluation_state(kernel, Z, prior.Lzz, prior.Kzz, prior.jitter_rel)
        head = dict(V=q.V) if q.V is not None else dict(Kzx=Kzx, Kzz=prior.Kzz, jitter_rel=prior.jitter_rel)
        return q.shifted(self.mean_shift(X, kernel, Z, prior.Lzz, state=state, **head).transpose(-1, -2))

    def mean_shift(self, X: Tensor, kernel, Z: Tensor, Lzz: Tensor, V: Optional[Tensor] = None, *,
                   Kzx: Optional[Tensor] = None, Kzz: Optional[Tensor] = None,
                   jitter_rel: Optional[Tensor] = None, state: Optional[BasisTerms] = None) -> Tensor:
        """r_j(x_n) = k(x_n, gamma_j) a_j - k(x_n, Z_j) K_zz^-1 K(Z_j, gamma_j) a_j, shape ``(Q, B)``
        (broadcasts to ``(K, Q, B)``).

        Args:
            X: ``(B, D)``; Z: inducing inputs ``(Q, M, D)``; Lzz: Cholesky factors of K_zz
                ``(Q, M, M)``.
            V: L_zz^-1 K_zx ``(Q, M, B)`` as formed by the model's reference path (then
                r = K_x,gamma a - V^T c), or
            Kzx: K_zx ``(Q, M, B)`` (then r = K_x,gamma a - K_xz w), with ``Kzz`` / ``jitter_rel``
                for the fused gradient (see :meth:`basis_terms`).
            state: :meth:`evaluation_state` of this evaluation (the same prior), or None (computed here).
        """
        if (V is None) == (Kzx is None):
            raise ValueError("mean_shift needs exactly one of V (= L_zz^-1 K_zx) and Kzx")
        b, w = self.basis_terms(kernel, Z, Lzz, Kzz, jitter_rel) if state is None else state
        if V is not None:
            c = (Lzz.transpose(-1, -2) @ w.unsqueeze(-1)).squeeze(-1)
            proj = (V * c.unsqueeze(-1)).sum(-2)
        else:
            proj = (Kzx * w.unsqueeze(-1)).sum(-2)
        return kernel_matvec(kernel, X, self.gamma, self.a) - proj

    # ------------------------------------------------------------------ KL
    def kl(self, kernel, Z: Tensor, Lzz: Tensor, *, Kzz: Optional[Tensor] = None, jitter_rel: Optional[Tensor] = None,
           columns: Optional[int] = None, generator: Optional[torch.Generator] = None, posterior=None,
           mean: Optional[Tensor] = None, state: Optional[BasisTerms] = None) -> Tensor:
        """The extra KL term sum_j 1/2 a_j^T (K_gamma - K_gamma,Z K_zz^-1 K_Z,gamma) a_j (a scalar).

        Args:
            Kzz, jitter_rel: as in :meth:`basis_terms` (the model's fused path).
            columns: sampled columns (default ``self.kl_columns``; None or >= G means exact).
            generator: CPU torch.Generator for the column draws (default the head's own).
            posterior, mean: the coupled means, unused here (by orthogonality the KL does not
                depend on them; the HYBRID head of :mod:`savigp.mean_heads` needs them).
            state: :meth:`evaluation_state` of this evaluation (shared with :meth:`mean_shift`), or
                None (computed here).
        """
        b, w = self.basis_terms(kernel, Z, Lzz, Kzz, jitter_rel) if state is None else state
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

    # ------------------------------------------------------------------ natural-gradient training
    def natural_parameters(self) -> list:
        """The coefficients a ``(Q, G)`` (the inputs gamma train with Adam)."""
        return [self.a]

    def input_locations(self) -> list:
        """The basis inputs gamma ``(Q, G, D)`` where they are learned."""
        return [self.gamma] if isinstance(self.gamma, nn.Parameter) else []

    @torch.no_grad()
    def natural_preconditioner(self, kernel, Z: Tensor, Lzz: Tensor, *, jitter: float = 1e-3, kind: str = "eq16",
                               X: Optional[Tensor] = None, curvature: Optional[Tensor] = None, block: int = 2048,
                               prior_columns: int = 512, generator: Optional[torch.Generator] = None) -> Tensor:
        """The diagonal preconditioner for a_gamma, ``(Q, G)`` (derivation in
        :mod:`savigp.training.natural_gradients`).

        Args:
            kernel, Z, Lzz: the model's kernel, inducing inputs ``(Q, M, D)`` and prior factor ``(Q, M, M)``.
            jitter: eps relative to the prior variance k(gamma_i, gamma_i).
            kind: ``"eq16"``: D_{gamma|beta} + eps of Salimbeni et al. 2018, eq. (16). ``"gauss-newton"``: row-sum
                (Gershgorin) bounds of both parts of the curvature, so that lambda_max(P^-1 H) <= 1:
                ``sum_j |R_gamma,gamma|_ij`` for the KL part (exact when G <= ``prior_columns``, else an
                unbiased estimate from that many sampled columns, never below D_i) plus
                ``sum_n |R_ni| lambda_n sum_j |R_nj|`` for the data of the batch;
                O(B M G + G min(G, prior_columns) M) per call.
            X, curvature: for ``"gauss-newton"``: the batch inputs ``(B, D)`` and lambda ``(Q, B)``
                (already scaled by N / B).
            generator: CPU generator for the sampled columns (default: the head's).
        """
        if kind not in GAMMA_PRECONDITIONERS:
            raise ValueError(f"gamma preconditioner must be one of {GAMMA_PRECONDITIONERS}, got {kind!r}")
        G = self.size
        if kind == "gauss-newton" and (X is None or curvature is None):
            raise ValueError("natural_preconditioner(kind='gauss-newton') needs X and curvature")
        Ws, parts = [], []
        for s in range(0, G, block):
            g = self.gamma[:, s:s + block]
            if self.orthogonal:
                W = torch.linalg.solve_triangular(Lzz, kernel(Z, g), upper=False)  # (Q, M, g)
            else:  # DECOUPLED / HYBRID: no projection, R = K_gamma and R(x, gamma) = k(x, gamma)
                W = Lzz.new_zeros(Lzz.shape[:-1] + (g.shape[1],))
            Ws.append(W)
            parts.append((kernel.diag(g) - (W * W).sum(-2)).clamp_min(0.0))
        D = torch.cat(parts, dim=-1)  # diag(K_gamma - K_gamma,Z K_zz^-1 K_Z,gamma)
        eps = jitter * kernel.diag(self.gamma)
        if kind == "eq16":
            return D + eps
        W = torch.cat(Ws, dim=-1)  # (Q, M, G)
        # KL part: row sums of |R_gamma,gamma|, R = K_gamma - W^T W
        if G <= prior_columns:
            cols, weight = torch.arange(G, device=W.device).expand(self.num_latent, G), 1.0
        else:
            cols, weight = self.sample_columns(prior_columns, generator), G / prior_columns
        prior_rows = torch.zeros_like(D)
        for s in range(0, cols.shape[1], block):
            idx = cols[:, s:s + block]  # (Q, c)
            gJ = torch.gather(self.gamma, 1, idx.unsqueeze(-1).expand(-1, -1, self.input_dim))
            WJ = torch.gather(W, 2, idx.unsqueeze(1).expand(-1, W.shape[1], -1))  # (Q, M, c)
            RJ = kernel(self.gamma, gJ) - W.transpose(-1, -2) @ WJ  # (Q, G, c)
            prior_rows += RJ.abs().sum(-1)
        prior_rows = torch.maximum(weight * prior_rows, D)
        # data part: lambda-weighted row-sum bound of R_gamma,X Lambda R_X,gamma
        V = torch.linalg.solve_triangular(Lzz, kernel(Z, X), upper=False)  # (Q, M, B)
        lam = curvature.clamp_min(0.0)
        absR = torch.cat([(kernel(X, self.gamma[:, s:s + block]) - V.transpose(-1, -2) @ W[..., s:s + block]).abs()
                          for s in range(0, G, block)], dim=-1)  # (Q, B, G): |R(x_n, gamma_i)|
        data = torch.einsum("qbg,qb->qg", absR, lam * absR.sum(-1))
        return prior_rows + data + eps

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
        colJ = rows_matvec(kernel, gJ, self.gamma, self.a, aJ)  # (Q, C): K(gamma_J, gamma) a
        return (self.size / idx.shape[1]) * (aJ * colJ).sum()

    def _sampled_residual_quadratic(self, kernel, Z: Tensor, w: Tensor, idx: Tensor) -> Tensor:
        """(G / C) sum_{j in J} a_j (R a)_j with R = K_gamma - K_gamma,Z K_zz^-1 K_Z,gamma, whose
        sampled rows are (R a)_J = K(gamma_J, gamma) a - K(gamma_J, Z) w."""
        gJ, aJ = self._gather(idx)
        colJ = rows_matvec(kernel, gJ, self.gamma, self.a, aJ) - kernel_matvec(kernel, gJ, Z, w)  # (Q, C)
        return (self.size / idx.shape[1]) * (aJ * colJ).sum()

    def quadratic(self, kernel, *, columns: Optional[int] = None, generator: Optional[torch.Generator] = None) -> Tensor:
        """sum_j a_j^T K_gamma a_j: exact (``columns=None``) or a column-sampled estimate (Salimbeni et al. 2018, §3)."""
        if columns is None or columns >= self.size:
            return (self.a * kernel_matvec(kernel, self.gamma, self.gamma, self.a)).sum()
        return self._sampled_kernel_quadratic(kernel, self.sample_columns(int(columns), generator))

    def extra_repr(self) -> str:
        return (f"Q={self.num_latent}, G={self.size}, D={self.input_dim}, kl_columns={self.kl_columns}, "
                f"kl_sampling={self.kl_sampling!r}, learn_inputs={isinstance(self.gamma, nn.Parameter)}")


class _UnprojectedMeanHead(OrthogonalMeanHead):
    """h_j(x) = k(x, gamma_j) a_j added to every component's mean (module docstring)."""

    orthogonal = False

    def evaluation_state(self, kernel, Z: Tensor, Lzz: Tensor, Kzz: Optional[Tensor] = None,
                         jitter_rel: Optional[Tensor] = None) -> None:
        """Nothing: the mean shift does not project on the inducing inputs."""
        return None

    def mean_shift(self, X: Tensor, kernel, Z: Tensor, Lzz: Tensor, V: Optional[Tensor] = None, *,
                   Kzx: Optional[Tensor] = None, Kzz: Optional[Tensor] = None,
                   jitter_rel: Optional[Tensor] = None, state: Optional[BasisTerms] = None) -> Tensor:
        """h_j(x_n) = k(x_n, gamma_j) a_j, ``(Q, B)``; the arguments other than ``X (B, D)`` are
        those of :meth:`OrthogonalMeanHead.mean_shift` (unused: the basis is not projected)."""
        return kernel_matvec(kernel, X, self.gamma, self.a)

    def _half_norm(self, kernel, columns: Optional[int], generator: Optional[torch.Generator]) -> Tensor:
        """1/2 sum_j a_j^T K_gamma a_j = 1/2 sum_j ||h_j||_H^2: exact, or column-sampled."""
        C = self.kl_columns if columns is None else int(columns)
        return 0.5 * self.quadratic(kernel, columns=C, generator=generator)


class DecoupledMeanHead(_UnprojectedMeanHead):
    """DECOUPLED (Cheng & Boots 2017): mean k(x, gamma) a alone, coupled mean m fixed at 0.

    Same arguments and parameters as :class:`OrthogonalMeanHead`. Build it with
    :func:`make_mean_head` (or ``SAVIGP(..., mean_basis="decoupled")``), which fixes the
    posterior mean at zero.
    """

    fixes_mean = True

    def attach(self, posterior) -> None:
        """Fix the ``posterior``'s means (:attr:`~savigp.posteriors.Posterior.component_means`,
        ``(K, Q, M)``) at zero and turn their gradient off: the mean then lives in the gamma basis
        alone (module docstring)."""
        if posterior is None:
            raise ValueError("make_mean_head('decoupled') needs the posterior (its mean is fixed at zero)")
        means = posterior.component_means
        with torch.no_grad():
            means.zero_()
        means.requires_grad_(False)

    def kl(self, kernel, Z: Tensor, Lzz: Tensor, *, Kzz: Optional[Tensor] = None, jitter_rel: Optional[Tensor] = None,
           columns: Optional[int] = None, generator: Optional[torch.Generator] = None, posterior=None,
           mean: Optional[Tensor] = None, state: Optional[BasisTerms] = None) -> Tensor:
        """1/2 sum_j a_j^T K_gamma a_j (a scalar); the other arguments as in
        :meth:`OrthogonalMeanHead.kl` (the coupled KL with m = 0 is the model's)."""
        return self._half_norm(kernel, columns, generator)


class HybridMeanHead(_UnprojectedMeanHead):
    """HYBRID (Salimbeni et al. 2018, eq. (10)): mean k(x, gamma) a + the coupled mean.

    Same arguments and parameters as :class:`OrthogonalMeanHead`.
    """

    def mean_coupling(self, kernel, Z: Tensor, Lzz: Tensor, mean: Tensor) -> Tensor:
        """The cross term sum_j <h_j, mu_j>_H of the coupled mean ``mean (Q, M)`` (:meth:`coupling`)."""
        return self.coupling(kernel, Z, Lzz, mean)

    def kl(self, kernel, Z: Tensor, Lzz: Tensor, *, Kzz: Optional[Tensor] = None, jitter_rel: Optional[Tensor] = None,
           columns: Optional[int] = None, generator: Optional[torch.Generator] = None, posterior=None,
           mean: Optional[Tensor] = None, state: Optional[BasisTerms] = None) -> Tensor:
        """1/2 sum_j a_j^T K_gamma a_j + sum_k pi_k sum_j <h_j, mu_kj>_H (a scalar).

        Args:
            kernel, Z, Lzz, Kzz, jitter_rel, columns, generator: as in :meth:`OrthogonalMeanHead.kl`.
            posterior: the model's posterior (its ``component_means`` ``(K, Q, M)``, ``weights()``
                ``(K,)`` and whether they are ``mean_whitened``), or
            mean: whitened coupled means ``(Q, M)`` or ``(K, Q, M)`` with equal weights (the
                natural-gradient step passes its autograd leaf here). One of the two is required.
        """
        if mean is not None:
            m = mean if mean.dim() == 2 else mean.mean(0)
            whitened = True
        elif posterior is not None:
            m = torch.einsum("k,kqm->qm", posterior.weights(), posterior.component_means)
            # whitened coordinates of the means (also the diagonal mixture over u's w, m = L_zz w)
            whitened = bool(posterior.mean_whitened)
        else:
            raise ValueError("HybridMeanHead.kl needs the coupled means: pass posterior= or mean=")
        Q, M = Z.shape[0], Z.shape[1]
        if tuple(m.shape) != (Q, M):
            raise ValueError(f"HybridMeanHead.kl: coupled means must have shape ({Q}, {M}) (or (K, {Q}, {M})), "
                             f"got {tuple(m.shape)}")
        return self._half_norm(kernel, columns, generator) + self.coupling(kernel, Z, Lzz, m, whitened, Kzz=Kzz, jitter_rel=jitter_rel)

    def coupling(self, kernel, Z: Tensor, Lzz: Tensor, m: Tensor, whitened: bool = True, *,
                 Kzz: Optional[Tensor] = None, jitter_rel: Optional[Tensor] = None) -> Tensor:
        """sum_j <h_j, mu_j>_H for the coupled mean m ``(Q, M)`` (a scalar): c^T m (whitened
        coordinates) or w^T m (u-space means); Z ``(Q, M, D)``, Lzz ``(Q, M, M)``, Kzz and
        jitter_rel as in :meth:`OrthogonalMeanHead.basis_terms`."""
        if not whitened:
            _, w = self.basis_terms(kernel, Z, Lzz, Kzz, jitter_rel)  # fused gradient to K_zz when Kzz is given
            return (w * m).sum()
        b = kernel_matvec(kernel, Z, self.gamma, self.a)  # (Q, M)
        L = Lzz
        if Kzz is not None and torch.is_grad_enabled() and Kzz.requires_grad and not Lzz.requires_grad:
            # the model's fused path: refactorize with a graph (the same jittered matrix) so the
            # gradient through L_zz reaches K_zz
            L = sync_free.cholesky(jittered(Kzz, 0.0 if jitter_rel is None else jitter_rel))
        c = torch.linalg.solve_triangular(L, b.unsqueeze(-1), upper=False).squeeze(-1)
        return (c * m).sum()


def make_mean_head(basis: str, X: Tensor, num_latent: int, size: int, seed: int = 0, *, posterior=None, **options):
    """The mean head of ``basis`` (a name in :data:`MEAN_HEADS`) for Q = ``num_latent`` latent functions
    with G = ``size`` mean-basis inputs each, initialized from the rows of ``X (N, D)``, then
    attached to the model's ``posterior`` (``head.attach(posterior)``: for ``"decoupled"`` the
    posterior's mean ``(K, Q, M)`` is set to zero and its gradient turned off, so that the mean lives
    in the gamma basis alone, module docstring). ``options`` go to the head (``learn_inputs``,
    ``gamma_inputs``, ``kl_columns``, ``kl_sampling``).

    Raises:
        ValueError: an unknown ``basis``, naming the registered ones.
    """
    head = MEAN_HEADS[MEAN_HEADS.canonical(basis)](X, num_latent, size, seed=seed, **options)
    head.attach(posterior)
    return head
