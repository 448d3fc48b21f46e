"""CPU-checkable facts about the CUDA mutants and launchers: each mutant differs from its kernel in
exactly its tagged lines, the cliff mutant crosses sm_86's two-blocks-per-SM cliff but not sm_90's,
and the launchers reject bad input with a one-line reason before touching a GPU."""

from __future__ import annotations

import numpy as np
import pytest

from pytest_pipecheck import occupancy, toolkit
from reference_kernels.cuda.launch import (
    CUDA_DIR,
    KERNELS,
    CudaLaunchError,
    _launch_defines,
    _leading_dim,
    check_shared_memory,
    dynamic_smem,
    gemm,
    kernel_source,
    source_stages,
)
from reference_kernels.mutants.cuda import CHECKS, MUTANTS, MutantError, apply_edits, mutant, tagged_lines


@pytest.mark.parametrize("name", list(MUTANTS))
def test_mutant_differs_only_in_tagged_lines(name: str) -> None:
    m = MUTANTS[name]
    base = kernel_source(m.base).splitlines()
    mutated = m.source().splitlines()
    assert len(base) == len(mutated)
    changed = {i for i, (x, y) in enumerate(zip(base, mutated)) if x != y}
    tags = tagged_lines("\n".join(base))
    expected = {tags[t] for t in m.edits}
    entry_line = next(i for i, line in enumerate(base) if m.kernel.entry + "(" in line)
    assert changed == expected | {entry_line}
    assert m.entry in mutated[entry_line]
    assert m.check in CHECKS and m.expect and m.bug


def test_every_mutant_named_in_the_issue_is_declared() -> None:
    checks = {m.check for m in MUTANTS.values()}
    # the fourteen bugs of the CUDA mutants' issue, and the A-rows bug judged under the GPU tier's defaults
    assert set(MUTANTS) == {
        "a_rows_unguarded",
        "consumer_skips_wait",
        "divergent_barrier",
        "epilogue_skipped",
        "epilogue_wrong_buffer",
        "missing_sync_after_wait",
        "missing_wait_prior",
        "pipeline_wait_half_warp_barrier",
        "serialized_wait_after_commit",
        "stage_cliff_sm86",
        "stages_exceed_buffers",
        "unguarded_tail",
        "ws_producer_skips_acquire",
        "ws_release_before_read",
        "ws_storer_skips_full_wait",
    }
    # "coverage" is covered by the tile_probe mutants (the probe is the sharper coverage check)
    assert checks == set(CHECKS) - {"coverage"}, f"checks never exercised: {set(CHECKS) - checks}"


def test_apply_edits_rejects_unknown_tag() -> None:
    with pytest.raises(MutantError, match="pipecheck:nope"):
        apply_edits(kernel_source("k3_cp_async"), {"nope": ""}, name="x")
    with pytest.raises(MutantError, match="unknown CUDA mutant"):
        mutant("no_such_bug")


def test_stage_counts_from_source() -> None:
    assert source_stages(kernel_source("k3_cp_async"), KERNELS["k3_cp_async"]) == 2
    assert source_stages(MUTANTS["stage_cliff_sm86"].source(), KERNELS["k3_cp_async"]) == 3
    assert dynamic_smem("k3_cp_async", 2) == 37888
    assert dynamic_smem("k3_cp_async", 3) == 56832
    assert dynamic_smem("k6_loader_compute_storer", 3) == 3 * 29184 + 256 * 68 * 4 == 157184
    assert dynamic_smem("k1_sync_tiled", 1) == 0
    # the wide k3 build shares k3's file, whose first #define says 2: its own default (4) wins
    wide = KERNELS["k3_cp_async_wide"]
    assert source_stages(kernel_source(wide), wide) == 4
    assert dynamic_smem(wide, 4) == 4 * 27136 == 108544
    assert dynamic_smem(wide, 3) == 81408


def test_wide_k3_is_k3_built_with_a_define() -> None:
    k3, wide = KERNELS["k3_cp_async"], KERNELS["k3_cp_async_wide"]
    assert (wide.file, wide.entry) == (k3.file, k3.entry)
    assert wide.define_map == {"PIPECHECK_K3_WIDE": 1, "PIPECHECK_XTILE": 1, "PIPECHECK_XTILE_SPLIT": 1}
    assert not k3.defines
    assert (wide.threads, wide.bm, wide.bn, wide.min_stages, wide.max_stages) == (256, 128, 256, 2, 6)
    src = kernel_source(k3)
    defs, stages = _launch_defines(wide, src, None, None, "w")
    assert defs == {**wide.define_map, "PIPECHECK_STAGES": 4} and stages == 4
    defs, stages = _launch_defines(wide, src, 2, {"PIPECHECK_LOAD_ONLY": 1}, "w")
    assert defs == {**wide.define_map, "PIPECHECK_STAGES": 2, "PIPECHECK_LOAD_ONLY": 1} and stages == 2
    with pytest.raises(CudaLaunchError, match=r"takes 2\.\.6"):
        _launch_defines(wide, src, 1, None, "w")
    # the default build is launched exactly as before: no -D, the source's own stage count
    assert _launch_defines(k3, src, None, None, "k") == ({}, 2)


