"""The step rules of :func:`savigp.fit` for the shared loop of :mod:`savigp.training.loop`.

* :class:`SyncFreeStep`: Adam/Adadelta in one process. :class:`savigp.training.step.StepRunner`'s
  steps never wait for the device; every ``window`` steps (and after the last) one host read
  collects the ELBO values and the failure flags.
* :class:`GradientStep`: a host read per step (a :class:`CheckedStep`): L-BFGS (full batch, the
  same draws at every evaluation within an outer step; L-BFGS reads the loss on the host anyway)
  and any optimizer under a process group (:mod:`savigp.training.distributed`: its all-reduces synchronize
  every step anyway, and a check every step keeps all ranks in agreement about stopping). Errors
  raise at once (a user likelihood's NaN as :class:`savigp.estimators.nonfinite.NonFiniteLogProb`, naming
  rows and f values).

:class:`CheckedStep` is the per-step check any other update can build on (the natural-gradient
step of :func:`savigp.fit_orthnat` does): subclasses implement :meth:`CheckedStep.step`.
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from ..estimators.nonfinite import NonFiniteLogProb
from ..linalg.cholesky import CholeskyError
from ..model import ELBOTerms
from . import step as _runner
from .loop import BadStep, Check, LastGood
from .notes import Note


class CheckedStep:
    """A step rule that checks after every step on the host: the terms of :data:`savigp.ELBOTerms.CHECKED` and
    every parameter finite, else the last good parameters come back (:class:`LastGood`, taken when
    the rule is made and after every good step)."""

    captured = False

    def __init__(self, model, optimizer=None):
        self.model, self.optimizer = model, optimizer
        self.last_good = LastGood(model)
        self.terms, self.index = None, -1
        #: one line per event the history reports (e.g. an L-BFGS step rejected at a trial point)
        self.notes: list = []

    def step(self, batch: Optional[torch.Tensor], step: int):
        """Take step number ``step`` on ``batch`` (indices ``(B,)`` or None); keep and return its
        :class:`savigp.ELBOTerms` in ``self.terms`` (with ``self.index = step``)."""
        raise NotImplementedError

    def due(self, step: int, last: int) -> bool:
        return True

    def check(self) -> Check:
        terms = self.terms
        values = {n: getattr(terms, n) for n in ELBOTerms.CHECKED}
        # one host read for all parameters (a bool() per parameter would wait for the device P times)
        params_ok = torch.stack([torch.isfinite(p).all() for p in self.model.parameters()]).tolist()
        if not all(math.isfinite(v) for v in values.values()) or not all(params_ok):
            return Check([], BadStep(self.index, {n: float(v) for n, v in values.items()}, params_ok))
        self.last_good.save()
        return Check([terms.as_dict()])

    def recover(self) -> None:
        self.last_good.restore()

    def explain(self, step: int) -> None:
        """(A per-step check raises a likelihood's error at once, inside the step.)"""

    def stop(self, flag) -> bool:
        return bool(flag)

    def state_entries(self) -> dict:
        return {"optimizer": self.optimizer}


class GradientStep(CheckedStep):
    """A gradient step with a per-step check: L-BFGS (an outer step of ``opt.step(closure)``), or
    Adam/Adadelta under a process group ``ddp`` (:class:`savigp.training.distributed.DataParallel`) or, with
    neither, in one process (the loop of fit before its steps were sync-free).

    Args:
        generator: the CPU generator of the Monte Carlo draws (the batch order's).
    """

    def __init__(self, model, optimizer, *, num_samples: int, estimator: str, generator: torch.Generator, ddp=None):
        super().__init__(model, optimizer)
        self.num_samples, self.estimator, self.generator, self.ddp = num_samples, estimator, generator, ddp

    def _elbo(self, batch, step: int, generator, backward: bool = True):
        if self.ddp is not None:
            return self.ddp.elbo_and_grad(batch, num_samples=self.num_samples, estimator=self.estimator,
                                          generator=self.ddp.draws(step), step=step, backward=backward)
        return self.model.elbo(batch, num_samples=self.num_samples, estimator=self.estimator, generator=generator)

    def step(self, batch, step):
        opt = self.optimizer
        if isinstance(opt, torch.optim.LBFGS):
            draw_seed = int(torch.randint(0, 2**62, (1,), generator=self.generator))

            def closure():  # the same draws at every evaluation (per rank under a process group)
                opt.zero_grad()
                terms = self._elbo(None, step, torch.Generator().manual_seed(draw_seed))
                loss = -terms.elbo
                if self.ddp is None and torch.isfinite(loss):
                    loss.backward()
                return loss

            try:
                opt.step(closure)
            except (CholeskyError, torch.linalg.LinAlgError) as err:
                self._reject(step, err)
            with torch.no_grad():  # the values at the new parameters, for the check: no graph kept until the next step
                terms = self._elbo(None, step, torch.Generator().manual_seed(draw_seed), backward=False)
        else:
            opt.zero_grad()
            terms = self._elbo(batch, step, self.generator)
            if torch.isfinite(terms.elbo):
                if self.ddp is None:
                    (-terms.elbo).backward()
                _runner.precondition(self.model)  # (mixtures: component-wise, see the function)
                opt.step()
        self.terms, self.index = terms, step
        return terms

    def stop(self, flag) -> bool:
        return bool(flag) if self.ddp is None else self.ddp.any(bool(flag))

    def _reject(self, step: int, err: Exception) -> None:
        """An L-BFGS outer step whose line search tried a point where a matrix is not positive
        definite (K_zz past its largest jitter, or S_k + S_l of a mixture's entropy,
        :mod:`savigp.posteriors.entropy`): torch's L-BFGS raises from inside its line search and
        leaves the parameters at the trial point. The step is rejected: the parameters go back to
        where it began (the last good step) and the curvature pairs that proposed the point are
        dropped (the next step starts L-BFGS afresh there, with its own draws)."""
        self.last_good.restore()
        self.optimizer.state.clear()
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        self.notes.append(Note("lbfgs", f"L-BFGS step {step} rejected: a trial point of its line search failed "
                               f"({type(err).__name__}: {first[:160]})", "went on from the step before it"))


class SyncFreeStep:
    """fit's mini-batch step with Adam/Adadelta in one process (module docstring).

    Args:
        model, optimizer, num_samples, estimator: fit's. draw_generator: the generator of the draws
        (on the model's device off the CPU). batch_generator: the batch order's (resumable state
        keeps the draw generator too when they differ). start: the first step's index.
        window: steps between checks. graphs: capture the step in a CUDA graph.
    """

    def __init__(self, model, optimizer, *, num_samples: int, estimator: str, draw_generator: torch.Generator,
                 batch_generator: torch.Generator, start: int, window: int, graphs: bool):
        self.model, self.optimizer, self.num_samples, self.estimator = model, optimizer, num_samples, estimator
        self.batch_generator, self.start, self.window = batch_generator, start, window
        self.runner = _runner.StepRunner(model, optimizer, num_samples=num_samples, estimator=estimator,
                                         generator=draw_generator, window=window, graphs=graphs)
        self.since, self.index = 0, start - 1
        self.notes: list = []  # (the rule of CheckedStep's notes: none here)
        # per step of the window: (batch, draw generator state, device), to explain a NaN likelihood
        self.inputs, self.window_inputs, self.window_start = [], [], start

    @property
    def captured(self) -> bool:
        return self.runner.captured

    @property
    def draw_generator(self) -> torch.Generator:
        """The generator of the draws: the runner's (a CUDA capture swaps in a copy of fit's, see
        :func:`savigp.training.step.capture`)."""
        return self.runner.generator

    def step(self, batch, step):
        # (a captured graph advances its generator on the device: no host-side state to keep)
        g = self.draw_generator
        self.inputs.append((batch, g.get_state() if self.runner.graph is None else None, g.device))
        self.since, self.index = self.since + 1, step
        return self.runner.run(batch)

    def due(self, step: int, last: int) -> bool:
        # (at the multiples of the window counted from step 0, whichever phase or resumed piece of a
        # run this is: the checks, and the callbacks that checkpoint, fall on the same steps)
        return (step + 1) % self.window == 0 or self.since >= self.window or step + 1 >= last

    def check(self) -> Check:
        self.since = 0
        info = self.runner.read()  # the one host read of this window
        self.window_start = self.index + 1 - len(self.inputs)
        self.window_inputs, self.inputs = self.inputs, []
        rows = [dict(zip(self.runner.TERMS, row)) for row in info["rows"]]
        if info["ok"]:
            return Check(rows)
        return Check(rows, BadStep(self.start + info["step"], info["terms"], info["params_ok"], info["flags"]))

    def recover(self) -> None:
        self.runner.recover()

    def explain(self, step: int) -> None:
        """Evaluate bad step ``step``'s ELBO again with its batch and draws (the parameters are those it
        started from), outside the deferred checks, so that
        :func:`savigp.estimators.sampling.checked_log_prob` raises its error naming the likelihood, the
        data rows, the targets and the f values. Returns if the values are finite this time."""
        i = step - self.window_start
        if not 0 <= i < len(self.window_inputs):
            return
        batch, draw_state, device = self.window_inputs[i]
        if draw_state is None:
            return
        g = torch.Generator(device=device)
        g.set_state(draw_state)
        try:
            self.model.elbo(batch, num_samples=self.num_samples, estimator=self.estimator, generator=g)
        except NonFiniteLogProb as err:
            raise NonFiniteLogProb(err.who, err.examples, err.count, err.total,
                                   f"{err.hint} (at training step {step}; the model holds the parameters of the last "
                                   "good step)") from None

    def stop(self, flag) -> bool:
        return bool(flag)

    def state_entries(self) -> dict:
        extra = {} if self.draw_generator is self.batch_generator else {"draw_generator": self.draw_generator}
        return {"optimizer": self.optimizer, **extra}
