"""The protocol of the mean heads (``mean_basis=``): a basis for the posterior mean beside the
inducing points (Salimbeni et al. 2018), and the zero head a model without one holds, so that the
model and the training loops never ask whether there is a head.

A head adds, per latent function j, a function r_j(x) to every mixture component's mean (Salimbeni
et al. 2018, eq. (11)) and a term KL(head) to the ELBO's KL (Bonilla et al. 2019, eq. (17): L = ELL +
H[q] + E_q[log p(u)] - KL(head)). One evaluation of the ELBO passes through it once, in this order:

1. :meth:`MeanHead.evaluation_state` -- what it computes once for the evaluation's prior and
   shares between its mean shift and its KL (None: nothing);
2. :meth:`MeanHead.shifted` -- the family's marginals q(f_n) with r(x_n) added to their means;
3. :meth:`MeanHead.kl` -- its KL term, a 0-dim tensor.

Its capabilities, read by the callers instead of its class or its attributes:

* :attr:`MeanHead.size` -- G, the basis inputs per latent function (0: the zero head);
* :attr:`MeanHead.shared_kernel` -- whether it takes a kernel shared by the latent functions;
* :attr:`MeanHead.fixes_mean` -- whether it holds the family's coupled mean at zero (DECOUPLED);
* :meth:`MeanHead.state_shapes` -- the shapes of its saved tensors, read by the model files' check;
* :meth:`MeanHead.graph_obstacle` -- why a training step with it cannot be captured in a CUDA graph;
* the natural-gradient trainer's part (:func:`savigp.fit_orthnat`, Salimbeni et al. 2018, eq.
  (15)-(16)): :meth:`MeanHead.natural_parameters` (the coefficients that take the head's own
  preconditioned step), :meth:`MeanHead.natural_preconditioner` (its diagonal preconditioner) and
  :meth:`MeanHead.mean_coupling` (the part of its KL linear in the coupled mean).
"""
from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor, nn

#: the diagonal preconditioners of the head's coefficients (:meth:`MeanHead.natural_preconditioner`):
#: ``"eq16"``, D_{gamma|beta} + eps of Salimbeni et al. 2018, eq. (16), and ``"gauss-newton"``, its
#: row-sum (Gershgorin) bounds of the data and KL curvature
GAMMA_PRECONDITIONERS = ("eq16", "gauss-newton")


class MeanHead(nn.Module):
    """Base class of the mean heads (the protocol of the module docstring). Its defaults are those of
    no basis: no shift, no KL, nothing to precondition (:class:`ZeroMeanHead`)."""

    #: G, the basis inputs per latent function (0: no basis)
    size: int = 0
    #: takes a kernel shared by the Q latent functions (a ``(1, M, M)`` K_zz)
    shared_kernel: bool = False
    #: holds the posterior's coupled mean at zero (the mean lives in the head's basis alone)
    fixes_mean: bool = False

    @classmethod
    def state_shapes(cls, *, num_latent: int, num_inducing: int, input_dim: int, size: int) -> dict[str, tuple]:
        """The shapes of the tensors this head keeps in a model's state dict (names relative to the
        head, e.g. ``{"gamma": (Q, G, D)}``) for Q = ``num_latent``, M = ``num_inducing``,
        D = ``input_dim`` and G = ``size``: what a model file is checked against before anything is
        built from it (:func:`savigp.model_files.schema.check_config`), so that a file cannot claim
        sizes its tensors do not hold. A tensor left out is still checked when the rebuilt model
        loads it. By default none (the zero head holds nothing)."""
        return {}

    def attach(self, posterior) -> None:
        """Called once with the model's posterior after the head is built (a head that constrains
        the posterior does it here); by default nothing."""

    def graph_obstacle(self) -> Optional[str]:
        """Why a training step with this head cannot be captured in a CUDA graph (a message), or None."""
        return None

    # ------------------------------------------------------------------ one ELBO evaluation
    def evaluation_state(self, kernel, Z: Tensor, Lzz: Tensor, Kzz: Optional[Tensor] = None,
                         jitter_rel: Optional[Tensor] = None) -> Any:
        """What one evaluation computes once for the prior factor ``Lzz`` ``(Q, M, M)`` (and ``Kzz``,
        ``jitter_rel`` on the model's fused path) and passes to :meth:`shifted` and :meth:`kl` as
        ``state=`` (None: nothing)."""
        return None

    def shifted(self, q, X: Tensor, kernel, Z: Tensor, prior, Kzx: Tensor, state: Any = None):
        """The latent marginals ``q`` (a LatentMarginals, means ``(K, B, Q)``) at inputs ``X (B, D)``
        with the head's r(x_n) added to every component's mean (Salimbeni et al. 2018, eq. (11));
        ``prior``: the evaluation's :class:`~savigp.posteriors.InducingPrior`, ``Kzx`` ``(Q, M, B)``,
        ``state``: :meth:`evaluation_state` (None: computed here). The zero head: ``q`` itself."""
        return q

    def kl(self, kernel, Z: Tensor, Lzz: Tensor, *, Kzz: Optional[Tensor] = None, jitter_rel: Optional[Tensor] = None,
           columns: Optional[int] = None, generator: Optional[torch.Generator] = None, posterior=None,
           mean: Optional[Tensor] = None, state: Any = None) -> Tensor:
        """The head's KL term, a 0-dim tensor (the zero head: 0, on ``Lzz``'s device and dtype)."""
        return Lzz.new_zeros(())

    def input_locations(self) -> list:
        """Learned parameters that are points in the input space, ``(..., D)`` in the inputs' units (as
        the inducing inputs): their first-order steps are scaled to the columns' spread
        (:mod:`savigp.training.step_scales`); the zero head: none."""
        return []

    # ------------------------------------------------------------------ natural-gradient training
    def natural_parameters(self) -> list:
        """The parameters that take the head's own (preconditioned) step in :func:`savigp.fit_orthnat`
        rather than Adam's (the coefficients a ``(Q, G)``); the zero head: none."""
        return []

    def mean_coupling(self, kernel, Z: Tensor, Lzz: Tensor, mean: Tensor) -> Tensor:
        """The part of the head's KL that depends on the coupled mean ``mean (Q, M)`` (whitened), a
        0-dim tensor: linear in m, so its gradient enters the natural step exactly; 0 unless the head
        and the coupled mean are not orthogonal (HYBRID)."""
        return mean.new_zeros(())

    def natural_preconditioner(self, kernel, Z: Tensor, Lzz: Tensor, *, jitter: float = 1e-3, kind: str = "eq16",
                               X: Optional[Tensor] = None, curvature: Optional[Tensor] = None, block: int = 2048,
                               prior_columns: int = 512, generator: Optional[torch.Generator] = None) -> Tensor:
        """The diagonal preconditioner ``(Q, G)`` of :meth:`natural_parameters`' step (Salimbeni et al.
        2018, eq. (16)); the zero head has no coefficients to precondition."""
        raise ValueError("the model has no mean head (mean_basis_size=0)")


class ZeroMeanHead(MeanHead):
    """The head of a model without a mean basis (``mean_basis_size=0``): r(x) = 0 and no KL term,
    no parameters, no state (one instance, :data:`ZERO_HEAD`, serves every model:
    :attr:`savigp.SAVIGP.head`)."""

    shared_kernel = True

    def extra_repr(self) -> str:
        return "no mean basis"


#: the zero head (stateless, shared): what :attr:`savigp.SAVIGP.head` is for a model without a mean basis
ZERO_HEAD = ZeroMeanHead()
