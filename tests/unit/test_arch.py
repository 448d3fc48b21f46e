"""The architecture table against NVIDIA's published limits, name parsing, and the live-device comparison."""

from __future__ import annotations

import re

import pytest

from pytest_pipecheck.arch import (
    ARCHS,
    ArchError,
    arch_spec,
    compare_with_device,
    known_archs,
    parse_arch_list,
)
from pytest_pipecheck.results import PipecheckError

# NVIDIA's limits per compute capability (CUDA C++ Programming Guide, technical specifications, and the
# toolkit's cuda_occupancy.h), row by row: smem/SM, max/block opt-in, reserved/block, granularity,
# max warps/SM, max blocks/SM, carveouts (KB)
FACTS_ROWS = {
    "7.0": (98304, 98304, 0, 256, 64, 32, (0, 8, 16, 32, 64, 96)),
    "7.5": (65536, 65536, 0, 256, 32, 16, (32, 64)),
    "8.0": (167936, 166912, 1024, 128, 64, 32, (0, 8, 16, 32, 64, 100, 132, 164)),
    "8.7": (167936, 166912, 1024, 128, 48, 16, (0, 8, 16, 32, 64, 100, 132, 164)),
    "8.6": (102400, 101376, 1024, 128, 48, 16, (0, 8, 16, 32, 64, 100)),
    "8.9": (102400, 101376, 1024, 128, 48, 24, (0, 8, 16, 32, 64, 100)),
    "9.0": (233472, 232448, 1024, 128, 64, 32, (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)),
    "10.0": (233472, 232448, 1024, 128, 64, 32, (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)),
    "10.3": (233472, 232448, 1024, 128, 64, 32, (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)),
    "11.0": (233472, 232448, 1024, 128, 48, 24, (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)),
    "12.0": (102400, 101376, 1024, 128, 48, 24, (0, 8, 16, 32, 64, 100)),
    "12.1": (102400, 101376, 1024, 128, 48, 24, (0, 8, 16, 32, 64, 100)),
}


def test_table_has_exactly_the_twelve_archs() -> None:
    assert sorted(ARCHS, key=lambda a: ARCHS[a].major * 10 + ARCHS[a].minor) == list(known_archs())
    assert {s.cc for s in ARCHS.values()} == set(FACTS_ROWS)


@pytest.mark.parametrize("cc", list(FACTS_ROWS))
def test_table_rows_equal_facts(cc: str) -> None:
    spec = arch_spec(cc)
    row = (spec.smem_per_sm, spec.smem_per_block_optin, spec.smem_reserved_per_block,
           spec.smem_alloc_granularity, spec.max_warps_per_sm, spec.max_blocks_per_sm, spec.carveouts_kb)
    assert row == FACTS_ROWS[cc]
    # registers: 65536 per SM and per block, at most 255 per thread, 256 per warp granule, 4 partitions
    assert (spec.registers_per_sm, spec.registers_per_block, spec.max_registers_per_thread,
            spec.register_alloc_granularity, spec.sub_partitions) == (65536, 65536, 255, 256, 4)
    assert spec.smem_per_block == 49152
    # the SM's shared memory is itself one of its carveouts
    assert spec.smem_per_sm in [kb * 1024 for kb in spec.carveouts_kb]


@pytest.mark.parametrize("name", ["sm_90", "sm_90a", "9.0", "90", "compute_90", " SM_90 "])
def test_names_resolve_to_one_row(name: str) -> None:
    assert arch_spec(name) is ARCHS["sm_90"]


@pytest.mark.parametrize("name", ["sm_91", "sm_60", "hopper", "", "9.x", "sm_1000"])
def test_unknown_names_are_clear_errors(name: str) -> None:
    with pytest.raises(ArchError) as info:
        arch_spec(name)
    assert isinstance(info.value, PipecheckError)
    assert repr(name.strip()) in str(info.value) or repr(name) in str(info.value)
    assert "\n" not in str(info.value)


