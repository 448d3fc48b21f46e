"""Triton IR findings on GEMMs AOT-compiled here (no GPU): did the pipeliner fire, and why not."""

from __future__ import annotations

import pytest
from _sass_artifacts import art

from pytest_pipecheck.inspect.triton_ir import analyze_triton
from pytest_pipecheck.results import PipecheckError


def test_divisible_strides_pipeline_with_cp_async():
    k = art.triton_matmul("sm_80", 3)
    f = analyze_triton(k)
    assert f.pipelined, f.pipeline_reason
    assert f.async_copies > 0 and f.loop_loads == 0
    assert f.stages_built >= 2
    assert f.shared is not None and f.shared > 32768  # multi-buffered: above the 32768 B of one stage of A and B tiles


def test_odd_strides_are_not_pipelined_and_the_reason_names_the_arguments():
    f = analyze_triton(art.triton_matmul("sm_80", 3, odd=True))
    assert not f.pipelined
    assert f.loop_loads >= 2 and f.async_copies == 0 and f.buffers == []
    assert "tt.divisibility" in f.pipeline_reason
    assert "stride_am" in f.missing_divisibility and "stride_am" in f.pipeline_reason
    assert f.shared == 32768


def test_num_stages_1_is_not_pipelined():
    f = analyze_triton(art.triton_matmul("sm_80", 1))
    assert not f.pipelined
    assert f.pipeline_reason.startswith("num_stages=1")


def test_sm90_pointer_gemm_pipelines_three_deep():
    f = analyze_triton(art.triton_matmul("sm_90", 3))
    assert f.pipelined and f.stages_built == 3
    assert f.mma_ops.get("ttng.warp_group_dot", 0) >= 1


def test_tma_gemm_pipelines_with_tma_loads():
    f = analyze_triton(art.triton_tma(False))
    assert f.pipelined and f.tma_loads > 0
    assert not f.warp_specialize_requested and not f.warp_specialized


def test_warp_specialize_is_reported():
    f = analyze_triton(art.triton_tma(True))
    assert f.warp_specialize_requested
    # Triton 3.9 partitions this loop on sm_90; whichever way it goes, the reason must say so.
    if f.warp_specialized:
        assert f.partitions >= 2 and "warp-specialized" in f.summary()
    else:
        assert "no ttg.warp_specialize" in f.warp_specialize_reason


def test_hopper_sass_has_tma_and_hgmma():
    from pytest_pipecheck.inspect import inspect_cubin

    art.need_disassembler()
    (f,) = inspect_cubin(art.triton_tma(False).asm["cubin"])
    assert f.async_copies.get("UTMALDG", 0) > 0
    assert f.mma.get("HGMMA", 0) > 0 and f.mma_kind == "HGMMA"
    assert f.async_stores.get("UTMASTG", 0) > 0
    assert f.overlap  # BAR.SYNC between TMA and HGMMA does not wait for the TMA


def test_triton_sm80_sass_overlaps():
    from pytest_pipecheck.inspect import inspect_cubin

    art.need_disassembler()
    (f,) = inspect_cubin(art.triton_matmul("sm_80", 3).asm["cubin"])
    (g,) = inspect_cubin(art.triton_matmul("sm_80", 1).asm["cubin"])
    assert f.overlap and "LDGSTS" in f.async_copies
    assert not g.has_async_copies and not g.overlap


def test_handwritten_ir_without_a_loop():
    asm = {"ttgir": "tt.func public @k(%a: !tt.ptr<f16>) { tt.return }", "ttir": ""}
    f = analyze_triton(asm, num_stages=3)
    assert not f.pipelined and "no loop" in f.pipeline_reason


def test_not_a_compiled_kernel_is_a_clear_error():
    with pytest.raises(PipecheckError, match="not a Triton compiled kernel"):
        analyze_triton(object())
    with pytest.raises(PipecheckError, match="no 'ttgir'"):
        analyze_triton({"ptx": ""})
