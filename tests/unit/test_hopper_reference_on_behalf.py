"""The Hopper GPU tests' reference run on behalf of a mutant test (``tests/gpu/test_hopper_gpu.py``): where a
worker runs the reference itself because its own test went to another worker, a failure there fails the test
that asked, with the reference's output, and is never a skip that hides it. No GPU: the child run is replaced."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from _load import load_file

GPU_TESTS = Path(__file__).resolve().parents[1] / "gpu" / "test_hopper_gpu.py"


@pytest.fixture
def hopper(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    module = load_file("hopper_gpu_tests_under_test", GPU_TESTS)
    monkeypatch.delenv("PIPECHECK_CHILD", raising=False)
    return module


def _child(returncode: int, calls: list[list[str]]) -> Any:
    def run(args: list[str], timeout: float = 60, prefix: list[str] | None = None) -> dict[str, Any]:
        calls.append(args)
        return {"timed_out": False, "returncode": returncode, "output": "CUDA_ERROR_ILLEGAL_ADDRESS at 129x257x72",
                "cmd": ["python", "-m", "reference_kernels.hopper.run_case", *args],
                "result": {"error": "launch failed", "results": []}}
    return run


def test_a_reference_that_fails_when_run_on_behalf_fails_the_asking_test_with_its_output(
        hopper: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(hopper, "_run_child", _child(1, calls))
    with pytest.raises(pytest.fail.Exception) as failed:
        hopper._reference_passed("s4_c2_n128")
    assert "the reference s4_c2_n128, run here because its own test ran in another process" in str(failed.value)
    assert "exit 1" in str(failed.value) and "CUDA_ERROR_ILLEGAL_ADDRESS" in str(failed.value)
    assert len(calls) == 1


def test_a_reference_that_passes_when_run_on_behalf_runs_once(hopper: ModuleType,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(hopper, "_run_child", _child(0, calls))
    assert hopper._reference_passed("s4_c2_n128") is True
    assert hopper._reference_passed("s4_c2_n128") is True
    assert len(calls) == 1


def test_a_reference_whose_own_test_failed_here_leaves_the_others_skipped(hopper: ModuleType,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(hopper, "_run_child", _child(1, calls))
    hopper._reference_run("s4_c2_n128")  # the reference's own test, in this process: it reports the failure
    assert hopper._reference_passed("s4_c2_n128") is False
    assert len(calls) == 1

