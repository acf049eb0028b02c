"""Validation of a model file's configuration before anything is built from it.

A model file is data from somewhere else: every field is checked for its type, range and size,
and the sizes are checked against the tensors of the state dict, before one tensor is allocated
for the model. The checks are a table (:data:`CONFIG_SCHEMA`): a new configuration field is one
entry, e.g. ``"task": Str(choices=("regression", "classification"))`` in the likelihood section.

The limits bound what a small file can make the loader allocate: the sizes D, Q, M, K, G must
equal those of the tensors actually stored (so a 17 KB file cannot claim M = 10^6), a dense model's
N must equal its M (its placeholder inputs are N rows), and the memory that building and using the
model needs (dominated by the Q kernel matrices K_zz of M x M, and K full covariances) must stay
under ``max_bytes``.
"""
from __future__ import annotations

from typing import Optional

import torch
from likelihoods.callable import CONSTRAINTS

from ..posteriors.entropy import ENTROPY_ESTIMATES

from .fields import (MAX_STRING, Absent, Bool, BoundedPlain, Dict, Float, Int, List, OneOf, Opt, Positive,
                     SchemaError, Str)

#: limits on sizes a model file may declare (each far above any model the engine can train)
MAX_INPUT_DIM = 100_000
MAX_LATENT = 10_000
MAX_INDUCING = 100_000
MAX_COMPONENTS = 1_000
MAX_OUTPUTS = 100_000
MAX_CLASSES = 100_000
MAX_NUM_DATA = 10 ** 13
#: default memory a loaded model may need to be built and used (bytes); ``SAVIGP_MAX_MODEL_BYTES`` overrides
DEFAULT_MAX_BYTES = 8 * 2 ** 30


# ---------------------------------------------------------------------- the table
_STATS = Dict({"mean": List(Float(), 1, MAX_OUTPUTS), "std": List(Positive(), 1, MAX_OUTPUTS)})
#: a reference to user code: where it is and the SHA-256 of its file when it was trained
CODE_REFERENCE = Dict({"import_path": Str(), "sha256": Opt(Str(pattern=r"[0-9a-f]{64}"))})
#: constructor arguments of the likelihoods that size something, with their limits; any other
#: argument is a bounded plain value
LIKELIHOOD_KWARGS = {
    "num_latent": Int(1, MAX_LATENT), "output_dim": Int(1, MAX_OUTPUTS), "num_classes": Int(1, MAX_CLASSES),
    "num_outputs": Int(1, MAX_OUTPUTS), "num_nodes": Int(1, MAX_LATENT), "num_layers": Int(1, MAX_OUTPUTS),
    "num_tanh": Int(0, 1000), "quadrature_points": Int(2, 1000),
}
_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
_NUMBERS = OneOf(Float(), List(Float(), 1, MAX_OUTPUTS))
#: arguments of :class:`likelihoods.CallableLikelihood` that name or are code: a model file records
#: them as ``import_path`` / ``code_kwargs`` (consent and SHA-256 apply), never among ``kwargs``
USER_CODE_ARGUMENTS = ("log_lik", "import_path", "mean_fn", "mean_import_path")
_CODE_IN_KWARGS = Absent("code is recorded under code_kwargs (with its SHA-256) or import_path, never among kwargs")
#: the options of a user function (:class:`likelihoods.CallableLikelihood`, ``name == "callable"``),
#: checked besides :data:`LIKELIHOOD_KWARGS`; its code (the function, ``mean_fn``) is never a kwarg
USER_FUNCTION_KWARGS = {
    "backend": Str(choices=("auto", "torch", "numpy")),
    "differentiable": Bool(),
    "task": Str(choices=("regression", "classification")),
    "classes": List(Float(), 2, MAX_CLASSES),
    "num_classes": Int(2, MAX_CLASSES),
    "params": Dict(extra=_NUMBERS, key_pattern=_IDENTIFIER, max_len=1000),
    "constraints": Dict(extra=Str(choices=CONSTRAINTS), key_pattern=_IDENTIFIER, max_len=1000),
    "min_log_prob": Float(),
    **{name: _CODE_IN_KWARGS for name in USER_CODE_ARGUMENTS},
}
#: likelihood fields; ``import_path``/``sha256`` name the user code (``name`` ``"callable"``: a
#: function, ``"user-class"``: a ``Likelihood`` subclass), ``code_kwargs`` further functions given
#: to its constructor (e.g. ``{"mean_fn": {"import_path", "sha256"}}``)
LIKELIHOOD_FIELDS = {
    "name": Str(max_len=200),
    "class": Opt(Str(pattern=r"[A-Za-z_][A-Za-z0-9_]*", max_len=200)),
    "kwargs": Opt(Dict({k: Opt(v) for k, v in LIKELIHOOD_KWARGS.items()}, extra=BoundedPlain())),
    "import_path": Opt(Str()),
    "sha256": Opt(Str(pattern=r"[0-9a-f]{64}")),
    "code_kwargs": Opt(Dict(extra=CODE_REFERENCE, key_pattern=_IDENTIFIER, max_len=100)),
}
#: the check of a user function's ``kwargs``: each optional, except the code arguments that must be absent
_USER_FUNCTION_KWARGS_SCHEMA = Dict({k: Opt(v) if not isinstance(v, Absent) else v
                                     for k, v in USER_FUNCTION_KWARGS.items()}, extra=BoundedPlain())
