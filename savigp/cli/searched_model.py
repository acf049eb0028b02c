"""``savigp train --kernel search`` hands over what the search found: the run starts from the
search's own fitted model, not from its kernel's values alone, and never saves a worse one.

The search (:func:`savigp.search_kernels`) fits every candidate to its optimum (L-BFGS settles and
polishes q(u), the hyper-parameters, the likelihood's parameters and the prior mean together) and
ranks them by the full-data ELBO. Before, the command kept only the chosen kernel's values and
trained q(u), the inducing inputs and the likelihood afresh for ``--iterations`` Adam steps: on the
statsmodels elnino series the search's model had ELBO -439 and the saved one -939.5 (no season,
test NLPD 2.21 against 1.36; issue 57). Now:

* the run's model takes the search model's kernel, likelihood parameters, inducing inputs, prior
  mean and q(u) (:func:`savigp.warm_start`: exactly for ``--posterior full`` with one component; the
  family's own start from the same moments otherwise). Where the inducing inputs cannot carry over
  (``--dense``, or another ``--num-inducing`` than the search's), the kernel, the likelihood and the
  prior mean do, and the run says so;
* with no ``--iterations``/``--epochs`` the run takes no further steps: the search's model, at its
  optimum, is the model (:data:`DEFAULT_STEPS`; where its q(u) cannot carry over, the command's
  default: it trains until the ELBO stops rising, :func:`savigp.cli.train.with_run_length`);
* with them, the steps go on from it, and if they end lower than it by more than two standard errors
  of the difference of the two full-data ELBOs, the search's model is kept and the run says so
  (:class:`KeepBest`; a ``--warm-start`` run is held to its start the same way);
* the search's table (every candidate, its ELBO, score, seconds and whether it was chosen) goes into
  the model file (``config["training"]["kernel_search"]``).
"""
from __future__ import annotations

import copy
import math
import sys
from typing import Optional

#: further training steps after ``--kernel search`` when neither ``--iterations`` nor ``--epochs`` is given
#: (when the search's q(u) cannot carry over -- another M, a joint posterior -- the run trains to convergence)
DEFAULT_STEPS = 0


def adopt(model, result, *, seed: int) -> Optional[str]:
    """Start ``model`` (built with the chosen kernel) from the search's fitted ``result.model``.
    Returns None, or one line saying what could not be carried over."""
    import torch

    from ..training.warm_start import warm_start

    source = result.model
    if tuple(model.inducing.shape) == tuple(source.inducing.shape) and source.posterior.function_moments \
            and model.posterior.function_moments and bool(model.head.size) == bool(source.head.size):
        warm_start(model, source, seed=seed)
        return None
    with torch.no_grad():
        model.likelihood.load_state_dict(source.likelihood.state_dict())
        model.kernel.load_state_dict(source.kernel.state_dict())
        model.prior_mean.copy_(source.prior_mean.to(model.prior_mean))
    why = (f"its inducing inputs (M = {source.inducing.shape[-2]}) are not this model's (M = "
           f"{model.inducing.shape[-2]}{', dense' if model.inducing.shape[-2] == model.num_data else ''})"
           if tuple(model.inducing.shape) != tuple(source.inducing.shape) else
           f"the {model.posterior.kind!r} posterior (or its mean head) takes no q(u) from another's moments")
    return (f"the search's q(u) does not carry over ({why}): the model starts from the search's kernel, likelihood "
            "and prior mean")


def record(result) -> dict:
    """The search for the model file: its chosen expression, whether it ran to its end, its seconds
    and its table (plain values; a failed candidate's non-finite numbers as None)."""
    def plain(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        return v

    return {"expression": result.expression, "complete": bool(result.complete), "seconds": float(result.seconds),
            "table": [plain(dict(row)) for row in result.table]}


class KeepBest:
    """The model a run starts from -- the search's model as adopted, or a ``--warm-start`` -- (its
    parameters and full-data ELBO with its standard error), to put back if the run's steps end lower
    by more than two standard errors of the difference. ``what`` names it in the run's line."""

    def __init__(self, model, *, num_samples: int, estimator: str, seed: int, what: str = "the search's model"):
        from ..training.convergence import full_data_elbo

        self.what = what
        self.state = copy.deepcopy(model.state_dict())
        self.elbo, self.stderr = full_data_elbo(model, num_samples=num_samples, estimator=estimator, seed=seed)

    def settle(self, model, elbo: Optional[float], stderr: Optional[float], steps: int) -> tuple:
        """After the run's ``steps``: ``(elbo, stderr)`` of the model kept (the run's, or the search's
        put back, said in a line on stderr)."""
        if elbo is None or steps == 0:
            return (self.elbo, self.stderr) if elbo is None else (elbo, stderr)
        margin = 2.0 * math.hypot(self.stderr or 0.0, stderr or 0.0)
        if not elbo < self.elbo - margin:
            return elbo, stderr
        model.load_state_dict(self.state)
        print(f"savigp train: the {steps} step(s) from {self.what} ended at ELBO {elbo:.6g}, below where they began "
              f"({self.elbo:.6g}, by more than 2 standard errors of the difference): kept {self.what}",
              file=sys.stderr)
        return self.elbo, self.stderr
