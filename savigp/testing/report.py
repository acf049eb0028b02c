"""The outcome of a kit (:func:`savigp.testing.check_likelihood`, ``check_kernel``,
``check_posterior``, ``check_mean_head``, ``check_estimator``): one :class:`Check` per property, a
:class:`Report` that lists them (:class:`LikelihoodReport` for likelihoods), and
:class:`CheckError` (:class:`LikelihoodCheckError`), raised with every failed check's message
(what was expected and what was got); :func:`run_checks` runs a kit's table of checks."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

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
class Report:
    """Every check a kit (``kit``: ``check_likelihood``, ``check_kernel``, ...) ran on one
    ``subject``, in the order they ran."""

    subject: str
    checks: list = field(default_factory=list)
    kit: str = "check"

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
        return (f"{self.kit}({self.subject}): {counts[PASSED]} passed, {counts[FAILED]} failed, "
                f"{counts[SKIPPED]} skipped")

    def __str__(self) -> str:
        return "\n".join([self.summary()] + ["  " + str(c) for c in self.checks])


class CheckError(AssertionError):
    """Raised by a kit (``raise_on_failure=True``) listing every failed check; ``report`` holds them all."""

    def __init__(self, report: Report):
        self.report = report
        lines = [report.summary()] + ["  " + str(c) for c in report.failures]
        super().__init__("\n".join(lines))


def run_checks(report: Report, checks: Sequence[tuple], problem, raise_on_failure: bool = True,
               error: type = CheckError) -> Report:
    """Run ``checks`` (``(name, check, names of the checks whose failure makes it meaningless)``;
    ``check(problem)`` returns ``(status, message)``) into ``report``, in order: a check whose
    prerequisite failed is skipped, one that raises has found a failure. Raises ``error(report)``
    when ``raise_on_failure`` and a check failed."""
    for name, run, needs in checks:
        broken = [n for n in needs if report[n].status == FAILED]
        if broken:
            report.checks.append(Check(name, SKIPPED, f"not run: {', '.join(broken)} failed"))
            continue
        try:
            status, message = run(problem)
        except Exception as err:  # a check that raises has found a failure: report it
            status, message = FAILED, f"raised {type(err).__name__}: {err}"
        report.checks.append(Check(name, status, message))
    if raise_on_failure and not report.passed:
        raise error(report)
    return report


@dataclass
class LikelihoodReport(Report):
    """Every check :func:`savigp.testing.check_likelihood` ran on one likelihood, in order."""

    kit: str = "check_likelihood"

    @property
    def likelihood(self) -> str:
        return self.subject


class LikelihoodCheckError(CheckError):
    """Raised by ``check_likelihood(..., raise_on_failure=True)``; ``report`` holds every check."""
