"""What the reports say about a run that did not finish, and the signal handlers that end one early.

A signal here is sent by the test to its own process (the handler runs on the main thread before
the next line), so nothing depends on timing; every handler is put back afterwards.
"""

from __future__ import annotations

import os
import signal
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from pytest_pipecheck.device import TierInfo
from pytest_pipecheck.report import html, json_report
from pytest_pipecheck.report.interrupt import Interruption, SignalGuard, SignalReceived, stop_children
from pytest_pipecheck.report.outcomes import TestOutcomes
from pytest_pipecheck.results import CheckResult, Verdict

CPU = TierInfo("cpu", None, "no GPU", {})


def _passed_outcomes() -> TestOutcomes:
    out = TestOutcomes()
    out.expect(["t.py::a"])
    for when in ("setup", "call", "teardown"):
        out.add(types.SimpleNamespace(nodeid="t.py::a", when=when, passed=True, failed=False, skipped=False,
                                      longrepr=None))
    return out


PASS = [CheckResult("coverage", Verdict.PASS, "ok", nodeid="t.py::a")]


# ---------------------------------------------------------------------------------------------- JSON
def test_a_finished_run_is_as_before_plus_its_state() -> None:
    doc = json_report.build(PASS, CPU, 1, _passed_outcomes(), 0)
    assert doc["ok"] is True and doc["version"] == 2
    assert doc["state"] == "finished" and doc["finished"] is True and doc["interrupted"] is None


def test_a_running_run_is_never_ok() -> None:
    doc = json_report.build([], CPU, 1, TestOutcomes(), None, state="running")
    assert doc["ok"] is False and doc["finished"] is False and doc["state"] == "running"
    assert doc["exitstatus"] is None and doc["tests"] == [] and doc["interrupted"] is None
    # also as a library call without the tests' outcomes, where a finished run's ok is null
    assert json_report.build(PASS, CPU, 1, state="running")["ok"] is False


def test_an_interrupted_run_is_not_ok_even_when_everything_that_finished_passed() -> None:
    why = Interruption("SIGTERM", "SIGTERM received")
    doc = json_report.build(PASS, CPU, 1, _passed_outcomes(), 0, state="interrupted", interrupted=why)
    assert doc["ok"] is False and doc["finished"] is False and doc["state"] == "interrupted"
    assert doc["interrupted"] == {"signal": "SIGTERM", "reason": "SIGTERM received"}
    assert doc["totals"]["pass"] == 1 and doc["test_totals"]["passed"] == 1


def test_an_unknown_state_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match="unknown run state 'done'"):
        json_report.build([], CPU, 1, state="done")
    with pytest.raises(ValueError, match="unknown run state 'done'"):
        html.render([], CPU, 1, state="done")


# ---------------------------------------------------------------------------------------------- HTML
def test_the_page_written_at_start_says_only_that_the_run_did_not_finish() -> None:
    page = html.render([], CPU, 1, outcomes=TestOutcomes(), state="running", created="now")
    assert 'id="run-not-finished"' in page and "The run did not finish" in page
    assert "<title>pipecheck report: run not finished</title>" in page
    assert 'id="no-results"' not in page and 'id="all-passed"' not in page


def test_an_interrupted_page_names_the_signal_and_never_says_all_passed() -> None:
    why = Interruption("SIGINT", "KeyboardInterrupt")
    page = html.render(PASS, CPU, 1, outcomes=_passed_outcomes(), exitstatus=0, state="interrupted",
                       interrupted=why, created="now")
    assert 'id="run-interrupted"' in page and "The run did not finish: it was interrupted by SIGINT" in page
    assert "run not finished (interrupted by SIGINT)" in page  # the title
    assert 'id="all-passed"' not in page
    without_signal = Interruption(None, "Exit: stop here")
    assert "interrupted (Exit: stop here)" in html.render(PASS, CPU, 1, outcomes=_passed_outcomes(),
                                                          state="interrupted", interrupted=without_signal)


def test_a_finished_page_is_as_before() -> None:
    page = html.render(PASS, CPU, 1, outcomes=_passed_outcomes(), exitstatus=0, created="now")
    assert 'id="all-passed"' in page and "did not finish" not in page


