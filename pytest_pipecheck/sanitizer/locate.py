"""Find compute-sanitizer: PATH, CUDA_HOME / CUDA_PATH, the usual toolkit prefixes, NVIDIA's pip packages."""

from __future__ import annotations

import functools
import glob
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass

__all__ = ["HOW_TO_GET", "SanitizerInstall", "find_compute_sanitizer"]

HOW_TO_GET = (
    "compute-sanitizer ships with the CUDA toolkit: put the toolkit's bin/ on PATH, set CUDA_HOME, "
    "or point PIPECHECK_COMPUTE_SANITIZER at the executable"
)


@dataclass(frozen=True)
class SanitizerInstall:
    path: str
    version: str | None
    found_via: str


def _candidates() -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    env_path = os.environ.get("PIPECHECK_COMPUTE_SANITIZER")
    if env_path:
        out.append((env_path, "PIPECHECK_COMPUTE_SANITIZER"))
    which = shutil.which("compute-sanitizer")
    if which:
        out.append((which, "PATH"))
    for var in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"):
        root = os.environ.get(var)
        if root:
            out.append((os.path.join(root, "bin", "compute-sanitizer"), var))
            out.append((os.path.join(root, "compute-sanitizer", "compute-sanitizer"), var))
    for root in [*sorted(glob.glob("/usr/local/cuda*"), reverse=True), "/opt/cuda"]:
        out.append((os.path.join(root, "bin", "compute-sanitizer"), root))
        out.append((os.path.join(root, "compute-sanitizer", "compute-sanitizer"), root))
    # NVIDIA's pip-installed toolkit layouts (nvidia/cuda_sanitizer_api, cuda-toolkit wheels)
    for site in sys.path:
        for pattern in ("nvidia/*/bin/compute-sanitizer", "nvidia/cu*/bin/compute-sanitizer"):
            for hit in glob.glob(os.path.join(site, pattern)):
                out.append((hit, "pip package"))
    return out


def _version(path: str) -> str | None:
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"Version\s+([\w.]+)", proc.stdout + proc.stderr)
    return m.group(1) if m else None


@functools.lru_cache(maxsize=1)
def find_compute_sanitizer() -> SanitizerInstall | None:
    """The first working compute-sanitizer found, with its version; None when there is none."""
    seen: set[str] = set()
    for path, via in _candidates():
        real = os.path.realpath(path)
        if real in seen or not os.path.isfile(real) or not os.access(real, os.X_OK):
            continue
        seen.add(real)
        return SanitizerInstall(path=path, version=_version(path), found_via=via)
    return None
