"""Names of choices that the engine and the ``savigp`` command share, importable without torch
(the command's parser, :mod:`savigp.cli.parser`, reads them to print ``--help`` and check
arguments before anything heavy is imported)."""

#: the expected log-likelihood estimators (:mod:`savigp.expected_log_lik`)
ESTIMATORS = ("auto", "score", "score-nocv", "reparam", "quadrature", "closed-form")
#: the parameter groups that :func:`savigp.fit` trains (``groups=``, the command's ``--learn``)
PARAMETER_GROUPS = ("posterior", "kernel", "inducing", "likelihood", "prior_mean", "mean_head")
#: the command-line names of the built-in likelihood classes, in the order in which
#: ``likelihoods/__init__.py`` registers them (:func:`likelihoods.registry.names`; a test keeps the
#: two equal): ``savigp train --help`` lists them without importing the likelihoods (and torch)
BUILTIN_LIKELIHOODS = ("gaussian", "logistic", "softmax", "poisson", "warped", "student-t", "gprn", "seismic",
                       "multi-gaussian")
#: the entropy estimates of a mixture with K > 1 components and the default
#: (:mod:`savigp.posteriors.entropy`)
ENTROPY_ESTIMATES = ("pairwise", "bound", "mc")
DEFAULT_ENTROPY = "pairwise"
