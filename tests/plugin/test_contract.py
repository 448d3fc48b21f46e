"""One contract for every result: selection, expect_failures (caught / missed, strict), names.

Each test here was a way to make pipecheck read "pass" (or run nothing) when it should not:
a mutant that nothing caught, a failing verdict recorded by a test that went on, an empty tool list
from an unset variable, a check that ``--pipecheck-checks`` did not deselect, a misspelt ini key.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .test_sanitizer_runner import _fake, _results, _setup

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

# ----------------------------------------------------------------------------- expect_failures


MISSED = """
import pytest
from pytest_pipecheck.results import CheckResult, PipecheckFailure, Verdict

@pytest.mark.pipecheck(expect_failures=True, kernel="mutant_missed")
def test_missed_by_every_check(pipecheck):
    pipecheck.record(CheckResult("coverage", Verdict.PASS, "max rel err 0.0e+00"))
    pipecheck.record(CheckResult("tile_probe", Verdict.PASS, "3 of 3 K tiles each counted once"))

@pytest.mark.pipecheck(expect_failures=True)
def test_no_check_ran(pipecheck):
    pass

@pytest.mark.pipecheck(expect_failures=True)
def test_caught(pipecheck):
    with pytest.raises(PipecheckFailure):
        pipecheck.record(CheckResult("coverage", Verdict.FAIL, "7 elements never written"))
        raise PipecheckFailure("7 elements never written")

@pytest.mark.pipecheck(expect_failures="tile_probe")
def test_caught_by_the_wrong_check(pipecheck):
    pipecheck.record(CheckResult("coverage", Verdict.FAIL, "3 elements wrong"))
    pipecheck.record(CheckResult("tile_probe", Verdict.PASS, "4 of 4 K tiles each counted once"))

@pytest.mark.pipecheck(expect_failures=["coverage", "tile_probe"])
def test_caught_by_both(pipecheck):
    pipecheck.record(CheckResult("coverage", Verdict.FAIL, "3 elements wrong"))
    pipecheck.record(CheckResult("tile_probe", Verdict.FAIL, "K tile 3 of 4 never reached the output"))

@pytest.mark.pipecheck(expect_failures=True)
def test_an_error_is_not_a_catch(pipecheck):
    pipecheck.record(CheckResult("inspect", Verdict.ERROR, "nvcc failed"))

def test_block_that_caught_nothing(pipecheck):
    with pipecheck.expecting_failures():
        pipecheck.record(CheckResult("determinism", Verdict.PASS, "2 runs bitwise equal"))

def test_failing_verdict_recorded_but_not_raised(pipecheck):
    pipecheck.record(CheckResult("occupancy", Verdict.FAIL, "sm_86 0 blocks/SM (floor 1)"))
"""


def test_expect_failures_is_strict(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_m=MISSED)
    result = pytester.runpytest("--pipecheck", "--pipecheck-sanitizer=none", "-p", "no:cacheprovider",
                                "-rf", "--pipecheck-json=r.json")
    result.assert_outcomes(passed=2, failed=6)
    out = result.stdout.str()
    result.stdout.fnmatch_lines([
        "*expect_failures from the pipecheck marker on test_m.py::test_missed_by_every_check expected at "
        "least one check to catch a bug, but none did (the mutant was missed). Verdicts: coverage pass "
        "(max rel err 0.0e+00); tile_probe pass (3 of 3 K tiles each counted once)",
    ])
    assert "test_no_check_ran expected at least one check to catch a bug" in out and "no check ran" in out
    assert ("test_caught_by_the_wrong_check expected tile_probe to catch a bug, but tile_probe did not"
            in out)
    assert "test_an_error_is_not_a_catch" in out and "ERROR inspect: nvcc failed" in out
    assert "an expecting_failures() block expected at least one check to catch a bug" in out
    assert "FAIL occupancy: sm_86 0 blocks/SM (floor 1)" in out
    for passed in ("test_caught", "test_caught_by_both"):
        assert f"FAILED test_m.py::{passed} " not in out
    doc = json.loads((pytester.path / "r.json").read_text())
    missed = [r for r in doc["results"] if r["nodeid"].endswith("test_missed_by_every_check")]
    assert {r["kernel"] for r in missed} == {"mutant_missed"}


CAUGHT_WITHOUT_TRY = """
import pytest
import torch

