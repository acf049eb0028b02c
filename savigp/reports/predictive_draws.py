"""Draws of y from the posterior predictive distribution at each data point, the one sample every
check of fit in the report reads (quantile residuals, interval coverage, simulated statistics).

For row n, f_sn ~ q(f_n) (a mixture's component chosen by its weight pi_k for each draw), then
y_sn ~ p(y | f_sn) from the likelihood's ``sample``; a likelihood that cannot sample (a user's
``log p(y | f)`` alone) with one output is drawn from ``exp(log p(y | f_sn))`` on a grid of y values
(:func:`savigp.io.plotting.density_grid`: the integers for count targets, else a fine grid; a draw
on a continuous grid is spread uniformly over its cell). A classifier's draws are class indices
0 .. C-1 from ``class_probabilities(f_sn)``, compared with the observed labels' indices
(:func:`observed_classes`): any fixed order of the classes leaves the randomized quantile residuals
uniform under the model. The model's latent draws share one
standard-normal draw across rows (:meth:`savigp.SAVIGP.draws`), so each row's draws are shuffled
by a permutation of its own: rows are then independent, as the predictive checks assume.
Draws are returned in the targets' original units (a recorded standardization undone).
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch


class CannotDraw(ValueError):
    """The likelihood can neither sample y nor be read on a grid of y (more than one output)."""


def _as_parts(model):
    """``(SAVIGP, input transform, target statistics)`` of a SAVIGP or a loaded model file."""
    if hasattr(model, "transform_inputs"):
        return model.model, model.transform_inputs, getattr(model, "target_stats", None)
    return model, (lambda X: np.asarray(X, dtype=np.float64)), None


def _latent_draws(inner, Xm: np.ndarray, num_samples: int, seed: int) -> torch.Tensor:
    """f ``(S, B, Q)``: S draws per row from q(f_n), a component per draw by its weight, rows
    decoupled by a permutation of the draws per row."""
    with torch.no_grad():
        f, log_w, _, _ = inner.draws(Xm, num_samples, seed)  # (S, K, B, Q)
    S, K, B, Q = f.shape
    gen = torch.Generator().manual_seed(seed + 7919)
    if K > 1:
        k = torch.multinomial(log_w.detach().cpu().exp(), S * B, replacement=True, generator=gen).reshape(S, B)
        f = torch.take_along_dim(f, k.to(f.device)[:, None, :, None].expand(S, 1, B, Q), dim=1)
    f = f[:, 0]  # (S, B, Q)
    perm = torch.argsort(torch.rand(S, B, generator=gen), dim=0).to(f.device)  # a permutation per row
    return torch.take_along_dim(f, perm[:, :, None].expand(S, B, Q), dim=0)


def _grid_draws(lik, f: torch.Tensor, grid: np.ndarray, integer: bool, gen: torch.Generator) -> torch.Tensor:
    """y ``(S, B, 1)`` drawn from p(y | f_sb) read on ``grid (G,)`` (model units): the density at
    each grid value times its cell width, normalized; values where log p is not finite count 0.
    ``integer``: the grid is the integers (in the original units), so a draw is a grid value;
    otherwise it is spread uniformly over its cell."""
    S, B, Q = f.shape
    G = grid.shape[0]
    widths = np.abs(np.gradient(grid)) if G > 1 else np.ones(1)
    yy = torch.as_tensor(np.tile(grid, B)[:, None], dtype=f.dtype, device=f.device)  # (B G, 1)
    out = torch.empty(S, B, dtype=f.dtype)
    step = max(1, int(2e7 // max(1, B * G)))  # draws per block: about 2e7 log-densities at once
    for a in range(0, S, step):
        ff = f[a:a + step].repeat_interleave(G, dim=1)  # (s, B G, Q)
        with torch.no_grad():
            lp = lik.log_prob(yy, ff).reshape(-1, B, G).cpu()
        lp = torch.where(torch.isfinite(lp), lp, torch.full_like(lp, -math.inf))
        lp = lp + torch.as_tensor(np.log(widths), dtype=lp.dtype)
        bad = ~torch.isfinite(lp.max(dim=-1).values)
        if bool(bad.any()):
            raise CannotDraw("the likelihood's log p(y | f) is -inf or not finite at every value of the grid of y "
                             f"({grid[0]:.4g} .. {grid[-1]:.4g}) for some rows")
        idx = torch.multinomial(torch.softmax(lp.reshape(-1, G), dim=-1), 1, generator=gen)[:, 0]
        y = torch.as_tensor(grid, dtype=lp.dtype)[idx]
        if not integer:  # spread over its cell
            y = y + (torch.rand(y.shape, generator=gen, dtype=lp.dtype) - 0.5) * torch.as_tensor(widths)[idx]
        out[a:a + step] = y.reshape(-1, B)
    return out[..., None]


def predictive_draws(model, X, Y: Optional[np.ndarray] = None, *, num_samples: int = 1000,
                     seed: int = 0) -> np.ndarray:
    """Draws of y from p(y_n | data) at each row of ``X``, independent across rows.

    Args:
        model: a :class:`~savigp.SAVIGP` or a loaded model file (:class:`savigp.model_files.SavedModel`;
            raw inputs, draws in the targets' original units).
        X: inputs ``(B, D)``.
        Y: the observed targets ``(B, P)`` (original units), used only to place the grid of y for a
            likelihood that cannot sample.
        num_samples: draws S per row.
        seed: seeds every draw.

    Returns:
        ``(S, B, P)`` float64 (a classifier's: ``(S, B, 1)`` class indices).

    Raises:
        CannotDraw: the likelihood cannot sample, and has more than one output or no grid of y.
    """
    from ..io.plotting import density_grid

    inner, to_model, stats = _as_parts(model)
    Xm = to_model(X)
    lik = inner.likelihood
    f = _latent_draws(inner, Xm, int(num_samples), int(seed))
    gen = torch.Generator().manual_seed(seed + 104729)
    if lik.task == "classification":
        with torch.no_grad():
            probs = lik.class_probabilities(f).detach().cpu().to(torch.float64)  # (S, B, C)
        idx = torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1, generator=gen)
        return idx.reshape(probs.shape[:-1])[..., None].numpy().astype(np.float64)
    try:
        with torch.no_grad():
            y = lik.sample(f, torch.Generator(device=f.device).manual_seed(seed + 104729))
    except NotImplementedError:
        grid = density_grid(model, None if Y is None else np.asarray(Y, dtype=np.float64))
        if lik.output_dim != 1 or grid is None:
            raise CannotDraw(f"{type(lik).__name__} cannot sample y (no sample method) and cannot be read on a grid "
                             "of y (more than one output, or no targets and no declared support)") from None
        integer = grid.shape[0] > 1 and bool(np.all(grid == np.round(grid)))
        if stats is not None:
            grid = (grid - float(np.asarray(stats["mean"]).reshape(-1)[0])) / float(np.asarray(stats["std"]).reshape(-1)[0])
        y = _grid_draws(lik, f, grid, integer, gen)
    y = y.detach().cpu().to(torch.float64).numpy()
    if stats is not None:
        y = np.asarray(stats["mean"]) + np.asarray(stats["std"]) * y
    return y


def observed_classes(model, Y) -> np.ndarray:
    """A classifier's observed labels ``Y (B, P)`` as the class indices its draws hold, ``(B, 1)``."""
    inner, _, stats = _as_parts(model)
    Y = np.asarray(Y, dtype=np.float64)
    if stats is not None:
        Y = (Y - np.asarray(stats["mean"])) / np.asarray(stats["std"])
    idx = inner.likelihood.class_index(torch.as_tensor(Y))
    return idx.detach().cpu().numpy().astype(np.float64)[:, None]


def checked_draws(draws, Y, who: str) -> tuple:
    """``draws (S, B, P)`` and observed ``Y (B, P)`` as float64 arrays, or a ValueError naming
    ``who`` and both shapes."""
    draws, Y = np.asarray(draws, dtype=np.float64), np.asarray(Y, dtype=np.float64)
    if draws.ndim != 3 or Y.ndim != 2 or draws.shape[1:] != Y.shape:
        raise ValueError(f"{who}: draws must be (S, B, P) and Y (B, P) with the same B, P; got draws "
                         f"{draws.shape} and Y {Y.shape}")
    return draws, Y
