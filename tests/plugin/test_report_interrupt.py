"""A report from a run that did not finish never reads as a pass: at start the report paths say the
run is in progress (so a run that dies leaves a report that is not ok), and on SIGTERM or SIGINT the
report writer writes what it has, says which signal interrupted the run, and exits non-zero.

Each run here is a pytest in a subprocess (a signal must reach a process of its own); a test of the
run sends the signal to its own process, so where the run stops does not depend on timing.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from ._sanitizer_fake import GPU_CONFTEST, _fake, noop_tests

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

REPORTS = ("--pipecheck", "--pipecheck-sanitizer=none", "--pipecheck-json=r.json", "--pipecheck-html=r.html",
           "--pipecheck-markdown=r.md", "-p", "no:cacheprovider")

SIGNALLED = """
import os, signal
from pytest_pipecheck.results import CheckResult, Verdict

def test_first(pipecheck):
    pipecheck.record(CheckResult("coverage", Verdict.PASS, "max rel err 1e-04"))

def test_second(pipecheck):
    os.kill(os.getpid(), signal.{name})
    raise AssertionError("the signal was not handled before this line")

def test_third(pipecheck):
    pipecheck.record(CheckResult("coverage", Verdict.PASS, "max rel err 1e-04"))
"""


def _doc(pytester: pytest.Pytester) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    return doc


def _verdict(pytester: pytest.Pytester) -> str:
    """The Markdown report's first line."""
    return (pytester.path / "r.md").read_text(encoding="utf-8").splitlines()[0]


def _outcomes(doc: dict[str, Any]) -> dict[str, str]:
    return {t["nodeid"].rsplit("::", 1)[-1]: t["outcome"] for t in doc["tests"]}


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_a_signal_mid_run_writes_reports_that_say_interrupted_with_the_finished_verdicts(
        pytester: pytest.Pytester, name: str) -> None:
    pytester.makepyfile(SIGNALLED.format(name=name))
    result = pytester.runpytest_subprocess(*REPORTS)
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()[-2000:]
    doc = _doc(pytester)
    assert doc["ok"] is False and doc["finished"] is False and doc["state"] == "interrupted"
    assert doc["interrupted"]["signal"] == name
    assert doc["exitstatus"] == pytest.ExitCode.INTERRUPTED
    assert _outcomes(doc) == {"test_first": "passed", "test_second": "not run", "test_third": "not run"}
    assert doc["totals"]["pass"] == 1  # the check result of the test that finished
    page = (pytester.path / "r.html").read_text(encoding="utf-8")
    assert 'id="run-interrupted"' in page and "The run did not finish" in page and name in page
    assert 'id="all-passed"' not in page
    assert _verdict(pytester) == (f"❌ pipecheck: do not merge — the run was interrupted by {name} before it "
                                  "finished (1 of 3 tests ran)")
    result.stdout.fnmatch_lines([f"*pipecheck: {name} received*"])


def test_a_run_killed_mid_run_leaves_reports_that_are_not_ok(pytester: pytest.Pytester) -> None:
    # the previous run passed; this one is killed (SIGKILL, as the OOM killer does) before its end
    (pytester.path / "r.json").write_text(json.dumps({"schema": "pytest-pipecheck/results", "version": 2,
                                                       "ok": True, "exitstatus": 0}))
    (pytester.path / "r.html").write_text('<div class="banner good" id="all-passed">Every test and every check '
                                          "passed.</div>")
    (pytester.path / "r.md").write_text("✅ pipecheck: merge OK — 3 checks passed, 0 skipped\n")
    pytester.makepyfile(SIGNALLED.format(name="SIGKILL"))
    result = pytester.runpytest_subprocess(*REPORTS)
    assert result.ret == -signal.SIGKILL
    doc = _doc(pytester)
    assert doc["ok"] is False and doc["finished"] is False and doc["state"] == "running"
    assert doc["exitstatus"] is None and doc["interrupted"] is None
    page = (pytester.path / "r.html").read_text(encoding="utf-8")
    assert 'id="all-passed"' not in page
    assert 'id="run-not-finished"' in page and "The run did not finish" in page
    assert _verdict(pytester) == "❌ pipecheck: do not merge — the run has not finished"


XDIST_CONFTEST = """
import os

CONTROLLER = False

def pytest_configure(config):
    global CONTROLLER
    CONTROLLER = not hasattr(config, "workerinput")
    if CONTROLLER:  # its workers, started later, inherit its environment
        os.environ["PIPECHECK_TEST_CONTROLLER"] = str(os.getpid())

def pytest_runtest_logreport(report):
    # on the controller, once the first test's verdict has arrived there
    if CONTROLLER and report.when == "call" and report.nodeid.endswith("test_first"):
        open("first-arrived", "w").close()
"""

XDIST_SUITE = """
import os, signal, time
from pytest_pipecheck.results import CheckResult, Verdict

def test_first(pipecheck):
    pipecheck.record(CheckResult("coverage", Verdict.PASS, "max rel err 1e-04"))

def test_second(pipecheck):
    controller = int(os.environ["PIPECHECK_TEST_CONTROLLER"])
    assert os.environ.get("PYTEST_XDIST_WORKER") and os.getppid() == controller
    for _ in range(6000):  # the controller writes this file when it has test_first's verdict
        if os.path.exists("first-arrived"):
            break
        time.sleep(0.01)
    os.kill(controller, signal.SIGTERM)

def test_third(pipecheck):
    pass
"""


