"""The optimizers of :func:`savigp.fit` (``optimizer=``, the command's ``--optimizer``), one class
each, registered in :data:`savigp._choices.OPTIMIZERS`. Each declares what its callers ask of it, so
that no caller compares an optimizer's name (docs/architecture.md, "Capabilities, not names"):

* ``first_order``: a step from the gradient of one mini-batch at a learning rate (Adam, Adadelta):
  fit explores a mixture's starts and anneals under it (:func:`savigp.training.starts.explorable`),
  warms its learning rate up (:func:`savigp.training.warmup.phase_steps`) and gives parameters rates
  of their own (a mixture's weights, sharp parameters such as a period: ``takes_groups``);
* ``line_search``: a step that evaluates its closure on the full data a data-dependent number of
  times (L-BFGS): fit takes no ``batch_size`` under it, checks every step
  (:class:`savigp.training.rules.GradientStep`), captures no CUDA graph (``graph_obstacle``),
  :func:`savigp.fit_until_converged` counts its outer steps in rounds of its own and polishes
  nothing further;
* ``takes_groups``: per-parameter learning rates (optimizer groups; torch's L-BFGS takes one group);
* ``default_lr``: the command's learning rate when ``--lr`` is not given;
* ``make(params, lr, capturable=, max_iter=)``: the torch optimizer.
"""
from __future__ import annotations

from typing import Optional

import torch


def make_adam(params, lr: float, capturable: bool = False) -> torch.optim.Adam:
    """Adam with PyTorch's fused kernel where it applies (floating parameters on the CPU or CUDA):
    the same update in one pass per tensor (faster than the default's loop over the tensors:
    docs/performance.md). Falls back to the default implementation
    elsewhere. (Fused steps do not bump version counters; the decoupled head's prediction cache
    keys on the values too, see :mod:`savigp.mean_heads.orthogonal_basis`.) ``capturable``: keep the step counters
    on the device, as a CUDA graph of the step needs."""
    flat = [p for g in params for p in (g["params"] if isinstance(g, dict) else [g])]
    fusable = bool(flat) and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in flat)
    extra = {"capturable": True} if capturable else {}
    if fusable:
        try:
            return torch.optim.Adam(params, lr=lr, fused=True, **extra)
        except (RuntimeError, ValueError):  # an unsupported dtype or device: the portable update
            return torch.optim.Adam(params, lr=lr, **extra)
    return torch.optim.Adam(params, lr=lr, **extra)


class Optimizer:
    """An optimizer of :func:`savigp.fit`: its declarations (module docstring) and :meth:`make`."""

    #: a mini-batch gradient step at a learning rate (starts, annealing and the rate's warm-up apply)
    first_order: bool = True
    #: the closure evaluated on the full data a data-dependent number of times per step
    line_search: bool = False
    #: per-parameter learning rates (optimizer groups)
    takes_groups: bool = True
    #: what prevents capturing its step in a CUDA graph (None: nothing)
    graph_obstacle: Optional[str] = None
    #: the command's learning rate when ``--lr`` is not given
    default_lr: float = 0.01

    @classmethod
    def make(cls, params, lr: float, *, capturable: bool = False, max_iter: int = 20) -> torch.optim.Optimizer:
        """The torch optimizer over ``params`` (tensors, or groups where ``takes_groups``);
        ``capturable``: its state on the device (a CUDA graph); ``max_iter``: a line search's
        evaluations per step."""
        raise NotImplementedError


class Adam(Optimizer):
    """Adam (Kingma & Ba 2015), fused where it applies (:func:`make_adam`)."""

    @classmethod
    def make(cls, params, lr: float, *, capturable: bool = False, max_iter: int = 20) -> torch.optim.Optimizer:
        return make_adam(params, lr, capturable=capturable)


class Adadelta(Optimizer):
    """Adadelta (Zeiler 2012), the paper's optimizer for some of its experiments."""

    default_lr = 1.0

    @classmethod
    def make(cls, params, lr: float, *, capturable: bool = False, max_iter: int = 20) -> torch.optim.Optimizer:
        return torch.optim.Adadelta(params, lr=lr, **({"capturable": True} if capturable else {}))


class LBFGS(Optimizer):
    """Full-batch L-BFGS with the strong Wolfe line search (history 50)."""

    first_order = False
    line_search = True
    takes_groups = False
    graph_obstacle = "L-BFGS evaluates its closure a data-dependent number of times"
    default_lr = 1.0

    @classmethod
    def make(cls, params, lr: float, *, capturable: bool = False, max_iter: int = 20) -> torch.optim.Optimizer:
        return torch.optim.LBFGS(params, lr=lr, max_iter=max_iter, history_size=50, line_search_fn="strong_wolfe",
                                 tolerance_grad=1e-9, tolerance_change=1e-12)
