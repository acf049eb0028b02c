"""The outcome of a kit (:func:`savigp.testing.check_likelihood`, ``check_kernel``,
``check_posterior``, ``check_mean_head``, ``check_estimator``): one :class:`Check` per property, a
:class:`Report` that lists them (:class:`LikelihoodReport` for likelihoods), and
:class:`CheckError` (:class:`LikelihoodCheckError`), raised with every failed check's message
(what was expected and what was got); :func:`run_checks` runs a kit's table of checks."""
from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
#: by default a kit says what a check is doing once it has run this long (seconds)
SLOW_SECONDS = 2.0


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


class Progress:
    """What a kit says while it runs, one short line at a time.

    ``verbose=None`` (the default): nothing for a check that ends within ``SLOW_SECONDS``; for a
    slower one, a line after ``SLOW_SECONDS`` saying what it is doing (from a timer, so that even
    one long call of the user's function is announced), a line per step it reports after that (at
    most one per ``SLOW_SECONDS``) and a line when it ends, with its time. ``verbose=True``: a line
    as every check starts and ends and every step; ``verbose=False``: nothing.

    Args:
        kit: the kit's name, leading every line.
        verbose: see above.
        emit: called with each line; default: print it to ``sys.stderr`` (looked up at each line).
        slow: the threshold in seconds (default ``SLOW_SECONDS``).
    """

    def __init__(self, kit: str, verbose: Optional[bool] = None, emit: Optional[Callable[[str], None]] = None,
                 slow: Optional[float] = None):
        self.kit, self.verbose = kit, verbose
        self.slow = float(SLOW_SECONDS if slow is None else slow)
        self._emit = emit
        self._lock = threading.Lock()
        self._timer: Optional[threading.Timer] = None
        self._name, self._started, self._status, self._last = "", 0.0, "", -1e300

    def _say(self, line: str) -> None:
        if self._emit is not None:
            self._emit(line)
        else:
            print(line, file=sys.stderr, flush=True)

    def _shown(self) -> bool:
        return self.verbose is True or (self.verbose is None and time.perf_counter() - self._started >= self.slow)

    def start(self, name: str) -> None:
        """A check starts."""
        with self._lock:
            self._name, self._started, self._status, self._last = name, time.perf_counter(), "", -1e300
        if self.verbose is True:
            self._say(f"{self.kit}: {name} ...")
        elif self.verbose is None:
            self._timer = threading.Timer(self.slow, self._announce, args=(name,))
            self._timer.daemon = True
            self._timer.start()

    def _announce(self, name: str) -> None:
        with self._lock:
            if name != self._name:
                return
            self._last = time.perf_counter()
            status = self._status
        self._say(f"{self.kit}: {name} is running ({status or 'working'}), "
                  f"{self._last - self._started:.0f} s so far")

    def step(self, line: str) -> None:
        """The running check tells what it is doing now (a round of quadrature or Monte Carlo)."""
        with self._lock:
            self._status = line
            now = time.perf_counter()
            show = self._shown() and (self.verbose is True or now - self._last >= self.slow)
            if show:
                self._last = now
        if show:
            self._say(f"{self.kit}: {self._name}: {line} ({now - self._started:.1f} s)")

    def end(self, status: str, message: str = "") -> None:
        """The running check ended with ``status``."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        with self._lock:
            elapsed, name, self._name = time.perf_counter() - self._started, self._name, ""
        if self.verbose is True or (self.verbose is None and elapsed >= self.slow):
            short = message if len(message) <= 100 else message[:97] + "..."
            self._say(f"{self.kit}: {name} {status} in {elapsed:.1f} s" + (f" ({short})" if short else ""))


def run_checks(report: Report, checks: Sequence[tuple], problem, raise_on_failure: bool = True,
               error: type = CheckError, progress: Optional[Progress] = None) -> Report:
    """Run ``checks`` (``(name, check, names of the checks whose failure makes it meaningless)``;
    ``check(problem)`` returns ``(status, message)``) into ``report``, in order: a check whose
    prerequisite failed is skipped, one that raises has found a failure. ``progress`` (a
    :class:`Progress`) hears each check start and end. Raises ``error(report)`` when
    ``raise_on_failure`` and a check failed."""
    for name, run, needs in checks:
        broken = [n for n in needs if report[n].status == FAILED]
        if broken:
            report.checks.append(Check(name, SKIPPED, f"not run: {', '.join(broken)} failed"))
            continue
        if progress is not None:
            progress.start(name)
        try:
            status, message = run(problem)
        except Exception as err:  # a check that raises has found a failure: report it
            status, message = FAILED, f"raised {type(err).__name__}: {err}"
        except BaseException:  # KeyboardInterrupt: stop the progress timer, then let it through
            if progress is not None:
                progress.end("interrupted")
            raise
        if progress is not None:
            progress.end(status, message)
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
