"""Initial inducing inputs: k-means centres or a random subset of the data (seed 004, §9.2)."""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def initial_inducing_inputs(X: Tensor, num_inducing: int, method: str = "kmeans", seed: int = 0,
                            max_points: int = 20000) -> Tensor:
    """Choose M inducing inputs from the data.

    Args:
        X: inputs ``(N, D)``.
        num_inducing: M (1 <= M <= N).
        method: ``"kmeans"`` (scipy's k-means++ on at most ``max_points`` rows) or ``"subset"``
            (M distinct rows drawn without replacement).
        seed: random seed.

    Returns:
        ``(M, D)`` on the device and dtype of ``X``.
    """
    N = X.shape[0]
    M = int(num_inducing)
    if not 1 <= M <= N:
        raise ValueError(f"num_inducing must be between 1 and the number of data points N={N}, got {M}")
    rng = np.random.default_rng(seed)
    if method == "subset" or M == N:
        idx = np.sort(rng.choice(N, size=M, replace=False))
        return X[torch.as_tensor(idx, device=X.device)].clone()
    if method != "kmeans":
        raise ValueError(f"inducing init must be 'kmeans' or 'subset', got {method!r}")
    from scipy.cluster.vq import kmeans2

    data = X.detach().cpu().double().numpy()
    if N > max_points:
        data = data[rng.choice(N, size=max_points, replace=False)]
    centres, labels = kmeans2(data, M, minit="++", seed=rng, iter=20)
    # empty clusters keep their ++ seed, which is a data point, so centres are always usable;
    # duplicates (possible with repeated rows) are replaced by random distinct data points
    _, first = np.unique(np.round(centres, 12), axis=0, return_index=True)
    if len(first) < M:
        dup = np.setdiff1d(np.arange(M), first)
        centres[dup] = data[rng.choice(len(data), size=len(dup), replace=False)]
    return torch.as_tensor(centres, dtype=X.dtype, device=X.device)
