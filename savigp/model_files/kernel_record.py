"""How a model file records its kernel (format 5 on): as data, never as code.

* ``config.model_options.kernel``: the kernel's spec (:mod:`savigp.kernels.spec`), its tree of sums,
  products, scales and lists and each leaf's registered family with the options that fix its
  parameters' shapes (``active_dims``, ``ard``, ``learn``, ...); the values are the state dict. A
  registered name alone (``"rbf"``) reads as the spec of that one leaf.
* ``config.model_options.fourier_features``: F, for a model whose inducing variables are the
  variational Fourier features of an additive Matern kernel (Hensman et al. 2018; ODVFF, Azzimonti
  et al. 2020: :func:`~savigp.odvff.odvff_model`), F frequencies per input and
  M = D (2F + 1) features; the kernel is then one ``additive-matern`` leaf and the features'
  interval is in the state dict (``kernel.lower``, ``kernel.upper``).

Format 4 recorded a registered name and ``kernel_ard`` instead
(:func:`~savigp.model_files.migrations.v4_to_v5` turns them into a spec of one leaf).

:func:`kernel_record` writes these entries; :func:`check_kernel_record` validates them from data
alone (:func:`savigp.kernels.spec.check_spec`: bounded size and depth, known nodes, families and
options, ``active_dims`` within the D inputs, a list's latent functions adding up to Q) with one
line naming the field (the table's :class:`~savigp.model_files.fields.KernelSpec` checks what needs no
sizes); :func:`kernel_parameter_bytes` bounds what building the kernel allocates
before the state dict is loaded into it.
"""
from __future__ import annotations

from typing import Optional

from .._checks import short_repr
from .._choices import KERNELS
from ..kernels.spec import check_spec
from .fields import SchemaError, spec_error


def kernel_record(kernel) -> dict:
    """The ``model_options`` entries that describe ``kernel`` (a built model's): ``{"kernel": spec}``,
    and ``"fourier_features": F`` for a :class:`~savigp.kernels.fourier_features.FourierFeatureKernel`.

    Raises:
        TypeError: a part of the kernel is of a class not registered in ``KERNELS``.
    """
    from ..kernels import kernel_spec
    from ..kernels.fourier_features import FourierFeatureKernel

    if isinstance(kernel, FourierFeatureKernel):
        return {"kernel": kernel.prior_spec(), "fourier_features": kernel.num_frequencies}
    try:
        return {"kernel": kernel_spec(kernel)}
    except TypeError as err:
        raise TypeError(f"cannot save a model with kernel {type(kernel).__name__}: {err}") from None


def recorded_spec(options: dict) -> Optional[dict]:
    """The spec a (checked) ``model_options`` records: its ``kernel`` (a name read as one leaf), or
    None when it records none (the default kernel)."""
    kernel = (options or {}).get("kernel")
    return {"kernel": kernel} if isinstance(kernel, str) else kernel


def check_kernel_record(config: dict) -> None:
    """The kernel entries of a configuration whose fields have types already (the schema's table):
    the spec against the model's D and Q (one hyper-parameter set for a kernel shared by the latent
    functions), and Fourier features against the kernel and the inducing inputs they replace.

    Raises:
        SchemaError: one line naming the field.
    """
    mc, mo = config["model"], config.get("model_options") or {}
    D, Q = mc["input_dim"], mc["num_latent"]
    Qk = 1 if mc.get("shared_kernel") else Q
    spec = recorded_spec(mo)
    if spec is not None:
        try:
            check_spec(spec, D, Qk)
        except ValueError as err:
            raise spec_error("config.model_options.kernel", err) from None
    F = mo.get("fourier_features")
    if F is None:
        return
    from ..kernels.fourier_features import AdditiveMatern

    where = "config.model_options.fourier_features"
    if spec is None or "kernel" not in spec or KERNELS[spec["kernel"]] is not AdditiveMatern:
        raise SchemaError(f"{where}: Fourier features need the kernel {KERNELS.name_of(AdditiveMatern)!r} alone, "
                          f"but config.model_options.kernel is {_describe(spec)}")
    M = D * (2 * F + 1)
    if mc["num_inducing"] != M or mc["dense"] or mc["learn_inducing"] or mc.get("shared_kernel"):
        raise SchemaError(f"{where} is {F}: the model needs M = D (2F + 1) = {M} fixed inducing features of its own "
                          f"(config.model: num_inducing {mc['num_inducing']}, dense {mc['dense']}, learn_inducing "
                          f"{mc['learn_inducing']}, shared_kernel {bool(mc.get('shared_kernel'))})")


def _describe(spec) -> str:
    return short_repr(spec, 80)


def kernel_parameter_bytes(config: dict) -> int:
    """An upper bound on the bytes of the parameters building the recorded kernel allocates before
    the state dict is loaded into it: at most 3 tensors of q x d per leaf (q its latent functions,
    d its active inputs) and q per scale, in float64. (The state dict must then hold the same
    tensors, but they are allocated first: many leaves over many inputs would otherwise let a
    small file ask for much memory.)"""
    mc, mo = config["model"], config.get("model_options") or {}
    D = mc["input_dim"]
    Qk = 1 if mc.get("shared_kernel") else mc["num_latent"]
    spec = recorded_spec(mo)
    if spec is None:
        return 8 * 3 * Qk * D

    def elements(node: dict, q: int) -> int:
        if "sum" in node or "product" in node:
            return sum(elements(p, q) for p in node.get("sum", node.get("product")))
        if "scale" in node:
            return q + elements(node["scale"], q)
        if "list" in node:
            return sum(elements(p["kernel"], p["num_latent"]) for p in node["list"])
        return 3 * q * len(node.get("active_dims") or range(D))

    return 8 * elements(spec, Qk)
