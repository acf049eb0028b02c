"""Turn any user function ``log_lik(y, f) -> log p(y | f)`` into a likelihood.

The function may be written in torch or in numpy/scipy (or call a simulator): it receives the
targets ``y`` of shape ``(B, P)`` and latent values ``f`` of shape ``(..., B, Q)`` and must return
``(..., B)``. Only its *values* are used (seed 004, §5: score-function gradients), so it need not
be differentiable, and a numpy function works unchanged: inputs are handed over as numpy arrays
when ``backend="numpy"`` and the result is converted back.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import torch
from torch import Tensor

from .base import Likelihood


class CallableLikelihood(Likelihood):
    """Wrap ``log_lik(y, f)`` as a likelihood.

    Args:
        log_lik: the function; ``y (B, P)``, ``f (..., B, Q)`` -> ``(..., B)``.
        num_latent: Q, the number of latent functions it reads.
        output_dim: P, the number of target columns it expects (default 1).
        backend: ``"torch"`` (tensors in, tensor out), ``"numpy"`` (arrays in, array out) or
            ``"auto"``: call with tensors and, if the function fails on tensors or returns a numpy
            array, use numpy from then on.
        differentiable: declare that a torch ``log_lik`` is differentiable in f (enables the
            reparameterization estimator). Never assumed for numpy functions.
        task: ``"regression"`` (default) or ``"classification"``.
        mean_fn: optional ``f -> E[y | f]`` (same backend) for predictive means.
        import_path: how to re-import ``log_lik`` (``"pkg.module:function"`` or ``"file.py:function"``);
            recorded in model files so that they can be loaded again.
    """

    def __init__(
        self,
        log_lik: Callable,
        num_latent: int = 1,
        output_dim: int = 1,
        backend: str = "auto",
        differentiable: bool = False,
        task: str = "regression",
        mean_fn: Optional[Callable] = None,
        import_path: Optional[str] = None,
    ):
        super().__init__()
        if not callable(log_lik):
            raise TypeError(f"CallableLikelihood: log_lik must be callable, got {type(log_lik).__name__}")
        if backend not in ("torch", "numpy", "auto"):
            raise ValueError(f"CallableLikelihood: backend must be 'torch', 'numpy' or 'auto', got {backend!r}")
        if int(num_latent) < 1:
            raise ValueError(f"CallableLikelihood: num_latent must be >= 1, got {num_latent}")
        self.fn = log_lik
        self.num_latent = int(num_latent)
        self.output_dim = int(output_dim)
        self.backend = backend
        self.differentiable = bool(differentiable) and backend == "torch"
        self.task = task
        self.mean_fn = mean_fn
        self.import_path = import_path
        self._name = getattr(log_lik, "__name__", type(log_lik).__name__)

    def _call(self, fn: Callable, *args: Tensor) -> Tensor:
        like = args[-1]
        if self.backend == "auto":
            try:
                out = fn(*args)
            except Exception:
                out = fn(*[a.detach().cpu().numpy() for a in args])
                self.backend = "numpy"
            else:
                if not isinstance(out, Tensor):
                    self.backend = "numpy"
                else:
                    self.backend = "torch"
        elif self.backend == "numpy":
            out = fn(*[a.detach().cpu().numpy() for a in args])
        else:
            out = fn(*args)
        if not isinstance(out, Tensor):
            out = torch.as_tensor(np.asarray(out, dtype=np.float64))
        return out.to(device=like.device, dtype=like.dtype)

    def log_prob(self, y: Tensor, f: Tensor) -> Tensor:
        out = self._call(self.fn, y, f)
        expected = tuple(f.shape[:-1])
        if tuple(out.shape) != expected:
            raise ValueError(
                f"user likelihood {self._name!r} returned shape {tuple(out.shape)} for f of shape "
                f"{tuple(f.shape)} and y of shape {tuple(y.shape)}; expected {expected} "
                "(one log-density per sample and data point)"
            )
        return out

    def conditional_moments(self, f: Tensor) -> tuple[Tensor, Tensor]:
        if self.mean_fn is None:
            raise NotImplementedError(f"user likelihood {self._name!r} has no mean_fn")
        mean = self._call(self.mean_fn, f)
        if mean.dim() == f.dim() - 1:
            mean = mean.unsqueeze(-1)
        return mean, torch.full_like(mean, float("nan"))

    def extra_repr(self) -> str:
        return f"fn={self._name}, num_latent={self.num_latent}, backend={self.backend}"
