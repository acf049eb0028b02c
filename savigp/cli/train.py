"""``savigp train``: read and check the data, build the likelihood and the model (or resume one),
fit it with checkpoints and a graceful Ctrl-C, and write the model file atomically. ``--nproc R``
runs the same command as R data-parallel ranks, started and watched by :mod:`savigp.cli.ranks`."""
from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time
import types
from typing import Optional

import numpy as np

from .._choices import ESTIMATORS, POSTERIORS
from ..io.csv_data import DataError, data_checksum, read_csv, split_columns
from ..io.output_paths import check_output_path, remove_orphaned_temporaries
from ..user_likelihood import USER_KINDS
from .checkpoint import Checkpointer, resume
from .checks import (check_device, check_initial_values, check_plot_option, code_inputs, max_memory_bytes, output_path,
                     parse_floats)
from .columns import validate_targets
from .kernel_option import SEARCH, SEARCHED, check_kernel_options, kernel_options
from . import searched_model
from .errors import EXIT_INTERRUPTED, EXIT_OK, CLIError
from .fit_notes import fit_silenced, note_lines
from .plan import TrainPlan
from .ranks import join_ranks, launch_ranks
from .run_lock import LOCK_ENV, lock_output
from .two_stage import STAGE_TWO_GROUPS, describe, fit_full_gaussian, mean_field_warning, resolve_hypers
from .likelihood_options import class_labels, likelihood_spec, make_likelihood, option_of_parameter, standardizable
from .user_options import file_lines_in_errors, probe_callable, user_code_failure, warn_unused_latents
from .warm_start import check_groups, check_warm_start_options, read_source, start_from, warn_joint_factorized


def _check_options(plan: TrainPlan) -> Optional[str]:
    """The combinations of options, before anything is read; returns how the run learns its
    hyper-parameters (:func:`~savigp.cli.two_stage.resolve_hypers`: its refusals before ranks are
    started, its answer kept for the run)."""
    check_warm_start_options(plan)
    hypers = resolve_hypers(plan)
    check_kernel_options(plan)
    return hypers


def _check_training_options(plan: TrainPlan) -> None:
    if plan.iterations is not None and plan.epochs is not None:
        raise CLIError("give --iterations or --epochs, not both")
    if plan.until_converged:
        clash = [o for o, v in (("--epochs", plan.epochs is not None), ("--max-components", plan.max_components),
                                ("--kernel search", str(plan.kernel).strip() == SEARCH)) if v]
        if clash:
            raise CLIError(f"--until-converged: its run ends by fit's convergence rule (at most --iterations steps); "
                           f"not with {', '.join(clash)}")
    if plan.time_budget is not None:
        if not plan.time_budget > 0:
            raise CLIError(f"--time-budget must be > 0 seconds, got {plan.time_budget}")
        fixed = "--epochs" if plan.epochs is not None else "--iterations" if (
            plan.iterations is not None and not plan.until_converged) else "--max-components" if (
            plan.max_components is not None) else None
        if fixed:
            raise CLIError(f"--time-budget bounds a run to convergence (no --iterations or --epochs, or "
                           f"--until-converged): not with {'a fixed ' if fixed != '--max-components' else ''}{fixed}")
    for opt in ("iterations", "checkpoint_every", "samples", "batch_size", "num_inducing", "components"):
        v = getattr(plan, opt)
        if v is not None and v < (0 if opt == "iterations" else 1):
            raise CLIError(f"--{opt.replace('_', '-')} must be {'>= 0' if opt == 'iterations' else '>= 1'}, got {v}")
    if plan.epochs is not None and not plan.epochs > 0:
        raise CLIError(f"--epochs must be > 0, got {plan.epochs}")
    if plan.max_components is not None:
        if plan.max_components < plan.components:
            raise CLIError(f"--max-components must be >= --components ({plan.components}), got {plan.max_components}")
        clash = [o for o, v in (("--resume", plan.resume), ("--checkpoint-every", plan.checkpoint_every),
                                ("--nproc", plan.nproc)) if v]
        if clash:
            raise CLIError(f"--max-components fits several models and keeps one: not with {', '.join(clash)}")
        if not POSTERIORS[POSTERIORS.canonical(plan.posterior)].component_moves:  # (a family's capability)
            raise CLIError(f"--max-components needs a mixture posterior (full, diag, diag-u), not {plan.posterior}")
    if plan.lr is not None and not plan.lr > 0:
        raise CLIError(f"--lr must be > 0, got {plan.lr}")


