"""The paper's experiments and the measurements of docs/performance.md, one script each, run from
the repository root as ``python -m experiments.<name> ...`` (see docs/experiments.md). They share
one helper library, :mod:`experiments._common` (options taken from the ``savigp`` command line's
parser, data, metrics, results and figures written atomically), and import it and each other by
their package names."""
