"""The ``savigp`` command line: ``train``, ``predict``, ``evaluate``, ``report`` and ``demo``.

    savigp train DATA.csv --targets y --likelihood gaussian --out model.pt
    savigp predict model.pt TEST.csv --out predictions.csv
    savigp evaluate model.pt TEST.csv --targets y [--json]
    savigp report model.pt DATA.csv --out report.html
    savigp demo

Exit status: 0 success; 2 bad input (files, columns, labels, options; one line on stderr naming
the file, line and column); 1 a failure while running (e.g. training diverged); 3 the likelihood
returned NaN or inf (a model problem: the line names the function, the data file's lines and the
f values); 130 interrupted (Ctrl-C or SIGTERM; ``train`` first writes a checkpoint that ``--resume``
continues from; an interrupt after the finished model was written: 0, saying so).

Model files are written atomically (a temporary file in the same folder, fsync, ``os.replace``),
so a failed or interrupted run never truncates or overwrites an existing model. Checkpoints go to
``MODEL.ckpt`` next to ``--out MODEL``; the finished model replaces ``MODEL`` and the checkpoint is
removed. See docs/cli.md.

The pieces: :mod:`.parser` (options and help), :mod:`.train` with :mod:`.checkpoint`
(:class:`~savigp.cli.checkpoint.Checkpointer`) and :mod:`.ranks`, :mod:`.predict` (``predict`` and ``evaluate``), :mod:`.report`,
:mod:`.warm_start` (``train --warm-start`` and ``--learn``), :mod:`.two_stage` (``train --hypers``: a factorized
posterior's two-stage fit, the default), :mod:`.kernel_option` (``train --kernel`` expressions and
``--fourier-features``), :mod:`.demo`, :mod:`.likelihood_options`
and :mod:`.user_options` (``--likelihood`` and its options), :mod:`.checks` and :mod:`.columns`
(options and columns checked), :mod:`.errors`.
"""
from __future__ import annotations

import os
import sys

from .errors import (EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_NON_FINITE, EXIT_OK, CLIError,
                     UserCodeExit, one_line)
from .parser import build_parser
from .. import settings

__all__ = ["main", "build_parser", "CLIError", "UserCodeExit", "TEST_SIGINT_ENV", "EXIT_OK", "EXIT_FAILURE",
           "EXIT_BAD_INPUT", "EXIT_INTERRUPTED", "EXIT_NON_FINITE", "cmd_train", "cmd_predict", "cmd_evaluate", "cmd_report",
           "cmd_demo", "prediction_table", "format_metrics", "register_likelihood"]

#: the command functions by name (each takes the parsed arguments, returns the exit status), as
#: ``submodule:function``: imported when the command runs, so that ``--help`` and argument errors
#: never import torch, numpy or scipy (this module and :mod:`.parser` import neither)
COMMANDS = {"train": "train:cmd_train", "predict": "predict:cmd_predict", "evaluate": "predict:cmd_evaluate",
            "report": "report:cmd_report", "demo": "demo:cmd_demo"}
