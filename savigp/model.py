"""The SAVIGP model: Q latent GPs, a mixture-of-Gaussians posterior over inducing variables and a
black-box likelihood (Bonilla et al. 2019, §3-7).

A training step reads top to bottom, each part visited once (:meth:`SAVIGP._elbo`):

    data -> kernel matrices K_zz, K_zx (per latent function)
         -> the family's marginals q_k(f_n) (eq. 22-23), a LatentMarginals, shifted by the prior
            mean and the mean head (whose terms are computed once and passed explicitly)
         -> the registered estimator (one call: samples, likelihood values, the ELL estimate and
            its gradients, eq. 24-29)
         -> entropy (eq. 18) and cross-entropy (eq. 19) -> ELBO (eq. 17) -> optimizer.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field, fields
from typing import ClassVar, Optional, Sequence, Union

import torch
from torch import Tensor, nn

from .linalg import chunks as _chunks
from .runtime import sync_free
from ._checks import FLOAT32_MAX_OFFSET, as_inputs, as_targets, input_offset, writable
from .linalg.cholesky import base_jitter, jittered, robust_cholesky
from .estimators import checked_log_prob, make_estimator, resolve_estimator
from .inducing import initial_inducing_inputs
from .best_constant import FAR, MAX_ROWS, best_constant
from .kernels import KERNELS, Kernel, build_kernel, parse_kernel
from .kernels.periodogram import PeriodWarning, period_warnings
from .kernels.spec import default_lengthscale
from .estimators.nonfinite import NonFiniteLogProb
from .posteriors.marginals import LatentMarginals
from .mean_heads import DEFAULT_MEAN_BASIS, ZERO_HEAD, MeanHead, make_mean_head
from .posteriors import DEFAULT_ENTROPY, POSTERIORS, InducingPrior, Posterior, make_posterior


@dataclass
class ELBOTerms:
    """One evaluation of the ELBO (Bonilla et al. 2019, eq. (17)) on a batch.

    ``elbo`` is differentiable (its gradient is the estimator's); the other fields are detached
    0-dim tensors on the model's device in the paper's convention (u-space entropy and
    cross-entropy), for logging. They stay tensors so that a training step never waits for the
    device (``float(terms.ell)`` reads one back); :meth:`as_dict` reads them all at once.
    """

    elbo: Tensor
    ell: Union[Tensor, float]
    entropy: Union[Tensor, float]
    cross_entropy: Union[Tensor, float]
    mean_head_kl: Union[Tensor, float]
    #: a diagnostic (infinite for one sample): not a term a good training step needs finite
    ell_stderr: Union[Tensor, float] = field(metadata={"diagnostic": True})

    #: the field names, in order; CHECKED: those a good training step has finite (both set from the
    #: fields below the class, the one place the terms are named)
    NAMES: ClassVar[tuple] = ()
    CHECKED: ClassVar[tuple] = ()

    def stacked(self) -> Tensor:
        """The six values (in :data:`NAMES` order) as one detached tensor ``(6,)`` on the device."""
        like = self.elbo.detach()
        values = [like] + [getattr(self, n) for n in self.NAMES[1:]]
        # (a Python number becomes a device fill, not a host-to-device copy: a CUDA graph capture
        # refuses copies from pageable host memory)
        return torch.stack([v.detach().to(like.device, like.dtype) if isinstance(v, Tensor)
                            else torch.full((), float(v), dtype=like.dtype, device=like.device)
                            for v in values]).reshape(-1)

    def as_dict(self) -> dict:
        """The values as Python floats (one host read)."""
        return dict(zip(self.NAMES, self.stacked().tolist()))


ELBOTerms.NAMES = tuple(f.name for f in fields(ELBOTerms))
ELBOTerms.CHECKED = tuple(f.name for f in fields(ELBOTerms) if not f.metadata.get("diagnostic"))


@dataclass
class Prediction:
    """Predictions at B test inputs: what :meth:`SAVIGP.predict` and, in the data's original
    units, ``SavedModel.predict`` (model files, the command line) return.

    Attributes:
        latent_mean, latent_var: mixture-collapsed moments of q(f*), ``(B, Q)``, in the units the
            likelihood reads f in.
        mean, variance: predictive mean and variance of y*, ``(B, P)``; ``mean`` is None when the
            likelihood has no ``conditional_moments``, ``variance`` is None also when it gives
            E[y | f] only (a user ``mean_fn`` without a variance).
        probabilities: class probabilities ``(B, C)`` for classification likelihoods, else None;
            column c is the likelihood's c-th class.

    Fields are tensors; ``pred["mean"]`` reads a field by name and :meth:`numpy` gives a dict of
    float64 arrays with the same keys.
    """

    latent_mean: Tensor
    latent_var: Tensor
    mean: Optional[Tensor]
    variance: Optional[Tensor]
    probabilities: Optional[Tensor] = None

    FIELDS = ("mean", "variance", "probabilities", "latent_mean", "latent_var")

    def __getitem__(self, key: str):
        if key not in self.FIELDS:
            raise KeyError(f"Prediction has no field {key!r}; fields: {', '.join(self.FIELDS)}")
        return getattr(self, key)

    def numpy(self) -> dict:
        """``{field: float64 array or None}`` on the CPU, keys as :attr:`FIELDS`."""
        return {k: None if getattr(self, k) is None else getattr(self, k).detach().cpu().to(torch.float64).numpy()
                for k in self.FIELDS}


@dataclass
class PredictionState:
    """What every prediction at the same parameters shares, computed once by
    :meth:`SAVIGP.prediction_state`: the factor of K_zz (``prior``) and the mean head's per-evaluation
    terms (``head``, :meth:`savigp.mean_heads.OrthogonalMeanHead.evaluation_state`, or None). Pass it
    as ``state=`` to :meth:`SAVIGP.predict`, :meth:`~SAVIGP.predict_latent`, :meth:`~SAVIGP.draws` or
    :meth:`~SAVIGP.log_predictive_density` when predicting many times at the same parameters (one
    point per call, say); it is the caller's: the model keeps nothing, and it describes the
    parameters it was computed at (compute it again after they change)."""

    prior: InducingPrior
    head: object = None


def _tune_allocator() -> None:
    """Chunked prediction allocates and frees the same large blocks per chunk: keep them in the
    heap (see :func:`savigp.tune_cpu_allocator`; its effect is measured in docs/performance.md)."""
    from .runtime.allocator import tune_cpu_allocator

    tune_cpu_allocator()


def _check_finite_predictive(lp: Tensor, likelihood, offset: int) -> None:
    """Raise ``ValueError`` naming the test rows (``offset`` + chunk row) where a likelihood's
    ``predictive_log_prob`` ``(K, B)`` is NaN or +inf (-inf, a test point the posterior rules
    out, is a valid log-density)."""
    bad = torch.isnan(lp) | (lp == math.inf)
    if bool(bad.any()):
        rows = (bad.any(0).nonzero()[:, 0] + offset).tolist()
        raise ValueError(f"{type(likelihood).__name__}.predictive_log_prob returned NaN or +inf at "
                         f"{len(rows)} test row(s), the first at row(s) {rows[:3]}")


#: bytes that the Monte Carlo arrays of one chunk of test rows may take in :meth:`SAVIGP.predict`
#: and :meth:`SAVIGP.log_predictive_density` (their ``memory_budget`` argument overrides it)
PREDICT_MEMORY_BUDGET = 256 * 2 ** 20


class SAVIGP(nn.Module):
    """Sparse variational inference for Q latent GPs with any likelihood (Bonilla et al. 2019).

    Args:
        X: training inputs, ``(N, D)`` (a 1-D array is read as ``(N, 1)``).
        Y: training targets, ``(N, P)`` (a 1-D array is read as ``(N, 1)``), validated by the likelihood.
        likelihood: a :class:`likelihoods.Likelihood`; its ``num_latent`` gives Q.
        kernel: a :class:`savigp.kernels.Kernel` with ``num_latent == Q`` (one hyper-parameter set per
            latent function) or ``num_latent == 1`` (one kernel shared by all Q, see
            ``shared_kernel``) and ``input_dim == D``, or a name (``"rbf"``, ``"matern32"``,
            ``"matern52"``); default RBF with ARD length-scales initialized to ``sqrt(D)`` times each
            input's standard deviation.
        shared_kernel: one kernel and one set of inducing inputs for all Q latent functions (as
            GPflow's ``SharedIndependent`` with ``SharedIndependentInducingVariables``): K_zz is
            ``(1, M, M)``, factorized once, and K_zx ``(1, M, B)`` solved once per step instead of Q
            times; q(u_j) stays one per latent function. Implied by a kernel with ``num_latent == 1``
            when Q > 1; with a kernel name it builds that kernel with one hyper-parameter set.
        num_inducing: M per latent function (default ``min(N, 100)``); ignored when ``dense``.
        inducing_inputs: explicit initial inducing inputs ``(M, D)`` or ``(Q, M, D)`` (``(1, M, D)``
            with a shared kernel).
        inducing_init: ``"kmeans"`` or ``"subset"``.
        learn_inducing: learn the inducing inputs Z (each latent function has its own, or one set
            for all with a shared kernel).
        dense: the paper's dense case: Z = X, fixed, M = N.
        posterior: ``"full"`` (Cholesky-parametrized covariances), ``"diag"`` (diagonal in whitened
            coordinates, as GPflow's ``q_diag`` and GPyTorch's mean-field family; ``"diag-whitened"``
            before), ``"diag-u"`` (the paper's diagonal mixture over u, ``"diag"`` before: mean-field
            variances, intervals narrower than the full Gaussian's on dense models), ``"joint"``, or
            a :class:`~savigp.posteriors.Posterior`. A factorized family's ELBO pulls learned
            hyper-parameters towards settings where the family is tight (shorter length-scales, a
            pure-noise fit), most on dense models: fit ``"diag"`` or ``"diag-u"`` at a full Gaussian's
            hyper-parameters (:func:`savigp.warm_start`, then ``fit(..., groups=["posterior"])``;
            docs/mixtures.md).
        num_components: K, mixture components (K > 1: initial means spread around the prior mean,
            :func:`savigp.posteriors.spread_means`).
        entropy: the entropy term of a mixture with K > 1: ``"pairwise"`` (the default: the
            Bhattacharyya pairwise-distance lower bound of Kolchinsky & Tracey 2017, exact when the
            components coincide and when they are far apart, so ELBOs of different K compare),
            ``"bound"`` (Bonilla et al. 2019, eq. (18), the paper's: 0.153 Q M nats below the
            entropy at both extremes) or ``"mc"`` (a reparameterized Monte Carlo estimate of the
            exact entropy); see :meth:`savigp.posteriors.MixturePosterior._mixture_entropy`.
        entropy_samples: draws per component for ``entropy="mc"``.
        prior_mean: constant prior mean mu_j per latent function: a float or a sequence of Q floats.
            None (the default): 0, except for a latent function whose best constant for the targets,
            c_j = argmax sum_n log p(y_n | f_n = c) (:func:`savigp.best_constant.best_constant`, a 1-D
            search on the likelihood's values), is more than 2 prior standard deviations from 0
            (abs(c_j) > 2 sqrt(mean_n k_j(x_n, x_n)) at the initial kernel): its mu_j starts at c_j, so
            that, e.g., log-survival times near 6 are not explained by a latent function pulled from
            0 (:attr:`prior_mean_from_targets` says which values were set so).
        learn_prior_mean: learn mu_j (from where ``prior_mean`` starts it).
        mean_basis_size: size of the mean basis gamma per latent function (Salimbeni et al. 2018); 0 disables it.
        mean_basis: ``"orthogonal"`` (Salimbeni et al. (2018)'s orthogonally decoupled basis), ``"decoupled"``
            (Cheng & Boots 2017: mean from gamma alone, the posterior mean fixed at 0) or
            ``"hybrid"`` (Salimbeni et al. 2018, eq. (10)); see :mod:`savigp.mean_heads`.
        dtype, device: of every parameter and buffer (float64 on CPU by default).
        seed: seeds k-means and random initial means of mixture components.
    """

    def __init__(
        self,
        X,
        Y,
        likelihood,
        kernel: Union[Kernel, str, None] = None,
        *,
        shared_kernel: bool = False,
        num_inducing: Optional[int] = None,
        inducing_inputs=None,
        inducing_init: str = "kmeans",
        learn_inducing: bool = True,
        dense: bool = False,
        posterior: Union[str, Posterior] = "full",
        num_components: int = 1,
        entropy: str = DEFAULT_ENTROPY,
        entropy_samples: int = 64,
        prior_mean: Union[float, Sequence[float], None] = None,
        learn_prior_mean: bool = False,
        mean_basis_size: int = 0,
        mean_basis: str = DEFAULT_MEAN_BASIS,
        dtype: torch.dtype = torch.float64,
        device: Union[str, torch.device, None] = None,
        seed: int = 0,
    ):
        super().__init__()
        X = as_inputs(X, "X", dtype=torch.float64)
        Y = as_targets(Y, "Y", num_rows=X.shape[0], dtype=torch.float64)
        if dtype == torch.float32 and input_offset(X) > FLOAT32_MAX_OFFSET:
            warnings.warn(f"SAVIGP: X sits {input_offset(X):.3g} standard deviations from zero: float32 rounds away "
                          "most of its spread; centre it (X - X.mean(0), and the same shift for test inputs) or use "
                          "dtype=torch.float64", RuntimeWarning, stacklevel=2)
        likelihood.validate_targets(Y)
        likelihood.initialize_from_data(Y)
        N, D = X.shape
        Q = int(likelihood.num_latent)
        self.likelihood = likelihood
        self.num_data, self.input_dim, self.num_latent = N, D, Q

        # ---- kernel
        if kernel is None or isinstance(kernel, str):
            # a name or an expression (savigp.kernels.expression) with column indices: "rbf + periodic(0) * rbf(0)"
            spec = parse_kernel(kernel or "rbf", input_dim=D)
            for line in period_warnings(spec, X.numpy(), Y.numpy()):  # (a period in other units than its column's)
                warnings.warn(f"SAVIGP: {line}", PeriodWarning, stacklevel=2)
            kernel = build_kernel(spec, D, 1 if shared_kernel else Q, lengthscale=default_lengthscale(X), inputs=X)
        elif isinstance(kernel, dict):  # a spec (savigp.kernels.spec), e.g. from search_kernels or a model file
            kernel = build_kernel(kernel, D, 1 if shared_kernel else Q, lengthscale=default_lengthscale(X), inputs=X)
        if not isinstance(kernel, Kernel):
            raise TypeError(f"kernel must be a savigp.kernels.Kernel, a kernel expression or a spec, got {type(kernel).__name__}")
        if kernel.num_latent not in (1, Q) or (shared_kernel and kernel.num_latent != 1):
            raise ValueError(
                f"kernel has num_latent={kernel.num_latent} but the likelihood {type(likelihood).__name__} needs "
                f"Q={Q} latent functions" + (" (shared_kernel=True: a kernel with num_latent=1)" if shared_kernel
                                             else " (or num_latent=1: one kernel shared by all of them)")
            )
        self.shared_kernel = kernel.num_latent == 1 and Q > 1
        Qz = 1 if self.shared_kernel else Q  # sets of inducing inputs (and of K_zz)
        if kernel.input_dim != D:
            raise ValueError(f"kernel has input_dim={kernel.input_dim} but X has D={D} columns (X shape {tuple(X.shape)})")
        self.kernel = kernel

        # ---- inducing inputs
        self.dense = bool(dense)
        if self.dense:
            Z = X.unsqueeze(0).expand(Qz, N, D).clone()
            learn_inducing = False
        elif inducing_inputs is not None:
            Z = torch.as_tensor(writable(inducing_inputs), dtype=torch.float64)
            if Z.dim() == 2:
                Z = Z.unsqueeze(0).expand(Qz, *Z.shape).clone()
            if Z.dim() != 3 or Z.shape[0] != Qz or Z.shape[2] != D:
                raise ValueError(f"inducing_inputs must have shape (M, {D}) or ({Qz}, M, {D})"
                                 + (" (one set: the kernel is shared by the latent functions)" if self.shared_kernel
                                    else "") + f", got {tuple(Z.shape)}")
        else:
            M = min(N, 100) if num_inducing is None else int(num_inducing)
            if not 1 <= M <= N:
                raise ValueError(f"num_inducing must be between 1 and N={N} (rows of X), got {num_inducing}")
            Z0 = initial_inducing_inputs(X, M, inducing_init, seed=seed)
            Z = Z0.unsqueeze(0).expand(Qz, M, D).clone()
        if not torch.isfinite(Z).all():
            raise ValueError("inducing_inputs contain NaN or inf")
        self.learn_inducing = bool(learn_inducing)
        if self.learn_inducing:
            self.inducing = nn.Parameter(Z)
        else:
            self.register_buffer("inducing", Z)
        M = Z.shape[1]
        self.num_inducing = M

        # ---- prior means
        #: the prior means set from the targets' best constant (``prior_mean=None``), a list of Q, else None
        self.prior_mean_from_targets = None
        if prior_mean is None:
            prior_mean = self._prior_mean_from_targets(X, Y, kernel)
        mu = torch.as_tensor(writable(prior_mean), dtype=torch.float64).flatten()
        if mu.numel() == 1:
            mu = mu.expand(Q).clone()
        if mu.numel() != Q:
            raise ValueError(f"prior_mean must be a float or {Q} floats (one per latent function), got {mu.numel()}")
        if learn_prior_mean:
            self.prior_mean = nn.Parameter(mu)
        else:
            self.register_buffer("prior_mean", mu)

        # ---- posterior
        gen = torch.Generator().manual_seed(seed)
        given = isinstance(posterior, Posterior)
        if given:
            if (posterior.num_latent, posterior.num_inducing) != (Q, M):
                raise ValueError(f"posterior has (Q, M) = {(posterior.num_latent, posterior.num_inducing)}, model needs {(Q, M)}")
            self.posterior = posterior
        else:
            self.posterior = make_posterior(posterior, Q, M, num_components, generator=gen, entropy=entropy,
                                            entropy_samples=entropy_samples)
        self._check_shared_kernel(self.posterior, mean_basis_size)
        if not given:  # a family built here starts from the prior
            with torch.no_grad():
                self.posterior.start(lambda: self._factorize(kernel(Z).detach())[0])

        # ---- optional mean head (Salimbeni et al. 2018): a basis for the mean (None: the zero head, :attr:`head`)
        self.mean_head = None
        if mean_basis != DEFAULT_MEAN_BASIS and not mean_basis_size:
            raise ValueError(f"mean_basis={mean_basis!r} needs mean_basis_size > 0 (the size G of the basis)")
        if mean_basis_size:
            self.mean_head = make_mean_head(mean_basis, X, Q, int(mean_basis_size), seed=seed, posterior=self.posterior)
            self._check_shared_kernel(self.mean_head, mean_basis_size)

        # ---- training data (not saved in state_dict)
        self.register_buffer("train_x", X, persistent=False)
        self.register_buffer("train_y", Y, persistent=False)
        self.config = {
            "input_dim": D, "num_data": N, "num_latent": Q, "num_inducing": M, "dense": self.dense,
            "shared_kernel": self.shared_kernel,
            "learn_inducing": self.learn_inducing, "posterior": self.posterior.kind,
            "num_components": self.posterior.num_components, "learn_prior_mean": bool(learn_prior_mean),
            "entropy": self.posterior.entropy_estimate,
            "entropy_samples": int(self.posterior.entropy_samples or entropy_samples),
            "mean_basis_size": int(mean_basis_size), "mean_basis": mean_basis,
        }
        self.to(dtype=dtype, device=device)

    def _prior_mean_from_targets(self, X: Tensor, Y: Tensor, kernel: Kernel) -> Tensor:
        """The prior means when none is given ``(Q,)``: the targets' best constant c_j where it is
        more than :data:`~savigp.best_constant.FAR` prior standard deviations of f_j from 0, else 0
        (``prior_mean``'s documentation); records the values set in :attr:`prior_mean_from_targets`."""
        c = best_constant(self.likelihood, Y)
        with torch.no_grad():
            sd = kernel.diag(X[:MAX_ROWS]).mean(-1).clamp_min(0).sqrt().expand(c.shape[0])  # (Q,): a shared kernel's for all
        far = c.abs() > FAR * sd
        mu = torch.where(far, c, torch.zeros_like(c))
        if bool(far.any()):
            self.prior_mean_from_targets = [float(v) for v in mu]
        return mu

    def _check_shared_kernel(self, part, mean_basis_size: int) -> None:
        """Refuse a posterior family or a mean head (``part``) that does not take a kernel shared by the
        latent functions (its ``shared_kernel`` capability), before the family starts or once the
        head is built."""
        if self.shared_kernel and not part.shared_kernel:
            able = [name for name in POSTERIORS.names() if POSTERIORS[name].shared_kernel]
            raise ValueError(f"a kernel shared by the Q={self.num_latent} latent functions (num_latent=1) works with "
                             f"posterior {' or '.join(repr(f) for f in able)} and no mean basis; "
                             f"got posterior={self.posterior.kind!r}"
                             + (f", mean_basis_size={mean_basis_size}" if mean_basis_size else "")
                             + f": use a kernel with num_latent={self.num_latent}")

    def replace_posterior(self, posterior: Posterior) -> None:
        """Hold ``posterior`` (of the model's Q and M, e.g. a mixture grown or restarted by
        :mod:`savigp.selection.components`) and record its K and entropy term in :attr:`config` (what a
        model file records)."""
        if (posterior.num_latent, posterior.num_inducing) != (self.num_latent, self.num_inducing):
            raise ValueError(f"posterior has (Q, M) = {(posterior.num_latent, posterior.num_inducing)}, model needs "
                             f"{(self.num_latent, self.num_inducing)}")
        self.posterior = posterior
        self.config.update(num_components=posterior.num_components, entropy=posterior.entropy_estimate,
                           entropy_samples=int(posterior.entropy_samples))

    # ------------------------------------------------------------------ helpers
    @property
    def head(self) -> MeanHead:
        """The mean head as the model and the training loops use it (:class:`savigp.mean_heads.MeanHead`:
        its shift, KL and capabilities): :attr:`mean_head`, the basis of ``mean_basis_size`` (None
        without one), or else the zero head (:data:`savigp.mean_heads.ZERO_HEAD`: no shift, no KL,
        no parameters)."""
        return ZERO_HEAD if self.mean_head is None else self.mean_head

    @property
    def dtype(self) -> torch.dtype:
        return self.inducing.dtype

    @property
    def device(self) -> torch.device:
        return self.inducing.device

    def as_model_inputs(self, x, name: str = "X") -> Tensor:
        """Inputs ``x`` (array-like ``(B, D)``, or ``(B,)`` when D = 1) as a finite tensor of the
        model's dtype and device; a ValueError names ``name`` and the shapes when they do not fit."""
        return as_inputs(x, name, dtype=self.dtype, device=self.device, input_dim=self.input_dim)

    def kernel_inducing(self) -> Tensor:
        """The inducing inputs as the kernel gets them: ``(1, M, D)`` when they are fixed and the same
        for every latent function (so that a kernel can compute what depends on the inputs alone
        once for all Q, e.g. the isotropic RBF's distances), else ``self.inducing`` ``(Q, M, D)``.

        Whether the Q copies are equal is checked once per value of the buffer (keyed on its
        storage and in-place version counter, so a loaded or edited buffer is checked again)."""
        Z = self.inducing
        if isinstance(Z, nn.Parameter) or Z.shape[0] == 1:
            return Z
        key = (Z.data_ptr(), Z._version, tuple(Z.shape))
        cached = getattr(self, "_shared_inducing_key", None)
        if cached is None or cached[0] != key:
            cached = (key, bool(torch.equal(Z[:1].expand_as(Z), Z)))
            self._shared_inducing_key = cached
        return Z[:1] if cached[1] else Z

    def prior_factor(self) -> Tensor:
        """Cholesky factors L_zz of K_zz for every latent function, ``(Q, M, M)``, or the one factor of a
        kernel shared by them, ``(1, M, M)`` (see :meth:`_factorize`)."""
        Z = self.kernel_inducing()
        return self._factorize(self.kernel(Z))[0]

    def _factorize(self, Kzz: Tensor) -> tuple[Tensor, Tensor]:
        """Lower Cholesky factor of K_zz + rel * mean(diag K_zz) I, and rel ``(Q,)``. Differentiable.

        First try: rel = ``base_jitter(dtype)`` (or the larger jitter that :func:`savigp.fit` has
        found necessary earlier in training, ``self.jitter_floor``), which is what
        :func:`robust_cholesky` tries first (the same factor), built in one pass. A float32 model
        whose factorization fails retries in float64 with the same jitter (float32's jitter,
        float64's accuracy; the factor is rounded to float32) before the jitter grows. Then
        :func:`robust_cholesky` grows the jitter (with its warning) or raises the error that names
        the problem.

        Inside :func:`savigp.runtime.sync_free.deferred` (a training step of :func:`savigp.fit`) nothing is
        read back: one factorization at that jitter, a failure flagged on the device and the factor
        set to NaN; fit then grows ``jitter_floor`` at its next check (see :mod:`savigp.training.step`).
        """
        base = max(base_jitter(Kzz.dtype), float(getattr(self, "jitter_floor", 0.0)))
        flags = sync_free.active()
        if flags is not None:
            L, info = torch.linalg.cholesky_ex(jittered(Kzz, base))
            flags.note("cholesky", info != 0)
            return sync_free.nan_where_failed(L, info), torch.full(Kzz.shape[:-2], base, dtype=Kzz.dtype,
                                                                    device=Kzz.device)
        for work in (Kzz, Kzz.to(torch.float64)) if Kzz.dtype == torch.float32 else (Kzz,):
            L, info = torch.linalg.cholesky_ex(jittered(work, base))
            if bool((info == 0).all()) and bool(torch.isfinite(L.diagonal(dim1=-2, dim2=-1)).all()):
                return L.to(Kzz.dtype), torch.full(Kzz.shape[:-2], base, dtype=Kzz.dtype, device=Kzz.device)
        # larger jitter (with its warning), or the error that names the problem
        L, rel = robust_cholesky(Kzz, name="K_zz (inducing-point kernel matrix)", return_jitter=True,
                                 initial_jitter=10.0 * base)
        rel = torch.full(Kzz.shape[:-2], rel, dtype=Kzz.dtype, device=Kzz.device)
        return L, rel

    def _prior_parts(self) -> tuple[Tensor, Tensor, Tensor]:
        """K_zz with its autograd graph, its Cholesky factor L_zz *without* one, and the relative
        jitter that was added to the diagonal, ``(Q,)``.

        The training step differentiates through L_zz with the posteriors' fused backward passes
        (e.g. :meth:`savigp.posteriors.MixturePosterior.moments`), which hand the gradient to K_zz.
        """
        Z = self.kernel_inducing()
        Kzz = self.kernel(Z)
        with torch.no_grad():
            Lzz, jitter_rel = self._factorize(Kzz.detach())
        return Kzz, Lzz, jitter_rel

    def _prior(self) -> InducingPrior:
        """The prior as the posterior family needs it for a differentiable evaluation: fused (L_zz
        without graph, K_zz with it) or, for a family without a fused path, L_zz with autograd."""
        if self.posterior.fused_prior:
            Kzz, Lzz, jitter_rel = self._prior_parts()
            return InducingPrior(Lzz, Kzz, jitter_rel)
        return InducingPrior(self.prior_factor())

    def marginals(self, X: Tensor, Lzz: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
        """Marginals q_k(f_n) = prod_j N(b_knj, s2_knj) at inputs X (Bonilla et al. 2019, eq. (22)-(23)).

        In whitened form (see :mod:`savigp.posteriors`), with V_j = L_zz^-1 K_zx^j:

            b_knj  = mu_j + v_jn^T m_kj (+ the decoupled mean head r_j(x_n), Salimbeni et al. 2018)
            s2_knj = k_j(x_n, x_n) - v_jn^T v_jn + v_jn^T S_kj v_jn

        (for ``posterior="joint"`` the diagonals of the coupled q(f_n)).

        Args:
            X: ``(B, D)``.
            Lzz: optional precomputed :meth:`prior_factor` ``(Q, M, M)``; with an autograd graph the
                gradient flows through it, without one the kernel gets none through K_zz.

        Returns:
            means b and variances s2, each ``(K, B, Q)``.
        """
        q = self.latent(X, self._prior() if Lzz is None else InducingPrior(Lzz))
        return q.mean, q.var

    def head_state(self, prior: InducingPrior):
        """What the mean head computes once per evaluation for this ``prior`` and shares between its
        mean shift and its KL (:meth:`savigp.mean_heads.MeanHead.evaluation_state`), or None (the
        zero head, or a head that needs nothing)."""
        return self.head.evaluation_state(self.kernel, self.inducing, prior.Lzz, prior.Kzz, prior.jitter_rel)

    def latent(self, X: Tensor, prior: InducingPrior, state=None, head_state=None, *, point=None) -> LatentMarginals:
        """q(f_n) at inputs ``X (B, D)`` (Bonilla et al. 2019, eq. (22)-(23)): the family's marginals
        (:meth:`savigp.posteriors.Posterior.marginals`) with the prior mean and the mean head's
        shift r(x_n) (Salimbeni et al. 2018, eq. (11)) added, means ``(K, B, Q)``.

        Args:
            prior: the prior of this evaluation; state: the family's :meth:`evaluation_state` for it
                (None: computed by the family); head_state: :meth:`head_state` (None: computed here).
            point: a natural-gradient point of the family
                (:meth:`savigp.posteriors.Posterior.natural_point`): the marginals of q(v) at its
                autograd leaves (m, S) instead of the family's parameters.
        """
        Kzx = self.kernel(self.kernel_inducing(), X)  # (Q, M, B)
        kxx = self.kernel.diag(X)
        if point is None:
            q = self.posterior.marginals(prior, Kzx, kxx, state)
        else:
            q = self.posterior.natural_marginals(point, prior, Kzx, kxx)
        q = q.shifted(self.prior_mean)  # (K, B, Q)
        # the mean head's r(x) (Salimbeni et al. 2018: r = K_x,gamma a - K_xz K_zz^-1 K_z,gamma a; the zero head: none)
        return self.head.shifted(q, X, self.kernel, self.inducing, prior, Kzx, head_state)

    # ------------------------------------------------------------------ ELBO
    def elbo(self, batch: Optional[Tensor] = None, *, num_samples: int = 100, estimator: str = "auto",
             generator: Optional[torch.Generator] = None) -> ELBOTerms:
        """The ELBO (Bonilla et al. 2019, eq. (17)) on a mini-batch, scaled to the full data (eq. (33)).

        Args:
            batch: indices ``(B,)`` of training points, or None for all N.
            num_samples: S, samples per component and data point for Monte Carlo estimators
                (without gradients, e.g. under ``torch.no_grad()``, the S draws of a point are shared
                by the components: :func:`savigp.estimators.sampling.factorized_draws`).
            estimator: a name of :data:`savigp.ESTIMATORS` (:mod:`savigp.estimators`; ``"auto"`` picks closed form, else
                reparameterization for differentiable likelihoods, else the score function).
            generator: torch.Generator for the Monte Carlo draws.
        """
        X, Y = (self.train_x, self.train_y) if batch is None else (self.train_x[batch], self.train_y[batch])
        try:
            return self._elbo(X, Y, num_samples, estimator, generator)
        except NonFiniteLogProb as err:  # name the training-data rows, not the mini-batch's
            raise (err if batch is None else err.remap_rows(batch.detach().cpu())) from None

    def _elbo(self, X: Tensor, Y: Tensor, num_samples: int, estimator: str,
              generator: Optional[torch.Generator]) -> ELBOTerms:
        """One pass: the prior, the family's and the head's per-evaluation state, the marginals
        q(f_n) of the batch, the estimator (called once), the KL terms."""
        post = self.posterior
        prior = self._prior()
        state = post.evaluation_state(prior)  # computed once per step, shared by all terms
        head_state = self.head_state(prior)
        q = self.latent(X, prior, state, head_state)
        ell = make_estimator(estimator, self.likelihood, post.joint)(self.likelihood, Y, q, num_samples=num_samples,
                                                                     scale=self.num_data / X.shape[0], generator=generator)
        head_kl = self.head.kl(self.kernel, self.inducing, prior.Lzz, Kzz=prior.Kzz, jitter_rel=prior.jitter_rel,
                               posterior=post, state=head_state)
        ent, cross = post.kl_terms(prior, state, generator)
        return self.assemble_terms(ell, ent, cross, head_kl, prior.Lzz)

    def assemble_terms(self, ell, ent: Tensor, cross: Tensor, head_kl: Tensor, Lzz: Tensor) -> ELBOTerms:
        """The ELBO L = ELL + H[q] + E_q[log p(u)] - KL(head) (Bonilla et al. 2019, eq. (17)) and its
        terms, from the pieces a training rule computed itself (``savigp.fit_orthnat`` uses it).

        Args:
            ell: the expected log-likelihood estimate (an ``ELLEstimate``: value and stderr, 0-dim).
            ent, cross, head_kl: the entropy, cross-entropy and mean head's KL, 0-dim tensors.
            Lzz: the prior factor ``(Q, M, M)``.

        The entropy and cross-entropy are reported in the paper's u-space convention
        (:meth:`savigp.posteriors.Posterior.u_space_shift`: whitened terms' log|L_zz| parts cancel
        in the total)."""
        total = ell.value + ent + cross - head_kl
        shift = self.posterior.u_space_shift(Lzz)
        return ELBOTerms(total, ell.value.detach(), ent.detach() + shift, cross.detach() - shift,
                         head_kl.detach(), ell.stderr)

    def resolved_estimator(self, estimator: str = "auto") -> str:
        """The concrete estimator that ``estimator`` stands for with this model's likelihood and posterior
        (coupled across the latent functions or not); a one-line ``ValueError`` when it cannot run."""
        return resolve_estimator(estimator, self.likelihood, self.posterior.joint)

    # ------------------------------------------------------------------ prediction
    @torch.no_grad()
    def prediction_state(self) -> PredictionState:
        """The :class:`PredictionState` of the current parameters (the factor of K_zz and the mean
        head's terms), for many predictions at them."""
        prior = InducingPrior(self.prior_factor())
        return PredictionState(prior, self.head_state(prior))

    def _prediction_parts(self, state: Optional[PredictionState]) -> tuple:
        """(prior, head_state) of ``state``, computed when it is None."""
        state = self.prediction_state() if state is None else state
        return state.prior, state.head

    @torch.no_grad()
    def predict_latent(self, X, chunk_size: Optional[int] = None,
                       state: Optional[PredictionState] = None) -> tuple[Tensor, Tensor, Tensor]:
        """Per-component latent marginals at test inputs (Bonilla et al. 2019, §7).

        Args:
            X: ``(B, D)``.
            chunk_size: test inputs per chunk (default: what the device's memory budget allows,
                :mod:`savigp.linalg.chunks`; a few M x chunk cross-covariances per chunk).
            state: a :meth:`prediction_state` of the current parameters to reuse (default:
                computed here, once for all chunks).

        Returns:
            means ``(K, B, Q)``, variances ``(K, B, Q)`` and mixture weights ``(K,)``.
        """
        q = self._latent_chunks(self.as_model_inputs(X, "X"), chunk_size, *self._prediction_parts(state))
        return q.mean, q.var, self.posterior.weights()

    def _latent_chunks(self, X: Tensor, chunk_size: Optional[int] = None,
                       prior: Optional[InducingPrior] = None, head_state=None) -> LatentMarginals:
        """:meth:`latent` (no gradient) at model inputs ``X (B, D)`` in chunks of rows; ``prior``:
        the factor of K_zz when the caller has it already (else factorized here), ``head_state``
        the mean head's terms for it (else computed here, once for all chunks)."""
        prior = InducingPrior(self.prior_factor()) if prior is None else prior
        if head_state is None:
            head_state = self.head_state(prior)
        if chunk_size is None:
            row = 4 * self.num_latent * (self.num_inducing + self.posterior.num_components) * X.element_size()
            chunk_size = _chunks.chunk_size(X.shape[0], row, self.device)
        return LatentMarginals.cat([self.latent(X[i:i + chunk_size], prior, head_state=head_state)
                                    for i in range(0, X.shape[0], chunk_size)])

    @torch.no_grad()
    def draws(self, X, num_samples: int, seed: int = 0,
              state: Optional[PredictionState] = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Samples of the latent functions f* at test inputs ``X (B, D)`` from the posterior (Bonilla et al. 2019, §7).

        The standard normal draws ``(S, K, 1, Q)`` (from a CPU generator seeded with ``seed``) are
        shared by all rows, so a row's samples depend on its own input and the seed only, not on
        which other rows are drawn with it.

        Returns:
            f ``(S, K, B, Q)`` (S = ``num_samples`` per component, correlated across the Q latent
            functions for ``posterior="joint"``), log pi ``(K,)``, and the marginal means and
            variances ``(K, B, Q)`` the samples were drawn from.
        """
        return self._draws(self.as_model_inputs(X, "X"), num_samples, seed, *self._prediction_parts(state))

    def _draws(self, X: Tensor, num_samples: int, seed: int, prior: Optional[InducingPrior] = None, head_state=None):
        """:meth:`draws` at model inputs ``X`` (already checked); ``prior``, ``head_state`` as :meth:`_latent_chunks`."""
        q = self._latent_chunks(X, prior=prior, head_state=head_state)
        f = self._sample_latent(q, num_samples, seed)
        return f, self.posterior.log_weights().detach(), q.mean, q.var

    def _sample_latent(self, q: LatentMarginals, num_samples: int, seed: int) -> Tensor:
        """``num_samples`` draws of f* from every component's marginal, ``(S, K, B, Q)``, from the
        latent marginals ``q`` of :meth:`_latent_chunks`; the same draws for a given seed whichever
        rows are asked for."""
        K, _, Q = q.shape
        gen = torch.Generator().manual_seed(seed)
        eps = torch.randn((num_samples, K, 1, Q), dtype=q.mean.dtype, generator=gen).to(q.mean.device)
        return q.sample(eps)

    def _rows_per_chunk(self, total: int, num_samples: int, per_sample: int, memory_budget: Optional[int]) -> int:
        """Test rows per chunk (at most ``total``) so that the ``(S, K, rows, per_sample)`` Monte Carlo
        arrays (with a factor 4 for temporaries) fit in ``memory_budget`` bytes (default
        :data:`PREDICT_MEMORY_BUDGET`, or on an accelerator the larger of it and the device's budget
        of :func:`savigp.linalg.chunks.memory_budget`)."""
        if memory_budget is None:
            memory_budget = PREDICT_MEMORY_BUDGET
            if self.device.type != "cpu":
                memory_budget = max(memory_budget, _chunks.memory_budget(self.device))
        K = int(self.posterior.num_components)
        item = torch.finfo(self.dtype).bits // 8
        return _chunks.chunk_size(total, 4 * item * max(1, num_samples) * K * max(1, per_sample),
                                  budget=int(memory_budget))

    @torch.no_grad()
    def predict(self, X, num_samples: int = 500, seed: int = 0, memory_budget: Optional[int] = None,
                state: Optional[PredictionState] = None) -> Prediction:
        """Predictive moments of y* (and class probabilities) at test inputs ``X (B, D)``.

        Per component, E[y*] and Var[y*] come from the likelihood's ``predictive_moments`` when it
        has them, else from Monte Carlo over q_k(f*) with its ``conditional_moments`` (law of total
        variance); class probabilities likewise from ``predictive_class_probabilities`` (the
        logistic and probit likelihoods: no Monte Carlo) or else the mean of ``class_probabilities``
        over the draws; then they are mixed with pi. ``num_samples`` and ``seed`` matter only where
        Monte Carlo is used. Rows are predicted in chunks whose Monte Carlo
        arrays fit in ``memory_budget`` bytes (default :data:`PREDICT_MEMORY_BUDGET`); the draws are
        shared by all rows, so the chunking does not change the result. ``state``: a
        :meth:`prediction_state` of the current parameters to reuse (default: computed here, once
        for all chunks).
        """
        X = self.as_model_inputs(X, "X")
        lik = self.likelihood
        per_sample = self.num_latent + 2 * int(lik.output_dim) + int(getattr(lik, "num_classes", 0) or 0)
        B = X.shape[0]
        rows = self._rows_per_chunk(B, num_samples, per_sample, memory_budget)
        if B <= rows:
            return self._predict_rows(X, num_samples, seed, *self._prediction_parts(state))
        _tune_allocator()
        prior, head_state = self._prediction_parts(state)  # K_zz factorized once for all chunks, the head's terms
        fields = ("latent_mean", "latent_var", "mean", "variance", "probabilities")
        out = None
        for i in range(0, B, rows):
            part = self._predict_rows(X[i:i + rows], num_samples, seed, prior, head_state)
            if out is None:  # outputs allocated once: chunks' results kept in a list pin glibc's heap
                out = {f: None if getattr(part, f) is None else getattr(part, f).new_empty((B,) + getattr(part, f).shape[1:])
                       for f in fields}
            for f in fields:
                if out[f] is not None:
                    out[f][i:i + rows] = getattr(part, f)
            del part
        return Prediction(*[out[f] for f in fields])

    def predict_parts(self, X, *, covariance: bool = False, components: bool = False, columns=None):
        """The posterior of each additive part of the kernel at inputs ``X (N, D)``:
        :func:`savigp.predict_parts` (its docstring has the equations and the fields)."""
        from .parts import predict_parts

        return predict_parts(self, X, covariance=covariance, components=components, columns=columns)

    def _predict_rows(self, X: Tensor, num_samples: int, seed: int,
                      prior: Optional[InducingPrior] = None, head_state=None) -> Prediction:
        """:meth:`predict` for one chunk of rows ``X (B, D)`` (a model tensor); ``prior`` and
        ``head_state`` as :meth:`_latent_chunks`."""
        q = self._latent_chunks(X, prior=prior, head_state=head_state)
        mean, var = q.mean, q.var
        pi = self.posterior.log_weights().detach().exp()
        latent_mean = torch.einsum("k,kbq->bq", pi, mean)
        latent_var = torch.einsum("k,kbq->bq", pi, var + mean * mean) - latent_mean ** 2
        lik = self.likelihood
        drawn = {}

        def f():  # the Monte Carlo draws, made only when something below needs them
            if "f" not in drawn:
                drawn["f"] = self._sample_latent(q, num_samples, seed)
            return drawn["f"]

        y_mean = y_var = probs = None
        try:
            try:  # per component without Monte Carlo, when the likelihood can (closed form, quadrature)
                m_k, v_k = lik.predictive_moments(mean, var)  # (K, B, P)
                second = v_k + m_k * m_k
            except NotImplementedError:
                cm, cv = lik.conditional_moments(f())  # (S, K, B, P); cv None: E[y | f] only
                m_k = cm.mean(0)
                second = None if cv is None else (cv + cm * cm).mean(0)
            y_mean = torch.einsum("k,kbp->bp", pi, m_k)
            if second is not None:
                y_var = torch.einsum("k,kbp->bp", pi, second) - y_mean ** 2
        except NotImplementedError:
            pass
        if lik.task == "classification":
            try:  # per component without Monte Carlo, when the likelihood can
                per_component = lik.predictive_class_probabilities(mean, var)  # (K, B, C)
            except NotImplementedError:
                per_component = lik.class_probabilities(f()).mean(0)
            probs = torch.einsum("k,kbc->bc", pi, per_component)
        return Prediction(latent_mean, latent_var, y_mean, y_var, probs)

    @torch.no_grad()
    def log_predictive_density(self, X, Y, num_samples: int = 1000, seed: int = 0, chunk_size: Optional[int] = None,
                               memory_budget: Optional[int] = None, state: Optional[PredictionState] = None) -> Tensor:
        """log p(y*_n | x*_n) for every test point, ``(B,)`` (Bonilla et al. 2019, §7):

            log p(y* | x*) ~= logsumexp_{k, s}(log pi_k + log p(y* | f*_ks)) - log S,

        with S = ``num_samples`` draws f*_ks (from ``seed``) from each component's marginal. When
        the likelihood has ``predictive_log_prob`` (the logistic and probit likelihoods: quadrature,
        closed form), no draws are made:

            log p(y* | x*) = logsumexp_k(log pi_k + log int p(y* | f) q_k(f*) df).

        Rows go in chunks of ``chunk_size`` (default: as many as fit in ``memory_budget`` bytes,
        see :meth:`predict`).
        """
        X = self.as_model_inputs(X, "X")
        Y = as_targets(Y, "Y", num_rows=X.shape[0], dtype=self.dtype, device=self.device)
        if chunk_size is None:
            chunk_size = self._rows_per_chunk(X.shape[0], num_samples,
                                               self.num_latent + int(self.likelihood.output_dim) + 2, memory_budget)
        if X.shape[0] > chunk_size:
            _tune_allocator()
        out = X.new_empty(X.shape[0])
        prior, head_state = self._prediction_parts(state)  # K_zz factorized once for all chunks, the head's terms
        log_pi = self.posterior.log_weights().detach()
        for i in range(0, X.shape[0], chunk_size):
            xb, yb = X[i:i + chunk_size], Y[i:i + chunk_size]
            q = self._latent_chunks(xb, prior=prior, head_state=head_state)
            try:  # without Monte Carlo, when the likelihood can
                lp = self.likelihood.predictive_log_prob(yb, q.mean, q.var)  # (K, B)
            except NotImplementedError:
                lp = None
            if lp is not None:
                _check_finite_predictive(lp, self.likelihood, offset=i)
                out[i:i + chunk_size] = torch.logsumexp(lp + log_pi[:, None], dim=0)
                continue
            f = self._sample_latent(q, num_samples, seed)  # (S, K, B, Q)
            try:
                lp = checked_log_prob(self.likelihood, yb, f)  # (S, K, B)
            except NonFiniteLogProb as err:
                raise err.remap_rows(offset=i) from None
            lse = torch.logsumexp(lp + log_pi[None, :, None], dim=(0, 1))
            out[i:i + chunk_size] = lse - math.log(num_samples)
        return out

    def extra_repr(self) -> str:
        return (f"N={self.num_data}, D={self.input_dim}, Q={self.num_latent}, M={self.num_inducing}, "
                f"dense={self.dense}, learn_inducing={self.learn_inducing}")
