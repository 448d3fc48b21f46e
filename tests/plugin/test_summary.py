"""The end-of-run summary and the JSON report, fed by the checks' recorded results."""

from __future__ import annotations

import json

import pytest

TESTS = """
import pytest
from pytest_pipecheck.results import CheckResult, Verdict

@pytest.mark.pipecheck(kernel="gemm")
@pytest.mark.parametrize("n", [1, 2])
def test_ok(pipecheck, n):
    pipecheck.record(CheckResult("coverage", Verdict.PASS, f"max rel err {n}e-04 (tol 1e-02)"))

@pytest.mark.pipecheck(kernel="gemm")
def test_bad(pipecheck):
    pipecheck.record(CheckResult("occupancy", Verdict.FAIL, "sm_86 1 block/SM (floor 2)"))
    raise AssertionError("below the floor")

def test_skip(pipecheck):
    pipecheck.skip_check("sanitizer:racecheck", "no GPU here")
"""


def test_summary_table(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TESTS)
    result = pytester.runpytest("--pipecheck", "--pipecheck-sanitizer=none")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines([
        "*= pipecheck summary =*",
        "kernel*check*verdicts*key number (worst)",
        "gemm*coverage*2 pass*max rel err 2e-04 (tol 1e-02)",
        "gemm*occupancy*1 fail*sm_86 1 block/SM (floor 2)",
        "test_skip*sanitizer:racecheck*1 skip*no GPU here",
        "not passed:",
        "*FAIL occupancy test_summary_table.py::test_bad: sm_86 1 block/SM (floor 2)",
        "skipped checks*",
        "*sanitizer:racecheck x1: no GPU here",
        "pipecheck checks: 2 pass, 1 fail, 1 skip, 0 error",
    ])


def test_verbose_lists_every_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TESTS)
    result = pytester.runpytest("--pipecheck", "--pipecheck-sanitizer=none", "-v")
    result.stdout.fnmatch_lines(["*test_ok?1?*gemm*coverage*pass*1e-04*", "*test_ok?2?*gemm*coverage*pass*2e-04*"])


def test_no_summary_without_pipecheck_or_results(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest()
    assert "pipecheck summary" not in result.stdout.str()


def test_json_report_and_junit_properties(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TESTS)
    result = pytester.runpytest("--pipecheck", "--pipecheck-sanitizer=none", "--pipecheck-json=out/r.json",
                                "--junitxml=junit.xml", "--pipecheck-seed=5")
    result.assert_outcomes(passed=3, failed=1)
    doc = json.loads((pytester.path / "out" / "r.json").read_text())
    assert doc["schema"] == "pytest-pipecheck/results" and doc["version"] == 1 and doc["seed"] == 5
    assert doc["totals"] == {"pass": 2, "fail": 1, "skip": 1, "error": 0}
    checks = sorted((r["nodeid"].split("::")[1], r["check"], r["verdict"]) for r in doc["results"])
    assert checks[0] == ("test_bad", "occupancy", "fail")
    junit = (pytester.path / "junit.xml").read_text()
    assert 'name="pipecheck.occupancy" value="fail: sm_86 1 block/SM (floor 2)"' in junit


def test_json_to_a_directory_is_reported_not_fatal(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TESTS)
    (pytester.path / "adir").mkdir()
    result = pytester.runpytest("--pipecheck", "--pipecheck-sanitizer=none", "--pipecheck-json=adir")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*pipecheck: could not write JSON report 'adir'*is a directory*"])
