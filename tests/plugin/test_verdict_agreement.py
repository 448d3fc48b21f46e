"""The six outputs of a run agree on whether it passed: pytest's exit status, the JUnit XML, the JSON report,
the Markdown report, GitHub's job summary and the HTML report (docs/verdicts.md, "Six outputs, one verdict").

One real pytest run per kind of run, in-process, each with every report asked for: a run that passed reads
as a pass in all six, and every other run reads as "did not pass" in all six, never as a pass in one of them.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

HEAD = """
import pytest
from pytest_pipecheck.results import CheckResult, PipecheckError, Verdict
"""

PASSED_CHECK = 'CheckResult("coverage", Verdict.PASS, "max rel err 1e-04")'
FAILED_CHECK = 'CheckResult("coverage", Verdict.FAIL, "worst rel err 3e-01 (tol 1e-02)")'
SKIPPED_CHECK = 'CheckResult("perf", Verdict.SKIP, "perf needs a CUDA GPU: no GPU")'


def _records(test: str, result: str = FAILED_CHECK, *, marker: str = "", then: str = "") -> str:
    """The source of a test function ``test`` that records ``result`` (a CheckResult expression), under the
    decorator line ``marker`` and followed by the statement ``then`` where given."""
    head = f"{marker}\n" if marker else ""
    tail = f"    {then}\n" if then else ""
    return f"\n{head}def {test}(pipecheck):\n    pipecheck.record({result})\n{tail}"


PASSING = _records("test_passes", PASSED_CHECK)


@dataclass(frozen=True)
class Kind:
    """A kind of run: its test module, the extra options, and whether the run passed."""

    body: str
    passes: bool
    args: tuple[str, ...] = ()
    files: tuple[tuple[str, str], ...] = ()


KINDS: dict[str, Kind] = {
    "all pass": Kind(PASSING, True),
    "a check fails": Kind(_records("test_mismatch"), False),
    "a check fails, then the body skips": Kind(
        PASSING + _records("test_mismatch_then_skip", then='pytest.skip("the rest needs a GPU")'), False),
    "a fixture's teardown records a failing check it catches": Kind(PASSING + """
@pytest.fixture
def checked_at_the_end(pipecheck):
    yield
    try:
        pipecheck.record(CheckResult("occupancy", Verdict.FAIL, "sm_90 1 blocks/SM (floor 2)"))
        raise AssertionError("occupancy below the floor")
    except AssertionError:
        pass

def test_body_passes(checked_at_the_end):
    pass
""", False),
    "everything skipped": Kind("""
def test_needs_the_library(pipecheck):
    pipecheck.record(CheckResult("perf", Verdict.SKIP, "perf needs a CUDA GPU: no GPU"))
    pytest.skip("the optional kernel library is not installed")

@pytest.mark.xfail(reason="known broken on this runner")
def test_known_broken(pipecheck):
    assert False
""", False),
    "passing tests, every check skipped (the CPU tier)": Kind(_records("test_runs_on_the_cpu", SKIPPED_CHECK), True),
    "an xfail(strict=True) that passes": Kind(PASSING + _records(
        "test_unexpectedly_fine", PASSED_CHECK, marker='@pytest.mark.xfail(reason="expected to fail", strict=True)'),
        False),
    "an error in a check, caught by the test": Kind(PASSING + """
def test_catches_the_error(pipecheck):
    try:
        pipecheck.check_occupancy(threads=128, registers=32, min_blocks=0)
    except PipecheckError:
        pass  # the check could not reach a verdict: catching that is not a pass
""", False),
    "a collection error": Kind(PASSING, False, files=(("test_broken", "import no_such_module_of_pipecheck\n"),)),
    "pytest -x stops early": Kind("""
def test_a_fails(pipecheck):
    assert 1 == 2

def test_b_never_runs(pipecheck):
    pipecheck.record(CheckResult("coverage", Verdict.PASS, "max rel err 1e-04"))
""", False, args=("-x",)),
    "a test fails without a pipecheck check": Kind(PASSING + """
def test_plain_failure():
    assert 1 == 2
""", False),
    "no test collected": Kind("", False),
    "pytest.exit(returncode=0) before the run's end": Kind(PASSING + """
def test_ends_the_session(pipecheck):
    pytest.exit("enough for today", returncode=0)

def test_never_runs(pipecheck):
    pipecheck.record(CheckResult("coverage", Verdict.FAIL, "worst rel err 3e-01 (tol 1e-02)"))
""", False, args=("--pipecheck-crash-isolation=off",)),  # in a relay child it is a crash, which fails already
    "a failing check marked expected by hand in a test that expects nothing": Kind(PASSING + _records(
        "test_claims_a_catch", 'CheckResult("coverage", Verdict.FAIL, "worst rel err 3e-01 (tol 1e-02)", expected=True)'),
        False),
    "a strict xfail for an upstream bug, whose checks fail with it": Kind(PASSING + """
@pytest.mark.xfail(reason="upstream: the wrapper raises TypeError for D=None", strict=True, raises=TypeError)
def test_upstream_bug(pipecheck):
    pipecheck.record(CheckResult("coverage", Verdict.FAIL, "kernel raised TypeError at M3-N17",
                                 details={"raised": ["TypeError", "Exception"]}))
    raise TypeError("D must be a tensor")
