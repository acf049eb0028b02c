"""Every list of choices the engine, the ``savigp`` command, the model-file schema and the docs
share, each written once, importable without torch (the command's parser,
:mod:`savigp.cli.parser`, reads them to print ``--help`` and check arguments before anything
heavy is imported).

Lists whose entries are classes are :class:`Registry` objects: a name maps to
``"module:attribute"``, imported on first use, or to the object itself. The model builds from
them (:data:`KERNELS` in :class:`~savigp.model.SAVIGP`, :data:`POSTERIORS` in
:func:`~savigp.posteriors.make_posterior`, :data:`MEAN_HEADS` in
:func:`~savigp.mean_heads.make_mean_head`, :data:`ESTIMATORS` in
:func:`~savigp.estimators.make_estimator`), the command's ``choices=`` and the schema's
``Str(choices=...)`` read them when they check, and ``tests/docs/test_choices_in_docs.py`` keeps
the docs' lists equal to them. A new kernel, posterior family, mean head or estimator is its own
class and one line here (or ``KERNELS.register("name", MyKernel)`` at run time)::

    KERNELS = Registry("kernel", {..., "periodic": "mypackage.kernels:Periodic"})
"""
from __future__ import annotations

import importlib
from typing import Any, Iterator, Mapping, Optional


class Registry(Mapping):
    """Names -> entries, in order; ``registry[name]`` is the entry (imported on first use when it is
    a ``"module:attribute"`` string). ``name in registry`` and iteration see the canonical names
    only; ``aliases`` are further names :meth:`get` accepts (older spellings).

    Args:
        what: the option's name in messages (``"kernel"``).
        entries: ``{name: "module:attribute" or object}``.
        aliases: ``{alias: name}``.
    """

    def __init__(self, what: str, entries: Mapping[str, Any], aliases: Optional[Mapping[str, str]] = None):
        self.what = what
        self._entries: dict[str, Any] = dict(entries)
        self._aliases: dict[str, str] = dict(aliases or {})

    # ------------------------------------------------------------ reading
    def names(self) -> tuple:
        """The canonical names, in registration order."""
        return tuple(self._entries)

    def canonical(self, name: str) -> str:
        """``name`` or the name its alias stands for.

        Raises:
            ValueError: naming the option, the names it takes and ``name``.
        """
        name = self._aliases.get(name, name)
        if name not in self._entries:
            raise ValueError(f"{self.what} must be one of {', '.join(self._entries)}, got {name!r}")
        return name

    def resolve(self, name: str) -> str:
        """The canonical name ``name`` stands for if it is an alias, else ``name`` unchanged (not
        checked: the command's ``type=`` for ``--posterior``, whose ``choices=`` then check it)."""
        return self._aliases.get(name, name)

    def get(self, name: str, default: Any = None) -> Any:  # noqa: D102 - Mapping's get, with aliases
        try:
            return self[name]
        except KeyError:
            return default

    def __getitem__(self, name: str) -> Any:
        key = self._aliases.get(name, name)
        if key not in self._entries:
            raise KeyError(name)
        entry = self._entries[key]
        if isinstance(entry, str):
            module, _, attribute = entry.partition(":")
            entry = self._entries[key] = getattr(importlib.import_module(module), attribute)
        return entry

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def name_of(self, obj: Any) -> Optional[str]:
        """The name whose entry is ``obj`` (an exact match, e.g. the class of a model's kernel), or None."""
        for name in self._entries:
            if self[name] is obj:
                return name
        return None

    def __repr__(self) -> str:
        return f"Registry({self.what!r}, {list(self._entries)})"

    # ------------------------------------------------------------ writing
    def register(self, name: str, entry: Any = None, *, replace: bool = False):
        """Add ``entry`` (an object or ``"module:attribute"``) under ``name``; without ``entry``, a
        decorator. Returns the entry.

        Raises:
            ValueError: ``name`` is taken (pass ``replace=True``) or is not a plain lower-case name.
        """
        if entry is None:
            return lambda obj: self.register(name, obj, replace=replace)
        if not isinstance(name, str) or not name or name != name.strip() or not name.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"a {self.what} name is letters, digits, '-' and '_', got {name!r}")
        if (name in self._entries or name in self._aliases) and not replace:
            raise ValueError(f"{self.what} {name!r} is registered already (replace=True replaces it)")
        self._entries[name] = entry
        return entry

    def unregister(self, name: str) -> None:
        """Remove ``name`` (a KeyError when it is not registered)."""
        del self._entries[name]


