"""A test that crashes its process on the CPU tier fails alone: the tests before it keep their verdicts, the
tests after it run in a fresh process, and every report is written. And a relay child (after a kernel
fault) runs the rest under the run's own options. Through real pytest runs."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from .test_containment import FAKE_CUDA, _outcomes

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

CRASHING = '''
import ctypes
import pytest
from pytest_pipecheck.results import CheckResult, Verdict


def test_before(pipecheck):
    pipecheck.record(CheckResult("coverage", Verdict.PASS, "max rel err 1.0e-05"))


def test_crashes(pipecheck):
    ctypes.string_at(0)  # reads address 0: SIGSEGV, the process dies


def test_after(pipecheck):
    pipecheck.record(CheckResult("coverage", Verdict.PASS, "max rel err 2.0e-05"))


def test_after_own_failure(pipecheck):
    assert False, "a failure of its own"
'''


def _isolated_run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *args: str) -> pytest.RunResult:
    # a pytest started inside this test is a nested session, which the outer run contains; this one must
    # contain its own crashes, as a user's top-level run does
    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    monkeypatch.setenv("PIPECHECK_NO_GPU", "1")
    return pytester.runpytest_subprocess("--pipecheck", "-p", "no:cacheprovider", "-rA", "--pipecheck-json=r.json",
                                         "--junitxml=j.xml", *args)


def test_a_crashing_test_fails_alone_and_every_report_is_written(pytester: pytest.Pytester,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_crash=CRASHING)
    result = _isolated_run(pytester, monkeypatch)
    out = result.stdout.str()
    assert _outcomes(out) == {"test_before": "PASSED", "test_crashes": "FAILED", "test_after": "PASSED",
                              "test_after_own_failure": "FAILED"}, out
    assert result.ret == 1
    assert "the test process crashed during this test (signal 11, SIGSEGV) in test_crashes (test_crash.py:" in out
    assert "Fatal Python error: Segmentation fault" in out  # the fault handler's stack, for the rest
    assert "a failure of its own" in out
    doc = json.loads((pytester.path / "r.json").read_text())
    assert doc["ok"] is False
    by = {(r["nodeid"].rsplit("::", 1)[1], r["check"]): r for r in doc["results"]}
    assert by[("test_before", "coverage")]["verdict"] == "pass"
    assert by[("test_after", "coverage")]["verdict"] == "pass"
    crash = by[("test_crashes", "crash")]
    assert crash["verdict"] == "fail" and crash["details"]["returncode"] == -11
    junit = ET.parse(pytester.path / "j.xml").getroot()
    failed = {c.get("name") for c in junit.iter("testcase") if c.find("failure") is not None}
    assert failed == {"test_crashes", "test_after_own_failure"}


def test_a_crash_in_a_triton_kernel_names_the_kernel(pytester: pytest.Pytester,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton's interpreter reads through an empty tensor's null pointer and the process dies."""
    pytest.importorskip("triton")
    pytest.importorskip("torch")
    pytester.makepyfile(test_kernel='''
import torch
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs))


def test_before(pipecheck):
    pass


def test_empty(pipecheck):
    copy_kernel[(1,)](torch.empty(0), torch.empty(0), BLOCK=16)


def test_after(pipecheck):
    pass
''')
    result = _isolated_run(pytester, monkeypatch)
    out = result.stdout.str()
    assert _outcomes(out) == {"test_before": "PASSED", "test_empty": "FAILED", "test_after": "PASSED"}, out
    assert ("crashed during this test (signal 11, SIGSEGV) in the Triton kernel copy_kernel (test_kernel.py:9), "
            "run by Triton's interpreter") in out, out
    assert json.loads((pytester.path / "r.json").read_text())["ok"] is False


def test_crash_isolation_off_leaves_the_crash_to_the_process(pytester: pytest.Pytester,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """What the isolation is for: without it the crash ends the run, and the report is the one written at its
    start (not ok, not finished), with no verdict of the tests that ran."""
    pytester.makepyfile(test_crash=CRASHING)
    result = _isolated_run(pytester, monkeypatch, "--pipecheck-crash-isolation=off")
    assert result.ret not in (0, 1)
    doc = json.loads((pytester.path / "r.json").read_text())
    assert doc["ok"] is False and doc["finished"] is False and not doc["results"]


RELAY_SUITE = '''
import os
import pytest


@pytest.mark.pipecheck(expect_failures=True)
def test_faults(pipecheck, gpu):
    if os.environ.get("FAULT") == "1":
        gpu.fault()


@pytest.mark.xfail(reason="marked xfail, and --runxfail runs it as a plain test")
def test_xfail_that_fails(pipecheck, gpu):
    gpu.run()
    assert False, "fails under --runxfail"


def test_conftest_option(pipecheck, gpu, request):
    gpu.run()
    assert request.config.getoption("--strict-thing") == "yes"
'''


def test_a_relay_child_runs_the_rest_under_the_runs_own_options(pytester: pytest.Pytester,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """--runxfail, an option the suite's conftest added: a test's verdict after a kernel fault is the one
    it gets in a run without the fault, and so is the run's exit status."""
    monkeypatch.setenv("PIPECHECK_NO_GPU", "1")
    pytester.makeconftest(FAKE_CUDA + "\n\ndef pytest_addoption(parser):\n"
                          "    parser.addoption('--strict-thing', action='store', default='no')\n")
    pytester.makepyfile(test_suite=RELAY_SUITE)
    runs = {}
    for fault in ("0", "1"):
        monkeypatch.setenv("FAULT", fault)
        result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=none", "-p", "no:cacheprovider",
                                               "-rA", "--runxfail", "--strict-thing", "yes")
        out = result.stdout.str()
        runs[fault] = (_outcomes(out), result.ret)
    assert runs["1"][0]["test_xfail_that_fails"] == runs["0"][0]["test_xfail_that_fails"] == "FAILED", runs
    assert runs["1"][0]["test_conftest_option"] == runs["0"][0]["test_conftest_option"] == "PASSED", runs
    assert runs["1"][1] == runs["0"][1] == 1, runs
    processes = (pytester.path / "processes.log").read_text().split("\n")
    assert [p.split()[1] for p in processes if p][-2:] == ["False", "True"], "the faulting run relayed"
