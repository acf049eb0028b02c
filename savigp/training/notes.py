"""What :func:`savigp.fit` has to say at the end of a run, as data: one :class:`Note` per event
(the ELBO still rising, the cap or the time budget reached, a fall below the best round, a local
optimum, a mixture using fewer components than it has, an L-BFGS step rejected, what the starts and
the move did), kept in ``history.notes`` (:class:`savigp.training.loop.TrainingHistory`).

fit warns each note of a warning ``category`` once, at its end, with that category
(:func:`warn`); a caller that reports the notes itself (the ``savigp`` command) silences those
categories and prints ``history.notes``, each note once, in its own words for the advice
(``kind`` says which note it is).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Note:
    """One thing a run did that a user should know of.

    Attributes:
        kind: which event (``"still rising"``, ``"cap"``, ``"time budget"``, ``"fall"``,
            ``"local optimum"``, ``"components"``, ``"lbfgs"``, ``"starts"``).
        message: what happened, one line.
        advice: what to try, in Python's words (fit's arguments), or ``""``.
        category: the warning class fit warns it with (None: a record, not a warning).
    """

    kind: str
    message: str
    advice: str = ""
    category: Optional[type] = None

    def __str__(self) -> str:
        """The line: the message and, after ``"; "``, the advice."""
        return f"{self.message}; {self.advice}" if self.advice else self.message

    def __contains__(self, text: str) -> bool:
        """Whether ``text`` is part of the line (``"rejected" in note``, as in the line it was)."""
        return text in str(self)


def warn(notes: list, stacklevel: int) -> None:
    """``warnings.warn("savigp.fit: <note>", note.category)`` for each note of ``notes`` that has a
    category; ``stacklevel`` counted from the caller of this function."""
    for note in notes:
        if note.category is not None:
            warnings.warn(f"savigp.fit: {note}", note.category, stacklevel=stacklevel + 1)
