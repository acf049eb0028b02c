"""The outcome of :func:`savigp.testing.check_likelihood`: one :class:`Check` per property, a
:class:`LikelihoodReport` that lists them, and :class:`LikelihoodCheckError`, raised with every
failed check's message (what was expected and what was got)."""
from __future__ import annotations

from dataclasses import dataclass, field

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


@dataclass
class Check:
    """One checked property: its ``name``, ``status`` (``"passed"``, ``"failed"`` or ``"skipped"``)
    and a ``message`` (for a failure: what was expected and what was got; for a skip: why)."""

    name: str
    status: str
    message: str = ""

    @property
    def passed(self) -> bool:
        """True unless the check failed (a skipped check did not fail)."""
        return self.status != FAILED

    def __str__(self) -> str:
        text = f"{self.status.upper():7s} {self.name}"
        return f"{text}: {self.message}" if self.message else text


@dataclass
class LikelihoodReport:
    """Every check run on one likelihood, in the order they ran."""

    likelihood: str
    checks: list = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def failures(self) -> list:
        return [c for c in self.checks if c.status == FAILED]

    def __getitem__(self, name: str) -> Check:
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(f"no check named {name!r}; checks: {[c.name for c in self.checks]}")

    def summary(self) -> str:
        counts = {s: sum(c.status == s for c in self.checks) for s in (PASSED, FAILED, SKIPPED)}
        return (f"check_likelihood({self.likelihood}): {counts[PASSED]} passed, {counts[FAILED]} failed, "
                f"{counts[SKIPPED]} skipped")

    def __str__(self) -> str:
        return "\n".join([self.summary()] + ["  " + str(c) for c in self.checks])


class LikelihoodCheckError(AssertionError):
    """Raised by ``check_likelihood(..., raise_on_failure=True)``; ``report`` holds every check."""

    def __init__(self, report: LikelihoodReport):
        self.report = report
        lines = [report.summary()] + ["  " + str(c) for c in report.failures]
        super().__init__("\n".join(lines))
