"""The kernel protocol, batched over the Q latent functions, and the algebra of kernels.

A kernel holds ``num_latent`` (Q) sets of hyper-parameters over inputs of ``input_dim`` (D)
columns, of which it reads ``active_dims`` (all of them by default):

    kernel(X1, X2) -> (Q, N1, N2)      with X1 of shape (N1, D) or (Q, N1, D), likewise X2
    kernel.diag(X) -> (Q, N)

Kernels compose as in GPflow (whose ``kernels/base.py`` holds its sums and products beside the
protocol too): for positive semi-definite kernels k_1 ... k_n on the same inputs (Rasmussen &
Williams 2006, §4.2.4; Duvenaud et al. 2013, §2)

* :class:`Sum` (``k1 + k2``): k(x, x') = sum_i k_i(x, x'), the covariance of a sum of independent
  processes (a trend plus a season plus noise);
* :class:`Product` (``k1 * k2``): k(x, x') = prod_i k_i(x, x'), positive semi-definite by the Schur
  product theorem: a period whose shape drifts (periodic x RBF), interactions of inputs (kernels of
  different ``active_dims``).

Nested sums and products are flattened; every part keeps its own hyper-parameters and
constraints, and a composite costs its parts plus one elementwise pass over the (Q, N1, N2) result
per part. A learned variance on any kernel is :class:`~savigp.kernels.scale.Scale`.

A family subclasses :class:`Kernel`, calls :meth:`Kernel._set_inputs` in its constructor and
implements ``forward`` and ``forward_diag``, which get the active columns only: ``kernel(X1, X2)``,
``kernel(X)`` (K(X, X)), ``kernel.diag(X)`` and ``kernel.exp_features`` check the inputs and take the
columns once, in :meth:`Kernel.__call__` (as GPflow's); :meth:`structure` returns the constructor options that fix its
shape (not the values: those are the state dict), so that a model file rebuilds it from data alone
(:mod:`savigp.kernels.spec`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch
from torch import Tensor, nn

from .._checks import writable
from .fused import fused_product, joined_features
from likelihoods.parameters import PositiveParameter


@dataclass(frozen=True)
class Hyper:
    """One hyper-parameter of a kernel family, declared once in the family's :attr:`Kernel.hypers`
    (as GPyTorch's ``register_parameter`` with its constraint): the constructor makes it
    (:meth:`Kernel._set_hypers`), :meth:`Kernel.initial_values` reads it back, and
    :attr:`Kernel.option_units` follows from ``units``.

    Args:
        name: the constructor option that gives its initial value, and its key in ``initial_values``.
        attr: the attribute holding it (default ``name``).
        shape: ``"latent"``, ``(Q,)``; or ``"columns"``, ``(Q, d)`` with d the active columns (1 for a
            family with ``ard=False``).
        floor: positive above this floor (a :class:`~likelihoods.parameters.PositiveParameter`); None
            for an unconstrained one (a parameter, or a buffer when not learned).
        units: how the option moves when the inputs are moved and scaled (:attr:`Kernel.option_units`),
            or None for none declared.
    """

    name: str
    attr: Optional[str] = None
    shape: str = "latent"
    floor: Optional[float] = 1e-8
    units: Optional[str] = None


#: a column whose spread (standard deviation) is within this factor of 1 counts as in unit scale:
#: the parameters in its units step at the optimizer's rate (:func:`column_step_factors`)
UNIT_SCALE_BAND = 3.0


def column_step_factors(columns: Tensor, *, positive: bool) -> Tensor:
    """The factors ``(d,)`` on the first-order steps of a parameter in the units of each of the input
    ``columns (N, d)`` (a length-scale, a period, a linear offset, inducing inputs): its entries
    along column j step at the learning rate times the j-th factor.

    Adam moves every coordinate by about its learning rate a step, whatever the units (Kingma & Ba
    2015, §2.1), so on inputs in raw units a length-scale of 14 years (elnino) moves by 0.01 years a
    step, fourteen times slower than the same model on standardized inputs: 2530 steps to converge
    against 750 (``rbf(t)``, the same optimum), and the periodic model reached the 20000-step cap
    (issue 57). With the columns' spreads s_j (standard deviations):

        factor_j = s_j   where s_j > UNIT_SCALE_BAND (steps in units of the column's spread),
        factor_j = s_j   where s_j < 1 / UNIT_SCALE_BAND and the parameter is unconstrained
                         (``positive=False``: an offset or inducing inputs; a positive one is a
                         softplus, whose steps are already relative near zero),
        factor_j = 1     otherwise (columns near unit scale keep their steps, and their traces).
    """
    x = columns.detach().to(torch.float64)
    if x.dim() != 2 or x.shape[0] < 2:
        return torch.ones(x.shape[-1], dtype=torch.float64)
    spread = x.std(0, unbiased=False)
    factors = torch.where(spread > UNIT_SCALE_BAND, spread, torch.ones_like(spread))
    if not positive:
        factors = torch.where((spread > 0) & (spread < 1.0 / UNIT_SCALE_BAND), spread, factors)
    return factors


def shared_step_factor(factors: Tensor) -> float:
    """One factor for a parameter shared by columns with ``factors (d,)`` (an isotropic length-scale):
    the smallest where every column's is above 1, the largest where every one is below 1, else 1
    (a step safe for every column)."""
    if bool((factors > 1).all()):
        return float(factors.min())
    if bool((factors < 1).all()):
        return float(factors.max())
    return 1.0


class Kernel(nn.Module):
    """Base class: ``num_latent`` (Q) sets of hyper-parameters over ``input_dim`` (D) input columns,
    of which the kernel reads ``active_dims`` (a tuple of column indices, or None for all D).

    ``k1 + k2`` is :class:`~savigp.kernels.combination.Sum`, ``k1 * k2``
    :class:`~savigp.kernels.combination.Product`: both need equal ``num_latent`` and ``input_dim``.
    """

    num_latent: int
    input_dim: int
    active_dims: Optional[tuple] = None
    #: how each option of the family moves when the inputs are moved and scaled, x' = (x - m) / s:
    #: ``"scale"`` (divided by s: a length-scale or period, in the inputs' units; the builders give
    #: a data-scaled default to a ``lengthscale`` of these, :func:`savigp.kernels.spec.default_lengthscale`),
    #: ``"offset"`` ((c - m) / s), ``"variance"`` (times s^2) or ``"none"`` (no units: a periodic
    #: kernel's length-scale, relative to its sinusoid). Options it leaves out have no declared units.
    #: A family declaring :attr:`hypers` gets it from their ``units``.
    option_units: dict = {}
    #: the family's hyper-parameters (:class:`Hyper`), from which its construction (:meth:`_set_hypers`),
    #: :meth:`initial_values` and :attr:`option_units` follow
    hypers: tuple = ()
    #: constructor options besides ``active_dims`` and ``learn`` that fix the parameters' shapes or the
    #: family's form (``ard``; AdditiveMatern's ``nu``): :meth:`structure` records them
    shape_options: tuple = ()
    #: ``kernel(X, X)`` with the same tensor twice differs from ``kernel(X, X')`` for an equal copy X' (White)
    identity_terms: bool = False
    # What callers outside savigp/kernels/ read instead of the family's registered name (docs/architecture.md,
    # "Capabilities, not names"):
    #: its value depends on the inputs only through x - x' (Stationary, Periodic, Constant, White):
    #: :func:`savigp.testing.check_kernel` checks that shifting both inputs alike changes nothing
    stationary: bool = False
    #: a ``period`` option in the inputs' units (Periodic): the kernel search starts a new one at the
    #: targets' periodogram peaks and :func:`savigp.kernels.periodogram.period_warnings` checks a given one
    has_period: bool = False
    #: :meth:`initial_from_data` gives the initial values a spec leaves out, from the inputs it reads (Linear)
    starts_from_data: bool = False
    #: tends to 1 at variance 1 as its length-scales grow, with a gradient in them still there at ten
    #: times their default: the kernel search's neutral start of a new factor (the stationary families)
    search_neutral_factor: bool = False
    #: a product of two of it on the same columns is one of it again (the length-scales combine: RBF),
    #: so the kernel search leaves such a product out (Duvenaud et al. 2013 leave SE x SE out too)
    repeat_is_redundant: bool = False
    #: what a part of this family alone is in a report (:mod:`savigp.reports.words`): ``"variation"``
    #: (over its length-scale, called ``smoothness``), ``"cycle"``, ``"trend"`` (a polynomial when several
    #: multiply), ``"noise"`` or ``"offset"``; None: named, not described
    in_words: Optional[str] = None
    #: a stationary family's variation in words (``"a smooth"``, ``"a rough"``, ...)
    smoothness: Optional[str] = None

    @classmethod
    def initial_from_data(cls, columns) -> dict:
        """The initial values of options a spec leaves out, from the ``(N, d)`` ``columns`` the kernel
        reads (read where :attr:`starts_from_data`); none by default."""
        return {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "hypers" in cls.__dict__ and "option_units" not in cls.__dict__:
            cls.option_units = {h.name: h.units for h in cls.hypers if h.units is not None}

    # ------------------------------------------------------------ inputs
    def _set_inputs(self, input_dim: int, num_latent: int, active_dims: Optional[Sequence[int]]) -> None:
        """Record D, Q and the active columns, checked: distinct integers in [0, D)."""
        self.input_dim = int(input_dim)
        self.num_latent = int(num_latent)
        if self.input_dim < 1 or self.num_latent < 1:
            raise ValueError(f"{type(self).__name__}: input_dim and num_latent must be >= 1, "
                             f"got input_dim={input_dim}, num_latent={num_latent}")
        if active_dims is None:
            self.active_dims = None
            return
        dims = tuple(int(d) for d in active_dims)
        if not dims or len(set(dims)) != len(dims) or any(d < 0 or d >= self.input_dim for d in dims):
            raise ValueError(f"{type(self).__name__}: active_dims must be distinct column indices in "
                             f"[0, {self.input_dim}), got {list(active_dims)}")
        self.active_dims = None if dims == tuple(range(self.input_dim)) else dims

    @property
    def num_active(self) -> int:
        """The number of input columns the kernel reads."""
        return self.input_dim if self.active_dims is None else len(self.active_dims)

    def _check(self, x: Tensor, name: str) -> None:
        """``x`` must be ``(N, D)`` or ``(Q, N, D)`` (or ``(1, N, D)``)."""
        if x.dim() not in (2, 3) or x.shape[-1] != self.input_dim or (x.dim() == 3 and x.shape[0] not in (1, self.num_latent)):
            raise ValueError(
                f"{type(self).__name__}: {name} must have shape (N, {self.input_dim}) or "
                f"({self.num_latent}, N, {self.input_dim}), got {tuple(x.shape)}"
            )

    def _columns(self, x: Tensor) -> Tensor:
        """The active columns of ``x (..., D)``: a view when they are a contiguous ascending range
        (so that caches keyed on the input's memory still hit), else a gathered copy."""
        dims = self.active_dims
        if dims is None:
            return x
        start = dims[0]
        if dims == tuple(range(start, start + len(dims))):
            return x.narrow(-1, start, len(dims))
        out = x.index_select(-1, torch.tensor(dims, device=x.device))
        out._columns_of = x  # the tensor given, for caches keyed on it (RBF._fixed_sqdist)
        return out

    @staticmethod
    def columns_source(x: Tensor) -> Tensor:
        """The tensor whose active columns ``x`` is: the given input for a gathered copy made by
        :meth:`_columns` (new at every call), else ``x`` itself; what a cache keyed on the input's
        memory keys on (:meth:`savigp.kernels.stationary.Stationary._fixed_sqdist`)."""
        return getattr(x, "_columns_of", x)

    def _active(self, x1: Tensor, x2: Optional[Tensor]) -> tuple[Tensor, Tensor]:
        """Both inputs checked and reduced to the active columns; the same object twice for K(X, X)
        (``x2`` None or ``x1`` itself: kernels use that to recognise it)."""
        self._check(x1, "x1")
        if x2 is None or x2 is x1:
            a = self._columns(x1)
            return a, a
        self._check(x2, "x2")
        return self._columns(x1), self._columns(x2)

    # ------------------------------------------------------------ the protocol
    def __call__(self, x1: Tensor, x2: Optional[Tensor] = None) -> Tensor:
        """The Q kernel matrices ``(Q, N1, N2)`` of ``x1 (N1, D)`` or ``(Q, N1, D)`` against ``x2``;
        ``x2`` None (or ``x1`` itself) for K(x1, x1). The one call path, as GPflow's ``Kernel.__call__``:
        the shapes are checked and the active columns taken here, once, and :meth:`forward` gets them
        (the same object twice for K(X, X)); a composite's parts, whose ``active_dims`` are their own,
        get the whole inputs and take theirs."""
        return super().__call__(*self._active(x1, x2))

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:  # pragma: no cover - abstract
        """The family's kernel matrices ``(Q, N1, N2)`` of the active columns ``x1 (N1, d)`` or ``(Q, N1, d)``
        against ``x2`` (``x2 is x1`` for K(X, X)); called by :meth:`__call__`, which checked and sliced them."""
        raise NotImplementedError

    def diag(self, x: Tensor) -> Tensor:
        """The diagonal ``(Q, N)`` of ``kernel(x)``: ``x`` checked and sliced as by :meth:`__call__`,
        then :meth:`forward_diag`."""
        return self.forward_diag(self._active(x, None)[0])

    def forward_diag(self, x: Tensor) -> Tensor:  # pragma: no cover - abstract
        """The family's diagonal ``(Q, N)`` of K(x, x) for the active columns ``x (N, d)`` or ``(Q, N, d)``."""
        raise NotImplementedError

    def exp_features(self, x1: Tensor, x2: Optional[Tensor] = None) -> Optional[tuple[Tensor, Tensor, Tensor]]:
        """Features ``a (Q, N1, d)``, ``b (Q, N2, d)`` and ``log_var (Q,)`` with kernel(x1, x2) =
        exp(log_var - ||a_i - b_j||^2 / 2), for a kernel of that form (the RBF, the periodic kernel, their
        scales and products: :mod:`savigp.kernels.fused`), else None. The inputs are checked and
        sliced as by :meth:`__call__`, then :meth:`forward_exp_features`. A :class:`Product` of such
        kernels computes them as one fused exponential."""
        return self.forward_exp_features(*self._active(x1, x2))

    def forward_exp_features(self, x1: Tensor, x2: Tensor) -> Optional[tuple[Tensor, Tensor, Tensor]]:
        """The family's :meth:`exp_features` of the active columns (``x2 is x1`` for K(X, X)); None
        (the default) for a kernel not of the exp form."""
        return None

    def structure(self) -> dict:
        """The constructor options besides D and Q that fix the kernel's parameters' shapes (JSON
        values): a model file stores them and the state dict, and rebuilds the kernel from both.
        ``active_dims`` when not all, the :attr:`shape_options`, and ``learn`` when false."""
        return {**({} if self.active_dims is None else {"active_dims": list(self.active_dims)}),
                **{option: getattr(self, option) for option in self.shape_options},
                **({} if getattr(self, "learn", True) else {"learn": False})}

    def initial_values(self) -> dict:
        """The current hyper-parameters (:attr:`hypers`) as constructor options (JSON lists): a spec
        holding them builds a kernel equal to this one (warm starts, e.g. of :func:`savigp.search_kernels`)."""
        out = {}
        for h in self.hypers:
            value = getattr(self, h.attr or h.name)
            out[h.name] = (value if isinstance(value, Tensor) else value()).detach().cpu().tolist()
        return out

    def step_scales(self, inputs: Tensor) -> dict:
        """Parameters of this kernel (not of its parts) whose first-order steps must differ from the
        optimizer's learning rate, ``{parameter: factor}``, for training inputs ``inputs (N, D)``
        (checked and sliced as by :meth:`__call__`): the family's own (:meth:`forward_step_scales`: a
        parameter on which the ELBO is sharp in proportion to the data's extent, a period over many
        cycles) times the units' factor of each learned hyper-parameter in the inputs' units
        (:attr:`Hyper.units` ``"scale"`` or ``"offset"``; :func:`column_step_factors`: a float for
        all its entries, or a tensor broadcast to it, one per column), so that on
        inputs far from unit scale a step moves it as far, in the columns' spreads, as on standardized
        inputs. Used by :mod:`savigp.training.step_scales`."""
        columns = self._active(inputs, None)[0]
        out = dict(self.forward_step_scales(columns))
        for h in self.hypers:
            if h.units not in ("scale", "offset") or not hasattr(self, h.attr or h.name):
                continue
            value = getattr(self, h.attr or h.name)
            param = value.raw if isinstance(value, PositiveParameter) else value
            if not (isinstance(param, nn.Parameter) and param.requires_grad):
                continue
            factors = column_step_factors(columns, positive=h.floor is not None)  # (d,)
            if h.shape != "columns" or param.shape[-1] != factors.shape[0]:  # (one entry for all the columns)
                factor = shared_step_factor(factors)
            else:  # (Q, d): per column
                factor = factors.to(param.dtype).reshape(1, -1)
                factor = float(factor[0, 0]) if bool((factor == factor[0, 0]).all()) else factor
            if not (isinstance(factor, float) and factor == 1.0):
                out[param] = out.get(param, 1.0) * factor
        return out

    def forward_step_scales(self, columns: Tensor) -> dict:
        """The family's :meth:`step_scales` of the training inputs' active columns ``(N, d)``. Default: none."""
        return {}

    def identity_diag(self, x: Tensor) -> Optional[Tensor]:
        """What only ``kernel(x, x)`` with the same tensor twice has on its diagonal, ``(Q, N)`` for ``x``
        ``(N, D)`` or ``(Q, N, D)``: ``diag(x)`` less the diagonal of ``kernel(x, x')`` for ``x'`` an equal
        copy (White's s, or s times the other factors of a product). None when no part of the kernel
        tells its inputs apart by identity (:attr:`identity_terms`: White alone among savigp's), so that a
        caller forming rows of K(X, X) from other tensors (the mean heads' column blocks and sampled
        columns) adds it back only when there is something to add."""
        if not any(getattr(m, "identity_terms", False) for m in self.modules()):
            return None
        out = []
        for s in range(0, x.shape[-2], 256):  # 256 x 256 blocks of kernel(x, x')
            xb = x[..., s:s + 256, :]
            out.append(self.diag(xb) - self(xb, xb.clone()).diagonal(dim1=-2, dim2=-1))
        return torch.cat(out, dim=-1)

    def _set_hypers(self, learn: bool, **values) -> None:
        """Make the hyper-parameters of :attr:`hypers` that ``values`` names (in the table's order)
        from their initial values (:meth:`_initial`), learned or fixed (``learn``, recorded)."""
        unknown = set(values) - {h.name for h in self.hypers}
        if unknown:
            raise TypeError(f"{type(self).__name__}: no hyper-parameter {min(unknown)!r} in its hypers table")
        self.learn = bool(learn)
        shapes = {"latent": (self.num_latent,),
                  "columns": (self.num_latent, self.num_active if getattr(self, "ard", True) else 1)}
        for h in self.hypers:
            if h.name not in values:
                continue
            value = self._initial(values[h.name], shapes[h.shape], h.name)
            if h.floor is not None:
                setattr(self, h.attr or h.name, PositiveParameter(value, floor=h.floor, learnable=self.learn))
            elif self.learn:
                setattr(self, h.attr or h.name, nn.Parameter(value))
            else:
                self.register_buffer(h.attr or h.name, value)

    # ------------------------------------------------------------ the algebra
    def __add__(self, other):
        if not isinstance(other, Kernel):
            return NotImplemented
        return Sum([self, other])

    def __mul__(self, other):
        if not isinstance(other, Kernel):
            return NotImplemented
        return Product([self, other])

    def _initial(self, value, shape: tuple, name: str) -> Tensor:
        """An initial value broadcast to ``shape`` (float64; a ``(D,)`` value over the rows of a
        ``(Q, D)`` shape), with an error naming the kernel, ``name`` and the shapes it takes."""
        t = torch.as_tensor(writable(value), dtype=torch.float64)
        try:
            return t.expand(shape).clone()
        except RuntimeError:
            allowed = " or ".join(str(s) for s in ([(shape[-1],)] if len(shape) == 2 else []) + [shape])
            raise ValueError(f"{type(self).__name__}: {name} must be a float or of shape {allowed}, "
                             f"got {tuple(t.shape)}") from None

    def extra_repr(self) -> str:
        dims = "" if self.active_dims is None else f", active_dims={list(self.active_dims)}"
        return f"input_dim={self.input_dim}, num_latent={self.num_latent}{dims}"


class _Combination(Kernel):
    """Parts of equal ``num_latent`` and ``input_dim``, combined elementwise."""

    def __init__(self, kernels: Sequence[Kernel]):
        super().__init__()
        kernels = list(kernels)
        if len(kernels) < 2:
            raise ValueError(f"{type(self).__name__} needs at least two kernels, got {len(kernels)}")
        for i, k in enumerate(kernels):
            if not isinstance(k, Kernel):
                raise TypeError(f"{type(self).__name__}: part {i} is a {type(k).__name__}, not a savigp Kernel")
        first = kernels[0]
        for i, k in enumerate(kernels[1:], 1):
            if (k.num_latent, k.input_dim) != (first.num_latent, first.input_dim):
                raise ValueError(
                    f"{type(self).__name__}: part {i} ({type(k).__name__}) has num_latent={k.num_latent}, "
                    f"input_dim={k.input_dim} but part 0 ({type(first).__name__}) has num_latent={first.num_latent}, "
                    f"input_dim={first.input_dim}: the parts of a kernel expression need equal Q and D")
        flat = []
        for k in kernels:  # (k1 + k2) + k3 is one sum of three parts
            flat.extend(k.parts if type(k) is type(self) else [k])
        self.parts = nn.ModuleList(flat)
        self._set_inputs(first.input_dim, first.num_latent, None)

    def extra_repr(self) -> str:
        return f"input_dim={self.input_dim}, num_latent={self.num_latent}"


class Sum(_Combination):
    """k(x, x') = sum_i k_i(x, x') (``k1 + k2``).

    Args:
        kernels: two or more kernels of equal ``num_latent`` and ``input_dim``.
    """

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        out = self.parts[0](x1, x2)
        for k in self.parts[1:]:
            out = out + k(x1, x2)
        return out

    def forward_diag(self, x: Tensor) -> Tensor:
        out = self.parts[0].diag(x)
        for k in self.parts[1:]:
            out = out + k.diag(x)
        return out


class Product(_Combination):
    """k(x, x') = prod_i k_i(x, x') (``k1 * k2``), elementwise. The factors of the form
    exp(log s - ||a - b||^2 / 2) (RBF, periodic, their scales: :meth:`Kernel.exp_features`) are
    computed together as one fused exponential of their features side by side
    (:mod:`savigp.kernels.fused`), the other factors multiplied in.

    Args:
        kernels: two or more kernels of equal ``num_latent`` and ``input_dim``.
    """

    def forward_exp_features(self, x1: Tensor, x2: Tensor):
        joined = joined_features(self.parts, x1, x2, self.num_latent)
        return joined[0] if joined is not None and not joined[1] else None

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        out = fused_product(self.parts, x1, x2, self.num_latent)
        if out is not None:
            return out
        out = self.parts[0](x1, x2)
        for k in self.parts[1:]:
            out = out * k(x1, x2)
        return out

    def forward_diag(self, x: Tensor) -> Tensor:
        out = self.parts[0].diag(x)
        for k in self.parts[1:]:
            out = out * k.diag(x)
        return out
