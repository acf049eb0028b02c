"""``savigp train``'s options as one typed object: the plan the command builds once from its
command line (:meth:`TrainPlan.from_args`) and that ``train`` and its helpers (the likelihood's
options, the kernel, the two-stage fit, the warm start, the checkpoints, the ranks) take instead
of the argparse namespace.

Its fields are the options of ``savigp train`` (:mod:`savigp.cli.parser` declares them with their
defaults and help; a test keeps the two sets equal), typed, with ``--learn`` already read into its
groups and the repeatable options as tuples. The options a resumed run must repeat unchanged are
marked where they are declared (:func:`_resumed`); :data:`RESUME_KEYS` is read from those marks and
:meth:`TrainPlan.resume_options` is what a model file records of them (``config["training"]
["options"]``), so ``--resume`` compares every such option and no list of their names is kept by
hand. The plan imports nothing heavy (the parser may import it before torch).

The other commands have theirs, built the same way by their ``cmd_*`` function and taken by its
helpers: :class:`PredictPlan` (``savigp predict``), :class:`EvaluatePlan` (``savigp evaluate``) and
:class:`ReportPlan` (``savigp report``), each a :class:`SavedModelPlan` (the model file, the CSV and the sampling options they share), and
:class:`DemoPlan` (``savigp demo``); a test keeps each one's fields equal to its command's options.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from typing import Optional

from .._choices import OPTIMIZERS


def _resumed():
    """A field a resumed run must repeat unchanged (``--iterations``/``--epochs`` may grow, so they are not)."""
    return field(metadata={"resume": True})


def _parse_learn(text: Optional[str]) -> Optional[list]:
    """``--learn "posterior,kernel"`` -> the named groups in :data:`PARAMETER_GROUPS` order (``-``
    may stand for ``_``); None (the option not given) -> None, i.e. every group."""
    from .._choices import PARAMETER_GROUPS
    from .errors import CLIError

    if text is None:
        return None
    names = [s.strip().replace("-", "_") for s in str(text).split(",") if s.strip()]
    if not names:
        raise CLIError(f"--learn {text!r}: name at least one parameter group ({', '.join(PARAMETER_GROUPS)})")
    unknown = [n for n in names if n not in PARAMETER_GROUPS]
    if unknown:
        raise CLIError(f"--learn: unknown parameter group(s) {', '.join(map(repr, unknown))}; choose from "
                       f"{', '.join(PARAMETER_GROUPS)} (comma-separated)")
    return [g for g in PARAMETER_GROUPS if g in names]


@dataclass(frozen=True, kw_only=True)
class TrainPlan:
    """The options of one ``savigp train`` run (see the module docstring and docs/cli.md)."""

    # ---------------------------------------------------------------- data and files
    data: str
    targets: str
    inputs: Optional[str]
    header: Optional[bool]
    delimiter: str
    out: str
    # ---------------------------------------------------------------- likelihood
    likelihood: str = _resumed()
    num_latent: Optional[int] = _resumed()
    num_classes: Optional[int] = _resumed()
    one_hot: bool = _resumed()
    num_outputs: Optional[int] = _resumed()
    num_nodes: Optional[int] = _resumed()
    num_layers: Optional[int] = _resumed()
    num_tanh: Optional[int] = _resumed()
    df: Optional[float] = _resumed()
    bin_width: Optional[float] = _resumed()
    noise_variance: Optional[float] = _resumed()
    lik_option: Optional[tuple] = _resumed()
    task: Optional[str] = _resumed()
    mean_function: Optional[str] = _resumed()
    lik_param: Optional[tuple] = _resumed()
    min_log_prob: Optional[float] = _resumed()
    # ---------------------------------------------------------------- model
    kernel: str = _resumed()
    search_base: str
    search_max_terms: int
    search_budget: float
    search_iterations: int
    fourier_features: Optional[int] = _resumed()
    shared_kernel: bool = _resumed()
    num_inducing: Optional[int] = _resumed()
    inducing_init: str = _resumed()
    dense: bool = _resumed()
    fixed_inducing: bool = _resumed()
    posterior: str = _resumed()
    components: int = _resumed()
    hypers: Optional[str]
    max_components: Optional[int]
    entropy: str = _resumed()
    prior_mean: Optional[str] = _resumed()
    learn_prior_mean: bool = _resumed()
    mean_basis_size: int = _resumed()
    mean_basis: str = _resumed()
    standardize_inputs: bool = _resumed()
    standardize_targets: bool = _resumed()
    dtype: str = _resumed()
    device: Optional[str]
    seed: int = _resumed()
    # ---------------------------------------------------------------- training
    iterations: Optional[int]
    epochs: Optional[float]
    #: ``--until-converged``: fit's rule ends the run, ``iterations`` (default 20000) caps it; ``savigp
    #: train`` sets it where no length is given (:func:`savigp.cli.train.with_run_length`), so that the
    #: model file records whether the run trains to convergence and ``--resume`` keeps to it
    until_converged: bool = _resumed()
    #: ``--time-budget``: seconds after which a run to convergence starts no further round
    time_budget: Optional[float]
    batch_size: Optional[int] = _resumed()
    optimizer: str = _resumed()
    lr: Optional[float] = _resumed()
    samples: int = _resumed()
    estimator: str = _resumed()
    warm_start: Optional[str]
    #: ``--learn`` read into its parameter groups (None: every group)
    learn: Optional[tuple] = _resumed()
    checkpoint_every: Optional[int]
    resume: bool
    trust_code: bool
    quiet: bool
    plot: Optional[str]
    nproc: Optional[int]
    dist_timeout: Optional[float]
    max_memory: Optional[float]
    threads: Optional[int]
    #: the command line as given (``--nproc`` starts the ranks with it; the run lock records it), or
    #: None (a caller that parsed a list of its own: the process's command line is recorded)
    argv: Optional[tuple] = None

    @classmethod
    def from_args(cls, args) -> "TrainPlan":
        """The plan of ``savigp train``'s parsed arguments (an argparse namespace): ``--nproc`` and
        ``--dist-timeout`` checked, then ``--learn`` read into its groups
        (:func:`_parse_learn`); each failure a one-line :class:`CLIError`."""
        from .errors import CLIError

        given = vars(args)
        if given["nproc"] is not None and given["nproc"] < 1:
            raise CLIError(f"--nproc must be >= 1, got {given['nproc']}")
        cores = max(2, os.cpu_count() or 1)
        if given["nproc"] is not None and given["nproc"] > cores:  # (2^31 - 1 started processes until the machine gave out)
            raise CLIError(f"--nproc {given['nproc']}: the ranks run on this machine, at most one per core ({cores}); "
                           "across machines, torchrun (docs/cli.md, Data-parallel training)")
        if given["dist_timeout"] is not None and not given["dist_timeout"] > 0:
            raise CLIError(f"--dist-timeout must be > 0 seconds, got {given['dist_timeout']}")
        values = {f.name: given[f.name] for f in fields(cls) if f.name in given}
        for name in ("lik_option", "lik_param"):
            values[name] = None if values[name] is None else tuple(values[name])
        learn = _parse_learn(values["learn"])
        values["learn"] = None if learn is None else tuple(learn)
        values["argv"] = None if given.get("argv") is None else tuple(given["argv"])
        return cls(**values)

    def on_device(self, device: Optional[str]) -> "TrainPlan":
        """The same plan on ``device`` (a rank's own GPU)."""
        return replace(self, device=device)

    def resume_options(self) -> dict:
        """The options of :data:`RESUME_KEYS` as plain values (tuples as lists): what a model file
        records and ``--resume`` compares."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k in RESUME_KEYS for v in (getattr(self, k),)}

    @property
    def learning_rate(self) -> float:
        """``--lr``, else the optimizer's own default (its ``default_lr``, :mod:`savigp.training.optimizers`)."""
        return self.lr if self.lr is not None else OPTIMIZERS[self.optimizer].default_lr

    def fit_plan(self, **run):
        """The :class:`~savigp.training.plan.FitPlan` of this run: the one place where the command's
        options become :func:`savigp.fit`'s, shared by every fit of the run (the run itself, the
        two-stage fit's first stage, the search over K). Its length: ``--iterations`` or ``--epochs``;
        with ``--until-converged``, to convergence with ``--iterations`` as the cap and
        ``--time-budget``; a ``--kernel search`` run without either, the search's model
        (:data:`savigp.cli.searched_model.DEFAULT_STEPS` further steps). Then ``--batch-size``,
        ``--optimizer``, the learning rate (:attr:`learning_rate`), ``--samples``, ``--estimator``,
        ``--seed``, ``--threads``, ``--learn``'s groups, fit's reads at every ``--checkpoint-every``
        step (``callback_every``) and progress unless ``--quiet``. ``run``: fields of one fit (its
        state, callback, steps left, the groups of a stage) replacing those. Its batch size and
        length on the data (:meth:`~savigp.training.plan.FitPlan.batch_for`,
        :meth:`~savigp.training.plan.FitPlan.steps_for`) are what the model file records."""
        from ..training.plan import FitPlan
        from .searched_model import DEFAULT_STEPS

        if self.until_converged:
            length = {"max_iterations": self.iterations, "time_budget": self.time_budget}
        elif self.iterations is None and self.epochs is None:
            length = {"iterations": DEFAULT_STEPS}
        else:
            length = {"iterations": self.iterations, "epochs": self.epochs}
        options = {**length, "batch_size": self.batch_size, "optimizer": self.optimizer, "lr": self.learning_rate,
                   "num_samples": self.samples, "estimator": self.estimator, "seed": self.seed,
                   "threads": self.threads, "groups": self.learn, "callback_every": self.checkpoint_every,
                   "progress": not self.quiet}
        return FitPlan(**{**options, **run})


#: the options of ``train`` that a resumed run must repeat unchanged (iterations/epochs may grow),
#: read from the marks on :class:`TrainPlan`'s fields
RESUME_KEYS = tuple(f.name for f in fields(TrainPlan) if f.metadata.get("resume"))


def _read_fields(cls, args) -> dict:
    """The values of ``cls``'s fields in the parsed arguments ``args`` (an argparse namespace that
    holds every one of them)."""
    given = vars(args)
    return {f.name: given[f.name] for f in fields(cls)}


@dataclass(frozen=True, kw_only=True)
class SavedModelPlan:
    """The options ``savigp predict`` and ``savigp evaluate`` share: the model file and the CSV file
    (how it is read, which columns are the inputs), the Monte Carlo draws, the device, the memory
    limit, the threads and the user code the model file may run (see docs/cli.md)."""

    model: str
    data: str
    inputs: Optional[str]
    positional: bool
    header: Optional[bool]
    delimiter: str
    samples: int
    seed: int
    device: Optional[str]
    max_memory: Optional[float]
    likelihood: Optional[str]
    mean_function: Optional[str]
    trust_code: bool
    threads: Optional[int]

    @classmethod
    def from_args(cls, args):
        """The plan of the command's parsed arguments (an argparse namespace), ``--samples`` checked
        (a one-line :class:`CLIError`)."""
        from .checks import check_samples

        check_samples(args.samples)
        return cls(**_read_fields(cls, args))


@dataclass(frozen=True, kw_only=True)
class PredictPlan(SavedModelPlan):
    """The options of one ``savigp predict`` run: :class:`SavedModelPlan`'s and where the
    predictions go (``out``, ``-``: standard output), the latent columns, the additive parts'
    columns (``--parts``), the plot, ``--quiet``."""

    out: str
    latent: bool
    parts: bool
    quiet: bool
    plot: Optional[str]


@dataclass(frozen=True, kw_only=True)
class EvaluatePlan(SavedModelPlan):
    """The options of one ``savigp evaluate`` run: :class:`SavedModelPlan`'s, the target columns and
    ``--json``."""

    targets: Optional[str]
    json: bool


@dataclass(frozen=True, kw_only=True)
class ReportPlan(SavedModelPlan):
    """The options of one ``savigp report`` run: :class:`SavedModelPlan`'s (``data`` is the training
    CSV), the target columns, the test CSV, the page's title, where it goes and ``--quiet``."""

    out: str
    targets: Optional[str]
    test: Optional[str]
    title: Optional[str]
    quiet: bool


@dataclass(frozen=True, kw_only=True)
class DemoPlan:
    """The options of one ``savigp demo`` run: the folder it keeps its files in (None: a temporary
    one), the data's seed, ``--quiet`` and ``--threads``."""

    dir: Optional[str]
    seed: int
    quiet: bool
    threads: Optional[int]

    @classmethod
    def from_args(cls, args) -> "DemoPlan":
        """The plan of ``savigp demo``'s parsed arguments (an argparse namespace)."""
        return cls(**_read_fields(cls, args))
