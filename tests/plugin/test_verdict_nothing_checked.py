"""A run in which nothing was checked is not a pass (docs/verdicts.md, "A run that checked nothing"): every test
skipped or xfailed, no check passed. Under ``--pipecheck`` (or with a report asked for) it fails, in all six
outputs; a run whose tests pass while every pipecheck check skips (the CPU tier) still passes, and a run
without pipecheck keeps pytest's own exit status."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from .test_verdict_agreement import HEAD, KINDS

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

# the agreement test's "everything skipped" run: a test that skips after a skipped check, and an xfail
NOTHING_PASSES = HEAD + KINDS["everything skipped"].body

REASON = ("nothing was checked: 0 checks passed, 1 skipped; 0 tests passed, 1 skipped, 1 xfailed (the optional "
          "kernel library is not installed; assert False; perf needs a CUDA GPU: no GPU)")
OPTIONS = ("--pipecheck", "--pipecheck-sanitizer=none", "-p", "no:cacheprovider")
REPORTS = ("--junitxml=junit.xml", "--pipecheck-json=r.json", "--pipecheck-markdown=r.md", "--pipecheck-html=r.html")


def _junit_failures(path: Path) -> dict[str, str]:
    root = ET.parse(path).getroot()
    return {f"{case.get('classname')}::{case.get('name')}": str(bad.get("message"))
            for case in root.iter("testcase") for bad in (case.find("failure"), case.find("error")) if bad is not None}


def test_a_run_in_which_every_test_skipped_or_xfailed_fails_in_every_output(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = tmp_path / "step_summary"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    pytester.makepyfile(test_k=NOTHING_PASSES)
    result = pytester.runpytest(*OPTIONS, *REPORTS, "-rA")
    # pytest alone exits 0 here: the run ends with a failure of its own, pipecheck::nothing_checked
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(skipped=1, xfailed=1, failed=1)
    result.stdout.fnmatch_lines([f"FAILED pipecheck::nothing_checked - pipecheck: {REASON[:30]}*"])
    assert _junit_failures(pytester.path / "junit.xml") == {
        "pipecheck::nothing_checked": f"pipecheck: {REASON}\n(a merge gate that checked nothing does not pass: run "
                                      "the tests where they can run, with their kernel library and the GPU they "
                                      "need; docs/verdicts.md, \"A run that checked nothing\")"}
    doc = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    assert (doc["ok"], doc["nothing_checked"], doc["reason"], doc["exitstatus"]) == (False, True, REASON, 1)
    # the run's own failure is not one of the tests: they are as pytest said
    assert doc["test_totals"]["skipped"] == 1 and doc["test_totals"]["xfailed"] == 1
    assert doc["test_totals"]["failed"] == 0 and len(doc["tests"]) == 2
    md = (pytester.path / "r.md").read_text(encoding="utf-8")
    assert md.splitlines()[0] == "❌ pipecheck: do not merge — " + REASON
    assert summary.read_text(encoding="utf-8") == md
    page = (pytester.path / "r.html").read_text(encoding="utf-8")
    assert 'id="nothing-checked"' in page and 'id="all-passed"' not in page


def test_a_module_skipped_as_a_whole_is_a_run_that_checked_nothing(pytester: pytest.Pytester) -> None:
    # the commonest form: the kernel library is optional, and each module importorskips it
    pytester.makepyfile(test_k="import pytest\npytest.importorskip('no_such_kernel_library')\n\n"
                               "def test_k(pipecheck):\n    pass\n")
    result = pytester.runpytest(*OPTIONS, "--pipecheck-json=r.json", "--pipecheck-markdown=r.md")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # pytest alone: 5, no tests collected
    doc = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    assert doc["ok"] is False and doc["nothing_checked"] is True
    assert doc["tests"] == [{"nodeid": "test_k.py", "outcome": "skipped", "when": "collect",
                             "message": "Skipped: could not import 'no_such_kernel_library': No module named "
                                        "'no_such_kernel_library'"}]
    assert (pytester.path / "r.md").read_text(encoding="utf-8").splitlines()[0] == (
        "❌ pipecheck: do not merge — nothing was checked: 0 checks passed, 0 skipped; 0 tests passed, 1 skipped "
        "(could not import 'no_such_kernel_library': No module named 'no_such_kernel_library')")


def test_passing_tests_whose_checks_all_skipped_still_pass(pytester: pytest.Pytester) -> None:
    """The CPU tier without a GPU: every pipecheck check skips, the tests pass. That is a pass, and the verdict
    says what passed: the tests, not any check."""
    pytester.makepyfile(test_k=NOTHING_PASSES + """
def test_runs_on_the_cpu(pipecheck):
    pipecheck.record(CheckResult("sanitizer", Verdict.SKIP, "sanitizer needs a CUDA GPU: no GPU"))
""")
    result = pytester.runpytest(*OPTIONS, *REPORTS)
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1, skipped=1, xfailed=1)
    doc = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    assert (doc["ok"], doc["nothing_checked"], doc["reason"]) == (True, False, None)
    assert (pytester.path / "r.md").read_text(encoding="utf-8").splitlines()[0] == \
        "✅ pipecheck: merge OK — 1 test passed; 0 checks passed, 2 skipped"
    assert _junit_failures(pytester.path / "junit.xml") == {}
    assert 'id="all-passed"' in (pytester.path / "r.html").read_text(encoding="utf-8")


def test_without_pipecheck_pytest_keeps_its_own_status(pytester: pytest.Pytester) -> None:
    # no --pipecheck and no pipecheck report: pipecheck gates nothing, so it changes nothing
    pytester.makepyfile(test_k=NOTHING_PASSES)
    result = pytester.runpytest("-p", "no:cacheprovider", "--junitxml=junit.xml")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(skipped=1, xfailed=1)
    assert _junit_failures(pytester.path / "junit.xml") == {}


def test_under_xdist_the_controller_fails_the_run(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(test_k=NOTHING_PASSES)
    result = pytester.runpytest_subprocess("-n", "2", "-p", "xdist", *OPTIONS, "--pipecheck-json=r.json",
                                           "--junitxml=junit.xml")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(skipped=1, xfailed=1, failed=1)
    assert list(_junit_failures(pytester.path / "junit.xml")) == ["pipecheck::nothing_checked"]
    doc = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    assert (doc["ok"], doc["reason"]) == (False, REASON)