#: the covariance functions (:mod:`savigp.kernels`); a class built as ``cls(D, Q, **options)`` (and
#: ``lengthscale=`` where its ``option_units`` puts one in the inputs' units); expressions combine them (``rbf + periodic(0) * rbf(0)``)
KERNELS = Registry("kernel", {
    "rbf": "savigp.kernels:RBF", "matern12": "savigp.kernels:Matern12", "matern32": "savigp.kernels:Matern32",
    "matern52": "savigp.kernels:Matern52", "rq": "savigp.kernels:RationalQuadratic",
    "periodic": "savigp.kernels:Periodic", "linear": "savigp.kernels:Linear",
    "constant": "savigp.kernels:Constant", "white": "savigp.kernels:White",
    "additive-matern": "savigp.kernels.fourier_features:AdditiveMatern",
    "cosine": "savigp.kernels.cosine:Cosine",
}, aliases={"se": "rbf", "exponential": "matern12", "rational_quadratic": "rq", "rational-quadratic": "rq"})
#: the posterior families (:mod:`savigp.posteriors`); a :class:`~savigp.posteriors.Posterior` class built
#: by its ``build(num_latent, num_inducing, num_components, generator=, entropy=, entropy_samples=)``.
#: ``"diag"`` is diagonal in whitened coordinates (as GPflow's ``q_diag`` and GPyTorch's mean-field
#: distribution under whitening; ``"diag-whitened"`` before), ``"diag-u"`` the paper's diagonal
#: mixture over u (Bonilla et al. 2019, §6.2; ``"diag"`` in model files of format versions 2-3)
POSTERIORS = Registry("posterior", {
    "full": "savigp.posteriors.full:FullMixture",
    "diag": "savigp.posteriors.diagonal:DiagonalMixture",
    "diag-u": "savigp.posteriors.u_diagonal:UDiagonalMixture",
    "joint": "savigp.posteriors.joint:JointGaussian",
}, aliases={"fg": "full", "diagonal": "diag", "diag-whitened": "diag", "mog": "diag-u"})
#: the mean heads (``mean_basis=``, Salimbeni et al. 2018); a class built as
#: ``cls(X, num_latent, size, seed=, **options)``, then given the posterior (``attach``)
MEAN_HEADS = Registry("mean_basis", {
    "orthogonal": "savigp.mean_heads:OrthogonalMeanHead",
    "decoupled": "savigp.mean_heads:DecoupledMeanHead",
    "hybrid": "savigp.mean_heads:HybridMeanHead",
})
#: the estimators of the expected log-likelihood (:mod:`savigp.estimators`, one module each); an
#: :class:`~savigp.estimators.Estimator` class, built as ``cls()`` and called once per ELBO evaluation with
#: the batch's :class:`~savigp.posteriors.marginals.LatentMarginals`; ``"auto"`` stands for one of the others
#: (:func:`~savigp.estimators.resolve_estimator`)
ESTIMATORS = Registry("estimator", {
    "auto": "savigp.estimators.automatic:Automatic",
    "score": "savigp.estimators.score:ScoreFunction",
    "score-nocv": "savigp.estimators.score_nocv:ScoreFunctionNoCV",
    "reparam": "savigp.estimators.reparam:Reparameterization",
    "quadrature": "savigp.estimators.quadrature:Quadrature",
    "closed-form": "savigp.estimators.closed_form:ClosedForm",
})
#: the optimizers of :func:`savigp.fit` (``optimizer=``, the command's ``--optimizer``); a class of
#: :mod:`savigp.training.optimizers` declaring what fit asks of it (``first_order``, ``line_search``,
#: ``takes_groups``, ``graph_obstacle``, ``default_lr``) and building the torch optimizer (``make``)
OPTIMIZERS = Registry("optimizer", {
    "adam": "savigp.training.optimizers:Adam", "adadelta": "savigp.training.optimizers:Adadelta",
    "lbfgs": "savigp.training.optimizers:LBFGS",
})
#: the parameter groups that :func:`savigp.fit` trains (``groups=``, the command's ``--learn``)
PARAMETER_GROUPS = ("posterior", "kernel", "inducing", "likelihood", "prior_mean", "mean_head")
#: the likelihood classes by name (``savigp train --likelihood NAME``, and a model file's name of a class
#: registered here); ``likelihoods/`` knows no names. The command's options of each are in
#: :mod:`savigp.cli.likelihood_options` (``savigp.cli.register_likelihood`` adds both at run time)
LIKELIHOODS = Registry("likelihood", {
    "gaussian": "likelihoods:Gaussian", "logistic": "likelihoods:Logistic", "softmax": "likelihoods:Softmax",
    "poisson": "likelihoods:Poisson", "warped": "likelihoods:WarpedGaussian", "student-t": "likelihoods:StudentT",
    "gprn": "likelihoods:GPRN", "seismic": "likelihoods:Seismic", "multi-gaussian": "likelihoods:MultiGaussian",
    "probit": "likelihoods:Probit",
})
#: the entropy estimates of a mixture with K > 1 components and the default
#: (:mod:`savigp.posteriors.entropy`)
ENTROPY_ESTIMATES = ("pairwise", "bound", "mc")
DEFAULT_ENTROPY = "pairwise"
#: how the command places the initial inducing inputs (``--inducing-init``; :mod:`savigp.inducing`
#: has a further ``"kmeans-torch"`` for Python callers)
INDUCING_INITS = ("kmeans", "subset")
#: the floating-point types a model is built in (``--dtype``, a model file's ``dtype``)
DTYPES = ("float32", "float64")
