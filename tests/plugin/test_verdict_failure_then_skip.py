"""A check that did not pass fails its test whatever came after it (docs/verdicts.md, "A failing check, then a
skip"): the body skipping or calling ``pytest.xfail``, a fixture skipping the test in its setup, or a fixture
recording the failure in its teardown (where a caught failure is the usual way it gets lost). pytest's exit
status and the JUnit XML then say what the JSON and Markdown reports say. A test its xfail *marker* declares
broken is the exception: its failing check is the failure the marker expects, and the test is xfailed, as
pytest counts it (docs/verdicts.md, "Expected failures")."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

BODIES = '''
import pytest
from pytest_pipecheck.results import CheckResult, PipecheckFailure, Verdict


def _mismatch(pipecheck):
    return pipecheck.record(CheckResult("coverage", Verdict.FAIL, "worst rel err 3e-01 (tol 1e-02)"))


def test_call_fails_then_skips(pipecheck):
    _mismatch(pipecheck)
    pytest.skip("the rest needs a GPU")


def test_call_fails_then_xfails(pipecheck):
    _mismatch(pipecheck)
    pytest.xfail("gives up")


@pytest.mark.xfail(reason="flaky on this runner")
def test_call_fails_in_an_xfail_test_that_passes(pipecheck):
    _mismatch(pipecheck)


@pytest.fixture
def skips_after_a_failure(pipecheck):
    _mismatch(pipecheck)
    pytest.skip("the fixture gives up")


def test_setup_fails_then_skips(skips_after_a_failure):
    pass


@pytest.fixture
def catches_a_failure_in_teardown(pipecheck):
    yield
    try:
        raise PipecheckFailure("occupancy below the floor", _mismatch(pipecheck))
    except PipecheckFailure:
        pass  # caught: the failure is recorded all the same


def test_teardown_catches_a_failure(catches_a_failure_in_teardown):
    pass


@pytest.fixture
def records_in_teardown(pipecheck):
    yield
    pipecheck.record(CheckResult("occupancy", Verdict.ERROR, "resources unknown"))


def test_teardown_records_an_error(records_in_teardown):
    pass


def test_clean_skip(pipecheck):
    pipecheck.record(CheckResult("perf", Verdict.SKIP, "perf needs a CUDA GPU: no GPU"))
    pytest.skip("nothing to check here")


def test_clean_pass(pipecheck):
    pipecheck.record(CheckResult("coverage", Verdict.PASS, "max rel err 1e-04"))


@pytest.mark.pipecheck(expect_failures=True)
def test_caught_mutant_then_skip(pipecheck):
    _mismatch(pipecheck)  # expected: caught, not a failure
    pytest.skip("done")
'''

FAILED_IN_CALL = {"test_call_fails_then_skips": "the body skipped: the rest needs a GPU",
                  "test_call_fails_then_xfails": "the body xfailed: gives up"}
ERRORED = {"test_setup_fails_then_skips": "the setup skipped the test: the fixture gives up",
           "test_teardown_catches_a_failure": "recorded after the test's call (in a fixture's teardown)",
           "test_teardown_records_an_error": "recorded after the test's call (in a fixture's teardown)"}


def test_a_failing_check_fails_its_test_whatever_came_after(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bodies=BODIES)
    result = pytester.runpytest("--pipecheck", "--pipecheck-sanitizer=none", "-p", "no:cacheprovider", "-rA",
                                "--junitxml=junit.xml", "--pipecheck-json=r.json", "--pipecheck-markdown=r.md")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    # a caught mutant stays a skip, a clean skip too; the two teardown tests pass their call and error at teardown
    result.assert_outcomes(failed=2, errors=3, passed=3, skipped=2, xfailed=1)
    out = result.stdout.str()
    for name, did in {**FAILED_IN_CALL, **ERRORED}.items():
        assert f"did not pass, and then {did}:" in out or f"did not pass, {did}:" in out, (name, out)
    junit = ET.parse(pytester.path / "junit.xml").getroot()
    failures = {case.get("name") for case in junit.iter("testcase") if case.find("failure") is not None}
    errors = {case.get("name") for case in junit.iter("testcase") if case.find("error") is not None}
    assert failures == set(FAILED_IN_CALL) and errors == set(ERRORED), (failures, errors)
    doc = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    outcome = {t["nodeid"].split("::")[1]: (t["outcome"], t["when"]) for t in doc["tests"]}
    assert {n: outcome[n] for n in FAILED_IN_CALL} == dict.fromkeys(FAILED_IN_CALL, ("failed", "call"))
    assert outcome["test_setup_fails_then_skips"] == ("error", "setup")
    assert outcome["test_teardown_catches_a_failure"] == outcome["test_teardown_records_an_error"] == \
        ("error", "teardown")
    assert outcome["test_clean_skip"] == outcome["test_caught_mutant_then_skip"] == ("skipped", "call")
    # the marker declared it broken: its failing check is what the marker expects, as pytest counts it
    assert outcome["test_call_fails_in_an_xfail_test_that_passes"] == ("xfailed", "call")
    [marked] = [r for r in doc["results"] if r["nodeid"].endswith("test_call_fails_in_an_xfail_test_that_passes")]
    assert marked["verdict"] == "fail" and marked["xfailed"] is True and doc["totals"]["xfailed"] == 1
    assert doc["ok"] is False
    assert (pytester.path / "r.md").read_text(encoding="utf-8").splitlines()[0] == \
        "❌ pipecheck: do not merge — 4 failing checks, 1 inconclusive check"
