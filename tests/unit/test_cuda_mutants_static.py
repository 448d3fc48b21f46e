"""CPU-checkable facts about the CUDA mutants and launchers: each mutant differs from its kernel in
exactly its tagged lines, the cliff mutant crosses sm_86's two-blocks-per-SM cliff but not sm_90's,
and the launchers reject bad input with a one-line reason before touching a GPU."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from pytest_pipecheck import occupancy
from reference_kernels.cuda.launch import (
    CUDA_DIR,
    KERNELS,
    CudaLaunchError,
    _leading_dim,
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
    assert len(MUTANTS) == 10
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
    assert dynamic_smem("k6_loader_compute_storer", 3) == 3 * 14848 + 128 * 68 * 4
    assert dynamic_smem("k1_sync_tiled", 1) == 0


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
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
