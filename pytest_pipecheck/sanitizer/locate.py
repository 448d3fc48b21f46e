"""Find compute-sanitizer, searching only places that an installation put it.

The search order (the first executable file wins):

1. ``PIPECHECK_COMPUTE_SANITIZER``: the executable the user named explicitly;
2. the absolute entries of ``PATH``, in order;
3. ``$CUDA_HOME``, ``$CUDA_PATH``, ``$CUDA_ROOT`` (absolute values only): ``bin/compute-sanitizer``
   and ``compute-sanitizer/compute-sanitizer``;
4. the toolkit prefixes ``/usr/local/cuda*`` (newest name first) and ``/opt/cuda``, same two layouts;
5. NVIDIA's pip packages in this interpreter's site-packages directories:
   ``nvidia/<pkg>/bin/compute-sanitizer`` and ``nvidia/<pkg>/compute-sanitizer/compute-sanitizer``
   (``nvidia/cu13/...`` of the CUDA 13 wheels, ``nvidia/cuda_sanitizer_api/...`` of
   ``nvidia-cuda-sanitizer-api``).

The working directory is never searched: not through an empty or relative ``PATH`` entry, a relative
``CUDA_HOME``, nor ``sys.path[0]`` (the working directory under ``python -m pytest``). A checkout
that ships a file named ``compute-sanitizer`` must not get it executed.
"""

from __future__ import annotations

import functools
import glob
import os
import re
import site
import subprocess
import sysconfig
from dataclasses import dataclass

__all__ = ["HOW_TO_GET", "SanitizerInstall", "find_compute_sanitizer"]

HOW_TO_GET = (
    "compute-sanitizer ships with the CUDA toolkit: put the toolkit's bin/ on PATH (an absolute entry), "
    "set CUDA_HOME, or point PIPECHECK_COMPUTE_SANITIZER at the executable"
)
_EXE = "compute-sanitizer"


@dataclass(frozen=True)
class SanitizerInstall:
    path: str
    version: str | None
    found_via: str


def _site_dirs() -> list[str]:
    """This interpreter's installed-package directories (absolute); never ``sys.path[0]``."""
    dirs: list[str] = []
    try:
        dirs += site.getsitepackages()
    except AttributeError:  # pragma: no cover - old virtualenv's site module
        pass
    try:
        dirs.append(site.getusersitepackages())
    except AttributeError:  # pragma: no cover
        pass
    for key in ("purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            dirs.append(path)
    out: list[str] = []
    for d in dirs:
        if os.path.isabs(d) and d not in out:
            out.append(d)
    return out


def _candidates() -> list[tuple[str, str]]:
    """Every place to look, in order, as (path, how it was found); only absolute paths but the
    explicit PIPECHECK_COMPUTE_SANITIZER."""
    out: list[tuple[str, str]] = []
    env_path = os.environ.get("PIPECHECK_COMPUTE_SANITIZER")
    if env_path:
        out.append((env_path, "PIPECHECK_COMPUTE_SANITIZER"))
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if entry and os.path.isabs(entry):  # "" and relative entries would search the working directory
            out.append((os.path.join(entry, _EXE), "PATH"))
    for var in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"):
        root = os.environ.get(var)
        if root and os.path.isabs(root):
            out.append((os.path.join(root, "bin", _EXE), var))
            out.append((os.path.join(root, _EXE, _EXE), var))
    for root in [*sorted(glob.glob("/usr/local/cuda*"), reverse=True), "/opt/cuda"]:
        out.append((os.path.join(root, "bin", _EXE), root))
        out.append((os.path.join(root, _EXE, _EXE), root))
    for site_dir in _site_dirs():
        for pattern in (f"nvidia/*/bin/{_EXE}", f"nvidia/*/{_EXE}/{_EXE}"):
            for hit in sorted(glob.glob(os.path.join(glob.escape(site_dir), pattern))):
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
    """The first compute-sanitizer found in the order of this module's docstring, with its version;
    None when there is none."""
    seen: set[str] = set()
    for path, via in _candidates():
        real = os.path.realpath(path)
        if real in seen or not os.path.isfile(real) or not os.access(real, os.X_OK):
            continue
        seen.add(real)
        return SanitizerInstall(path=path, version=_version(path), found_via=via)
    return None
