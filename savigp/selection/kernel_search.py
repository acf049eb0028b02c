"""The kernel's structure chosen by the ELBO, for any likelihood: a greedy search over the algebra of
kernels (Duvenaud et al. 2013, "Structure Discovery in Nonparametric Regression through
Compositional Kernel Search"; Lloyd et al. 2014, "Automatic Construction and Natural-Language
Description of Nonparametric Regression Models").

An expression is kept as a sum of products of base kernels B (a family on one input column, or on
all of them). From the current expression S = T_1 + ... + T_n the search proposes

    S + B,    S with T_i replaced by T_i * B,    S with one base kernel replaced by another B',

fits each candidate with :func:`savigp.fit` (its kernel's shared parts started at the parent's
fitted hyper-parameters, its new parts at data-driven values: a periodic part at the strongest
peaks of the Lomb-Scargle periodogram of the targets, or of what the parent leaves unexplained in
the latent space once there is a parent, and at twice the strongest; a candidate with a new
periodic part also from cold starts, every part at its default and the season at the targets'
peaks), each start settled by L-BFGS
(q(u) alone, then everything), the best one trained by Adam and polished by L-BFGS again (kept
only when that raised its ELBO), the inducing inputs fixed at their k-means start, and moves to
the best candidate while it improves the score by more than twice the standard error of the
difference -- also over the parent's structure fitted again from the candidate's own values, less
the base kernel it added (a child wins by its structure, not by a basin its parent missed), and by
at least :data:`MIN_GAIN` nats whatever the standard error (a closed-form ELBO has none). A
candidate whose fit fails (an error, a non-finite ELBO or parameter) is rejected with its reason in
the table and never changes the model it started from. Duvenaud et al. rank by the BIC of
the marginal likelihood; for a likelihood without one, the score here is the full-data ELBO (its
Monte Carlo estimate, with its standard error) less (1/2) p log N for p kernel hyper-parameters
(``penalty="bic"``; ``penalty=None`` ranks by the ELBO alone, which a point estimate of more
hyper-parameters never lowers by much, so it drifts towards larger expressions).

The search proposes the candidates (the expansions of the current expression, their starting
specs, the parent trained further, the parent's structure fitted again from a winning child's
values); the candidate loop (:class:`savigp.selection.candidates.CandidateLoop`) fits, scores,
rejects and compares them, the same loop as :func:`savigp.choose_components`'.
"""
from __future__ import annotations

import copy
import math
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional, Sequence

import numpy as np

from .._checks import writable
from .._choices import KERNELS
from ..kernels.expression import format_kernel
from ..kernels.periodogram import periodogram_peaks
from ..kernels.spec import default_lengthscale, kernel_spec
from ..training.convergence import ConvergenceWarning, full_data_elbo
from ..training.fitting import fit
from ..training.loop import TrainingDiverged
from .candidates import BUDGET_ENDED, Budget, Candidate, CandidateLoop, Fitted, Trial, fit_while_rising
from .kernel_proposals import (base_leaf, canonical_key, count_periodic, extends, family_of, inherit, leaf_key,
                               periods_of, plain_spec, projections, proposals, residual_peaks, start_from_data,
                               warm_spec)
from .settle import lbfgs_steps, settle

#: the base families the search combines by default
DEFAULT_BASE = ("rbf", "periodic", "linear")
#: the least gain in score (nats) that moves the search to a child, whatever its standard error: a
#: log Bayes factor below 1 is "not worth more than a bare mention" (Kass & Raftery 1995, §3.2); with a
#: closed-form ELBO (standard error 0) a move on a 0.06-nat gain was taken (issue 57)
MIN_GAIN = 1.0