def with_run_length(plan: TrainPlan) -> TrainPlan:
    """The plan with ``until_converged`` set where the run trains to convergence by default: neither
    ``--iterations`` nor ``--epochs`` given (``savigp.fit`` without ``iterations``: at most 20000 steps).
    A ``--kernel search`` run decides after its search (its model, at its optimum, takes no further
    steps unless its q(u) cannot carry over); a resumed one took those steps, to convergence."""
    if plan.until_converged or plan.iterations is not None or plan.epochs is not None:
        return plan
    if str(plan.kernel).strip() == SEARCH and not plan.resume:
        return plan
    return dataclasses.replace(plan, until_converged=True)


def _output_files(plan: TrainPlan) -> tuple:
    """``(OUT, OUT.ckpt, --plot)`` checked; orphaned temporaries of earlier runs removed."""
    inputs = [plan.data] + ([plan.warm_start] if plan.warm_start else []) + code_inputs(plan.likelihood, plan.mean_function)
    out = output_path(plan.out, inputs, plan.quiet)
    ckpt = check_output_path(out + ".ckpt", "--out (its checkpoint)", inputs=inputs)
    check_output_path(out + ".lock", "--out (its lock file)", inputs=inputs)
    plot = check_plot_option(plan.plot, inputs, [out, ckpt])
    for stale in remove_orphaned_temporaries(out) + remove_orphaned_temporaries(ckpt):
        if not plan.quiet:
            print(f"removed {stale}, a temporary file left by an interrupted write", file=sys.stderr)
    return out, ckpt, plot


def _read_data(plan: TrainPlan) -> tuple:
    """``(table, icols, tcols, X (N, D), Y (N, P))`` of ``DATA.csv`` (numpy only)."""
    table = read_csv(plan.data, header=plan.header, delimiter=plan.delimiter)
    icols, tcols = split_columns(table, plan.targets, plan.inputs)
    X, Y = table.values[:, icols], table.values[:, tcols]
    N = X.shape[0]
    if not plan.dense and plan.num_inducing is not None and plan.num_inducing > N:
        raise DataError(f"{table.path}: has {N} data row(s), fewer than --num-inducing {plan.num_inducing} "
                        "(the number of inducing points cannot exceed the number of rows)")
    if plan.batch_size is not None and plan.batch_size > N:
        raise DataError(f"{table.path}: has {N} data row(s), fewer than --batch-size {plan.batch_size}")
    return table, icols, tcols, X, Y