# ---------------------------------------------------------------------------------------------- the guard
@pytest.fixture
def handlers() -> Iterator[None]:
    """The test process's own SIGTERM and SIGINT handlers, put back whatever the test did."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for s, h in saved.items():
        signal.signal(s, h)


@contextmanager
def _sigterm_guard(stopped: list[str]) -> Iterator[SignalGuard]:
    """A SignalGuard over SIGTERM whose ``on_signal`` appends "children" to ``stopped``, installed (which must
    succeed) for the block and restored after it."""
    guard = SignalGuard(on_signal=lambda: stopped.append("children"))
    assert guard.install(("SIGTERM",))
    try:
        yield guard
    finally:
        guard.restore()


def _sigterm_interrupts() -> None:
    """Sends SIGTERM to this process; the guard must turn it into SignalReceived before the next line."""
    with pytest.raises(SignalReceived, match="SIGTERM received"):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("not interrupted")


def test_sigterm_becomes_an_interruption_after_the_children_are_stopped(handlers: None) -> None:
    before = signal.getsignal(signal.SIGTERM)
    stopped: list[str] = []
    with _sigterm_guard(stopped) as guard:
        _sigterm_interrupts()
    assert guard.received == "SIGTERM" and stopped == ["children"]
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_second_signal_while_the_first_unwinds_is_only_recorded(handlers: None) -> None:
    """Two SIGTERMs in a row (a signal to the process group, a CI runner's second try): the second landed in
    threading's lock code while the first one's exception unwound (the xdist controller waits on a queue) and
    raised there again, so the lock was never restored and the run ended in an INTERNALERROR ("release
    unlocked lock"); now the second is recorded and raises nothing, and the children are stopped again."""
    stopped: list[str] = []
    with _sigterm_guard(stopped) as guard:
        _sigterm_interrupts()
        os.kill(os.getpid(), signal.SIGTERM)  # while the session unwinds: nothing raised here
    assert guard.received == "SIGTERM" and stopped == ["children", "children"]


def test_sigint_keeps_its_keyboard_interrupt_and_is_named(handlers: None) -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    guard = SignalGuard(on_signal=None)
    guard.install(("SIGINT",))
    try:
        with pytest.raises(KeyboardInterrupt) as info:
            os.kill(os.getpid(), signal.SIGINT)
            raise AssertionError("not interrupted")
    finally:
        guard.restore()
    assert type(info.value) is KeyboardInterrupt and guard.received == "SIGINT"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_ignored_signal_stays_ignored(handlers: None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    guard = SignalGuard(on_signal=None)
    guard.install(("SIGTERM",))
    try:
        os.kill(os.getpid(), signal.SIGTERM)
    finally:
        guard.restore()
    assert guard.received is None and signal.getsignal(signal.SIGTERM) is signal.SIG_IGN


def test_a_signal_during_a_report_write_waits_for_the_write(handlers: None) -> None:
    guard = SignalGuard(on_signal=None)
    guard.install(("SIGTERM",))
    written: list[str] = []
    try:
        with pytest.raises(SignalReceived):
            with guard.deferred(raise_after=True):
                os.kill(os.getpid(), signal.SIGTERM)
                written.append("report")  # reached: the signal did not cut the write short
        assert written == ["report"]
        with guard.deferred(raise_after=False):  # at the end of the run: recorded, nothing raised
            os.kill(os.getpid(), signal.SIGTERM)
            written.append("final report")
        assert written == ["report", "final report"]
    finally:
        guard.restore()


def test_a_handler_installed_after_the_guard_is_kept_at_restore(handlers: None) -> None:
    guard = SignalGuard(on_signal=None)
    guard.install(("SIGTERM",))
    chained = guard._handler
    seen: list[int] = []

    def later(signum: int, frame: Any) -> None:
        seen.append(signum)
        chained(signum, frame)

    signal.signal(signal.SIGTERM, later)
    guard.restore()
    assert signal.getsignal(signal.SIGTERM) is later
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # SIGTERM's default, which the guard no longer replaces
    guard2 = SignalGuard(on_signal=None)
    guard2.install(("SIGTERM",))
    guard2.restore()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_stop_children_reaches_the_runner_only_once_it_was_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.delitem(sys.modules, "pytest_pipecheck.sanitizer.child_watch", raising=False)
    stop_children()  # no runner imported: no child of it can run, and nothing is imported here
    assert "pytest_pipecheck.sanitizer.child_watch" not in sys.modules
    fake = types.SimpleNamespace(stop_children=lambda: calls.append("stop"))
    monkeypatch.setitem(sys.modules, "pytest_pipecheck.sanitizer.child_watch", fake)
    stop_children()
    assert calls == ["stop"]
