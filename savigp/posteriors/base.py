"""The protocol every variational posterior family implements, so that the model holds no branch
on the family (Bonilla et al. 2019, §4-7).

A family describes q(u) over the inducing values u_j = u(Z_j) of the Q latent functions (M per
function, K mixture components) in its own coordinates (whitened v = L_zz^-1 (u - mu), or u
itself). One evaluation of the ELBO (eq. (17)) passes through it once, in this order:

1. :meth:`Posterior.evaluation_state` -- whatever it computes once per evaluation and shares
   between the terms (its scales, or its u-space parameters for the current prior);
2. :meth:`Posterior.marginals` -- q(f_n) less the prior mean at B inputs (eq. (22)-(23)) as a
   :class:`~savigp.posteriors.marginals.LatentMarginals`: means and variances ``(K, B, Q)``
   always, covariances ``(K, B, Q, Q)`` for a family coupled across the latent functions (else
   None), log-weights ``(K,)``. The model adds the prior mean and the mean head's shift and hands
   the result to the estimator of the expected log-likelihood (eq. (24), (29)) it was asked for
   (:data:`savigp._choices.ESTIMATORS`): the family does not estimate it;
3. :meth:`Posterior.kl_terms` -- the entropy (eq. (18)) and cross-entropy (eq. (19)) terms in
   the family's coordinates; adding :meth:`Posterior.u_space_shift` to the entropy and
   subtracting it from the cross-entropy gives them in the paper's u-space convention.

Prediction reads the same marginals (their ``sample`` draws f*). A family that takes
natural-gradient steps (:func:`savigp.fit_orthnat`; Salimbeni et al. 2018, eq. (15b)-(15c)) owns
them: :meth:`Posterior.natural_point` (q(v) = N(m, S) with m and S as autograd leaves),
:meth:`Posterior.natural_marginals` (the marginals at those leaves) and
:meth:`Posterior.natural_step` (the update, :func:`savigp.posteriors.natural.natural_update`).
The prior enters through :class:`InducingPrior`:
a Cholesky factor L_zz of the (jittered) K_zz, with autograd through it (the reference path), or
without graph together with K_zz itself (the fused path, where the families' hand-written backward
passes hand the gradient to K_zz; :attr:`Posterior.fused_prior` says which a family needs).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from torch import Tensor, nn

from .. import _choices
from .entropy import DEFAULT_ENTROPY
from .marginals import LatentMarginals
from .natural import NaturalPoint


@dataclass
class InducingPrior:
    """The prior over the inducing values as one ELBO evaluation sees it.

    Attributes:
        Lzz: ``(Q, M, M)`` lower Cholesky factor of K_zz + rel * mean(diag K_zz) I; with an autograd
            graph (reference path) or without one (fused path).
        Kzz: ``(Q, M, M)`` K_zz with its graph on the fused path (the hand-written backward passes
            give it the gradient), else None.
        jitter_rel: ``(Q,)`` the relative jitter rel that was added before factorizing, or None.
    """

    Lzz: Tensor
    Kzz: Optional[Tensor] = None
    jitter_rel: Optional[Tensor] = None

    @property
    def fused(self) -> bool:
        """Whether L_zz carries no graph (the gradient reaches the kernel only through ``Kzz``)."""
        return not self.Lzz.requires_grad


def variance_floor(kxx: Tensor) -> Tensor:
    """The smallest marginal variance kept, 1e-12 max_n k(x_n, x_n) (+1e-30): a 0-dim tensor (no host read)."""
    return 1e-12 * kxx.detach().amax() + 1e-30


class Posterior(nn.Module):
    """Base class of the variational posterior families (the protocol of the module docstring).

    Subclasses set ``kind`` (the name :func:`savigp.posteriors.make_posterior` builds them from,
    their entry in :data:`savigp._choices.POSTERIORS`), ``num_components`` (K), ``num_latent`` (Q)
    and ``num_inducing`` (M).
    """

    kind: str = ""
    #: the parameters describe q(v) of the whitened v = L_zz^-1 (u - mu) (True) or q(u - mu) (False)
    whitened: bool = True
    #: the means are whitened coordinates of u (a linear functional of the mean, such as the hybrid
    #: mean head's <h, mu>_H, is then taken as for a whitened family)
    mean_whitened: bool = True
    #: whether :meth:`marginals` may be given a prior factor without graph together with K_zz (the
    #: fused path); False: the model factorizes K_zz with autograd for this family
    fused_prior: bool = True
    #: q(f_n) is coupled across the latent functions (covariances ``(K, B, Q, Q)``); its samples need
    #: per-point factorizations that check their status on the host (no CUDA-graph capture)
    joint: bool = False
    #: the entropy term of a mixture with K > 1, ``"pairwise"`` (Kolchinsky & Tracey 2017), ``"bound"``
    #: (eq. (18)) or ``"mc"``, and its draws per component (None: the family has no Monte Carlo entropy)
    entropy_estimate: str = "pairwise"
    entropy_samples: Optional[int] = None
    #: the most components K the family takes (None: any); a model file asking for more is refused
    max_components: Optional[int] = None

    # ------------------------------------------------------------------ capabilities (read by callers, never names)
    #: takes a kernel shared by the Q latent functions (a kernel with ``num_latent=1``,
    #: ``SAVIGP(shared_kernel=True)``): its marginals broadcast a ``(1, M, M)`` prior factor and a
    #: ``(1, M, B)`` K_zx over the Q latent functions (tested against Q equal kernels)
    shared_kernel: bool = False
    #: gives its moments over u per latent function (:meth:`u_moments`) and is set from them
    #: (:meth:`init_from_moments`): a source and a target of :func:`savigp.warm_start`
    function_moments: bool = False
    #: covariances diagonal in the family's own coordinates (a factorized q(u), whose ELBO biases
    #: hyper-parameters learned with it on dense models: :func:`savigp.training.warm_start.joint_factorized_fit`)
    diagonal: bool = False
    #: diagonal over the inducing values u themselves (not over whitened coordinates): with a Gaussian
    #: likelihood on a dense model its optimum at given hyper-parameters is the mean-field one, whose
    #: variances 1 / diag(C^-1) are never above the exact posterior's diag(C) (narrower predictive
    #: intervals, Bishop 2006, §10.1.2; ``savigp train`` warns, :func:`savigp.cli.two_stage.mean_field_warning`)
    mean_field_over_u: bool = False
    #: the version of the parametrization a family records in its ``parametrization`` buffer (None: the
    #: family has none; :mod:`savigp.model_files.migrations` converts a file's older one)
    PARAMETRIZATION: Optional[int] = None
    #: takes the component moves of :func:`savigp.fit`'s exploration of starts and of the search for
    #: K (:meth:`spread_along`, :meth:`restart_means`, :meth:`fold`,
    #: :meth:`transform`, :meth:`component_pairs`, :meth:`grown`, :meth:`restarted`;
    #: :class:`~savigp.posteriors.MixturePosterior` implements them)
    component_moves: bool = False

    @classmethod
    def build(cls, num_latent: int, num_inducing: int, num_components: int = 1, **options) -> "Posterior":
        """The family for Q = ``num_latent``, M = ``num_inducing`` and K = ``num_components``, as
        :func:`~savigp.posteriors.make_posterior` builds it by name; ``options``: ``generator``,
        ``entropy``, ``entropy_samples`` (a family ignores those it has no use for). By default
        ``cls(num_latent, num_inducing, num_components, **options)``."""
        return cls(num_latent, num_inducing, num_components, **options)

    # ------------------------------------------------------------------ weights
    def weights(self) -> Tensor:
        """Mixture weights pi, ``(K,)``."""
        return torch.exp(self.log_weights())

    def log_weights(self) -> Tensor:
        """log pi, ``(K,)``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ one ELBO evaluation
    def evaluation_state(self, prior: InducingPrior) -> Any:
        """What one evaluation computes once and shares between :meth:`marginals` and
        :meth:`kl_terms` (None: nothing)."""
        return None

    def marginals(self, prior: InducingPrior, Kzx: Tensor, kxx: Tensor, state: Any = None) -> LatentMarginals:
        """q(f_n) less the prior mean at B inputs, with the family's log-weights.

        Args:
            prior: the prior factor (and K_zz on the fused path).
            Kzx: ``(Q, M, B)`` cross-covariances k(Z_j, x_n); kxx: ``(Q, B)`` prior variances.
            state: :meth:`evaluation_state` of this evaluation, or None (computed here).
        """
        raise NotImplementedError

    def kl_terms(self, prior: InducingPrior, state: Any = None,
                 generator: Optional[torch.Generator] = None) -> tuple[Tensor, Tensor]:
        """The entropy (eq. (18)) and cross-entropy (eq. (19)) terms, scalars, in the family's
        coordinates (see :meth:`u_space_shift`). ``generator``: for Monte Carlo entropies."""
        raise NotImplementedError

    def u_space_shift(self, Lzz: Tensor) -> Tensor:
        """sum_j log|L_zz^j| for whitened families, 0 for u-space ones (a 0-dim tensor without
        graph): entropy + shift and cross-entropy - shift are the paper's u-space terms. ``Lzz``
        ``(Q, M, M)``, or ``(1, M, M)`` for a kernel shared by the Q latent functions (Q equal terms)."""
        if self.whitened:
            logdet = torch.log(Lzz.detach().diagonal(dim1=-2, dim2=-1)).sum()
            return logdet * (self.num_latent // Lzz.shape[-3])
        return Lzz.new_zeros(())

    # ------------------------------------------------------------------ moments over u (warm starts)
    def u_moments(self, Lzz: Tensor) -> tuple[Tensor, Tensor]:
        """q(u - mu) per component: means ``(K, Q, M)`` and lower factors ``(K, Q, M, M)`` of the
        covariances C_kj = F_kj F_kj^T, for the prior factor ``Lzz`` ``(Q, M, M)``."""
        raise NotImplementedError(f"{type(self).__name__} does not give its moments over u (u_moments)")

    def init_from_moments(self, mean: Tensor, factor: Tensor, Lzz: Tensor, *, variances: str = "mean-field",
                          spread: float = 1.0, generator: Optional[torch.Generator] = None) -> None:
        """Set this posterior from a Gaussian q(u - mu) = N(mean, factor factor^T) per latent function
        (``mean (Q, M)``, ``factor (Q, M, M)`` lower triangular) for the prior factor ``Lzz (Q, M, M)``:
        the warm start of :func:`savigp.warm_start`. ``variances``: the diagonal a factorized family
        keeps (:mod:`savigp.posteriors.moments`); ``spread``: K > 1 components' means are spread
        around ``mean`` by :func:`~savigp.posteriors.spread_means` in units of their own standard
        deviations; equal weights."""
        raise NotImplementedError(f"{type(self).__name__} cannot be set from moments over u (init_from_moments)")

    # ------------------------------------------------------------------ size, before one is built
    @classmethod
    def cost_terms(cls, num_components: int, num_latent: int, num_inducing: int, batch: int) -> tuple[int, int, float]:
        """What this family adds to a model's cost (:func:`savigp.cost.model_cost`, read before the
        model is built): the numbers its covariances hold, the numbers one mini-batch of ``batch``
        rows needs beyond K_zx and V, and the floating-point operations of one step beyond the
        prior's. By default those of a diagonal family: K Q M numbers, nothing more."""
        return num_components * num_latent * num_inducing, 0, 0.0

    @classmethod
    def state_shapes(cls, *, num_components: int, num_latent: int, num_inducing: int) -> dict[str, tuple]:
        """The shapes of the tensors this family keeps in a model's state dict (names relative to the
        family) for K = ``num_components``, Q = ``num_latent`` and M = ``num_inducing``: what a model
        file is checked against before anything is built from it
        (:func:`savigp.model_files.schema.check_config`), so that a file cannot claim sizes its
        tensors do not hold. By default the component means ``mean`` ``(K, Q, M)``
        (:attr:`component_means`), as every built-in family holds them; a family that keeps other
        tensors declares its own."""
        return {"mean": (num_components, num_latent, num_inducing)}

    # ------------------------------------------------------------------ set-up and capabilities
    def start(self, prior_factor: Callable[[], Tensor]) -> None:
        """Called once by a model that built this posterior from its name; families whose initial
        state depends on the prior call ``prior_factor()`` (``(Q, M, M)``)."""

    def natural_gradient_obstacle(self) -> Optional[str]:
        """Why :func:`savigp.fit_orthnat` cannot update this posterior (a message), or None."""
        return None

    # ------------------------------------------------------------------ natural gradients (families with one Gaussian)
    def natural_point(self) -> "NaturalPoint":
        """The start of a natural-gradient step (Salimbeni et al. 2018, eq. (15b)-(15c)): q(v) = N(m, S)
        with m and S as autograd leaves (:class:`~savigp.posteriors.natural.NaturalPoint`).

        Raises:
            ValueError: :meth:`natural_gradient_obstacle`'s message, for a family that takes no such step.
        """
        raise ValueError(self.natural_gradient_obstacle() or f"{type(self).__name__} takes no natural-gradient steps")

    def natural_marginals(self, point: "NaturalPoint", prior: InducingPrior, Kzx: Tensor, kxx: Tensor) -> LatentMarginals:
        """:meth:`marginals` of q(v) = N(``point.mean``, ``point.cov``) (autograd through ``prior.Lzz``
        and the point's leaves), for the gradients d ELL / dm and d ELL / dS of a natural step."""
        raise NotImplementedError(f"{type(self).__name__} takes no natural-gradient steps")

    def natural_step(self, point: "NaturalPoint", g_mean: Tensor, g_cov: Tensor, step: float, *,
                     fix_mean: bool = False) -> float:
        """Take the natural-gradient step of size ``step`` (tau in (0, 1]) from ``point`` with the
        expected log-likelihood's gradients ``g_mean`` (in m) and ``g_cov`` (in S), and set the
        parameters to its result (``fix_mean``: keep m at zero, a head that fixes the coupled mean).
        Returns the step taken (halved until the precision is positive definite)."""
        raise NotImplementedError(f"{type(self).__name__} takes no natural-gradient steps")

    @property
    def supports_natural_gradients(self) -> bool:
        """Whether :func:`savigp.fit_orthnat`'s natural-gradient step applies to this posterior."""
        return self.natural_gradient_obstacle() is None

    # ------------------------------------------------------------------ first-order steps
    def precondition_gradients(self) -> None:
        """Rescale the gradients of this family's parameters in place after the backward pass and
        before a first-order step (Adam, Adadelta; not L-BFGS, whose line search needs the true
        gradient); by default nothing. A mixture divides each component's by its weight
        (:meth:`savigp.posteriors.MixturePosterior.precondition_gradients`)."""

    # ------------------------------------------------------------------ the means
    @property
    def component_means(self) -> Tensor:
        """The components' means ``(K, Q, M)`` in the coordinates the family holds them (whitened v, or
        the prior-conditioned w of the diagonal mixture over u; both linear in u - mu, see
        :attr:`mean_whitened`), as the parameter itself (a gradient in the means is taken with
        respect to it; a mean head that fixes the coupled mean sets it)."""
        raise NotImplementedError(f"{type(self).__name__} does not give its component means (component_means)")

    @property
    def weight_logits(self) -> Optional[Tensor]:
        """The parameter ``(K,)`` whose softmax is the mixture weights, trained at a rate of its own
        (:func:`savigp.training.fitting.mixture_param_groups`); None where the family has no weights
        to learn."""
        return None

    # ------------------------------------------------------------------ component moves (component_moves)
    def _no_moves(self, what: str) -> NotImplementedError:
        return NotImplementedError(f"{type(self).__name__} takes no component moves ({what}; component_moves is False)")

    def spread_along(self, directions: Tensor, generator: Optional[torch.Generator] = None) -> None:
        """Set the component means along ``directions`` ``(R, Q, M)`` (:meth:`savigp.posteriors.MixturePosterior.spread_along`)."""
        raise self._no_moves("spread_along")

    def restart_means(self, prior_factor: Callable[[], Tensor], generator: Optional[torch.Generator] = None) -> None:
        """A fresh random start of the component means around their weighted centre
        (:meth:`savigp.posteriors.MixturePosterior.restart_means`)."""
        raise self._no_moves("restart_means")

    def fold(self, component: int, prior_factor: Callable[[], Tensor], smoothing: float = 0.1) -> Tensor:
        """Make a component's mean of one sign per latent function (:meth:`savigp.posteriors.MixturePosterior.fold`)."""
        raise self._no_moves("fold")

    def transform(self, source: int, target: int, matrix: Tensor, prior_factor: Callable[[], Tensor]) -> None:
        """Replace a component by the image of another under a linear map of the latent functions
        (:meth:`savigp.posteriors.MixturePosterior.transform`)."""
        raise self._no_moves("transform")

    def component_pairs(self) -> list:
        """The ordered pairs of components a move tries (:meth:`savigp.posteriors.MixturePosterior.component_pairs`)."""
        raise self._no_moves("component_pairs")

    def grown(self, component: int, prior_factor: Callable[[], Tensor], *, entropy: Optional[str] = None) -> "Posterior":
        """This family with K + 1 components, component ``component`` split in two
        (:meth:`savigp.posteriors.MixturePosterior.grown`)."""
        raise self._no_moves("grown")

    def restarted(self, num_components: int, prior_factor: Callable[[], Tensor], *,
                  generator: Optional[torch.Generator] = None, entropy: Optional[str] = None) -> "Posterior":
        """A fresh posterior of this family with ``num_components`` components
        (:meth:`savigp.posteriors.MixturePosterior.restarted`)."""
        raise self._no_moves("restarted")


class ScaledPosterior(Posterior):
    """A family whose terms all start from its covariance scale (:meth:`scale`: Cholesky factors
    or standard deviations of S): one evaluation computes it once (:meth:`evaluation_state`) and
    the KL terms are :meth:`entropy` (eq. (18)) and :meth:`cross_entropy` (eq. (19)) of it."""

    def scale(self) -> Tensor:
        """The factors of the covariance(s) of q, in the family's own layout."""
        raise NotImplementedError

    def entropy(self, scale: Optional[Tensor] = None, *, generator: Optional[torch.Generator] = None) -> Tensor:
        """The entropy term from ``scale`` (default :meth:`scale`); ``generator`` for a Monte Carlo one."""
        raise NotImplementedError

    def cross_entropy(self, scale: Optional[Tensor] = None) -> Tensor:
        """The cross-entropy term from ``scale`` (default :meth:`scale`)."""
        raise NotImplementedError

    def evaluation_state(self, prior: InducingPrior) -> Tensor:
        """:meth:`scale`, shared by the marginals and the KL terms of one evaluation."""
        return self.scale()

    def kl_terms(self, prior: InducingPrior, state: Any = None,
                 generator: Optional[torch.Generator] = None) -> tuple[Tensor, Tensor]:
        """(:meth:`entropy`, :meth:`cross_entropy`) of ``state`` (default :meth:`scale`)."""
        scale = self.scale() if state is None else state
        return self.entropy(scale, generator=generator), self.cross_entropy(scale)


def make_posterior(kind: str, num_latent: int, num_inducing: int, num_components: int = 1,
                   generator: Optional[torch.Generator] = None, entropy: str = DEFAULT_ENTROPY,
                   entropy_samples: int = 64) -> Posterior:
    """Build a posterior by name (an entry of :data:`savigp.posteriors.POSTERIORS`, by its class's ``build``).

    * ``"full"`` (or ``"fg"``): full covariances, whitened; K = 1 is :class:`~savigp.posteriors.FullGaussian`.
    * ``"diag"`` (or ``"diag-whitened"``, ``"diagonal"``): diagonal in whitened coordinates,
      :class:`~savigp.posteriors.DiagonalMixture`.
    * ``"diag-u"`` (or ``"mog"``): the paper's diagonal mixture over u, :class:`~savigp.posteriors.UDiagonalMixture`.
    * ``"joint"``: one Gaussian over all Q * M whitened values, coupled across the latent
      functions (:class:`~savigp.posteriors.JointGaussian`; K = 1).

    ``entropy`` (``"pairwise"``, the default; ``"bound"``, eq. (18); or ``"mc"``) and
    ``entropy_samples`` choose the entropy term of mixtures with K > 1 (see
    :meth:`savigp.posteriors.MixturePosterior.entropy`).

    Raises:
        ValueError: an unknown ``kind``, naming the registered ones.
    """
    family = _choices.POSTERIORS[_choices.POSTERIORS.canonical(kind)]
    return family.build(num_latent, num_inducing, num_components, generator=generator, entropy=entropy,
                        entropy_samples=entropy_samples)
