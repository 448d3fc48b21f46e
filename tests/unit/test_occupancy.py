"""The occupancy calculation: results of NVIDIA's cuda_occupancy.h, the cliffs, and bad input."""

from __future__ import annotations

import random
import time

import pytest

import pytest_pipecheck
from pytest_pipecheck.occupancy import Occupancy, OccupancyInputError, format_bytes, occupancy
from pytest_pipecheck.results import PipecheckError

# what the CUDA toolkit's cuda_occupancy.h computes for these inputs (tests/unit/test_occupancy_oracle.py
# compiles the header and compares many more where a toolkit is installed)
# (cc, threads, regs, static, dynamic, opt_in, blocks/SM, limited by)
FACTS = [
    ("8.6", 256, 64, 0, 51200, True, 1, {"shared_memory"}),
    ("8.6", 256, 64, 0, 50176, True, 2, {"shared_memory"}),
    ("8.6", 256, 64, 0, 50177, True, 1, {"shared_memory"}),
    ("8.6", 256, 64, 0, 51200, False, 0, {"shared_memory"}),
    ("8.0", 256, 96, 49152, 0, True, 2, {"registers"}),
    ("8.0", 128, 32, 0, 82944, True, 2, {"shared_memory"}),
    ("8.0", 128, 32, 0, 82945, True, 1, {"shared_memory"}),
    ("9.0", 128, 168, 0, 115712, True, 2, {"shared_memory"}),
    ("9.0", 128, 168, 0, 115713, True, 1, {"shared_memory"}),
    ("9.0", 1024, 64, 0, 0, True, 1, {"registers"}),
    ("9.0", 1024, 65, 0, 0, True, 0, {"registers"}),
    ("12.0", 128, 128, 0, 50177, True, 1, {"shared_memory"}),
    ("8.9", 256, 32, 0, 0, True, 6, {"warps"}),
    ("7.5", 128, 32, 0, 32768, True, 2, {"shared_memory"}),
]


@pytest.mark.parametrize(("cc", "threads", "regs", "static", "dynamic", "opt_in", "blocks", "limiters"), FACTS)
def test_facts_rows(cc: str, threads: int, regs: int, static: int, dynamic: int, opt_in: bool, blocks: int,
                    limiters: set[str]) -> None:
    occ = occupancy(cc, threads, regs, static, dynamic, opt_in=opt_in)
    assert occ.blocks_per_sm == blocks
    assert set(occ.limiters) == limiters
    assert occ.launchable is (blocks > 0)


def test_public_entry_point_is_callable_in_any_import_order() -> None:
    # the submodule is imported by now, so the package attribute may be the module itself
    result = pytest_pipecheck.occupancy("sm_90", 128, 168, 0, 115713)
    assert isinstance(result, Occupancy)
    assert result == occupancy("sm_90", 128, 168, 0, 115713)
    assert result.blocks_per_sm == 1


def test_stage_sweep_of_facts_section_4() -> None:
    # Triton fp16 GEMM 128x128x64, 4 warps, on sm_90: shared bytes and registers per stage count
    sweep = {1: (32768, 246, 2, {"registers"}), 2: (65536, 192, 2, {"registers"}),
             3: (98304, 196, 2, {"registers", "shared_memory"}), 4: (131072, 196, 1, {"shared_memory"}),
             5: (163840, 196, 1, {"shared_memory"})}
    for stages, (smem, regs, blocks, lim) in sweep.items():
        occ = occupancy("sm_90", 128, regs, 0, smem)
        assert (occ.blocks_per_sm, set(occ.limiters)) == (blocks, lim), stages
    occ4 = occupancy("sm_90", 128, 196, 0, 131072)
    assert occ4.cliff_text(2) == "needs <= 113 KB for 2 blocks/SM on sm_90; uses 128 KB"
    assert occ4.max_smem_for_blocks(2) == 115712
    # stages=2: smem alone would allow 3, registers hold it at 2
    occ2 = occupancy("sm_90", 128, 192, 0, 65536)
    assert occ2.limits["shared_memory"] == 3 and occ2.limits["registers"] == 2


