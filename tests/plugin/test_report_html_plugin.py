"""``--pipecheck-html PATH`` through real pytest runs: the page, the ini key, and bad paths.

Needs the plugin to call :func:`pytest_pipecheck.report.html.write_html_for_run` from
``pytest_sessionfinish`` when ``run_config.html`` is set.
"""

from __future__ import annotations

import pytest

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


def test_a_directory_as_report_path_is_one_clear_line_and_results_stand(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TESTS)
    (pytester.path / "outdir").mkdir()
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=none", "--pipecheck-html=outdir")
    result.assert_outcomes(passed=3, failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "pipecheck: cannot write the HTML report to 'outdir': it is a directory; give a file name*",
        "*pipecheck checks: 2 pass, 1 fail, 1 skip, 0 error*",
    ])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_an_unwritable_report_path_does_not_change_the_exit_status(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_ok(pipecheck): pass")
    (pytester.path / "blocker").write_text("a file, not a directory")
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=none", "--pipecheck-html=blocker/r.html")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["pipecheck: cannot write the HTML report to 'blocker/r.html': *"])


def test_no_checks_ran_still_writes_a_page_that_says_so(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_plain(): pass")
    result = pytester.runpytest_subprocess("--pipecheck-html=empty.html")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["pipecheck: HTML report written to empty.html (no pipecheck checks ran*"])
    assert "No pipecheck checks ran." in (pytester.path / "empty.html").read_text(encoding="utf-8")
