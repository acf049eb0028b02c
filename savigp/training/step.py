"""The mini-batch training step of :func:`savigp.fit` without host synchronization, and its CUDA
graph.

**The step** (:meth:`StepRunner.step`): zero the gradients, evaluate the ELBO (Bonilla et al. 2019,
eq. (17); Bonilla et al. 2019) on the batch inside :func:`savigp.runtime.sync_free.deferred`, back-propagate,
take the optimizer step, then record on the device -- without reading anything back -- whether the
step was good: its ELBO terms and every parameter finite, the K_zz factorization and the
log-likelihood values sound. A good step's parameters are copied into an on-device snapshot
(``torch.where`` on the flag, so the copy needs no decision on the host); the first bad step's
index, terms and flags are kept (the optimizer's state entries that a bad step made non-finite are
reset to 0 at the recovery, so nothing is paid for them per step).

**The check** (:meth:`StepRunner.read`), every ``log_every`` steps and at the end: one host read
of the window's ELBO values and the flags. Semantics when a bad step happened since the last check:
the parameters are restored from the snapshot, i.e. the state after the last good step (exactly
as a per-step check would leave them; the steps after the bad one, up to the check, are
discarded), and then

* a failed K_zz factorization grows the relative jitter (``model.jitter_floor``, with a
  ``RuntimeWarning``) and training continues from the restored state;
* NaN/inf log-likelihood values raise ``ValueError`` naming the likelihood and the step;
* anything else raises :class:`savigp.TrainingDiverged` naming the step and the terms or
  parameters that were not finite.

**CUDA graphs** (:class:`_Graph`): on CUDA with static shapes, the step -- forward, backward,
optimizer step and the bookkeeping above -- is captured once after a few eager warm-up steps on a
side stream and replayed; the Monte Carlo draws come from a CUDA generator registered with the
graph (fresh draws at every replay) and the mini-batch indices through a static index buffer.
:func:`graph_decision` says when capture is impossible (CPU, L-BFGS, numpy likelihoods, the
quadrature estimator, the joint posterior, ``torch.compile``); fit then runs the same step eagerly
and says why once.

**Learning rates under a graph** (:class:`_Rates`): a captured optimizer step keeps the learning
rate it was captured with (a Python float is baked into the kernels), so a schedule that sets
``param_group["lr"]`` between steps -- a callback, an ``lr_scheduler`` -- would be ignored without
a word. Adam on float32 parameters reads its rate from a device tensor in the graph (PyTorch's
tensor ``lr`` of the fused and capturable Adam), refreshed before a replay when the group's value
changed; elsewhere (float64 parameters, whose eager step uses the rate in double precision, or
another optimizer) a changed rate drops the graph, which is captured again after the warm-up.
"""
from __future__ import annotations

import contextlib
import dataclasses
import warnings
from typing import Optional

import torch
from torch import Tensor

from .._choices import ESTIMATORS, OPTIMIZERS
from ..mean_heads import ZERO_HEAD, MeanHead
from ..model import ELBOTerms
from ..runtime import compilation
from ..runtime import sync_free
from .loop import LastGood

#: eager steps before the capture (on a side stream, as CUDA graph capture requires; they also
#: create the optimizer's state)
WARMUP_STEPS = 3
_said: set = set()


def say_once(message: str) -> None:
    """A ``RuntimeWarning`` the first time this process meets ``message``."""
    if message not in _said:
        _said.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def graph_decision(requested: Optional[bool], *, device: torch.device, optimizer: str, estimator: str,
                   likelihood, joint: bool, mean_head: MeanHead = ZERO_HEAD) -> tuple[bool, str]:
    """Whether fit captures its step in a CUDA graph, and why not.

    Args:
        requested: ``fit(cuda_graphs=...)``: None (capture where possible), True, False.
        device: the model's device. optimizer, estimator: fit's (resolved). likelihood: the model's.
        joint: the posterior is coupled across latent functions (``posterior="joint"``).
        mean_head: the model's :attr:`~savigp.SAVIGP.head`: its ``graph_obstacle()`` (e.g. KL columns
            sampled on the host, which a graph would freeze at the capture).

    Returns:
        ``(capture, reason)``; ``reason`` is empty when capturing, else what prevents it.
    """
    if requested is False:
        return False, "turned off (cuda_graphs=False)"
    reasons = []
    if torch.device(device).type != "cuda":
        reasons.append(f"the model is on {torch.device(device).type}, not CUDA")
    if OPTIMIZERS[optimizer].graph_obstacle is not None:
        reasons.append(OPTIMIZERS[optimizer].graph_obstacle)
    if getattr(likelihood, "backend", "torch") != "torch":
        reasons.append(f"{type(likelihood).__name__} calls a numpy function (backend={likelihood.backend!r})")
    if not ESTIMATORS[estimator].cuda_graph_safe:
        reasons.append(f"the {estimator} estimator works on the host (it declares cuda_graph_safe=False)")
    if joint:
        reasons.append("the joint posterior's per-point factorizations check their info on the host")
    head_obstacle = mean_head.graph_obstacle()
    if head_obstacle is not None:
        reasons.append(head_obstacle)
    if compilation.compile_enabled():
        reasons.append("torch.compile is on (SAVIGP_COMPILE)")
    if torch.device(device).type == "cuda" and not hasattr(torch.cuda.CUDAGraph, "register_generator_state"):
        reasons.append("this PyTorch cannot register a generator with a CUDA graph")
    return (not reasons), "; ".join(reasons)


