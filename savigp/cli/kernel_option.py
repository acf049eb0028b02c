"""``savigp train --kernel EXPR`` and ``--fourier-features F``: the kernel expression read against the
CSV file's columns, its options turned from the units of the user's columns into the model's, and
the Fourier-feature models of Hensman et al. (2018) and Azzimonti et al. (2020, ODVFF).

The expression is :func:`savigp.kernels.expression.parse_kernel`'s (``rbf + periodic(time,
period=1) * rbf(time) + white``); a column is an input column's header name (quoted when it is not a
plain word) or its 0-based index among the input columns (0 = the first input, in the order of
``--inputs``, or of the file without the targets): the kernel's ``active_dims``. A wrong expression
is one line naming ``--kernel`` and the bad part (exit status 2).

**Units.** The numbers an expression gives are in the units of the file's columns. The model sees
the inputs centred and scaled when ``--standardize-inputs`` asks for it, x' = (x - m) / s per column
(or centred alone, s = 1, for float32 inputs far from zero; ``savigp/cli/train.py``), so each option
that lives in the inputs' units is carried over by the same map:

* a length-scale l (``rbf``, ``matern*``, ``rq``, ``additive-matern``): l / s, per column (a kernel
  with one length-scale for several columns, ``ard=false``, needs columns of equal s);
* a period p (``periodic``): p / s; a shift moves every input alike and leaves
  sin^2(pi (x - x') / p) unchanged, so centring alone changes nothing; ``periodic``'s own
  length-scale divides the sine and has no units;
* an offset c (``linear``, k = v (x - c).(x' - c)): (c - m) / s, and its variance v: v s^2 (one
  variance over several columns needs columns of equal s). An offset and a variance not given
  start from the data the model sees: its columns' mean and one over their summed variances
  (:meth:`savigp.kernels.linear.Linear.initial_from_data`);
* variances of the other families, ``alpha``, ``nu``: unchanged (they are in the targets' units or
  have none).

A family registered at run time whose options savigp cannot place is refused in one line when the
inputs are transformed (its options other than ``variance``, ``ard``, ``learn``).

``--kernel search`` chooses the structure by the ELBO (:func:`_search`, :func:`savigp.search_kernels`):
its spec is in the model's units already, and holds the search's fitted values as initial values.
"""
from __future__ import annotations

import sys
from typing import Optional

from .._choices import KERNELS
from .errors import CLIError
from .plan import TrainPlan

#: the ``--kernel`` value reserved for a search over kernel structures
SEARCH = "search"
#: the key of :func:`kernel_options`'s answer that holds ``--kernel search``'s
#: :class:`savigp.selection.kernel_search.KernelSearchResult` (not a model option: the caller takes it out)
SEARCHED = "searched"
#: options of every family that do not depend on the inputs' units
_UNITLESS = ("kernel", "active_dims", "ard", "learn", "alpha", "nu")


def check_kernel_options(plan: TrainPlan) -> None:
    """``--fourier-features`` against the options it replaces, before anything is read."""
    F = plan.fourier_features
    if F is None:
        return
    if F < 0:
        raise CLIError(f"--fourier-features must be >= 0, got {F}")
    clash = [o for o, given in (("--num-inducing", plan.num_inducing is not None), ("--dense", plan.dense),
                                ("--shared-kernel", plan.shared_kernel), ("--warm-start", plan.warm_start is not None))
             if given]
    if clash:
        raise CLIError(f"--fourier-features F: the inducing variables are D (2F + 1) Fourier features of each latent "
                       f"function's own kernel, not with {', '.join(clash)}")


