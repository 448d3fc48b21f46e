"""The Hopper module's smoke run (reference_kernels/hopper/smoke.py) with stand-in commands: its verdicts, its
time limit, and the early start its conftest makes. The real run is the Hopper module's on an sm_90 GPU."""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import pytest

from reference_kernels.hopper import conftest as hopper_conftest
from reference_kernels.hopper import smoke

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out (stand-ins)

FOREVER = [sys.executable, "-c", "import threading; threading.Event().wait()"]


def test_a_run_that_matches_is_no_failure() -> None:
    assert smoke.SmokeRun([sys.executable, "-c", "print('PIPECHECK-HOPPER-RESULT {}')"]).failure() is None


def test_a_failed_run_names_its_exit_and_shows_its_output() -> None:
    run = smoke.SmokeRun([sys.executable, "-c",
                          "import sys; print('x' * 70000 + 'the kernel faulted'); sys.exit(3)"])
    failure = run.failure()
    assert failure is not None and "failed in a child process (exit 3)" in failure
    assert failure.rstrip().endswith("the kernel faulted")  # the end of a long output, read from a file
    assert run.failure() == failure  # asked again: the same verdict, not a second wait


def test_a_run_past_its_time_is_a_hang_and_is_killed() -> None:
    now = [0.0]
    run = smoke.SmokeRun(FOREVER, timeout_s=90.0, clock=lambda: now[0])
    now[0] = 90.0  # the limit counts from the run's start: nothing is left to wait
    failure = run.failure()
    assert failure is not None and "hung in a child process (90 s)" in failure
    assert run._proc.poll() is not None


def test_an_early_run_is_taken_once_and_one_never_taken_is_stopped() -> None:
    started = smoke.start_early_run(lambda: smoke.SmokeRun(FOREVER))
    assert smoke.take_early_run() is started and smoke.take_early_run() is None
    started.stop()
    left = smoke.start_early_run(lambda: smoke.SmokeRun(FOREVER))
    smoke.stop_early_run()
    assert left._proc.poll() is not None and smoke.take_early_run() is None
    assert "stopped before it ended" in (left.failure() or "")


def _session(*, collectonly: bool = False, worker: bool = False, fixtures: tuple[str, ...] = ("hopper_smoke",)
             ) -> Any:
    config = SimpleNamespace(option=SimpleNamespace(collectonly=collectonly))
    if worker:
        config.workerinput = {"workerid": "gw0"}
    return SimpleNamespace(config=config, items=[SimpleNamespace(fixturenames=["pipecheck", *fixtures])])


@pytest.mark.parametrize(("session", "problem", "wanted"), [
    (_session(), None, True),
    (_session(collectonly=True), None, False),  # --collect-only runs nothing
    (_session(worker=True), None, False),  # an xdist worker may never be sent a Hopper test
    (_session(fixtures=()), None, False),  # no Hopper test selected
    (_session(), "needs an sm_90 GPU (H100/H200)", False),  # the fixture skips with the reason
], ids=["parent", "collect-only", "xdist-worker", "no-hopper-test", "no-sm90"])
def test_the_conftest_starts_the_run_early_only_where_a_test_will_wait_for_it(
        monkeypatch: pytest.MonkeyPatch, session: Any, problem: str | None, wanted: bool) -> None:
    monkeypatch.setattr(smoke, "device_problem", lambda: problem)
    assert hopper_conftest._wants_early_run(session) is wanted
