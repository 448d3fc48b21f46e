"""Compiled artifacts shared by the inspector's unit tests, built once per test session.

Each builder is cached, so the several test modules that need the same cubin or Triton kernel
pay for one nvcc / triton.compile call (about 1 s each) in the whole run.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]


def need_nvcc() -> None:
    from pytest_pipecheck import toolkit

    if toolkit.find_tool("nvcc") is None:
        pytest.skip(f"nvcc not found ({toolkit.NOT_FOUND_HINT}): the SASS tests compile their kernels with it")


def need_disassembler() -> None:
    from pytest_pipecheck.inspect import find_disassembler

    if find_disassembler() is None:
        pytest.skip("no cuobjdump/nvdisasm: install triton or nvidia-cuda-cuobjdump")


@functools.cache
def cu(name: str, arch: str = "sm_80", swap: bool = False) -> tuple[bytes, str]:
    """(cubin, ptxas -v log) of tests/data/sass/<name>.cu for ``arch``."""
    from pytest_pipecheck.inspect import compile_cu

    need_nvcc()
    defines = {"SWAP_COMMIT_WAIT": 1} if swap else None
    return compile_cu(HERE / f"{name}.cu", arch, defines=defines)


@functools.cache
def findings(name: str, arch: str = "sm_80", swap: bool = False) -> Any:
    """KernelFindings of the single kernel in tests/data/sass/<name>.cu."""
    from pytest_pipecheck.inspect import inspect_cubin

    need_disassembler()
    cubin, log = cu(name, arch, swap)
    (result,) = inspect_cubin(cubin, ptxas_log=log)
    return result


def _triton() -> Any:
    pytest.importorskip("triton")
    torch = pytest.importorskip("torch")
    import sys

    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    import triton_gemm

    return torch, triton_gemm


@functools.cache
def triton_matmul(arch: str, num_stages: int, odd: bool = False) -> Any:
    """The pointer-based Triton GEMM, AOT-compiled like a JIT launch with these strides.

    ``odd`` uses M=N=K=255: strides not divisible by 16, so the JIT would add no divisibility hint.
    """
    from pytest_pipecheck.inspect.triton_ir import aot_compile

    torch, mod = _triton()
    n = 255 if odd else 256
    buf = torch.empty(n * n, dtype=torch.float16)
    args = (buf, buf, buf, n, n, n, n, 1, n, 1, n, 1, 128, 128, 64)
    return aot_compile(mod.matmul_kernel, args, arch=arch, num_warps=4, num_stages=num_stages)


@functools.cache
def triton_tma(warp_specialize: bool) -> Any:
    """The tensor-descriptor Triton GEMM for sm_90 (TMA loads, wgmma), 3 stages, 4 warps."""
    from pytest_pipecheck.inspect.triton_ir import aot_compile

    torch, mod = _triton()
    buf = torch.empty(256 * 256, dtype=torch.float16)
    args = (buf, buf, buf, 256, 256, 256, 128, 128, 64, 3, warp_specialize)
    return aot_compile(mod.matmul_tma_kernel, args, arch="sm_90", num_warps=4, num_stages=3)
