"""Initial inducing inputs: k-means centres or a random subset of the data (Bonilla et al. 2019, §9.2).

Two k-means implementations: scipy's (``method="kmeans"``, on at most 20k rows, float64 on the CPU;
the long-standing default, kept so that saved models and seeds reproduce) and :func:`kmeans`, in
torch on the data's own device (``method="kmeans-torch"``), fast enough for the paper's MNIST
setting (60k x 784 -> 2400 centres).
"""
from __future__ import annotations

import warnings

import math

import numpy as np
import torch
from torch import Tensor

INIT_METHODS = ("kmeans", "kmeans-torch", "subset")


def initial_inducing_inputs(X: Tensor, num_inducing: int, method: str = "kmeans", seed: int = 0,
                            max_points: int = 20000) -> Tensor:
    """Choose M inducing inputs from the data.

    Args:
        X: inputs ``(N, D)``.
        num_inducing: M (1 <= M <= N).
        method: ``"kmeans"`` (scipy's k-means++ on at most ``max_points`` rows), ``"kmeans-torch"``
            (:func:`kmeans` on all rows, on X's device) or ``"subset"`` (M distinct rows drawn
            without replacement).
        seed: random seed.

    Returns:
        ``(M, D)`` on the device and dtype of ``X``.
    """
    N = X.shape[0]
    M = int(num_inducing)
    if not 1 <= M <= N:
        raise ValueError(f"num_inducing must be between 1 and the number of data points N={N}, got {M}")
    if method not in INIT_METHODS:
        raise ValueError(f"inducing init must be one of {INIT_METHODS}, got {method!r}")
    rng = np.random.default_rng(seed)
    if method == "subset" or M == N:
        idx = np.sort(rng.choice(N, size=M, replace=False))
        return X[torch.as_tensor(idx, device=X.device)].clone()
    if method == "kmeans-torch":
        return kmeans(X, M, seed=seed)
    from scipy.cluster.vq import kmeans2

    data = X.detach().cpu().double().numpy()
    if N > max_points:
        data = data[rng.choice(N, size=max_points, replace=False)]
    with warnings.catch_warnings():  # empty clusters and repeated rows (their warnings) are handled below
        warnings.simplefilter("ignore")
        centres, labels = kmeans2(data, M, minit="++", seed=rng, iter=20)
    # empty clusters keep their ++ seed, which is a data point, so centres are always usable;
    # duplicates (possible with repeated rows) are replaced by random distinct data points
    _, first = np.unique(np.round(centres, 12), axis=0, return_index=True)
    if len(first) < M:
        dup = np.setdiff1d(np.arange(M), first)
        centres[dup] = data[rng.choice(len(data), size=len(dup), replace=False)]
    return torch.as_tensor(centres, dtype=X.dtype, device=X.device)


def _sq_dist_min(X: Tensor, C: Tensor, c_sq: Tensor, chunk: int) -> tuple[Tensor, Tensor]:
    """For every row of X ``(N, D)``: the squared distance to its nearest centre of C ``(M, D)``
    and that centre's index, both ``(N,)``, by ||x||^2 - 2 x.c + ||c||^2 in row chunks."""
    dmin = torch.empty(X.shape[0], dtype=X.dtype, device=X.device)
    label = torch.empty(X.shape[0], dtype=torch.long, device=X.device)
    for i in range(0, X.shape[0], chunk):
        x = X[i:i + chunk]
        d = torch.addmm(c_sq[None, :], x, C.T, alpha=-2.0)  # (chunk, M): ||c||^2 - 2 x.c
        val, idx = d.min(dim=1)
        dmin[i:i + chunk] = (val + (x * x).sum(1)).clamp_min_(0.0)
        label[i:i + chunk] = idx
    return dmin, label


