"""An exception out of a check is recorded (docs/verdicts.md, "A check that raises"): a ``PipecheckError`` for a
bad argument or spec, raised in the check (through ``run_check``) or before it (the fixture pinning an
autotune config, ``check_kernel`` checking its keywords), is an ERROR result of that check, so a test that
catches the exception fails as one that catches a ``PipecheckFailure`` does, and every report says why."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

BODIES = '''
import pytest
from pytest_pipecheck.model.spec import KernelSpec
from pytest_pipecheck.model.tensor import Tensor
from pytest_pipecheck.results import CheckResult, PipecheckError, PipecheckFailure, Verdict

SPEC = KernelSpec("scale", lambda arrays, dims: None, lambda arrays, dims: {}, [Tensor("x", ("N",)),
                  Tensor("y", ("N",), role="output")], {"N": 8}, "N")


def test_check_raises_inside_run_check(pipecheck):
    try:
        pipecheck.check_occupancy(threads=128, registers=32, min_blocks=0)
    except PipecheckError:
        pass


def test_fixture_raises_before_run_check(pipecheck):
    try:
        pipecheck.check_coverage(SPEC, "N8", config=0)  # a config of a spec that is not autotuned
    except PipecheckError:
        pass


def test_check_kernel_refuses_a_keyword(pipecheck):
    with pytest.raises(PipecheckError, match="unknown keyword 'tolerence'"):
        pipecheck.check_kernel(SPEC, "N8", tolerence=0.1)


@pytest.mark.pipecheck(expect_failures=True)
def test_an_error_is_never_a_caught_mutant(pipecheck):
    try:
        pipecheck.check_occupancy(threads=128, registers=32, min_blocks=0)
    except PipecheckError:
        pass
    pipecheck.record(CheckResult("coverage", Verdict.FAIL, "a wrong tile"))  # the mutant, caught


def test_a_caught_failure_is_recorded_once(pipecheck):
    try:
        pipecheck.check_occupancy(threads=1024, registers=255, min_blocks=8, arch="sm_90")
    except PipecheckFailure:
        pass


def test_uncaught_error(pipecheck):
    pipecheck.check_occupancy(threads=128, registers=32, min_blocks=0)
'''

ERRORS = {
    "test_check_raises_inside_run_check": ("occupancy", "the check raised PipecheckError: "
                                                        "check_occupancy(min_blocks=0) must be >= 1"),
    "test_fixture_raises_before_run_check": ("coverage", "the check raised PipecheckError: "),
    "test_check_kernel_refuses_a_keyword": ("coverage", "the check raised PipecheckError: spec 'scale': check_kernel "
                                                        "got unknown keyword 'tolerence'"),
    "test_an_error_is_never_a_caught_mutant": ("occupancy", "the check raised PipecheckError: "),
    "test_uncaught_error": ("occupancy", "the check raised PipecheckError: "),
}


def test_an_exception_a_check_raises_is_an_error_result_even_when_caught(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_errors=BODIES)
    result = pytester.runpytest("--pipecheck", "--pipecheck-sanitizer=none", "-p", "no:cacheprovider", "-rA",
                                "--pipecheck-json=r.json", "--pipecheck-markdown=r.md")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=6)
    doc = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    by_test: dict[str, list[tuple[str, str, str, bool]]] = {}
    for r in doc["results"]:
        by_test.setdefault(r["nodeid"].split("::")[1], []).append((r["check"], r["verdict"], r["summary"],
                                                                  r["expected"]))
    for name, (check, summary) in ERRORS.items():
        errors = [r for r in by_test[name] if r[1] == "error"]
        # one ERROR per exception: nested recording (the fixture's, run_check's) does not count it twice
        assert len(errors) == 1 and errors[0][0] == check and errors[0][2].startswith(summary), (name, by_test[name])
        assert errors[0][3] is False  # never "caught": an error is not the mutant an expecting test waits for
    # a check that recorded its failure and raised it: that FAIL stands for the exception, nothing is added
    assert [(c, v) for c, v, _, _ in by_test["test_a_caught_failure_is_recorded_once"]] == [("occupancy", "fail")]
    out = result.stdout.str()
    assert "ERROR occupancy: the check raised PipecheckError: check_occupancy(min_blocks=0) must be >= 1" in out
    assert doc["ok"] is False and doc["totals"]["error"] == 5
    assert (pytester.path / "r.md").read_text(encoding="utf-8").splitlines()[0] == \
        "❌ pipecheck: do not merge — 1 failing check, 5 inconclusive checks"
