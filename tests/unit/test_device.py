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


class _FakeDriver:
    """Enough of cuda.bindings.driver for device_attributes: an H200 whose limits can be edited."""

    class CUdevice_attribute:
        pass

    def __init__(self, values: dict[str, int]) -> None:
        self.values = values
        for name in values:
            setattr(self.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}", name)

    def cuInit(self, flags: int) -> tuple[int]:
        return (0,)

    def cuDeviceGet(self, ordinal: int) -> tuple[int, int]:
        return 0, ordinal

    def cuDeviceGetAttribute(self, attr: str, dev: int) -> tuple[int, int]:
        return 0, self.values[attr]


H200 = {"COMPUTE_CAPABILITY_MAJOR": 9, "COMPUTE_CAPABILITY_MINOR": 0, "MULTIPROCESSOR_COUNT": 132,
        "WARP_SIZE": 32, "MAX_THREADS_PER_BLOCK": 1024, "MAX_THREADS_PER_MULTIPROCESSOR": 2048,
        "MAX_BLOCKS_PER_MULTIPROCESSOR": 32, "MAX_REGISTERS_PER_MULTIPROCESSOR": 65536,
        "MAX_REGISTERS_PER_BLOCK": 65536, "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": 233472,
        "MAX_SHARED_MEMORY_PER_BLOCK": 49152, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 232448,
        "RESERVED_SHARED_MEMORY_PER_BLOCK": 1024}


def _install_driver(monkeypatch: pytest.MonkeyPatch, values: dict[str, int]) -> None:
    import sys
    import types

    fake = _FakeDriver(values)
    bindings = types.ModuleType("cuda.bindings")
    bindings.driver = fake  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cuda", types.ModuleType("cuda"))
    monkeypatch.setitem(sys.modules, "cuda.bindings", bindings)
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", fake)  # type: ignore[arg-type]


def _gpu_tier() -> device.TierInfo:
    dev = device.DeviceInfo(0, "NVIDIA H200", "9.0", None, 143771, "580.159.04", "GPU-x")
    return device.TierInfo("gpu", dev, "")


def test_header_note_agrees_with_a_matching_device(monkeypatch: pytest.MonkeyPatch) -> None:
    _install_driver(monkeypatch, dict(H200))
    attrs, why = device.device_attributes()
    assert why == "" and attrs is not None and attrs["sharedMemPerBlockOptin"] == 232448
    assert device.arch_table_note(_gpu_tier()) == "132 SMs, arch table agrees with the device"


def test_header_note_names_each_disagreement(monkeypatch: pytest.MonkeyPatch) -> None:
    _install_driver(monkeypatch, {**H200, "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": 232448, "WARP_SIZE": 64})
    note = device.arch_table_note(_gpu_tier())
    assert note.startswith("132 SMs, arch table DISAGREES with the device: ")
    assert "smem_per_sm: table 233472, device 232448" in note
    assert "warp_size: table 32, device 64" in note


def test_header_note_without_cuda_python(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    assert device.arch_table_note(_gpu_tier()) == (
        "arch table not checked against the device (cuda-python is not installed)")
    assert device.arch_table_note(device.TierInfo("cpu", None, "no GPU")) == ""
