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

from . import envvars

__all__ = ["DeviceInfo", "TierInfo", "backend_versions", "detect_device", "detect_tier", "list_devices", "usable_cores"]

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


# how every skip of a timing check for a GPU shared by pytest-xdist workers begins (the summary finds them by it)
TIMING_ALONE = "timing needs the GPU alone"


@dataclass(frozen=True)
class TierInfo:
    """The tier of this run: 'gpu' when a CUDA device is usable, else 'cpu' with the reason."""

    tier: str
    device: DeviceInfo | None
    reason: str  # why there is no GPU (empty on the gpu tier)
    backends: dict[str, str | None] = field(default_factory=dict)
    # the pytest-xdist workers pinned to this process's GPU, this one included (empty without xdist)
    gpu_shared_by: tuple[str, ...] = ()

    @property
    def has_gpu(self) -> bool:
        return self.tier == "gpu"

    @property
    def timing_blocked(self) -> str | None:
        """Why a timing taken here would not be the kernel's own (None when it would be).

        Under pytest-xdist several workers may be pinned to one GPU; the others' kernels (and their
        sanitizer children) then run between and during this process's timed launches, so a time is
        the contention's as much as the kernel's: a regression can hide in it as easily as a false one
        can appear (docs/validation/2026-11-26-h100.md)."""
        if not self.has_gpu or len(self.gpu_shared_by) < 2:
            return None
        where = f"GPU {self.device.index}" if self.device is not None else "this GPU"
        return (f"{TIMING_ALONE}, and {len(self.gpu_shared_by)} pytest-xdist workers share {where} "
                f"({', '.join(self.gpu_shared_by)}): time it in a run without -n, or with at most one worker per "
                "GPU (-n auto)")


def usable_cores() -> int:
    """The CPU cores this process may run on: its affinity, which a CI container or ``taskset`` narrows (all
    the machine's where the platform cannot say)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


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
    if envvars.value("PIPECHECK_NO_GPU"):
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


# Attributes read from the driver, under the names CuPy's getDeviceProperties uses, so that
# arch.compare_with_device can read them as it reads CuPy's and torch's.
_DRIVER_ATTRIBUTES = {
    "major": "COMPUTE_CAPABILITY_MAJOR",
    "minor": "COMPUTE_CAPABILITY_MINOR",
    "multiProcessorCount": "MULTIPROCESSOR_COUNT",
    "warpSize": "WARP_SIZE",
    "maxThreadsPerBlock": "MAX_THREADS_PER_BLOCK",
    "maxThreadsPerMultiProcessor": "MAX_THREADS_PER_MULTIPROCESSOR",
    "maxBlocksPerMultiProcessor": "MAX_BLOCKS_PER_MULTIPROCESSOR",
    "regsPerMultiprocessor": "MAX_REGISTERS_PER_MULTIPROCESSOR",
    "regsPerBlock": "MAX_REGISTERS_PER_BLOCK",
    "sharedMemPerMultiprocessor": "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
    "sharedMemPerBlock": "MAX_SHARED_MEMORY_PER_BLOCK",
    "sharedMemPerBlockOptin": "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
    "reservedSharedMemPerBlock": "RESERVED_SHARED_MEMORY_PER_BLOCK",
}


def device_attributes(ordinal: int = 0) -> tuple[dict[str, int] | None, str]:
    """The first visible device's limits from the CUDA driver (cuda-python), without a context.

    ``cuInit`` and ``cuDeviceGetAttribute`` create no CUDA context, so this is safe in the parent of
    a sanitizer child. Returns (attributes, "") or (None, why not).
    """
    try:
        from cuda.bindings import driver
    except ImportError:
        return None, "cuda-python is not installed"
    try:
        (err,) = driver.cuInit(0)
        if int(err) != 0:
            return None, f"cuInit failed ({err})"
        err, dev = driver.cuDeviceGet(ordinal)
        if int(err) != 0:
            return None, f"cuDeviceGet({ordinal}) failed ({err})"
        out: dict[str, int] = {}
        for key, name in _DRIVER_ATTRIBUTES.items():
            attr = getattr(driver.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}", None)
            if attr is None:
                continue
            err, value = driver.cuDeviceGetAttribute(attr, dev)
            if int(err) == 0:
                out[key] = int(value)
        return out, ""
    except Exception as exc:  # a broken driver install must not break pytest's header
        return None, f"{type(exc).__name__}: {exc}"


def arch_table_note(tier: TierInfo) -> str:
    """One phrase for the header: does pipecheck's architecture table match the live device?"""
    if tier.device is None:
        return ""
    attributes, why = device_attributes(0)
    if attributes is None:
        return f"arch table not checked against the device ({why})"
    from .arch import ArchError, compare_with_device

    try:
        disagreements = compare_with_device(attributes)
    except ArchError as exc:
        return f"arch table not checked against the device ({exc})"
    sms = attributes.get("multiProcessorCount")
    prefix = f"{sms} SMs, " if sms else ""
    if not disagreements:
        return prefix + "arch table agrees with the device"
    return prefix + "arch table DISAGREES with the device: " + "; ".join(disagreements)
