"""A kernel as a sum of terms: the additive parts whose posteriors :func:`savigp.predict_parts` gives.

A kernel built with ``+`` and ``*`` (:mod:`savigp.kernels.base`) is a sum of independent processes,
f = sum_j f_j with k = sum_j k_j (Duvenaud et al. 2013, §2; Lloyd et al. 2014, §3), once its
products are multiplied out over its sums:

    (a + b) * c               ->  a * c + b * c
    scale(a + b, variance=s)  ->  s a + s b      (one term per part, the same s)

:func:`additive_terms` returns the terms of latent function q, each a product of the kernel's own
factor modules (their parameters are the model's: nothing is copied), so that a term evaluated at
the model's inputs is exactly the kernel's summand. A kernel that is not a sum is one term; a
:class:`~savigp.kernels.kernel_list.KernelList` gives latent function q its own kernel's terms (a
list nested inside a sum or a product is one factor, not expanded).
"""
from __future__ import annotations

import inspect
import itertools
from dataclasses import dataclass
from typing import Optional, Sequence

from torch import Tensor

from .._choices import KERNELS
from .base import Kernel, Product, Sum
from .expression import format_kernel
from .kernel_list import KernelList
from .scale import Scale
from .spec import kernel_spec


@dataclass(frozen=True)
class KernelTerm:
    """One additive term of a kernel: k_j(x, x') = prod_s s_i * prod_f k_f(x, x').

    Attributes:
        factors: the kernel's modules multiplied in this term (the model's own, not copies).
        scales: :class:`~savigp.kernels.scale.Scale` modules distributed over a sum: their variances
            ``(Q,)`` multiply the term.
        rows: the latent functions the term's output rows are, ``(start, stop)`` within the
            kernel's ``num_latent`` (all of them, except for a part of a :class:`KernelList`).
    """

    factors: tuple
    scales: tuple
    rows: tuple

    def __call__(self, x1: Tensor, x2: Tensor) -> Tensor:
        """k_j(x1, x2) ``(R, N1, N2)`` for ``x1 (N1, D)`` or ``(Q, N1, D)`` (R = the term's rows; a
        ``(Q, N, D)`` input is cut to them)."""
        x1, x2 = self._cut(x1), self._cut(x2)
        out = self.factors[0](x1, x2)
        for f in self.factors[1:]:
            out = out * f(x1, x2)
        for s in self.scales:
            out = s.variance()[:, None, None] * out
        return out

    def diag(self, x: Tensor) -> Tensor:
        """k_j(x_n, x_n), ``(R, N)``."""
        x = self._cut(x)
        out = self.factors[0].diag(x)
        for f in self.factors[1:]:
            out = out * f.diag(x)
        for s in self.scales:
            out = s.variance()[:, None] * out
        return out

    def _cut(self, x: Tensor) -> Tensor:
        start, stop = self.rows
        if x.dim() == 3 and x.shape[0] > 1 and stop - start != x.shape[0]:
            return x[start:stop]
        return x

    @property
    def active_dims(self) -> Optional[tuple]:
        """The input columns the term reads (sorted), or None for all of them."""
        dims = set()
        for f in self.factors:
            if f.active_dims is None:
                return None
            dims.update(f.active_dims)
        return tuple(sorted(dims))

    def name(self, columns: Optional[Sequence[str]] = None) -> str:
        """The term as a kernel expression writes it (:func:`savigp.kernels.format_kernel`), options
        at their defaults and ``learn`` left out: ``"periodic(time) * rbf(time)"``; a distributed scale as
        ``"scale(rbf(time))"``. ``columns``: the inputs' names (else column indices)."""
        text = " * ".join(_factor_name(f, columns) for f in self.factors)
        for _ in self.scales:
            text = f"scale({text})"
        return text


def additive_terms(kernel: Kernel, latent: int = 0) -> list[KernelTerm]:
    """The additive terms of ``kernel`` for latent function ``latent`` (0-based, below the kernel's
    ``num_latent``; any with one kernel shared by all latent functions), in the expression's order,
    products of sums multiplied out (the module docstring)."""
    if isinstance(kernel, KernelList):
        start = 0
        for part in kernel.parts:
            if start <= latent < start + part.num_latent:
                return [KernelTerm(f, s, (start, start + part.num_latent)) for f, s in _expand(part)]
            start += part.num_latent
        raise ValueError(f"latent must be in [0, {kernel.num_latent}) (the kernel list's latent functions), got {latent}")
    return [KernelTerm(f, s, (0, kernel.num_latent)) for f, s in _expand(kernel)]


def _expand(kernel: Kernel) -> list[tuple[tuple, tuple]]:
    """The terms of ``kernel`` as ``(factors, scales)`` pairs."""
    if isinstance(kernel, Sum):
        return [t for part in kernel.parts for t in _expand(part)]
    if isinstance(kernel, Product):
        out = []
        for combo in itertools.product(*(_expand(part) for part in kernel.parts)):
            out.append((tuple(f for fs, _ in combo for f in fs), tuple(s for _, ss in combo for s in ss)))
        return out
    if isinstance(kernel, Scale):
        inner = _expand(kernel.base)
        if len(inner) > 1:  # scale(a + b) = scale * a + scale * b
            return [(fs, ss + (kernel,)) for fs, ss in inner]
    return [((kernel,), ())]


def _factor_name(kernel: Kernel, columns: Optional[Sequence[str]]) -> str:
    try:
        spec = kernel_spec(kernel)
    except TypeError:  # the features of a registered kernel (prior_spec), else a class not registered: its name
        prior = getattr(kernel, "prior_spec", None)
        if prior is None:
            return type(kernel).__name__
        spec = prior()
    text = format_kernel(_without_defaults(spec), columns)
    return f"({text})" if "sum" in spec else text


def _without_defaults(spec: dict) -> dict:
    """``spec`` with every leaf's options that equal its constructor's defaults left out, and
    ``learn`` (whether a hyper-parameter is trained says nothing of the term): what names the term."""
    if "kernel" in spec and len(spec) > 1 and not any(k in spec for k in ("sum", "product", "scale", "list")):
        params = inspect.signature(KERNELS[spec["kernel"]].__init__).parameters
        return {k: v for k, v in spec.items()
                if k == "kernel" or (k != "learn" and (k not in params or params[k].default is inspect.Parameter.empty
                                                       or params[k].default != v))}
    out = {}
    for k, v in spec.items():
        if k in ("sum", "product"):
            out[k] = [_without_defaults(p) for p in v]
        elif k == "scale":
            out[k] = _without_defaults(v)
        elif k == "list":
            out[k] = [{**p, "kernel": _without_defaults(p["kernel"])} for p in v]
        elif k != "learn":
            out[k] = v
    return out
