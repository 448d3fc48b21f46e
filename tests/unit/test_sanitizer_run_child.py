"""The runner's watch over one child, on an injected clock: no assertion here depends on how fast
the machine is (docs/verdicts.md item 27)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import pytest

from pytest_pipecheck.sanitizer.child_watch import ChildRun, run_child
from pytest_pipecheck.sanitizer.parse import BEGIN, COMPILE_BEGIN, COMPILE_END, END

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out


class FakeClock:
    """Seconds that pass only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _watch(script: str, clock: FakeClock, timeouts: dict[str, float], *, idle_limit: float = 600.0,
           **options: Any) -> ChildRun:
    """run_child over a child of this interpreter that runs ``script``, on ``clock``, with the tests' timeouts
    ``timeouts``, a 60 s default timeout, ``idle_limit`` and a watchdog that looks every 10 ms; ``options`` are
    more of run_child's keywords."""
    return run_child([sys.executable, "-c", script], cwd=".", env={}, timeouts=timeouts, default_timeout=60.0,
                     idle_limit=idle_limit, clock=clock, poll=0.01, **options)


def test_a_tests_seconds_are_its_begin_to_its_end_on_the_runners_clock() -> None:
    clock = FakeClock()
    took = {"t::slow": 7.5, "t::fast": 0.25}
    script = "".join(f"print({BEGIN + n!r}); print({END + n + ' passed'!r})\n" for n in took)

    def on_begin(nodeid: str) -> None:  # the test "runs" for its time, between its BEGIN and its END
        clock.now += took[nodeid]

    run = _watch(script, clock, {}, on_begin=on_begin)
    assert run.returncode == 0 and run.killed_in is None
    assert run.test_seconds == took
    assert run.wall == sum(took.values())


def test_the_watchdog_kills_a_test_past_its_timeout_on_the_runners_clock() -> None:
    clock = FakeClock()
    script = f"import time\nprint({BEGIN + 't::hangs'!r}, flush=True)\ntime.sleep(60)\n"

    def on_begin(nodeid: str) -> None:
        clock.now += 2.5  # past its 2 s timeout: the next look of the watchdog kills the child

    run = _watch(script, clock, {"t::hangs": 2.0}, on_begin=on_begin)
    assert run.killed_in == "t::hangs"
    assert "no PIPECHECK-END within 2 s" in run.kill_reason
    assert run.returncode != 0 and "t::hangs" not in run.test_seconds


def test_a_test_just_within_its_timeout_is_not_killed() -> None:
    clock = FakeClock()
    script = f"print({BEGIN + 't::ok'!r}, flush=True)\nprint({END + 't::ok passed'!r})\n"

    def on_begin(nodeid: str) -> None:
        clock.now += 1.999

    run = _watch(script, clock, {"t::ok": 2.0}, on_begin=on_begin)
    assert run.killed_in is None and run.test_seconds == {"t::ok": pytest.approx(1.999)}


# --------------------------------------------------------------------------- Triton's compiles


def _marks(*steps: str) -> str:
    """A child script: one line per step (``begin NODEID``, ``compile``, ``compiled``, ``end NODEID``), flushed,
    then (a step ``hang``) a wait the watchdog must end."""
    body = ["import json, time"]
    for step in steps:
        kind, _, arg = step.partition(" ")
        line = {"begin": BEGIN + arg, "end": END + arg + " passed",
                "compile": COMPILE_BEGIN + json.dumps({"test": arg, "kernel": "scale_rows", "step": "compile"}),
                "compiled": COMPILE_END + json.dumps({"test": arg})}.get(kind)
        body.append("time.sleep(3600)" if kind == "hang" else f"print({line!r}, flush=True)")
    return "\n".join(body) + "\n"


def _advance(clock: FakeClock, on: dict[str, float]) -> Callable[[str], None]:
    """Move the clock by ``on[marker]`` seconds when the runner takes a line holding that marker: the time
    the child then spends until its next line."""
    def on_line(line: str) -> None:
        for marker, seconds in on.items():
            if marker in line:
                clock.now += seconds
    return on_line


def test_a_test_that_compiles_for_longer_than_its_timeout_is_not_killed() -> None:
    """60 s compiling every autotune config under the tool, then 1.5 s of its own: within its 2 s."""
    clock = FakeClock()
    script = _marks("begin t::autotuned", "compile t::autotuned", "compiled t::autotuned", "end t::autotuned")
    run = _watch(script, clock, {"t::autotuned": 2.0}, on_line=_advance(clock, {COMPILE_BEGIN: 60.0, COMPILE_END: 1.5}))
    assert run.killed_in is None and run.returncode == 0, run.kill_reason
    assert run.test_seconds == {"t::autotuned": pytest.approx(61.5)}  # its cost: compiles included
    assert run.compile_seconds == {"t::autotuned": pytest.approx(60.0)}
    assert COMPILE_BEGIN not in run.output and COMPILE_END not in run.output


