"""Kernels as data: a kernel expression's tree as JSON values, built without running any code but the
registered kernel classes' constructors.

A spec is one of

* a leaf ``{"kernel": NAME, OPTION: VALUE, ...}``: NAME is registered in
  :data:`~savigp._choices.KERNELS`, the options are keyword arguments of its constructor besides D
  and Q (``active_dims``, ``ard``, ``learn``, initial values such as ``period``), each a bool, a
  number, or a list of numbers;
* ``{"sum": [SPEC, SPEC, ...]}`` and ``{"product": [SPEC, SPEC, ...]}`` (two or more parts),
  ``{"scale": SPEC}`` (optionally ``"variance"``, ``"learn"``);
* ``{"list": [{"num_latent": q, "kernel": SPEC}, ...]}``, latent functions with different kernels
  (:class:`~savigp.kernels.kernel_list.KernelList`).

:func:`kernel_spec` reads the spec of a built kernel (its structure, not its values: those are the
state dict), :func:`check_spec` validates one from data alone (a model file's, a command line's)
with a one-line error that names the node, and :func:`build_kernel` builds it for D input columns
and Q latent functions.
"""
from __future__ import annotations

import heapq
import inspect
from typing import Any, Callable, Optional, Sequence

from .._checks import finite_number, short_repr
from .._choices import KERNELS

#: the nodes of the algebra; a kernel registered under one of these names could not be told apart
COMBINATIONS = ("sum", "product", "scale", "list")
#: bounds on a spec read from data (a model file or a command line)
MAX_NODES, MAX_DEPTH = 256, 32
_FIXED = ("self", "input_dim", "num_latent")


def kernel_spec(kernel, values: bool = False) -> dict:
    """The spec of a built kernel: its tree, each leaf's registered name and structure (and, with
    ``values``, its current hyper-parameters as initial values: a kernel built from it equals this one).

    Raises:
        TypeError: a part of ``kernel`` is of a class not registered in ``KERNELS``.
    """
    from .base import Product, Sum
    from .scale import Scale
    from .kernel_list import KernelList

    if isinstance(kernel, (Sum, Product)):
        return {"sum" if isinstance(kernel, Sum) else "product": [kernel_spec(k, values) for k in kernel.parts]}
    if isinstance(kernel, Scale):
        return {"scale": kernel_spec(kernel.base, values), **kernel.structure(),
                **({"variance": kernel.initial_values()["variance"]} if values else {})}
    if isinstance(kernel, KernelList):
        return {"list": [{"num_latent": k.num_latent, "kernel": kernel_spec(k, values)} for k in kernel.parts]}
    name = KERNELS.name_of(type(kernel))
    if name is None:
        raise TypeError(f"kernel {type(kernel).__name__} is not registered (savigp.kernels.KERNELS.register adds it; "
                        f"registered: {', '.join(KERNELS)})")
    return {"kernel": name, **kernel.structure(), **(kernel.initial_values() if values else {})}


def _options_of(name: str) -> dict:
    """The keyword arguments of a registered kernel's constructor besides D and Q."""
    params = inspect.signature(KERNELS[name].__init__).parameters
    return {p: v for p, v in params.items() if p not in _FIXED and v.kind in (v.POSITIONAL_OR_KEYWORD, v.KEYWORD_ONLY)}


def _is_value(v: Any) -> bool:
    if isinstance(v, bool) or v is None:
        return True
    if isinstance(v, (int, float)):
        return finite_number(v)
    if not isinstance(v, list) or len(v) > 4096:
        return False
    rows = v if v and all(isinstance(r, list) for r in v) else [v]  # a (Q, d) value is a list of lists
    return sum(len(r) for r in rows) <= 65536 and all(isinstance(r, list) and all(map(finite_number, r)) for r in rows)


def _kind_error(name: str, key: str, value: Any, default: Any) -> Optional[str]:
    """What is wrong with ``value`` for an option whose constructor default is ``default``: a
    boolean option (``ard``, ``learn``) takes true or false only (an integer is not a boolean), a
    numeric one no boolean; None when the value fits (or the default says nothing)."""
    if isinstance(default, bool):
        return None if isinstance(value, bool) else f"{name}'s {key} must be true or false, got {short_repr(value)}"
    if isinstance(default, (int, float)) and isinstance(value, bool):
        return f"{name}'s {key} must be a number, got {str(value).lower()}"
    return None


