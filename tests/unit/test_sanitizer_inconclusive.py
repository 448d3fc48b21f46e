"""Tests a sanitizer run cannot settle are errors naming why, never passes (tool_outcomes.py, for compute-sanitizer
and ConSan alike)."""

from __future__ import annotations

from types import SimpleNamespace

from pytest_pipecheck.results import Verdict
from pytest_pipecheck.sanitizer.tool_outcomes import TestOutcome as Outcome
from pytest_pipecheck.sanitizer.tool_outcomes import budget_exhausted, no_progress


def _outcome(nodeid: str, verdict: Verdict, summary: str, **kw: object) -> Outcome:
    return Outcome(nodeid, "racecheck", verdict, summary, **kw)  # type: ignore[arg-type]


def test_a_run_out_of_children_leaves_errors_naming_the_limit() -> None:
    got = budget_exhausted(["t::a", "t::b"], _outcome, 40, "ConSan")
    assert list(got) == ["t::a", "t::b"]
    assert all(o.verdict is Verdict.ERROR and o.summary == "inconclusive: child budget exhausted"
               and o.reason == "more than 40 ConSan children" for o in got.values())


def test_a_child_that_settles_nothing_leaves_errors_with_its_exit_status() -> None:
    run = SimpleNamespace(output="partial output", returncode=-9)
    got = no_progress(["t::a"], _outcome, run)  # type: ignore[arg-type]
    (o,) = got.values()
    assert o.verdict is Verdict.ERROR and o.summary == "inconclusive: child made no progress"
    assert o.reason == "exit status -9" and o.output == "partial output"