MODEL_FIELDS = {
    "input_dim": Int(1, MAX_INPUT_DIM),
    "num_data": Int(1, MAX_NUM_DATA),
    "num_latent": Int(1, MAX_LATENT),
    "num_inducing": Int(1, MAX_INDUCING),
    "dense": Bool(),
    "learn_inducing": Bool(),
    "posterior": Str(choices=("full", "diag", "diag-whitened", "joint")),
    "num_components": Int(1, MAX_COMPONENTS),
    "learn_prior_mean": Bool(),
    "mean_basis_size": Opt(Int(0, MAX_INDUCING)),
    "mean_basis": Opt(Str(choices=("orthogonal", "decoupled", "hybrid"))),
    "entropy": Opt(Str(choices=ENTROPY_ESTIMATES)),
    "entropy_samples": Opt(Int(2, 1_000_000)),
}
MODEL_OPTION_FIELDS = {
    "kernel": Opt(Str(choices=("rbf", "matern32", "matern52"))),
    "dtype": Opt(Str(choices=("float32", "float64"))),
    "inducing_init": Opt(Str(choices=("kmeans", "subset"))),
    "seed": Opt(Int(-2 ** 63, 2 ** 64 - 1)),
    "prior_mean": Opt(OneOf(Float(), List(Float(), 1, MAX_LATENT))),
}
CONFIG_SCHEMA = Dict({
    "format": Str(),
    "version": Int(1, 1000),
    "model": Dict(MODEL_FIELDS),
    "model_options": Opt(Dict(MODEL_OPTION_FIELDS)),
    "likelihood": Dict(LIKELIHOOD_FIELDS),
    "standardize": Opt(Dict({"inputs": Opt(_STATS), "targets": Opt(_STATS)})),
    "example_target": List(Float(), 1, MAX_OUTPUTS),
    "class_labels": Opt(List(Float(), 1, MAX_CLASSES)),
    "columns": Opt(Dict({"inputs": Opt(List(Str(max_len=MAX_STRING), 1, MAX_INPUT_DIM)),
                         "targets": Opt(List(Str(max_len=MAX_STRING), 1, MAX_OUTPUTS))})),
    "training": Opt(Dict()),
    "step": Opt(Int(0, 2 ** 62)),
    "complete": Opt(Bool()),
    "elbo": Opt(Float()),
})


# ---------------------------------------------------------------------- against the state dict
def _shape(state: dict, key: str):
    t = state.get(key)
    return None if t is None else tuple(t.shape)