def kernel_options(plan: TrainPlan, table, icols, input_stats: Optional[dict], num_latent: int, data=None, quiet: bool = True) -> dict:
    """The model options of ``--kernel`` and ``--fourier-features``: ``{"kernel": spec}`` (in the
    model's units, see the module docstring) and, with Fourier features, ``"fourier_features": F``
    and ``"num_inducing": M`` (M = D (2F + 1), for the memory estimate). With ``--kernel search``
    also :data:`SEARCHED`: the search's result, whose fitted model the run starts from.

    Args:
        table, icols: the CSV file (:class:`savigp.io.csv_data.Table`) and its input columns.
        input_stats: ``{"mean": [D], "std": [D]}`` of the inputs' map to the model's, or None.
        num_latent: Q.
        data: ``(Xm, Ym, likelihood)``, the inputs and targets in the model's units and the
            likelihood, for ``--kernel search`` (which fits candidates on them).
        quiet: the search prints its table to stderr unless quiet.

    Raises:
        CLIError: one line naming ``--kernel`` (or ``--fourier-features``) and the bad part.
    """
    text = str(plan.kernel)
    if text.strip() == SEARCH:
        if plan.resume:
            return {"kernel": "rbf"}  # unused: the resumed model is rebuilt from its checkpoint
        result = _search(plan, data, table.names(icols), quiet)
        return {"kernel": result.spec, SEARCHED: result}
    spec = _parse(text, table, icols)
    D, names = len(icols), table.names(icols)
    _check_builds(spec, text, names, 1 if plan.shared_kernel else int(num_latent))
    if data is not None and not quiet:  # a period in other units than its column's (in the file's units)
        from ..kernels.periodogram import period_warnings

        for line in period_warnings(spec, table.values[:, icols], data[1], names):
            print(f"savigp train: note: --kernel {line}", file=sys.stderr)
    if input_stats is not None:
        spec = in_model_units(spec, input_stats, names)
    _check_savable(spec, text, D, 1 if plan.shared_kernel else int(num_latent), plan.dtype)
    out = {"kernel": spec}
    F = plan.fourier_features
    if F is not None:
        from ..kernels.fourier_features import AdditiveMatern

        if KERNELS.get(spec.get("kernel")) is not AdditiveMatern:
            raise CLIError(f"--fourier-features: Fourier features are those of the kernel "
                           f"{KERNELS.name_of(AdditiveMatern)!r} alone (e.g. --kernel \"additive-matern(nu=2.5)\"), "
                           f"not of --kernel {text!r}")
        out.update(fourier_features=int(F), num_inducing=D * (2 * int(F) + 1))
    return out


def _search(plan: TrainPlan, data, names, quiet: bool):
    """``--kernel search``: the :class:`~savigp.selection.kernel_search.KernelSearchResult` of
    :func:`savigp.search_kernels` (Duvenaud et al. 2013; ranked by the full-data ELBO less a BIC
    penalty) on the training data in the model's units, its table printed to stderr; the run then
    starts from the search's fitted model (:mod:`savigp.cli.searched_model`). On ``--resume``
    nothing is searched (:func:`kernel_options`): the model, kernel included, is the checkpoint's."""
    if plan.fourier_features is not None:
        raise CLIError("--kernel search: the search combines the kernel families; --fourier-features needs "
                       "--kernel additive-matern")
    if data is None:
        raise CLIError("--kernel search needs the training data")
    base = [b.strip() for b in str(plan.search_base).split(",") if b.strip()]
    unknown = [b for b in base if b not in KERNELS]
    if not base or unknown:
        raise CLIError(f"--search-base: expected comma-separated kernel families ({', '.join(KERNELS)}), "
                       f"got {str(plan.search_base)[:80]!r}")
    if plan.search_max_terms < 1 or plan.search_budget < 0 or plan.search_iterations < 1:
        raise CLIError("--search-max-terms and --search-iterations must be >= 1, --search-budget >= 0")

    from ..selection.kernel_search import search_kernels

    Xm, Ym, likelihood = data
    fit_options = {"num_samples": plan.samples, "estimator": plan.estimator}
    if plan.batch_size:
        fit_options["batch_size"] = plan.batch_size
    if not quiet:
        print(f"savigp train: searching kernel structures over {', '.join(base)} (at most {plan.search_max_terms} "
              f"terms, {plan.search_budget:.0f} s)", file=sys.stderr)
    result = search_kernels(Xm, Ym, likelihood, base=base, columns=list(names), max_terms=plan.search_max_terms,
                            time_budget=plan.search_budget, num_inducing=plan.num_inducing,
                            iterations=plan.search_iterations, fit_options=fit_options, seed=plan.seed,
                            model_options={"shared_kernel": True} if plan.shared_kernel else None,
                            progress=not quiet)
    if not quiet:
        print(str(result), file=sys.stderr)
    return result


