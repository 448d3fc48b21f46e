"""A failing test's reproduce lines, through real runs: each splits back into the arguments that rerun it
(``--pipecheck``, the run seed and the run's own options included), the line printed by the relay child of
crash isolation is the one a run without it prints, and pasting the line into a shell reruns that one test,
with the same seed, and runs nothing its node id holds."""

from __future__ import annotations

import os
import re
import shlex
import sys

import pytest

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

IDS = ["it's", "$(touch pwned)", "a b;c", "`touch pwned2`"]

MODULE = f'''
import os
import sys

import pytest

IDS = {IDS!r}


@pytest.mark.parametrize("x", IDS, ids=IDS)
def test_k(pipecheck, x):
    relayed = "--pipecheck-relay" in " ".join(sys.argv)
    with open(os.environ["REPRO_OUT"], "a") as fh:
        fh.write(f"{{relayed}} {{pipecheck.reproduce}}\\n")
    assert False, "fails on purpose"


def test_other(pipecheck):
    pass
'''

OPTIONS = ["--pipecheck-tier=cpu", "--pipecheck-sanitizer=none", "-p", "no:cacheprovider"]


def _sections(out: str) -> list[str]:
    """The line after each ``pipecheck: reproduce`` section header of pytest's failure report."""
    lines = out.splitlines()
    return [lines[i + 1] for i, line in enumerate(lines) if re.match(r"^-+ pipecheck: reproduce -+$", line)]


@pytest.fixture
def module(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """MODULE as test_r.py in pytester's directory, its runs on the CPU tier."""
    monkeypatch.setenv("PIPECHECK_NO_GPU", "1")
    pytester.makepyfile(test_r=MODULE)


def _run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, out: str, *, isolate: bool
         ) -> tuple[pytest.RunResult, list[tuple[bool, str]]]:
    """A run of test_r.py (every test_k case fails, test_other passes) writing the fixture's reproduce lines to
    ``out``: the run and (whether the line was written in a relay child, the line) per failing test."""
    monkeypatch.setenv("REPRO_OUT", str(pytester.path / out))
    if isolate:  # a top-level run: the CPU tier's crash isolation runs the tests in a relay child
        monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    else:  # a session inside a test: no relay child
        monkeypatch.setenv("PYTEST_CURRENT_TEST", "outer")
    result = pytester.runpytest_subprocess("--pipecheck", "-rA", "--pipecheck-seed=1234", *OPTIONS)
    result.assert_outcomes(failed=len(IDS), passed=1)
    written = [(flag == "True", line) for flag, line in
               (entry.split(" ", 1) for entry in (pytester.path / out).read_text().splitlines())]
    return result, written


def test_the_printed_lines_are_the_arguments_that_rerun_the_test(pytester: pytest.Pytester,
                                                                  monkeypatch: pytest.MonkeyPatch, module: None) -> None:
    relayed, in_relay = _run(pytester, monkeypatch, "relayed.txt", isolate=True)
    assert all(flag for flag, _ in in_relay), "the tests ran in crash isolation's relay child"
    plain, in_process = _run(pytester, monkeypatch, "plain.txt", isolate=False)
    assert not any(flag for flag, _ in in_process)
    want = [["pytest", f"test_r.py::test_k[{x}]", "--pipecheck", "--pipecheck-seed=1234", *OPTIONS] for x in IDS]
    for result, written in ((relayed, in_relay), (plain, in_process)):
        # the fixture's line (in each check's failure message) and the report's section after the failure
        assert [shlex.split(line) for _, line in written] == want, written
        assert [shlex.split(line) for line in _sections(result.stdout.str())] == want, result.stdout.str()
    assert [line for _, line in in_relay] == [line for _, line in in_process]


def test_pasting_a_line_into_a_shell_reruns_that_one_test(pytester: pytest.Pytester,
                                                          monkeypatch: pytest.MonkeyPatch, module: None) -> None:
    _, written = _run(pytester, monkeypatch, "first.txt", isolate=False)
    # the line is pasted where pytest was started, with the pytest of this interpreter on PATH
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    for x, (_, line) in zip(IDS, written):
        again = pytester.path / "again.txt"
        monkeypatch.setenv("REPRO_OUT", str(again))
        rerun = pytester.run("bash", "-c", line)
        out = rerun.stdout.str()
        assert re.search(r"\b1 failed\b", out) and not re.search(r"\bpassed\b", out.splitlines()[-1]), out
        assert f"FAILED test_r.py::test_k[{x}]" in out, out
        # the same test under the same seed and options prints the same line again
        assert [entry.split(" ", 1)[1] for entry in again.read_text().splitlines()] == [line]
        again.unlink()
    assert not (pytester.path / "pwned").exists() and not (pytester.path / "pwned2").exists()
