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