def _likelihood_and_targets(plan: TrainPlan, table, icols, tcols, X, Y) -> tuple:
    """``(spec, likelihood, standardize, Xm, Ym, source)``: the likelihood checked against the
    targets, the ``--warm-start`` model file checked against them (``source``, or None), and the
    data in the model's units (standardized when asked: by the source's statistics when it has
    them, so that its hyper-parameters keep their units)."""
    import torch

    from ..model_files import standardization_stats

    spec = likelihood_spec(plan, Y)
    likelihood = make_likelihood(spec)
    check_initial_values(likelihood, plan.dtype, lambda key: option_of_parameter(plan, key))
    if likelihood.output_dim != Y.shape[1]:
        raise DataError(f"{table.where(None, tcols)}: --targets selects {Y.shape[1]} column(s) but the "
                        f"{plan.likelihood} likelihood takes {likelihood.output_dim}")
    if plan.standardize_targets and spec["name"] in USER_KINDS:
        raise CLIError(f"--standardize-targets does not apply to a user likelihood ({plan.likelihood}): it "
                       "receives y in the file's units and its f means what it says in those units (standardized "
                       "targets would leave every latent function in standardized units); scale inside the "
                       "function, or set --prior-mean")
    if plan.standardize_targets and spec["name"] not in standardizable():
        raise CLIError(f"--standardize-targets applies to real-valued targets ({', '.join(standardizable())}), "
                       f"not to --likelihood {plan.likelihood}")
    source = read_source(plan, spec, table.names(icols), table.names(tcols)) if plan.warm_start else None
    recorded = (source.config.get("standardize") or {}) if source is not None else {}
    in_stats = (recorded.get("inputs") or standardization_stats(X)) if plan.standardize_inputs else None
    out_stats = (recorded.get("targets") or standardization_stats(Y)) if plan.standardize_targets else None
    if in_stats is None and source is None and plan.dtype == "float32":
        in_stats = _centred_for_float32(X, plan.quiet)
    Xm = X if in_stats is None else (X - np.asarray(in_stats["mean"])) / np.asarray(in_stats["std"])
    Ym = Y if out_stats is None else (Y - np.asarray(out_stats["mean"])) / np.asarray(out_stats["std"])
    Yt = torch.as_tensor(Ym, dtype=torch.float64)
    validate_targets(likelihood, Yt, table, tcols)
    if spec["name"] == "callable":
        with file_lines_in_errors(table):
            probe_callable(likelihood, Yt, spec)
    if spec["name"] in USER_KINDS:
        warn_unused_latents(likelihood, Yt, spec)
    return spec, likelihood, {"inputs": in_stats, "targets": out_stats}, Xm, Ym, source


def _option_of_state(plan: TrainPlan, key: str) -> str:
    """The option that set the initial model's state-dict entry ``key``, for messages."""
    head, _, rest = key.partition(".")
    if head == "likelihood":
        return option_of_parameter(plan, rest)
    if head == "kernel":
        return f"--kernel {plan.kernel!r}"
    if head == "prior_mean" and plan.prior_mean is not None:
        return f"--prior-mean {plan.prior_mean}"
    return "savigp train"


def _centred_for_float32(X: np.ndarray, quiet: bool):
    """Input statistics that centre ``X`` (std 1: a shift, which the stationary kernels do not see)
    when its offset exceeds :data:`savigp._checks.FLOAT32_MAX_OFFSET` standard deviations, which
    float32 would round away (inputs near 1e8 in steps of 8; docs/cli.md); else None. The
    shift is recorded with the model and applied to test inputs in float64 before they are rounded."""
    import torch

    from .._checks import FLOAT32_MAX_OFFSET, input_offset

    offset = input_offset(torch.as_tensor(X, dtype=torch.float64))
    if offset <= FLOAT32_MAX_OFFSET:
        return None
    if not quiet:
        print(f"savigp train: note: the inputs sit {offset:.3g} standard deviations from zero, more than float32 "
              "resolves: they are centred (recorded in the model, undone at prediction; --standardize-inputs also "
              "scales them)", file=sys.stderr)
    return {"mean": [float(v) for v in X.mean(axis=0)], "std": [1.0] * X.shape[1]}


def _model_options(plan: TrainPlan, prior_mean, kernel: dict, searched, warm) -> dict:
    """The options of :func:`savigp.model_files.build_model`, built once, final: the command's,
    ``prior_mean`` (``--prior-mean`` read and checked), ``kernel`` (:func:`kernel_options`: the
    kernel's spec, the Fourier features' M) and the inducing inputs of the ``--kernel search``'s
    model (``searched``, its q(u) carries over) or of the ``--warm-start`` source (``warm``: M is the
    source's, no k-means) where M is not given."""
    options = {
        "kernel": plan.kernel, "shared_kernel": plan.shared_kernel, "num_inducing": plan.num_inducing, "inducing_init": plan.inducing_init,
        "dense": plan.dense, "learn_inducing": not plan.fixed_inducing, "posterior": plan.posterior,
        "num_components": plan.components, "entropy": plan.entropy, "prior_mean": prior_mean,
        "learn_prior_mean": plan.learn_prior_mean, "mean_basis_size": plan.mean_basis_size or 0,
        "mean_basis": plan.mean_basis, "dtype": plan.dtype, "device": plan.device, "seed": plan.seed,
        **{k: v for k, v in kernel.items() if k != SEARCHED},
    }
    if warm is not None and plan.num_inducing is None and not plan.dense:
        options["inducing_inputs"] = warm.model.inducing.detach()
    elif searched is not None and not plan.dense and plan.num_inducing in (None, searched.model.inducing.shape[-2]):
        options["inducing_inputs"] = searched.model.inducing.detach()
    return options


