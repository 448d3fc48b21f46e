"""The Markdown report (``--pipecheck-markdown``, ``$GITHUB_STEP_SUMMARY``): the merge verdict on its first
line, "merge OK" exactly where the JSON report's ``ok`` is true, and what decides it, bounded."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_pipecheck._atomic import UnsafePathError
from pytest_pipecheck.device import DeviceInfo, TierInfo
from pytest_pipecheck.report import json_report, markdown
from pytest_pipecheck.report.interrupt import Interruption
from pytest_pipecheck.report.outcomes import TestOutcomes
from pytest_pipecheck.results import CheckResult, Verdict

CPU = TierInfo("cpu", None, "no GPU", {})
H100 = TierInfo("gpu", DeviceInfo(0, "NVIDIA H100 80GB HBM3", "9.0", 132, 81559, "575.57.08"), "", {})


def _report(nodeid: str, when: str, outcome: str, longrepr: Any = None, **extra: Any) -> SimpleNamespace:
    return SimpleNamespace(nodeid=nodeid, when=when, passed=outcome == "passed", failed=outcome == "failed",
                           skipped=outcome == "skipped", longrepr=longrepr, **extra)


def _outcomes(**tests: str) -> TestOutcomes:
    """``name=outcome`` for tests ``t.py::name``: passed, failed (in its call), skipped (at setup)."""
    out = TestOutcomes()
    out.expect(f"t.py::{name}" for name in tests)
    for name, outcome in tests.items():
        nodeid = f"t.py::{name}"
        if outcome == "skipped":
            out.add(_report(nodeid, "setup", "skipped", ("t.py", 1, "Skipped: needs two GPUs")))
            continue
        if outcome == "not run":
            continue
        out.add(_report(nodeid, "setup", "passed"))
        out.add(_report(nodeid, "call", outcome, "AssertionError: the output's shape is wrong"
                        if outcome == "failed" else None))
        out.add(_report(nodeid, "teardown", "passed"))
    return out


def _check(verdict: Verdict, test: str = "a", check: str = "coverage", summary: str = "max rel err 1e-04",
           **kw: Any) -> CheckResult:
    return CheckResult(check, verdict, summary, kernel="my_gemm", nodeid=f"t.py::{test}", **kw)


def _first(text: str) -> str:
    return text.splitlines()[0]


def test_a_passing_run_says_merge_ok_with_its_counts_first() -> None:
    results = [_check(Verdict.PASS), _check(Verdict.PASS, "b"),
               _check(Verdict.SKIP, "b", "sanitizer", "compute-sanitizer not found"),
               _check(Verdict.FAIL, "m", "tile_probe", "K tile 7 never reached the output", expected=True)]
    text = markdown.render(results, H100, 7, _outcomes(a="passed", b="passed", m="passed", c="skipped"), 0)
    assert _first(text) == "✅ pipecheck: merge OK — 2 checks passed, 1 skipped, 1 expected failure caught"
    assert "tier gpu (NVIDIA H100 80GB HBM3, sm_90, driver 575.57.08)" in text
    assert "**Tests:** 3 passed, 1 skipped" in text
    assert "| 1 | compute-sanitizer not found | `sanitizer` |" in text  # grouped by reason, with its count
    assert "| 1 | Skipped: needs two GPUs | `t.py::c` |" in text
    assert "do not merge" not in text and "Failing" not in text


def test_a_failing_run_says_do_not_merge_with_what_failed() -> None:
    long_message = "\n".join(f"race {i}: write at gemm.cu:{100 + i} vs read at gemm.cu:{200 + i}" for i in range(40))
    results = [
        _check(Verdict.FAIL, "a", "sanitizer:racecheck", "2 hazards", details={"message": long_message}),
        _check(Verdict.FAIL, "b", "coverage", "M tail: 12 elements never written"),
        _check(Verdict.ERROR, "c", "sanitizer:synccheck", "the child died during this test"),
        _check(Verdict.PASS, "d"),
    ]
    outcomes = _outcomes(a="failed", b="failed", c="failed", d="passed", e="failed")
    text = markdown.render(results, CPU, 7, outcomes, 1)
    assert _first(text) == ("❌ pipecheck: do not merge — 2 failing checks, 1 inconclusive check, "
                            "1 other test failed")
    assert "#### 2 failing checks and 1 inconclusive check" in text
    assert "**FAIL** `sanitizer:racecheck` on `my_gemm` in `t.py::a`: 2 hazards" in text
    assert "**INCONCLUSIVE** `sanitizer:synccheck` on `my_gemm` in `t.py::c`" in text
    # the long message is folded, whole up to its bound, in a code block
    assert "<details><summary>message (40 lines)</summary>" in text and "race 39: write at gemm.cu:139" in text
    assert "reproduce: `pytest t.py::a --pipecheck --pipecheck-seed=7`" in text
    # the test that failed outside its checks is listed on its own; the ones above are not repeated
    assert "#### 1 test did not pass besides the checks above" in text
    assert "| `t.py::e` | failed | call | AssertionError: the output's shape is wrong |" in text
    assert "merge OK" not in text


def test_a_test_failing_after_passing_checks_is_not_merge_ok() -> None:
    text = markdown.render([_check(Verdict.PASS)], CPU, 1, _outcomes(a="failed"), 1)
    assert _first(text) == "❌ pipecheck: do not merge — 1 test failed"


@pytest.mark.parametrize(("results", "tests", "exitstatus", "line"), [
    ([], {}, 5, "❌ pipecheck: do not merge — no test ran"),
    ([_check(Verdict.PASS)], {"a": "passed"}, 3, "❌ pipecheck: do not merge — pytest exited with status 3 "
                                                  "(internal error)"),
    ([], {"a": "passed"}, 0, "✅ pipecheck: merge OK — 1 test passed; no pipecheck check ran"),
])
def test_the_verdict_names_what_else_kept_the_run_from_passing(results: list[CheckResult], tests: dict[str, str],
                                                                exitstatus: int, line: str) -> None:
    assert _first(markdown.render(results, CPU, 1, _outcomes(**tests), exitstatus)) == line


def test_merge_ok_exactly_where_the_json_report_is_ok() -> None:
    # every combination of check verdicts, test outcomes, exit status and run state
    checks = {"pass": [_check(Verdict.PASS)], "skip": [_check(Verdict.SKIP, summary="no GPU")],
              "fail": [_check(Verdict.FAIL)], "error": [_check(Verdict.ERROR)], "none": []}
    tests = {"passed": {"a": "passed"}, "failed": {"a": "failed"}, "not run": {"a": "not run"}, "none": {}}
    why = Interruption("SIGTERM", "SIGTERM received")
    for (c, results), (t, outcome), status, state in itertools.product(
            checks.items(), tests.items(), (0, 1, None), ("finished", "interrupted", "running")):
        interrupted = why if state == "interrupted" else None
        doc = json_report.build(results, CPU, 1, _outcomes(**outcome), status, state=state, interrupted=interrupted)
        line = markdown.verdict_line(doc)
        assert line.startswith("✅ pipecheck: merge OK") == (doc["ok"] is True), (c, t, status, state, line)
        assert line.startswith("❌ pipecheck: do not merge — ") == (doc["ok"] is False), (c, t, status, state, line)


def test_a_run_that_has_not_finished_says_only_that() -> None:
    text = markdown.render([], CPU, 1, TestOutcomes(), None, state="running")
    assert _first(text) == "❌ pipecheck: do not merge — the run has not finished"
    assert "died before it could write its results" in text
    assert "merge OK" not in text and "**Checks:**" not in text


def test_an_interrupted_run_is_never_merge_ok_and_says_how_far_it_got() -> None:
    why = Interruption("SIGTERM", "SIGTERM received")
    everything_passed = markdown.render([_check(Verdict.PASS)], CPU, 1, _outcomes(a="passed", b="not run",
                                                                                  c="not run"),
                                        2, state="interrupted", interrupted=why)
    assert _first(everything_passed) == ("❌ pipecheck: do not merge — the run was interrupted by SIGTERM before it "
                                         "finished (1 of 3 tests ran)")
    assert "merge OK" not in everything_passed and "It did not pass." in everything_passed
    failing = markdown.render([_check(Verdict.FAIL)], CPU, 1, _outcomes(a="failed", b="not run"), 2,
                              state="interrupted", interrupted=Interruption(None, "KeyboardInterrupt"))
    assert _first(failing) == ("❌ pipecheck: do not merge — the run was interrupted (KeyboardInterrupt) before it "
                               "finished (1 of 2 tests ran; 1 failing check so far)")


def test_a_report_that_could_not_be_written_is_not_merge_ok() -> None:
    line = "pipecheck: could not write the JSON report to 'r.json' (--pipecheck-json): Permission denied"
    text = markdown.render([_check(Verdict.PASS)], CPU, 1, _outcomes(a="passed"), 4, not_written=[line])
    assert _first(text) == "❌ pipecheck: do not merge — a requested report could not be written"
    assert "#### Reports that could not be written" in text and "Permission denied" in text


def _perf(test: str, verdict: Verdict = Verdict.PASS, **details: Any) -> CheckResult:
    return CheckResult("perf", verdict, "812.3 us vs 790.1 us baseline", kernel="my_gemm", nodeid=f"t.py::{test}",
                       details={"case": "4096", **details})


STORED = {"median_us": 812.3, "baseline_median_us": 790.1, "ratio": 1.028, "change": 0.028, "ci_low": 1.021,
          "ci_high": 1.035, "p_value": 2e-9, "regressed": False}


def test_perf_deltas_from_the_compare_details_when_present_else_from_the_stored_baseline() -> None:
    compared = {"base_median_us": 100.0, "head_median_us": 110.0, "ratio": 1.1, "ci_low": 1.08, "ci_high": 1.12,
                "p_value": 1e-12, "rev": "abc1234", "decision": "regression: +10.0% beyond the 2.75% threshold"}
    results = [
        _perf("stored", **STORED),
        _perf("nested", Verdict.FAIL, compare=compared, **STORED),  # compare mode's numbers win over the store's
        _perf("flat", **{**compared, "ratio": None, "ci_low": None, "ci_high": None, "ci": [0.97, 1.01],
                         "rev": None, "base_rev": "def5678", "decision": None}),
        _perf("odd", base_median_us="fast", head_median_us=None, ci_low=float("nan")),  # nothing usable: no row
        _perf("skipped", Verdict.SKIP, median_us=50.0, reason="no baseline for this GPU"),
    ]
    text = markdown.render(results, H100, 1, _outcomes(stored="passed", nested="failed", flat="passed", odd="passed",
                                                       skipped="passed"), 1)
    perf = text[text.index("#### Perf against the base"):]
    rows = [line for line in perf.splitlines() if line.startswith("| `t.py::")]
    assert rows == [
        "| `t.py::nested [4096]` | `abc1234` | 100.0 | 110.0 | **+10.0%** | +8.0% … +12.0% | 1e-12 | "
        "regression: +10.0% beyond the 2.75% threshold |",
        # then the largest changes first
        "| `t.py::flat [4096]` | `def5678` | 100.0 | 110.0 | +10.0% | -3.0% … +1.0% | 1e-12 | pass |",
        "| `t.py::stored [4096]` | stored baseline | 790.1 | 812.3 | +2.8% | +2.1% … +3.5% | 2e-09 | within the gate |",
    ]
    assert "perf compared with `abc1234`, `def5678`" in text
    assert "| 1 | no baseline for this GPU | `perf` |" not in text  # a skip's reason is its summary
    assert "812.3 us vs 790.1 us baseline | `perf` |" in text


def test_text_from_results_cannot_break_the_markdown() -> None:
    nasty = "a|b <script>alert(1)</script> *bold* `tick` [link](http://x) #1"
    results = [CheckResult("coverage", Verdict.FAIL, nasty, kernel="k`|", nodeid="t.py::a[x|y]"),
               CheckResult("coverage", Verdict.SKIP, nasty, nodeid="t.py::b")]
    text = markdown.render(results, CPU, 1, _outcomes(a="failed", b="passed"), 1)
    assert "<script>" not in text
    assert ("a\\|b \\<script\\>alert(1)\\</script\\> \\*bold\\* \\`tick\\` \\[link\\](http://x) \\#1" in text)
    assert "on ``k`|`` in `t.py::a[x|y]`" in text  # a code span longer than the backticks inside it
    skip_row = next(line for line in text.splitlines() if line.startswith("| 1 | a"))
    assert skip_row.count("|") - skip_row.count("\\|") == 4  # three cells, whatever the reason held


def test_a_huge_failing_run_stays_bounded() -> None:
    results = [CheckResult("coverage", Verdict.FAIL, f"failure {i}: " + "x" * 5000, nodeid=f"t.py::t{i}",
                           details={"message": "line\n" * 10_000}) for i in range(2000)]
    results += [CheckResult("sanitizer", Verdict.SKIP, f"reason {i}", nodeid=f"t.py::s{i}") for i in range(500)]
    results += [_perf(f"p{i}", **STORED) for i in range(500)]
    text = markdown.render(results, CPU, 1, _outcomes(**{f"t{i}": "failed" for i in range(2000)}), 1)
    assert len(text.encode()) < 512 * 1024  # GitHub takes up to 1 MiB per step's summary
    assert _first(text) == "❌ pipecheck: do not merge — 2000 failing checks"
    assert "… and 1970 more distinct failures" in text
    assert "… 470 more reasons" in text and "… and 460 more" in text


def test_failures_with_the_same_message_are_one_entry_with_their_tests() -> None:
    results = [_check(Verdict.ERROR, f"t{i}", "sanitizer:racecheck", "canary not caught") for i in range(25)]
    text = markdown.render(results, CPU, 1, _outcomes(**{f"t{i}": "failed" for i in range(25)}), 1)
    assert text.count("**INCONCLUSIVE**") == 1
    assert "in 25 tests, first `t.py::t0`" in text and "<details><summary>the 25 tests</summary>" in text
    assert "- … and 5 more (the JSON report lists every one)" in text


# ------------------------------------------------------------------------------------ the job summary
def test_the_job_summary_is_appended_to_and_this_runs_section_replaced(tmp_path: Path) -> None:
    path = tmp_path / "step_summary"
    path.write_text("## Build\nbuilt in 3 s")  # an earlier command of the step, no final newline
    summary = markdown.StepSummary(str(path))
    summary.write("❌ pipecheck: do not merge — the run has not finished\n")
    summary.write("✅ pipecheck: merge OK — 2 checks passed, 0 skipped\n")
    assert path.read_text() == "## Build\nbuilt in 3 s\n\n✅ pipecheck: merge OK — 2 checks passed, 0 skipped\n"


def test_the_job_summary_keeps_what_others_appended_after_this_runs_section(tmp_path: Path) -> None:
    path = tmp_path / "step_summary"
    summary = markdown.StepSummary(str(path))  # no file yet: created
    summary.write("❌ pipecheck: do not merge — the run has not finished\n")
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("a line from a conftest\n")
    summary.write("✅ pipecheck: merge OK — 1 check passed, 0 skipped\n")
    assert path.read_text() == ("❌ pipecheck: do not merge — the run has not finished\n"
                                "a line from a conftest\n\n✅ pipecheck: merge OK — 1 check passed, 0 skipped\n")


@pytest.mark.skipif(os.name == "nt", reason="symlinks")
def test_the_job_summary_is_not_written_through_a_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "summary").symlink_to(victim)
    with pytest.raises(UnsafePathError, match=r"job summary \(\$GITHUB_STEP_SUMMARY\) .*summary' is a symbolic link"):
        markdown.StepSummary(str(tmp_path / "summary")).write("text")
    assert victim.read_text() == "precious"


def test_the_markdown_file_is_written_atomically_as_a_regular_file(tmp_path: Path) -> None:
    path = tmp_path / "r.md"
    markdown.write(str(path), "✅ pipecheck: merge OK — 1 check passed, 0 skipped\n")
    assert path.read_text(encoding="utf-8").startswith("✅ pipecheck: merge OK")
    (tmp_path / "dir.md").mkdir()
    with pytest.raises(UnsafePathError, match=r"Markdown report .*dir\.md' is a directory"):
        markdown.write(str(tmp_path / "dir.md"), "text")
