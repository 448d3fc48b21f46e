"""Reports carry the tests' own outcomes and fail the run when they cannot be written
(docs/verdicts.md, items 16-18)."""

from __future__ import annotations

import json
import os

import pytest

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

AFTER_CHECKS = """
from pytest_pipecheck.results import CheckResult, Verdict

def test_fine(pipecheck):
    pipecheck.record(CheckResult("coverage", Verdict.PASS, "max rel err 1e-04"))

def test_fails_after_its_checks(pipecheck):
    pipecheck.record(CheckResult("coverage", Verdict.PASS, "max rel err 1e-04"))
    assert 1 == 2, "the output's shape is wrong"
"""


def test_a_test_failing_after_passing_checks_makes_both_reports_say_not_passed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(AFTER_CHECKS)
    result = pytester.runpytest("--pipecheck", "--pipecheck-sanitizer=none", "--pipecheck-json=r.json",
                                "--pipecheck-html=r.html", "--pipecheck-markdown=r.md", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    doc = json.loads((pytester.path / "r.json").read_text())
    assert doc["totals"]["fail"] == 0 and doc["totals"]["pass"] == 2  # every check passed ...
    assert doc["ok"] is False and doc["exitstatus"] == 1  # ... the run did not
    tests = {t["nodeid"].split("::")[1]: t for t in doc["tests"]}
    assert tests["test_fine"]["outcome"] == "passed"
    assert tests["test_fails_after_its_checks"]["outcome"] == "failed"
    assert "the output's shape is wrong" in tests["test_fails_after_its_checks"]["message"]
    page = (pytester.path / "r.html").read_text(encoding="utf-8")
    assert "Every check passed" not in page and 'id="all-passed"' not in page
    assert "1 test did not pass" in page and "test_fails_after_its_checks" in page
    md = (pytester.path / "r.md").read_text(encoding="utf-8")
    assert md.splitlines()[0] == "❌ pipecheck: do not merge — 1 test failed"
    assert "test_fails_after_its_checks" in md and "the output's shape is wrong" in md
    result.stdout.fnmatch_lines(["pipecheck: Markdown report written to r.md (--pipecheck-markdown)"])


def test_a_passing_run_is_ok_in_both_reports(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(AFTER_CHECKS.split("def test_fails_after")[0])
    result = pytester.runpytest("--pipecheck", "--pipecheck-sanitizer=none", "--pipecheck-json=r.json",
                                "--pipecheck-html=r.html", "--pipecheck-markdown=r.md", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    doc = json.loads((pytester.path / "r.json").read_text())
    assert doc["ok"] is True and doc["test_totals"]["passed"] == 1
    assert 'id="all-passed"' in (pytester.path / "r.html").read_text(encoding="utf-8")
    md = (pytester.path / "r.md").read_text(encoding="utf-8")
    assert md.splitlines()[0] == "✅ pipecheck: merge OK — 1 check passed, 0 skipped"


def test_a_collection_error_is_not_ok(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_good="def test_fine(pipecheck):\n    pass\n",
                        test_broken="import no_such_module_pipecheck\n")
    pytester.runpytest("--pipecheck", "--pipecheck-sanitizer=none", "--pipecheck-json=r.json",
                       "--pipecheck-markdown=r.md", "--continue-on-collection-errors", "-p", "no:cacheprovider")
    doc = json.loads((pytester.path / "r.json").read_text())
    assert doc["ok"] is False
    assert (pytester.path / "r.md").read_text(encoding="utf-8").splitlines()[0] == \
        "❌ pipecheck: do not merge — 1 test errored"
    assert {"nodeid": "test_broken.py", "outcome": "error", "when": "collect"}.items() <= \
        next(t for t in doc["tests"] if t["nodeid"] == "test_broken.py").items()


def test_a_crashed_xdist_worker_is_in_the_reports(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(
        """
        import os
        from pytest_pipecheck.results import CheckResult, Verdict

        def test_fine(pipecheck):
            pipecheck.record(CheckResult("coverage", Verdict.PASS, "ok"))

        def test_dies(pipecheck):
            pipecheck.record(CheckResult("coverage", Verdict.PASS, "ok"))
            os._exit(3)  # a GPU fault or a killed process takes the whole worker down
        """
    )
    pytester.runpytest_subprocess("-n", "2", "--pipecheck", "--pipecheck-sanitizer=none", "--pipecheck-json=r.json",
                                  "--pipecheck-html=r.html", "--pipecheck-markdown=r.md", "-p", "xdist",
                                  "-p", "no:cacheprovider")
    doc = json.loads((pytester.path / "r.json").read_text())
    assert doc["ok"] is False
    outcome = {t["nodeid"].split("::")[1]: t["outcome"] for t in doc["tests"]}
    assert outcome["test_dies"] == "crashed" and outcome["test_fine"] == "passed"
    assert doc["test_totals"]["crashed"] == 1
    page = (pytester.path / "r.html").read_text(encoding="utf-8")
    assert 'id="all-passed"' not in page and "1 crashed" in page
    assert (pytester.path / "r.md").read_text(encoding="utf-8").splitlines()[0] == \
        "❌ pipecheck: do not merge — 1 test crashed its worker"


LINK_AT_THE_END = """
import os

def test_ok(pipecheck):
    # the path was fine at start-up (pipecheck marked the run as in progress there); by the end a symlink
    # to someone else's file is there
    os.remove("r.json")
    os.symlink("precious.txt", "r.json")
"""


@pytest.mark.skipif(os.name == "nt", reason="symlinks")
def test_a_json_report_that_cannot_be_written_at_the_end_fails_the_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(LINK_AT_THE_END)
    (pytester.path / "precious.txt").write_text("keep me")
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=none", "--pipecheck-json=r.json",
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)  # the run's own failure, pipecheck::reports, beside the test
    assert result.ret == 4
    result.stdout.fnmatch_lines([
        "pipecheck: could not write the JSON report to 'r.json' (--pipecheck-json): JSON report 'r.json' is a "
        "symbolic link*regular files only*",
        "pipecheck: exit status 4: a requested report could not be written",
    ])
    assert (pytester.path / "r.json").is_symlink() and (pytester.path / "precious.txt").read_text() == "keep me"


@pytest.mark.skipif(os.name == "nt", reason="symlinks")
def test_a_symlink_as_report_path_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_ok(pipecheck):\n    pass\n")
    (pytester.path / "precious.txt").write_text("keep me")
    os.symlink("precious.txt", pytester.path / "r.html")
    result = pytester.runpytest("--pipecheck", "--pipecheck-sanitizer=none", "--pipecheck-html=r.html",
                                "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--pipecheck-html=r.html: the report cannot be written there: the path is a "
                                 "symbolic link (to 'precious.txt')*"])
    assert (pytester.path / "precious.txt").read_text() == "keep me"


def test_a_relay_child_does_not_write_the_parents_reports(pytester: pytest.Pytester) -> None:
    # a child started with the parent's ini file sees its report keys; only the parent writes them
    pytester.makepyfile("def test_ok(pipecheck):\n    pass\n")
    pytester.makeini("[pytest]\npipecheck_json = r.json\npipecheck_html = r.html\npipecheck_markdown = r.md\n")
    result = pytester.runpytest("--pipecheck", "--pipecheck-sanitizer=none", "--pipecheck-relay=relay.jsonl",
                                "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert not (pytester.path / "r.json").exists() and not (pytester.path / "r.html").exists()
    assert not (pytester.path / "r.md").exists()