@dataclass
class KernelSearchResult:
    """What :func:`search_kernels` tried and chose.

    Attributes:
        spec: the chosen kernel's spec (:mod:`savigp.kernels.spec`; with its fitted values).
        expression: the chosen kernel as an expression (columns named as given).
        model: the fitted model of the chosen kernel.
        table: one row per candidate fitted, in the order tried: ``expression``, ``level`` (the
            number of base kernels), ``elbo`` and ``elbo_stderr`` (full data), ``num_hypers``,
            ``score``, ``seconds``, ``converged``, ``period_starts`` (per start, its periodic leaves'
            starting periods), ``chosen`` (moved to, or the chosen expression
            trained further: "(continued)", as long as its children are, so that they compare fairly),
            ``failed`` (None, or why the candidate was rejected: a non-finite ELBO or parameter, an
            error of the fit, or the time budget ending its fit; a failed candidate is never chosen
            and a failed continuation leaves its parent as it was).
        seconds: the search's time; ``complete``: False when the time budget stopped it.
    """

    spec: dict
    expression: str
    model: Any
    table: list = field(default_factory=list)
    seconds: float = 0.0
    complete: bool = True

    def __str__(self) -> str:
        head = "| level | expression | ELBO | s.e. | hypers | score | s | converged | chosen |"
        rows = [head, "|" + "---|" * 9]
        failures = []
        for r in self.table:
            converged = "yes" if r["converged"] else "no"
            if r.get("failed"):
                failures.append(f"{r['expression']}: {r['failed']}")
                converged = f"failed ({len(failures)})"
            rows.append(f"| {r['level']} | {r['expression']} | {r['elbo']:.2f} | {r['elbo_stderr']:.2f} | "
                        f"{r['num_hypers']} | {r['score']:.2f} | {r['seconds']:.1f} | {converged} | "
                        f"{'*' if r['chosen'] else ''} |")
        rows += [f"failed ({i}): {why}" for i, why in enumerate(failures, 1)]
        rows.append(f"chosen: {self.expression} ({self.seconds:.0f} s{'' if self.complete else ', stopped by the time budget'})")
        return "\n".join(rows)


