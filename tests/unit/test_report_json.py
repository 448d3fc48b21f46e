"""The JSON report's document and file: the tests' outcomes, strict JSON, regular files only
(docs/verdicts.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_pipecheck._atomic import UnsafePathError
from pytest_pipecheck.device import TierInfo
from pytest_pipecheck.report import json_report
from pytest_pipecheck.report.outcomes import TestOutcomes
from pytest_pipecheck.results import CheckResult, Verdict

CPU = TierInfo("cpu", None, "no GPU", {})


def _report(nodeid: str, when: str, outcome: str, longrepr: Any = None, **extra: Any) -> SimpleNamespace:
    return SimpleNamespace(nodeid=nodeid, when=when, passed=outcome == "passed", failed=outcome == "failed",
                           skipped=outcome == "skipped", longrepr=longrepr, **extra)


def _strict_loads(text: str) -> Any:
    def refuse(token: str) -> None:
        raise ValueError(f"non-standard JSON token {token}")

    return json.loads(text, parse_constant=refuse)


# item 16: the tests' own outcomes, per test, the worst phase deciding
def test_outcomes_per_test_from_every_phase() -> None:
    out = TestOutcomes()
    out.expect(["t.py::a", "t.py::b", "t.py::c", "t.py::d", "t.py::e", "t.py::f", "t.py::never"])
    for r in [
        _report("t.py::a", "setup", "passed"), _report("t.py::a", "call", "passed"),
        _report("t.py::a", "teardown", "passed"),
        _report("t.py::b", "setup", "passed"), _report("t.py::b", "call", "failed", "AssertionError: x\nmore"),
        _report("t.py::c", "setup", "passed"), _report("t.py::c", "call", "passed"),
        _report("t.py::c", "teardown", "failed", "RuntimeError: teardown"),
        _report("t.py::d", "setup", "skipped", ("t.py", 3, "Skipped: no GPU")),
        _report("t.py::e", "setup", "passed"), _report("t.py::e", "call", "skipped", ("t.py", 1, "xfail"),
                                                       wasxfail="known"),
        _report("t.py::f", "???", "failed", "worker 'gw0' crashed while running 't.py::f'"),
        SimpleNamespace(nodeid="broken.py", failed=True, longrepr="ImportError: no module named x"),
    ]:
        out.add(r)
    got = {t.nodeid: (t.outcome, t.when, t.message) for t in out.tests()}
    assert got == {
        "t.py::a": ("passed", "call", ""),
        "t.py::b": ("failed", "call", "AssertionError: x"),
        "t.py::c": ("error", "teardown", "RuntimeError: teardown"),
        "t.py::d": ("skipped", "setup", "Skipped: no GPU"),
        "t.py::e": ("xfailed", "call", "xfail"),
        "t.py::f": ("crashed", "???", "worker 'gw0' crashed while running 't.py::f'"),
        "t.py::never": ("not run", "", "no report of the test's call arrived"),
        "broken.py": ("error", "collect", "ImportError: no module named x"),
    }
    assert not out.ok(0)
    assert out.totals()["crashed"] == 1 and out.totals()["not run"] == 1


def test_json_document_is_not_ok_when_a_test_failed_after_passing_checks() -> None:
    checks = [CheckResult("coverage", Verdict.PASS, "ok", kernel="k", nodeid="t.py::a")]
    out = TestOutcomes()
    out.add(_report("t.py::a", "setup", "passed"))
    out.add(_report("t.py::a", "call", "failed", "AssertionError: after the check"))
    doc = json_report.build(checks, CPU, 1, out, 1)
    assert doc["version"] == 2
    assert doc["totals"]["fail"] == 0  # the checks did pass ...
    assert doc["ok"] is False  # ... and the run did not
    assert doc["test_totals"]["failed"] == 1
    assert doc["tests"] == [{"nodeid": "t.py::a", "outcome": "failed", "when": "call",
                             "message": "AssertionError: after the check"}]


def test_json_document_ok_needs_passing_tests_checks_and_exit_status() -> None:
    checks = [CheckResult("coverage", Verdict.PASS, "ok", kernel="k", nodeid="t.py::a")]
    out = TestOutcomes()
    out.add(_report("t.py::a", "call", "passed"))
    assert json_report.build(checks, CPU, 1, out, 0)["ok"] is True
    assert json_report.build(checks, CPU, 1, out, 2)["ok"] is False  # interrupted
    assert json_report.build(checks, CPU, 1, TestOutcomes(), 0)["ok"] is False  # no test ran
    bad = [*checks, CheckResult("perf", Verdict.ERROR, "no baseline dir", kernel="k", nodeid="t.py::a")]
    assert json_report.build(bad, CPU, 1, out, 0)["ok"] is False
    assert json_report.build(checks, CPU, 1)["ok"] is None  # outcomes not given: no verdict claimed


# item 21: strict JSON, non-finite numbers as strings
def test_json_report_is_strict_json_with_non_finite_numbers_as_strings(tmp_path: Path) -> None:
    import numpy as np

    r = CheckResult("coverage", Verdict.FAIL, "tolerance is nan", kernel="k", nodeid="t.py::a",
                    details={"rtol": float("nan"), "err": float("inf"), "low": float("-inf"),
                             "rows": (1.0, float("nan")), "np": np.float32("nan"), "arr": np.array([1.5, np.inf]),
                             "ok": 0.5})
    path = tmp_path / "r.json"
    json_report.write(str(path), [r], CPU, 1, TestOutcomes(), 1)
    doc = _strict_loads(path.read_text())
    d = doc["results"][0]["details"]
    assert (d["rtol"], d["err"], d["low"], d["rows"], d["ok"]) == ("NaN", "Infinity", "-Infinity", [1.0, "NaN"], 0.5)
    assert d["np"] == "NaN" and d["arr"] == [1.5, "Infinity"]


# item 18: reports are regular files; anything else at the path is refused and left as it was
@pytest.mark.skipif(os.name == "nt", reason="symlinks and FIFOs")
@pytest.mark.parametrize("kind", ["symlink", "fifo", "device"])
def test_report_write_refuses_what_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "r.json"
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    if kind == "symlink":
        path.symlink_to(victim)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/null")  # a device node reached through a link: refused as a link
    with pytest.raises(UnsafePathError, match=r"JSON report .*r\.json' is a (symbolic link|FIFO).*regular files only"):
        json_report.write(str(path), [], CPU, 1, TestOutcomes(), 0)
    assert victim.read_text() == "precious"
    assert path.is_symlink() if kind != "fifo" else path.is_fifo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "victim.txt"]  # no temporary file left


@pytest.mark.skipif(not os.path.exists("/dev/null") or os.name == "nt", reason="needs /dev/null")
def test_a_device_node_is_named_as_one() -> None:
    # read-only on purpose: a test that writes to a device path would clobber it if the check regressed
    from pytest_pipecheck._atomic import describe_non_regular

    assert describe_non_regular("/dev/null") == "a device node"
    with pytest.raises(UnsafePathError, match=r"'/dev/null' is a device node"):
        from pytest_pipecheck._atomic import refuse_non_regular

        refuse_non_regular("/dev/null", "JSON report")
