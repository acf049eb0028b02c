"""``savigp train --warm-start SOURCE.pt`` and ``--learn GROUPS``: start the new model from a fitted
model file (:func:`savigp.warm_start`) and train only some parameter groups
(:data:`savigp.training.PARAMETER_GROUPS`).

The two together are the two-stage fit of a mixture over the inducing values: a diagonal mixture
(``--posterior diag-u``, the paper's "mog", Bonilla et al. 2019, §6.2, or ``diag``) that takes the kernel,
likelihood and inducing inputs of a fitted full Gaussian (``--posterior full``, K = 1) and learns
only q(u) (``--learn posterior``) predicts as well as the full Gaussian, where learned jointly on
its own ELBO it can be over-confident at high sparsity factors (see docs/cli.md for the figures).
``train`` runs this two-stage fit by itself for a factorized posterior (:mod:`savigp.cli.two_stage`).

The source file is read with the model-file loader of ``savigp predict``: a model file never runs
code by itself; a source trained with a user likelihood runs the code this command's own
``--likelihood`` names (``--trust-code`` also when that file changed since the source was
trained). Its configuration is checked against this run's before the model is built: the
likelihood (class, and for user code the function), the input and target columns and the
``--standardize-*`` choices; with standardization the new model uses the source's recorded means
and standard deviations, so that the copied hyper-parameters keep their units. The shapes
(Q, M, D), the number of components (K = 1), ``posterior="joint"`` on either side and the
kernel's class are checked by :func:`savigp.warm_start` itself; its errors become one-line errors naming ``--warm-start``.
"""
from __future__ import annotations

import sys

from .errors import CLIError, one_line
from .plan import TrainPlan


def check_warm_start_options(plan: TrainPlan) -> None:
    """The option combinations ``--warm-start`` cannot take, before anything is read."""
    if not plan.warm_start:
        return
    if plan.resume:
        raise CLIError(f"--warm-start {plan.warm_start} with --resume: a resumed run continues from its checkpoint, "
                       "which already holds the warm-started model (and its --learn groups); drop --warm-start")


def _likelihood_text(spec: dict) -> str:
    """A likelihood spec as its class, with the user code it runs."""
    text = str(spec.get("class") or spec.get("name"))
    return f"{text} ({spec['import_path']})" if spec.get("import_path") else text


def _compare(path: str, what: str, ours, theirs, hint: str = "") -> None:
    if ours != theirs:
        raise CLIError(f"--warm-start {path}: {what} {ours} here but {theirs} in the source{hint}")


def read_source(plan: TrainPlan, spec: dict, input_names: list, target_names: list):
    """The ``--warm-start`` file, checked against this run.

    Args:
        spec: this run's likelihood spec (``config["likelihood"]``).
        input_names, target_names: this run's input and target column names.

    Returns:
        the source's :class:`~savigp.model_files.SavedModel` (on ``--device``).
    """
    from ..model_files import LikelihoodImportError, ModelFileError, load_model, read_model_file
    from ..user_likelihood import USER_KINDS

    path = plan.warm_start
    try:
        config = read_model_file(path)["config"]  # checked, nothing imported
    except ModelFileError as err:
        raise CLIError(f"--warm-start: {one_line(err)}") from None
    theirs = config["likelihood"]
    _compare(path, "the likelihood is", _likelihood_text(spec), _likelihood_text(theirs))
    columns = config.get("columns")
    if columns is not None:  # a file written by savigp train (savigp.save records no columns)
        _compare(path, "the input columns are", input_names, columns.get("inputs"))
        _compare(path, "the target columns are", target_names, columns.get("targets"))
    recorded = config.get("standardize") or {}
    for side in ("inputs", "targets"):
        _compare(path, f"--standardize-{side} is", bool(getattr(plan, f"standardize_{side}")),
                 recorded.get(side) is not None,
                 "; the copied hyper-parameters are in the units the source was trained in")
    user = theirs.get("name") in USER_KINDS
    code = {"mean_fn": plan.mean_function} if user and plan.mean_function else None
    try:
        saved, _ = load_model(path, device=plan.device, likelihood=plan.likelihood if user else None,
                              trust_code=plan.trust_code, code=code)
    except (ModelFileError, LikelihoodImportError) as err:
        raise CLIError(f"--warm-start: {one_line(err)}") from None
    return saved


def start_from(plan: TrainPlan, model, saved) -> None:
    """:func:`savigp.warm_start` ``model`` from the source (seeded by ``--seed``); its refusals
    (K != 1, the shapes (Q, M, D), the kernel's class, ...) as one-line errors."""
    from ..training.warm_start import warm_start

    try:
        warm_start(model, saved.model, seed=plan.seed)
    except (TypeError, ValueError) as err:
        text = one_line(err)
        raise CLIError(f"--warm-start {plan.warm_start}: {text.removeprefix('warm_start: ')}") from None


def check_groups(plan: TrainPlan, model) -> None:
    """``--learn``: the groups must hold a trainable parameter of this model."""
    from ..training import parameter_groups

    if plan.learn is not None and not parameter_groups(model, plan.learn):
        raise CLIError(f"--learn {','.join(plan.learn)}: the model has no trainable parameters in these groups "
                       "(e.g. inducing with --dense or --fixed-inducing, mean_head without --mean-basis-size)")


def warn_joint_factorized(plan: TrainPlan, model, rank: int, groups=None) -> None:
    """One stderr line (rank 0, also with ``--quiet``) when the run learns a dense model's kernel or
    likelihood jointly with a factorized q(u) (:func:`savigp.training.warm_start.joint_factorized_fit`),
    naming the two-stage recipe; :func:`savigp.fit`'s own Python warning is then silenced by the
    caller (:data:`savigp.training.warm_start.FactorizedHyperparameterWarning`). ``groups``: the groups the
    run learns (None: all)."""
    from ..training.warm_start import TWO_STAGE_CLI, joint_factorized_fit

    problem = joint_factorized_fit(model, groups)
    if problem is not None and rank == 0:
        print(f"savigp train: warning: {problem}; the two-stage fit avoids it: drop --hypers joint (two stages are "
              f"the default), or by hand: {TWO_STAGE_CLI}", file=sys.stderr)
