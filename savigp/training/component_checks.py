"""What a fitted mixture posterior says about its own components: one that holds almost no weight,
or two that sit on one mode. A K-component fit that ended so uses fewer components than it has
(Bonilla et al. 2019, §3.2: the mixture's components are meant to cover the posterior's modes), and
nothing said so (issue 57); :func:`savigp.fit` now keeps a :class:`~savigp.training.notes.Note` in
``history.notes`` and warns it once, with :class:`ComponentWarning`, at its end.
"""
from __future__ import annotations

import torch

from .notes import Note

#: a component whose weight is below this holds almost none of the posterior
MIN_WEIGHT = 0.01
#: two components sit on one mode when the root mean square over the data of their marginal means'
#: difference, each in the standard deviation of that difference, is below this
SAME_MODE_Z = 1.0
#: the training rows the check reads, at most (evenly spaced)
CHECK_ROWS = 1000


class ComponentWarning(UserWarning):
    """A fitted mixture has a component of almost no weight, or two components on one mode."""


@torch.no_grad()
def component_notes(model) -> list:
    """One :class:`~savigp.training.notes.Note` (kind ``"components"``) per component of ``model``'s posterior with almost no weight (below :data:`MIN_WEIGHT`)
    and per pair on one mode, for a posterior with component moves (a mixture family); empty for one
    component or a family without them.

    Two components k, l sit on one mode when their marginals of f at the training inputs (at most
    :data:`CHECK_ROWS` of them) overlap: z = sqrt(mean_{n,q} (m_k - m_l)^2 / (v_k + v_l)) below
    :data:`SAME_MODE_Z`, with m, v each component's marginal mean and variance
    (:meth:`savigp.SAVIGP.predict_latent`). Two components on the two modes of |f| are tens of
    standard deviations apart; a second copy of one mode is within one (a black-box rounded
    likelihood at N = 320, experiments/mixture_modes.py's round320, seed 4: both components on one
    mode, z = 0.26, 1.4 nats below the best of 20 seeds, with whitened means 131 % of their size apart:
    the earlier test on the means' size alone, 5 %, missed it; the two components of abs300 on the
    two modes: z = 36)."""
    post = model.posterior
    K = int(post.num_components)
    if K < 2 or not post.component_moves:
        return []
    w = post.weights().detach().double().cpu()
    out = [Note("components", f"component {k} holds weight {float(w[k]):.2g} (below {MIN_WEIGHT}): the fit uses fewer "
                f"than its K = {K} components", "fit K - 1, or choose K by the ELBO (fit(max_components=...), "
                "--max-components)", ComponentWarning)
           for k in range(K) if float(w[k]) < MIN_WEIGHT]
    X = model.train_x
    rows = torch.linspace(0, X.shape[0] - 1, min(X.shape[0], CHECK_ROWS), device=X.device).round().long()
    mean, var, _ = model.predict_latent(X[rows])  # (K, B, Q) each
    mean, var = mean.double().cpu(), var.double().cpu()
    for k in range(K):
        for l in range(k + 1, K):
            z = float(((mean[k] - mean[l]) ** 2 / (var[k] + var[l]).clamp_min(1e-300)).mean().sqrt())
            if z < SAME_MODE_Z:
                out.append(Note("components", f"components {k} and {l} sit on one mode (their marginals of f differ by "
                                f"{z:.2f} standard deviations over the data): a two-mode posterior keeps one of its "
                                "modes uncovered", "more starts (fit(starts=...)), the reflection move, or K - 1",
                                ComponentWarning))
    return out


#: a fold that raises the ELBO on the spot by more than this many nats says the fit ended where a
#: latent function changes sign over part of the inputs
FOLD_GAIN = 1.0


@torch.no_grad()
def fold_notes(model, seed: int = 0) -> list:
    """One :class:`~savigp.training.notes.Note` (kind ``"local optimum"``) per component whose fold (:meth:`savigp.posteriors.MixturePosterior.fold`: its mean
    made of one sign per latent function) raises the ELBO on the spot by more than :data:`FOLD_GAIN`
    nats (:func:`savigp.training.starts.direct_score`, common draws), for a family with component
    moves and a likelihood that is not log-concave (a log-concave one has one mode); the model is
    left as it was. A fit of a sign-symmetric likelihood (y = |f| + noise, a black-box rounded
    |f|) can end where its latent function is negative on most inputs and positive on the rest: a
    local optimum no step leaves, which the trend rule calls converged (round320 at prior mean 0,
    K = 1, seed 0: ELBO -238.7, 28 nats below its fold)."""
    from .loop import parameter_copies, restore_parameters
    from .starts import LocalOptimumWarning, direct_score

    post = model.posterior
    if not post.component_moves or getattr(model.likelihood, "log_concave", False):
        return []
    out = []
    before = parameter_copies(model)
    base = direct_score(model, seed)
    for k in range(int(post.num_components)):
        if bool(post.fold(k, model.prior_factor).any()):
            gain = direct_score(model, seed) - base
            if gain > FOLD_GAIN:
                out.append(Note("local optimum", f"component {k} changes sign over part of the inputs: made of one sign "
                                f"it scores {gain:.3g} nats higher on the spot (a local optimum of a likelihood "
                                "symmetric in f's sign, which no step leaves)", "fit again from a start at one sign "
                                "(fit(starts=...)) or with a prior mean off zero", LocalOptimumWarning))
        restore_parameters(model, before)
    return out

