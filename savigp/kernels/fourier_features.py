"""Variational Fourier features for additive Matern kernels, and ODVFF (Hensman et al. 2018;
"Orthogonally Decoupled Variational Fourier Features", Azzimonti et al. 2020).

The prior is additive over the D inputs, each term a one-dimensional Matern kernel of order
nu = p + 1/2 (p = 0, 1, 2) with its own variance s_d and length-scale l_d (lambda_d = sqrt(2 nu) / l_d):

    k(x, x') = sum_d s_d kappa_nu(abs(x_d - x'_d) / l_d),
    kappa_1/2(r) = e^-r,  kappa_3/2(r) = (1 + sqrt3 r) e^(-sqrt3 r),  kappa_5/2(r) = (1 + sqrt5 r + 5 r^2 / 3) e^(-sqrt5 r).

Inducing features (Hensman et al. 2018, §3-4). On an interval [a_d, b_d] per input, with
omega_m = 2 pi m / (b_d - a_d), the 2F + 1 functions

    phi_0 = 1,   phi_m^cos(t) = cos(omega_m (t - a)),   phi_m^sin(t) = sin(omega_m (t - a)),   m = 1..F,

define u = <phi, f>_H, inner products in the RKHS H of the Matern kernel restricted to [a, b]
(Durrande et al. 2016; Hensman et al. 2018, eq. (55), (62), (68)): with L = (lambda + d/dt)^(p+1),

    nu = 1/2:  <f, g> = 1/(2 lambda s) int (Lf)(Lg) + f(a) g(a) / s
    nu = 3/2:  <f, g> = 1/(4 lambda^3 s) int (Lf)(Lg) + f(a) g(a) / s + f'(a) g'(a) / (lambda^2 s)
    nu = 5/2:  <f, g> = 3/(16 lambda^5 s) int (Lf)(Lg) + 9 f(a) g(a) / (8 s) + 9 f''(a) g''(a) / (8 lambda^4 s)
                        + 3 / (lambda^2 s) (f'(a) g'(a) + (f''(a) g(a) + f(a) g''(a)) / 8).

Then (u of different inputs are independent: the kernel is additive, so K_uu is block diagonal)

* K_uu = <phi_i, phi_j>: over whole periods L maps cos/sin of frequency omega to cos/sin of the same
  frequency with gain |lambda + i omega|^(p+1), so the integral is diagonal,
  c_nu (b - a) / 2 (lambda^2 + omega^2)^(p+1) (twice that for phi_0), and the boundary terms add a
  rank-1 (nu = 1/2), rank-2 (3/2) or rank-3 (5/2) matrix (cos(a) = 1, sin'(a) = omega, cos''(a) = -omega^2).
* K_uf(x) = <phi_i, k(x, .)>: inside [a, b], phi_i(x) (the reproducing property). For x < a,
  k(x, .) restricted to [a, b] is annihilated by L (it is e^(-lambda t) times a polynomial of degree
  p), so only the boundary terms remain, with g^(i)(a) = kappa^(i)(a - x); x > b follows by the
  reflection t -> a + b - t, which maps cos features to themselves and sin features to minus
  themselves. (So K_uf decays like the kernel with the distance to the interval.)

Where this is exact and where not: the features are valid inducing variables (u jointly Gaussian
with f, with exactly these covariances) because every phi lies in the RKHS of the Matern kernel
restricted to [a, b]; the variational posterior is then a proper sparse GP for every input,
inside the interval or not (outside, the covariances above are exact too, but the features carry
little information there and the posterior reverts to the prior with the distance). They are not
available for the RBF kernel or the Brownian motion on [a, b], nor for the Matern kernels on the
whole real line: there the Fourier features are not in the RKHS (Azzimonti et al. 2020, §4; Hensman et al.
2018), and no closed forms are implemented for other kernels here. For D > 1 the features need the
additive kernel (a product kernel would need Kronecker features; not implemented).

The harmonic features span only functions that are periodic on [a, b] (with their first p
derivatives), so the Nystrom approximation K_fu K_uu^-1 K_uf does not reach K_ff as F grows:
measured for Matern 3/2, l = 0.7 on [-1, 2], variance 1.3, the residual variance is 0.021-0.026 at the
centre and 0.65 at the ends for F = 5, 30 and 100 alike. Choose the interval a few length-scales
wider than the data (for l = 0.3 and data on [0, 1], F = 8: mean residual variance 0.150 with a
margin of 0.1 on each side, 0.012 with 0.5), as :func:`savigp.odvff.odvff_model` does by default.

ODVFF (Azzimonti et al. 2020) is the orthogonally decoupled basis of :mod:`savigp.mean_heads.orthogonal_basis` with these
features as the covariance basis beta and inducing points gamma as the mean basis:
:func:`savigp.odvff.odvff_model` builds it as a :class:`savigp.SAVIGP` whose inducing "inputs" are a
:class:`FeatureIndices` placeholder ``(Q, M, D)`` (M = D (2F + 1); the values are unused) that
:class:`FourierFeatureKernel` recognises: ``kernel(Z, X)`` is K_uf, ``kernel(Z, Z)`` K_uu, and
points against points the additive Matern kernel. Costs: K_uu (Q, M, M) in O(M^2); K_uf in
O(M N); the model's O(M^3) factorization is unchanged (the block-diagonal-plus-low-rank structure is
not exploited).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from .base import Hyper, Kernel

ORDERS = {0.5: 0, 1.5: 1, 2.5: 2}  # nu -> p


def _check_nu(nu: float) -> int:
    if float(nu) not in ORDERS:
        raise ValueError(f"nu must be one of {sorted(ORDERS)} (Matern 1/2, 3/2, 5/2), got {nu}")
    return ORDERS[float(nu)]


def kappa_derivatives(r: Tensor, lam: Tensor, var: Tensor, p: int, order: int) -> list[Tensor]:
    """kappa(r) = s e^(-lambda r) P(lambda r) and its derivatives in r up to ``order``, for r >= 0
    (one-sided at 0); P = 1, 1 + u, 1 + u + u^2 / 3 for p = 0, 1, 2. Broadcasts r, lam, var."""
    poly = {0: [1.0], 1: [1.0, 1.0], 2: [1.0, 1.0, 1.0 / 3.0]}[p]  # coefficients of P(u)
    u = lam * r
    e = var * torch.exp(-u)
    out = []
    coef = list(poly)
    for i in range(order + 1):
        val = sum(c * u ** j for j, c in enumerate(coef))
        out.append(e * val * lam ** i)
        # d/du [e^-u Q(u)] = e^-u (Q' - Q)
        deriv = [(j + 1) * coef[j + 1] for j in range(len(coef) - 1)] + [0.0]
        coef = [d - c for d, c in zip(deriv, coef)]
    return out


def _boundary_weights(p: int, lam: Tensor, var: Tensor) -> Tensor:
    """The boundary part of the inner product as a bilinear form B on (f, f', f'') at a:
    <f, g>_boundary = f_a^T B g_a, ``(..., 3, 3)``."""
    z = torch.zeros_like(lam)
    if p == 0:
        rows = [[1 / var, z, z], [z, z, z], [z, z, z]]
    elif p == 1:
        rows = [[1 / var, z, z], [z, 1 / (lam ** 2 * var), z], [z, z, z]]
    else:
        c = 3 / (8 * lam ** 2 * var)
        rows = [[9 / (8 * var), z, c], [z, 3 / (lam ** 2 * var), z], [c, z, 9 / (8 * lam ** 4 * var)]]
    return torch.stack([torch.stack([torch.as_tensor(v, dtype=lam.dtype, device=lam.device).expand_as(lam)
                                     for v in row], -1) for row in rows], -2)


class AdditiveMatern(Kernel):
    """k(x, x') = sum_d s_d kappa_nu(abs(x_d - x'_d) / l_d) for Q latent functions (module docstring);
    the registered family ``additive-matern`` (``--kernel "additive-matern(nu=2.5)"``).

    Args:
        input_dim: D; num_latent: Q; nu: 0.5, 1.5 or 2.5.
        lengthscale: a float, ``(D,)`` or ``(Q, D)``; variance: per term s_d, a float, ``(D,)`` or
            ``(Q, D)`` (the prior variance of f is sum_d s_d).
        learn: learn the hyper-parameters.
    """

    hypers = (Hyper("lengthscale", "lengthscales", "columns", floor=1e-6, units="scale"),
              Hyper("variance", "variances", "columns"))
    shape_options = ("nu",)

    def __init__(self, input_dim: int, num_latent: int = 1, nu: float = 1.5, lengthscale=1.0, variance=1.0,
                 learn: bool = True):
        super().__init__()
        self._set_inputs(input_dim, num_latent, None)
        self.nu, self.order = float(nu), _check_nu(nu)
        self._set_hypers(learn, lengthscale=lengthscale, variance=variance)

    def rates(self) -> Tensor:
        """lambda_d = sqrt(2 nu) / l_d, ``(Q, D)``."""
        return math.sqrt(2 * self.nu) / self.lengthscales()

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        lam, var = self.rates(), self.variances()  # (Q, D)
        r = (x1.unsqueeze(-2) - x2.unsqueeze(-3)).abs()  # (Q or 1, N1, N2, D)
        k = kappa_derivatives(r, lam[:, None, None, :], var[:, None, None, :], self.order, 0)[0]
        return k.sum(-1).expand(self.num_latent, x1.shape[-2], x2.shape[-2])

    def forward_diag(self, x: Tensor) -> Tensor:
        return self.variances().sum(-1, keepdim=True).expand(self.num_latent, x.shape[-2])

    def extra_repr(self) -> str:
        return f"input_dim={self.input_dim}, num_latent={self.num_latent}, nu={self.nu}"


class FeatureIndices(Tensor):
    """Marks the inducing "inputs" of a model whose covariance basis is Fourier features: a
    placeholder ``(Q, M, D)`` (values unused) that :class:`FourierFeatureKernel` answers with
    K_uu and K_uf instead of point covariances. Survives ``.to()``, ``.clone()`` and state dicts."""


class FourierFeatureKernel(AdditiveMatern):
    """The additive Matern kernel with variational Fourier features on [a_d, b_d] (module docstring).

    It is not a family of its own in :data:`~savigp._choices.KERNELS`: a model file records it as the
    spec of its kernel (:meth:`prior_spec`, an ``additive-matern`` leaf) with ``num_frequencies``
    beside it, and the interval in the state dict (``lower``, ``upper``).

    Args:
        lower, upper: the interval per input, ``(D,)`` each (a_d < b_d); inputs may lie outside.
        num_frequencies: F per input (M = D (2F + 1) features per latent function).
        the rest: as :class:`AdditiveMatern`.
    """

    def __init__(self, input_dim: int, num_latent: int = 1, nu: float = 1.5, *, lower, upper, num_frequencies: int,
                 lengthscale=1.0, variance=1.0, learn: bool = True):
        super().__init__(input_dim, num_latent, nu, lengthscale, variance, learn)
        lo = torch.as_tensor(lower, dtype=torch.float64).expand(self.input_dim).clone()
        hi = torch.as_tensor(upper, dtype=torch.float64).expand(self.input_dim).clone()
        if not bool((hi > lo).all()):
            raise ValueError(f"FourierFeatureKernel: need lower < upper per input, got lower={lo.tolist()}, upper={hi.tolist()}")
        F = int(num_frequencies)
        if F < 0:
            raise ValueError(f"num_frequencies must be >= 0, got {num_frequencies}")
        self.num_frequencies = F
        self.register_buffer("lower", lo)
        self.register_buffer("upper", hi)

    def prior_spec(self) -> dict:
        """The spec (:mod:`savigp.kernels.spec`) of the additive Matern kernel whose features these are."""
        from .._choices import KERNELS

        return {"kernel": KERNELS.name_of(AdditiveMatern), **self.structure()}

    def interval_problem(self):
        """None when the interval is usable (finite, lower < upper per input), else what is wrong:
        checked on a kernel whose buffers were loaded from a file."""
        lo, hi = self.lower, self.upper
        if not bool(torch.isfinite(lo).all() & torch.isfinite(hi).all() & (hi > lo).all()):
            return f"the interval needs finite lower < upper per input, got lower={lo.tolist()[:8]}, upper={hi.tolist()[:8]}"
        return None

    @property
    def num_features(self) -> int:
        """M = D (2F + 1)."""
        return self.input_dim * (2 * self.num_frequencies + 1)

    def placeholder(self) -> FeatureIndices:
        """The inducing "inputs" ``(Q, M, D)`` for :class:`savigp.SAVIGP` (zeros, marked)."""
        z = torch.zeros(self.num_latent, self.num_features, self.input_dim, dtype=self.lower.dtype, device=self.lower.device)
        return z.as_subclass(FeatureIndices)

    def _frequencies(self) -> Tensor:
        """omega ``(D, F + 1)`` (omega_0 = 0)."""
        m = torch.arange(self.num_frequencies + 1, dtype=self.lower.dtype, device=self.lower.device)
        return 2 * math.pi * m / (self.upper - self.lower)[:, None]

    def _feature_derivs(self, om: Tensor) -> Tensor:
        """(phi, phi', phi'') at a for the 2F + 1 features of each input, ``(D, 3, 2F + 1)``."""
        c = torch.stack([torch.ones_like(om), torch.zeros_like(om), -om ** 2], -2)  # cos
        s = torch.stack([torch.zeros_like(om[:, 1:]), om[:, 1:], torch.zeros_like(om[:, 1:])], -2)  # sin
        return torch.cat([c, s], -1)

    def kuu(self) -> Tensor:
        """K_uu ``(Q, M, M)``: block diagonal over inputs, each block diagonal plus low rank."""
        lam, var = self.rates(), self.variances()  # (Q, D)
        p = self.order
        om = self._frequencies()  # (D, F + 1)
        width = (self.upper - self.lower)  # (D,)
        c_nu = {0: 1 / (2 * lam * var), 1: 1 / (4 * lam ** 3 * var), 2: 3 / (16 * lam ** 5 * var)}[p]  # (Q, D)
        gain = (lam[..., None] ** 2 + om ** 2) ** (p + 1)  # (Q, D, F + 1)
        dcos = c_nu[..., None] * width[:, None] / 2 * gain
        dcos = torch.cat([2 * dcos[..., :1], dcos[..., 1:]], -1)
        diag = torch.cat([dcos, dcos[..., 1:]], -1)  # (Q, D, 2F + 1)
        Phi = self._feature_derivs(om)  # (D, 3, 2F + 1)
        B = _boundary_weights(p, lam, var)  # (Q, D, 3, 3)
        blocks = torch.diag_embed(diag) + Phi.transpose(-1, -2) @ B @ Phi  # (Q, D, 2F + 1, 2F + 1)
        Q, D, n = blocks.shape[:3]  # block diagonal over the inputs, batched over the latent functions
        eye = torch.eye(D, dtype=blocks.dtype, device=blocks.device)
        return torch.einsum("qdij,de->qdiej", blocks, eye).reshape(Q, D * n, D * n)

    def kuf(self, x: Tensor) -> Tensor:
        """K_uf ``(Q, M, N)`` at points ``x`` ``(N, D)`` or ``(Q, N, D)`` (inside and outside [a, b])."""
        self._check(x, "x")
        lam, var = self.rates(), self.variances()  # (Q, D)
        om = self._frequencies()  # (D, F + 1)
        lo, hi = self.lower, self.upper
        xq = x if x.dim() == 3 else x.unsqueeze(0)  # (Q or 1, N, D)
        t = (xq.clamp(lo, hi) - lo).unsqueeze(-1) * om  # (Q|1, N, D, F + 1)
        inside = torch.cat([torch.cos(t), torch.sin(t[..., 1:])], -1)  # (Q|1, N, D, 2F + 1)
        # outside: boundary terms B(phi, g) with g^(i)(a) = kappa^(i)(distance), reflected above b
        below, above = xq < lo, xq > hi
        dist = torch.where(below, lo - xq, torch.where(above, xq - hi, torch.zeros_like(xq)))  # (Q|1, N, D)
        derivs = kappa_derivatives(dist, lam[:, None, :], var[:, None, :], self.order, 2)  # 3 x (Q, N, D)
        g = torch.stack(derivs, -1)  # (Q, N, D, 3)
        B = _boundary_weights(self.order, lam, var)  # (Q, D, 3, 3)
        Phi = self._feature_derivs(om)  # (D, 3, 2F + 1)
        bg = torch.einsum("qdij,qndj->qndi", B, g)  # (Q, N, D, 3)
        outside = torch.einsum("qndi,dim->qndm", bg, Phi)  # (Q, N, D, 2F + 1)
        F = self.num_frequencies
        sign = torch.cat([torch.ones(F + 1, dtype=x.dtype, device=x.device), -torch.ones(F, dtype=x.dtype, device=x.device)])
        outside = torch.where(above.unsqueeze(-1), outside * sign, outside)
        out = torch.where((below | above).unsqueeze(-1), outside, inside.expand_as(outside))
        Q, N = out.shape[0], out.shape[1]
        return out.reshape(Q, N, self.num_features).transpose(-1, -2)

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        f1, f2 = isinstance(x1, FeatureIndices), isinstance(x2, FeatureIndices)
        if f1 and f2:
            return self.kuu()
        if f1:
            return self.kuf(x2.as_subclass(Tensor))
        if f2:
            return self.kuf(x1.as_subclass(Tensor)).transpose(-1, -2)
        return super().forward(x1, x2)

    def forward_diag(self, x: Tensor) -> Tensor:
        if isinstance(x, FeatureIndices):
            return self.kuu().diagonal(dim1=-2, dim2=-1)
        return super().forward_diag(x)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", num_frequencies={self.num_frequencies}, M={self.num_features}"
