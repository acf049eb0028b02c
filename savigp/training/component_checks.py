"""What a fitted mixture posterior says about its own components: one that holds almost no weight,
or two that sit on one mode. A K-component fit that ended so uses fewer components than it has
(Bonilla et al. 2019, §3.2: the mixture's components are meant to cover the posterior's modes), and
nothing said so (issue 57); :func:`savigp.fit` now warns with :class:`ComponentWarning` and keeps the
line in ``history.notes``.
"""
from __future__ import annotations

import torch

#: a component whose weight is below this holds almost none of the posterior
MIN_WEIGHT = 0.01
#: two components sit on one mode when their means differ by less than this fraction of their size
SAME_MODE = 0.05


class ComponentWarning(UserWarning):
    """A fitted mixture has a component of almost no weight, or two components on one mode."""


@torch.no_grad()
def component_notes(posterior) -> list:
    """One line per component of almost no weight (below :data:`MIN_WEIGHT`) and per pair whose means
    ``(Q, M)`` differ by less than :data:`SAME_MODE` of the larger one's norm, for a posterior with
    component moves (a mixture family); empty for one component or a family without them."""
    K = int(posterior.num_components)
    if K < 2 or not posterior.component_moves:
        return []
    w = posterior.weights().detach().double().cpu()
    m = posterior.component_means.detach().double().cpu().reshape(K, -1)
    out = [f"component {k} holds weight {float(w[k]):.2g} (below {MIN_WEIGHT}): the fit uses fewer than its K = {K} "
           "components; fit K - 1, or choose K by the ELBO (fit(max_components=...), --max-components)"
           for k in range(K) if float(w[k]) < MIN_WEIGHT]
    for k in range(K):
        for l in range(k + 1, K):
            size = max(float(m[k].norm()), float(m[l].norm()), 1e-12)
            gap = float((m[k] - m[l]).norm())
            if gap < SAME_MODE * size:
                out.append(f"components {k} and {l} sit on one mode (their means differ by {gap / size:.2%} of their "
                           "size): a two-mode posterior keeps one of its modes uncovered; more starts "
                           "(fit(starts=...)), the reflection move, or K - 1")
    return out
