"""Which tier this run is on: is a CUDA device usable, which one, and which backends are installed.

Detection never creates a CUDA context in the pytest process: the GPU is found through
``nvidia-smi`` (NVML), and backend versions through package metadata, without importing them. The
parent of a sanitizer child must not hold a context, and ``pytest --help`` must stay fast.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from importlib import metadata

__all__ = ["DeviceInfo", "TierInfo", "backend_versions", "detect_device", "detect_tier", "list_devices"]

BACKENDS = {
    "torch": ("torch",),
    "triton": ("triton",),
    "cupy": ("cupy-cuda13x", "cupy-cuda12x", "cupy"),
    "cuda-python": ("cuda-python", "cuda-bindings"),
}


@dataclass(frozen=True)
class DeviceInfo:
    """The CUDA device this process will use (the first visible one)."""

    index: int
    name: str
    compute_capability: str  # "9.0"
    sm_count: int | None
    memory_mib: int | None
    driver: str | None
    uuid: str | None = None

    @property
    def arch(self) -> str:
        major, minor = self.compute_capability.split(".")
        return f"sm_{major}{minor}"


@dataclass(frozen=True)
class TierInfo:
    """The tier of this run: 'gpu' when a CUDA device is usable, else 'cpu' with the reason."""

    tier: str
    device: DeviceInfo | None
    reason: str  # why there is no GPU (empty on the gpu tier)
    backends: dict[str, str | None] = field(default_factory=dict)

    @property
    def has_gpu(self) -> bool:
        return self.tier == "gpu"


def backend_versions() -> dict[str, str | None]:
    """Installed versions of the optional backends (None when absent), read from package metadata."""
    out: dict[str, str | None] = {}
    for name, dists in BACKENDS.items():
        out[name] = None
        for dist in dists:
            try:
                out[name] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    return out


@functools.lru_cache(maxsize=1)
def _query_all() -> tuple[tuple[DeviceInfo, ...], str]:
    """Every GPU the driver reports (ignoring CUDA_VISIBLE_DEVICES), or () and the reason."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return (), "no NVIDIA driver found (nvidia-smi is not on PATH)"
    query = "index,name,compute_cap,memory.total,driver_version,uuid"
    try:
        proc = subprocess.run(
            [smi, f"--query-gpu={query}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30, check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return (), f"nvidia-smi failed: {exc}"
    if proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        return (), f"nvidia-smi failed: {msg[0] if msg else 'exit ' + str(proc.returncode)}"
    devices = []
    for line in proc.stdout.strip().splitlines():
        row = [c.strip() for c in line.split(",")]
        if len(row) < 6 or not row[0].isdigit():
            continue
        devices.append(DeviceInfo(index=int(row[0]), name=row[1], compute_capability=row[2], sm_count=None,
                                  memory_mib=int(row[3]) if row[3].isdigit() else None, driver=row[4],
                                  uuid=row[5]))
    if not devices:
        return (), "nvidia-smi lists no GPU"
    return tuple(devices), ""


def _matches(device: DeviceInfo, entry: str) -> bool:
    if entry.isdigit():
        return device.index == int(entry)
    return bool(device.uuid) and device.uuid.startswith(entry)  # type: ignore[union-attr]


def list_devices() -> tuple[list[DeviceInfo], str]:
    """The visible GPUs, in CUDA_VISIBLE_DEVICES order, without creating a CUDA context."""
    if os.environ.get("PIPECHECK_NO_GPU"):
        return [], "PIPECHECK_NO_GPU is set"
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None and env.strip() in ("", "-1"):
        return [], "CUDA_VISIBLE_DEVICES hides every device"
    devices, reason = _query_all()
    if not devices:
        return [], reason
    if env is None:
        return list(devices), ""
    visible = []
    for entry in (e.strip() for e in env.split(",")):
        if entry == "-1":
            break  # CUDA stops at the first invalid entry
        found = [d for d in devices if _matches(d, entry)]
        if not found:
            break
        visible.append(found[0])
    if not visible:
        return [], f"CUDA_VISIBLE_DEVICES={env} matches no GPU"
    return visible, ""


def detect_device() -> tuple[DeviceInfo | None, str]:
    """The first visible CUDA device (the one this process will use), or None and the reason."""
    devices, reason = list_devices()
    return (devices[0], "") if devices else (None, reason)


detect_device.cache_clear = _query_all.cache_clear  # type: ignore[attr-defined]


def detect_tier(requested: str = "auto") -> TierInfo:
    """Decide the tier. ``requested`` is the --pipecheck-tier value (auto, cpu, gpu)."""
    backends = backend_versions()
    if requested == "cpu":
        return TierInfo("cpu", None, "--pipecheck-tier=cpu was requested", backends)
    device, reason = detect_device()
    if device is None:
        return TierInfo("cpu", None, reason, backends)
    return TierInfo("gpu", device, "", backends)
