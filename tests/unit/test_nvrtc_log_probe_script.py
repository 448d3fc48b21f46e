"""scripts/gpu/nvrtc_log_probe.py's summary: per scenario, how many compiles had the ptxas report in NVRTC's
log, how many logs were empty, and which processes failed (a scenario that ran nothing proves nothing)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from _load import load_file

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu" / "nvrtc_log_probe.py"


@pytest.fixture
def probe() -> ModuleType:
    return load_file("nvrtc_log_probe", SCRIPT)


def _compile(chars: int, stdio: bool = False) -> dict[str, object]:
    return {"log_chars": chars, "report_in_log": chars > 0, "report_on_stdio": stdio, "cubin_bytes": 5816}


def test_the_summary_counts_reports_empty_logs_and_failed_processes(probe: ModuleType) -> None:
    lib = "/x/nvidia/cu13/lib/libnvrtc.so.13"
    records = [
        {"scenario": "fresh", "nvrtc": [lib], "compiles": [_compile(326)] * 3, "compiles_after": [], "notes": []},
        {"scenario": "fresh", "nvrtc": [lib], "compiles": [_compile(0), _compile(0, stdio=True), _compile(326)],
         "compiles_after": [], "notes": []},
        {"scenario": "cupy_threads", "nvrtc": [lib], "compiles": [_compile(326)] * 3, "compiles_after": [],
         "notes": [{"thread_error": "ModuleNotFoundError: No module named 'cupy'"}]},
        {"scenario": "ladder_prebuild", "nvrtc": [lib], "compiles": [_compile(0)] * 3,
         "compiles_after": [_compile(326)] * 3, "notes": []},
        {"scenario": "after_torch", "error": "exit 1: AssertionError: Torch not compiled with CUDA enabled"},
    ]
    lines = probe.summarize(records)
    assert lines[2:] == [
        f"| fresh | 2 | 6 | 4 | 2 | 1 | {lib} |",
        f"| cupy_threads | 1 (1 failed) | 3 | 3 | 0 | 0 | {lib} |",
        "| after_torch | 1 (1 failed) | 0 | 0 | 0 | 0 | ? |",
        f"| ladder_prebuild | 1 | 6 | 3 | 3 | 0 | {lib} |",
    ]