""", True),
    "an xfail marker whose check fails without the body raising": Kind(PASSING + _records(
        "test_known_wrong", marker='@pytest.mark.xfail(reason="known wrong at the tail")'), True),
    "a strict xfail whose only failure is a check": Kind(PASSING + _records(
        "test_known_wrong", marker='@pytest.mark.xfail(reason="known wrong at the tail", strict=True)'), True),
    "a failing check, then pytest.xfail() in the body": Kind(
        PASSING + _records("test_hides_it", then='pytest.xfail("flaky")'), False),
    "an xfail(raises=TypeError) whose check fails with another exception": Kind(PASSING + _records(
        "test_other_failure", marker='@pytest.mark.xfail(reason="upstream TypeError", raises=TypeError)',
        then='raise AssertionError("coverage failed")'), False),
    "an xfail(raises=TypeError) test whose check mismatches before the TypeError": Kind(PASSING + _records(
        "test_mismatch_then_the_upstream_bug",
        marker='@pytest.mark.xfail(reason="upstream TypeError", raises=TypeError, strict=True)',
        then='raise TypeError("D must be a tensor")'), False),
    "an xfail marker whose condition is false, with a failing check": Kind(PASSING + _records(
        "test_not_expected_here", marker='@pytest.mark.xfail(False, reason="only on old drivers")'), False),
    "--runxfail, an xfail marker and a failing check": Kind(PASSING + _records(
        "test_known_wrong", marker='@pytest.mark.xfail(reason="known wrong at the tail")'), False,
        args=("--runxfail",)),
    "an outside check that reached no verdict, caught by the test": Kind(PASSING + """
def test_outside(pipecheck):
    try:
        pipecheck.check("looks", [1, 2])
    except Exception:
        pass
""", False, files=(("conftest", """
from pytest_pipecheck import OutsideCheck

def pytest_pipecheck_checks():
    return [OutsideCheck("looks", lambda ctx, values: print(values))]
"""),)),
    "an outside check fails": Kind(PASSING + """
def test_outside(pipecheck):
    pipecheck.check("positive", [1, -2])
""", False, files=(("conftest", """
from pytest_pipecheck import CheckResult, OutsideCheck, Verdict

def positive(ctx, values):
    return CheckResult("positive", Verdict.FAIL if min(values) < 0 else Verdict.PASS, f"min {min(values)}")

def pytest_pipecheck_checks():
    return [OutsideCheck("positive", positive)]
"""),)),
}

OK_LINE = "✅ pipecheck: merge OK — "
NOT_OK_LINE = "❌ pipecheck: do not merge — "


def _junit_failed(path: Path) -> bool:
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counted = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
    found = any(case.find("failure") is not None or case.find("error") is not None for case in root.iter("testcase"))
    assert bool(counted) == found, ET.tostring(root, encoding="unicode")  # the XML agrees with itself
    return found


def _markdown_failed(first: str) -> bool:
    # every verdict line is one of the two: neither is an answer a gate can misread
    assert first.startswith((OK_LINE, NOT_OK_LINE)), first
    return first.startswith(NOT_OK_LINE)


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_six_outputs_agree(pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               kind: str) -> None:
    spec = KINDS[kind]
    summary = tmp_path / "step_summary"
    summary.write_text("## Build\n", encoding="utf-8")  # what an earlier command of the step wrote
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    if spec.body:
        pytester.makepyfile(test_kind=HEAD + spec.body)
    for name, text in spec.files:
        pytester.makepyfile(**{name: text})
    result = pytester.runpytest("--pipecheck", "--pipecheck-sanitizer=none", "-p", "no:cacheprovider",
                                "--junitxml=junit.xml", "--pipecheck-json=r.json", "--pipecheck-markdown=r.md",
                                "--pipecheck-html=r.html", *spec.args)
    doc = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    assert isinstance(doc["ok"], bool), doc["ok"]
    md = (pytester.path / "r.md").read_text(encoding="utf-8")
    job = summary.read_text(encoding="utf-8")
    assert job.startswith("## Build\n\n") and job.endswith(md)  # the job summary got the same text
    page = (pytester.path / "r.html").read_text(encoding="utf-8")
    says_failed = {
        "exit status": result.ret != 0,
        "JUnit XML": _junit_failed(pytester.path / "junit.xml"),
        "JSON ok": doc["ok"] is False,
        "Markdown": _markdown_failed(md.splitlines()[0]),
        "job summary": _markdown_failed(job.removeprefix("## Build\n\n").splitlines()[0]),
        "HTML": 'id="all-passed"' not in page,
    }
    expected = not spec.passes
    assert says_failed == dict.fromkeys(says_failed, expected), (kind, result.ret, md.splitlines()[0],
                                                                 result.stdout.str()[-3000:])
    if expected:
        # the reason is given, in the Markdown verdict's words
        assert doc["reason"] and md.splitlines()[0] == NOT_OK_LINE + doc["reason"], (doc["reason"], md)
    else:
        assert doc["reason"] is None and result.ret == 0
