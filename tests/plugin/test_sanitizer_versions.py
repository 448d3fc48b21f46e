"""The compute-sanitizer version decides the options pipecheck passes and the reviewed known false
positives it filters (pytest_pipecheck/sanitizer/known.py), on the fake tool, which prints the
configured version and refuses an option its version does not have."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ._sanitizer_fake import _fake, _results, _setup

OLD = "Version 2025.3.1.0 (build 36400806) (public-release)"
NEW = "Version 2026.4.0.0 (build 39022338) (public-release)"

TESTS = """
    def test_pipe(pipecheck):
        pass

    def test_gluon(pipecheck):
        pass

    def test_other(pipecheck):
        pass
"""


def _run(pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str,
         plan: dict[str, object], tools: str) -> tuple[pytest.RunResult, list[list[str]]]:
    log = _fake(tmp_path, monkeypatch, plan)
    monkeypatch.setenv("FAKE_SANITIZER_VERSION", version)
    _setup(pytester)
    pytester.makepyfile(test_k=TESTS)
    result = pytester.runpytest_subprocess("--pipecheck", f"--pipecheck-sanitizer={tools}", "-p", "no:cacheprovider")
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return result, calls


def _options(calls: list[list[str]], tool: str) -> list[str]:
    """The sanitizer options (before the child's python) of every child of ``tool``."""
    out: list[str] = []
    for argv in calls:
        if argv[argv.index("--tool") + 1] == tool:
            out += argv[:next(i for i, a in enumerate(argv) if not a.startswith("-") and argv[i - 1] not in (
                "--tool", "--error-exitcode", "--print-limit", "--save", "--racecheck-report",
                "--initcheck-address-space", "--check-bulk-copy", "--check-warpgroup-mma", "--padding",
                "--report-api-errors"))]
    return out


def test_the_new_version_gets_every_option_where_it_applies(pytester: pytest.Pytester, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    result, calls = _run(pytester, tmp_path, monkeypatch, NEW, {}, "all")
    text = result.stdout.str()
    result.assert_outcomes(passed=3)
    assert "2026.4.0.0, PIPECHECK_COMPUTE_SANITIZER)" in text  # the header: binary, version, how it was found
    assert "cannot" not in text and "known false positive" not in text  # nothing to say for the pinned version
    init = _options(calls, "initcheck")
    assert ["--initcheck-address-space", "all"] == init[init.index("--initcheck-address-space"):][:2]
    for tool in ("memcheck", "racecheck", "synccheck", "initcheck"):
        opts = _options(calls, tool)
        assert opts[opts.index("--check-bulk-copy") + 1] == "yes", tool
    for tool in ("memcheck", "synccheck"):
        opts = _options(calls, tool)
        assert opts[opts.index("--check-warpgroup-mma") + 1] == "yes", tool
    assert "--check-warpgroup-mma" not in _options(calls, "racecheck")
    assert "--initcheck-address-space" not in _options(calls, "memcheck")


def test_an_old_version_gets_no_option_it_lacks_and_says_what_it_cannot_see(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, calls = _run(pytester, tmp_path, monkeypatch, OLD, {}, "all")
    text = result.stdout.str()
    result.assert_outcomes(passed=3)  # the fake refuses options 2025.3.1 lacks: none was given
    for tool in ("memcheck", "racecheck", "synccheck", "initcheck"):
        opts = _options(calls, tool)
        assert not {"--initcheck-address-space", "--check-bulk-copy"} & set(opts), tool
        # 2025.3.1 has --check-warpgroup-mma (docs/validation/2026-11-25-h100-0950.md): given where it applies
        assert ("--check-warpgroup-mma" in opts) == (tool in ("memcheck", "synccheck")), tool
    said = [ln for ln in text.splitlines() if "compute-sanitizer 2025.3.1.0" in ln]
    assert any("cannot check shared memory in initcheck" in ln for ln in said)
    assert any("rule cuda-pipeline-producer-commit" in ln for ln in said)
    assert any("rule triton-ws-dispatch-state" in ln for ln in said)
    assert sum("cannot check shared memory" in ln for ln in text.splitlines()) == 1  # said once


def test_an_unknown_version_gets_no_gated_option_and_no_rule(pytester: pytest.Pytester, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    plan = {"synccheck": {"inject": {"test_pipe": "synccheck_pipeline_producer_commit_2025_3_1.txt"}}}
    result, calls = _run(pytester, tmp_path, monkeypatch, "Version unreadable", plan, "synccheck,initcheck")
    text = result.stdout.str()
    assert "version unknown" in text
    assert not {"--initcheck-address-space", "--check-bulk-copy"} & set(_options(calls, "initcheck"))
    res = _results(text)
    assert res[("test_pipe", "sanitizer:synccheck")][0] == "fail"  # no rule for a version it could not read


def test_known_false_positives_are_filtered_counted_and_reported_only_for_the_old_version(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = {"synccheck": {"inject": {"test_pipe": "synccheck_pipeline_producer_commit_2025_3_1.txt",
                                     "test_other": "synccheck_divergent_hostbt.txt"}},
            "racecheck": {"inject": {"test_gluon": "racecheck_triton_ws_dispatch_hazard_2025_3_1.txt",
                                     "test_other": "racecheck_triton_ws_dispatch_analysis_constructed.txt"}}}
    result, _ = _run(pytester, tmp_path, monkeypatch, OLD, plan, "racecheck,synccheck")
    res = _results(result.stdout.str())
    verdict, summary = res[("test_pipe", "sanitizer:synccheck")]
    assert verdict == "pass"
    assert "3 findings filtered by rule cuda-pipeline-producer-commit for compute-sanitizer 2025.3.1.0" in summary
    verdict, summary = res[("test_gluon", "sanitizer:racecheck")]
    assert verdict == "pass" and "4 findings filtered by rule triton-ws-dispatch-state" in summary
    # every other finding still fails the test: a real barrier error, and a race on the kernel's own ring
    # next to two dispatch-state records, which are filtered and named in the failure
    assert res[("test_other", "sanitizer:synccheck")][0] == "fail"
    verdict, summary = res[("test_other", "sanitizer:racecheck")]
    assert verdict == "fail" and "1 RAW race" in summary and "gluon_gemm.py:262" in summary
    result.stdout.fnmatch_lines(["*2 findings filtered by rule triton-ws-dispatch-state for compute-sanitizer*"])
    result.assert_outcomes(passed=2, failed=1)

    # the same records under the new version: nothing is filtered, each fails
    (tmp_path / "new").mkdir()
    result, _ = _run(pytester, tmp_path / "new", monkeypatch, NEW, plan, "racecheck,synccheck")
    res = _results(result.stdout.str())
    assert res[("test_pipe", "sanitizer:synccheck")][0] == "fail"
    assert res[("test_gluon", "sanitizer:racecheck")][0] == "fail"
    assert "filtered by rule" not in result.stdout.str()


def test_a_toolchain_bug_is_filtered_and_a_child_it_kills_is_explained(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton 3.6's warp-specialize barrier re-init (rule triton-ws-barrier-reinit) under 2026.4.0: filtered and
    counted; where the tool's report then kills the child, the test is inconclusive, saying why, never a pass."""
    kernel_file = Path(__file__).resolve().parents[1] / "data" / "sass" / "triton_gemm.py"
    plan = {"synccheck": {"inject": {"test_pipe": "synccheck_triton_ws_barrier_reinit_2026_4_0.txt",
                                     "test_gluon": "synccheck_triton_ws_barrier_reinit_2026_4_0.txt"},
                          "dies_in": "test_gluon"}}
    log = _fake(tmp_path, monkeypatch, plan)
    monkeypatch.setenv("FAKE_SANITIZER_VERSION", NEW)
    _setup(pytester)
    # the rule applies with Triton before 3.7 (this machine may have a newer one) to a record at the def
    # line of the kernel in the file it names, which must be found
    conftest = pytester.path / "conftest.py"
    conftest.write_text(conftest.read_text() + "\n\nfrom pytest_pipecheck.sanitizer import known as _known\n"
                        "_known._triton_version = lambda: (3, 6, 0)\n")
    (pytester.path / "triton_gemm.py").write_text(kernel_file.read_text())
    pytester.makepyfile(test_k=TESTS)
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=synccheck", "-p", "no:cacheprovider")
    assert log.exists()
    res = _results(result.stdout.str())
    verdict, summary = res[("test_pipe", "sanitizer:synccheck")]
    assert verdict == "pass" and "16 findings filtered by rule triton-ws-barrier-reinit" in summary
    verdict, summary = res[("test_gluon", "sanitizer:synccheck")]
    assert verdict == "error" and "16 records filtered by rule triton-ws-barrier-reinit" in summary, summary
    assert "known bug of the toolchain" in result.stdout.str()  # the run header
