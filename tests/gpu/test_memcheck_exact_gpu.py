"""On a GPU: memcheck catches a discarded read past a tensor and names the tensor; the masked twin is clean.

Runs tests/gpu/memcheck_targets/oob_reads.py in one ``pytest --pipecheck --pipecheck-sanitizer=memcheck``
subprocess. The normal run's coverage passes the unmasked GEMM there (its guard bands are valid memory and
the rows read are never stored); the memcheck child allocates each tensor at its exact size
(pytest_pipecheck/sanitizer/allocations.py), so the rows of A past M are outside every allocation, and the
verdict names 'a'. When PIPECHECK_EVIDENCE_DIR is set, the inner run's output is written there. Needs a
CUDA GPU and compute-sanitizer; skipped with the reason otherwise.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _pipecheck_results import DUMPER, keep_output, needs_compute_sanitizer, results

HERE = Path(__file__).resolve().parent
TARGETS = HERE / "memcheck_targets" / "oob_reads.py"


@pytest.mark.gpu
def test_memcheck_names_the_tensor_a_discarded_read_is_past(pytester: pytest.Pytester) -> None:
    needs_compute_sanitizer("triton")
    pytester.makeconftest(DUMPER)
    pytester.makepyfile(test_oob_reads=TARGETS.read_text())
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-tier=gpu", "--pipecheck-sanitizer=memcheck",
                                           "-p", "no:cacheprovider", "-rA", timeout=540)
    text = keep_output(result, "memcheck-exact-output.txt")
    res = results(text)
    # the line of the bug itself (the docstring mentions the marker too)
    bug_line = next(i for i, ln in enumerate(TARGETS.read_text().splitlines(), 1) if "# BUG:" in ln)
    # the guard bands are valid memory: the normal run's coverage cannot see the discarded read
    assert res[("test_a_rows_unmasked", "coverage")][0] == "pass", text[-6000:]
    verdict, summary = res[("test_a_rows_unmasked", "sanitizer:memcheck")]
    assert verdict == "fail" and "invalid __global__ read" in summary and "past 'a'" in summary, text[-6000:]
    assert f"test_oob_reads.py:{bug_line}" in summary, summary
    assert re.search(r"reads past 'a' \(ends at 0x[0-9a-f]+, read at 0x[0-9a-f]+\+\d+", text), text[-6000:]
    assert res[("test_a_rows_masked", "sanitizer:memcheck")] == ("pass", "0 hazards"), text[-6000:]