def search_kernels(X, Y, likelihood, *, base: Sequence[str] = DEFAULT_BASE, columns: Optional[Sequence[str]] = None,
                   per_column: Optional[bool] = None, max_terms: int = 4, time_budget: Optional[float] = None,
                   penalty: Optional[str] = "bic", num_inducing: Optional[int] = None, iterations: int = 500,
                   lr: float = 0.05, extend: int = 2, polish: int = 10, period_starts: int = 3,
                   fit_options: Optional[dict] = None,
                   model_options: Optional[dict] = None, seed: int = 0, progress: bool = True) -> KernelSearchResult:
    """Search the kernel's structure greedily by the ELBO (Duvenaud et al. 2013), for any likelihood.

    Args:
        X: inputs ``(N, D)``. Y: targets ``(N, P)`` as the likelihood takes them.
        likelihood: any savigp likelihood (copied for every candidate; the copies learn their parameters).
        base: the base families (registered kernel names, e.g. ``("rbf", "periodic", "linear", "rq")``).
        columns: the inputs' names, for the expressions in the table.
        per_column: base kernels on one column each (default when 1 < D <= 8) or on all columns.
        max_terms: the most base kernels in an expression.
        time_budget: seconds; the fit in hand stops within one of its steps of the deadline and is
            rejected (its row says so), and no candidate starts after it; the check that guards a
            move (the parent refitted from the child's values) still runs, within
            :data:`~savigp.selection.candidates.CHECK_GRACE` seconds (or a tenth of the budget), and a move whose check does not
            end in that time is not taken (the result's ``complete`` is then False). Where the
            budget ended every first-level fit, the best of them is returned.
        penalty: ``"bic"`` (score = ELBO - p log(N) / 2) or None (the ELBO alone).
        num_inducing: M of every candidate (default min(N, 100)).
        iterations, lr: of every candidate's :func:`savigp.fit`; ``fit_options`` adds to them.
        extend: up to this many more fits of ``iterations`` steps for a candidate whose ELBO was
            still rising (:class:`~savigp.ConvergenceWarning`): candidates are ranked converged.
        polish: then this many outer steps of L-BFGS (20 inner iterations each, strong Wolfe line
            search, the Monte Carlo draws fixed within an outer step) from where Adam ended; 0: none.
            Adam at ``lr`` leaves a sharp optimum (a period over many cycles) at a random point of its
            noise floor, nats below it, and which structure wins then depends on that noise
            (docs/experiments.md, "Kernel structure search").
        period_starts: a candidate with a new periodic part starts from this many periods, the
            strongest peaks of the periodogram of the parent's working residuals (in the latent space,
            weighted by the likelihood's curvature), and, below a parent, as many cold starts (every
            part at its default, the season at the targets' own peaks); each start is settled by
            L-BFGS (with ``polish=0``: ``iterations // 4`` Adam steps) and the start with the highest
            ELBO is trained on. The ELBO is multimodal in the period, and the strongest peak of
            residuals is often a harmonic. A child that adds a non-periodic base kernel to its parent
            starts from the parent's values twice: its new part at its default, and neutral (a new
            term at variance 0.01, a new stationary factor at ten times its default length-scale),
            from where its fit starts at about the parent's ELBO and so ends at or above it.
        model_options: further :class:`savigp.SAVIGP` arguments (e.g. ``posterior=``). By default
            the candidates' inducing inputs stay at their k-means start (``learn_inducing=False``):
            every candidate has the same ones, and learned ones made the fitted ELBO of one
            structure vary by tens of nats with its start.
        seed: of the models and fits. progress: a line per candidate on stderr.

    Returns:
        a :class:`KernelSearchResult` (``print(result)`` shows the table).
    """
    search = _KernelSearch(X, Y, likelihood, base=base, columns=columns, per_column=per_column,
                           time_budget=time_budget, penalty=penalty, num_inducing=num_inducing,
                           iterations=iterations, lr=lr, extend=extend, polish=polish, period_starts=period_starts,
                           fit_options=fit_options, model_options=model_options, seed=seed, progress=progress)
    complete, seen = True, set()
    current = None  # the incumbent (an _Incumbent)
    while True:
        expansions = [t for t in proposals(current.terms if current else None, search.bases)
                      if sum(map(len, t)) <= max_terms]
        fresh = []
        for terms in expansions:
            if canonical_key(terms) not in seen:
                seen.add(canonical_key(terms))
                fresh.append(terms)
        if not fresh:
            break
        if current is not None and search.seasonal:  # new seasons start at what the parent leaves unexplained
            search.periods = residual_peaks(current.trial.model, search.X, search.Yarr, search.groups,
                                             search.peaks) or search.periods
        if current is not None and not search.budget.over():
            # the parent trains further as its children do from its values (polished again; without
            # a polish, as many more Adam steps), so that a child wins by its structure, not by a
            # longer optimisation (Duvenaud et al. 2013 restart from the parent too)
            trial, row = search.candidate(None, level=current.row["level"], model=current.trial.model)
            row["expression"] += " (continued)"
            if not trial.failed:  # (a failed continuation left the parent as it was)
                row["chosen"] = True
                current = _Incumbent(current.terms, trial, row, kernel_spec(trial.model.kernel, values=True))
        results, stopped = [], []
        for terms in fresh:
            if search.budget.over() and (current is not None or results or stopped):  # (a search returns a model)
                complete = False
                break
            trial, row = search.candidate(*search.starts_of(terms, current), level=sum(map(len, terms)))
            if not trial.failed:
                results.append((terms, trial, row))
            elif trial.model is not None and current is None:  # (the budget ended it: a fallback of the first level)
                stopped.append((terms, trial, row))
        if not results and current is None and stopped:  # the budget ended every first fit: the best of them
            results, complete = stopped, False
        if not results:
            break
        terms, trial, row = max(results, key=lambda r: r[1].score)
        if current is not None:
            if not search.loop.wins(trial, current.trial):
                break
            current, moves, spent = search.checked(trial, current)
            complete = complete and not spent
            if not moves:
                break
        row["chosen"] = True
        current = _Incumbent(terms, trial, row, kernel_spec(trial.model.kernel, values=True))
        if not complete:
            break
    if current is None:
        raise RuntimeError("search_kernels: every first-level candidate failed: "
                           + "; ".join(f"{r['expression']}: {r['failed']}" for r in search.table))
    expression = current.row["expression"].removesuffix(" (continued)").removesuffix(" (from the child's values)")
    return KernelSearchResult(spec=current.spec, expression=expression, model=current.trial.model, table=search.table,
                              seconds=time.perf_counter() - search.start, complete=complete)


