"""``--pipecheck-markdown`` and ``$GITHUB_STEP_SUMMARY`` in a run: both written with the same text, the job
summary appended to, a path that cannot be written a usage error at start-up or a failed run at the end,
never a traceback and never "merge OK" for a run that exits non-zero."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

PASSING = """
from pytest_pipecheck.results import CheckResult, Verdict

def test_fine(pipecheck):
    pipecheck.record(CheckResult("coverage", Verdict.PASS, "max rel err 1e-04"))

def test_skips_a_check(pipecheck):
    pipecheck.record(CheckResult("perf", Verdict.SKIP, "perf needs a CUDA GPU: no GPU"))
"""

FAILING = PASSING + """
def test_races(pipecheck):
    pipecheck.record(CheckResult("sanitizer:racecheck", Verdict.FAIL, "1 hazard at gemm.cu:112"))
"""

OPTIONS = ("--pipecheck", "--pipecheck-sanitizer=none", "-p", "no:cacheprovider")


def _summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, earlier: str | None = "## Build\nbuilt in 3 s\n") -> Path:
    """A job summary file as GitHub Actions gives a step, with what an earlier command of the step wrote."""
    path = tmp_path / "step_summary"
    if earlier is not None:
        path.write_text(earlier, encoding="utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(path))
    return path


def test_the_job_summary_and_the_markdown_file_get_the_same_verdict(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = _summary(tmp_path, monkeypatch)
    pytester.makepyfile(FAILING)
    result = pytester.runpytest(*OPTIONS, "--pipecheck-markdown=r.md")
    result.assert_outcomes(passed=2, failed=1)
    md = (pytester.path / "r.md").read_text(encoding="utf-8")
    assert md.splitlines()[0] == "❌ pipecheck: do not merge — 1 failing check"
    assert "**FAIL** `sanitizer:racecheck` in `test_the_job_summary_and_the_markdown_file_get_the_same_verdict.py::" \
           "test_races`: 1 hazard at gemm.cu:112" in md
    assert "| 1 | perf needs a CUDA GPU: no GPU | `perf` |" in md
    # appended after the step's earlier output, the start-of-run text replaced by the verdict
    assert summary.read_text(encoding="utf-8") == "## Build\nbuilt in 3 s\n\n" + md
    result.stdout.fnmatch_lines(["pipecheck: Markdown report written to r.md (--pipecheck-markdown)",
                                 f"pipecheck: Markdown report appended to {summary} ($GITHUB_STEP_SUMMARY)"])


MID_RUN = """
import os

def test_sees_the_run_in_progress(pipecheck):
    text = open(os.environ["PIPECHECK_TEST_SUMMARY"], encoding="utf-8").read()
    assert text == "## Build\\n\\n❌ pipecheck: do not merge — the run has not finished\\n\\n" + \\
        "pipecheck wrote this when the run started and replaces it when the run ends. If the run is over, it died " + \\
        "before it could write its results (killed, out of memory, a crash): nothing here is a pass.\\n"
