"""Check results: what every check records, and the failure type it raises.

A check produces exactly one :class:`CheckResult` per call and records it on the test's
``pipecheck`` fixture. Verdicts are distinct on purpose: a check that could
not run is ``skip`` with its reason, never ``pass``; a check that could not reach a verdict
(a crashed sanitizer child, a compile error) is ``error``.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any

import pytest

__all__ = [
    "CheckResult",
    "PipecheckError",
    "PipecheckFailure",
    "Verdict",
]


class Verdict(str, enum.Enum):
    """A check's outcome: ``pass``, ``fail`` (a defect found), ``skip`` (not run, with the reason) or ``error``
    (inconclusive: the check could not reach a verdict; it fails the test as a failure does)."""

    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"
    ERROR = "error"

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.value


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict on one test.

    ``summary`` is the key number a person reads in the end-of-run table ("0 hazards",
    "worst rel err 3.1e-04 (tol 1.0e-02)", "sm_90 2 blocks/SM"). ``details`` carries the
    full, JSON-serialisable facts for the machine-readable reports.
    """

    check: str
    verdict: Verdict
    summary: str
    kernel: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    nodeid: str = ""
    # a failure the test set out to provoke (a mutant caught by the check meant to catch it);
    # reported as "caught", not as a failure of the code under test
    expected: bool = False
    # a failure in a test that pytest counts as xfailed by its xfail marker (an upstream bug the test declares):
    # reported as "xfailed", not as a failing check, as pytest does not count the test failed
    xfailed: bool = False

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["verdict"] = self.verdict.value
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CheckResult:
        return cls(
            check=str(data["check"]),
            verdict=Verdict(data["verdict"]),
            summary=str(data.get("summary", "")),
            kernel=data.get("kernel"),
            details=dict(data.get("details") or {}),
            nodeid=str(data.get("nodeid", "")),
            expected=bool(data.get("expected", False)),
            xfailed=bool(data.get("xfailed", False)),
        )


class PipecheckFailure(AssertionError):
    """Raised by a check that found a defect (race, mismatch, coverage hole, cliff, regression).

    Subclass of AssertionError so pytest reports the test as *failed*, not errored.
    """

    def __init__(self, message: str, result: CheckResult | None = None) -> None:
        super().__init__(message)
        self.result = result


class PipecheckError(Exception):
    """Bad input to pipecheck: a spec, a marker value, a file. The message names the source."""


def fail(message: str) -> None:
    """Fail the current test with ``message`` and no plugin traceback."""
    __tracebackhide__ = True
    pytest.fail(message, pytrace=False)
