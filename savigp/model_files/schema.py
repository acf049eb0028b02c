"""Validation of a model file's configuration before anything is built from it.

A model file is data from somewhere else: every field is checked for its type, range and size,
and the sizes are checked against the tensors of the state dict, before one tensor is allocated
for the model. The checks are a table (:data:`CONFIG_SCHEMA`): a new configuration field is one
entry, e.g. ``"task": Str(choices=("regression", "classification"))`` in the likelihood section.
The names of kernels, posterior families, mean heads, entropy estimates are those of the
registries in :mod:`savigp._choices`, read when a file is checked (a kernel registered at run time
is a valid name). The kernel is a spec, data checked node by node
(:mod:`savigp.model_files.kernel_record`): an unknown node, family or option is refused in one line.

The limits bound what a small file can make the loader allocate: the sizes D, Q, M, K, G must
equal those of the tensors actually stored (so a 17 KB file cannot claim M = 10^6): the inducing
inputs, the prior mean and the tensors that the posterior family and the mean head declare
(:meth:`~savigp.posteriors.Posterior.state_shapes`, :meth:`~savigp.mean_heads.MeanHead.state_shapes`;
their classes read from the registries, so a registered head on the base alone is checked by its own
declaration); a dense model's N must equal its M (its placeholder inputs are N rows), and the memory that building and using the
model needs (dominated by the Q kernel matrices K_zz of M x M, and K full covariances) must stay
under ``max_bytes``.
"""
from __future__ import annotations

from typing import Optional

import torch
from likelihoods.callable import CONSTRAINTS

from ..cost import DEFAULT_MAX_BYTES, MAX_BYTES_ENV, Cost, CostError, check_memory, memory_limit, model_cost  # noqa: F401
from .._choices import DTYPES, ENTROPY_ESTIMATES, INDUCING_INITS, MEAN_HEADS, POSTERIORS
from ..mean_heads import DEFAULT_MEAN_BASIS

from .fields import (MAX_STRING, Absent, Bool, BoundedPlain, Dict, Float, Int, KernelSpec, List, OneOf, Opt,
                     Positive, SchemaError, Str)
from .kernel_record import check_kernel_record, kernel_parameter_bytes

#: limits on sizes a model file may declare (each far above any model the engine can train)
MAX_INPUT_DIM = 100_000
MAX_LATENT = 10_000
MAX_INDUCING = 100_000
MAX_COMPONENTS = 1_000
MAX_OUTPUTS = 100_000
MAX_CLASSES = 100_000
MAX_NUM_DATA = 10 ** 13


# ---------------------------------------------------------------------- the table
_STATS = Dict({"mean": List(Float(), 1, MAX_OUTPUTS), "std": List(Positive(), 1, MAX_OUTPUTS)})
#: a reference to user code: where it is and the SHA-256 of its file when it was trained
CODE_REFERENCE = Dict({"import_path": Str(), "sha256": Opt(Str(pattern=r"[0-9a-f]{64}")),
                       "function_sha256": Opt(Str(pattern=r"[0-9a-f]{64}"))})  # (user_code.function_binding)
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
    "ordered": Bool(),
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
    "function_sha256": Opt(Str(pattern=r"[0-9a-f]{64}")),
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
    "shared_kernel": Opt(Bool()),
    "learn_inducing": Bool(),
    "posterior": Str(choices=POSTERIORS),
    "num_components": Int(1, MAX_COMPONENTS),
    "learn_prior_mean": Bool(),
    "mean_basis_size": Opt(Int(0, MAX_INDUCING)),
    "mean_basis": Opt(Str(choices=MEAN_HEADS)),
    "entropy": Opt(Str(choices=ENTROPY_ESTIMATES)),
    "entropy_samples": Opt(Int(2, 1_000_000)),
}
MODEL_OPTION_FIELDS = {
    # the kernel's spec (format 5; a registered name reads as one leaf) and, for a model whose inducing
    # variables are Fourier features, their frequencies per input (savigp.model_files.kernel_record)
    "kernel": Opt(KernelSpec()),
    "kernel_ard": Absent("since format 5 the kernel's spec (config.model_options.kernel) records its ard"),
    "fourier_features": Opt(Int(0, MAX_INDUCING)),
    "dtype": Opt(Str(choices=DTYPES)),
    "inducing_init": Opt(Str(choices=INDUCING_INITS)),
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
    # the relative K_zz jitter that training found necessary (SAVIGP.jitter_floor); absent in older files
    "jitter_floor": Opt(Float()),
})
#: the largest relative jitter a file may record (jitter as large as the kernel's own variance)
MAX_JITTER_FLOOR = 1.0


