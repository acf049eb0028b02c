"""Building a :class:`~savigp.model.SAVIGP` from plain options (the command line's ``train``) and
rebuilding the one a model file describes, without its training data."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch

from .._choices import KERNELS
from ..model import SAVIGP
from ..posteriors import DEFAULT_ENTROPY
from .errors import ModelFileError
from .likelihood_spec import UnloadedLikelihood, resolve_likelihood
from .migrations import upgrade_model, upgrade_state
from .schema import SchemaError, check_infinities


def _dtype(name: str) -> torch.dtype:
    dt = getattr(torch, str(name), None)
    if not isinstance(dt, torch.dtype) or not dt.is_floating_point:
        raise ModelFileError(f"unknown floating-point dtype {name!r}")
    return dt


def build_model(X, Y, likelihood, options: dict) -> SAVIGP:
    """A new :class:`SAVIGP` on data ``X (N, D)``, ``Y (N, P)`` from command-line style options.

    ``options`` keys (all optional): ``kernel`` (a registered name, an expression with column
    indices or a spec, :mod:`savigp.kernels.spec`; default ``"rbf"``), ``kernel_ard`` (False with a
    name: one length-scale for all inputs), ``fourier_features`` (F: the inducing variables are the
    variational Fourier features of the ``additive-matern`` kernel, F frequencies per input, as
    :func:`~savigp.odvff.odvff_model`), ``shared_kernel``, ``num_inducing``,
    ``inducing_inputs`` (``(M, D)`` or ``(Q, M, D)``), ``inducing_init``, ``dense``,
    ``learn_inducing``, ``posterior``, ``num_components``, ``prior_mean``, ``learn_prior_mean``,
    ``mean_basis_size``, ``mean_basis``, ``entropy``, ``entropy_samples``, ``dtype`` (a name: ``"float32"``/``"float64"``), ``device``, ``seed``.
    """
    o = dict(options)
    kernel = o.get("kernel") or "rbf"
    if o.get("kernel_ard") is False and isinstance(kernel, str):  # the registry's default is ARD
        kernel = {"kernel": KERNELS.canonical(kernel), "ard": False}
    common = dict(
        shared_kernel=bool(o.get("shared_kernel", False)),
        posterior=o.get("posterior") or "full", num_components=int(o.get("num_components") or 1),
        prior_mean=o.get("prior_mean"),  # None: from the targets (SAVIGP's rule)
        learn_prior_mean=bool(o.get("learn_prior_mean", False)),
        entropy=o.get("entropy") or DEFAULT_ENTROPY, entropy_samples=int(o.get("entropy_samples") or 64),
        mean_basis_size=int(o.get("mean_basis_size") or 0), mean_basis=o.get("mean_basis") or "orthogonal", dtype=_dtype(o.get("dtype") or "float64"),
        device=o.get("device"), seed=int(o.get("seed") or 0),
    )
    if o.get("fourier_features") is not None:
        return _fourier_feature_model(X, Y, likelihood, kernel, int(o["fourier_features"]), common)
    return SAVIGP(
        X, Y, likelihood, kernel, num_inducing=o.get("num_inducing"), inducing_inputs=o.get("inducing_inputs"),
        inducing_init=o.get("inducing_init") or "kmeans",
        learn_inducing=bool(o.get("learn_inducing", True)), dense=bool(o.get("dense", False)), **common,
    )


def _fourier_feature_model(X, Y, likelihood, kernel, F: int, common: dict) -> SAVIGP:
    """:func:`~savigp.odvff.odvff_model` with F frequencies per input for ``kernel``,
    one ``additive-matern`` leaf (a name, an expression or a spec) whose options (``nu``,
    ``lengthscale``, ``variance``, ``learn``) it takes; its mean basis is ``common``'s."""
    from ..kernels.expression import parse_kernel
    from ..kernels.fourier_features import AdditiveMatern
    from ..odvff import odvff_model

    leaf = parse_kernel(kernel, input_dim=int(X.shape[-1])) if isinstance(kernel, str) else kernel
    if not isinstance(leaf, dict) or KERNELS.get(leaf.get("kernel")) is not AdditiveMatern:
        raise ValueError(f"Fourier features are those of the kernel {KERNELS.name_of(AdditiveMatern)!r} alone, "
                         f"not of {kernel!r}")
    options = {k: v for k, v in leaf.items() if k != "kernel"}
    return odvff_model(X, Y, likelihood, num_frequencies=F, **options, **common)


