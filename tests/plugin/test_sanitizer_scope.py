"""sanitizer_scope: what a sanitizer child runs of each test (issue: the sanitizer tier at CI speed).

With the default scope ``launch`` a child launches the kernel once per shape and judges nothing, so
compute-sanitizer instruments one launch instead of the reference, every tile-probe launch and every
determinism repeat. These runs use the fake compute-sanitizer and a torch kernel on the CPU (the
fixture's device is pinned to "cpu"); each launch appends a line to a log, so the tests count what
each process launched.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ._sanitizer_fake import _fake, _results, _setup

pytest.importorskip("torch")

CPU_DEVICE = '''
from pytest_pipecheck.fixture import Pipecheck
Pipecheck.device = property(lambda self: "cpu")  # a fake GPU tier whose kernels run on the CPU
'''

SUITE = '''
import os
import pytest
from pytest_pipecheck import KernelSpec, Tensor

HERE = os.path.dirname(os.path.abspath(__file__))


def _launch(arrays, dims):
    with open(os.path.join(HERE, "launches.log"), "a") as fh:
        fh.write(f"{os.environ.get('PIPECHECK_CHILD', 'parent')} {os.environ.get('PIPECHECK_SANITIZER_SCOPE', '-')}\\n")
    arrays["y"].copy_(arrays["x"] * 2)


SPEC = KernelSpec("double", _launch, lambda a, d: {"y": a["x"].double() * 2},
                  [Tensor("x", "MK", "float32"), Tensor("y", "MK", "float32", role="output")],
                  tiles={"M": 4, "K": 4}, loop_dim="K")


def test_checks(pipecheck):
    pipecheck.check_kernel(SPEC, {"M": 5, "K": 12})


def test_reads_numbers(pipecheck):
    # a body that needs what the launch scope skips: fails there, so it is sanitized whole
    result = pipecheck.check_coverage(SPEC, {"M": 5, "K": 12})
    assert result.verdict.value == "pass", result.summary


def test_racy(pipecheck):
    pipecheck.check_tile_probe(SPEC, {"M": 5, "K": 12})
'''


def _launches(path: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in (path / "launches.log").read_text().splitlines():
        counts[line] = counts.get(line, 0) + 1
    return counts


def test_a_launch_child_launches_once_per_shape_and_verdicts_do_not_change(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(tmp_path, monkeypatch, {"racecheck": {"inject": {"test_racy": "racecheck_race_analysis.txt"}}})
    _setup(pytester)
    pytester.makeconftest(pytester.path.joinpath("conftest.py").read_text() + CPU_DEVICE)
    pytester.makepyfile(test_k=SUITE)
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=racecheck", "-p", "no:cacheprovider",
                                           "-k", "test_checks or test_racy")
    out = result.stdout.str()
    res = _results(out)
    assert res[("test_checks", "sanitizer:racecheck")] == ("pass", "0 hazards"), out
    # a finding in a test that only asked for the tile probe: the child still launched the kernel
    assert res[("test_racy", "sanitizer:racecheck")][0] == "fail", out
    counts = _launches(pytester.path)
    # the child: one launch per test (each at one shape); the parent: coverage, 2 tile probes...
    assert counts.get("racecheck launch") == 2, counts
    assert counts.get("parent -", 0) > 4, counts


def test_a_body_that_fails_in_a_launch_child_is_sanitized_whole(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(tmp_path, monkeypatch, {})
    _setup(pytester)
    pytester.makeconftest(pytester.path.joinpath("conftest.py").read_text() + CPU_DEVICE)
    pytester.makepyfile(test_k=SUITE)
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=racecheck", "-p", "no:cacheprovider",
                                           "-k", "test_reads_numbers")
    out = result.stdout.str()
    assert _results(out)[("test_reads_numbers", "sanitizer:racecheck")] == ("pass", "0 hazards"), out
    assert "sanitizing them whole" in out
    counts = _launches(pytester.path)
    assert counts.get("racecheck launch") == 1 and counts.get("racecheck test") == 1, counts
    result.assert_outcomes(passed=1)


def test_scope_test_runs_the_whole_test_in_the_child(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(tmp_path, monkeypatch, {})
    _setup(pytester)
    pytester.makeconftest(pytester.path.joinpath("conftest.py").read_text() + CPU_DEVICE)
    pytester.makepyfile(test_k=SUITE)
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=racecheck", "-p", "no:cacheprovider",
                                           "--pipecheck-sanitizer-scope=test", "-k", "test_checks")
    out = result.stdout.str()
    assert _results(out)[("test_checks", "sanitizer:racecheck")] == ("pass", "0 hazards"), out
    counts = _launches(pytester.path)
    assert counts.get("racecheck test") == counts.get("parent -") > 4, counts