def test_compare_with_device_cupy_style_dict_agrees_and_disagrees() -> None:
    # what cupy.cuda.runtime.getDeviceProperties returns on an H100 (subset)
    h100 = {"major": 9, "minor": 0, "warpSize": 32, "maxThreadsPerBlock": 1024,
            "maxThreadsPerMultiProcessor": 2048, "maxBlocksPerMultiProcessor": 32,
            "regsPerMultiprocessor": 65536, "regsPerBlock": 65536, "sharedMemPerMultiprocessor": 233472,
            "sharedMemPerBlock": 49152, "sharedMemPerBlockOptin": 232448, "reservedSharedMemPerBlock": 1024,
            "multiProcessorCount": 132, "name": b"NVIDIA H100"}
    assert compare_with_device(h100) == []
    changed = dict(h100, sharedMemPerBlockOptin=227 * 1024 - 128)
    diffs = compare_with_device(changed)
    assert diffs == ["sm_90 smem_per_block_optin: table 232448, device 232320"]


def test_compare_with_device_torch_style_object() -> None:
    class Props:  # the attribute names of torch.cuda.get_device_properties()
        major, minor = 8, 6
        warp_size = 32
        max_threads_per_multi_processor = 1536
        shared_memory_per_block_optin = 101376
        shared_memory_per_multiprocessor = 102400
        regs_per_multiprocessor = 65536
        multi_processor_count = 84

    assert compare_with_device(Props()) == []
    Props.max_threads_per_multi_processor = 2048
    assert compare_with_device(Props()) == ["sm_86 max_threads_per_sm: table 1536, device 2048"]
    # an explicit arch compares against that row instead of the device's own
    assert "sm_90 max_threads_per_sm: table 2048, device 2048" not in compare_with_device(Props(), "sm_90")
    assert any("smem_per_sm" in d for d in compare_with_device(Props(), "sm_90"))


def test_compare_with_device_without_cc_is_an_error() -> None:
    with pytest.raises(ArchError, match="major/minor"):
        compare_with_device({"warpSize": 32})


# ----------------------------------------------------------------------------- the one arch-list parser


@pytest.mark.parametrize(("raw", "expected"), [
    ("sm_80,86 9.0", ("sm_80", "sm_86", "sm_90")),  # commas and white space, every spelling
    (" sm_90a , sm_90 ", ("sm_90a", "sm_90")),  # the suffix names another target
    (["sm_80,sm_86", "compute_89", "sm_80"], ("sm_80", "sm_86", "sm_89")),  # items may hold lists; once each
])
def test_parse_arch_list(raw: object, expected: tuple[str, ...]) -> None:
    assert parse_arch_list(raw) == expected  # type: ignore[arg-type]


def test_parse_arch_list_base_drops_the_suffix_and_duplicates() -> None:
    assert parse_arch_list("sm_90a,sm_90,sm_100f", base=True) == ("sm_90", "sm_100")


@pytest.mark.parametrize(("raw", "message"), [
    ("", "--arch: names no architecture"),
    (" , ", "--arch: names no architecture"),
    ([], "--arch: names no architecture"),
    ("sm_80,hopper", "--arch: 'hopper' is not an architecture name"),
    ("sm_91", "--arch: 'sm_91' is not a known architecture"),
    (["sm_80", 90], "--arch: 90 is not an architecture name"),
])
def test_parse_arch_list_errors_name_where_the_list_came_from(raw: object, message: str) -> None:
    with pytest.raises(ArchError, match=re.escape(message)):
        parse_arch_list(raw, where="--arch")  # type: ignore[arg-type]


def test_every_caller_parses_the_same_way() -> None:
    """The ini/CLI setting, check_occupancy, check_sass and both CLIs accept the same spellings."""
    from types import SimpleNamespace

    from pytest_pipecheck.checks.inspect_check import _archs
    from pytest_pipecheck.checks.occupancy_check import _arch_list
    from pytest_pipecheck.cli.occupancy import parse_arch_list as cli_parse
    from pytest_pipecheck.config import SETTINGS

    setting = next(s for s in SETTINGS if s.name == "arch")
    pc = SimpleNamespace(config=SimpleNamespace(arch=("sm_80",)))
    raw = "sm_80 86,sm_90a"
    assert setting.parse(raw) == tuple(_archs(raw, pc)) == ("sm_80", "sm_86", "sm_90a")  # type: ignore[arg-type]
    assert tuple(_arch_list(raw, pc)) == tuple(cli_parse(raw)) == ("sm_80", "sm_86", "sm_90")  # type: ignore[arg-type]
    assert _archs(None, pc) == ["sm_80"]  # type: ignore[arg-type]
    with pytest.raises(ArchError, match=r"check_sass\(arch=\.\.\.\): 'x' is not an architecture name"):
        _archs("sm_80,x", pc)  # type: ignore[arg-type]
