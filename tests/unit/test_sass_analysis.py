"""SASS findings on kernels compiled here with nvcc (tests/data/sass), no GPU needed."""

from __future__ import annotations

import pytest
from _sass_artifacts import art

# tests/conftest.py: the CPU job runs it, the GPU tier leaves it out (nvcc and the disassembler, no device)
pytestmark = pytest.mark.cpu_only


def test_sync_kernel_has_no_async_copies_and_no_overlap():
    f = art.findings("sync_gemm")
    assert f.async_copies == {}
    assert not f.overlap
    assert "no async copies" in f.overlap_reason
    assert f.mma == {} and f.fma.get("FFMA", 0) >= 16  # the unrolled 16-wide dot product
    assert f.block_barriers >= 2  # load barrier and reuse barrier
    assert f.main_loop is not None


def test_cp_async_kernel_overlaps_copy_with_hmma():
    f = art.findings("cpasync_gemm")
    assert f.async_copies.get("LDGSTS", 0) >= 2
    assert "HMMA" in f.mma and f.mma_kind == "HMMA"
    assert f.copy_commits >= 1 and f.copy_waits >= 1
    assert f.overlap and f.overlap_strict and f.overlap_mode == "same loop"
    assert any("LDGSTS" in ln for ln in f.evidence) and any("HMMA" in ln for ln in f.evidence)
    assert not f.spills and f.spills_source == "ptxas"


def test_commit_wait_swapped_shows_no_overlap():
    f = art.findings("cpasync_gemm", swap=True)
    assert f.async_copies.get("LDGSTS", 0) >= 2 and "HMMA" in f.mma  # same instructions...
    assert not f.overlap and not f.overlap_strict  # ...but every copy is drained before the MMA
    assert "waited for" in f.overlap_reason
    assert any("DEPBAR.LE SB0, 0x0" in ln for ln in f.evidence)


def test_spilling_kernel_is_flagged_with_ptxas_bytes():
    f = art.findings("spill")
    assert f.spills and f.spills_source == "ptxas"
    assert f.spill_stores and f.spill_stores > 0 and f.spill_loads and f.spill_loads > 0
    assert f.local_stores > 0 and f.local_loads > 0
    assert "spill stores" in f.summary()


def test_spills_fall_back_to_local_traffic_without_a_ptxas_log():
    from pytest_pipecheck.inspect import inspect_cubin

    cubin, _ = art.cu("spill")
    (f,) = inspect_cubin(cubin)
    assert f.spill_stores is None and f.spills and f.spills_source == "LDL/STL"
    (g,) = inspect_cubin(art.cu("cpasync_gemm")[0])
    assert not g.spills


def test_summary_line_names_counts():
    f = art.findings("cpasync_gemm")
    s = f.summary()
    assert s.startswith(f"LDGSTS x{f.async_copies['LDGSTS']}, HMMA x{f.mma['HMMA']}, overlap yes")
    assert s.endswith("0 spills")
    d = f.to_dict()
    assert d["overlap"] is True and d["mma_kind"] == "HMMA" and d["summary"] == s


def test_sm90_build_parses_and_keeps_findings():
    f = art.findings("cpasync_gemm", "sm_90a")
    assert f.arch == "sm_90a"
    assert f.overlap and "LDGSTS" in f.async_copies


def test_nvdisasm_and_cuobjdump_agree():
    from pytest_pipecheck.inspect import find_disassembler
    from pytest_pipecheck.inspect.analysis import analyze_sass
    from pytest_pipecheck.inspect.disasm import disassemble
    from pytest_pipecheck.inspect.sass import parse_sass

    cu, nv = find_disassembler(("cuobjdump",)), find_disassembler(("nvdisasm",))
    if cu is None or nv is None:
        pytest.skip("needs both cuobjdump and nvdisasm")
    cubin, log = art.cu("cpasync_gemm", swap=True)
    a = analyze_sass(parse_sass(disassemble(cubin, disassembler=cu)), log)[0]
    b = analyze_sass(parse_sass(disassemble(cubin, disassembler=nv)), log)[0]
    assert (a.async_copies, a.mma, a.main_loop, a.overlap) == (b.async_copies, b.mma, b.main_loop, b.overlap)


@pytest.mark.parametrize(
    "source, expect_copies, expect_overlap",
    [
        ("k1_sync_tiled.cu", False, False),
        ("k3_cp_async_multistage.cu", True, True),
    ],
)
def test_cuda_ladder_rungs(source, expect_copies, expect_overlap):
    from pytest_pipecheck.inspect import inspect_cubin

    path = art.REPO / "reference_kernels" / "cuda" / source
    if not path.is_file():
        pytest.skip(f"{path.name} not in reference_kernels/cuda")
    art.need_nvcc()
    art.need_disassembler()
    from pytest_pipecheck.inspect import compile_cu

    cubin, log = compile_cu(path, "sm_80")
    (f,) = inspect_cubin(cubin, ptxas_log=log)
    assert f.has_async_copies is expect_copies
    assert f.overlap is expect_overlap, f.overlap_reason
    assert "HMMA" in f.mma


def test_cuda_ladder_single_stage_is_serialized():
    from pytest_pipecheck.inspect import compile_cu, inspect_cubin

    path = art.REPO / "reference_kernels" / "cuda" / "k3_cp_async_multistage.cu"
    if not path.is_file():
        pytest.skip("k3_cp_async_multistage.cu not present")
    art.need_nvcc()
    art.need_disassembler()
    cubin, log = compile_cu(path, "sm_80", defines={"PIPECHECK_STAGES": 1})
    (f,) = inspect_cubin(cubin, ptxas_log=log)
    assert f.has_async_copies and not f.overlap