def check_spec(spec: Any, input_dim: Optional[int] = None, num_latent: Optional[int] = None) -> None:
    """Validate a spec read from data: known nodes and kernel names, known options with JSON values,
    ``active_dims`` within ``input_dim`` columns, list parts' ``num_latent`` adding up to ``num_latent``,
    at most :data:`MAX_NODES` nodes and :data:`MAX_DEPTH` levels.

    Raises:
        ValueError: one line naming the node (``sum[1].product[0]``) and what is wrong.
    """
    count = [0]

    def visit(node: Any, where: str, depth: int) -> None:
        count[0] += 1
        if count[0] > MAX_NODES or depth > MAX_DEPTH:
            raise ValueError(f"kernel spec: more than {MAX_NODES} nodes or {MAX_DEPTH} levels (at {where})")
        if not isinstance(node, dict):
            raise ValueError(f"kernel spec at {where}: expected an object, got {type(node).__name__}")
        ops = [k for k in COMBINATIONS if k in node]
        if "kernel" in node and not ops:
            _check_leaf(node, where, input_dim)
            return
        if len(ops) != 1:
            raise ValueError(f"kernel spec at {where}: expected one of 'kernel', {', '.join(repr(c) for c in COMBINATIONS)}; "
                             f"got keys {short_repr(heapq.nsmallest(8, map(str, node)), 120)}")
        op = ops[0]
        extra = set(node) - {op} - ({"variance", "learn"} if op == "scale" else set())
        if extra:
            raise ValueError(f"kernel spec at {where}: {op!r} takes no key {min(map(str, extra))[:40]!r}")
        body = node[op]
        if op == "scale":
            if "learn" in node and not isinstance(node["learn"], bool):
                raise ValueError(f"kernel spec at {where}: 'learn' must be true or false")
            if "variance" in node and not (_is_value(node["variance"]) and not isinstance(node["variance"], bool)
                                           and node["variance"] is not None):
                raise ValueError(f"kernel spec at {where}: 'variance' must be a positive number or a list of them")
            visit(body, f"{where}.scale", depth + 1)
            return
        if not isinstance(body, list) or len(body) < (1 if op == "list" else 2):
            raise ValueError(f"kernel spec at {where}: {op!r} takes a list of {'one' if op == 'list' else 'two'} or more parts")
        if op != "list":
            for i, part in enumerate(body):
                visit(part, f"{where}.{op}[{i}]", depth + 1)
            return
        total = 0
        for i, part in enumerate(body):
            here = f"{where}.list[{i}]"
            if not isinstance(part, dict) or set(part) != {"num_latent", "kernel"}:
                raise ValueError(f"kernel spec at {here}: expected {{'num_latent': q, 'kernel': spec}}")
            q = part["num_latent"]
            if not isinstance(q, int) or isinstance(q, bool) or q < 1:
                raise ValueError(f"kernel spec at {here}: num_latent must be a positive integer, got {short_repr(q)}")
            total += q
            visit(part["kernel"], f"{here}.kernel", depth + 1)
        if num_latent is not None and depth == 0 and total != num_latent:
            raise ValueError(f"kernel spec at {where}: the list's parts have {total} latent functions, the model {num_latent}")

    visit(spec, "kernel", 0)


