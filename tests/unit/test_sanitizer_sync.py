"""The sanitizer child's wait for the device after each test (pytest_pipecheck/sanitizer/child_plugin.py)."""

from __future__ import annotations

import sys
import types

import pytest

from pytest_pipecheck.sanitizer import child_plugin


def _fake_cupy(current: object) -> tuple[types.ModuleType, list[str]]:
    calls: list[str] = []

    def ctx_get_current() -> int:
        if isinstance(current, Exception):
            raise current
        return int(current)  # type: ignore[call-overload]

    def device_synchronize() -> None:
        calls.append("sync")
        raise RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")

    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(driver=types.SimpleNamespace(ctxGetCurrent=ctx_get_current),  # type: ignore[attr-defined]
                                      runtime=types.SimpleNamespace(deviceSynchronize=device_synchronize))
    return cupy, calls


@pytest.mark.parametrize("current", [0, RuntimeError("CUDA_ERROR_NOT_INITIALIZED")])
def test_a_child_that_never_touched_the_gpu_does_not_wait_through_cupy(current: object,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The child imports CuPy itself (to turn its pools off): without a context, no wait and no error
    (a wait there would fail tests that never used the GPU)."""
    cupy, calls = _fake_cupy(current)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert child_plugin._synchronize() is None and calls == []


def test_with_a_context_the_wait_runs_and_its_error_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    cupy, calls = _fake_cupy(0x5555)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    error = child_plugin._synchronize()
    assert calls == ["sync"] and error is not None and "cudaErrorNoDevice" in error
