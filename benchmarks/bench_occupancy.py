"""Benchmarks: the occupancy calculation (target well under 1 ms) and Triton AOT extraction (<= 2 s).

Run: python -m pytest benchmarks/bench_occupancy.py -p no:cacheprovider --benchmark-only
"""

from __future__ import annotations

import os

import pytest

from pytest_pipecheck.occupancy import occupancy


def test_bench_occupancy(benchmark) -> None:  # type: ignore[no-untyped-def]
    result = benchmark(occupancy, "sm_90", 128, 196, 0, 131072)
    assert result.blocks_per_sm == 1


def test_bench_occupancy_with_carveout(benchmark) -> None:  # type: ignore[no-untyped-def]
    result = benchmark(occupancy, "sm_86", 256, 64, 0, 50176, carveout=50)
    assert result.blocks_per_sm >= 0


def test_bench_triton_aot_cold(benchmark) -> None:  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit"))
    from test_resources_triton import TILES, _args, gemm_kernel

    from pytest_pipecheck.resources import triton as tr

    args = _args()
    counter = iter(range(10**6))

    def cold() -> int:
        # a fresh constexpr value defeats both pipecheck's and Triton's caches: a real compile each time
        tr._CACHE.clear()
        os.environ["TRITON_ALWAYS_COMPILE"] = "1"
        try:
            return tr.triton_resources(gemm_kernel, args, arch="sm_90", num_warps=4,
                                       num_stages=3 + next(counter) % 2, **TILES).dynamic_smem
        finally:
            os.environ.pop("TRITON_ALWAYS_COMPILE", None)

    shared = benchmark.pedantic(cold, rounds=4, iterations=1)
    assert shared in (98304, 131072)
    del torch


def test_bench_triton_aot_cached(benchmark) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("triton")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit"))
    from test_resources_triton import TILES, _args, gemm_kernel

    from pytest_pipecheck.resources.triton import triton_resources

    args = _args()
    triton_resources(gemm_kernel, args, arch="sm_90", num_warps=4, num_stages=3, **TILES)
    res = benchmark(triton_resources, gemm_kernel, args, arch="sm_90", num_warps=4, num_stages=3, **TILES)
    assert res.dynamic_smem == 98304