_LAZY = {"cmd_train": "train", "cmd_predict": "predict", "cmd_evaluate": "predict", "cmd_demo": "demo",
         "cmd_report": "report",
         "prediction_table": "predict", "format_metrics": "predict", "TEST_SIGINT_ENV": "checkpoint",
         "register_likelihood": "likelihood_options"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def command(name: str):
    """The function of the command ``name`` (imported now)."""
    import importlib

    module, function = COMMANDS[name].split(":")
    return getattr(importlib.import_module(f".{module}", __name__), function)


class _NeverRaised(Exception):
    """Stands for an exception class whose module was never imported: no error is one of it."""


def _raised(module: str, name: str) -> type:
    """The exception class ``name`` of ``module`` when that module has been imported (an instance
    can exist only then), else :class:`_NeverRaised`: ``main``'s ``except`` clauses import nothing,
    so ``predict`` and ``evaluate`` never import the training package (0.1-0.2 s of their start)."""
    loaded = sys.modules.get(module)
    return getattr(loaded, name) if loaded is not None else _NeverRaised


def _out_of_memory(err: MemoryError) -> str:
    """The advice for a MemoryError, by where it happened: reading a CSV file, or predicting or
    evaluating on its rows, names the file, its size or its rows (:class:`savigp.io.csv_data.TableMemoryError`);
    elsewhere (training), the run's own sizes."""
    from ..io.csv_data import TableMemoryError  # (imported by every command that reads a file)

    if isinstance(err, TableMemoryError):
        return one_line(err)
    return "out of memory (fewer --samples, or a smaller --batch-size for train, needs less)"


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _reports() -> bool:
    """Whether this process prints the one line of bad input or an interrupt: not a rank other
    than its machine's first of a ``--nproc`` or ``torchrun`` run (every rank reads the same input
    and meets the same error; the first says it once)."""
    if not (os.environ.get("RANK") and os.environ.get("WORLD_SIZE")):
        return True
    return os.environ.get("LOCAL_RANK", os.environ["RANK"]).strip() in ("", "0")


def main(argv=None) -> int:
    """Run the ``savigp`` command with ``argv`` (default ``sys.argv[1:]``); returns the exit status.
    A SIGTERM (what a cluster scheduler sends before it kills) is a Ctrl-C: ``train`` checkpoints
    and exits with status 130; a signal that arrives while an error or an interrupt is being
    reported ends the command with that one line too, never a traceback."""
    import signal

    try:
        previous = signal.signal(signal.SIGTERM, _interrupt)
    except ValueError:  # not the main thread
        previous = None
    try:
        return _main(argv)
    except KeyboardInterrupt:  # a second signal while the first, or an error, was being reported
        if _reports():
            print("\nsavigp: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main(argv) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors (argparse prints them)
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return EXIT_BAD_INPUT
    args.argv = list(sys.argv[1:] if argv is None else argv)
    prefix = f"savigp {args.command}: error: "
    if getattr(args, "threads", None) is not None:
        most = max(1024, os.cpu_count() or 1)  # (2^31 - 1 threads failed inside torch: an internal error)
        if not 1 <= args.threads <= most:
            print(prefix + f"--threads must be between 1 and {most}, got {args.threads}", file=sys.stderr)
            return EXIT_BAD_INPUT
        import torch

        torch.set_num_threads(args.threads)
    # (else train's fit, and predict and evaluate once they know the model and the rows, choose by size)
    if settings.debug():
        return command(args.command)(args)
    try:
        return command(args.command)(args)
    except KeyboardInterrupt:
        if _reports():
            print(f"\nsavigp {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except _raised("savigp.training.distributed", "DistributedError") as err:  # another rank died or hung; its checkpoint (rank 0's) is intact
        print(prefix + one_line(err), file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_FAILURE)  # not sys.exit: gloo's threads abort the interpreter's exit after a failed collective
    except (_raised("savigp.training.loop", "TrainingDiverged"), _raised("savigp.linalg.cholesky", "CholeskyError"),
            UserCodeExit) as err:
        print(prefix + one_line(err), file=sys.stderr)
        return EXIT_FAILURE
    except _raised("savigp.estimators.nonfinite", "NonFiniteLogProb") as err:  # a model problem, not bad input
        print(prefix + one_line(err), file=sys.stderr)
        return EXIT_NON_FINITE
    except MemoryError as err:
        print(prefix + _out_of_memory(err), file=sys.stderr)
        return EXIT_FAILURE
    except SystemExit as err:  # user code (a likelihood) called sys.exit: its failure, not a result
        print(prefix + f"a user function called sys.exit({err.code!r})", file=sys.stderr)
        return EXIT_FAILURE
    except (ValueError, TypeError) as err:  # DataError, CLIError, ModelFileError, LikelihoodImportError, engine checks
        if _reports():
            print(prefix + one_line(err), file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # e.g. `savigp predict ... --out - | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILURE
    except OSError as err:
        where = f"{err.filename}: " if getattr(err, "filename", None) else ""
        print(prefix + where + (err.strerror or one_line(err)), file=sys.stderr)
        return EXIT_FAILURE
    except Exception as err:  # a bug: say so in one line, with a way to get the traceback
        print(prefix + f"internal error: {type(err).__name__}: {one_line(err)} "
              "(set SAVIGP_DEBUG=1 for a traceback)", file=sys.stderr)
        return EXIT_FAILURE

