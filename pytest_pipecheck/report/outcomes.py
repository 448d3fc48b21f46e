"""The tests' own outcomes, for the reports: a check result alone cannot say that a run was good.

A test can pass all its checks and then fail an assertion, error in teardown, or take its xdist
worker down; a collection error runs no test at all. The JSON and HTML reports take their verdict
(``ok``, the headline) from these outcomes as well as from the check results, so a report never
reads "every check passed" for a run that failed.

:class:`TestOutcomes` is fed every ``TestReport`` and failed or skipped ``CollectReport`` on the process that
writes the reports (the controller under pytest-xdist, which also receives the report xdist makes
for a test whose worker crashed). One outcome per test, the worst of its phases:

``crashed``   the worker running it died (xdist's report for the crashed item)
``failed``    its call failed (including a strict xpass)
``error``     its setup or teardown failed, or a collector failed to collect (the node id is the collector's)
``skipped``   also a collector skipped as a whole (a module's ``pytest.importorskip``): its node id
``not run``   collected but no report of its call or of a skip arrived (an interrupted run)
``xpassed``   marked xfail (not strict) and passed
``passed`` ``skipped`` ``xfailed``  as pytest says
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["BAD_OUTCOMES", "OUTCOMES", "TestOutcome", "TestOutcomes"]

OUTCOMES = ("passed", "failed", "error", "crashed", "not run", "skipped", "xfailed", "xpassed")
#: outcomes that make a run not ok
BAD_OUTCOMES = frozenset({"failed", "error", "crashed", "not run"})
_MAX_MESSAGE = 500


@dataclass(frozen=True)
class TestOutcome:
    """One test's outcome, the phase that decided it and a one-line reason (for a bad outcome or a skip)."""

    __test__ = False  # not a pytest test class, whatever its name says

    nodeid: str
    outcome: str
    when: str
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"nodeid": self.nodeid, "outcome": self.outcome, "when": self.when, "message": self.message}


def _message(report: Any) -> str:
    longrepr = getattr(report, "longrepr", None)
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (file, line, reason)
        text = str(longrepr[2])
    else:
        crash = getattr(getattr(longrepr, "reprcrash", None), "message", None)
        text = str(crash) if crash else str(longrepr)
    lines = [line for line in text.strip().splitlines() if line.strip()]
    first = lines[0].strip() if lines else ""
    return first[:_MAX_MESSAGE]


def _crashed(report: Any) -> bool:
    # pytest-xdist reports a test whose worker died with when="???" ("worker 'gw0' crashed while running ...")
    return getattr(report, "when", None) == "???"


class TestOutcomes:
    """The outcome of every test of the run, built from pytest's reports."""

    __test__ = False

    def __init__(self) -> None:
        self._phases: dict[str, dict[str, tuple[str, str]]] = {}
        self._expected: list[str] = []

    def expect(self, nodeids: Iterable[str]) -> None:
        """The collected tests: one that never reports is counted as ``not run``. Only the first
        call counts (under xdist every worker reports the same collection)."""
        if not self._expected:
            self._expected = list(nodeids)

    def add(self, report: Any) -> None:
        """Take one ``TestReport`` (any phase), or a ``CollectReport`` (a failed or skipped one)."""
        nodeid = str(getattr(report, "nodeid", "") or "?")
        when = getattr(report, "when", None)
        if when is None:  # a CollectReport
            if getattr(report, "failed", False):
                self._phases.setdefault(nodeid, {})["collect"] = ("error", _message(report))
            elif getattr(report, "skipped", False):
                # a module skipped as a whole (pytest.importorskip of an optional kernel library): its tests
                # were never collected, so it stands for them, with its reason
                self._phases.setdefault(nodeid, {})["collect"] = ("skipped", _message(report))
            return
        wasxfail = hasattr(report, "wasxfail")
        if _crashed(report):
            outcome = "crashed"
        elif report.failed:
            outcome = "failed" if when == "call" else "error"
        elif report.skipped:
            outcome = "xfailed" if wasxfail else "skipped"
        else:
            outcome = "xpassed" if wasxfail and when == "call" else "passed"
        message = _message(report) if outcome not in ("passed", "xpassed") else ""
        self._phases.setdefault(nodeid, {})[str(when)] = (outcome, message)

    @staticmethod
    def _decide(nodeid: str, phases: dict[str, tuple[str, str]]) -> TestOutcome:
        for when in ("???", "collect"):
            if when in phases:
                return TestOutcome(nodeid, phases[when][0], when, phases[when][1])
        call = phases.get("call")
        if call is not None and call[0] == "failed":
            return TestOutcome(nodeid, "failed", "call", call[1])
        for when in ("setup", "teardown"):
            if when in phases and phases[when][0] == "error":
                return TestOutcome(nodeid, "error", when, phases[when][1])
        setup = phases.get("setup")
        if setup is not None and setup[0] in ("skipped", "xfailed"):
            return TestOutcome(nodeid, setup[0], "setup", setup[1])
        if call is not None:
            return TestOutcome(nodeid, call[0], "call", call[1])
        return TestOutcome(nodeid, "not run", "setup" if phases else "", "no report of the test's call arrived")

    def tests(self) -> list[TestOutcome]:
        """Every test's outcome: collected order first, then any others (collectors, relayed tests)."""
        order = list(dict.fromkeys([*self._expected, *self._phases]))
        return [self._decide(n, self._phases.get(n, {})) for n in order]

    def totals(self) -> dict[str, int]:
        out = dict.fromkeys(OUTCOMES, 0)
        for t in self.tests():
            out[t.outcome] += 1
        return out

    def bad(self) -> list[TestOutcome]:
        return [t for t in self.tests() if t.outcome in BAD_OUTCOMES]

    def ok(self, exitstatus: int | None = None) -> bool:
        """True when at least one test ran, none is in :data:`BAD_OUTCOMES` and the exit status (if
        given) is 0."""
        tests = self.tests()
        return bool(tests) and not self.bad() and exitstatus in (None, 0)

    def to_json(self) -> list[dict[str, Any]]:
        return [t.to_json() for t in self.tests()]