from pytest_pipecheck import KernelSpec, Tensor
from pytest_pipecheck.results import CheckResult, PipecheckFailure, Verdict

def _spec(launch, name):
    return KernelSpec(name, launch, lambda a, d: {"y": a["x"].double().cumsum(1)},
                      [Tensor("x", ("M", "K"), "float32"), Tensor("y", ("M", "K"), "float32", role="output")],
                      {"M": 4, "K": 8}, "K")

def _correct(a, d):
    a["y"].copy_(a["x"].double().cumsum(1).float())

def _drops_last_tile(a, d):
    keep = (d["K"] - 1) // 8 * 8
    a["y"].copy_(torch.cat([a["x"][:, :keep], torch.zeros_like(a["x"][:, keep:])], 1).double().cumsum(1).float())

MUTANT = _spec(_drops_last_tile, "scan_mutant")
CORRECT = _spec(_correct, "scan")

@pytest.mark.pipecheck(expect_failures=True)
def test_caught_by_one_check(pipecheck):
    pipecheck.check_coverage(MUTANT, "M5-K20")

@pytest.mark.pipecheck(expect_failures=["coverage", "tile_probe"])
def test_caught_by_every_check_of_check_kernel(pipecheck):
    pipecheck.check_kernel(MUTANT, "M5-K20")

@pytest.mark.pipecheck(expect_failures=True)
def test_missed(pipecheck):
    pipecheck.check_coverage(CORRECT, "M5-K20")

@pytest.mark.pipecheck(expect_failures=True)
def test_typeerror_in_the_body(pipecheck):
    pipecheck.check_coverage(MUTANT, "M5-K20", 3)

@pytest.mark.pipecheck(expect_failures=True)
def test_typeerror_after_a_caught_failure(pipecheck):
    try:
        pipecheck.check_coverage(MUTANT, "M5-K20")
    except PipecheckFailure:
        pass
    len(None)

@pytest.mark.pipecheck(expect_failures=True)
def test_bad_spec(pipecheck):
    pipecheck.check_coverage(MUTANT, "M5-Q20")

@pytest.mark.pipecheck(expect_failures=True)
def test_a_failure_raised_by_hand(pipecheck):
    raise PipecheckFailure("looks caught", CheckResult("coverage", Verdict.FAIL, "made up", expected=True))

@pytest.mark.pipecheck(expect_failures="tile_probe")
def test_body_ended_before_the_expected_check(pipecheck):
    pipecheck.check_coverage(MUTANT, "M5-K20")
    pipecheck.check_tile_probe(MUTANT, "M5-K20")

@pytest.mark.pipecheck(expect_failures=True)
def test_an_error_beside_the_catch(pipecheck):
    pipecheck.record(CheckResult("inspect", Verdict.ERROR, "nvcc failed"))
    pipecheck.check_coverage(MUTANT, "M5-K20")

def test_block_without_the_marker_still_raises(pipecheck):
    with pipecheck.expecting_failures():
        pipecheck.check_coverage(MUTANT, "M5-K20")
