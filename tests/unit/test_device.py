"""GPU discovery through nvidia-smi, honouring CUDA_VISIBLE_DEVICES, without a CUDA context."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_pipecheck import device

FAKEBIN = Path(__file__).resolve().parents[1] / "data" / "fakebin"


@pytest.fixture
def fake_smi(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setenv("PATH", f"{FAKEBIN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("PIPECHECK_NO_GPU", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("FAKE_NVIDIA_SMI_GPUS", "NVIDIA H200,9.0;NVIDIA A100-SXM4-80GB,8.0")
    device.detect_device.cache_clear()
    yield monkeypatch
    device.detect_device.cache_clear()


def test_lists_all_devices(fake_smi: pytest.MonkeyPatch) -> None:
    devices, reason = device.list_devices()
    assert reason == ""
    assert [(d.index, d.name, d.arch) for d in devices] == [(0, "NVIDIA H200", "sm_90"), (1, "NVIDIA A100-SXM4-80GB", "sm_80")]
    assert devices[0].driver == "580.159.04" and devices[0].memory_mib == 143771


@pytest.mark.parametrize(
    ("visible", "expected"),
    [("1", [1]), ("1,0", [1, 0]), ("GPU-00000001", [1]), ("0,7,1", [0]), ("-1", []), ("", []), ("5", [])],
)
def test_visible_devices(fake_smi: pytest.MonkeyPatch, visible: str, expected: list[int]) -> None:
    fake_smi.setenv("CUDA_VISIBLE_DEVICES", visible)
    devices, reason = device.list_devices()
    assert [d.index for d in devices] == expected
    if not expected:
        assert "CUDA_VISIBLE_DEVICES" in reason


def test_tier_follows_detection(fake_smi: pytest.MonkeyPatch) -> None:
    tier = device.detect_tier("auto")
    assert tier.has_gpu and tier.device is not None and tier.device.name == "NVIDIA H200"
    cpu = device.detect_tier("cpu")
    assert not cpu.has_gpu and "--pipecheck-tier=cpu" in cpu.reason


def test_driver_failure_is_a_reason_not_a_crash(fake_smi: pytest.MonkeyPatch) -> None:
    fake_smi.setenv("FAKE_NVIDIA_SMI_FAIL", "1")
    dev, reason = device.detect_device()
    assert dev is None
    assert reason == "nvidia-smi failed: Failed to initialize NVML: Driver/library version mismatch"


def test_backend_versions_do_not_import(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    before = set(sys.modules)
    versions = device.backend_versions()
    assert set(versions) == {"torch", "triton", "cupy", "cuda-python"}
    assert not {"torch", "triton", "cupy"} & (set(sys.modules) - before)
