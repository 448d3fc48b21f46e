"""A parametrized mutant test (``expect_failures``) passes when its planted bug is caught at some case of its
parametrization, and says which; where no case caught it, the run fails and every report says so
(pytest_pipecheck/verdicts.py ``mutant_function``, pytest_pipecheck/report/reporter.py).

A K-tail bug cannot show at a K that is a multiple of the tile: failing those cases hid the catch at the
others (a third library's first day, mamba-ssm's chunked kernels).
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.cpu_only

HEAD = """
import pytest
from pytest_pipecheck.results import CheckResult, Verdict

def shows(K):  # the planted bug shows only at a K-tail (K not a multiple of 64)
    return Verdict.FAIL if K % 64 else Verdict.PASS
"""


def _run(pytester: pytest.Pytester, body: str, *args: str) -> tuple[pytest.RunResult, dict]:
    pytester.makepyfile(test_mutants=HEAD + body)
    result = pytester.runpytest("--pipecheck", "--pipecheck-sanitizer=none", "-p", "no:cacheprovider",
                                "--pipecheck-json=r.json", "--junitxml=j.xml", *args)
    return result, json.loads((pytester.path / "r.json").read_text())


def _k_tail(*ks: int) -> str:
    """A mutant test ``test_k_tail`` (``expect_failures=True``) over ``K`` in ``ks``: its coverage check fails
    where the planted bug shows."""
    return f'''
@pytest.mark.pipecheck(expect_failures=True)
@pytest.mark.parametrize("K", {list(ks)!r})
def test_k_tail(pipecheck, K):
    pipecheck.record(CheckResult("coverage", shows(K), f"K={{K}}"))
'''


@pytest.fixture(params=[(), ("-n", "2")], ids=["one process", "xdist"])
def processes(request: pytest.FixtureRequest) -> tuple[str, ...]:
    """The options that run the mutants in one process, or in two xdist workers (skipped without xdist)."""
    if request.param:
        pytest.importorskip("xdist")
    return request.param


def test_caught_at_one_case_passes_and_names_it(pytester: pytest.Pytester, processes: tuple[str, ...]) -> None:
    result, doc = _run(pytester, _k_tail(64, 65, 128), *processes)
    result.assert_outcomes(passed=3)
    assert result.ret == 0 and doc["ok"] is True, result.stdout.str()[-2000:]
    result.stdout.fnmatch_lines(["*test_k_tail: the planted bug was caught at 1 of 3 cases ([[]65[]]); at the "
                                 "others it did not show*"])


def test_caught_at_no_case_fails_the_run(pytester: pytest.Pytester, processes: tuple[str, ...]) -> None:
    result, doc = _run(pytester, _k_tail(64, 128), *processes)
    assert result.ret == 1 and doc["ok"] is False and doc["reason"] == "1 failing check", doc["reason"]
    [missed] = [r for r in doc["results"] if r["check"] == "expect_failures"]
    assert missed["verdict"] == "fail" and missed["nodeid"] == "test_mutants.py::test_k_tail"
    assert "none did at any of its 2 cases (the mutant was missed)" in missed["summary"]
    assert 'name="expect_failures[test_mutants.py::test_k_tail]"' in (pytester.path / "j.xml").read_text()


def test_each_named_check_must_catch_it_at_some_case(pytester: pytest.Pytester) -> None:
    """``expect_failures=("coverage", "tile_probe")``: each named check at some case, not necessarily the same."""
    result, doc = _run(pytester, """
@pytest.mark.pipecheck(expect_failures=("coverage", "tile_probe"))
@pytest.mark.parametrize("K", [64, 65, 129])
def test_both(pipecheck, K):
    pipecheck.record(CheckResult("coverage", shows(K) if K == 65 else Verdict.PASS, f"K={K}"))
    pipecheck.record(CheckResult("tile_probe", shows(K) if K == 129 else Verdict.PASS, f"K={K}"))

@pytest.mark.pipecheck(expect_failures=("coverage", "tile_probe"))
@pytest.mark.parametrize("K", [64, 65])
def test_probe_never(pipecheck, K):
    pipecheck.record(CheckResult("coverage", shows(K), f"K={K}"))
    pipecheck.record(CheckResult("tile_probe", Verdict.PASS, f"K={K}"))
""")
    assert result.ret == 1 and doc["ok"] is False
    [missed] = [r for r in doc["results"] if r["check"] == "expect_failures"]
    assert missed["nodeid"] == "test_mutants.py::test_probe_never"
    assert "expected coverage, tile_probe to catch the planted bug at some case; tile_probe caught it at none" \
        in missed["summary"]
    result.stdout.fnmatch_lines(["*test_both: the planted bug was caught at 2 of 3 cases*"])


def test_an_unparametrized_mutant_still_fails_where_its_bug_did_not_show(pytester: pytest.Pytester) -> None:
    result, doc = _run(pytester, """
@pytest.mark.pipecheck(expect_failures=True)
def test_alone(pipecheck):
    pipecheck.record(CheckResult("coverage", Verdict.PASS, "K=64"))
""")
    result.assert_outcomes(failed=1)
    assert "expected at least one check to catch a bug, but none did" in result.stdout.str()
    assert not [r for r in doc["results"] if r["check"] == "expect_failures"]


def test_deselected_catching_cases_leave_the_mutant_missed(pytester: pytest.Pytester) -> None:
    """``-k`` that keeps only the cases where the bug cannot show: this run did not catch it, so it fails."""
    result, doc = _run(pytester, _k_tail(64, 65), "-k", "64")
    assert result.ret == 1 and doc["ok"] is False


def test_cases_that_skip_neither_catch_nor_miss(pytester: pytest.Pytester) -> None:
    """A mutant whose cases all skip on this tier (they need a GPU) is a skip, not a missed mutant; one whose
    cases that ran did not catch it is missed, whatever the skipped cases might have done."""
    result, doc = _run(pytester, """
@pytest.mark.pipecheck(expect_failures=True)
@pytest.mark.parametrize("K", [64, 65])
def test_needs_a_gpu(pipecheck, K):
    pytest.skip("needs a CUDA GPU")

@pytest.mark.pipecheck(expect_failures=True)
@pytest.mark.parametrize("K", [64, 65])
def test_partly(pipecheck, K):
    if K == 65:
        pytest.skip("needs a CUDA GPU")
    pipecheck.record(CheckResult("coverage", shows(K), f"K={K}"))
""")
    missed = [r["nodeid"] for r in doc["results"] if r["check"] == "expect_failures"]
    assert missed == ["test_mutants.py::test_partly"], missed
    assert result.ret == 1
