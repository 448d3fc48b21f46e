"""The stage sweep on a real GPU: the reference Triton GEMM at 4096^3 fp16, num_stages 1 to 5.

Run on a GPU machine: ``python3 -m pytest tests/gpu/test_stage_sweep_gpu.py -v -p no:cacheprovider``
(about 20 s: five Triton compiles, then 60 cold samples per stage count after warm-up and settle).

The kernel is ``reference_kernels/triton/gemm.py``'s ``gemm_kernel``, launched here directly with
explicit tiles (BLOCK 128x128x64, GROUP_M 8, 4 warps), not through its launcher, so the sweep pins
exactly the configuration it measures. Expected on sm_90 (H100/H200, Triton 3.6; docs/validation/
2026-11-22-h200-0223/stage_sweep.md): 3 stages fastest or within a few percent of the fastest, 1 stage
(no pipelining) about 30-45% slower, and 2 blocks/SM for 1 to 3 stages against 1 for 4 and 5 (the
shared-memory cliff: 128 KB and 160 KB of stage buffers per block).
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_pipecheck.results import PipecheckFailure, Verdict

pytestmark = pytest.mark.gpu
# Timing tests: under a sanitizer they would time the sanitizer (check_perf and check_stage_sweep do
# not time in a sanitizer child anyway), and the kernels they time are sanitized by the correctness tests.
NO_SANITIZER = pytest.mark.pipecheck(sanitizer="none")

SIZE = 4096
TILES = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}
WARPS = 4
STAGES = (1, 2, 3, 4, 5)
CHOSEN = 3  # reference_kernels/triton/gemm.py GPU_CONFIG
FLOPS = 2.0 * SIZE**3
TIMING = {"n_samples": 60}


class Gemm:
    """``run(stages)`` launches the GEMM once; ``resources(stages)`` reads that launch's compiled kernel."""

    def __init__(self, torch: Any) -> None:
        import triton

        from reference_kernels.triton.gemm import gemm_kernel

        self.torch = torch
        self.kernel = gemm_kernel
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        self.arch = f"sm_{props.major}{props.minor}"
        gen = torch.Generator(device="cuda").manual_seed(0)
        self.a = torch.randn(SIZE, SIZE, device="cuda", dtype=torch.float16, generator=gen)
        self.b = torch.randn(SIZE, SIZE, device="cuda", dtype=torch.float16, generator=gen)
        self.c = torch.empty(SIZE, SIZE, device="cuda", dtype=torch.float16)
        self.grid = (triton.cdiv(SIZE, TILES["BLOCK_M"]) * triton.cdiv(SIZE, TILES["BLOCK_N"]),)
        self.compiled: dict[int, Any] = {}

    def run(self, stages: int) -> None:
        a, b, c = self.a, self.b, self.c
        self.compiled[stages] = self.kernel[self.grid](
            a, b, c, SIZE, SIZE, SIZE, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
            num_stages=stages, num_warps=WARPS, **TILES)

    def resources(self, stages: int) -> Any:
        from pytest_pipecheck.resources.triton import live_resources

        # metadata.shared and n_regs of the kernel the JIT built and loaded for this stage count
        return live_resources(self.compiled[stages], self.arch)


@pytest.fixture(scope="module")
def gemm() -> Gemm:
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: torch.cuda.is_available() is False")
    return Gemm(torch)


def _rows(result: Any) -> dict[int, dict[str, Any]]:
    return {row["stages"]: row for row in result.details["stage_sweep"]}


@NO_SANITIZER
def test_triton_gemm_stage_sweep(pipecheck: Any, gemm: Gemm) -> None:
    from pytest_pipecheck.checks.stage_sweep import sweep_table

    r = pipecheck.check_stage_sweep(gemm.run, STAGES, chosen=CHOSEN, max_loss=0.10, kernel="triton_gemm_float16",
                                    flops=FLOPS, resources=gemm.resources, arch=gemm.arch, **TIMING)
    if r.verdict is Verdict.SKIP:
        pytest.skip(r.summary)
    rows = _rows(r)
    table = sweep_table(list(rows.values()), CHOSEN, r.details["best_stages"])
    assert r.verdict is Verdict.PASS, table
    assert r.summary.startswith(f"best {r.details['best_stages']} stages (") and f"chosen {CHOSEN}" in r.summary
    assert r.details["loss"] is not None and 0.0 <= r.details["loss"] <= 0.10, table

    # every stage count either ran or says why it does not fit; the chosen one ran
    for s in STAGES:
        row = rows[s]
        if row["measured_us"] is None:
            assert row["note"].startswith("does not fit: "), table
            continue
        assert row["q1_us"] <= row["measured_us"] <= row["q3_us"], table
        assert row["q3_us"] - row["q1_us"] < 0.1 * row["measured_us"], table  # cold samples, steady clock
        assert 50.0 < row["tflops"] < 2500.0, table
        assert row["blocks_per_sm"] is not None and row["blocks_per_sm"] >= 1, table
        assert row["smem_bytes"] >= gemm.compiled[s].metadata.shared, table
    assert rows[CHOSEN]["measured_us"] is not None

    # without pipelining (1 stage) the GEMM is clearly slower than the best depth
    best_us = rows[r.details["best_stages"]]["measured_us"]
    assert rows[1]["measured_us"] > 1.15 * best_us, table

    if gemm.arch == "sm_90":
        # 228 KB per SM: 1 to 5 stages all fit, and 4 stages (128 KB per block) cross the 2-blocks cliff
        assert all(rows[s]["measured_us"] is not None for s in STAGES), table
        assert [rows[s]["blocks_per_sm"] for s in (4, 5)] == [1, 1], table
        assert all(rows[s]["blocks_per_sm"] >= 2 for s in (1, 2, 3)), table
        assert rows[4]["limiter"] == "shared_memory", table

    # the timed launches computed the product
    gemm.run(CHOSEN)
    gemm.torch.cuda.synchronize()
    expected = gemm.a.float() @ gemm.b.float()
    gemm.torch.testing.assert_close(gemm.c.float(), expected, atol=0.5, rtol=2e-2)


@NO_SANITIZER
def test_unpipelined_choice_is_caught(pipecheck: Any, gemm: Gemm) -> None:
    # the same sweep with the serialized pipeline as the configured choice: the check must fail it
    with pipecheck.expecting_failures(), pytest.raises(PipecheckFailure) as info:
        r = pipecheck.check_stage_sweep(gemm.run, (1, CHOSEN), chosen=1, max_loss=0.10, kernel="triton_gemm_float16",
                                        flops=FLOPS, **TIMING)
        if r.verdict is Verdict.SKIP:
            pytest.skip(r.summary)
    msg = str(info.value)
    assert "stages=1 is " in msg and f"slower than stages={CHOSEN} (the best): " in msg, msg
    result = info.value.result
    assert result is not None and result.expected and result.details["loss"] > 0.15, msg
