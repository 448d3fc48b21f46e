"""check_stage_sweep through real pytest runs: summary line, failure output, JSON and HTML reports."""

from __future__ import annotations

import json

import numpy  # noqa: F401 - imported before pytester's in-process runs, which cannot re-import it
import pytest

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

TEST_FILE = """
import pytest

TIMES = {1: 383.0, 2: 300.0, 3: 222.0, 4: 262.0}

class Fake:
    last = None

    def run(self, stages):
        if stages == 6:
            raise RuntimeError("CUDA error: too many resources requested for launch")
        self.last = stages

    def timer(self, fn, **kw):
        fn()
        return [TIMES[self.last] * (1 + 0.001 * i) for i in range(-5, 6)]

def test_sweep_passes(pipecheck):
    k = Fake()
    pipecheck.check_stage_sweep(k.run, [1, 2, 3, 4, 6], chosen=3, kernel="triton_gemm", timer=k.timer)

def test_sweep_fails(pipecheck):
    k = Fake()
    pipecheck.check_stage_sweep(k.run, [2, 3, 4], chosen=4, kernel="triton_gemm", timer=k.timer)

def test_sweep_on_the_device(pipecheck):
    r = pipecheck.check_stage_sweep(lambda s: None, [2, 3], chosen=3, kernel="triton_gemm")
    assert r.verdict.value == "skip"
"""


def test_summary_failure_and_reports(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TEST_FILE)
    result = pytester.runpytest("--pipecheck", "--pipecheck-tier=cpu", "--pipecheck-json=out.json",
                                "--pipecheck-html=out.html", "-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    out = result.stdout.str()
    result.stdout.fnmatch_lines([
        "*test_sweep_fails*triton_gemm*perf:stage_sweep*fail*chosen 4 stages 18% slower than best 3 "
        "(0.262 ms vs 0.222 ms)",
        "*test_sweep_on_the_device*perf:stage_sweep*skip*stage sweep needs a CUDA GPU: --pipecheck-tier=cpu*",
        "*test_sweep_passes*triton_gemm*perf:stage_sweep*pass*best 3 stages (0.222 ms), chosen 3; stages 6 does not fit",
    ])
    result.stdout.fnmatch_lines([
        "*PipecheckFailure: pipecheck stage sweep of kernel 'triton_gemm': stages=4 is 18% slower than stages=3 "
        "(the best): 0.262 ms vs 0.222 ms; allowed 5.0% (max_loss)",
    ])
    # the plugin's own frames are hidden: the user's line is what pytest shows
    assert "stage_sweep.py:" not in out

    doc = json.loads((pytester.path / "out.json").read_text())
    by_test = {r["nodeid"].rsplit("::", 1)[-1]: r for r in doc["results"] if r["check"] == "perf:stage_sweep"}
    passed = by_test["test_sweep_passes"]
    assert passed["verdict"] == "pass" and by_test["test_sweep_on_the_device"]["verdict"] == "skip"
    rows = passed["details"]["stage_sweep"]
    assert [r["stages"] for r in rows] == [1, 2, 3, 4, 6]
    assert rows[2]["measured_us"] == pytest.approx(222.0) and rows[4]["measured_us"] is None
    assert rows[4]["note"] == "does not fit: RuntimeError: CUDA error: too many resources requested for launch"
    assert by_test["test_sweep_fails"]["details"]["loss"] == pytest.approx(262.0 / 222.0 - 1)

    page = (pytester.path / "out.html").read_text()
    assert 'class="stage-sweep"' in page and "<th>q1 – q3 (µs)</th>" in page
    assert "(best 3 stages, chosen 4: +18.0%)" in page
