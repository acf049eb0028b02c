"""``savigp train --posterior diag|diag-u``: by default the two-stage fit (``--hypers``).

A factorized q(u) (``diag``: diagonal over the whitened v = L_zz^-1 (u - mu); ``diag-u``: the
paper's "mog", diagonal over the inducing values u, Bonilla et al. 2019, §6.2) cannot represent the correlation between inducing values, and
its ELBO pays a penalty for that which depends on the kernel; learned jointly with q(u), the kernel
and the likelihood drift to where that penalty is small, at a worse prediction (the bias of
variational hyper-parameter learning, Turner & Sahani 2011; measured in docs/mixtures.md: wisconsin
SF 1, NLP 0.126 against the full Gaussian's 0.097). So when such a run learns the kernel or the
likelihood together with q(u), ``train`` by default fits in two stages:

1. the full Gaussian (``posterior="full"``, K = 1: the family that contains every factorized q, so
   its bound is the tighter one) with the run's own options, exactly as ``savigp train --posterior
   full --components 1`` with the same options would;
2. the requested posterior, started from it by :func:`savigp.warm_start` (its kernel, likelihood,
   inducing inputs and prior mean; q(u) from its moments) and trained on ``posterior`` only.

This is the recipe ``--warm-start fg.pt --learn posterior`` done in one command. ``--hypers joint``
learns everything on the factorized ELBO, as the paper does (with the warning of
:func:`savigp.training.warm_start.joint_factorized_fit` on a dense model). The model file records what was
done: ``config["training"]["hypers"]`` (``"two-stage"``, ``"joint"``, or None where the choice does
not arise) and, after a two-stage fit, ``config["training"]["stage1"]`` (the full Gaussian's steps
and full-data ELBO with its standard error).
"""
from __future__ import annotations

import sys
from typing import Optional

from .._choices import POSTERIORS
from .errors import CLIError
from .plan import TrainPlan



def _factorized(posterior: str) -> bool:
    """Whether the registered family ``posterior`` declares covariances diagonal in its own coordinates
    (:attr:`savigp.posteriors.base.Posterior.diagonal`): a factorized q(u), whose hyper-parameters are
    taken from a full Gaussian by default."""
    return bool(POSTERIORS[POSTERIORS.canonical(posterior)].diagonal)


def _factorized_names() -> str:
    return ", ".join(n for n in POSTERIORS.names() if _factorized(n))

#: the parameter groups of stage 2
STAGE_TWO_GROUPS = ["posterior"]


def resolve_hypers(plan: TrainPlan) -> Optional[str]:
    """How this run learns its hyper-parameters: ``"two-stage"``, ``"joint"``, or None when the
    question does not arise (not a factorized posterior, kernel and likelihood not learned, q(u) not
    learned, or ``--warm-start``, which is the two-stage recipe by hand); ``--hypers`` where it does
    not apply, or with an option two stages cannot take, is an error naming both."""
    chosen = plan.hypers
    learn = None if plan.learn is None else set(plan.learn)
    learns_hypers = learn is None or bool(learn & {"kernel", "likelihood"})
    learns_q = learn is None or "posterior" in learn
    if not _factorized(plan.posterior) or not (learns_hypers and learns_q):
        if chosen is not None:
            why = (f"--posterior {plan.posterior} has no factorization bias (its hyper-parameters are learned with it)"
                   if not _factorized(plan.posterior) else
                   f"--learn {','.join(plan.learn)} does not learn q(u) together with the kernel or likelihood")
            raise CLIError(f"--hypers {chosen} applies to a factorized posterior ({_factorized_names()}) that learns "
                           f"q(u) with the kernel or likelihood: {why}")
        return None
    if plan.warm_start:
        if chosen == "two-stage":
            raise CLIError(f"--hypers two-stage with --warm-start {plan.warm_start}: the two-stage fit starts from a "
                           "full Gaussian it fits itself; with a source of your own, give --learn posterior")
        return "joint"
    hypers = chosen or "two-stage"
    if hypers == "two-stage" and plan.nproc is not None and plan.nproc > 1:
        raise CLIError(f"--nproc with the two-stage fit of --posterior {plan.posterior} (the default): run the stages "
                       "as two commands (--posterior full --out fg.pt, then --warm-start fg.pt --learn posterior), or "
                       "give --hypers joint")
    return hypers


