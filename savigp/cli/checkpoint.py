"""``savigp train``'s checkpoints: ``--resume`` checks, ``OUT.ckpt`` written every
``--checkpoint-every`` steps and after a Ctrl-C or a SIGTERM (a cluster scheduler's, torchrun's),
whole even when a second signal arrives while it is written, and the last good state
kept for a user function that stops the run itself.

A checkpoint is a model file (:meth:`savigp.model_files.SavedModel.save`, written atomically)
whose ``training_state`` holds the optimizer, the mini-batch generator, the permutation and the
position in it, and :func:`savigp.fit`'s schedule (which phase: a mixture's exploring starts, the
reflection move, fit's own phase, the annealing; :mod:`savigp.training.schedule`), so that a
resumed run takes the same steps as an uninterrupted one.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from contextlib import contextmanager
from functools import lru_cache
from typing import Optional

from .._checks import short_repr
from ..settings import TEST_SIGINT_ENV, test_sigint_after  # noqa: F401 (savigp.cli exports TEST_SIGINT_ENV)
from .errors import CLIError, UserCodeExit
from .plan import RESUME_KEYS, TrainPlan



@lru_cache(maxsize=1)
def _train_parser():
    """``train``'s sub-parser (built once: :func:`resume` may ask it for several defaults)."""
    import argparse

    from .parser import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["train"]


def _train_default(key: str):
    """The parser's default of ``train``'s option ``key`` (as :meth:`TrainPlan.resume_options` records it)."""
    value = _train_parser().get_default(key)
    return list(value) if isinstance(value, tuple) else value


def _code_paths(spec: dict) -> dict:
    """What a likelihood spec runs: its name, import path and those of its ``code_kwargs``."""
    return {"name": spec.get("name"), "import_path": spec.get("import_path"),
            "code": {k: (v or {}).get("import_path") for k, v in (spec.get("code_kwargs") or {}).items()}}


def _describe_code(spec: dict) -> str:
    text = spec.get("import_path") or spec.get("name")
    mean = ((spec.get("code_kwargs") or {}).get("mean_fn") or {}).get("import_path")
    return f"{text} (--mean-function {mean})" if mean else str(text)


def resume(plan: TrainPlan, config: dict, out: str, ckpt: str, Xm, Ym, user_code: bool):
    """``--resume``: the model and training state of ``OUT.ckpt`` (else ``OUT``), after checking
    that the likelihood code, the data and every option of :data:`RESUME_KEYS` are those it was
    trained with; ``config["step"]`` and ``config["elbo"]`` are set from the file.

    Returns:
        ``(source, model, state)``; ``state`` is what :func:`savigp.training.fit` restores.
    """
    from ..model_files import load_model

    source = ckpt if os.path.exists(ckpt) else out if os.path.exists(out) else None
    if source is None:
        raise CLIError(f"--resume: there is no checkpoint {ckpt} nor model {out} to resume from")
    # the user's own --likelihood and --mean-function are the consent to run them (never the
    # file's record of them); a file changed since the checkpoint is refused without --trust-code
    code = {"mean_fn": plan.mean_function} if user_code and plan.mean_function else None
    from .checks import max_memory_bytes

    saved, tstate = load_model(source, device=plan.device, X=Xm, Y=Ym, trust_code=plan.trust_code,
                               likelihood=plan.likelihood if user_code else None, code=code,
                               max_bytes=max_memory_bytes(plan.max_memory))
    old, spec = saved.config, config["likelihood"]
    if _code_paths(old["likelihood"]) != _code_paths(spec):
        raise CLIError(f"--resume: {source} was trained with likelihood {_describe_code(old['likelihood'])}, not "
                       f"--likelihood {_describe_code(spec)}")
    ot = old.get("training", {})
    if ot.get("data_checksum") != config["training"]["data_checksum"]:
        raise CLIError(f"--resume: {plan.data} is not the data {source} was trained on "
                       f"({ot.get('data_rows')} rows from {ot.get('data')}; the contents differ)")
    recorded = ot.get("options", {})
    for key in RESUME_KEYS:
        # an option a checkpoint from an older savigp lacks had its default then
        a = recorded[key] if key in recorded else _train_default(key)
        b = config["training"]["options"].get(key)
        if a != b and key == "until_converged":  # (set without the flag where no length is given)
            raise CLIError(f"--resume: {source} was trained " + (
                "to convergence (no --iterations or --epochs, or --until-converged): resume without --iterations "
                "and --epochs, or with --until-converged (--iterations N: its cap)" if a else
                "for a fixed number of steps (--iterations or --epochs): resume with --iterations N or --epochs E"))
        if a != b:
            raise CLIError(f"--resume: --{key.replace('_', '-')} is {b!r} here but {source} was trained with "
                           f"{a!r}; resume with the same options")
    hypers = config["training"].get("hypers")  # how the factorized posterior's hyper-parameters were learned
    old_hypers = ot.get("hypers", None if hypers is None else "joint")  # (before --hypers: jointly)
    if old_hypers != hypers:
        raise CLIError(f"--resume: {source} was fitted with --hypers {old_hypers}, this run would fit with --hypers "
                       f"{hypers}; resume with --hypers {old_hypers}")
    if "stage1" in ot:  # a two-stage fit resumes its stage 2; stage 1's record is kept
        config["training"]["stage1"] = ot["stage1"]
    if ot.get("convergence") is not None:  # (a finished run to convergence: how it ended)
        config["training"]["convergence"] = ot["convergence"]
    if tstate is None:
        raise CLIError(f"--resume: {source} holds no optimizer state to resume from")
    step = int(old.get("step", 0))
    _check_training_state(tstate, len(Xm), step, source)
    config["step"], config["elbo"] = step, old.get("elbo")
    state = {"optimizer_state": tstate["optimizer"], "generator_state": tstate["generator"],
             "draw_generator_state": tstate.get("draw_generator"), "perm": tstate["perm"], "pos": int(tstate["pos"]),
             "step": step, "schedule": tstate.get("schedule")}  # (no schedule: written before fit kept one)
    return source, saved.model, state


