"""Triton ahead-of-time resources: the JIT's specialization from real arguments, for any target."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from pytest_pipecheck.resources.triton import TritonResourceError, triton_resources  # noqa: E402
from pytest_pipecheck.results import PipecheckError  # noqa: E402
from reference_kernels.triton.simple_gemm import gemm_kernel  # noqa: E402

TILES = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}


def _args(n: int = 4096, offset: int = 0) -> tuple[object, ...]:
    # CPU tensors are enough: the JIT's specialization reads only data_ptr alignment and int values
    base = torch.empty(n * n + offset, dtype=torch.float16)
    a = base[offset:].view(n, n)
    b = torch.empty((n, n), dtype=torch.float16)
    c = torch.empty((n, n), dtype=torch.float16)
    return (a, b, c, n, n, n, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))


@pytest.mark.parametrize(("arch", "stages", "shared"),
                         [("sm_90", 3, 98304), ("sm_90", 4, 131072), ("sm_80", 3, 65536)])
def test_shared_equals_the_jit_on_that_gpu(arch: str, stages: int, shared: int) -> None:
    # what the JIT-compiled kernel reports on an sm_90 GPU (tests/gpu/test_inspect_gpu.py and
    # docs/validation/2026-11-22-h200-0223/stage_sweep.md: AOT and JIT equal at 1 to 5 stages)
    res = triton_resources(gemm_kernel, _args(), arch=arch, num_warps=4, num_stages=stages, **TILES)
    assert res.dynamic_smem == shared
    assert res.num_warps == 4 and res.threads == 128 and res.arch == arch
    assert 32 < res.registers <= 255  # read from the cubin
    assert res.origin == "triton-aot"


def test_stage_4_crosses_the_sm90_cliff_and_is_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    res = triton_resources(gemm_kernel, _args(), arch="sm_90", num_warps=4, num_stages=4, **TILES)
    occ = res.occupancy()
    assert occ.blocks_per_sm == 1 and "shared_memory" in occ.limiters

    def no_compile(*args: object, **kwargs: object) -> None:
        raise AssertionError("compiled again: the cache was not used")

    # served from the cache: nothing is compiled (asserted without timing it)
    monkeypatch.setattr("triton.compiler.compile", no_compile)
    again = triton_resources(gemm_kernel, _args(), arch="90", num_warps=4, num_stages=4, **TILES)
    assert again == res


def test_specialization_follows_the_arguments() -> None:
    # a pointer 2 bytes past a 16-byte boundary loses tt.divisibility, as it would under the JIT,
    # and the pipeliner no longer fires: shared memory differs from the aligned launch
    aligned = triton_resources(gemm_kernel, _args(), arch="sm_90", num_warps=4, num_stages=4, **TILES)
    skewed = triton_resources(gemm_kernel, _args(offset=1), arch="sm_90", num_warps=4, num_stages=4, **TILES)
    assert skewed.dynamic_smem < aligned.dynamic_smem


def test_wrong_arguments_are_a_clear_error() -> None:
    with pytest.raises(TritonResourceError) as info:
        triton_resources(gemm_kernel, _args()[:5], arch="sm_90", num_warps=4, num_stages=3, **TILES)
    assert "gemm_kernel(a_ptr, b_ptr" in str(info.value)
    assert isinstance(info.value, PipecheckError)
    with pytest.raises(PipecheckError, match="not a known architecture"):
        triton_resources(gemm_kernel, _args(), arch="sm_91", num_warps=4, num_stages=3, **TILES)


@triton.jit
def scaled_copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr, SCALE: tl.constexpr = 2):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * SCALE, mask=offs < n)


def test_fresh_process_compile_keeps_parameter_defaults() -> None:
    # the fallback for an in-process compile that the interpreter's leftovers broke: a constexpr the
    # launch left at its default (SCALE) must compile with that default, not be reported missing
    from pytest_pipecheck.resources.triton import _compile_in_fresh_process, _jit_function

    x = torch.empty(1024, dtype=torch.float32)
    y = torch.empty(1024, dtype=torch.float32)
    compiled = _compile_in_fresh_process(_jit_function(scaled_copy), "scaled_copy", [x, y, 1024], {"BLOCK": 256},
                                         "sm_90", 4, 2, {"BLOCK": 256}, "first error")
    assert compiled is not None
    assert "2.0" in compiled.asm["ttir"] or "constant 2" in compiled.asm["ttir"]
