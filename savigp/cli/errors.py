"""Exit statuses and the errors of the ``savigp`` command line.

Exit status: 0 success; 2 bad input (files, columns, labels, options; one line on stderr naming
the file, line and column); 1 a failure while running (e.g. training diverged); 3 the likelihood
returned NaN or inf (a model problem); 130 interrupted.
"""
from __future__ import annotations

EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
#: the likelihood returned NaN or inf (a model problem, not bad input)
EXIT_NON_FINITE = 3


class CLIError(ValueError):
    """A bad command line or input; reported as one line, exit status 2."""


class UserCodeExit(RuntimeError):
    """User code (a likelihood or mean function) failed during training: it raised, called
    ``sys.exit`` or raised ``KeyboardInterrupt`` itself. A failure while running (exit status 1),
    not bad input and not the end of the command; the message names the step."""


def one_line(err: BaseException) -> str:
    """``str(err)`` on one line (whitespace runs collapsed), or the error's type name when empty."""
    return " ".join(str(err).split()) or type(err).__name__
