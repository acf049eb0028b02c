"""The fitted model in words: each additive part of the kernel described from its fitted values
(length-scales and periods in the data's units), and the likelihood.

A kernel k = k_1 + ... + k_J (Duvenaud et al. 2013's additive decomposition) is read one term at a
time: a stationary kernel alone (RBF, Matern, rational quadratic) is a smooth (or rough) variation
over about its length-scale; a periodic kernel alone a cycle that repeats with the same shape; a
periodic kernel times a stationary one a cycle whose shape changes over about the stationary
length-scale (MacKay 1998's quasi-periodic kernel); a linear kernel a linear trend (times another
linear kernel: a polynomial; times a stationary kernel: a trend whose slope changes); white noise
independent noise. A term's amplitude is the square root of the product of its variances (the
latent function's prior sd from that term), in the targets' units when they were standardized.
Length-scales and periods of standardized inputs are multiplied back by each column's sd. What a
part of each family is comes from the family itself (its ``in_words`` and ``smoothness``,
:class:`savigp.kernels.Kernel`), never from its registered name.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

from .._choices import KERNELS


def _in_words(leaf: dict) -> Optional[str]:
    """What a part of the leaf's family alone is (its ``in_words``: ``"variation"``, ``"cycle"``,
    ``"trend"``, ``"noise"``, ``"offset"``), None for a class not registered."""
    family = KERNELS.get(leaf["kernel"]) if isinstance(leaf.get("kernel"), str) else None
    return None if family is None else family.in_words


def _leaves(term, latent: int) -> list:
    """A term's factors as ``[(spec with values, extra variance)]`` (a distributed scale's variance
    for latent function ``latent`` on the first)."""
    from ..kernels.spec import kernel_spec

    extra = 1.0
    for scale in term.scales:
        extra *= float(scale.variance().detach().reshape(-1)[min(latent, scale.variance().numel() - 1)])
    out = []
    for f in term.factors:
        try:
            spec = kernel_spec(f, values=True)
        except TypeError:  # a kernel class not registered: named, not described
            spec = {"kernel": type(f).__name__}
        while "scale" in spec and "kernel" not in spec:  # scale(k): its variance multiplies k's
            v = spec.get("variance", [1.0])
            extra *= _first(v, latent)
            spec = spec["scale"]
        out.append((spec, 1.0))
    out[0] = (out[0][0], extra)
    return out


def _first(value, latent: int = 0) -> float:
    """A spec's value for latent function ``latent`` (its row of a ``(Q, d)`` list, or its entry of a
    ``(Q,)`` list; the first where the value is shared), first column."""
    if isinstance(value, list) and value:
        value = value[min(latent, len(value) - 1)]
    while isinstance(value, list):
        value = value[0]
    return float(value)


def _dims(leaf: dict, columns: Sequence[str]) -> list:
    dims = leaf.get("active_dims")
    return list(dims) if dims else list(range(max(1, len(columns))))


def _amounts(leaf: dict, key: str, latent: int, columns: Sequence[str],
             input_std: Optional[Sequence[float]]) -> str:
    """A leaf's ``key`` (length-scale, period) per input column, in the data's units:
    "1.8 (a) and 3.76 (b)"."""
    value = leaf[key]
    row = value[min(latent, len(value) - 1)] if isinstance(value, list) and value and isinstance(value[0], list) \
        else (value if isinstance(value, list) else [value])
    parts = []
    for j, d in enumerate(_dims(leaf, columns)):
        v = float(row[min(j, len(row) - 1)]) * (float(input_std[d]) if input_std is not None else 1.0)
        parts.append(f"{v:.3g} ({columns[d] if d < len(columns) else f'x{d}'})")
    return " and ".join(parts)


def _names(leaf: dict, columns: Sequence[str]) -> str:
    dims = leaf.get("active_dims")
    idx = list(dims) if dims else list(range(len(columns)))
    names = [columns[d] if d < len(columns) else f"x{d}" for d in idx]
    return ", ".join(names) if names else "x0"


def describe_term(term, columns: Sequence[str], input_std: Optional[Sequence[float]] = None,
                  target_std: float = 1.0, latent: int = 0) -> str:
    """One additive term in words.

    Args:
        term: a :class:`savigp.kernels.terms.KernelTerm` (its factors are the model's fitted modules).
        columns: the D input columns' names.
        input_std: for standardized inputs, the D columns' sds (length-scales and periods are given
            in the data's units); None: the inputs as the model sees them.
        target_std: for standardized targets, their sd (amplitudes in the targets' units).
        latent: which latent function (the row of per-latent values).
    """
    leaves = _leaves(term, latent)
    variance = 1.0
    for leaf, extra in leaves:
        variance *= extra * (_first(leaf["variance"], latent) if "variance" in leaf else 1.0)
    sd = math.sqrt(max(variance, 0.0)) * target_std
    kinds = [leaf.get("kernel") for leaf, _ in leaves]
    roles = [_in_words(leaf) for leaf, _ in leaves]
    periodic = [leaf for (leaf, _), role in zip(leaves, roles) if role == "cycle"]
    stationary = [leaf for (leaf, _), role in zip(leaves, roles) if role == "variation"]
    linear = [leaf for (leaf, _), role in zip(leaves, roles) if role == "trend"]
    amplitude = f" (prior sd {sd:.3g})"

    def scale(leaf):
        return "about " + _amounts(leaf, "lengthscale", latent, columns, input_std)

    if roles == ["noise"]:
        return f"independent noise with sd {sd:.3g}"
    if roles == ["offset"]:
        return f"a constant offset{amplitude}"
    if len(leaves) == 1 and stationary:
        leaf = stationary[0]
        return f"{KERNELS[leaf['kernel']].smoothness} trend in {_names(leaf, columns)}, varying over {scale(leaf)}{amplitude}"
    if periodic and len(periodic) == 1 and len(leaves) <= 2:
        p = periodic[0]
        cycle = f"a cycle in {_names(p, columns)} with a period of {_amounts(p, 'period', latent, columns, input_std)}"
        if len(leaves) == 1:
            return f"{cycle}, repeating with the same shape{amplitude}"
        if stationary:
            return f"{cycle} whose shape changes over {scale(stationary[0])}{amplitude}"
        if linear:
            return f"{cycle} whose amplitude grows linearly in {_names(linear[0], columns)}{amplitude}"
    if linear and len(linear) == len(leaves):
        degree = {1: "a linear", 2: "a quadratic", 3: "a cubic"}.get(len(linear), f"a degree-{len(linear)} polynomial")
        return f"{degree} trend in {_names(linear[0], columns)}{amplitude}"
    if len(linear) == 1 and len(stationary) == 1 and len(leaves) == 2:
        return (f"a trend in {_names(linear[0], columns)} whose slope changes over {scale(stationary[0])}"
                f"{amplitude}")
    if len(stationary) == len(leaves) > 1:
        over = " and ".join(scale(leaf) for leaf in stationary)
        names = " and ".join(_names(leaf, columns) for leaf in stationary)
        return f"an interaction of {names}, varying over {over}{amplitude}"
    return f"a part built from {' x '.join(str(k or 'a sum') for k in kinds)}{amplitude}"


def describe_likelihood(likelihood, target_std: float = 1.0, unit: Optional[str] = None) -> str:
    """The likelihood in words, with its fitted parameters (in the targets' units where they were
    standardized: a Gaussian's noise sd times the targets' sd)."""
    name = type(likelihood).__name__
    values = {}
    try:
        values = likelihood.parameter_values()
    except Exception:  # noqa: BLE001 - an unloaded user likelihood has none to show
        values = {}
    if name == "Gaussian":
        where = f" ({unit})" if unit else ""
        return f"Gaussian noise with sd {math.sqrt(values['variance']) * target_std:.3g}{where} around the latent function"
    if name == "Poisson":
        return "Poisson counts whose log-rate is the latent function"
    if name == "StudentT":
        return "Student-t noise around the latent function (heavy tails)"
    if name in ("Logistic", "Probit"):
        link = "logistic" if name == "Logistic" else "probit"
        return f"binary labels whose probability is the {link} of the latent function"
    if name == "Softmax":
        return "class labels whose probabilities are the softmax of the latent functions"
    fn = getattr(likelihood, "fn", None)  # a user's log p(y | f): its name and file
    if callable(fn):
        import inspect
        import os

        try:
            where = f" ({os.path.basename(inspect.getsourcefile(fn) or '')})"
        except TypeError:
            where = ""
        text = f"a user's log p(y | f), {getattr(fn, '__name__', 'log_lik')!r}{where}"
    else:
        text = name
    params = ", ".join(f"{k} = {v:.3g}" for k, v in values.items() if isinstance(v, float))
    return text + (f" (fitted {params})" if params else "")
