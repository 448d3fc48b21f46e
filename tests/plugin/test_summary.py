"""The end-of-run summary and the JSON report, fed by the checks' recorded results."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

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
    assert doc["schema"] == "pytest-pipecheck/results" and doc["version"] == 2 and doc["seed"] == 5
    assert doc["totals"] == {"pass": 2, "fail": 1, "caught": 0, "skip": 1, "error": 0, "xfailed": 0}
    assert doc["ok"] is False and doc["exitstatus"] == 1
    assert doc["test_totals"]["passed"] == 3 and doc["test_totals"]["failed"] == 1
    checks = sorted((r["nodeid"].split("::")[1], r["check"], r["verdict"]) for r in doc["results"])
    assert checks[0] == ("test_bad", "occupancy", "fail")
    junit = (pytester.path / "junit.xml").read_text()
    assert 'name="pipecheck.occupancy" value="fail: sm_86 1 block/SM (floor 2)"' in junit


def test_json_to_a_directory_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TESTS)
    (pytester.path / "adir").mkdir()
    result = pytester.runpytest("--pipecheck", "--pipecheck-sanitizer=none", "--pipecheck-json=adir")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--pipecheck-json=adir: the report cannot be written there: the path is a directory*"])


CAUGHT = """
import pytest
from pytest_pipecheck.results import CheckResult, PipecheckFailure, Verdict

@pytest.mark.pipecheck(kernel="mutant_a", expect_failures=True)
def test_mutant_by_marker(pipecheck):
    pipecheck.record(CheckResult("tile_probe", Verdict.FAIL, "K tile 3 of 4 never reached the output"))

def test_mutant_by_block(pipecheck):
    with pipecheck.expecting_failures():
        pipecheck.record(CheckResult("coverage", Verdict.FAIL, "3 defects", kernel="mutant_b"))
    pipecheck.record(CheckResult("coverage", Verdict.FAIL, "real defect", kernel="reference"))
"""


def test_expected_failures_are_reported_as_caught(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(CAUGHT)
    result = pytester.runpytest("--pipecheck", "--pipecheck-sanitizer=none", "--pipecheck-json=r.json")
    # the real defect recorded after the block fails its test, although the body went on
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*pipecheck: 1 check result(s) did not pass, but the test body did not fail:",
        "*FAIL coverage: real defect",
    ])
    result.stdout.fnmatch_lines([
        "mutant_a*tile_probe*1 caught*K tile 3 of 4 never reached the output",
        "mutant_b*coverage*1 caught*3 defects",
        "reference*coverage*1 fail*real defect",
        "not passed:",
        "*FAIL coverage test_expected_failures_are_reported_as_caught.py::test_mutant_by_block: real defect",
        "pipecheck checks: 0 pass, 1 fail, 0 skip, 0 error, 2 caught (expected failures: mutants the checks caught)",
    ])
    doc = json.loads((pytester.path / "r.json").read_text())
    assert doc["totals"]["caught"] == 2 and doc["totals"]["fail"] == 1
    assert sorted(r["expected"] for r in doc["results"]) == [False, True, True]
