"""Occupancy on a real GPU: the table against the device, AOT against the JIT, prediction against the driver."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "gpu"))


@pytest.fixture(scope="module")
def sweep():  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    import stage_sweep

    return stage_sweep


def test_arch_table_agrees_with_device() -> None:
    torch = pytest.importorskip("torch")
    from pytest_pipecheck.arch import compare_with_device

    assert compare_with_device(torch.cuda.get_device_properties(0)) == []


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_aot_equals_jit_and_prediction_equals_driver(sweep, stages: int) -> None:  # type: ignore[no-untyped-def]
    import torch
    import triton

    from pytest_pipecheck.occupancy import occupancy
    from pytest_pipecheck.resources.triton import live_resources, triton_resources

    props = torch.cuda.get_device_properties(0)
    arch = f"sm_{props.major}{props.minor}"
    n = 1024
    a = torch.randn((n, n), device="cuda", dtype=torch.float16)
    b = torch.randn((n, n), device="cuda", dtype=torch.float16)
    c = torch.empty((n, n), device="cuda", dtype=torch.float16)
    args = (a, b, c, n, n, n, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    tiles = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}
    compiled = sweep.gemm_kernel[(8, 8)](*args, num_warps=4, num_stages=stages, **tiles)
    torch.cuda.synchronize()
    live = live_resources(compiled, arch)
    aot = triton_resources(sweep.gemm_kernel, args, arch=arch, num_warps=4, num_stages=stages, **tiles)
    assert (aot.dynamic_smem, aot.registers) == (live.dynamic_smem, live.registers)
    predicted = occupancy(arch, 128, live.registers, 0, live.dynamic_smem).blocks_per_sm
    driver = sweep.live_occupancy(int(compiled.function), 128, live.dynamic_smem)
    if driver is None:
        pytest.skip("no driver occupancy API reachable (cupy or cuda-python)")
    assert predicted == driver
    torch.testing.assert_close(c.float(), (a.float() @ b.float()), atol=1e-1, rtol=1e-2)
    del triton


@pytest.mark.pipecheck(expect_failures=["occupancy"])  # the failure is the point: recorded as caught
def test_out_of_resources_becomes_the_verdict(sweep, pipecheck) -> None:  # type: ignore[no-untyped-def]
    import torch

    from pytest_pipecheck.checks.occupancy_check import launch_or_occupancy_failure
    from pytest_pipecheck.results import PipecheckFailure

    n = 512
    a = torch.randn((n, n), device="cuda", dtype=torch.float16)
    c = torch.empty((n, n), device="cuda", dtype=torch.float16)
    args = (a, a, c, n, n, n, a.stride(0), a.stride(1), a.stride(0), a.stride(1), c.stride(0), c.stride(1))
    big = {"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 128}  # far over 227 KB with 4 stages
    with pytest.raises(PipecheckFailure, match="out of"):
        launch_or_occupancy_failure(pipecheck, sweep.gemm_kernel[(2, 2)], *args, num_warps=4, num_stages=4,
                                    kernel="gemm_big", **big)
    assert pipecheck.results[-1].verdict.value == "fail"
    assert pipecheck.results[-1].details["archs"]


@pytest.mark.parametrize("kernel", ["k1_sync_tiled", "k2_register_prefetch", "k3_cp_async", "k5_warp_specialized"])
def test_cupy_live_attributes_and_the_driver_agree(kernel: str) -> None:
    """CuPy's live function attributes, read by pipecheck, predict the blocks/SM that the driver's own
    occupancy calculator gives for the loaded function; shared memory equals the compiler's, and the
    registers are within a few of what nvcc gives for the same source (CuPy compiles with NVRTC)."""
    cupy = pytest.importorskip("cupy")
    driver = pytest.importorskip("cuda.bindings.driver")
    from pytest_pipecheck.resources.cubin import compile_resources
    from pytest_pipecheck.resources.cupy import cupy_resources
    from reference_kernels.cuda.launch import (
        CUDA_DIR,
        KERNELS,
        _function,
        dynamic_smem,
        kernel_source,
        source_stages,
    )

    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        pytest.skip(f"CuPy sees no CUDA device: {exc}")
    k = KERNELS[kernel]
    fn = _function(kernel_source(k), k.entry, k.define_map, kernel)
    arch = f"sm_{cupy.cuda.Device().compute_capability}"
    smem = dynamic_smem(k, source_stages(kernel_source(k), k))
    if smem > 48 * 1024:
        fn.max_dynamic_shared_size_bytes = smem
    live = cupy_resources(fn, name=k.entry)
    assert live.origin == "cupy-live" and live.arch == arch and live.registers > 0
    err, want = driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(
        driver.CUfunction(int(getattr(fn, "kernel", fn).ptr)), k.threads, smem)
    assert int(err) == 0, err
    predicted = live.occupancy(k.threads, smem).blocks_per_sm
    assert predicted == int(want), f"pipecheck predicts {predicted} blocks/SM from {live}; the driver says {want}"
    aot = compile_resources(k.path, arch, options=("-std=c++17",), include_dirs=[str(CUDA_DIR)],
                            defines={str(n): str(v) for n, v in k.define_map.items()})[k.entry]
    assert live.static_smem == aot.static_smem and live.stack_frame == aot.stack_frame, (live, aot)
    assert abs(live.registers - aot.registers) <= 8, (live.registers, aot.registers)
    print(f"{kernel} on {arch}: {live.registers} registers live (NVRTC), {aot.registers} through {aot.origin}; "
          f"{predicted} blocks/SM at {k.threads} threads and {smem} B dynamic smem (driver: {want})")


def test_header_says_the_table_agrees_with_the_live_device(pytester: pytest.Pytester) -> None:
    """The pipecheck header line, read through the CUDA driver on a real GPU."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    pytest.importorskip("cuda.bindings.driver")
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    result = pytester.runpytest_subprocess("--pipecheck", "-p", "no:cacheprovider", "--pipecheck-sanitizer=none")
    text = result.stdout.str()
    header = [ln for ln in text.splitlines() if ln.startswith("pipecheck:")]
    print("\n".join(header))
    assert result.ret == 0, text[-3000:]
    assert any("arch table agrees with the device" in ln for ln in header), header