def _check_leaf(node: dict, where: str, input_dim: Optional[int]) -> None:
    name = node["kernel"]
    if not isinstance(name, str) or name not in KERNELS:
        raise ValueError(f"kernel spec at {where}: unknown kernel {short_repr(name)} (registered: {', '.join(KERNELS)})")
    options = _options_of(name)
    open_ended = any(p.kind == p.VAR_KEYWORD for p in inspect.signature(KERNELS[name].__init__).parameters.values())
    for key, value in node.items():
        if key == "kernel":
            continue
        if key not in options and not open_ended:
            raise ValueError(f"kernel spec at {where}: {name} takes no option {short_repr(key)} "
                             f"(it takes {', '.join(options) or 'none'})")
        if not _is_value(value):
            raise ValueError(f"kernel spec at {where}: {name}'s {key} must be a bool, a finite number or a list of them")
        wrong = _kind_error(name, key, value, options[key].default) if key in options else None
        if wrong:
            raise ValueError(f"kernel spec at {where}: {wrong}")
    dims = node.get("active_dims")
    if dims is not None:
        if not isinstance(dims, list) or not dims or any(not isinstance(d, int) or isinstance(d, bool) for d in dims):
            raise ValueError(f"kernel spec at {where}: active_dims must be a list of column indices, got {short_repr(dims)}")
        bad = [d for d in dims if d < 0 or (input_dim is not None and d >= input_dim)] or (
            dims if len(set(dims)) != len(dims) else [])
        if bad:
            raise ValueError(f"kernel spec at {where}: active_dims {dims[:16]} must be distinct columns in "
                             f"[0, {input_dim if input_dim is not None else 'D'})")


def build_kernel(spec: Any, input_dim: int, num_latent: int,
                 lengthscale: Optional[Callable[[Optional[Sequence[int]], bool], Any]] = None, inputs=None):
    """Build the kernel a spec describes, for ``input_dim`` columns and ``num_latent`` latent functions
    (checked with :func:`check_spec` first).

    Args:
        spec: a spec (the module docstring), or a registered kernel name.
        input_dim: D. num_latent: Q.
        lengthscale: the initial length-scale of a leaf whose length-scale is in the inputs' units
            (its family's ``option_units``) and was given none:
            ``lengthscale(active_dims, ard)`` (active_dims None for all D columns); None keeps each
            class's default.
        inputs: the training inputs ``(N, D)`` (a tensor), or None: a leaf whose family declares
            ``starts_from_data`` takes from ``initial_from_data(columns)`` (its active columns
            ``(N, d)``) the initial values the spec leaves out (a linear part's offset and variance,
            :meth:`savigp.kernels.linear.Linear.initial_from_data`).
    """
    from .base import Product, Sum
    from .scale import Scale
    from .kernel_list import KernelList

    if isinstance(spec, str):
        spec = {"kernel": spec}
    check_spec(spec, input_dim, num_latent)

    def build(node: dict, q: int):
        if "sum" in node or "product" in node:
            parts = [build(p, q) for p in node.get("sum", node.get("product"))]
            return Sum(parts) if "sum" in node else Product(parts)
        if "scale" in node:
            return Scale(build(node["scale"], q), variance=node.get("variance", 1.0), learn=node.get("learn", True))
        if "list" in node:
            return KernelList([build(p["kernel"], p["num_latent"]) for p in node["list"]])
        options = {k: v for k, v in node.items() if k != "kernel"}
        cls = KERNELS[node["kernel"]]
        if lengthscale is not None and cls.option_units.get("lengthscale") == "scale" and "lengthscale" not in options:
            options["lengthscale"] = lengthscale(options.get("active_dims"), options.get("ard", True))
        if inputs is not None and cls.starts_from_data:
            dims = options.get("active_dims")
            columns = inputs if dims is None else inputs[:, list(dims)]
            options = {**{k: v for k, v in cls.initial_from_data(columns).items() if k not in options}, **options}
        return cls(input_dim, q, **options)

    return build(spec, num_latent)


def default_lengthscale(X) -> Callable[[Optional[Sequence[int]], bool], Any]:
    """The initial length-scales :func:`build_kernel` gives a leaf from the inputs ``X (N, D)``: each
    active column's standard deviation times sqrt(d) (d the leaf's active columns; the mean over
    them for ``ard=False``), so that the leaf starts neither flat nor rough. A column without spread
    gets sqrt(d) (any value fits it, and 0 would be below the length-scale's floor)."""
    import torch

    N, D = X.shape
    std = X.std(0) if N > 1 else torch.ones(D, dtype=X.dtype)
    std = torch.where(std > 0, std.clamp_min(1e-5), torch.ones_like(std))

    def lengthscale(active_dims, ard):
        s = std if active_dims is None else std[list(active_dims)]
        s = s * s.shape[0] ** 0.5
        return s if ard else float(s.mean())

    return lengthscale