def _parse(text: str, table, icols) -> dict:
    """The spec of ``text``, its columns named by the input columns' header names or counted among
    them (0 = the first input column)."""
    from ..kernels.expression import parse_kernel

    try:
        return parse_kernel(text, columns=table.names(icols))
    except ValueError as err:
        raise CLIError(f"--kernel: {_one_line(err)}") from None


def in_model_units(spec: dict, stats: dict, names) -> dict:
    """``spec`` with each option given in the units of the file's columns carried into the model's,
    whose inputs are x' = (x - mean) / std (module docstring).

    Args:
        spec: a spec whose ``active_dims`` count the model's D inputs.
        stats: ``{"mean": [D], "std": [D]}``.
        names: the D input columns' names, for messages.

    Raises:
        CLIError: an option with no value in the model's units (one value over columns of
            different spreads, or an option of a family savigp does not know).
    """
    mean, std = [float(v) for v in stats["mean"]], [float(v) for v in stats["std"]]
    if "sum" in spec or "product" in spec:
        op = "sum" if "sum" in spec else "product"
        return {op: [in_model_units(p, stats, names) for p in spec[op]]}
    if "scale" in spec:
        return {**spec, "scale": in_model_units(spec["scale"], stats, names)}
    if "list" in spec:
        return {"list": [{**p, "kernel": in_model_units(p["kernel"], stats, names)} for p in spec["list"]]}
    dims = spec.get("active_dims") or list(range(len(mean)))
    m, s = [mean[d] for d in dims], [std[d] for d in dims]
    rules = KERNELS[spec["kernel"]].option_units
    out = dict(spec)
    for key, value in spec.items():
        if key in _UNITLESS or (key == "variance" and "variance" not in rules):
            continue
        rule = rules.get(key)
        if rule == "none":
            continue
        if rule is None:
            raise CLIError(f"--kernel: savigp does not know the units of {spec['kernel']}'s {key}=, so it cannot carry it "
                           "into the standardized or centred inputs the model sees; drop it, or train without "
                           "--standardize-inputs")
        per_column = spec.get("ard", True) and rule != "variance"
        if not per_column and max(s) > min(s) * (1 + 1e-12):
            from ..kernels.expression import format_kernel

            cols = ", ".join(str(names[d]) for d in dims[:6])
            raise CLIError(f"--kernel: {format_kernel(spec, names)}: {key}={value} is one value for columns {cols} of different "
                           f"spreads (std {', '.join(f'{v:.3g}' for v in s[:6])}): in the standardized inputs the model "
                           f"sees it has no single value; give the columns their own {spec['kernel']} parts, or drop "
                           f"{key}=")
        out[key] = _carried(rule, float(value), m, s, per_column)
    return out


def _carried(rule: str, value: float, m: list, s: list, per_column: bool):
    if rule == "variance":
        return value * s[0] ** 2
    if rule == "offset":
        out = [(value - a) / b for a, b in zip(m, s)]
    else:
        out = [value / b for b in s]
    return out if per_column and len(out) > 1 else out[0]


def _check_builds(spec: dict, text: str, names, Qk: int) -> None:
    """Build each leaf and each scale of the kernel (on no data: the values are the expression's or
    the defaults), innermost first, so that a value its family refuses (``nu=2``, a negative period,
    a scale's negative variance) is one line naming ``--kernel`` and the part now."""
    from ..kernels.expression import format_kernel
    from ..kernels.spec import build_kernel

    if "kernel" not in spec:
        for part in spec.get("sum") or spec.get("product") or [spec.get("scale")]:
            _check_builds(part, text, names, Qk)
        if "scale" not in spec:
            return
    try:
        build_kernel(spec, len(names), Qk)
    except (ValueError, TypeError) as err:
        raise CLIError(f"--kernel {text!r}: {format_kernel(spec, names)}: {_one_line(err)}") from None


def _check_savable(spec: dict, text: str, D: int, Qk: int, dtype: str) -> None:
    """The kernel of ``spec`` (in the model's units) built once and refused when it holds a value a
    model file cannot hold (:func:`savigp.cli.checks.check_initial_values`), before any training."""
    from ..kernels.spec import build_kernel
    from .checks import check_initial_values

    check_initial_values(build_kernel(spec, D, Qk), dtype, lambda key: f"--kernel {text!r}")


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())