def build_bytes(config: dict) -> int:
    """Bytes that building the model and predicting with it need, to within a small factor:
    K_zz, its factor and a work copy (3 Q M^2), the K covariance factors of a full or joint
    posterior (K Q M^2, (QM)^2 for joint), and the placeholder inputs (n D)."""
    mc = config["model"]
    Q, M, D, K = mc["num_latent"], mc["num_inducing"], mc["input_dim"], mc["num_components"]
    item = 4 if (config.get("model_options") or {}).get("dtype") == "float32" else 8
    cov = {"full": K * Q * M * M, "joint": (Q * M) ** 2}.get(mc["posterior"], K * Q * M)
    n = mc["num_data"] if mc["dense"] else max(2, mc.get("mean_basis_size") or 0)
    return 8 * (3 * Q * M * M + n * D) + item * cov


def check_config(config: dict, state: dict, max_bytes: Optional[int] = None) -> None:
    """Check every field of ``config`` (:data:`CONFIG_SCHEMA`) and its sizes against ``state``.

    Raises:
        SchemaError: one line naming the field, what it holds and what was expected.
    """
    CONFIG_SCHEMA.check(config, "config")
    lik = config["likelihood"]
    if lik["name"] == "callable":
        _USER_FUNCTION_KWARGS_SCHEMA.check(lik.get("kwargs") or {}, "config.likelihood.kwargs")
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
        raise SchemaError("state_dict must map parameter names to tensors")
    mc = config["model"]
    Q, M, D, K = mc["num_latent"], mc["num_inducing"], mc["input_dim"], mc["num_components"]
    G = mc.get("mean_basis_size") or 0
    expect = {"inducing": (Q, M, D), "prior_mean": (Q,),
              "posterior.mean": (1 if mc["posterior"] == "joint" else K, Q, M)}
    if G:
        expect["mean_head.gamma"] = (Q, G, D)
    for key, shape in expect.items():
        if _shape(state, key) != shape:
            raise SchemaError(f"config.model says {key} has shape {shape} (Q={Q}, M={M}, D={D}, K={K}"
                              f"{f', G={G}' if G else ''}) but the state dict holds "
                              f"{_shape(state, key) if key in state else 'no such tensor'}")
    if mc["posterior"] == "joint" and K != 1:
        raise SchemaError(f"config.model.num_components must be 1 for the joint posterior, got {K}")
    if mc["dense"] and mc["num_data"] != M:
        raise SchemaError(f"config.model.num_data is {mc['num_data']} but a dense model has one inducing input "
                          f"per data point (M = {M})")
    P = len(config["example_target"])
    st = config.get("standardize") or {}
    for part, size, what in (("inputs", D, "input_dim"), ("targets", P, "the length of example_target")):
        stats = st.get(part)
        if stats is not None and not len(stats["mean"]) == len(stats["std"]) == size:
            raise SchemaError(f"config.standardize.{part} has {len(stats['mean'])} mean(s) and {len(stats['std'])} "
                              f"std(s); expected {size} ({what})")
    prior = (config.get("model_options") or {}).get("prior_mean")
    if isinstance(prior, list) and len(prior) not in (1, Q):
        raise SchemaError(f"config.model_options.prior_mean has {len(prior)} values; expected 1 or Q = {Q}")
    cols = config.get("columns") or {}
    if cols.get("inputs") is not None and len(cols["inputs"]) != D:
        raise SchemaError(f"config.columns.inputs names {len(cols['inputs'])} column(s) but the model has D = {D} inputs")
    limit = max_bytes if max_bytes is not None else DEFAULT_MAX_BYTES
    need = build_bytes(config)
    if need > limit:
        raise SchemaError(f"the model would need about {need / 2 ** 30:.1f} GiB to be built (Q={Q}, M={M}, K={K}, "
                          f"posterior {mc['posterior']!r}), more than the limit of {limit / 2 ** 30:.1f} GiB "
                          "(raise it with max_bytes= or SAVIGP_MAX_MODEL_BYTES)")
