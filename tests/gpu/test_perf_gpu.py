"""Perf timing and the gate on a real GPU (skipped with the reason without one).

Run on a GPU machine: ``python3 -m pytest tests/gpu/test_perf_gpu.py -v -p no:cacheprovider``
(about a minute, most of it Triton compiles and the ceiling measurement).

The GEMM gate test is anchored (``anchor="auto"`` picks a bf16/fp16 matmul for a kernel declared by
its FLOPs): unanchored, the gate can measure the num_stages=3 baseline at 221.5 us (the clock boosted
after idle) and its immediate rerun at 265.7 us, a +20% false alarm
(docs/validation/2026-11-22-h200-0223.md); both the kernel and the anchor see that clock, so their
ratio does not move. The default anchor mode ("per-kind") gates on that ratio for a matmul anchor, and
the saved baseline pools two runs (perf_baseline_runs); the rerun must pass and the serialized
pipeline fail.
"""

from __future__ import annotations

import dataclasses

import pytest

from pytest_pipecheck.fixture import Pipecheck
from pytest_pipecheck.results import PipecheckFailure, Verdict

# Timing tests: under a sanitizer they would time the sanitizer (check_perf and check_stage_sweep do
# not time in a sanitizer child anyway), and the kernels they time are sanitized by the correctness tests.
NO_SANITIZER = pytest.mark.pipecheck(sanitizer="none")
pytestmark = [pytest.mark.gpu, NO_SANITIZER]


@pytest.fixture(autouse=True)
def _gpu_alone(pipecheck) -> None:
    # every test here times kernels: not while other pytest-xdist workers share the GPU (the skip says so)
    pipecheck.require_gpu("perf", alone=True)


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def _add(torch, n: int):
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    z = torch.empty(n, device="cuda")
    return lambda: torch.add(x, y, out=z)


def test_measure_cold_samples(torch) -> None:
    from pytest_pipecheck.perf.timing import measure

    # settled first, as check_perf does: run after a heavy test (a stage sweep at 4096^3), the clocks still
    # moved under the first samples of an unsettled run (IQR 173 us at a 73 us median, H100)
    s = measure(_add(torch, 16 * 2**20), n_samples=40, settle_s=0.5)
    assert s.n == 40 and s.meta["mode"] == "cold" and s.meta["reps"] == 1
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    assert s.meta["flush_bytes"] >= 2 * l2
    # 192 MB moved: at least 20 us on any current GPU, and far below a millisecond on an H100
    assert 20.0 < s.median < 1000.0
    assert s.iqr < 0.2 * s.median


def test_cold_cache_is_slower_than_hot_for_data_in_l2(torch) -> None:
    from pytest_pipecheck.perf.timing import measure

    fn = _add(torch, 1 * 2**20)  # 12 MB: fits in L2, so only the flush makes it come from HBM
    cold = measure(fn, n_samples=50).median
    hot = measure(fn, n_samples=50, hot_cache=True).median
    assert cold > hot, (cold, hot)


def test_graph_and_rotation(torch) -> None:
    from pytest_pipecheck.perf.timing import measure

    calls: list[int] = []
    fns = [_add(torch, 4096) for _ in range(4)]

    def launch(i: int) -> None:
        calls.append(i)
        fns[i]()

    s = measure(launch, n_samples=20, n_inputs=4)
    assert s.meta["reps"] == 4 and set(calls) == {0, 1, 2, 3}
    g = measure(fns[0], n_samples=20, graph=True, hot_cache=True)
    assert g.meta["graph"] and g.median < 50.0  # a 48 KB add replayed from a graph: a few microseconds


def test_measure_with_anchor_interleaves(torch) -> None:
    from pytest_pipecheck.perf.timing import Anchor, measure, measure_ceilings

    s = measure(_add(torch, 16 * 2**20), n_samples=30, anchor="copy", ceilings=measure_ceilings(0), settle_s=0.1)
    assert s.anchored and s.anchor_us is not None and len(s.anchor_us) == s.n == 30
    assert s.anchor is not None and s.anchor["kind"] == "copy" and s.meta["settle_calls"] > 0
    # the copy anchor is sized to a comparable duration
    assert 0.25 < (s.anchor_median or 0) / s.median < 4.0
    m = measure(_add(torch, 16 * 2**20), n_samples=20, anchor=Anchor("matmul", "bf16", 2048, 2048, 4096))
    assert m.anchor == Anchor("matmul", "bf16", 2048, 2048, 4096).definition()
    assert 5.0 < (m.anchor_median or 0) < 1000.0