def precondition(model) -> None:
    """Rescale the gradients of a mixture posterior (K > 1) by the components' weights before a
    first-order step (:meth:`savigp.posteriors.MixturePosterior.precondition_gradients`: each
    component learns at a rate independent of its weight, Lin, Khan & Schmidt 2019)."""
    model.posterior.precondition_gradients()  # (declared by every family: nothing by default)


class _Snapshot(LastGood):
    """The parameters after the last good step, on their device, saved under a device flag."""

    @torch.no_grad()
    def save_if(self, ok: Tensor) -> None:
        for p, c in self.pairs:
            torch.where(ok, p, c, out=c)  # in place: no allocation, one pass


class StepRunner:
    """The sync-free step of :func:`savigp.fit` (see the module docstring).

    Args:
        model: a :class:`savigp.SAVIGP`. opt: its optimizer. num_samples, estimator: fit's.
        generator: the generator of the Monte Carlo draws (on the model's device for CUDA graphs).
        window: steps between checks (the length of the on-device ELBO buffer).
    """

    TERMS = ELBOTerms.NAMES

    def __init__(self, model, opt, *, num_samples: int, estimator: str, generator: torch.Generator, window: int,
                 graphs: bool = False):
        self.model, self.opt = model, opt
        self.graphs, self.captured, self.warm = bool(graphs), False, 0
        self.side = torch.cuda.Stream(model.device) if self.graphs else None
        self.num_samples, self.estimator, self.generator = num_samples, estimator, generator
        dev, dt = model.device, model.dtype
        self.params = list(model.parameters())
        self.snapshot = _Snapshot(model)
        self.flags = sync_free.StepFlags(dev)
        P = len(self.params)
        self.alive = torch.ones((), dtype=torch.bool, device=dev)
        self.counter = torch.zeros((), dtype=torch.long, device=dev)
        self.first_bad = torch.full((), -1, dtype=torch.long, device=dev)
        self.bad_terms = torch.zeros(len(self.TERMS), dtype=dt, device=dev)
        self.bad_params = torch.ones(P, dtype=torch.bool, device=dev)
        self.bad_flags = torch.zeros(len(self.flags.NAMES), dtype=torch.bool, device=dev)
        #: the terms a good step may have non-finite (:data:`savigp.ELBOTerms.CHECKED` are the others)
        self.unchecked = torch.tensor([n not in ELBOTerms.CHECKED for n in self.TERMS], dtype=torch.bool, device=dev)
        self.values = torch.zeros(max(1, int(window)), len(self.TERMS), dtype=dt, device=dev)
        self.filled = 0
        self.graph: Optional[_Graph] = None

    # ----------------------------------------------------------------- the step
    def _body(self, batch: Optional[Tensor]):
        """Forward, backward, optimizer step and the device-side bookkeeping; no host reads."""
        self.flags.reset()
        with sync_free.deferred(self.flags):
            terms = self.model.elbo(batch, num_samples=self.num_samples, estimator=self.estimator,
                                    generator=self.generator)
            (-terms.elbo).backward()
        precondition(self.model)
        vals = terms.stacked()
        elbo_ok = (vals.isfinite() | self.unchecked).all()
        self.opt.step()  # (a bad step's non-finite optimizer state is cleaned in :meth:`recover`)
        with torch.no_grad():  # (the parameters were finite before the step if the previous step was good)
            params_ok = torch.stack(torch._foreach_norm([p.detach() for p in self.params], float("inf"))).isfinite()
            flag_vec = torch.stack([getattr(self.flags, n) for n in self.flags.NAMES])
            ok = elbo_ok & params_ok.all() & ~flag_vec.any()
            newly_bad = self.alive & ~ok
            self.first_bad.copy_(torch.where(newly_bad, self.counter, self.first_bad))
            self.bad_terms.copy_(torch.where(newly_bad, vals, self.bad_terms))
            self.bad_params.copy_(torch.where(newly_bad, params_ok, self.bad_params))
            self.bad_flags.copy_(torch.where(newly_bad, flag_vec, self.bad_flags))
            self.alive.logical_and_(ok)
            self.snapshot.save_if(self.alive)
            self.counter.add_(1)
        return terms, vals

    def run(self, batch: Optional[Tensor]):
        """One training step, as fit takes it: with CUDA graphs, :data:`WARMUP_STEPS` eager steps on a
        side stream, then the capture, then replays; else :meth:`step`. Returns its ELBOTerms."""
        if self.graph is not None and not self.graph.rates.follow():
            self.graph, self.warm = None, 0  # a learning rate the graph cannot follow changed: capture again
        if self.graphs and self.graph is None and self.warm >= WARMUP_STEPS:
            self.graphs = capture(self, batch) is not None
            self.captured = self.captured or self.graphs
        if not (self.graphs and self.graph is None):
            return self.step(batch)
        current = torch.cuda.current_stream(self.model.device)
        self.side.wait_stream(current)
        with torch.cuda.stream(self.side):
            terms = self.step(batch)
        current.wait_stream(self.side)
        self.warm += 1
        return terms

    def step(self, batch: Optional[Tensor]):
        """One training step (replayed from the CUDA graph once captured); returns its ELBOTerms."""
        if self.graph is not None and self.graph.ready:
            terms, vals = self.graph.replay(batch)
        else:
            self.opt.zero_grad()
            terms, vals = self._body(batch)
        self.values[self.filled].copy_(vals.detach())  # a device copy into the window's row
        self.filled += 1
        return _without_graph(terms)

    # ----------------------------------------------------------------- the check
    def read(self) -> dict:
        """One host read: the window's ELBO values of the good steps, and what went wrong (if anything).

        Returns a dict with ``rows`` (list of per-step value lists, :data:`TERMS` order, good steps
        only), ``ok`` (no bad step since the last check), and for a bad step ``step`` (its 0-based
        index counted from the runner's start), ``terms``, ``params_ok`` and ``flags``.
        """
        n = self.filled
        head = torch.stack([self.alive.to(self.values.dtype), self.first_bad.to(self.values.dtype),
                            self.counter.to(self.values.dtype)])
        packed = torch.cat([head, self.values[:n].flatten(), self.bad_terms,
                            self.bad_params.to(self.values.dtype), self.bad_flags.to(self.values.dtype)]).tolist()
        alive, first_bad, counter = bool(packed[0]), int(packed[1]), int(packed[2])
        k = len(self.TERMS)
        rows = [packed[3 + i * k:3 + (i + 1) * k] for i in range(n)]
        rest = packed[3 + n * k:]
        self.filled = 0
        if alive:
            return {"ok": True, "rows": rows}
        good = n - (counter - first_bad)  # rows of this window before the first bad step
        P = len(self.params)
        return {"ok": False, "rows": rows[:max(0, good)], "step": first_bad, "terms": dict(zip(self.TERMS, rest[:k])),
                "params_ok": [bool(v) for v in rest[k:k + P]],
                "flags": dict(zip(self.flags.NAMES, [bool(v) for v in rest[k + P:]]))}

    def recover(self) -> None:
        """Back to the last good state, with fresh flags (after a check found a bad step). The
        optimizer's state is not rolled back; entries that a bad step made NaN or infinite are
        reset to 0 (as if those moments had not been accumulated)."""
        self.snapshot.restore()
        with torch.no_grad():
            for state in self.opt.state.values():
                for v in state.values():
                    if isinstance(v, Tensor) and v.is_floating_point():
                        torch.nan_to_num_(v, nan=0.0, posinf=0.0, neginf=0.0)
            self.alive.fill_(True)
            self.first_bad.fill_(-1)
            self.bad_flags.zero_()
            self.bad_params.fill_(True)
        self.graph, self.warm = None, 0  # the jitter may change: capture again (after a warm-up)


