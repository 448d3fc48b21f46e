"""The inspect check (``pipecheck.check_sass``): pass, fail with evidence, bad input, no disassembler."""

from __future__ import annotations

import pytest
from _sass_artifacts import _DATA, art

from pytest_pipecheck.checks.inspect_check import check_sass, normalize_expect
from pytest_pipecheck.config import PipecheckConfig
from pytest_pipecheck.device import TierInfo
from pytest_pipecheck.fixture import Pipecheck
from pytest_pipecheck.results import PipecheckError, PipecheckFailure, Verdict


@pytest.fixture
def pc() -> Pipecheck:
    return Pipecheck("t::x", PipecheckConfig(), TierInfo("cpu", None, "no GPU here"), 1)


def test_pipelined_cubin_passes_and_records(pc):
    art.need_disassembler()
    cubin, _ = art.cu("cpasync_gemm")
    r = check_sass(pc, cubin, expect=["pipelined", {"mma": "HMMA", "spills": False}])
    assert r.verdict is Verdict.PASS and r.check == "inspect"
    assert "LDGSTS x" in r.summary and "overlap yes" in r.summary
    assert pc.results == [r] and r.details["kernels"][0]["sass"]["overlap"] is True


def test_swapped_commit_wait_fails_with_sass_lines(pc):
    art.need_disassembler()
    cubin, _ = art.cu("cpasync_gemm", swap=True)
    with pytest.raises(PipecheckFailure) as info:
        check_sass(pc, cubin, expect={"overlap": True})
    msg = str(info.value)
    assert "expected overlap yes, found overlap no" in msg
    assert "relevant SASS:" in msg and "DEPBAR.LE SB0, 0x0" in msg
    assert pc.results[-1].verdict is Verdict.FAIL


def test_cu_source_compiled_per_arch_with_per_arch_expectation(pc):
    art.need_nvcc()
    art.need_disassembler()
    r = check_sass(pc, _DATA / "spill.cu", arch="sm_80", expect={"spills": True, "mma": {"sm_90": "HGMMA"}})
    assert r.verdict is Verdict.PASS and "spill stores" in r.summary
    with pytest.raises(PipecheckFailure, match=r"expected spills no, found 1?[0-9]+ B spill stores"):
        check_sass(pc, _DATA / "spill.cu", arch="sm_80", expect="no_spills")


def test_triton_function_not_pipelined_names_the_reason(pc):
    pytest.importorskip("triton")
    torch = pytest.importorskip("torch")
    art.need_disassembler()
    art._triton()
    import triton_gemm

    buf = torch.empty(255 * 255, dtype=torch.float16)
    args = (buf, buf, buf, 255, 255, 255, 255, 1, 255, 1, 255, 1, 128, 128, 64)
    with pytest.raises(PipecheckFailure) as info:
        check_sass(pc, triton_gemm.matmul_kernel, args=args, arch="sm_80", expect="pipelined", num_stages=3)
    msg = str(info.value)
    assert "expected Triton pipelined yes, found no" in msg and "tt.divisibility" in msg
    assert "expected async copies yes, found no async copies" in msg


def test_triton_compiled_kernel_hopper_expectations(pc):
    art.need_disassembler()
    k = art.triton_tma(False)
    r = check_sass(pc, k, expect={"async_copies": "TMA", "mma": "HGMMA", "pipelined": True})
    assert r.verdict is Verdict.PASS and "UTMALDG" in r.summary and "HGMMA" in r.summary


@pytest.mark.parametrize(
    "expect, match",
    [
        (None, "needs expect"),
        ("fast", "not a preset"),
        ({"overlapp": True}, "expect key 'overlapp' is unknown"),
        (3, "must be a preset name"),
    ],
)
def test_bad_expectations(expect, match):
    with pytest.raises(PipecheckError, match=match):
        normalize_expect(expect)


def test_bad_targets_are_errors_not_tracebacks(pc, tmp_path):
    with pytest.raises(PipecheckError, match=r"must be a \.cu or \.cubin"):
        check_sass(pc, str(tmp_path / "k.ptx"), expect="pipelined")
    with pytest.raises(PipecheckError, match="does not exist"):
        check_sass(pc, tmp_path / "missing.cubin", expect="pipelined")
    with pytest.raises(PipecheckError, match=r"is not a \.cu/\.cubin path"):
        check_sass(pc, 42, expect="pipelined")
    assert pc.results[-1].verdict is Verdict.ERROR


def test_missing_disassembler_skips_with_the_package_to_install(pc, monkeypatch):
    from pytest_pipecheck.inspect import disasm

    monkeypatch.setattr(disasm.toolkit, "candidates", lambda tool: [])  # the toolkit module disasm uses
    disasm.find_disassembler.cache_clear()
    try:
        with pytest.raises(pytest.skip.Exception, match="nvidia-cuda-cuobjdump"):
            check_sass(pc, b"\x7fELF" + b"\0" * 60, expect="pipelined")
        assert pc.results[-1].verdict is Verdict.SKIP
    finally:
        disasm.find_disassembler.cache_clear()