def rebuild_model(config: dict, state_dict: dict, X=None, Y=None, device=None, likelihood=None) -> SAVIGP:
    """The model a (checked, see :func:`read_model_file`) file describes, with its parameters
    loaded from ``state_dict``.

    Without ``X``/``Y`` the module is built around placeholder data of the recorded shapes (it
    can predict but not train); with them (``X (N, D)``, ``Y (N, P)``, e.g. to resume training)
    they become its training data. Inducing inputs are placeholders in both cases (no k-means
    is run) and are then overwritten by the state dict.

    Args:
        likelihood: the likelihood object (see :func:`resolve_likelihood`); default: the built-in
            class from the registry, or for a user function a latent-only stand-in (nothing is
            imported).
    """
    mc, mo = config["model"], config.get("model_options") or {}
    if likelihood is None:
        likelihood = resolve_likelihood(config)
    D, N, Q, M = int(mc["input_dim"]), int(mc["num_data"]), int(mc["num_latent"]), int(mc["num_inducing"])
    P = len(config["example_target"])
    if (int(likelihood.num_latent), int(likelihood.output_dim)) != (Q, P):
        raise ModelFileError(f"the likelihood {type(likelihood).__name__} reads Q={likelihood.num_latent} latent "
                             f"function(s) and P={likelihood.output_dim} target(s), but the model has Q={Q}, P={P}")
    with_data = X is not None
    if not with_data:
        n = N if mc["dense"] else max(2, int(mc.get("mean_basis_size") or 0))
        gen = torch.Generator().manual_seed(0)
        X = torch.randn(n, D, generator=gen, dtype=torch.float64)
        example = torch.as_tensor(config["example_target"], dtype=torch.float64).reshape(1, -1)
        Y = example.expand(n, example.shape[1]).clone()
    options = {
        "kernel": mo.get("kernel"), "fourier_features": mo.get("fourier_features"),
        "inducing_init": mo.get("inducing_init"), "seed": mo.get("seed", 0),
        "dtype": mo.get("dtype", "float64"),  # the prior mean is the state dict's: no search on placeholders
        "prior_mean": mo.get("prior_mean") if mo.get("prior_mean") is not None else 0.0,
        "dense": mc["dense"], "shared_kernel": bool(mc.get("shared_kernel", False)), "learn_inducing": mc["learn_inducing"], "posterior": mc["posterior"],
        "num_components": mc["num_components"], "learn_prior_mean": mc["learn_prior_mean"],
        "mean_basis_size": mc.get("mean_basis_size", 0), "mean_basis": mc.get("mean_basis"), "device": device,
        "entropy": mc.get("entropy"), "entropy_samples": mc.get("entropy_samples"),
    }
    if not mc["dense"]:
        options["inducing_inputs"] = torch.zeros(1 if mc.get("shared_kernel") else Q, M, D, dtype=torch.float64)
    if isinstance(likelihood, UnloadedLikelihood):  # its parameters were not built: leave theirs out
        state_dict = {k: v for k, v in state_dict.items() if not k.startswith("likelihood.")}
    model = build_model(X, Y, likelihood, options)
    if not with_data:
        model.num_data = N
        model.config["num_data"] = N
    if config.get("jitter_floor"):  # absent (older files) or 0: the base jitter
        model.jitter_floor = float(config["jitter_floor"])
    try:
        model.load_state_dict(upgrade_state(model, state_dict), strict=True)
    except RuntimeError as err:
        first = str(err).strip().splitlines()
        raise ModelFileError(f"the parameters do not fit the model the file describes: {' '.join(s.strip() for s in first[:3])}") from None
    upgrade_model(model)  # parameters of an earlier layout, converted with the loaded kernel and inducing inputs
    interval = getattr(model.kernel, "interval_problem", None)  # Fourier features: their interval, as loaded
    if interval is not None and interval() is not None:
        raise ModelFileError(f"state_dict['kernel.lower'], ['kernel.upper']: {interval()}")
    try:
        check_infinities(model)
    except SchemaError as err:
        raise ModelFileError(str(err)) from None
    _check_constrained_values(model)
    _check_class_labels(config.get("class_labels"), model.likelihood)
    return model


def num_classes(likelihood) -> Optional[int]:
    """C of a classification likelihood (its ``classes``, ``num_classes``, or 2 for one that declares
    itself ``binary``, e.g. :class:`likelihoods.Logistic`), or None when it does not say (a user
    ``Likelihood`` subclass)."""
    if getattr(likelihood, "classes", None) is not None:
        return len(likelihood.classes)
    if getattr(likelihood, "num_classes", None):
        return int(likelihood.num_classes)
    return 2 if getattr(likelihood, "binary", False) else None  # (a duck-typed likelihood declares nothing)


def _check_class_labels(labels, likelihood) -> None:
    """A file's ``class_labels`` (one label per class, the predictions' ``prob_<label>`` columns)
    name as many classes as the likelihood has."""
    if labels is None or isinstance(likelihood, UnloadedLikelihood) or likelihood.task != "classification":
        return
    C = num_classes(likelihood)
    if C is not None and len(labels) != C:
        raise ModelFileError(f"config.class_labels lists {len(labels)} label(s) but the likelihood "
                             f"{type(likelihood).__name__} has {C} classes")


def _check_constrained_values(model) -> None:
    """Every positive parameter (softplus(raw) + floor: kernel variances and length-scales,
    likelihood variances, ...) finite and at most :func:`~savigp.model_files.schema.tensor_bound`
    after its transform; a ModelFileError names the parameter."""
    from likelihoods.parameters import PositiveParameter

    from .schema import tensor_bound

    for name, module in model.named_modules():
        if isinstance(module, PositiveParameter):
            with torch.no_grad():
                value = module().detach()
            bound = tensor_bound(value.dtype)
            if not bool(torch.isfinite(value).all()) or bool((value.abs() > bound).any()):
                raise ModelFileError(f"state_dict[{name + '.raw'!r}]: its value {value.flatten()[:4].tolist()} is not "
                                     f"finite or exceeds {bound:.3g}")


def standardization_stats(A: np.ndarray) -> dict:
    """Column means and standard deviations of ``A (N, C)`` as plain float lists; a constant
    column gets std 1 (it is only centred)."""
    A = np.asarray(A, dtype=np.float64)
    mean = A.mean(axis=0)
    std = A.std(axis=0)
    std = np.where((std > 0) & np.isfinite(std), std, 1.0)
    if not all(math.isfinite(v) for v in mean):
        raise ValueError("cannot standardize: non-finite column means")
    return {"mean": [float(v) for v in mean], "std": [float(v) for v in std]}
