"""Static inspection: did the pipeline actually get built?

From a cubin (nvcc/NVRTC/CuPy/Triton) the SASS says which async copies, matrix instructions,
barriers and local-memory traffic a kernel has, and whether its main loop keeps a copy in flight
while the matrix instructions run (:mod:`.analysis`). From a Triton compiled kernel the IR says
whether the software pipeliner fired and whether warp specialization was applied
(:mod:`.triton_ir`). Nothing here needs a GPU.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..results import PipecheckError
from .analysis import KernelFindings, analyze_sass, parse_ptxas_spills
from .disasm import (
    DisassemblerNotFound,
    DisassemblyError,
    UnknownArchError,
    cubin_arch,
    cubin_kernel_names,
    disassemble,
    find_disassembler,
    require_disassembler,
)
from .sass import SassKernel, parse_sass

__all__ = [
    "DisassemblerNotFound",
    "DisassemblyError",
    "KernelFindings",
    "NoKernelsError",
    "SassKernel",
    "UnknownArchError",
    "analyze_sass",
    "compile_cu",
    "find_disassembler",
    "inspect_cu",
    "inspect_cubin",
    "parse_ptxas_spills",
    "parse_sass",
    "require_disassembler",
]


class NoKernelsError(PipecheckError):
    """The input holds no kernel (no ``__global__`` function with code)."""


def inspect_cubin(
    cubin: bytes | str | os.PathLike[str],
    *,
    name: str | None = None,
    ptxas_log: str | None = None,
    kernel: str | None = None,
) -> list[KernelFindings]:
    """Disassemble ``cubin`` and return the findings of each kernel in it.

    ``ptxas_log`` (a ``ptxas -v`` log) supplies exact spill bytes; without it, spills are judged
    from LDL/STL. ``kernel`` keeps only kernels whose (mangled) name contains it.
    Raises :class:`NoKernelsError` when the cubin (or the filter) leaves no kernel, and the
    errors of :func:`~.disasm.disassemble`.
    """
    what = name or (str(cubin) if not isinstance(cubin, (bytes, bytearray)) else "the cubin")
    text = disassemble(cubin, name=what)
    kernels = parse_sass(text)
    if not kernels:
        raise NoKernelsError(f"{what} contains no kernels (no __global__ function with code)")
    if isinstance(cubin, (bytes, bytearray)):
        data = bytes(cubin)
    else:
        data = Path(cubin).read_bytes()
    arch = cubin_arch(data)
    for k in kernels:
        if k.arch is None:
            k.arch = arch
    if kernel is not None:
        chosen = [k for k in kernels if kernel in k.name]
        if not chosen:
            names = ", ".join(k.name for k in kernels)
            raise NoKernelsError(f"no kernel matching {kernel!r} in {what}; it has: {names}")
        kernels = chosen
    return analyze_sass(kernels, ptxas_log)


def compile_cu(
    source: str | os.PathLike[str],
    arch: str,
    *,
    defines: Mapping[str, str | int | None] | None = None,
    include_dirs: Sequence[str] = (),
    options: Sequence[str] = (),
) -> tuple[bytes, str]:
    """Compile a .cu file (or source text) to a cubin for ``arch``; returns (cubin, ptxas -v log).

    The one compiler of :func:`pytest_pipecheck.toolkit.compile_cuda` (nvcc, else NVRTC; cached).
    Raises :class:`~pytest_pipecheck.toolkit.CompileError` naming the file, target and compiler output
    when it does not compile, and :class:`~pytest_pipecheck.toolkit.ToolkitError` when it is missing.
    """
    from ..toolkit import compile_cuda

    compiled = compile_cuda(source, arch, options=options, include_dirs=include_dirs, defines=defines)
    return compiled.cubin, compiled.log


def inspect_cu(
    source: str | os.PathLike[str],
    arch: str,
    *,
    defines: Mapping[str, str | int | None] | None = None,
    include_dirs: Sequence[str] = (),
    options: Sequence[str] = (),
    kernel: str | None = None,
) -> list[KernelFindings]:
    """Compile ``source`` for ``arch`` (:func:`compile_cu`) and inspect it; spill bytes come from ptxas -v.

    Raises :class:`NoKernelsError` for a file without kernels and the errors of
    :func:`compile_cu` and :func:`inspect_cubin`.
    """
    cubin, log = compile_cu(source, arch, defines=defines, include_dirs=include_dirs, options=options)
    if not cubin_kernel_names(cubin):
        raise NoKernelsError(f"{source} contains no kernels (no __global__ function) for {arch}")
    return inspect_cubin(cubin, name=f"{source} ({arch})", ptxas_log=log, kernel=kernel)