class _Incumbent(NamedTuple):
    """The search's current expression: its ``terms`` (a list of products, each a list of leaves), its
    :class:`~savigp.selection.candidates.Trial` (the fitted model), its table ``row`` and its fitted ``spec``."""

    terms: list
    trial: Trial
    row: dict
    spec: dict


class _KernelSearch:
    """The search's data, its starting values read from them, the candidates' fitting recipe and
    the candidate loop (:class:`savigp.selection.candidates.CandidateLoop`) with its table."""

    def __init__(self, X, Y, likelihood, *, base, columns, per_column, time_budget, penalty, num_inducing, iterations,
                 lr, extend, polish, period_starts, fit_options, model_options, seed, progress):
        import torch

        self.start = time.perf_counter()
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError(f"search_kernels: X must have shape (N, D), got {X.shape}")
        Yarr = np.asarray(Y, dtype=np.float64)
        Yarr = Yarr[:, None] if Yarr.ndim == 1 else Yarr
        if Yarr.shape[0] != X.shape[0]:
            raise ValueError(f"search_kernels: Y has {Yarr.shape[0]} rows but X has {X.shape[0]} (X {X.shape}, Y {Yarr.shape})")
        N, D = X.shape
        if columns is not None and len(columns) != D:
            raise ValueError(f"search_kernels: columns names {len(columns)} columns but X has D={D}")
        if penalty not in ("bic", None):
            raise ValueError(f"search_kernels: penalty must be 'bic' or None, got {penalty!r}")
        base = [KERNELS.canonical(name) for name in base]
        per_column = (1 < D <= 8) if per_column is None else per_column
        self.groups = [[d] for d in range(D)] if per_column and D > 1 else [None]
        self.bases = [base_leaf(name, dims) for name in base for dims in self.groups]
        if int(period_starts) < 1 or int(polish) < 0:
            raise ValueError(f"search_kernels: period_starts must be >= 1 and polish >= 0, got {period_starts} and {polish}")
        self.X, self.Y, self.Yarr, self.likelihood, self.columns, self.seed = X, Y, Yarr, likelihood, columns, seed
        self.extend, self.polish, self.period_starts, self.progress = extend, polish, period_starts, progress
        self.peaks = max(2, int(period_starts))
        self.seasonal = any(KERNELS[name].has_period for name in base)  # (a base family with a period)
        self.periods = ({tuple(g or []): periodogram_peaks(X, Yarr, g, self.peaks, detrend=True) for g in self.groups}
                        if self.seasonal else {})
        self.data_periods = self.periods  # of the targets themselves (less their trend): the cold starts' periods
        self.starts = {leaf_key(b): start_from_data(X, b) for b in self.bases if family_of(b).starts_from_data}
        lengthscale = default_lengthscale(torch.as_tensor(writable(X)))
        self.neutral = {leaf_key(b): [[float(v) for v in np.atleast_1d(lengthscale(b.get("active_dims"), True))]]
                        for b in self.bases if family_of(b).search_neutral_factor}
        self.M = int(num_inducing or min(N, 100))
        self.options = {"iterations": iterations, "lr": lr, "progress": False, "seed": seed, **(fit_options or {})}
        self.estimation = {k: self.options[k] for k in ("num_samples", "estimator") if k in self.options}
        self.model_options = {"learn_inducing": False, **(model_options or {})}
        self.penalty = penalty
        self.budget = Budget(time_budget)
        self.loop = CandidateLoop(score=self.elbo, penalty=self.bic if penalty == "bic" else None,
                                  budget=self.budget, min_gain_se=2.0, min_gain=MIN_GAIN)
        self.table = []

    def elbo(self, model) -> tuple:
        """The full-data ELBO and its standard error (fit's estimator and draws, seeded by the search's seed)."""
        return full_data_elbo(model, seed=self.seed, **self.estimation)

    def bic(self, model) -> float:
        """(1/2) p log N for the p kernel hyper-parameters learned (Schwarz 1978)."""
        return 0.5 * _num_hypers(model) * math.log(self.X.shape[0])

    def starts_of(self, terms, current) -> tuple:
        """``(specs, parent)``: the starting specs of the candidate ``terms`` below ``current`` (None at
        the first level), and the parent model whose q(u) its neutral start (the last) takes, or None."""
        specs = [warm_spec(terms, current.spec if current else None, self.periods, shift=k, starts=self.starts)
                 for k in range(self.period_starts)]
        if current is not None and count_periodic(terms) > count_periodic(current.terms):
            # cold starts too: every part at its default, the new season at the periodogram of
            # the targets. A parent that absorbed the season (an RBF of a short length-scale)
            # leaves residuals without it, and its values hold the child in its own basin
            # (Poisson seeds 2 and 5 of docs/experiments.md, "Kernel structure search")
            specs += [warm_spec(terms, None, self.data_periods, shift=k, starts=self.starts)
                      for k in range(self.period_starts)]
        parent = None
        if current is not None and count_periodic(terms) == count_periodic(current.terms) \
                and extends(terms, current.terms):
            # and the neutral start (last): the parent as fitted, q(u) and the likelihood's
            # parameters too, the new part about 0 (a term) or 1 (a factor), from which the
            # child's fit climbs and so ends at or above the parent. From the default start a
            # child that holds its parent scored below it 3 times in the CO2 search (e.g. rq *
            # periodic + rbf 2998.8 against rq * periodic 3022.0, docs/experiments.md)
            spec = warm_spec(terms, current.spec, self.periods, starts=self.starts, neutral=self.neutral)
            if spec is not None:
                specs, parent = [sp for sp in specs if sp != spec] + [spec], current.trial.model
        return [sp for i, sp in enumerate(specs) if sp not in specs[:i]], parent

    def candidate(self, specs, parent=None, *, level: int, model=None) -> tuple:
        """``(trial, row)``: the candidate from the best of its starting ``specs`` (the last taking
        q(u) and the likelihood's parameters from the ``parent`` model where given, :func:`~savigp.selection.kernel_proposals.inherit`),
        or ``model`` polished further in place, through the loop (a failure is a row with its reason
        in ``failed``, and a ``model`` given is put back as it was); its row appended to the table."""
        if model is not None:
            fitted, label = (lambda: self.continued(model)), format_kernel(plain_spec(kernel_spec(model.kernel)), self.columns)
        else:
            fitted, label = (lambda: self.fitted(specs, parent)), format_kernel(plain_spec(specs[0]), self.columns)
        trial = self.loop.fit(Candidate(label, fitted, parent=model))
        m = trial.model
        row = {"expression": format_kernel(plain_spec(kernel_spec(m.kernel) if m is not None else specs[0]), self.columns),
               "level": level, "elbo": trial.elbo, "elbo_stderr": trial.se if math.isfinite(trial.se) else math.nan,
               "num_hypers": _num_hypers(m) if m is not None else 0, "score": trial.score,
               "seconds": trial.seconds, "converged": trial.converged, "chosen": False,
               "period_starts": [] if specs is None else [periods_of(sp) for sp in specs], "failed": trial.failed}
        self.table.append(row)
        if self.progress:
            outcome = f"failed: {trial.failed}" if trial.failed else \
                f"ELBO {row['elbo']:.2f} +- {row['elbo_stderr']:.2f}, score {row['score']:.2f}"
            print(f"search_kernels: {row['expression']}: {outcome} ({row['seconds']:.1f} s)", file=sys.stderr)
        return trial, row

    def checked(self, child, current) -> tuple:
        """The check that guards a move to ``child`` (whose score beat ``current``'s): the parent's
        structure fitted again from the child's own values (the child less the base kernel it added),
        which may reach a basin the parent's starts missed and the child found (Gaussian seed 4 of
        docs/experiments.md, "Kernel structure search": rbf + periodic at the doubled period, ELBO
        78, beaten by rbf + periodic * periodic at 91 with the right period in one factor), kept as
        the parent when it scores higher. Never skipped: past the budget it has a grace of its own
        (:meth:`~savigp.selection.candidates.Budget.grace`). Returns ``(current, moves, spent)``:
        the incumbent after the check, whether the child still wins, whether the budget was spent
        (a check the budget ended: no move)."""
        parents = projections(kernel_spec(child.model.kernel, values=True), current.terms)
        if not parents:
            return current, True, False
        with self.budget.grace() as spent:
            trial, row = self.candidate(parents, level=current.row["level"])
        row["expression"] += " (from the child's values)"
        if trial.failed and BUDGET_ENDED in trial.failed:
            return current, False, True
        if not trial.failed and trial.score > current.trial.score:
            row["chosen"] = True
            current = _Incumbent(current.terms, trial, row, kernel_spec(trial.model.kernel, values=True))
        return current, self.loop.wins(child, current.trial), spent

    def fitted(self, specs, parent) -> Fitted:
        """The best start of ``specs`` fitted: with a polish, each start settled by L-BFGS (which stays
        in the start's basin), the best trained on and kept only if not worse; without, short Adam
        runs from each start and the best trained on."""
        from ..model import SAVIGP

        models = [SAVIGP(self.X, self.Y, copy.deepcopy(self.likelihood), kernel=s, num_inducing=min(self.M, len(self.X)),
                         seed=self.seed, **self.model_options) for s in specs]
        if parent is not None:
            inherit(models[-1], parent)
        if self.polish > 0:
            for m in models:
                settle(m, self.options, self.polish, stop=self.budget.callback)
            first, i = max((_finite_or_worst(self.elbo(m)[0]), i) for i, m in enumerate(models))
            model = models[i]
            before = copy.deepcopy(model.state_dict())
            try:  # Adam leaves a basin L-BFGS stopped in, or wanders off a good one:
                converged = self.train(model)
                worse = self.elbo(model)[0] < first
            except TrainingDiverged:
                converged, worse = False, True
            if worse:  # never keep a worse fit
                model.load_state_dict(before)
            return Fitted(model, converged)
        if len(models) > 1:  # short runs from each start; the one with the highest ELBO goes on
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                for m in models:
                    fit(m, **{**self.options, "iterations": max(1, int(self.options["iterations"]) // 4)},
                        final_elbo=False)
        model = max(models, key=lambda m: _finite_or_worst(self.elbo(m)[0]))
        return Fitted(model, self.train(model))

    def continued(self, model) -> Fitted:
        """``model`` trained further in place: polished again (or, without a polish, trained on)."""
        if self.polish > 0:
            self.polished(model)
            return Fitted(model, True)
        return Fitted(model, self.train(model))

    def train(self, model) -> bool:
        """Adam, fitted on while its ELBO still rises (``extend`` times at most; fit's rule,
        :func:`~savigp.selection.candidates.fit_while_rising`), then the L-BFGS polish; converged?"""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            history, _ = fit_while_rising(model, {**self.options, "final_elbo": False, "callback": self.budget.callback},
                                          max_extensions=self.extend, stop=lambda: self.budget.stopped)
            self.polished(model)
        return history.still_rising is None

    def polished(self, model):
        if self.polish > 0:
            lbfgs_steps(model, {**self.options, "iterations": self.polish}, stop=self.budget.callback)
        return model


def _num_hypers(model) -> int:
    """The kernel hyper-parameters ``model`` learns (their count)."""
    return int(sum(p.numel() for p in model.kernel.parameters() if p.requires_grad))


def _finite_or_worst(value: float) -> float:
    return value if math.isfinite(value) else -math.inf
