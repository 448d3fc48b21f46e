"""A check from outside pipecheck (pytest_pipecheck/outside.py): one function and one registration through
the hook ``pytest_pipecheck_checks``, run by ``pipecheck.check(name, ...)`` under the rules every check
shares, and never a pass where it reached no verdict."""

from __future__ import annotations

import json

import pytest

CONFTEST = """
from pytest_pipecheck import CheckResult, OutsideCheck, Verdict

def no_negative(ctx, values, *, kernel=None):
    bad = [v for v in values if v < 0]
    return CheckResult("no_negative", Verdict.FAIL if bad else Verdict.PASS,
                       f"{len(bad)} negative value(s) of {len(values)}", kernel=kernel)

def says_nothing(ctx, values):
    print("looked at", values)  # prints instead of judging

def breaks(ctx):
    raise RuntimeError("the check itself broke")

def pytest_pipecheck_checks():
    return [OutsideCheck("no_negative", no_negative, catches="negative outputs", selection="coverage"),
            OutsideCheck("says_nothing", says_nothing),
            OutsideCheck("breaks", breaks)]
"""

TESTS = """
def test_clean(pipecheck):
    result = pipecheck.check("no_negative", [1, 2, 3], kernel="relu")
    assert result.verdict.value == "pass" and result.kernel == "relu"

def test_caught(pipecheck):
    pipecheck.check("no_negative", [1, -2, 3])

def test_caught_and_swallowed(pipecheck):
    try:
        pipecheck.check("no_negative", [-1])
    except AssertionError:
        pass  # a test that catches the failure still fails: the FAIL result was recorded

def test_no_verdict(pipecheck):
    pipecheck.check("says_nothing", [1])

def test_raises(pipecheck):
    pipecheck.check("breaks")

def test_unknown(pipecheck):
    pipecheck.check("no_negatives", [1])
"""


def _run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict]:
    result = pytester.runpytest("--pipecheck", "--pipecheck-sanitizer=none", "-p", "no:cacheprovider", "-rA",
                                "--pipecheck-json=r.json", *args)
    return result, json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))


def _results(doc: dict) -> dict[str, list[tuple[str, str]]]:
    out: dict[str, list[tuple[str, str]]] = {}
    for r in doc["results"]:
        out.setdefault(r["nodeid"].split("::")[-1], []).append((r["check"], r["verdict"]))
    return out


def test_an_outside_check_is_one_function_and_one_registration(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_outside=TESTS)
    result, doc = _run(pytester)
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 1 and outcomes.get("failed") == 5, result.stdout.str()[-3000:]
    by_test = _results(doc)
    assert by_test["test_clean"] == [("no_negative", "pass")]
    assert by_test["test_caught"] == [("no_negative", "fail")]
    assert by_test["test_caught_and_swallowed"] == [("no_negative", "fail")]
    assert by_test["test_no_verdict"] == [("says_nothing", "error")]
    assert by_test["test_raises"] == [("breaks", "error")]
    out = result.stdout.str()
    assert "no_negative: 1 negative value(s) of 3" in out
    assert "the check 'says_nothing' returned NoneType None, not a CheckResult: it reached no verdict" in out
    assert "the check raised RuntimeError: the check itself broke" in out
    assert ("pipecheck.check('no_negatives'): no check of that name is registered through pytest_pipecheck_checks "
            "(known: breaks, no_negative, says_nothing)") in out
    assert doc["ok"] is False and result.ret == 1


def test_its_selection_entry_turns_it_off_with_the_reason(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_outside="""
def test_caught(pipecheck):
    pipecheck.check("no_negative", [1, -2, 3])
""")
    result, doc = _run(pytester, "--pipecheck-checks=occupancy")
    # deselected, the check is a skip with its reason, never a pass
    assert _results(doc)["test_caught"] == [("no_negative", "skip")]
    out = result.stdout.str()
    assert "not selected: checks=occupancy from the command line does not include coverage" in out
    assert "pipecheck checks: 0 pass, 0 fail, 1 skip, 0 error" in out, out[-2000:]


def test_a_conftests_checks_are_known_only_under_its_directory(pytester: pytest.Pytester) -> None:
    sub = pytester.mkpydir("kernels")
    (sub / "conftest.py").write_text(CONFTEST)
    (sub / "test_inside.py").write_text("def test_inside(pipecheck):\n    pipecheck.check('no_negative', [1])\n")
    pytester.makepyfile(test_outside="def test_beside(pipecheck):\n    pipecheck.check('no_negative', [1])\n")
    result, doc = _run(pytester)
    assert _results(doc)["test_inside"] == [("no_negative", "pass")]
    assert "pipecheck.check('no_negative'): no check of that name is registered" in result.stdout.str()
    result.assert_outcomes(passed=1, failed=1)


@pytest.mark.parametrize(("registration", "says"), [
    ('[OutsideCheck("coverage", lambda ctx: None)]', "registered the check 'coverage', a name pipecheck's own "
                                                    "checks use"),
    ('[OutsideCheck("sanitizer:mine", lambda ctx: None)]', "registered the check 'sanitizer:mine', a name "
                                                          "pipecheck's own checks use"),
    ('[OutsideCheck("x", lambda ctx: None, selection="speed")]', "with selection='speed'; it must be one of "
                                                                "coverage, tile_probe, determinism"),
    ('[OutsideCheck("x", lambda ctx: None, child="launch")]', "with child='launch' and no in_child"),
    ('[OutsideCheck("x", lambda ctx: None), OutsideCheck("x", lambda ctx: None)]',
     "registered the check 'x', which the conftest"),
    ('"x"', "returned 'x', not a list of OutsideCheck"),
    ('[print]', "returned <built-in function print>, not an OutsideCheck"),
])
def test_a_registration_that_cannot_be_used_names_its_conftest(pytester: pytest.Pytester, registration: str,
                                                               says: str) -> None:
    pytester.makeconftest("from pytest_pipecheck import OutsideCheck\n\n"
                          f"def pytest_pipecheck_checks():\n    return {registration}\n")
    pytester.makepyfile(test_outside="def test_it(pipecheck):\n    pipecheck.check('x')\n")
    result, doc = _run(pytester)
    out = result.stdout.str()
    assert "pytest_pipecheck_checks of the conftest" in out and says in out, out[-3000:]
    assert result.ret == 1 and doc["ok"] is False