def test_k6_geometry_and_hand_off() -> None:
    k6 = KERNELS["k6_loader_compute_storer"]
    assert (k6.threads, k6.bm, k6.bn, k6.persistent, k6.blocks_per_sm) == (320, 256, 128, True, 1)
    code = "\n".join(line.split("//", 1)[0] for line in kernel_source(k6).splitlines())
    # no bar.arrive: racecheck reports a bar.arrive hand-off as 20 WAR hazards (the C hand-off uses
    # cuda::barrier, see the kernel's header); the pipeline's members meet at a named bar.sync
    assert "bar.arrive" not in code and "bar.sync" in code
    assert "__launch_bounds__(THREADS, 1)" in code


@pytest.mark.parametrize(("name", "stages", "arch", "limit", "fits"), [
    ("k6_loader_compute_storer", 3, "sm_90", 227 * 1024, True),
    ("k6_loader_compute_storer", 3, "sm_80", 163 * 1024, True),
    ("k6_loader_compute_storer", 4, "sm_80", 163 * 1024, False),
    ("k6_loader_compute_storer", 3, "sm_86", 99 * 1024, False),
    ("k6_loader_compute_storer", 2, "sm_89", 99 * 1024, False),
    ("k3_cp_async_wide", 4, "sm_86", 99 * 1024, False),
    ("k3_cp_async_wide", 3, "sm_86", 99 * 1024, True),
    ("k3_cp_async", 4, "sm_86", 99 * 1024, True),
])
def test_shared_memory_check(name: str, stages: int, arch: str, limit: int, fits: bool) -> None:
    static = 64 if name.startswith("k6") else 0
    need = dynamic_smem(name, stages) + static
    if fits:
        assert check_shared_memory(name, stages, static, limit, arch) == need
        return
    with pytest.raises(CudaLaunchError) as info:
        check_shared_memory(name, stages, static, limit, arch)
    msg = str(info.value)
    assert msg.startswith(f"{name}: needs {need} bytes") and f"limit of {limit} bytes" in msg and arch in msg
    if name == "k3_cp_async_wide":
        assert "stages=3 fits" in msg


@pytest.mark.skipif(toolkit.find_tool("nvcc") is None, reason=f"nvcc not found ({toolkit.NOT_FOUND_HINT})")
def test_cliff_mutant_halves_blocks_on_sm86_not_sm90() -> None:
    from pytest_pipecheck.resources.cubin import compile_resources

    m = MUTANTS["stage_cliff_sm86"]
    k = m.kernel
    blocks = {}
    for label, src, entry in (("base", kernel_source(k), k.entry), ("mutant", m.source(), m.entry)):
        stages = source_stages(src, k)
        for arch in ("sm_86", "sm_90"):
            r = compile_resources(src, arch, options=("-std=c++17",), include_dirs=(str(CUDA_DIR),))[entry]
            blocks[label, arch] = occupancy(arch, k.threads, r.registers, r.static_smem,
                                            dynamic_smem(k, stages)).blocks_per_sm
    assert blocks["base", "sm_86"] == 2 and blocks["mutant", "sm_86"] == 1, blocks
    assert blocks["base", "sm_90"] == blocks["mutant", "sm_90"] == 2, blocks


def test_leading_dim_validation() -> None:
    a = np.zeros((4, 16), dtype=np.float16)
    assert _leading_dim("A", a, "float16", "k") == 16
    padded = np.zeros((4, 24), dtype=np.float16)[:, :16]
    assert _leading_dim("A", padded, "float16", "k") == 24
    with pytest.raises(CudaLaunchError, match="must be float16"):
        _leading_dim("A", a.astype(np.float32), "float16", "k")
    with pytest.raises(CudaLaunchError, match="unit column stride"):
        _leading_dim("A", np.zeros((16, 4), dtype=np.float16).T, "float16", "k")
    with pytest.raises(CudaLaunchError, match="2-D"):
        _leading_dim("A", np.zeros(4, dtype=np.float16), "float16", "k")


def test_launcher_rejects_bad_kernel_and_stages() -> None:
    a = np.zeros((4, 4), dtype=np.float16)
    with pytest.raises(CudaLaunchError, match="unknown CUDA ladder kernel"):
        gemm("k9", a, a, a)
    with pytest.raises(CudaLaunchError, match=r"stages=5 is not supported; this kernel takes 1\.\.4"):
        gemm("k3_cp_async", a, a, a, stages=5)
    with pytest.raises(CudaLaunchError, match=r"takes 2\.\.2"):
        gemm("k2_register_prefetch", a, a, a, stages=3)
