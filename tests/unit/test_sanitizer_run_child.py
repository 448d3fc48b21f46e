"""The runner's watch over one child, on an injected clock: no assertion here depends on how fast
the machine is (docs/verdicts.md item 27)."""

from __future__ import annotations

import sys

import pytest

from pytest_pipecheck.sanitizer.parse import BEGIN, END
from pytest_pipecheck.sanitizer.runner import run_child


class FakeClock:
    """Seconds that pass only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _child(script: str) -> list[str]:
    return [sys.executable, "-c", script]


def test_a_tests_seconds_are_its_begin_to_its_end_on_the_runners_clock() -> None:
    clock = FakeClock()
    took = {"t::slow": 7.5, "t::fast": 0.25}
    script = "".join(f"print({BEGIN + n!r}); print({END + n + ' passed'!r})\n" for n in took)

    def on_begin(nodeid: str) -> None:  # the test "runs" for its time, between its BEGIN and its END
        clock.now += took[nodeid]

    run = run_child(_child(script), cwd=".", env={}, timeouts={}, default_timeout=60.0, idle_limit=600.0,
                    on_begin=on_begin, clock=clock)
    assert run.returncode == 0 and run.killed_in is None
    assert run.test_seconds == took
    assert run.wall == sum(took.values())


def test_the_watchdog_kills_a_test_past_its_timeout_on_the_runners_clock() -> None:
    clock = FakeClock()
    script = f"import time\nprint({BEGIN + 't::hangs'!r}, flush=True)\ntime.sleep(60)\n"

    def on_begin(nodeid: str) -> None:
        clock.now += 2.5  # past its 2 s timeout: the next look of the watchdog kills the child

    run = run_child(_child(script), cwd=".", env={}, timeouts={"t::hangs": 2.0}, default_timeout=60.0,
                    idle_limit=600.0, on_begin=on_begin, clock=clock, poll=0.01)
    assert run.killed_in == "t::hangs"
    assert "no PIPECHECK-END within 2 s" in run.kill_reason
    assert run.returncode != 0 and "t::hangs" not in run.test_seconds


def test_a_test_just_within_its_timeout_is_not_killed() -> None:
    clock = FakeClock()
    script = f"print({BEGIN + 't::ok'!r}, flush=True)\nprint({END + 't::ok passed'!r})\n"

    def on_begin(nodeid: str) -> None:
        clock.now += 1.999

    run = run_child(_child(script), cwd=".", env={}, timeouts={"t::ok": 2.0}, default_timeout=60.0,
                    idle_limit=600.0, on_begin=on_begin, clock=clock, poll=0.01)
    assert run.killed_in is None and run.test_seconds == {"t::ok": pytest.approx(1.999)}