def test_allocated_shared_memory_and_occupancy_fraction() -> None:
    occ = occupancy("sm_86", 96, 40, 1000, 1)
    assert occ.smem_per_block_allocated == 2048  # 1000 + 1 + 1024 reserved = 2025, rounded up to 128
    assert occ.warps_per_block == 3
    assert occ.occupancy == pytest.approx(occ.blocks_per_sm * 3 / 48)
    # sm_70 has no reservation and 256-byte granules; no shared memory sets no limit at all
    occ70 = occupancy("sm_70", 64, 0, 0, 0)
    assert occ70.smem_per_block_allocated == 0
    assert occ70.limits["shared_memory"] is None and occ70.limits["registers"] is None
    assert occ70.blocks_per_sm == 32 and occ70.limiters == frozenset({"blocks", "warps"})


def _blocks_at(occ: Occupancy, total: int) -> int:
    return occupancy(occ.arch, occ.threads_per_block, occ.registers_per_thread, 0, total,
                     opt_in=occ.opt_in, carveout=occ.carveout, barriers=occ.barriers).blocks_per_sm


@pytest.mark.parametrize("arch", ["sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_120"])
def test_cliffs_are_exact_thresholds(arch: str) -> None:
    rng = random.Random(arch)
    for _ in range(40):
        threads = rng.choice([64, 128, 256, 512])
        regs = rng.choice([32, 64, 96, 128])
        dyn = rng.randint(0, 120_000)
        carve = rng.choice([None, None, 50, 0, 100])
        occ = occupancy(arch, threads, regs, 0, dyn, carveout=carve, opt_in=rng.random() < 0.8)
        if occ.smem_up is not None:
            assert _blocks_at(occ, occ.smem_up) >= occ.blocks_per_sm + 1
            assert _blocks_at(occ, occ.smem_up + 1) < occ.blocks_per_sm + 1
        else:
            assert _blocks_at(occ, 0) <= occ.blocks_per_sm
        if occ.smem_down is not None:
            assert _blocks_at(occ, occ.smem_down) < occ.blocks_per_sm
            assert _blocks_at(occ, occ.smem_down - 1) >= occ.blocks_per_sm
            assert occ.smem_down > occ.smem
        else:
            assert occ.blocks_per_sm == 0


def test_cliff_text_when_another_resource_blocks() -> None:
    occ = occupancy("sm_90", 1024, 64, 0, 0)
    text = occ.cliff_text(2)
    assert text.startswith("cannot reach 2 blocks/SM on sm_90")
    assert "registers allow 1" in text and "needs <= 32 registers/thread, uses 64" in text
    # and 32 registers really does give 2 blocks
    assert occupancy("sm_90", 1024, 32).blocks_per_sm == 2


def test_format_bytes() -> None:
    assert format_bytes(115712) == "113 KB"
    assert format_bytes(50177) == "49 KB + 1 B"
    assert format_bytes(100) == "100 B"


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"threads_per_block": 1025}, "threads_per_block=1025 must be <= 1024"),
        ({"threads_per_block": 0}, "threads_per_block=0 must be >= 1"),
        ({"registers_per_thread": 256}, "registers_per_thread=256 must be <= 255"),
        ({"registers_per_thread": -1}, "registers_per_thread=-1 must be >= 0"),
        ({"dynamic_smem": -5}, "dynamic_smem=-5 must be >= 0"),
        ({"static_smem": 2**40}, "static_smem=1099511627776 must be <= 16777216"),
        ({"threads_per_block": 12.5}, "threads_per_block=12.5 must be an integer"),
        ({"barriers": 17}, "barriers=17 must be <= 16"),
        ({"carveout": 101}, "carveout=101 must be <= 100"),
        ({"arch": "sm_91"}, "'sm_91' is not a known architecture"),
    ],
)
def test_bad_input_is_one_clear_line(kwargs: dict[str, object], needle: str) -> None:
    args: dict[str, object] = {"arch": "sm_90", "threads_per_block": 128, "registers_per_thread": 32}
    args.update(kwargs)
    with pytest.raises(OccupancyInputError) as info:
        occupancy(**args)  # type: ignore[arg-type]
    assert isinstance(info.value, PipecheckError)
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


def test_json_round_trip_fields() -> None:
    data = occupancy("sm_80", 256, 96, 49152).to_json()
    assert data["blocks_per_sm"] == 2 and data["limiters"] == ["registers"]
    assert data["limits"]["shared_memory"] == 3


def test_well_under_a_millisecond() -> None:
    n = 300
    start = time.perf_counter()
    for i in range(n):
        occupancy("sm_90", 128 + (i % 4) * 32, 64 + i % 100, 0, 1000 * i)
    per_call = (time.perf_counter() - start) / n
    # generous for a loaded 2-core CI machine; the benchmark measures ~25 us
    assert per_call < 1e-3, f"{per_call * 1e6:.0f} us per call"
