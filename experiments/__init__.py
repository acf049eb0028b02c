"""The paper's experiments and the measurements of docs/performance.md, one script each, run from
the repository root as ``python -m experiments.<name> ...`` (see docs/experiments.md). They share
one helper library, :mod:`experiments._common` (options taken from the ``savigp`` command line's
parser, data, metrics, results and figures written atomically), and import it and each other by
their package names."""
import os
import signal
import sys


def _interrupted(kind, value, traceback, previous=sys.excepthook):
    """``python -m experiments.<name>``'s Ctrl-C, wherever it lands (the imports, a fit, a write):
    one line on stderr naming the script instead of a traceback; Python then ends the process as
    killed by SIGINT (status 130 in a shell), as before. Results already written are whole (they are
    written atomically, :mod:`experiments._common`); the one being written is not written."""
    if not issubclass(kind, KeyboardInterrupt):
        return previous(kind, value, traceback)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (a second Ctrl-C while this line is printed)
    name = os.path.splitext(os.path.basename(sys.argv[0]))[0]
    print(f"\npython -m experiments.{name}: interrupted", file=sys.stderr)


if sys.argv[:1] == ["-m"]:  # run as python -m experiments.<name> (argv[0] is "-m" while its package is imported)
    sys.excepthook = _interrupted