"""


def test_a_caught_mutant_passes_without_try_and_nothing_else_does(pytester: pytest.Pytester) -> None:
    """A check failure that the test expects ends its body and the test passes; a missed mutant, an unrelated
    exception, a bad spec, a failure raised by hand, an expected check that never ran and an ERROR beside
    the catch keep it failed."""
    pytester.makepyfile(test_m=CAUGHT_WITHOUT_TRY)
    result = pytester.runpytest("--pipecheck", "--pipecheck-sanitizer=none", "-p", "no:cacheprovider", "-rA",
                                "--pipecheck-json=r.json")
    outcomes = {name: outcome for outcome, name in
                (line.split(" ", 2)[:2] for line in result.stdout.lines if line.startswith(("PASSED", "FAILED")))}
    outcomes = {name.split("::")[-1]: outcome for name, outcome in outcomes.items()}
    assert outcomes == {
        "test_caught_by_one_check": "PASSED",
        "test_caught_by_every_check_of_check_kernel": "PASSED",
        "test_missed": "FAILED",
        "test_typeerror_in_the_body": "FAILED",
        "test_typeerror_after_a_caught_failure": "FAILED",
        "test_bad_spec": "FAILED",
        "test_a_failure_raised_by_hand": "FAILED",
        "test_body_ended_before_the_expected_check": "FAILED",
        "test_an_error_beside_the_catch": "FAILED",
        "test_block_without_the_marker_still_raises": "FAILED",
    }, result.stdout.str()
    out = result.stdout.str()
    assert "TypeError: Pipecheck.check_coverage() takes 3 positional arguments but 4 were given" in out
    assert "TypeError: object of type 'NoneType' has no len()" in out
    assert "PipecheckError: spec 'scan_mutant': shape M5-Q20 has no size for K" in out
    assert "test_missed expected at least one check to catch a bug, but none did" in out
    assert ("expected tile_probe to catch a bug, but tile_probe did not" in out
            and "the test body ended at the failure coverage caught" in out), out
    # a passing catch keeps its message in the report's sections (pytest -rP shows it)
    assert "coverage caught the bug, ending the test body:" in out and "scan_mutant at M5-K20: coverage failed" in out
    doc = json.loads((pytester.path / "r.json").read_text())
    one = [r for r in doc["results"] if r["nodeid"].endswith("test_caught_by_one_check")]
    assert [(r["check"], r["verdict"], r["expected"]) for r in one] == [("coverage", "fail", True)]


@pytest.mark.parametrize("value, message", [
    ("'tile_prob'", "*names unknown check 'tile_prob' (did you mean 'tile_probe'?)*"),
    ("[]", "*`expect_failures=[]` from the pipecheck marker on *test_bad* is empty*"),
    ("3", "*`expect_failures=3` from the pipecheck marker*must be a boolean or the names of the checks*"),
])
def test_expect_failures_values_are_validated(pytester: pytest.Pytester, value: str, message: str) -> None:
    pytester.makepyfile(f"""
        import pytest

        @pytest.mark.pipecheck(expect_failures={value})
        def test_bad(pipecheck):
            pass
    """)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([message])


def test_sanitizer_verdicts_follow_expect_failures_and_kernel_names(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A race caught in a mutant is "caught", not "fail", and keeps the marker's kernel name; a mutant the
    sanitizer misses fails its test, like xfail(strict=True)."""
    _fake(tmp_path, monkeypatch, {"racecheck": {"inject": {"test_racy_mutant": "racecheck_race_analysis.txt"}}})
    _setup(pytester)
    pytester.makepyfile(test_s="""
        import pytest

        @pytest.mark.pipecheck(expect_failures="sanitizer:racecheck", kernel="racy_tile_mutant")
        def test_racy_mutant(pipecheck):
            pass

        @pytest.mark.pipecheck(expect_failures="sanitizer", kernel="clean_mutant")
        def test_clean_mutant(pipecheck):
            pass
    """)
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=racecheck", "-p", "no:cacheprovider",
                                           "--pipecheck-json=r.json")
    res = _results(result.stdout.str())
    assert res[("test_racy_mutant", "sanitizer:racecheck")][0] == "fail"
    assert res[("test_clean_mutant", "sanitizer:racecheck")] == ("pass", "0 hazards")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_clean_mutant expected sanitizer to catch a bug, but sanitizer did not*"])
    doc = json.loads((pytester.path / "r.json").read_text())
    racy = next(r for r in doc["results"] if r["nodeid"].endswith("test_racy_mutant"))
    assert racy["expected"] is True and racy["kernel"] == "racy_tile_mutant"
    assert racy["details"]["finding_kernel"] == "racy_tile"
    assert doc["totals"]["caught"] == 1


