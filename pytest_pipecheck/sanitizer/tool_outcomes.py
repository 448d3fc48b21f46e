"""One test's verdict under one sanitizer tool, and how it reads: its failure message and its summaries.

A :class:`TestOutcome` is what a runner (:mod:`.runner` for compute-sanitizer, :mod:`.consan` for ConSan)
decides for one test and one tool: the verdict, the findings, the child's output and the command that replays
it. :func:`format_failure` is the test's failure message (the findings grouped per kernel and location pair,
then the reproducer). The verdicts both runners give where a child's records do not decide are here too: a
test the watchdog killed (:func:`hang_summary`), and the errors, never passes, of the tests left when a run
has used up its children (:func:`budget_exhausted`) or a child settled none of them (:func:`no_progress`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..results import Verdict
from .child_watch import ChildRun
from .parse import Finding, group_findings

__all__ = [
    "TestOutcome",
    "budget_exhausted",
    "format_failure",
    "hang_summary",
    "no_progress",
]

_OUTPUT_KEEP = 6000  # characters of a test's output kept in a result's details


@dataclass
class TestOutcome:
    """One test's verdict for one tool."""

    nodeid: str
    tool: str
    verdict: Verdict
    summary: str
    findings: list[Finding] = field(default_factory=list)
    child_outcome: str | None = None
    reason: str = ""
    output: str = ""
    command: str = ""
    child_wall: float | None = None  # seconds the child that decided this verdict ran
    child_tests: int | None = None   # how many tests that child was given
    seconds: float | None = None     # the test's own time in that child (its BEGIN to its END)
    compile_seconds: float | None = None  # of those, the seconds Triton spent compiling and loading kernels
    filtered: dict[str, list[Finding]] = field(default_factory=dict)  # known false positives, by rule id
    tool_version: str | None = None  # the compute-sanitizer version the rules were keyed to

    def details(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "child_wall_s": None if self.child_wall is None else round(self.child_wall, 2),
            "child_tests": self.child_tests,
            "test_seconds": None if self.seconds is None else round(self.seconds, 3),
            "compile_seconds": None if self.compile_seconds is None else round(self.compile_seconds, 3),
            "findings": [f.to_json() for f in self.findings[:50]],
            "groups": group_findings(self.findings),
            "child_outcome": self.child_outcome,
            "reason": self.reason,
            "output": self.output[-_OUTPUT_KEEP:],
            "reproduce": self.command,
            "filtered": {rule: {"records": len(found), "compute_sanitizer": self.tool_version,
                                "examples": [f.raw.splitlines()[0] for f in found[:3]],
                                "findings": [f.to_json() for f in found[:50]]}
                         for rule, found in self.filtered.items()},
        }

    def filtered_note(self) -> str:
        """``"3 findings filtered by rule X for compute-sanitizer 2025.3.1"`` (empty when none)."""
        return "; ".join(f"{len(found)} finding{'s' if len(found) != 1 else ''} filtered by rule {rule} for "
                         f"compute-sanitizer {self.tool_version or '?'}" for rule, found in self.filtered.items())


def format_failure(outcome: TestOutcome) -> str:
    """The failure message: findings grouped per kernel and location pair, then the reproducer."""
    label = "Triton ConSan" if outcome.tool == "consan" else f"compute-sanitizer {outcome.tool}"
    lines = [f"{label}: {outcome.summary}"]
    if outcome.reason:
        lines.append(outcome.reason)
    if outcome.filtered:
        lines.append(f"({outcome.filtered_note()}; see pytest_pipecheck/sanitizer/known.py)")
    groups = group_findings(outcome.findings)
    causes = list(dict.fromkeys(g["cause"] for g in groups if g.get("cause")))
    lines.extend(f"  cause: {c}" for c in causes[:3])
    for g in groups[:12]:
        where = g["where"] + (f" / {g['second_where']}" if g["second_where"] else "")
        hz = f", {g['hazards']} hazards" if g["hazards"] != g["records"] else ""
        lines.append(f"  {g['records']} x {g['label']} ({g['severity']}) in {g['kernel'] or '?'} at {where}{hz}")
        if g.get("tensor_note"):
            lines.append(f"      {g['tensor_note']}")
        for ex in g["examples"]:
            lines.append(f"      e.g. {ex}")
    if not outcome.findings and outcome.output:
        lines.append("  partial output of the child:")
        lines.extend("    " + ln for ln in outcome.output.splitlines()[-25:])
    if outcome.command:
        lines.append(f"reproduce: {outcome.command}")
    return "\n".join(lines)


def _describe_findings(findings: list[Finding]) -> str:
    groups = group_findings(findings)
    if not groups:
        return "0 hazards"
    g = groups[0]
    where = g["where"] + (f"/{g['second_where']}" if g["second_where"] else "")
    head = f"{g['records']} {g['label']}{'s' if g['records'] != 1 else ''} in {g['kernel'] or '?'} ({where})"
    if g.get("tensor"):
        head += f" {g['tensor']}"
    more = sum(x["records"] for x in groups[1:])
    return head + (f" and {more} more" if more else "")


def hang_summary(run: ChildRun) -> str:
    """The summary of the test the watchdog killed ``run`` in: a hang of its own code and kernels, or of
    Triton's compiler (its compile cap)."""
    return "compile hang: killed by the watchdog" if run.kill_kind == "compile" else "hang: killed by the watchdog"


def budget_exhausted(pending: list[str], outcome: Any, limit: int, what: str) -> dict[str, TestOutcome]:
    """The verdicts of tests left when a run has started ``limit`` children: errors, never passes."""
    return {n: outcome(n, Verdict.ERROR, "inconclusive: child budget exhausted",
                       reason=f"more than {limit} {what} children") for n in pending}


def no_progress(pending: list[str], outcome: Any, run: ChildRun) -> dict[str, TestOutcome]:
    """The verdicts of tests a child was given again and settled none of: errors, never passes."""
    return {n: outcome(n, Verdict.ERROR, "inconclusive: child made no progress", output=run.output,
                       reason=f"exit status {run.returncode}") for n in pending}