def _config(plan: TrainPlan, table, icols, tcols, X, Y, spec, likelihood, standardize, Ym, model_options) -> dict:
    """The model file's configuration (see :mod:`savigp.model_files`) at step 0: the batch size and
    the run's length are those of the run's :class:`~savigp.training.plan.FitPlan`
    (:meth:`TrainPlan.fit_plan`; for a run to convergence, its cap)."""
    N = X.shape[0]
    optimizer = plan.optimizer
    fitting = plan.fit_plan()
    B, total = fitting.batch_for(N), fitting.steps_for(N)
    return {
        "model_options": {k: model_options[k] for k in ("kernel", "inducing_init", "seed", "dtype", "prior_mean")},
        "likelihood": spec,
        "standardize": standardize,
        "example_target": [float(v) for v in Ym[0]],
        "class_labels": class_labels(spec, likelihood, Y),
        "columns": {"header": table.header is not None, "num_columns": table.num_columns,
                    "inputs": table.names(icols), "targets": table.names(tcols),
                    "input_indices": list(icols), "target_indices": list(tcols)},
        "training": {"data": os.path.abspath(plan.data), "data_rows": N, "data_checksum": data_checksum(X, Y),
                     "options": plan.resume_options(), "iterations": total, "optimizer": optimizer,
                     "lr": plan.learning_rate,
                     "batch_size": B, "num_samples": plan.samples, "estimator": plan.estimator, "seed": plan.seed,
                     "time_budget": plan.time_budget,
                     "warm_start": os.path.abspath(plan.warm_start) if plan.warm_start else None},
        "step": 0, "complete": False, "elbo": None,
    }


def _check_cost(plan: TrainPlan, shape: tuple, P: int, Q: int, options: dict, config: dict, quiet: bool) -> None:
    """The memory the run needs (:func:`savigp.cost.model_cost`), checked against ``--max-memory``
    before the model is built (a CostError names the estimate and the option); a note of the work
    per step when it is large."""
    from ..cost import check_memory, memory_limit, model_cost

    N, D = shape
    if options.get("dense"):
        M = N
    elif options.get("inducing_inputs") is not None:
        M = int(options["inducing_inputs"].shape[-2])
    else:
        M = int(options.get("num_inducing") or min(N, 100))
    K, posterior = int(options.get("num_components") or 1), options.get("posterior") or "full"
    B, S = int(config["training"]["batch_size"]), int(plan.samples)
    cost = model_cost(D=D, Q=Q, M=M, K=K, posterior=posterior, P=P, N=N, item=4 if plan.dtype == "float32" else 8,
                      batch=B, samples=S, training=True)
    check_memory(cost, memory_limit(max_memory_bytes(plan.max_memory)),
                 f"training (N={N}, D={D}, Q={Q}, M={M}, K={K}, posterior {posterior!r}, batch {B}, {S} samples)",
                 "--max-memory GIB")
    if cost.step_flops > 1e11 and not quiet:
        print(f"savigp train: note: each step costs about {cost.step_flops / 1e9:.0f} GFLOP (factorizing {Q} "
              f"K_zz of {M} x {M}, {B} rows per batch); --num-inducing or --batch-size sets it", file=sys.stderr)


def cmd_train(args) -> int:
    """``savigp train``: read, validate, build, fit (with checkpoints), write the model atomically.
    Under ``torchrun`` every rank trains its share of each mini-batch and rank 0 alone prints and
    writes checkpoints and the model. ``args``: the parsed command line, read once into a
    :class:`~savigp.cli.plan.TrainPlan` that the rest takes."""
    plan = TrainPlan.from_args(args)
    hypers = _check_options(plan)
    from ..training.distributed import launched

    _check_training_options(plan)
    plan = with_run_length(plan)
    out, ckpt, plot = _output_files(plan)
    lock = lock_output(out, plan.argv)  # one run per --out (None: a rank whose launcher holds it)
    try:
        if plan.nproc is not None and plan.nproc > 1 and not launched():
            return launch_ranks(plan, out, {LOCK_ENV: out + ".lock"} if lock is not None else {})
        return _train(plan, hypers, out, ckpt, plot)
    finally:
        if lock is not None:
            lock.release()