"""


def test_the_job_summary_says_not_finished_while_the_run_goes_on(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = _summary(tmp_path, monkeypatch, "## Build\n")
    monkeypatch.setenv("PIPECHECK_TEST_SUMMARY", str(summary))
    pytester.makepyfile(MID_RUN)
    result = pytester.runpytest(*OPTIONS)  # --pipecheck alone: the job summary is still written
    result.assert_outcomes(passed=1)
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("## Build\n\n✅ pipecheck: merge OK — 1 test passed; no pipecheck check ran\n")
    assert "has not finished" not in text


def test_a_run_without_pipecheck_leaves_the_job_summary_alone(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = _summary(tmp_path, monkeypatch)
    pytester.makepyfile("def test_plain():\n    pass\n")
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert summary.read_text(encoding="utf-8") == "## Build\nbuilt in 3 s\n"


def test_markdown_path_from_the_ini_file(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(PASSING)
    pytester.makeini("[pytest]\npipecheck_markdown = out/verdict.md\n")
    pytester.runpytest(*OPTIONS).assert_outcomes(passed=2)
    assert (pytester.path / "out" / "verdict.md").read_text(encoding="utf-8").splitlines()[0] == \
        "✅ pipecheck: merge OK — 1 check passed, 1 skipped"


def test_a_directory_as_markdown_path_is_a_usage_error_naming_the_option(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(PASSING)
    (pytester.path / "outdir").mkdir()
    result = pytester.runpytest_subprocess(*OPTIONS, "--pipecheck-markdown=outdir")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*pipecheck: --pipecheck-markdown=outdir: the report cannot be written there: "
                                 "the path is a directory*"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


@pytest.mark.parametrize("where", ["missing-directory", "under-a-file", "directory"])
def test_a_job_summary_that_cannot_be_written_is_a_usage_error(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    path = {"missing-directory": tmp_path / "gone" / "step_summary", "under-a-file": tmp_path / "a-file" / "summary",
            "directory": tmp_path}[where]
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(path))
    pytester.makepyfile(PASSING)
    result = pytester.runpytest_subprocess(*OPTIONS)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    problem = {"missing-directory": f"the directory '{tmp_path / 'gone'}' does not exist",
               "under-a-file": f"'{tmp_path / 'a-file'}' is not a directory",
               "directory": "the path is a directory; reports are written as regular files only"}[where]
    result.stderr.fnmatch_lines([f"*pipecheck: $GITHUB_STEP_SUMMARY={path} (the job summary GitHub Actions shows): "
                                 f"the Markdown report cannot be appended there: {problem}; unset "
                                 "GITHUB_STEP_SUMMARY for no job summary"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


@pytest.mark.skipif(os.name == "nt" or os.geteuid() == 0, reason="file permissions (root writes anyway)")
def test_a_read_only_job_summary_is_a_usage_error(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = _summary(tmp_path, monkeypatch)
    summary.chmod(0o444)
    pytester.makepyfile(PASSING)
    result = pytester.runpytest_subprocess(*OPTIONS)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*$GITHUB_STEP_SUMMARY=*the Markdown report cannot be appended there: the file is "
                                 "not writable*"])


SUMMARY_GOES_AWAY = """
import os

def test_ok(pipecheck):
    # the job summary was fine at start-up (pipecheck wrote the run's start there); by the end a directory is there
    path = os.environ["GITHUB_STEP_SUMMARY"]
    os.remove(path)
    os.mkdir(path)
"""


def test_a_job_summary_that_cannot_be_written_at_the_end_fails_the_run_and_the_markdown_says_so(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = _summary(tmp_path, monkeypatch)
    pytester.makepyfile(SUMMARY_GOES_AWAY)
    result = pytester.runpytest_subprocess(*OPTIONS, "--pipecheck-markdown=r.md", "--pipecheck-json=r.json",
                                           "--junitxml=junit.xml")
    # the run's own failure (pipecheck::reports) is logged as a test's, so the JUnit XML says it too
    result.assert_outcomes(passed=1, failed=1)
    assert result.ret == 4
    assert 'failures="1"' in (pytester.path / "junit.xml").read_text(encoding="utf-8")
    # the JSON report, written before the job summary failed, is written again: not "ok" for a run that exits 4
    doc = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    assert (doc["ok"], doc["exitstatus"], doc["reason"]) == (False, 4, "a requested report could not be written")
    assert "($GITHUB_STEP_SUMMARY): job summary" in doc["not_written"][0]
    result.stdout.fnmatch_lines([
        f"pipecheck: could not write the Markdown report to '{summary}' ($GITHUB_STEP_SUMMARY): job summary "
        f"($GITHUB_STEP_SUMMARY) '{summary}' is a directory*",
        "pipecheck: exit status 4: a requested report could not be written",
    ])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    # written before the job summary failed, and again after: it never says "merge OK" for a run that exits 4
    md = (pytester.path / "r.md").read_text(encoding="utf-8")
    assert md.splitlines()[0] == "❌ pipecheck: do not merge — a requested report could not be written"
    assert "($GITHUB_STEP_SUMMARY): job summary" in md


def test_a_failing_run_with_an_unwritable_markdown_path_keeps_its_own_status(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(FAILING + """
import os

def test_zz_blocks_the_report(pipecheck):
    os.remove("r.md")
    os.mkdir("r.md")
""")
    result = pytester.runpytest_subprocess(*OPTIONS, "--pipecheck-markdown=r.md")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["pipecheck: could not write the Markdown report to 'r.md' (--pipecheck-markdown): "
                                 "Markdown report 'r.md' is a directory*"])
