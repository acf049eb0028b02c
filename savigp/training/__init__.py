"""Training: :func:`fit` (Adam, Adadelta, L-BFGS; Bonilla et al. 2019, §5) and the one loop it
shares with :func:`savigp.fit_orthnat` (Salimbeni et al. 2018's natural-gradient steps).

* :mod:`savigp.training.loop`: the loop (batches, history, checks, progress, callbacks) and
  :class:`TrainingDiverged`, :class:`TrainingHistory`, :class:`LastGood`;
* :mod:`savigp.training.rules`: the per-step updates of fit (:class:`SyncFreeStep`,
  :class:`GradientStep`) and the per-step check others build on (:class:`CheckedStep`);
* :mod:`savigp.training.step`: the sync-free step (:class:`StepRunner`) and its CUDA graph;
* :mod:`savigp.training.plan`: :class:`FitPlan`, fit's options as one frozen object checked when it
  is made, and what it resolves to for a model (:class:`ResolvedPlan`: the batch, the steps of
  ``epochs``, the estimator, the threads, the interval between reads);
* :mod:`savigp.training.notes`: :class:`Note`, what fit has to say at its end, kept in
  ``history.notes`` and warned once;
* :mod:`savigp.training.fitting`: :func:`fit` itself, which runs the phases of
  :mod:`savigp.training.schedule` (a mixture's exploring starts and reflection move,
  :mod:`savigp.training.starts`; fit's own phase; the annealing), resumable from its ``state``;
* :mod:`savigp.training.convergence`: the smoothed ELBO, the full-data ELBO with its standard error,
  and the still-rising hint (:class:`ConvergenceWarning`).
"""
from .convergence import ConvergenceWarning, full_data_elbo, still_rising, window_stats
from .fitting import OPTIMIZERS, PARAMETER_GROUPS, default_log_every, fit, make_adam, parameter_groups
from .loop import Batches, BadStep, Check, LastGood, Progress, TrainingDiverged, TrainingHistory, run
from .notes import Note
from .plan import FitPlan, ResolvedPlan
from .rules import CheckedStep, GradientStep, SyncFreeStep
from .step import WARMUP_STEPS, StepRunner, graph_decision

__all__ = ["fit", "FitPlan", "ResolvedPlan", "Note", "TrainingHistory", "TrainingDiverged", "OPTIMIZERS", "PARAMETER_GROUPS", "parameter_groups",
           "make_adam", "default_log_every", "run", "Batches", "Progress", "Check", "BadStep", "LastGood",
           "CheckedStep", "GradientStep", "SyncFreeStep", "StepRunner", "graph_decision", "WARMUP_STEPS",
           "ConvergenceWarning", "full_data_elbo", "still_rising", "window_stats"]