class _Rates:
    """The optimizer's learning rates as a captured step sees them (module docstring).

    ``tensors``: one float32 0-d tensor per parameter group on the device, or None where the graph
    cannot read its rate from a tensor (then :meth:`follow` reports a change instead).
    """

    def __init__(self, opt: torch.optim.Optimizer, device: torch.device):
        self.opt = opt
        self.host = [group["lr"] for group in opt.param_groups]
        params = [p for group in opt.param_groups for p in group["params"]]
        tensor_ok = (isinstance(opt, torch.optim.Adam) and bool(params)
                     and all(p.dtype == torch.float32 for p in params)
                     and all(group.get("fused") or group.get("capturable") for group in opt.param_groups))
        self.tensors = ([torch.tensor(float(lr), dtype=torch.float32, device=device) for lr in self.host]
                        if tensor_ok else None)

    @contextlib.contextmanager
    def capturing(self):
        """While the step is captured, the groups hold the device tensors; then their own values again."""
        if self.tensors is None:
            yield
            return
        for group, rate in zip(self.opt.param_groups, self.tensors):
            group["lr"] = rate
        try:
            yield
        finally:
            for group, lr in zip(self.opt.param_groups, self.host):
                group["lr"] = lr

    def follow(self) -> bool:
        """Copy changed rates into the device tensors (no host synchronization for a float); False when
        a rate changed that the graph cannot follow, or the groups themselves changed."""
        groups = self.opt.param_groups
        if len(groups) != len(self.host):
            return False
        for i, group in enumerate(groups):
            lr = group["lr"]
            if lr is self.host[i] or (not isinstance(lr, Tensor) and lr == self.host[i]):
                continue
            if self.tensors is None:
                return False
            self.tensors[i].fill_(float(lr))
            self.host[i] = lr
        return True