def test_ceilings_are_plausible(torch) -> None:
    from pytest_pipecheck.perf.timing import measure_ceilings

    c = measure_ceilings(0)
    # loose: any sm_80+ data-centre GPU; an H100/H200 reaches ~600-750 TFLOP/s and ~3-4 TB/s
    assert 50e12 < c.matmul_flops["fp16"] < 2.5e15
    assert 300e9 < c.copy_bytes_per_s < 10e12


def _gemm(torch, stages: int, size: int = 4096):
    pytest.importorskip("triton")
    from reference_kernels.triton.simple_gemm import gemm_kernel as kernel

    a = torch.randn(size, size, device="cuda", dtype=torch.float16)
    b = torch.randn(size, size, device="cuda", dtype=torch.float16)
    c = torch.empty(size, size, device="cuda", dtype=torch.float16)
    grid = (size // 128, size // 128)
    return lambda: kernel[grid](a, b, c, size, size, size, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                c.stride(0), c.stride(1), BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=4,
                                num_stages=stages)


def test_gate_passes_rerun_and_catches_serialized_pipeline(torch, pipecheck, tmp_path) -> None:
    def pc(save: bool) -> Pipecheck:
        cfg = dataclasses.replace(pipecheck.config, baseline_dir=str(tmp_path), baseline_save=save,
                                  checks=("perf",))
        return Pipecheck(pipecheck.nodeid, cfg, pipecheck.tier, pipecheck.run_seed)

    flops = 2.0 * 4096**3
    saved = pc(True).check_perf(_gemm(torch, 3), flops=flops, n_samples=50)
    assert saved.verdict is Verdict.PASS and "saved as the new baseline pooled from 2 runs" in saved.summary
    assert 0.1 < saved.details["roofline_fraction"] <= 1.2
    assert saved.details["anchor"]["kind"] == "matmul", saved.details["anchor"]
    assert "anchor fp16 matmul 2048x2048x" in saved.summary

    again = pc(False).check_perf(_gemm(torch, 3), flops=flops, n_samples=50)
    assert again.verdict is Verdict.PASS, again.summary
    assert again.details["anchor_compared"] is True and "fp16 matmul" in again.summary
    # per-kind: a matmul anchor, so the ratios decide, against a baseline of two pooled runs
    assert again.details["gated_on"] == "anchored" and "gated on anchored ratios" in again.summary, again.summary
    assert again.details["baseline_runs"] == 2 and "baseline of 2 runs (" in again.summary

    with pytest.raises(PipecheckFailure, match=r"perf regression .* us vs .* us baseline (of \d+ runs )?\(\+.*%.*gated on ") as info:
        pc(False).check_perf(_gemm(torch, 1), flops=flops, n_samples=50)
    details = info.value.result.details
    assert details["change"] > 0.2 and details["anchored_change"] > 0.2  # the serialized pipeline: ~+35-40%


def test_benchmark_fixture_gets_device_times(torch, pipecheck, benchmark, tmp_path) -> None:
    if benchmark.disabled:
        pytest.skip("pytest-benchmark is off in this run (it turns itself off under pytest-xdist and with "
                    "--benchmark-disable): run this test without -n")
    cfg = dataclasses.replace(pipecheck.config, baseline_dir=str(tmp_path), checks=("perf",))
    pc = Pipecheck(pipecheck.nodeid, cfg, pipecheck.tier, pipecheck.run_seed)
    r = pc.check_perf(_add(torch, 16 * 2**20), bytes=3 * 4 * 16 * 2**20, benchmark=benchmark, n_samples=30)
    assert r.verdict is Verdict.SKIP and "no baseline" in r.summary
    assert benchmark.stats.stats.rounds == 30
    assert benchmark.stats.stats.median == pytest.approx(r.details["median_us"] * 1e-6, rel=1e-6)