def kmeans(X: Tensor, num_centres: int, *, iterations: int = 30, seed: int = 0, init_points: int = 20000,
           tol: float = 1e-4, chunk_elements: int = 2 ** 23, return_inertia: bool = False):
    """Lloyd's k-means in torch on X's device and dtype, seeded by k-means++ (Arthur & Vassilvitskii 2007).

    k-means++ draws the M seeds from a random subset of at most ``init_points`` rows (each new seed
    with probability proportional to its squared distance to the nearest seed so far); Lloyd's
    iterations then run on all N rows: assign every row to its nearest centre (squared distances
    ||x||^2 - 2 x.c + ||c||^2 by matrix products, in chunks of ``chunk_elements`` distances), and
    move every centre to the mean of its rows. A centre left without rows is moved onto the row
    farthest from its own centre (so no centre is ever empty or duplicated unless rows repeat).
    Stops after ``iterations`` or when the inertia sum_n min_m ||x_n - c_m||^2 falls by less than a
    relative ``tol``. The random draws come from a CPU generator seeded with ``seed``, so the
    seeds are the same rows on every device.

    Args:
        X: data ``(N, D)``, on any device, floating point.
        num_centres: M, 1 <= M <= N.

    Returns:
        centres ``(M, D)`` on X's device and dtype (and the final inertia, a float, with
        ``return_inertia=True``).
    """
    if X.dim() != 2:
        raise ValueError(f"kmeans: X must be (N, D), got shape {tuple(X.shape)}")
    if not X.is_floating_point():
        raise ValueError(f"kmeans: X must be floating point, got dtype {X.dtype}")
    N, D = X.shape
    M = int(num_centres)
    if not 1 <= M <= N:
        raise ValueError(f"kmeans: num_centres must be between 1 and N={N} (rows of X, shape {tuple(X.shape)}), got {M}")
    if not bool(torch.isfinite(X).all()):
        raise ValueError("kmeans: X contains NaN or inf")
    X = X.detach()
    gen = torch.Generator().manual_seed(int(seed))
    chunk = max(1, int(chunk_elements) // M)

    # ---- k-means++ seeding on a subset
    n_init = min(N, max(int(init_points), M))
    sub = X[torch.randperm(N, generator=gen)[:n_init].to(X.device)]
    uniforms = torch.rand(M, dtype=torch.float64, generator=gen).to(X.device)
    first = int(torch.randint(n_init, (1,), generator=gen))
    C = torch.empty(M, D, dtype=X.dtype, device=X.device)
    C[0] = sub[first]
    s_sq = (sub * sub).sum(1)
    # squared distances as ||s||^2 - 2 s.c + ||c||^2: one matrix-vector product per seed, no (n, D) temporary
    d2 = (s_sq - 2.0 * (sub @ C[0]) + s_sq[first]).clamp_min_(0.0)
    for m in range(1, M):
        cum = torch.cumsum(d2.double(), 0)
        # a row with probability d2 / sum(d2); all-zero d2 (repeated rows) falls back to the last row
        idx = torch.searchsorted(cum, (uniforms[m] * cum[-1]).reshape(1)).clamp_max_(n_init - 1)
        C[m] = sub[idx[0]]
        d2 = torch.minimum(d2, (s_sq - 2.0 * (sub @ C[m]) + s_sq[idx[0]]).clamp_min_(0.0))
    del sub, d2, s_sq

    # ---- Lloyd's iterations on all rows
    prev = math.inf
    inertia = math.inf
    for _ in range(int(iterations)):
        dmin, label = _sq_dist_min(X, C, (C * C).sum(1), chunk)
        inertia = float(dmin.sum())
        counts = torch.bincount(label, minlength=M)
        sums = torch.zeros(M, D, dtype=X.dtype, device=X.device).index_add_(0, label, X)
        empty = counts == 0
        C = sums / counts.clamp_min(1).to(X.dtype)[:, None]
        n_empty = int(empty.sum())
        if n_empty:
            far = torch.topk(dmin, n_empty).indices
            C[empty] = X[far]
        if n_empty == 0 and prev - inertia <= tol * max(prev, 1e-300) and prev < math.inf:
            break
        prev = inertia
    return (C, inertia) if return_inertia else C


def kmeans_inertia(X: Tensor, centres: Tensor, chunk_elements: int = 2 ** 23) -> float:
    """sum_n min_m ||x_n - c_m||^2 for X ``(N, D)`` and centres ``(M, D)`` (k-means' objective)."""
    if X.dim() != 2 or centres.dim() != 2 or X.shape[1] != centres.shape[1]:
        raise ValueError(f"kmeans_inertia: X (N, D) and centres (M, D) need the same D, got {tuple(X.shape)} "
                         f"and {tuple(centres.shape)}")
    C = centres.to(X)
    dmin, _ = _sq_dist_min(X, C, (C * C).sum(1), max(1, chunk_elements // C.shape[0]))
    return float(dmin.sum())