def test_a_test_that_hangs_in_its_kernel_after_compiling_is_killed_as_a_hang() -> None:
    clock = FakeClock()
    script = _marks("begin t::hangs", "compile t::hangs", "compiled t::hangs", "hang")
    run = _watch(script, clock, {"t::hangs": 2.0}, on_line=_advance(clock, {COMPILE_BEGIN: 60.0, COMPILE_END: 2.5}))
    assert run.killed_in == "t::hangs" and run.kill_kind == "hang"
    assert "no PIPECHECK-END within 2 s (sanitizer_timeout) of the test's own time" in run.kill_reason
    assert "60.0 s of Triton compiles not counted" in run.kill_reason


def test_a_compile_that_never_ends_is_caught_by_the_compile_cap() -> None:
    clock = FakeClock()
    script = _marks("begin t::compiler_hangs", "compile t::compiler_hangs", "hang")
    run = _watch(script, clock, {"t::compiler_hangs": 2.0}, compile_cap=300.0,
                 on_line=_advance(clock, {COMPILE_BEGIN: 300.5}))
    assert run.killed_in == "t::compiler_hangs" and run.kill_kind == "compile"
    assert run.kill_reason == ("Triton's compile of scale_rows did not end within 300 s (pipecheck's compile "
                               "cap): compile hang")


def test_the_compile_cap_is_never_below_the_tests_own_timeout() -> None:
    """A test given 900 s may compile for 600 s at a stretch, as it could before compiles were told apart."""
    clock = FakeClock()
    script = _marks("begin t::slow", "compile t::slow", "compiled t::slow", "end t::slow")
    run = _watch(script, clock, {"t::slow": 900.0}, compile_cap=300.0, on_line=_advance(clock, {COMPILE_BEGIN: 600.0}))
    assert run.killed_in is None, run.kill_reason


def test_a_compile_outside_any_test_is_bounded_by_the_cap_not_the_idle_limit() -> None:
    clock = FakeClock()
    script = _marks("compile ", "compiled ", "begin t::a", "end t::a")
    run = _watch(script, clock, {}, idle_limit=50.0, compile_cap=300.0, on_line=_advance(clock, {COMPILE_BEGIN: 200.0}))
    assert run.killed_in is None and run.test_seconds == {"t::a": 0.0}, run.kill_reason


def test_a_tests_end_closes_a_compile_its_child_never_closed() -> None:
    """A compile that raised leaves no COMPILE_END: the test's END ends it, and the next test's clock runs."""
    clock = FakeClock()
    script = _marks("begin t::raised", "compile t::raised", "end t::raised", "begin t::next", "hang")
    run = _watch(script, clock, {"t::next": 2.0}, on_line=_advance(clock, {COMPILE_BEGIN: 5.0, BEGIN + "t::next": 2.5}))
    assert run.killed_in == "t::next" and run.kill_kind == "hang"
    assert run.compile_seconds == {"t::raised": pytest.approx(5.0)}


def test_how_a_child_ended_as_a_whole() -> None:
    """child_health, the first step of deciding a child's tests: a clean end is consistent; exit 86 with
    no finding, a missing summary line or a child killed inside a test is not, and says why."""
    from pytest_pipecheck.sanitizer.child_analysis import _analyze, child_health
    from pytest_pipecheck.sanitizer.child_watch import ChildRun
    from pytest_pipecheck.sanitizer.parse import BEGIN, END

    def run(rc: int | None, summary: str | None, *, killed_in: str | None = None, finish: bool = True) -> ChildRun:
        lines = [f"{BEGIN}t.py::a"] + ([f"{END}t.py::a passed"] if finish else [])
        if summary is not None:
            lines.append(summary)
        return ChildRun(["x"], "\n".join(lines) + "\n", rc, killed_in=killed_in)

    clean = child_health(r := run(0, "========= ERROR SUMMARY: 0 errors"), _analyze(r, "synccheck"))
    assert clean.sound and clean.consistent and not clean.interrupted
    unexplained = child_health(r := run(86, "========= ERROR SUMMARY: 0 errors"), _analyze(r, "synccheck"))
    assert unexplained.sound and not unexplained.consistent
    assert unexplained.why_not == "exit status 86 without any finding"
    no_summary = child_health(r := run(0, None), _analyze(r, "synccheck"))
    assert not no_summary.consistent and no_summary.why_not == "no compute-sanitizer summary line"
    killed = child_health(r := run(-9, None, killed_in="t.py::a", finish=False), _analyze(r, "synccheck"))
    assert killed.interrupted and not killed.consistent