def mean_field_warning(plan: TrainPlan, model, groups=None) -> str:
    """One stderr line when a family diagonal over u (its ``mean_field_over_u``: ``--posterior diag-u``)
    learns q(u) on a dense model with a Gaussian likelihood, else ''. Its optimum at given hyper-parameters has the
    mean-field variances 1 / diag(C^-1) of the exact posterior covariance C, never above diag(C)
    (Bishop 2006, §10.1.2): its predictive intervals are narrower than the full Gaussian's (boston,
    SF 1: 90% coverage 0.026-0.033 below it, docs/mixtures.md), however well it is trained.
    ``groups``: the groups the run learns (None: all). A Gaussian likelihood: one that declares itself
    ``conjugate`` (:class:`likelihoods.Likelihood`), e.g. ``gaussian`` and ``multi-gaussian``."""
    learns_q = groups is None or "posterior" in groups
    if not (learns_q and model.dense and model.posterior.mean_field_over_u
            and getattr(model.likelihood, "conjugate", False)):  # (a duck-typed likelihood declares nothing)
        return ""
    return (f"savigp train: warning: --posterior {plan.posterior} (diagonal over u) on a dense model with a Gaussian "
            "likelihood has the mean-field optimum, whose 90% intervals are narrower than the full Gaussian's "
            "(docs/mixtures.md); --posterior diag (diagonal in whitened coordinates) covers as the full Gaussian does")


def describe(hypers: Optional[str], plan: TrainPlan) -> str:
    """One stderr line on what the run fits (two-stage or joint), or ''."""
    if hypers == "two-stage":
        return (f"savigp train: two-stage fit (--hypers two-stage, the default for --posterior {plan.posterior}): "
                f"stage 1 fits a full Gaussian (--posterior full, K = 1) with these options, stage 2 the "
                f"{plan.posterior} posterior (K = {plan.components}) at its kernel, likelihood and inducing inputs, "
                f"learning q(u) only (--hypers joint: everything on the factorized ELBO, as the paper)")
    return ""


def fit_full_gaussian(plan: TrainPlan, Xm, Ym, spec: dict, model_options: dict, config: dict, quiet: bool, rank: int = 0):
    """Stage 1: the full Gaussian of this run's options (``posterior="full"``, K = 1), trained as
    ``savigp train --posterior full`` trains it (same seed, steps, optimizer, batches and groups).

    Returns:
        ``(model, record)``: the fitted :class:`~savigp.SAVIGP` and what the model file records of it.
    """
    from ..model_files import build_model
    from ..training import fit
    from .fit_notes import fit_silenced, note_lines
    from .likelihood_options import make_likelihood

    options = dict(model_options, posterior="full", num_components=1)
    model = build_model(Xm, Ym, make_likelihood(spec), options)
    total = int(config["training"]["iterations"])
    steps = {"max_iterations": total} if plan.until_converged else {"iterations": total, "epochs": None}
    with fit_silenced():  # (its notes are printed below, once)
        history = fit(model, plan.fit_plan(progress=not quiet, **steps))
        # (the schedule of the command's --posterior full: it anneals)
    record = {"posterior": "full", "components": 1, "steps": int(history.steps), "estimator": history.estimator,
              "elbo": history.final_elbo, "elbo_stderr": history.final_elbo_stderr,
              "convergence": history.convergence.as_dict() if history.convergence is not None else None}
    if rank == 0:  # (also with --quiet, as the summary line: what was fitted)
        se = f" +- {history.final_elbo_stderr:.2g}" if history.final_elbo_stderr else ""
        elbo = "n/a" if history.final_elbo is None else f"{history.final_elbo:.6g}{se}"
        print(f"savigp train: stage 1 of 2: full Gaussian, {history.steps} step(s), final ELBO {elbo} (on all "
              f"{Xm.shape[0]} rows); stage 2: {plan.posterior}, K = {plan.components}, learning q(u) only",
              file=sys.stderr)
        for line in note_lines(history.notes, quiet, prefix="savigp train: stage 1", advise=False):
            print(line, file=sys.stderr)
    return model, record