def test_sigterm_to_the_xdist_controller_writes_reports_that_say_interrupted(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makeconftest(XDIST_CONFTEST)
    pytester.makepyfile(XDIST_SUITE)
    # loadfile: one worker runs the file's tests in order, the other has none
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadfile", "-p", "xdist", *REPORTS)
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()[-2000:]
    assert (pytester.path / "first-arrived").exists()
    doc = _doc(pytester)
    assert doc["ok"] is False and doc["finished"] is False and doc["state"] == "interrupted"
    assert doc["interrupted"]["signal"] == "SIGTERM"
    assert _outcomes(doc)["test_first"] == "passed"
    assert "did not finish" in (pytester.path / "r.html").read_text(encoding="utf-8")
    assert _verdict(pytester).startswith("❌ pipecheck: do not merge — the run was interrupted by SIGTERM")


MID_RUN = """
import json

def test_sees_its_reports_in_progress(pipecheck):
    doc = json.load(open("r.json"))
    assert doc["ok"] is False and doc["state"] == "running" and doc["finished"] is False
    assert doc["tests"] == [] and doc["exitstatus"] is None
    assert "The run did not finish" in open("r.html").read()
    assert open("r.md", encoding="utf-8").read().splitlines()[0] == (
        "❌ pipecheck: do not merge — the run has not finished")

def test_raises_keyboard_interrupt(pipecheck):
    raise KeyboardInterrupt
"""


def test_reports_say_running_during_the_run_and_an_interruption_without_a_signal_says_so(
        pytester: pytest.Pytester) -> None:
    # the previous run at these paths passed
    (pytester.path / "r.json").write_text(json.dumps({"ok": True, "exitstatus": 0}))
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    pytester.makepyfile(MID_RUN)
    result = pytester.runpytest(*REPORTS, no_reraise_ctrlc=True)  # in this process: its handlers come back
    assert {s: signal.getsignal(s) for s in handlers} == handlers
    assert result.ret == pytest.ExitCode.INTERRUPTED
    doc = _doc(pytester)
    assert _outcomes(doc) == {"test_sees_its_reports_in_progress": "passed", "test_raises_keyboard_interrupt": "not run"}
    assert doc["ok"] is False and doc["state"] == "interrupted"
    assert doc["interrupted"] == {"signal": None, "reason": "KeyboardInterrupt"}
    assert "The run did not finish: it was interrupted (KeyboardInterrupt)" in \
        (pytester.path / "r.html").read_text(encoding="utf-8")
    assert _verdict(pytester) == ("❌ pipecheck: do not merge — the run was interrupted (KeyboardInterrupt) before "
                                  "it finished (1 of 2 tests ran)")


CHILD_SIGNALS_PARENT = """
import os, signal, time

def pytest_configure(config):
    os.environ.setdefault("PIPECHECK_TEST_PARENT", str(os.getpid()))  # the first process: the parent

def pytest_runtest_setup(item):
    # in the sanitizer child that runs test_second: the run's parent gets SIGTERM (a CI job's timeout)
    # while this child would still run for an hour
    if os.environ.get("PIPECHECK_CHILD") and item.name == "test_second":
        with open("child.pid", "w") as fh:
            fh.write(str(os.getpid()))
        os.kill(int(os.environ["PIPECHECK_TEST_PARENT"]), signal.SIGTERM)
        time.sleep(3600)
"""


def _dead(pid: int) -> bool:
    """``pid`` is gone or a zombie (killed, not yet reaped by the process that adopted it)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the child's state from /proc")
def test_sigterm_while_sanitizer_children_run_kills_them_and_writes_the_reports(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(tmp_path, monkeypatch, {"racecheck": {}})
    pytester.makeconftest(GPU_CONFTEST.format(fake_gpu=True) + CHILD_SIGNALS_PARENT)
    pytester.makepyfile(noop_tests("test_first", "test_second"))
    pid_file = pytester.path / "child.pid"
    try:
        # two jobs: each test in a child of its own, watched from threads of the parent
        result = pytester.runpytest_subprocess(*REPORTS[:1], "--pipecheck-sanitizer=racecheck",
                                               "--pipecheck-sanitizer-jobs=2", *REPORTS[2:], timeout=300)
        child = int(pid_file.read_text())
        for _ in range(3000):  # SIGKILL has been sent to it; wait for the kernel to carry it out
            if _dead(child):
                break
            time.sleep(0.01)
        assert _dead(child), "the sanitizer child was left running"
        assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()[-3000:]
        doc = _doc(pytester)
        assert doc["ok"] is False and doc["state"] == "interrupted" and doc["interrupted"]["signal"] == "SIGTERM"
        assert _verdict(pytester).startswith("❌ pipecheck: do not merge — the run was interrupted by SIGTERM")
    finally:
        if pid_file.exists():  # never leave a child behind, whatever failed
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
