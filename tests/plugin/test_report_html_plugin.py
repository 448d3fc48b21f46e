"""``--pipecheck-html PATH`` through real pytest runs: the page, the ini key, and bad paths.

Needs the plugin to call :func:`pytest_pipecheck.report.html.write_html_for_run` from
``pytest_sessionfinish`` when ``run_config.html`` is set.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

TESTS = """
import pytest
from pytest_pipecheck.results import CheckResult, Verdict

@pytest.mark.pipecheck(kernel="gemm_cpasync")
@pytest.mark.parametrize("k", [200, 256])
def test_cov(pipecheck, k):
    pipecheck.record(CheckResult("coverage", Verdict.PASS, f"max rel err 1e-04 at K={k}"))

@pytest.mark.pipecheck(kernel="gemm_cpasync")
def test_occ(pipecheck):
    pipecheck.check_occupancy(threads=128, registers=64, dynamic_smem=96 * 1024, arch="sm_86,sm_90",
                              min_blocks=2)

def test_skip(pipecheck):
    pipecheck.skip_check("sanitizer:racecheck", "no GPU <here>")
"""


def test_html_report_is_written_with_every_kernel_and_verdict(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TESTS)
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=none", "--pipecheck-seed=99",
                                "--pipecheck-html=reports/run.html")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["pipecheck: HTML report written to reports/run.html (4 check results)"])
    page = (pytester.path / "reports" / "run.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert "<b>seed</b> 99" in page
    assert ">gemm_cpasync <" in page and ">test_skip <" in page
    assert "max rel err 1e-04 at K=256" in page
    assert "sm_86 1, sm_90 2 blocks/SM (floor 2)" in page  # the occupancy failure's summary
    assert 'id="not-passed"' in page and "test_occ" in page
    assert "no GPU &lt;here&gt;" in page and "no GPU <here>" not in page
    assert '<h3 class="occupancy">' in page


def test_html_report_path_from_ini(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TESTS)
    pytester.makeini("[pytest]\npipecheck_html = from_ini.html\n")
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=none")
    result.assert_outcomes(passed=3, failed=1)
    assert "gemm_cpasync" in (pytester.path / "from_ini.html").read_text(encoding="utf-8")


# docs/verdicts.md item 17: a report path that cannot be written is a usage error at start-up, naming the option
def test_a_directory_as_report_path_is_a_usage_error_naming_the_option(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TESTS)
    (pytester.path / "outdir").mkdir()
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=none", "--pipecheck-html=outdir")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*pipecheck: --pipecheck-html=outdir: the report cannot be written there: "
                                 "the path is a directory*"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_a_report_path_under_a_file_is_a_usage_error_naming_the_ini_key(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_ok(pipecheck): pass")
    pytester.makeini("[pytest]\npipecheck_html = blocker/r.html\n")
    (pytester.path / "blocker").write_text("a file, not a directory")
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=none")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*pipecheck: pipecheck_html = blocker/r.html in the ini file: the report cannot be "
                                 "written there: *blocker' is not a directory*"])


LATE_FAILURE = """
import os

def test_ok(pipecheck):
    # the report path was fine at start-up (pipecheck marked the run as in progress there); by the end
    # something else is there
    os.remove("late.html")
    os.mkdir("late.html")
"""


def test_a_report_that_cannot_be_written_at_the_end_fails_the_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(LATE_FAILURE)
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=none", "--pipecheck-html=late.html")
    # the run's own failure, logged as a test's: the JUnit XML and pytest's counts agree with the exit status
    result.assert_outcomes(passed=1, failed=1)
    assert result.ret == 4  # documented: a report that could not be written makes a passing run exit 4
    result.stdout.fnmatch_lines([
        "pipecheck: cannot write the HTML report to 'late.html': it is a directory* (--pipecheck-html)",
        "pipecheck: exit status 4: a requested report could not be written",
    ])


def test_no_checks_ran_still_writes_a_page_that_says_so(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_plain(): pass")
    result = pytester.runpytest_subprocess("--pipecheck-html=empty.html")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["pipecheck: HTML report written to empty.html (no pipecheck checks ran*"])
    assert "No pipecheck checks ran." in (pytester.path / "empty.html").read_text(encoding="utf-8")