# ----------------------------------------------------------------------------- selection


def test_checks_option_deselects_every_check(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        def test_occ(pipecheck):
            r = pipecheck.check_occupancy(threads=128, registers=32, arch="sm_90", kernel="k")
            assert r.verdict.value == "skip"

        def test_sass(pipecheck):
            r = pipecheck.check_sass(b"not a cubin", expect="pipelined", kernel="k")
            assert r.verdict.value == "skip"

        def test_occ_on(pipecheck):
            import pytest
            assert pipecheck.check_occupancy(threads=128, registers=32, arch="sm_90").verdict.value == "pass"
    """)
    result = pytester.runpytest("--pipecheck", "--pipecheck-sanitizer=none", "--pipecheck-checks=coverage",
                                "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines([
        "skipped checks (not passed, not run):",
        "*inspect x1: not selected: checks=coverage from the command line does not include inspect",
        "*occupancy x2: not selected: checks=coverage from the command line does not include occupancy",
    ])


@pytest.mark.parametrize("args, ini, message", [
    (["--pipecheck-sanitizer="], "", "*--pipecheck-sanitizer= is empty (an unset variable?): give the tools to run "
                                     "(racecheck, synccheck, memcheck, initcheck, consan) or none*"),
    ([], "pipecheck_sanitizer = ,", "*`pipecheck_sanitizer = ,` from the ini file (tox.ini) is empty*"),
    ([], "pipecheck_sanitizer =", "*`pipecheck_sanitizer =` in the ini file (tox.ini) is empty*"),
    (["--pipecheck-checks=sanitizer", "--pipecheck-sanitizer=none"], "",
     "*checks=sanitizer (from command line) selects the sanitizer, but sanitizer=none (from command line) runs "
     "no tool*"),
    ([], "pipecheck_min_block = 2", "*unknown key `pipecheck_min_block` in the tox.ini; did you mean "
                                    "'pipecheck_min_blocks'?*"),
    (["-o", "pipecheck_sanitzer=racecheck"], "", "*unknown key `pipecheck_sanitzer`*did you mean "
                                                  "'pipecheck_sanitizer'?*"),
])
def test_settings_that_would_silently_turn_a_check_off_are_errors(
        pytester: pytest.Pytester, args: list[str], ini: str, message: str) -> None:
    pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makepyfile("def test_x(pipecheck):\n    pass\n")
    result = pytester.runpytest("--pipecheck", *args, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


@pytest.mark.parametrize("marker, message", [
    ("sanitizer=[]", "*`sanitizer=[]` from the pipecheck marker on test_m.py::test_x is empty*"),
    ("checks=['sanitizer'], sanitizer='none'",
     "*checks=sanitizer (from the pipecheck marker on test_m.py::test_x) selects the sanitizer, but "
     "sanitizer=none (from the pipecheck marker on test_m.py::test_x) runs no tool*"),
])
def test_marker_that_would_silently_turn_the_sanitizer_off_is_an_error(
        pytester: pytest.Pytester, marker: str, message: str) -> None:
    pytester.makepyfile(test_m=f"""
        import pytest

        @pytest.mark.pipecheck({marker})
        def test_x(pipecheck):
            pass
    """)
    result = pytester.runpytest("--pipecheck", "-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([message])


def test_explicit_none_still_turns_the_sanitizer_off(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.pipecheck(sanitizer=None)
        def test_a(pipecheck):
            assert pipecheck.config.sanitizer == ()

        @pytest.mark.pipecheck(sanitizer="none")
        def test_b(pipecheck):
            assert pipecheck.config.sanitizer == ()
    """)
    pytester.runpytest("--pipecheck", "-p", "no:cacheprovider").assert_outcomes(passed=2)