def _check_training_state(tstate: dict, N: int, step: int, source: str) -> None:
    """What ``--resume`` takes from a checkpoint's ``training_state`` beyond what every model file's
    reader checks (:mod:`savigp.model_files.file_format`: the types of ``perm``, ``pos`` and the
    generator): the optimizer's state dict's layout (``state``, and ``param_groups`` each with its
    parameters' numbers and a learning rate); the mini-batch order ``perm (N,)``, a permutation of
    the N data rows; and fit's schedule (:mod:`savigp.training.schedule`), whose phases must place
    the file's ``step``: at least one phase, each of a known kind with whole, non-negative steps and integer seeds,
    ``finished`` (the phases that have ended) and ``segment`` between 0 and their number, and
    ``step`` inside the phase after the finished ones (at their end when all have).

    Raises:
        CLIError: one line naming the checkpoint and the field.
    """
    import torch

    def bad(field: str, what: str) -> CLIError:
        return CLIError(f"--resume: {source}: training_state.{field} {what}; the checkpoint was changed or damaged "
                        "(train without --resume, or from another checkpoint)")

    def count(value, lo: int, hi: Optional[int] = None) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= lo and (hi is None or value <= hi)

    opt = tstate["optimizer"]
    groups = opt.get("param_groups")
    if not isinstance(opt.get("state"), dict) or not isinstance(groups, list) or not groups:
        raise bad("optimizer", "must hold 'state' (a dict) and 'param_groups' (a non-empty list)")
    for i, group in enumerate(groups):
        params = group.get("params") if isinstance(group, dict) else None
        lr = group.get("lr") if isinstance(group, dict) else None
        if not (isinstance(params, list) and params and all(count(p, 0) for p in params)
                and isinstance(lr, (int, float)) and not isinstance(lr, bool)):
            raise bad(f"optimizer.param_groups[{i}]", "must hold 'params' (a non-empty list of parameter numbers) "
                      "and 'lr' (a number)")
    perm = tstate["perm"]
    if perm.numel() != N:
        raise bad("perm", f"orders {perm.numel()} rows, the data has {N}")
    if not torch.equal(torch.sort(perm).values, torch.arange(N, dtype=perm.dtype)):
        raise bad("perm", f"is not a permutation of the row numbers 0 to {N - 1}")
    schedule = tstate.get("schedule")
    if schedule is None:  # (written before fit kept one: one phase, resumed where it stood)
        return
    from ..training.schedule import KINDS

    if not isinstance(schedule, dict) or not isinstance(schedule.get("phases"), list) or not schedule["phases"]:
        raise bad("schedule", "must hold a non-empty list of phases")
    phases = schedule["phases"]
    for i, ph in enumerate(phases):
        if not (isinstance(ph, dict) and ph.get("kind") in KINDS and count(ph.get("index"), 0) and count(ph.get("steps"), 0)
                and count(ph.get("seed"), -2 ** 63) and count(ph.get("fit_seed"), -2 ** 63)):
            raise bad(f"schedule.phases[{i}]", f"must be {{'kind': one of {', '.join(KINDS)}, 'index', 'steps', 'seed', "
                      f"'fit_seed': integers (index and steps >= 0)}}")
    for key in ("finished", "segment"):
        if not count(schedule.get(key, 0), 0, len(phases)):
            raise bad(f"schedule.{key}", f"must be an integer between 0 and {len(phases)} (the number of phases), got "
                      f"{short_repr(schedule.get(key))}")
    if not count(schedule.get("starts", 1), 1) or not isinstance(schedule.get("anneal", False), bool) \
            or not isinstance(schedule.get("explore", {}), dict):
        raise bad("schedule", "must hold starts (an integer >= 1), anneal (true or false) and explore (a dict)")
    if not any(ph["kind"] == "main" for ph in phases[int(schedule.get("segment", 0)):]):
        raise bad("schedule.phases", "hold no 'main' phase after the segment the run is in")
    finished = int(schedule["finished"])
    begin = sum(int(ph["steps"]) for ph in phases[:finished])
    end = begin + (int(phases[finished]["steps"]) if finished < len(phases) else 0)
    if not begin <= step <= end:
        where = f"phase {finished} (steps {begin} to {end})" if finished < len(phases) else f"the end of its {begin} steps"
        raise bad("schedule.finished", f"is {finished}: the run would stand at {where}, but the checkpoint is at step {step}")


