"""User likelihoods from code: a function ``log_lik(y, f)`` or a ``Likelihood`` subclass, named
as ``package.module:name`` or ``path/to/file.py:name``, with their options as plain values.

Model files and the command line describe a user likelihood by a *spec* (plain values only):

* a function: ``{"name": "callable", "class": "CallableLikelihood", "import_path": "file.py:fn",
  "kwargs": {...}}`` with the keyword arguments of :class:`likelihoods.CallableLikelihood`
  (``num_latent``, ``output_dim``, ``backend``, ``task``, ``classes``, ``params``,
  ``constraints``, ``min_log_prob``, ``differentiable``), ``"sha256"`` of its file, and
  ``"code_kwargs": {"mean_fn": {"import_path", "sha256"}}`` for its ``mean_fn``; learned
  parameter values are in the model's state dict;
* a class: ``{"name": "user-class", "class": "Name", "import_path": "file.py:Name", "sha256",
  "kwargs": {constructor arguments}}``; its ``nn.Parameter`` s are in the state dict.

:func:`build_user_likelihood` turns a spec back into the likelihood from code already imported
(the model-file loader decides whether code may run: consent and SHA-256, see
:func:`savigp.model_files.resolve_likelihood`).
"""
from __future__ import annotations

import math
from typing import Optional


#: spec names of likelihoods defined in user code
USER_KINDS = ("callable", "user-class")


def is_likelihood_class(obj) -> bool:
    """True for a subclass of :class:`likelihoods.Likelihood` (not an instance, not a function)."""
    from likelihoods import Likelihood

    return isinstance(obj, type) and issubclass(obj, Likelihood)


def build_user_likelihood(spec: dict, obj, code: Optional[dict] = None):
    """The likelihood a user spec describes (see the module docstring), from code already
    imported: this imports nothing (the model-file loader decides whether code may run, and
    imports it).

    Args:
        spec: ``{"name": "callable" | "user-class", "import_path", "kwargs", "code_kwargs"}``.
        obj: the function or ``Likelihood`` subclass ``spec["import_path"]`` names.
        code: the functions of ``spec["code_kwargs"]`` (name -> function, e.g. ``"mean_fn"``).
    """
    import likelihoods

    kwargs = dict(spec.get("kwargs") or {})
    code = dict(code or {})
    if is_likelihood_class(obj):  # also a "callable" spec that names a class (files written before "user-class")
        return obj(**kwargs, **code)
    if spec.get("name") == "user-class":
        raise TypeError(f"{spec['import_path']} is a {type(obj).__name__}, not a Likelihood subclass")
    refs = spec.get("code_kwargs") or {}
    if "mean_fn" in code and "mean_fn" in refs:
        kwargs["mean_import_path"] = refs["mean_fn"]["import_path"]
    return likelihoods.CallableLikelihood(obj, import_path=spec["import_path"], **kwargs, **code)


def parse_lik_params(items) -> tuple[dict, dict]:
    """``--lik-param NAME=VALUE[:CONSTRAINT]`` items -> (params, constraints).

    VALUE is a number or comma-separated numbers (a vector parameter); CONSTRAINT is ``real``
    (default), ``positive``, ``unit_interval`` (in (0, 1)) or ``fixed``. Raises ``ValueError`` naming the bad item.
    """
    from likelihoods.callable import CONSTRAINTS

    params, constraints = {}, {}
    for item in items or []:
        name, sep, rest = str(item).partition("=")
        name = name.strip()
        value, _, kind = rest.partition(":")
        kind = kind.strip() or "real"
        if not sep or not name.isidentifier():
            raise ValueError(f"--lik-param: expected NAME=VALUE[:positive|:unit_interval|:fixed] (e.g. r=3.0:positive), got {item!r}")
        if kind not in CONSTRAINTS:
            raise ValueError(f"--lik-param {item!r}: the constraint must be one of {', '.join(CONSTRAINTS)}, got {kind!r}")
        try:
            vals = [float(v) for v in value.split(",")]
        except ValueError:
            raise ValueError(f"--lik-param {item!r}: {value!r} is not a number or comma-separated numbers") from None
        if not all(math.isfinite(v) for v in vals):
            raise ValueError(f"--lik-param {item!r}: values must be finite")
        if name in params:
            raise ValueError(f"--lik-param: {name!r} given twice")
        params[name] = vals[0] if len(vals) == 1 else vals
        constraints[name] = kind
    return params, constraints


def unused_latents(likelihood, y, f) -> list:
    """Indices j of latent functions that do not change ``log_prob(y, f)`` (tensors ``y (B, P)``,
    ``f (..., B, Q)``) when moved by 0.5: a likelihood given more latent functions
    (``num_latent``) than it reads."""
    import torch

    with torch.no_grad():
        base = likelihood.log_prob(y, f)
        out = []
        for j in range(f.shape[-1]):
            g = f.clone()
            g[..., j] += 0.5
            if torch.equal(likelihood.log_prob(y, g), base):
                out.append(j)
    return out