# ---------------------------------------------------------------------- the tensors themselves
def tensor_bound(dtype: torch.dtype) -> float:
    """The largest magnitude a stored floating-point value may have: sqrt(finfo.max) (1.3e154 in
    float64, 1.8e19 in float32), so that its square (a variance, a squared distance) stays finite."""
    return float(torch.finfo(dtype).max) ** 0.5


def value_beyond_bound(module, dtype: torch.dtype) -> Optional[tuple]:
    """The first ``(state-dict key, value)`` of ``module`` (a model, a kernel, a likelihood, or a
    dict of tensors, part of a state dict) that a model file in ``dtype`` could not hold: a finite
    stored value, or a positive parameter's value after its transform, beyond :func:`tensor_bound`
    (``dtype``) in magnitude -- what :func:`check_tensor` and the rebuilt model's check refuse on
    reading; None when all fit. So a run can refuse, before training, a model it could write but
    not read back."""
    from likelihoods.parameters import PositiveParameter

    bound = tensor_bound(dtype)
    with torch.no_grad():
        if isinstance(module, dict):
            stored = list(module.items())
        else:
            stored = [(k, t) for k, t in module.state_dict().items() if t.is_floating_point()]
            stored += [(f"{name}.raw" if name else "raw", sub()) for name, sub in module.named_modules()
                       if isinstance(sub, PositiveParameter)]
        for key, t in stored:
            t = t.detach().double().reshape(-1)
            big = torch.isfinite(t) & (t.abs() > bound)
            if bool(big.any()):
                return key, float(t[big][0])
    return None


def check_tensor(t: torch.Tensor, where: str, values: bool = True) -> None:
    """A stored tensor whose storage holds every element it claims, and (``values``) whose
    floating-point values are not NaN and, when finite, at most :func:`tensor_bound` in magnitude
    (infinities are checked on the rebuilt model, where modules can declare them: :func:`check_infinities`).

    ``torch.load`` rebuilds a tensor from its shape, strides and storage: a tensor with a zero
    stride (``torch.zeros(1).expand(15000, 10)``) or strides that overlap claims many elements
    while its file holds a few, and would pass every shape check. Here a tensor must be dense
    (strided), have no zero stride along a dimension longer than 1, and its storage must hold at
    least ``numel`` elements and reach its last element: the size a file claims is the size it holds.

    Raises:
        SchemaError: naming ``where``, what it claims and what it holds.
    """
    if t.layout != torch.strided or t.is_quantized:
        raise SchemaError(f"{where} is a {t.layout} tensor; model files hold dense tensors")
    if t.is_complex():
        raise SchemaError(f"{where} has dtype {t.dtype}; model files hold real tensors")
    n = t.numel()
    if n == 0:
        return
    shape, strides = tuple(t.shape), t.stride()
    if any(st == 0 and size > 1 for size, st in zip(shape, strides)):
        raise SchemaError(f"{where} claims shape {shape} but repeats stored values (stride {strides}): "
                          "a model file holds every element it claims")
    span = t.storage_offset() + 1 + sum((size - 1) * st for size, st in zip(shape, strides))
    held = t.untyped_storage().nbytes() // t.element_size()
    if held < max(n, span):
        raise SchemaError(f"{where} claims shape {shape} ({n} elements) but the file stores {held}")
    if values and t.is_floating_point():
        bad = torch.isnan(t)
        if bool(bad.any()):
            i = int(torch.nonzero(bad.reshape(-1))[0])
            raise SchemaError(f"{where} holds a non-finite value (nan at flat index {i} of shape {shape})")
        bound = tensor_bound(t.dtype)
        big = (t.abs() > bound) & torch.isfinite(t)  # infinities: see check_infinities
        if bool(big.any()):
            i = int(torch.nonzero(big.reshape(-1))[0])
            raise SchemaError(f"{where} holds {float(t.reshape(-1)[i]):.3g} at flat index {i} of shape {shape}; "
                              f"values must be at most {bound:.3g} in magnitude (its square stays finite)")


def check_infinities(module: torch.nn.Module) -> None:
    """No parameter or buffer of ``module`` (a rebuilt model) holds +-inf, except the buffers a
    submodule lists in its ``may_be_infinite`` (e.g. a bound whose inf means none). NaN and huge
    finite values were refused in the file already (:func:`check_tensor`).

    Raises:
        SchemaError: naming the state-dict key.
    """
    for prefix, sub in module.named_modules():
        allowed = getattr(sub, "may_be_infinite", ())
        for name, t in list(sub._parameters.items()) + list(sub._buffers.items()):
            if t is None or not t.is_floating_point() or name in allowed:
                continue
            t = t.detach()
            if not bool(torch.isfinite(t).all()):
                key = f"{prefix}.{name}" if prefix else name
                i = int(torch.nonzero(~torch.isfinite(t.reshape(-1)))[0])
                raise SchemaError(f"state_dict[{key!r}] holds a non-finite value ({float(t.reshape(-1)[i])} at flat "
                                  f"index {i} of shape {tuple(t.shape)})")