def _without_graph(terms):
    """``terms`` with a detached ``elbo``: the step's autograd graph (after its backward pass, nodes
    without saved tensors, but nodes that hold the parameters' AccumulateGrad nodes) dies with the
    step instead of living on in the caller's variable. A warm-up step's graph kept alive into the
    CUDA graph capture makes the capture's backward pass meet AccumulateGrad nodes created on the
    warm-up's stream (PyTorch's "AccumulateGrad node's stream does not match" warning, and a
    cross-stream wait inside the capture)."""
    return dataclasses.replace(terms, elbo=terms.elbo.detach())


class _Graph:
    """The step captured in a CUDA graph (forward, backward, optimizer step, bookkeeping).

    Mini-batch indices are copied into the static buffer ``index`` before each replay; the draws
    come from the runner's CUDA generator, registered with the graph so that every replay advances
    it (fresh draws).
    """

    def __init__(self, runner: StepRunner, batch: Optional[Tensor]):
        self.runner = runner
        self.index = None if batch is None else batch.detach().clone()
        self.ready = False
        self.graph = torch.cuda.CUDAGraph()
        self.graph.register_generator_state(runner.generator)
        self.rates = _Rates(runner.opt, runner.model.device)
        runner.opt.zero_grad(set_to_none=True)
        with self.rates.capturing(), torch.cuda.graph(self.graph):
            terms, self.vals = runner._body(self.index)
        self.terms = _without_graph(terms)
        self.ready = True

    def replay(self, batch: Optional[Tensor]):
        if self.index is not None:
            self.index.copy_(batch)
        self.graph.replay()
        return self.terms, self.vals


def capture(runner: StepRunner, batch: Optional[Tensor]) -> Optional[_Graph]:
    """Capture ``runner``'s step (after its warm-up steps); on failure say why once and return None.

    The capture registers a copy of the draw generator (same seed and offset, so the same draws),
    which the runner uses from then on: a failed capture leaves the generator it registered unable
    to draw outside a graph ("Offset increment outside graph capture"), so on failure the runner
    goes on eagerly with the untouched original."""
    original = runner.generator
    if original.device.type == "cuda":
        runner.generator = torch.Generator(device=original.device)
        runner.generator.set_state(original.get_state())
    try:
        runner.graph = _Graph(runner, batch)
        return runner.graph
    except Exception as exc:  # an operation that cannot be captured: run eagerly, correctly
        runner.graph = None
        runner.generator = original
        say_once(f"savigp.fit: CUDA graph capture failed ({type(exc).__name__}: {exc}); running the step eagerly")
        return None
