"""Start a model from another fitted model's optimum (a warm start).

A mixture over the inducing values (the paper's "mog1" / "mog2", Bonilla et al. 2019, §6.2) learned
jointly with the hyper-parameters from the default start can settle in a poorer basin than the full
Gaussian reaches (abalone at SF 0.5, measured in docs/mixtures.md, "Factorized families and learned
hyper-parameters"). :func:`warm_start` gives such a model the source's kernel, likelihood, inducing
inputs, prior mean and mean head, and sets its q(u) from the source's moments
(:meth:`savigp.posteriors.Posterior.init_from_moments`); training then continues from there on the
model's own objective.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import nn

from ..model import SAVIGP
from .._choices import PARAMETER_GROUPS
from ..posteriors.moments import VARIANCE_RULES
from .groups import parameter_groups
from .warmup import mark_fitted


def _copy_module(name: str, target: nn.Module, source: nn.Module) -> None:
    if type(target) is not type(source):
        raise TypeError(f"warm_start: the model's {name} is a {type(target).__name__}, the source's a "
                        f"{type(source).__name__}; both must be of the same class")
    try:
        target.load_state_dict(source.state_dict())
    except RuntimeError as err:
        raise ValueError(f"warm_start: the source's {name} does not fit the model's: {err}") from None


class FactorizedHyperparameterWarning(UserWarning):
    """A factorized q(u) learned jointly with the kernel or likelihood of a dense model (see
    :func:`joint_factorized_fit`)."""


#: the two-stage recipe, in Python and on the command line
TWO_STAGE_PYTHON = ("fit posterior='full' first, then savigp.warm_start(model, fg) and "
                    "savigp.fit(model, groups=['posterior'])")
TWO_STAGE_CLI = "train --posterior full first, then --warm-start fg.pt --learn posterior"


def joint_factorized_fit(model: SAVIGP, groups: Optional[Sequence[str]] = None) -> Optional[str]:
    """What is wrong with learning ``groups`` (None: all, as :func:`savigp.fit`) of ``model`` jointly,
    or None. A factorized q(u) (``posterior="diag-u"``, the paper's mog, or ``"diag"``; any
    K) on a dense model (inducing inputs = training inputs, strongly correlated u) learned together
    with trainable kernel or likelihood parameters pulls them towards settings where the factorized
    family is tight -- shorter length-scales or a pure-noise fit -- at a higher ELBO and a worse
    prediction (the bias of variational hyper-parameter learning, Turner & Sahani 2011; measured in
    docs/mixtures.md, "Factorized families and learned hyper-parameters"). The answer names the
    hyper-parameter groups; the callers add the two-stage recipe (:data:`TWO_STAGE_PYTHON`,
    :data:`TWO_STAGE_CLI`)."""
    post = model.posterior
    if not (model.dense and post.diagonal):
        return None
    chosen = PARAMETER_GROUPS if groups is None else tuple(groups)
    hyper = [g for g in ("kernel", "likelihood") if g in chosen and parameter_groups(model, [g])]
    if not hyper:
        return None
    K = post.num_components
    return (f"a factorized posterior (diagonal over the inducing values, K={K}) on a dense model learned jointly "
            f"with the {' and '.join(hyper)} parameters: its ELBO pulls them towards settings where the "
            "factorized family is tight (shorter length-scales or a pure-noise fit), at a higher ELBO and worse "
            "predictions (docs/mixtures.md)")


@torch.no_grad()
def warm_start(model: SAVIGP, source: SAVIGP, *, moments: bool = True, variances: str = "mean-field",
               spread: float = 1.0, seed: int = 0) -> SAVIGP:
    """Start ``model`` from the fitted ``source`` (typically a full Gaussian, ``posterior="full"``).

    Copies the kernel hyper-parameters, the likelihood's parameters, the inducing inputs Z
    ``(Q, M, D)``, the prior means ``(Q,)``, a mean head (both or neither must have one) and the
    jitter floor training found necessary; then sets ``model.posterior`` from the source's q(u)
    per latent function, N(m_j, C_j) (:meth:`savigp.posteriors.Posterior.u_moments`): each of the
    K components gets the mean m_j (K > 1: spread around it by ``spread`` of its own standard
    deviations, :func:`savigp.posteriors.spread_means`) and C_j, or for a factorized family the
    ``variances`` diagonal of C_j in its own coordinates (``"mean-field"``: 1 / diag(C^-1), the best
    factorized Gaussian against the source; ``"marginal"``: diag(C); see
    :mod:`savigp.posteriors.moments`), with equal weights. A full model (any K) warm-started from a
    full Gaussian with K = 1 holds the source's q(u) exactly and has its ELBO. With
    ``moments=False`` only the hyper-parameters are copied and ``model`` keeps its own q(u) (then
    ``fit(model, groups=["posterior"])`` fits q(u) from its own start at the source's kernel).
    The model is marked fitted (:func:`savigp.training.warmup.mark_fitted`): the first steps of
    its next :func:`savigp.fit` warm up their learning rate, so that they keep the source's optimum.

    Args:
        model: the model to start; its number of latent functions Q, inducing values M and input
            dimension D must be the source's.
        source: a fitted :class:`SAVIGP` with one component (K = 1), not ``posterior="joint"`` (nor
            may ``model`` be: both are refused with a ``ValueError``); with ``moments=False``, any.
        moments: set ``model``'s q(u) from the source's (default); False: leave it as it is.
        variances: ``"mean-field"`` or ``"marginal"`` (factorized families only).
        spread: K > 1: the components' initial distance from the source's mean, in standard deviations.
        seed: seeds the random directions of the spread.

    Returns:
        ``model`` (changed in place).
    """
    for name, value in (("model", model), ("source", source)):
        if not isinstance(value, SAVIGP):
            raise TypeError(f"warm_start: {name} must be a savigp.SAVIGP, got {type(value).__name__}")
    if variances not in VARIANCE_RULES:
        raise ValueError(f"warm_start: variances must be one of {VARIANCE_RULES}, got {variances!r}")
    ours, theirs = tuple(model.inducing.shape), tuple(source.inducing.shape)
    if ours != theirs:
        raise ValueError(f"warm_start: the source's inducing inputs have shape {theirs} (Q, M, D), the model's "
                         f"{ours}; Q, M and D must agree")
    for name, value in (("model", model), ("source", source)) if moments else ():
        if not value.posterior.function_moments:
            raise ValueError(f"warm_start: the {name} has posterior={value.posterior.kind!r}, which has no moments over "
                             "u per latent function (function_moments; e.g. 'joint', one Gaussian over all Q M values, "
                             "coupled across latent functions) to start from or to set; use 'full', 'diag' or 'diag-u'")
    if moments and source.posterior.num_components != 1:
        raise ValueError(f"warm_start: the source must have one component (K = 1), it has "
                         f"K={source.posterior.num_components}")
    if bool(model.head.size) != bool(source.head.size):
        raise ValueError("warm_start: the model and the source must both have a mean head or neither "
                         f"(model: {type(model.head).__name__}, source: {type(source.head).__name__})")
    if moments:
        mean, factor = source.posterior.u_moments(source.prior_factor())  # (1, Q, M), (1, Q, M, M)
    _copy_module("kernel", model.kernel, source.kernel)
    _copy_module("likelihood", model.likelihood, source.likelihood)
    _copy_module("mean head", model.head, source.head)  # (the zero heads: nothing to copy)
    model.inducing.copy_(source.inducing)
    model.prior_mean.copy_(source.prior_mean)
    mark_fitted(model)  # (its fit's first steps warm up their learning rate)
    floor = max(float(getattr(model, "jitter_floor", 0.0)), float(getattr(source, "jitter_floor", 0.0)))
    if floor > 0.0:
        model.jitter_floor = floor
    if not moments:
        return model
    like = dict(dtype=model.dtype, device=model.device)
    model.posterior.init_from_moments(mean[0].to(**like), factor[0].to(**like), model.prior_factor(),
                                      variances=variances, spread=spread,
                                      generator=torch.Generator().manual_seed(int(seed)))
    return model
