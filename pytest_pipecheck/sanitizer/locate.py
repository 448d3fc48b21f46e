"""Find compute-sanitizer, searching only places that an installation put it.

The search order is the one of :mod:`pytest_pipecheck.toolkit`, with NVIDIA's pip package before
``PATH`` and the toolkits (the first executable file wins):

1. ``PIPECHECK_COMPUTE_SANITIZER``: the executable the user named explicitly;
2. NVIDIA's pip packages in this interpreter's site-packages directories:
   ``nvidia/<pkg>/bin/compute-sanitizer`` and ``nvidia/<pkg>/compute-sanitizer/compute-sanitizer``
   (``nvidia/cu13/...`` of ``nvidia-cuda-sanitizer-api`` 13.x, which pipecheck's ``sanitizer`` extra
   installs at the tested version (``pip install -e ".[sanitizer]"`` in a clone of pytest-pipecheck);
   older releases used ``nvidia/cuda_sanitizer_api/...``);
3. the absolute entries of ``PATH``, in order;
4. ``$CUDA_HOME``, ``$CUDA_PATH``, ``$CUDA_ROOT`` (absolute values only): ``bin/compute-sanitizer``
   and ``compute-sanitizer/compute-sanitizer``;
5. the toolkit prefixes ``/usr/local/cuda*`` (newest name first) and ``/opt/cuda``, same two layouts.

The pip package comes first because a newer compute-sanitizer sees more (shared-memory initcheck) and
reports fewer false positives than an older toolkit's; :mod:`.known` lists what each version can do.
The run header names the binary, how it was found and its version.

The working directory is never searched: not through an empty or relative ``PATH`` entry, a relative
``CUDA_HOME``, nor ``sys.path[0]`` (the working directory under ``python -m pytest``). A checkout
that ships a file named ``compute-sanitizer`` must not get it executed.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .. import toolkit
from .known import INSTALL_PINNED

__all__ = ["HOW_TO_GET", "SanitizerInstall", "find_compute_sanitizer", "not_found"]

HOW_TO_GET = (
    f"NVIDIA's compute-sanitizer at the version pipecheck was validated with: {INSTALL_PINNED}; it also ships "
    "with the CUDA toolkit: put the toolkit's bin/ on PATH (an absolute entry), set CUDA_HOME, or point "
    "PIPECHECK_COMPUTE_SANITIZER at the executable"
)


@dataclass(frozen=True)
class SanitizerInstall:
    path: str
    version: str | None  # as printed: "2025.3.1", "2026.4.0.0"
    found_via: str

    @property
    def version_tuple(self) -> tuple[int, ...] | None:
        """The version as a comparable tuple (``(2026, 4)``); None when it could not be read."""
        return toolkit.version_tuple(self.version)

    def describe(self) -> str:
        """``/path/compute-sanitizer (2026.4.0.0, pip package)`` for the run header."""
        return f"{self.path} ({self.version or 'unknown version'}, {self.found_via})"


@functools.lru_cache(maxsize=1)
def find_compute_sanitizer() -> SanitizerInstall | None:
    """The first compute-sanitizer found in the order of this module's docstring, with its version;
    None when there is none."""
    found = toolkit.find_tool("compute-sanitizer")
    if found is None:
        return None
    return SanitizerInstall(path=found.path, version=toolkit.tool_version(found.path), found_via=found.found_via)


def not_found() -> str:
    """``compute-sanitizer not found (why)``: a variable naming no executable file, or nowhere."""
    return f"compute-sanitizer not found ({toolkit.not_found_reason('compute-sanitizer')})"
