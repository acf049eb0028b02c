"""The posterior of each additive part of the kernel: :func:`predict_parts` (issue 53).

With a kernel that is a sum of terms, k = sum_j k_j (:mod:`savigp.kernels.terms`; Duvenaud et al.
2013, Lloyd et al. 2014), the latent function is a sum of independent processes f = sum_j f_j, and
u = f(Z) = sum_j f_j(Z). Whatever the likelihood, q(u) is a Gaussian, or a mixture of them, per
latent function (Bonilla et al. 2019, eq. (10)-(11)): component k is N(m_k, S_k) over u - mu. Given
u, part j is Gaussian with cross-covariance k_j(x, Z) to u, so under component k

    E[f_j(x)]            = k_j(x, Z) K_zz^-1 m_k,
    Var[f_j(x)]          = k_j(x, x) - k_j(x, Z) K_zz^-1 k_j(Z, x) + k_j(x, Z) K_zz^-1 S_k K_zz^-1 k_j(Z, x),
    Cov[f_j(x), f_l(x)]  =          - k_j(x, Z) K_zz^-1 k_l(Z, x) + k_j(x, Z) K_zz^-1 S_k K_zz^-1 k_l(Z, x)

(j != l: the parts are independent a priori, k_jl(x, x) = 0). These are the family's own marginals
(eq. (22)-(23), :meth:`savigp.posteriors.Posterior.marginals`) with k_j(Z, x) and k_j(x, x) in place
of the kernel's: the marginal mean is linear in K_zx and the variance a quadratic form in it, so
every family (whitened or over u, diagonal, joint, mixtures) gives its parts without a line of its
own. Covariances follow by polarization, Cov[f_j, f_l] = (Var[f_j + f_l] - Var[f_j] - Var[f_l]) / 2.
A mixture's moments are pi-weighted: E = sum_k pi_k E_k, Cov = sum_k pi_k (C_k + (E_k - E)(E_k - E)^T).

The prior mean mu and a mean head's shift r(x) (Salimbeni et al. 2018, :mod:`savigp.mean_heads`)
are not a kernel's: they are one more part, named ``"mean"`` (variance 0), last, present when the
model has a mean head or a non-zero or learned prior mean. The parts' means add up to
``model.predict(X).latent_mean`` (to rounding).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional, Sequence

import torch
from torch import Tensor

from .kernels.terms import KernelTerm, additive_terms
from .linalg import chunks as _chunks
from .posteriors import InducingPrior

#: the name of the part that holds the prior mean and the mean head's shift
MEAN_PART = "mean"
#: the fields of :class:`PartsPrediction` that hold a tensor per latent function, and the power of
#: a scale that multiplies them (means 1, variances and covariances 2)
_PER_LATENT = {"mean": 1, "var": 2, "cov": 2, "component_mean": 1, "component_var": 2, "component_cov": 2}


@dataclass(frozen=True)
class PartsPrediction:
    """The posterior of each additive part at N inputs, per latent function q = 0 .. Q-1.

    Attributes:
        names: ``names[q]``, the J_q parts' names, each as the kernel expression writes it
            (``"rbf(time)"``, ``"periodic(time) * rbf(time)"``), then ``"mean"`` when the model has a
            prior mean or mean head (:data:`MEAN_PART`); a name repeated gets `` #2``, `` #3``.
        mean: ``mean[q]`` ``(N, J_q)``, the mixture's means of the parts; they add up to the latent mean.
        var: ``var[q]`` ``(N, J_q)``, the mixture's marginal variances.
        cov: ``cov[q]`` ``(N, J_q, J_q)`` (the parts' covariances at each input; its diagonal is
            ``var[q]``) with ``covariance=True``, else None; within latent function q only (a joint
            family's covariances across latent functions are not given).
        active_dims: ``active_dims[q]``, each part's input columns (a tuple; None: all D; ``()``
            for the mean part).
        weights: the mixture weights pi ``(K,)``.
        component_mean, component_var: with ``components=True``, per component ``(K, N, J_q)``
            per latent function, else None; ``component_cov`` ``(K, N, J_q, J_q)`` with both
            ``components`` and ``covariance``.
    """

    names: list
    mean: list
    var: list
    cov: Optional[list]
    active_dims: list
    weights: Tensor
    component_mean: Optional[list] = None
    component_var: Optional[list] = None
    component_cov: Optional[list] = None

    @property
    def num_latent(self) -> int:
        """Q."""
        return len(self.names)

    def transformed(self, scale, shift) -> "PartsPrediction":
        """The parts of b_q + a_q f_q (``scale`` a and ``shift`` b, ``(Q,)`` each): a standardized
        target's units undone (y = b + a y_std). Each part's mean is scaled by a_q and its
        (co)variances by a_q^2; b_q is added to the ``"mean"`` part, appended where there is none."""
        scale = torch.as_tensor(scale, dtype=self.weights.dtype).reshape(-1)
        shift = torch.as_tensor(shift, dtype=self.weights.dtype).reshape(-1)
        if scale.numel() != self.num_latent or shift.numel() != self.num_latent:
            raise ValueError(f"scale and shift must be ({self.num_latent},), one per latent function, got "
                             f"{tuple(scale.shape)} and {tuple(shift.shape)}")
        out = {f: None if getattr(self, f) is None else [] for f in _PER_LATENT}
        names, dims = [], []
        for q in range(self.num_latent):
            a, b = float(scale[q]), float(shift[q])
            add = MEAN_PART not in self.names[q]
            names.append(self.names[q] + ([MEAN_PART] if add else []))
            dims.append(self.active_dims[q] + ([()] if add else []))
            for f, power in _PER_LATENT.items():
                value = getattr(self, f)
                if value is None:
                    continue
                v = value[q] * a ** power
                if add:  # one more part: a column (and a row of covariances) of zeros
                    v = torch.nn.functional.pad(v, (0, 1, 0, 1) if f.endswith("cov") else (0, 1))
                if power == 1:
                    v = v.clone()
                    v[..., len(names[q]) - 1 if add else self.names[q].index(MEAN_PART)] += b
                out[f].append(v)
        return replace(self, names=names, active_dims=dims, **out)


@torch.no_grad()
def predict_parts(model, X, *, covariance: bool = False, components: bool = False,
                  columns: Optional[Sequence[str]] = None) -> PartsPrediction:
    """The posterior of each additive part of ``model``'s kernel at inputs ``X`` (the module docstring).

    Args:
        model: a :class:`savigp.SAVIGP`.
        X: ``(N, D)`` inputs in the model's units (D = ``model.input_dim``; a 1-D array when D = 1).
        covariance: also the parts' covariances ``(N, J_q, J_q)``.
        components: also each mixture component's means and variances ``(K, N, J_q)``.
        columns: the D inputs' names, for the parts' names (default: column indices).

    Returns:
        a :class:`PartsPrediction`.

    Raises:
        ValueError: ``X`` not ``(N, D)``, naming both shapes.
    """
    X = model.as_model_inputs(X, "X")
    if columns is not None and len(columns) != model.input_dim:
        raise ValueError(f"columns must name the model's {model.input_dim} inputs, got {len(columns)} names")
    Q, post = model.num_latent, model.posterior
    prior = InducingPrior(model.prior_factor())
    state = post.evaluation_state(prior)
    head_state = model.head_state(prior)
    with_mean = model.head.size > 0 or model.prior_mean.requires_grad or bool((model.prior_mean != 0).any())
    terms = [additive_terms(model.kernel, q) for q in range(Q)]
    # rows per pass as the model's own prediction takes them (SAVIGP._latent_chunks), times the sets of
    # terms one pass holds at once (the total's, one part's or a pair's)
    row = 4 * Q * (model.num_inducing + post.num_components) * X.element_size() * 2
    rows = _chunks.chunk_size(X.shape[0], row, model.device)
    chunks = [_chunk(model, X[i:i + rows], prior, state, head_state, terms, with_mean, covariance)
              for i in range(0, X.shape[0], rows)]
    c_mean = [torch.cat([c[0][q] for c in chunks], dim=1) for q in range(Q)]  # (K, N, J_q)
    c_var = [torch.cat([c[1][q] for c in chunks], dim=1) for q in range(Q)]
    c_cov = [torch.cat([c[2][q] for c in chunks], dim=1) for q in range(Q)] if covariance else None
    pi = post.weights().detach()
    mean = [torch.einsum("k,knj->nj", pi, m) for m in c_mean]
    dev = [m - mu for m, mu in zip(c_mean, mean)]  # E_k - E, (K, N, J_q): no cancellation, a constant part's var is 0
    var = [torch.einsum("k,knj->nj", pi, v + d * d) for v, d in zip(c_var, dev)]
    cov = None
    if covariance:
        cov = [torch.einsum("k,knjl->njl", pi, c + d[..., :, None] * d[..., None, :]) for c, d in zip(c_cov, dev)]
    if with_mean:  # the mean part is the same number under every component: not random (no rounding left)
        for q in range(Q):
            var[q][:, -1] = 0.0
            if covariance:
                cov[q][:, -1, :] = 0.0
                cov[q][:, :, -1] = 0.0
    names = [_unique([t.name(columns) for t in ts] + ([MEAN_PART] if with_mean else [])) for ts in terms]
    dims = [[t.active_dims for t in ts] + ([()] if with_mean else []) for ts in terms]
    return PartsPrediction(names, mean, var, cov, dims, pi,
                           c_mean if components else None, c_var if components else None,
                           c_cov if components and covariance else None)


def _chunk(model, X: Tensor, prior: InducingPrior, state, head_state, terms: list, with_mean: bool,
           covariance: bool) -> tuple:
    """Per latent function q, the components' means and variances ``(K, B, J_q)`` (and covariances
    ``(K, B, J_q, J_q)``) of the parts at rows ``X (B, D)``."""
    post = model.posterior
    Z = model.kernel_inducing()
    rows = model.kernel.num_latent  # 1 for a kernel shared by the latent functions
    cache: dict = {}

    def marginals(*pieces: KernelTerm):
        """The family's marginals (K, B, Q) with the sum of the terms ``pieces`` as the kernel (once
        per set of terms: a kernel shared by the latent functions gives each the same terms)."""
        if pieces in cache:
            return cache[pieces]
        Kzx = X.new_zeros(rows, Z.shape[-2], X.shape[0])
        kxx = X.new_zeros(rows, X.shape[0])
        for t in pieces:
            a, b = t.rows
            Kzx[a:b] += t(Z, X)
            kxx[a:b] += t.diag(X)
        cache[pieces] = post.marginals(prior, Kzx, kxx, state)
        return cache[pieces]

    full = model.latent(X, prior, state, head_state)  # with the prior mean and the head's shift
    shift = full.mean - post.marginals(prior, model.kernel(Z, X), model.kernel.diag(X), state).mean
    shift = shift[:1].expand_as(shift)  # (K, B, Q): mu + r(x), added to every component alike
    means, variances, covs = [], [], []
    for q, ts in enumerate(terms):
        singles = [marginals(t) for t in ts]
        m = torch.stack([s.mean[..., q] for s in singles], dim=-1)  # (K, B, J)
        v = torch.stack([s.var[..., q] for s in singles], dim=-1)
        c = torch.diag_embed(v) if covariance else None
        if covariance:
            for j in range(len(ts)):
                for l in range(j + 1, len(ts)):
                    both = marginals(ts[j], ts[l]).var[..., q]
                    c[..., j, l] = c[..., l, j] = 0.5 * (both - v[..., j] - v[..., l])
        if with_mean:
            m = torch.cat([m, shift[..., q:q + 1]], dim=-1)
            v = torch.cat([v, torch.zeros_like(v[..., :1])], dim=-1)
            if covariance:
                c = torch.nn.functional.pad(c, (0, 1, 0, 1))
        means.append(m)
        variances.append(v)
        covs.append(c)
    return means, variances, covs


def _unique(names: list) -> list:
    """``names`` with a repeated one numbered (`` #2``, `` #3``), so that every part has its own."""
    seen: dict = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n} #{seen[n]}")
    return out