def _train(plan: TrainPlan, hypers: Optional[str], out: str, ckpt: str, plot) -> int:
    """``cmd_train`` in one process (or one rank), its output paths checked and locked; ``hypers``:
    how it learns its hyper-parameters (:func:`_check_options`)."""
    from ..training.distributed import finish

    table, icols, tcols, X, Y = _read_data(plan)

    from ..model_files import SavedModel, build_model

    check_device(plan.device)
    rank, plan = join_ranks(plan)
    quiet = plan.quiet or rank != 0
    spec, likelihood, standardize, Xm, Ym, warm = _likelihood_and_targets(  # (its notes on rank 0 alone)
        dataclasses.replace(plan, quiet=quiet), table, icols, tcols, X, Y)
    prior_mean = parse_floats(plan.prior_mean, "--prior-mean")
    if prior_mean is not None:  # (before a two-stage first stage trains from it)
        import torch

        check_initial_values({"prior_mean": torch.as_tensor(prior_mean, dtype=torch.float64)},
                             plan.dtype, lambda key: _option_of_state(plan, key))
    # --kernel read against the input columns, in the model's units; --fourier-features
    kernel = kernel_options(plan, table, icols, standardize["inputs"], int(likelihood.num_latent),
                            data=(Xm, Ym, likelihood), quiet=quiet)
    searched = kernel.get(SEARCHED)
    model_options = _model_options(plan, prior_mean, kernel, searched, warm)
    config = _config(plan, table, icols, tcols, X, Y, spec, likelihood, standardize, Ym, model_options)
    if searched is not None:
        config["training"]["kernel_search"] = searched_model.record(searched)
    total = config["training"]["iterations"]
    config["training"]["hypers"] = hypers
    groups = STAGE_TWO_GROUPS if hypers == "two-stage" else plan.learn  # what this run's fit learns
    _check_cost(plan, X.shape, Y.shape[1], int(likelihood.num_latent), model_options, config, quiet)
    if hypers == "two-stage":  # stage 1's full Gaussian too
        _check_cost(plan, X.shape, Y.shape[1], int(likelihood.num_latent),
                    dict(model_options, posterior="full", num_components=1), config, True)

    state: dict = {}
    if plan.resume:
        source, model, state = resume(plan, config, out, ckpt, Xm, Ym, user_code=spec["name"] in USER_KINDS)
        step = config["step"]
        if plan.until_converged and source == out and (config["training"].get("convergence") or {}).get("converged"):
            if not quiet:
                print(f"{out} converged at step {step} (the ELBO had stopped rising); nothing to do")
            return EXIT_OK
        if step >= total:
            if source == out and step == total:
                if not quiet:
                    print(f"{out} already has {step} of {total} steps; nothing to do")
                return EXIT_OK
            if step > total:
                raise CLIError(f"--resume: {source} is at step {step}, beyond the requested {total} iterations")
        if not quiet:
            print(f"resuming from {source} at step {step} of {'at most ' if plan.until_converged else ''}{total}",
                  file=sys.stderr)
    else:
        if hypers == "two-stage":
            if not quiet:
                print(describe(hypers, plan), file=sys.stderr)
            warm_model, config["training"]["stage1"] = fit_full_gaussian(plan, Xm, Ym, spec, model_options, config,
                                                                         quiet, rank)
        model = build_model(Xm, Ym, likelihood, model_options)  # SAVIGP calls likelihood.initialize_from_data
        if model.prior_mean_from_targets is not None and not quiet:
            print(f"savigp train: note: without --prior-mean the prior mean starts at the targets' best constant "
                  f"latent value, {', '.join(f'{v:.4g}' for v in model.prior_mean_from_targets)} (more than 2 prior "
                  "standard deviations from 0; --prior-mean 0 keeps 0)", file=sys.stderr)
        if hypers == "two-stage":
            start_from(plan, model, types.SimpleNamespace(model=warm_model))
        if searched is not None:
            missing = searched_model.adopt(model, searched, seed=plan.seed)
            if missing and plan.iterations is None and plan.epochs is None:  # q(u) is fresh: to convergence
                plan = dataclasses.replace(plan, until_converged=True)
                config["training"]["options"] = plan.resume_options()
                total = config["training"]["iterations"] = plan.fit_plan().steps_for(X.shape[0])  # (the cap)
                missing += "; it trains until the ELBO stops rising (--iterations N: N steps)"
            if missing and not quiet:
                print(f"savigp train: note: {missing}", file=sys.stderr)
        if warm is not None:
            start_from(plan, model, warm)
            if not quiet:
                print(f"warm start from {plan.warm_start}: its kernel, likelihood, inducing inputs and prior mean; "
                      f"q(u) from its moments", file=sys.stderr)
        check_initial_values(model, plan.dtype, lambda key: _option_of_state(plan, key))
    check_groups(plan, model)
    warn_joint_factorized(plan, model, rank, groups)
    narrow = mean_field_warning(plan, model, groups)
    if narrow and rank == 0:
        print(narrow, file=sys.stderr)
    if groups is not None and not quiet:
        print(f"learning only: {', '.join(groups)}", file=sys.stderr)
    ckp = Checkpointer(SavedModel(model, config), config, ckpt, total, plan.checkpoint_every, rank, state,
                       keep_generator=spec["name"] == "callable")
    t0 = time.perf_counter()
    begun = int(state.get("step", 0))
    best = None
    if searched is not None:  # the search's model, to put back if the further steps lose it
        best = searched_model.KeepBest(model, num_samples=plan.samples, estimator=model.resolved_estimator(plan.estimator),
                                       seed=plan.seed, what="the search's model")
        if not quiet:
            print(f"savigp train: starting from the search's model: {searched.expression}, ELBO {best.elbo:.6g} on all "
                  f"{X.shape[0]} rows", file=sys.stderr)
    elif warm is not None and not plan.resume:  # the warm start's model, likewise
        best = searched_model.KeepBest(model, num_samples=plan.samples, estimator=model.resolved_estimator(plan.estimator),
                                       seed=plan.seed, what=f"the warm start from {plan.warm_start}")
    history = _fit(plan, model, ckp, table, spec, quiet, groups)
    done = int(state.get("step", 0))
    if plan.until_converged and not history.stopped:  # (the rule ended it: the run's length is its steps)
        total = ckp.total = done
        config["training"]["iterations"] = done
        config["training"]["convergence"] = history.convergence.as_dict() if history.convergence else None
    if done < total:  # interrupted here or on another rank (interrupted after the last step: just finish)
        with ckp.signals():  # (a signal now: the run is stopping already)
            ckp.checkpoint(done)  # unless Ctrl-C came before the last callback, which wrote it
        if rank == 0:
            print(f"savigp train: interrupted at step {done} of {'at most ' if plan.until_converged else ''}{total}; "
                  f"checkpoint written to {ckpt}; "
                  f"run the same command with --resume{' (without --warm-start)' if plan.warm_start else ''} to "
                  "continue", file=sys.stderr)
        return EXIT_INTERRUPTED
    elbo = history.final_elbo if history.final_elbo is not None else config.get("elbo")
    se = history.final_elbo_stderr
    if best is not None:
        elbo, se = best.settle(model, elbo, se, done - begun)
        history.final_elbo_stderr = se
    elbo_text = "n/a" if elbo is None else (f"{elbo:.6g} +- {se:.2g} (on all {X.shape[0]} rows; +- its Monte Carlo "
                                            "standard error)" if se else f"{elbo:.6g} (on all {X.shape[0]} rows)")
    config["training"]["estimator_used"] = history.estimator
    config["training"]["elbo_stderr"] = history.final_elbo_stderr
    # the ELBO per step of this run's path (its first step's number beside it) and fit's verdict, for
    # savigp report's training trace (savigp.reports.trace)
    config["training"]["elbo_trace"] = [float(v) for v in history.elbo]
    config["training"]["elbo_trace_first_step"] = done - len(history.elbo)
    config["training"]["still_rising"] = history.still_rising
    # once the model is complete, a Ctrl-C, a SIGTERM or a rank that stops does not undo that (exit 0,
    # said in one line; the --plot may be missing); before, they stop the run as ever
    with _after_the_model(rank == 0, out, done, plot, ckp) as after:
        ckp.finish(out, done, elbo)
        finish()
        if rank == 0:
            # the one-line summary is printed even with --quiet (which silences progress only)
            threads = f", {history.threads} thread{'s' if history.threads != 1 else ''}" if history.threads else ""
            chosen = f"kernel {searched.expression} chosen by the search, " if searched is not None else ""
            ending = _ending(history.convergence, X.shape[0]) if plan.until_converged else ""
            print(f"trained {done} step(s) ({done - begun} in this run, {time.perf_counter() - t0:.1f} s{threads}, "
                  f"{chosen}estimator {history.estimator}), {ending}final ELBO {elbo_text}; wrote {out}")
            if history.convergence is not None and history.convergence.converged and not quiet:
                print(f"savigp train: converged: {history.convergence.reason}", file=sys.stderr)
            for line in note_lines(history.notes, quiet):  # (fit's notes, each once: its warnings were silenced)
                print(line, file=sys.stderr)
            if plot:
                from ..io.plotting import save_elbo_plot

                save_elbo_plot(history.elbo, plot, start=done - history.steps,
                               title=f"{os.path.basename(out)}: ELBO per step ({history.estimator} estimator)")
                after.plot_written = True
                print(f"wrote {plot}", file=sys.stderr)
    if after.stopped is not None and rank != 0:
        raise after.stopped  # rank 0 wrote the model, or says why not; the launcher reads the file
    return EXIT_OK


