"""On a GPU: a kernel that faults mid-run fails its own test, is located by memcheck, and every later
test still gets its own verdict, in the normal run and in the sanitizer's children (containment.py).

Runs tests/gpu/fault_targets/fault_suite.py in one ``pytest --pipecheck --pipecheck-tier=gpu``
subprocess under racecheck. When PIPECHECK_EVIDENCE_DIR is set, the inner run's output and JSON report
are written there (the GPU evidence of containment). Skipped without a GPU.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from _pipecheck_results import keep_output, needs_compute_sanitizer

HERE = Path(__file__).resolve().parent
SUITE = HERE / "fault_targets" / "fault_suite.py"


@pytest.mark.gpu
def test_fault_is_contained_and_triaged(pytester: pytest.Pytester) -> None:
    needs_compute_sanitizer("triton")
    pytester.makepyfile(test_fault_suite=SUITE.read_text())
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-tier=gpu", "-p", "no:cacheprovider", "-rA",
                                           "--pipecheck-json=fault.json", timeout=540)
    text = keep_output(result, "containment-output.txt", {"containment.json": pytester.path / "fault.json"})
    outcomes = {m.group(2): m.group(1) for m in re.finditer(r"^(PASSED|FAILED|ERROR) \S*?::(\S+)", text, re.M)}
    fault_line = next(i for i, ln in enumerate(SUITE.read_text().splitlines(), 1) if "# FAULT:" in ln)
    assert outcomes.get("test_faults") == "FAILED", text[-6000:]
    later = [k for k in outcomes if k.startswith(("test_after", "test_before"))]
    assert later and all(outcomes[k] == "PASSED" for k in later), {k: outcomes[k] for k in later}
    assert "unusable after the call of this test" in text
    assert "triage (this test alone under memcheck):" in text, text[-6000:]
    assert re.search(rf"invalid __global__ write \(error\) in scale_stray at test_fault_suite\.py:{fault_line}", text)
    doc = json.loads((pytester.path / "fault.json").read_text())
    racecheck = {r["nodeid"].rsplit("::", 1)[1]: r["verdict"] for r in doc["results"]
                 if r["check"] == "sanitizer:racecheck"}
    # the tests after the fault were sanitized in a fresh child: their verdicts are their own
    assert all(v == "pass" for k, v in racecheck.items() if k.startswith("test_after")), racecheck
    assert any(r["check"] == "fault" and f":{fault_line}" in r["summary"] for r in doc["results"])
