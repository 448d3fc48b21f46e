"""The NVRTC fallback of CUDA C++ resource extraction: with nvcc hidden, sources compile through NVIDIA's
cuda-python NVRTC, and ptxas reports the same registers, shared memory and spills as through nvcc.

Skipped, with the reason, where cuda-python's NVRTC (or the NVRTC library it loads) is not installed.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from types import ModuleType

import pytest

from pytest_pipecheck import toolkit
from pytest_pipecheck.resources import cubin

SMALL = r"""
extern "C" __global__ void scale(float* x, float a, int n) {
  __shared__ float tile[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  if (i < n) x[i] = a * tile[255 - threadIdx.x];
}
"""

BROKEN = 'extern "C" __global__ void broken(float* x) { x[0] = undefined_name; }\n'


def _nvrtc_or_skip() -> None:
    for mod in ("cuda.bindings.nvrtc", "cuda.nvrtc"):
        try:
            nvrtc = importlib.import_module(mod)
        except ImportError:
            continue
        try:
            nvrtc.nvrtcVersion()
        except Exception as exc:  # the module imports but the NVRTC library does not load
            pytest.skip(f"NVRTC library not loadable: {exc}")
        return
    pytest.skip("cuda-python (NVRTC bindings) not installed: pip install cuda-python")


@pytest.fixture
def nvrtc_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    _nvrtc_or_skip()
    real = cubin.toolkit.find_tool
    monkeypatch.setattr(cubin.toolkit, "find_tool", lambda name: None if name == "nvcc" else real(name))
    cubin.clear_cache()
    yield
    cubin.clear_cache()


@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_90"])
def test_small_kernel_through_nvrtc(nvrtc_only: None, arch: str) -> None:
    res = cubin.compile_resources(SMALL, arch)["scale"]
    assert res.origin == "nvrtc"
    assert res.static_smem == 1024
    assert 4 <= res.registers <= 64
    assert res.spills == 0
    assert res.arch == arch


def test_compile_error_through_nvrtc_shows_the_message_and_target(nvrtc_only: None) -> None:
    with pytest.raises(cubin.CompileError) as info:
        cubin.compile_resources(BROKEN, "sm_90")
    text = str(info.value)
    assert "NVRTC" in text and "sm_90" in text and "undefined_name" in text


def test_no_compiler_at_all_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cubin.toolkit, "find_tool", lambda name: None)
    real_import = importlib.import_module

    def no_nvrtc(name: str, package: str | None = None) -> ModuleType:
        if "nvrtc" in name:
            raise ImportError(name)
        return real_import(name, package)

    monkeypatch.setattr(importlib, "import_module", no_nvrtc)
    cubin.clear_cache()
    with pytest.raises(cubin.ResourceError, match=r"neither nvcc .* nor NVRTC"):
        cubin.compile_resources(SMALL, "sm_90")
    cubin.clear_cache()


@pytest.mark.parametrize("kernel", ["k3_cp_async", "k4_cuda_pipeline", "k5_warp_specialized"])
def test_ladder_kernel_nvrtc_agrees_with_nvcc(kernel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same source and flags through NVRTC and through nvcc: the same shared memory, spills and
    barriers, and the same blocks/SM; registers may differ by a few (with CUDA 13.0 for sm_90: 216
    through nvcc, 218 through NVRTC for k3), because the two front ends optimise differently.
    k4 and k5 include libcu++ (<cuda/pipeline>), which CUDA 13 keeps under include/cccl."""
    if toolkit.find_tool("nvcc") is None:
        pytest.skip("nvcc not found: nothing to compare NVRTC with")
    _nvrtc_or_skip()
    from reference_kernels.cuda.launch import CUDA_DIR, KERNELS, dynamic_smem, source_stages

    k = KERNELS[kernel]
    opts = ("-std=c++17",)
    cubin.clear_cache()
    via_nvcc = cubin.compile_resources(k.path, "sm_90", options=opts, include_dirs=[str(CUDA_DIR)])
    real = cubin.toolkit.find_tool
    monkeypatch.setattr(cubin.toolkit, "find_tool", lambda name: None if name == "nvcc" else real(name))
    cubin.clear_cache()
    via_nvrtc = cubin.compile_resources(k.path, "sm_90", options=opts, include_dirs=[str(CUDA_DIR)])
    cubin.clear_cache()
    a, b = via_nvcc[k.entry], via_nvrtc[k.entry]
    # an NVRTC log without the ptxas report (NVRTC 13.0 from the pip wheel can print none) reads the cubin
    # instead: then this comparison cannot be made, and the message says why
    assert (a.origin, b.origin) == ("nvcc", "nvrtc"), b.extra.get("note", b.origin)
    assert (b.static_smem, b.spills, b.barriers) == (a.static_smem, a.spills, a.barriers)
    assert abs(b.registers - a.registers) <= 8, (a.registers, b.registers)
    smem = dynamic_smem(k, source_stages(k.path.read_text(), k))
    assert b.occupancy(k.threads, smem).blocks_per_sm == a.occupancy(k.threads, smem).blocks_per_sm


_C_WRITES = r'''
import ctypes, sys, types
from pytest_pipecheck import toolkit

LOG = sys.argv[1].encode() + b"\0"  # what NVRTC returns: the text and its terminating NUL
CUBIN = b"\x7fELF fake cubin"


def c_write(buf, data):  # what a C function given a char* does: write into that memory, whatever object owns it
    if isinstance(buf, bytearray):
        (ctypes.c_char * len(buf)).from_buffer(buf)[:len(data)] = data
    else:
        ctypes.memmove(ctypes.cast(ctypes.c_char_p(buf), ctypes.c_void_p).value, data, len(data))
    return (0,)


fake = types.SimpleNamespace(
    nvrtcCreateProgram=lambda *a: (0, "prog"), nvrtcCompileProgram=lambda *a: (0,),
    nvrtcGetProgramLogSize=lambda p: (0, len(LOG)), nvrtcGetProgramLog=lambda p, buf: c_write(buf, LOG),
    nvrtcGetCUBINSize=lambda p: (0, len(CUBIN)), nvrtcGetCUBIN=lambda p, buf: c_write(buf, CUBIN),
    nvrtcDestroyProgram=lambda p: (0,))
toolkit._nvrtc = lambda: fake
toolkit.find_tool = lambda name: None
got = toolkit.compile_cuda('extern "C" __global__ void k() {}', "sm_90")
print(repr(got.log), got.cubin == CUBIN, bytes([32]) == b"\x20")
'''


@pytest.mark.parametrize("log", ["", "ptxas info    : Used 10 registers, used 1 barriers"])
def test_nvrtc_writes_into_a_buffer_of_its_own(log: str) -> None:
    """NVRTC writes the log and the cubin into the buffer it is given, so that buffer must be mutable. An
    immutable ``bytes`` for an empty log (its NUL alone) is CPython's shared one-byte object, and the write
    would turn the process's ``bytes([32])`` into NUL. A fake NVRTC that writes as C does, in a process of
    its own."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _C_WRITES, log], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-2:] == ["True", "True"], repr(proc.stdout)  # a NUL here: b" " was overwritten
    assert proc.stdout.startswith(repr(log)), proc.stdout