@contextlib.contextmanager
def _after_the_model(writer: bool, out: str, step: int, plot, ckp: Checkpointer):
    """Within: ``ckp`` writes the finished model to ``out`` and the run ends; an interrupt (SIGINT,
    SIGTERM) or a failed process group once the model is completely written
    (``ckp.finished``) stops what is left (``after.stopped``) and rank 0 says that the model is
    complete; before that, it propagates (a SIGTERM as KeyboardInterrupt)."""
    import signal

    from ..training.distributed import DistributedError

    after = types.SimpleNamespace(stopped=None, plot_written=False)

    def stop(signum, frame):
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread
        previous = None
    try:
        yield after
    except (KeyboardInterrupt, DistributedError) as err:
        if writer and not ckp.finished:
            raise
        after.stopped = err
        if writer:
            what = "interrupted" if isinstance(err, KeyboardInterrupt) else "another rank stopped"
            missing = f"; --plot {plot} was not written" if plot and not after.plot_written else ""
            print(f"savigp train: {what} after {out} was completely written ({step} step(s)): the model is "
                  f"complete{missing}", file=sys.stderr)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _fit(plan: TrainPlan, model, ckp: Checkpointer, table, spec: dict, quiet: bool, groups):
    """:func:`savigp.training.fit` of the run's plan (:meth:`TrainPlan.fit_plan`) on the parameter
    ``groups`` (None: all) for the remaining steps, under ``ckp``'s signal handlers, with fit's
    warnings silenced (:func:`~savigp.cli.fit_notes.fit_silenced`: the summary prints its notes)."""
    from ..training import fit

    remaining = ckp.total - int(ckp.state.get("step", 0))
    with ckp.signals() as handled:
        estimator = model.resolved_estimator(plan.estimator)  # an impossible choice: one line, exit 2
        if not quiet:
            print(f"estimator: {estimator} ({ESTIMATORS[estimator].summary})", file=sys.stderr)
        if ESTIMATORS[plan.estimator].chooses and ESTIMATORS[estimator].score_function and not quiet:
            hint = getattr(model.likelihood, "suggest_differentiable", None)  # (once: fit then says nothing)
            if hint is not None and hint(model.train_y):
                print(f"savigp train: note: --likelihood {spec.get('import_path') or spec['name']} is differentiable "
                      "in f with torch (autograd gave finite gradients): --lik-option differentiable=True selects "
                      "the reparameterization estimator, usually much less noisy than the score function",
                      file=sys.stderr)
        run = plan.fit_plan(groups=groups, progress=not quiet)  # (fit calls back at every checkpoint step)
        try:
            with file_lines_in_errors(table), fit_silenced():
                if plan.max_components is not None:  # the search (no checkpoints: refused with it), then done
                    # (without --iterations/--epochs each candidate K is fitted to convergence)
                    from ..selection.components import format_table
                    from ..selection.front import fit as fit_choosing_k

                    history = fit_choosing_k(model, run.replace(iterations=None if plan.until_converged else remaining,
                                                                epochs=None, progress=False),
                                             max_components=plan.max_components)
                    if plan.until_converged and history.convergence is not None:
                        ckp.total = int(history.convergence.steps)
                    ckp.state["step"] = ckp.total
                    K = model.posterior.num_components
                    print(f"savigp train: K = {K} of {plan.components}..{plan.max_components} by the full-data ELBO "
                          f"(K + 1 needs a gain > 2 s.e. and > 0.1 nats):\n{format_table(history.components, K)}")
                    return history
                run = run.replace(callback=ckp.callback, state=ckp.state)
                if plan.until_converged:  # (a resumed run goes on in its rounds: the rule's path is in the state)
                    return fit(model, run.replace(iterations=None, epochs=None, max_iterations=ckp.total))
                return fit(model, run.replace(iterations=remaining, epochs=None))
        except (SystemExit, KeyboardInterrupt) as err:
            if isinstance(err, KeyboardInterrupt) and (ckp.interrupted or not handled):
                raise  # Ctrl-C pressed twice: stop at once
            # raised by user code (our handler turns a first Ctrl-C into a flag): a failure of that code
            raise ckp.user_code_exit(err, spec.get("import_path") or spec["name"]) from None
        except Exception as err:  # raised in user code during training: a failure while running (exit 1)
            from ..estimators.nonfinite import NonFiniteLogProb

            failure = None if isinstance(err, (NonFiniteLogProb, CLIError)) else user_code_failure(err)
            if failure is None:
                raise
            raise ckp.user_code_exit(failure[0], spec.get("import_path") or spec["name"], failure[1]) from None


