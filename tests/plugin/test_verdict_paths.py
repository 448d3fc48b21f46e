"""A sanitizer finding reaches pytest whatever the test body did, and a record that could not be read is
never a skip: through real pytest runs with the fake compute-sanitizer."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ._sanitizer_fake import _fake, _results, _setup

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

BODIES = '''
import pytest


def test_race_then_skip(pipecheck):
    pytest.skip("the body skips after its launch")


def test_race_then_xfail_call(pipecheck):
    pytest.xfail("the body gives up after its launch")


@pytest.mark.xfail(reason="expected to fail for a reason of its own")
def test_race_then_xfail_marker(pipecheck):
    assert False


def test_race_then_raise(pipecheck):
    raise ValueError("the body fails after its launch")


def test_clean_skip(pipecheck):
    pytest.skip("nothing to launch here")
'''


def test_a_finding_fails_the_test_whatever_its_body_did(pytester: pytest.Pytester, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(tmp_path, monkeypatch, {"racecheck": {"inject": {"test_race_": "racecheck_race_analysis.txt"}}})
    _setup(pytester)
    pytester.makepyfile(test_bodies=BODIES)
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=racecheck", "-p", "no:cacheprovider",
                                "--junitxml=junit.xml", "--pipecheck-json=report.json", "-rA")
    out = result.stdout.str()
    res = _results(out)
    for name in ("test_race_then_skip", "test_race_then_xfail_call", "test_race_then_xfail_marker",
                 "test_race_then_raise"):
        assert res[(name, "sanitizer:racecheck")][0] == "fail", (name, out)
    # the four with a race fail, whatever their bodies did; the clean skip stays a skip
    result.assert_outcomes(failed=4, skipped=1)
    assert result.ret == 1
    # each failure names the race, and says what the body did
    result.stdout.fnmatch_lines(["*test_race_then_skip*", "*RAW race*racy_tile*"])
    assert "the body skipped: the body skips after its launch" in out, out
    assert "the body fails after its launch" in out  # its own failure is still shown
    junit = ET.parse(pytester.path / "junit.xml").getroot()
    failed = {case.get("name") for case in junit.iter("testcase") if case.find("failure") is not None}
    assert failed == {"test_race_then_skip", "test_race_then_xfail_call", "test_race_then_xfail_marker",
                      "test_race_then_raise"}, failed
    report = json.loads((pytester.path / "report.json").read_text())
    assert report["ok"] is False


def test_a_record_that_could_not_be_read_in_a_skipped_test_is_inconclusive(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the tool counts an error whose record it never printed: nothing to parse, nothing to attribute
    _fake(tmp_path, monkeypatch, {"synccheck": {"hidden": "test_skips_garbled"}})
    _setup(pytester)
    pytester.makepyfile(test_garbled='''
import pytest


def test_skips_garbled(pipecheck):
    pytest.skip("skips after its launch")


def test_clean(pipecheck):
    pass
''')
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=synccheck", "-p", "no:cacheprovider", "-rA")
    out = result.stdout.str()
    res = _results(out)
    assert res[("test_skips_garbled", "sanitizer:synccheck")][0] == "error", out
    assert res[("test_clean", "sanitizer:synccheck")] == ("pass", "0 hazards"), out
    # inconclusive is an error of the test, never a skip that reads as nothing to see
    assert result.ret == 1
    result.assert_outcomes(passed=1, skipped=1, errors=1)
