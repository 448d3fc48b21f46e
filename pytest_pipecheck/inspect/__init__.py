"""Static inspection: did the pipeline actually get built?

From a cubin (nvcc/NVRTC/CuPy/Triton) the SASS says which async copies, matrix instructions,
barriers and local-memory traffic a kernel has, and whether its main loop keeps a copy in flight
while the matrix instructions run (:mod:`.analysis`). From a Triton compiled kernel the IR says
whether the software pipeliner fired and whether warp specialization was applied
(:mod:`.triton_ir`). Nothing here needs a GPU.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
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


def _nvcc() -> str:
    for cand in (
        os.environ.get("PIPECHECK_NVCC"),
        shutil.which("nvcc"),
        *(
            os.path.join(os.environ[v], "bin", "nvcc")
            for v in ("CUDA_HOME", "CUDA_PATH")
            if os.environ.get(v)
        ),
        "/usr/local/cuda/bin/nvcc",
    ):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    raise PipecheckError(
        "nvcc not found (needed to compile a .cu file): install the CUDA toolkit and put its bin/ on "
        "PATH or set CUDA_HOME, or pass a cubin instead"
    )


def _gencode(arch: str) -> list[str]:
    m = re.fullmatch(r"sm_(\d+)([af]?)", arch)
    if not m:
        raise PipecheckError(f"arch {arch!r} is not an architecture name (expected e.g. sm_80 or sm_90a)")
    digits, suffix = m.groups()
    return [f"-gencode=arch=compute_{digits}{suffix},code=sm_{digits}{suffix}"]


def compile_cu(
    source: str | os.PathLike[str],
    arch: str,
    *,
    defines: dict[str, str | int] | None = None,
    include_dirs: tuple[str, ...] = (),
    options: tuple[str, ...] = (),
) -> tuple[bytes, str]:
    """Compile a .cu file to a cubin for ``arch`` with nvcc; returns (cubin, ptxas -v log).

    Raises :class:`PipecheckError` naming the file when it is missing or does not compile.
    """
    path = Path(source)
    if not path.is_file():
        raise PipecheckError(f"CUDA source {path} does not exist")
    cmd = [_nvcc(), "-cubin", *_gencode(arch), "-Xptxas", "-v", "-lineinfo", *options]
    cmd += [f"-I{d}" for d in (str(path.parent), *include_dirs)]
    cmd += [f"-D{k}={v}" for k, v in (defines or {}).items()]
    with tempfile.TemporaryDirectory(prefix="pipecheck-cu-") as tmp:
        out = os.path.join(tmp, "out.cubin")
        try:
            proc = subprocess.run(
                [*cmd, "-o", out, str(path)], capture_output=True, text=True, timeout=600, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise PipecheckError(f"could not compile {path} for {arch}: {exc}") from None
        if proc.returncode != 0:
            errors = [
                ln for ln in proc.stderr.splitlines() if "error" in ln.lower()
            ] or proc.stderr.splitlines()
            first = errors[0].strip() if errors else f"exit status {proc.returncode}"
            raise PipecheckError(f"nvcc failed on {path} for {arch}: {first}")
        return Path(out).read_bytes(), proc.stderr + proc.stdout


def inspect_cu(
    source: str | os.PathLike[str],
    arch: str,
    *,
    defines: dict[str, str | int] | None = None,
    include_dirs: tuple[str, ...] = (),
    options: tuple[str, ...] = (),
    kernel: str | None = None,
) -> list[KernelFindings]:
    """Compile ``source`` for ``arch`` (nvcc) and inspect it; spill bytes come from ptxas -v.

    Raises :class:`NoKernelsError` for a file without kernels and the errors of
    :func:`compile_cu` and :func:`inspect_cubin`.
    """
    cubin, log = compile_cu(source, arch, defines=defines, include_dirs=include_dirs, options=options)
    if not cubin_kernel_names(cubin):
        raise NoKernelsError(f"{source} contains no kernels (no __global__ function) for {arch}")
    return inspect_cubin(cubin, name=f"{source} ({arch})", ptxas_log=log, kernel=kernel)