def check_tensors(obj, where: str, values: bool = True, depth: int = 0) -> None:
    """:func:`check_tensor` on every tensor in a nested dict/list ``obj`` (a state dict, an optimizer state)."""
    if depth > 12:
        raise SchemaError(f"{where}: nested more than 12 levels deep")
    if isinstance(obj, torch.Tensor):
        check_tensor(obj, where, values)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            check_tensors(v, f"{where}.{k}" if isinstance(k, str) else f"{where}[{k!r}]", values, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            check_tensors(v, f"{where}[{i}]", values, depth + 1)


# ---------------------------------------------------------------------- against the state dict
def _shape(state: dict, key: str):
    t = state.get(key)
    return None if t is None else tuple(t.shape)


def build_cost(config: dict):
    """The :class:`savigp.cost.Cost` of building the model and predicting with it: K_zz, its
    factor and a work copy (3 Q M^2), the K covariance factors of a full or joint posterior
    (K Q M^2, (QM)^2 for joint), and the placeholder inputs (n D)."""
    mc = config["model"]
    item = 4 if (config.get("model_options") or {}).get("dtype") == "float32" else 8
    n = mc["num_data"] if mc["dense"] else max(2, mc.get("mean_basis_size") or 0)
    cost = model_cost(D=mc["input_dim"], Q=mc["num_latent"], M=mc["num_inducing"], K=mc["num_components"],
                      posterior=mc["posterior"], rows=n, item=item)
    kernel = kernel_parameter_bytes(config)  # allocated before the state dict is loaded into them
    return Cost(cost.bytes + kernel, cost.step_flops, "the kernel's parameters" if kernel > cost.bytes else cost.main)


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
    for key, t in state.items():
        check_tensor(t, f"state_dict[{key!r}]")
    mc = config["model"]
    Q, M, D, K = mc["num_latent"], mc["num_inducing"], mc["input_dim"], mc["num_components"]
    G = mc.get("mean_basis_size") or 0
    limit = POSTERIORS[mc["posterior"]].max_components
    if limit is not None and K > limit:
        raise SchemaError(f"config.model.num_components must be at most {limit} for the {mc['posterior']!r} "
                          f"posterior, got {K}")
    Qz = 1 if mc.get("shared_kernel") else Q  # sets of inducing inputs: one for a kernel shared by the Q functions
    # the model's own tensors, then those the family and the head declare (their state_shapes)
    expect = {"inducing": (Qz, M, D), "prior_mean": (Q,)}
    family = POSTERIORS[mc["posterior"]]
    expect.update({f"posterior.{k}": v for k, v in
                   family.state_shapes(num_components=K, num_latent=Q, num_inducing=M).items()})
    if G:
        head = MEAN_HEADS[MEAN_HEADS.canonical(mc.get("mean_basis") or DEFAULT_MEAN_BASIS)]
        expect.update({f"mean_head.{k}": v for k, v in
                       head.state_shapes(num_latent=Q, num_inducing=M, input_dim=D, size=G).items()})
    for key, shape in expect.items():
        if _shape(state, key) != shape:
            raise SchemaError(f"config.model says {key} has shape {shape} (Q={Q}, M={M}, D={D}, K={K}"
                              f"{f', G={G}' if G else ''}{', shared kernel' if Qz != Q else ''}) but the state dict holds "
                              f"{_shape(state, key) if key in state else 'no such tensor'}")
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
    labels = config.get("class_labels")
    if labels is not None and len(set(labels)) != len(labels):
        raise SchemaError(f"config.class_labels must be distinct, got {labels[:10]}")
    check_kernel_record(config)
    floor = config.get("jitter_floor")
    if floor is not None and not 0.0 <= floor <= MAX_JITTER_FLOOR:
        raise SchemaError(f"config.jitter_floor must be between 0 and {MAX_JITTER_FLOOR}, got {floor}")
    try:
        check_memory(build_cost(config), memory_limit(max_bytes),
                     f"the model (Q={Q}, M={M}, K={K}, posterior {mc['posterior']!r})",
                     f"--max-memory GIB, max_bytes= or {MAX_BYTES_ENV}")
    except CostError as err:
        raise SchemaError(str(err)) from None