def _ending(convergence, num_data: int) -> str:
    """The summary line's words on how a run to convergence ended (``convergence``: the history's
    :class:`~savigp.training.until_converged.Convergence`, or None), each followed by ", "."""
    if convergence is None:
        return ""
    moved = "".join(f"moved {m['part']}'s length-scale to {m['lengthscale']:.4g} at step {m['step']} (+{m['gain']:.4g} "
                    "nats), "
                    for m in convergence.moves)
    backed = (f"went on from its best round at half the learning rate after {convergence.backoffs} fall"
              f"{'s' if convergence.backoffs > 1 else ''}, ") if convergence.backoffs else ""
    return moved + backed + _verdict(convergence, num_data)


def _verdict(convergence, num_data: int) -> str:
    """How a run to convergence ended, in words (:func:`_ending`)."""
    from ..training.convergence import RISE_PER_POINT

    if convergence.converged and convergence.polish_only:
        return (f"converged after {convergence.steps} steps and L-BFGS to its optimum (Adam's rounds lost what the "
                "polish found; its last call gained within its noise), ")
    if convergence.converged:
        how = (f"below {RISE_PER_POINT:g} nats per row" if convergence.rise <= RISE_PER_POINT * num_data else
               f"within its Monte Carlo noise ({convergence.z:.1f} s.e.)")
        return (f"converged after {convergence.steps} steps (the ELBO's trend over the last {convergence.window} "
                f"steps {how}; the full-data ELBO's gain over the last round within its noise), ")
    if convergence.ended == "fall":
        return "not converged: the ELBO fell below its best round, whose model is kept, "
    cap = convergence.reason.split(" ended the run")[0] if " ended the run" in convergence.reason else "its end"
    if " ended the run after " in convergence.reason:
        return f"not converged: {cap} stopped it after a fall below its best round, whose model is kept, "
    return f"not converged: {cap} stopped it with the ELBO still rising, "
