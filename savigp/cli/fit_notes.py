"""What :func:`savigp.fit` has to say, on the command line: each note of its history
(``history.notes``, :class:`savigp.training.notes.Note`) printed once, as ``savigp train: note: ...``,
with the command's options in the advice where fit's names its own arguments.

fit warns its notes with their categories; the command runs fit with those categories silenced
(:func:`fit_silenced`: by category, never by a message's text) and prints the notes from the
history instead (:func:`note_lines`), once, after its summary line. The warnings fit gives at its
start and the command says in its own words before the fit (a factorized q(u) learning a dense
model's hyper-parameters, a score-function estimator for a differentiable likelihood) are silenced
the same way.
"""
from __future__ import annotations

import contextlib
import warnings

_GOES_ON = (" (the same command with --resume, --until-converged and a larger --iterations cap, or a larger "
            "--time-budget, goes on in its rounds)")

#: what follows a note's message on the command line, by the note's kind, where fit's advice names
#: Python arguments (``{advice}``: fit's); a kind not here: fit's advice as it is
CLI_ADVICE = {
    "still rising": (": {advice} (the same command with --resume and a larger --iterations continues from the "
                     "model; without --iterations, savigp train trains until the ELBO stops rising)"),
    "cap": _GOES_ON,
    "time budget": _GOES_ON,
    "fall": "; a lower learning rate (--lr) keeps a sharp optimum",
}


def fit_warnings() -> tuple:
    """The warning categories of :func:`savigp.fit` that the command says in its own lines."""
    from ..training import ConvergenceWarning
    from ..training.component_checks import ComponentWarning
    from ..training.fitting import DifferentiableHintWarning
    from ..training.starts import LocalOptimumWarning
    from ..training.warm_start import FactorizedHyperparameterWarning

    return (ConvergenceWarning, ComponentWarning, LocalOptimumWarning, FactorizedHyperparameterWarning,
            DifferentiableHintWarning)


@contextlib.contextmanager
def fit_silenced():
    """Within: :func:`fit_warnings`' categories ignored (the caller prints ``history.notes``)."""
    with warnings.catch_warnings():
        for category in fit_warnings():
            warnings.simplefilter("ignore", category)
        yield


def note_lines(notes: list, quiet: bool, prefix: str = "savigp train", advise: bool = True) -> list:
    """One line per note of ``notes`` (a history's), in the command's words: a note of a warning
    category always, a record (what the starts did, a rejected L-BFGS step) unless ``quiet``;
    without ``advise``, the messages alone (a stage of the run, which the command's advice does not
    fit)."""
    lines = []
    for note in notes:
        if note.category is None and quiet:
            continue
        if note.kind == "starts":
            lines.append(f"{prefix}: {note.message}")
            continue
        advice = CLI_ADVICE.get(note.kind)
        if not advise:
            said = note.message
        elif advice is not None:
            said = f"{note.message}{advice.format(advice=note.advice)}"
        else:
            said = str(note)
        lines.append(f"{prefix}: note: {said}")
    return lines