class Checkpointer:
    """Writes ``train``'s checkpoints and its finished model, and turns a first Ctrl-C into "stop
    after this step".

    Args:
        saved: the :class:`~savigp.model_files.SavedModel` being trained (its ``config`` is
            replaced by ``config`` with the step, completeness and ELBO of each write).
        config: the run's configuration (``config["step"]``/``["elbo"]`` where training starts).
        path: ``OUT.ckpt``.
        total: the run's last step; every: ``--checkpoint-every`` (0/None: none periodic).
        rank: this process's rank (only rank 0 writes and prints).
        state: the dict :func:`savigp.training.fit` restores from and updates after each step.
        keep_generator: keep the generator's state after each step (for user code that may stop
            the next step half-way: the checkpoint then matches the last finished step).
    """

    def __init__(self, saved, config: dict, path: str, total: int, every: Optional[int], rank: int, state: dict,
                 keep_generator: bool = False):
        self.saved, self.config, self.path = saved, config, path
        self.total, self.every, self.rank, self.state = total, every, rank, state
        self.keep_generator = keep_generator
        self.interrupted = False
        self.elbo = config.get("elbo")  # the ELBO at the last step called back
        self.written: Optional[int] = None  # the step of the last checkpoint written by this run
        self.finished = False  # the finished model was completely written (finish)
        self._generator = None  # (step, generator state) after the last step called back
        self._hook_step = test_sigint_after()

    # ------------------------------------------------------------ writing
    def _training_state(self) -> Optional[dict]:
        """The file's ``training_state``: the optimizer, the generators, the batch order and fit's
        schedule (:mod:`savigp.training.schedule`: its phases, where the run is in them, what the
        exploration of a mixture's starts has kept), so that ``--resume`` goes on exactly."""
        state = self.state
        if "optimizer" in state:  # fit has run a step: its live objects
            gen = None
            if self._generator is not None and self._generator[0] == state.get("step"):
                gen = self._generator[1]
            out = {"optimizer": state["optimizer"].state_dict(),
                   "generator": gen if gen is not None else state["generator"].get_state(),
                   "perm": state["perm"], "pos": int(state["pos"])}
            if state.get("draw_generator") is not None:  # (off the CPU: the draws' own generator)
                out["draw_generator"] = state["draw_generator"].get_state()
        elif state.get("optimizer_state") is not None:  # resumed, no step taken yet: what was read
            out = {"optimizer": state["optimizer_state"], "generator": state["generator_state"],
                   "perm": state["perm"], "pos": state["pos"]}
            if state.get("draw_generator_state") is not None:
                out["draw_generator"] = state["draw_generator_state"]
        else:
            return None
        if state.get("schedule") is not None:
            out["schedule"] = state["schedule"]
        return out

    def write(self, path: str, step: int, complete: bool, elbo: Optional[float]) -> None:
        """Write the model and its training state at ``step`` to ``path`` (rank 0 only), whole: a
        Ctrl-C or SIGTERM that arrives while it is written is held until the file is complete
        (:meth:`_held_signals`)."""
        if self.rank != 0:
            return
        self.saved.config = dict(self.config, step=int(step), complete=bool(complete), elbo=elbo)
        with self._held_signals():
            self.saved.save(path, self._training_state())
            self.finished = self.finished or bool(complete)

    @contextmanager
    def _held_signals(self):
        """Within: SIGINT and SIGTERM are noted, not acted on, so that the file being written is
        finished (an interrupted atomic write would keep the last good file, but lose this one).
        After: a signal held is acted on as its handler would have: while training (the handler is
        :meth:`_on_signal`), the first stops the run after this step and a later one, which would
        have stopped the run at once, has nothing left to cut; elsewhere it is raised again."""
        held: list = []

        def hold(signum, frame):
            if not held and self.rank == 0:
                print("\nsavigp: interrupted while writing a file; stopping once it is written", file=sys.stderr)
            held.append(signum)

        try:
            previous = {s: signal.signal(s, hold) for s in (signal.SIGINT, signal.SIGTERM)}
        except ValueError:  # not the main thread (no signal reaches it)
            previous = {}
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        if not held:
            return
        handler = previous.get(held[0])
        if getattr(handler, "__func__", None) is Checkpointer._on_signal:
            if not handler.__self__.interrupted:
                handler(held[0], None)
            return
        signal.raise_signal(held[0])

    def checkpoint(self, step: int) -> None:
        """``OUT.ckpt`` at ``step``, unless this run already wrote it there."""
        if self.written != step:
            self.write(self.path, step, False, self.elbo)
            self.written = step

    # ------------------------------------------------------------ during fit
    def callback(self, step: int, terms) -> bool:
        """:func:`savigp.training.fit`'s callback: a checkpoint when due; True stops the fit."""
        done = step + 1
        if self._hook_step is not None and done == self._hook_step:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)  # let the handler run
        self.elbo = float(terms.elbo.detach())
        if self.keep_generator:  # the draws' state after this step, should user code stop the next one
            self._generator = (done, self.state["generator"].get_state())
        every = self.every
        if (self.interrupted and done < self.total) or (every and done % every == 0 and done < self.total):
            self.checkpoint(done)
        return self.interrupted

    def _on_signal(self, signum, frame) -> None:
        if self.interrupted:
            raise KeyboardInterrupt
        self.interrupted = True
        if self.rank == 0:
            what = "SIGTERM received" if signum == signal.SIGTERM else "interrupted"
            print(f"\nsavigp: {what}; saving a checkpoint after this step (Ctrl-C again to stop at once)",
                  file=sys.stderr)

    @contextmanager
    def signals(self):
        """Within: a first Ctrl-C or SIGTERM (what cluster schedulers and torchrun send before they
        kill) stops training after the current step, which writes a checkpoint; a second stops at
        once (keeping the last checkpoint). Yields whether the handler could be installed (not
        outside the main thread, where no signal reaches us anyway)."""
        try:
            previous = signal.signal(signal.SIGINT, self._on_signal)
            previous_term = signal.signal(signal.SIGTERM, self._on_signal)
        except ValueError:
            previous = previous_term = None
        try:
            yield previous is not None
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
            if previous_term is not None:
                signal.signal(signal.SIGTERM, previous_term)

    # ------------------------------------------------------------ endings
    def user_code_exit(self, err: BaseException, name: str, where: Optional[str] = None) -> UserCodeExit:
        """The error for user code that failed during training -- raised ``err``, called
        ``sys.exit`` or raised ``KeyboardInterrupt`` -- naming the step (``where``: the user code's
        file and line): a checkpoint at the last finished step is written first (and named)."""
        from .errors import one_line

        done = int(self.state.get("step", 0))
        kept = ""
        if "optimizer" in self.state:
            self.checkpoint(done)
        if self.written is not None or os.path.exists(self.path):
            kept = f"; checkpoint {self.path} at step {self.written if self.written is not None else '?'} " \
                   "(continue with --resume once it is fixed)"
        if isinstance(err, SystemExit):
            what = f"called sys.exit({err.code!r})"
        elif isinstance(err, KeyboardInterrupt):
            what = "raised KeyboardInterrupt"
        else:
            what = f"raised {type(err).__name__}: {one_line(err)}"
        when = f"during step {done + 1} of {self.total}" if done < self.total else \
            "after the last step (estimating the full-data ELBO)"
        at = f" ({where})" if where else ""
        return UserCodeExit(f"the likelihood {name} {what}{at} {when}; no model written{kept}")

    def finish(self, out: str, step: int, elbo: Optional[float]) -> None:
        """The finished model to ``out``; the checkpoint is removed."""
        self.write(out, step, True, elbo)
        self.finished = True
        if self.rank == 0 and os.path.exists(self.path):
            os.unlink(self.path)
