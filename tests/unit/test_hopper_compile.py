"""The Hopper TMA + WGMMA GEMM and its mutants, checked without a GPU.

Compiles reference_kernels/hopper/tma_wgmma_gemm.cu for sm_90a with nvcc (skipped with the reason when
nvcc is missing) and reads the SASS with cuobjdump/nvdisasm (Triton's wheel carries one): the kernel
must use the tensor-memory accelerator (UTMALDG), warpgroup MMA (HGMMA), mbarriers (SYNCS.*) and, with
two consumer warpgroups, register reallocation (USETMAXREG); each mutant must differ from the
reference by exactly its tagged line(s), still compile, and (where the bug is visible in SASS) show it.
"""

from __future__ import annotations

import difflib
import re
from functools import cache

import pytest

from pytest_pipecheck import toolkit
from reference_kernels.hopper import launch as hl
from reference_kernels.mutants.hopper import EXPECTED_CHECKS, MUTANTS, OUTCOMES, apply_mutant, tagged_line

# tests/conftest.py: the CPU job runs it, the GPU tier leaves it out (nvcc and the disassembler for sm_90a, no device)
pytestmark = pytest.mark.cpu_only


def _disassembler():
    from pytest_pipecheck.inspect import disasm

    return disasm.find_disassembler()


needs_nvcc = pytest.mark.skipif(toolkit.find_tool("nvcc") is None, reason=f"nvcc not found ({toolkit.NOT_FOUND_HINT})")


@cache
def _build(mutant: str | None, variant: hl.Variant) -> tuple[str, str]:
    """(ptxas log, SASS) of one build; compiled once per session, never from the on-disk cache."""
    from pytest_pipecheck.inspect import disasm

    tool = _disassembler()
    if tool is None:
        pytest.skip(f"no SASS disassembler: {disasm.HOW_TO_GET}")
    cubin, log = hl.compile_cubin(hl.kernel_source(mutant), variant, label=mutant or hl.ENTRY, use_cache=False)
    return log, disasm.disassemble(cubin, disassembler=tool)


def _count(sass: str, pattern: str) -> int:
    return len(re.findall(pattern, sass))


# ----------------------------------------------------------------------------- reference


@needs_nvcc
def test_reference_uses_tma_wgmma_mbarriers_and_setmaxnreg() -> None:
    log, sass = _build(None, hl.Variant())
    assert _count(sass, r"\bUTMALDG\.2D\b") == 2, "one TMA load for the A tile and one for the B tile"
    assert _count(sass, r"\bHGMMA\.64x128x16\.F32\.BF16\b") == 4, "4 x k16 WGMMA per 64-wide K tile"
    assert _count(sass, r"\bSYNCS\.EXCH\.64\b") == 2 * 4, "full + empty barrier per stage (4 stages)"
    assert _count(sass, r"\bSYNCS\.PHASECHK\.TRANS64\.TRYWAIT\b") >= 2, "parity waits on full and empty"
    assert _count(sass, r"\bSYNCS\.ARRIVE\.TRANS64\b") >= 2, "expect-tx arrive and the release arrive"
    assert "USETMAXREG.DEALLOC" in sass and "USETMAXREG.TRY_ALLOC" in sass, "setmaxnreg dec/inc missing"
    assert re.search(r"WARPGROUP\.DEPBAR\.LE\s+gsb0,\s*0x1", sass), "wgmma.wait_group 1 in the main loop"
    assert re.search(r"WARPGROUP\.DEPBAR\.LE\s+gsb0,\s*0x0", sass), "wgmma.wait_group 0 before the epilogue"
    assert "C7508" not in log, f"ptxas ignored setmaxnreg:\n{log}"
    assert re.search(r"0 bytes spill stores, 0 bytes spill loads", log), f"register spills:\n{log}"
    assert re.search(r"Used 168 registers", log), f"384 threads with __launch_bounds__(.., 1) cap at 168:\n{log}"


@needs_nvcc
@pytest.mark.parametrize(
    ("variant", "hgmma", "setmaxnreg"),
    [
        (hl.Variant(consumers=1, stages=2), r"HGMMA\.64x128x16\.F32\.BF16", False),
        (hl.Variant(bn=256, stages=4), r"HGMMA\.64x256x16\.F32\.BF16", True),
        (hl.Variant(fp16=True, stages=3), r"HGMMA\.64x128x16\.F32(\.F16)?\b", True),
    ],
    ids=str,
)
def test_variants_compile_to_the_right_wgmma(variant: hl.Variant, hgmma: str, setmaxnreg: bool) -> None:
    log, sass = _build(None, variant)
    assert _count(sass, hgmma) == 4, f"{variant}: expected 4 x {hgmma}"
    assert _count(sass, r"\bUTMALDG\.2D\b") == 2
    assert _count(sass, r"\bSYNCS\.EXCH\.64\b") == 2 * variant.stages
    assert ("USETMAXREG" in sass) is setmaxnreg
    assert re.search(r"0 bytes spill stores, 0 bytes spill loads", log), f"register spills:\n{log}"


def test_variant_limits_and_shared_memory() -> None:
    assert hl.Variant().smem_bytes == 4 * (128 + 128) * 64 * 2 + 1024
    assert hl.Variant(consumers=1, stages=2).threads == 256
    assert hl.Variant(bn=256, stages=4).smem_bytes == 4 * 49152 + 1024
    with pytest.raises(hl.HopperLaunchError, match=r"2\.\.6 stages"):
        hl.Variant(stages=1)
    with pytest.raises(hl.HopperLaunchError, match="exceed the 227 KB"):
        hl.Variant(bn=256, stages=5)
    with pytest.raises(hl.HopperLaunchError, match="consumers=3"):
        hl.Variant(consumers=3)


def test_nvcc_command_targets_sm90a_with_the_variant_macros() -> None:
    flags = toolkit.compile_flags(hl.OPTIONS, (), hl.Variant(stages=3, consumers=1, bn=256).defines())
    cmd = toolkit.nvcc_command("nvcc", "x.cu", "x.cubin", hl.ARCH, flags)
    assert "-arch=sm_90a" in cmd and "-std=c++17" in cmd
    assert {"-DPIPECHECK_STAGES=3", "-DPIPECHECK_CONSUMERS=1", "-DPIPECHECK_BN=256"} <= set(cmd)
    assert "-lineinfo" in cmd


# ----------------------------------------------------------------------------- mutants


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_differs_by_exactly_its_tagged_lines(name: str) -> None:
    mutant = MUTANTS[name]
    source = hl.kernel_source()
    mutated = apply_mutant(source, name)
    diff = [d for d in difflib.ndiff(source.splitlines(), mutated.splitlines()) if d[:2] in ("- ", "+ ")]
    removed = [d[2:] for d in diff if d.startswith("- ")]
    added = [d[2:] for d in diff if d.startswith("+ ")]
    assert len(removed) == len(added) == len(mutant.edits), f"{name} changes other lines than its tagged ones: {diff}"
    in_source_order = sorted(mutant.edits, key=lambda edit: tagged_line(source, edit[0])[0])
    for (tag, _old, new), gone, came in zip(in_source_order, removed, added):
        _, line = tagged_line(source, tag)
        assert gone == line, f"{name}: changed {gone!r}, not the line tagged {tag}"
        assert new in came and came.rstrip().endswith(f"// pipecheck:{tag}")
    assert mutant.expected_check in EXPECTED_CHECKS
    assert set(mutant.may_also) <= set(OUTCOMES)


def test_every_mutant_has_its_own_tags_and_unknown_names_are_refused() -> None:
    tags = [tag for m in MUTANTS.values() for tag, _, _ in m.edits]
    assert len(tags) == len(set(tags))
    with pytest.raises(ValueError, match="unknown Hopper mutant"):
        apply_mutant(hl.kernel_source(), "no_such_mutant")
    with pytest.raises(ValueError, match="no longer contains"):
        apply_mutant(hl.kernel_source().replace("phase);  // pipecheck:full_wait", "p);  // pipecheck:full_wait"),
                     "hopper_full_wait_wrong_parity")
    with pytest.raises(ValueError, match="expected_check 'crash'"):
        type(MUTANTS["hopper_full_wait_wrong_parity"])("x", "t", "o", "n", "bug", "crash")


def test_a_fault_is_a_declared_outcome_of_the_parity_mutant() -> None:
    # the wrong-parity mutant can die with "unspecified launch failure" (WGMMA reads a stage TMA is writing)
    assert "crash" in MUTANTS["hopper_full_wait_wrong_parity"].may_also


@needs_nvcc
@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_still_compiles_with_tma_and_wgmma(name: str) -> None:
    _, sass = _build(name, hl.Variant())
    assert _count(sass, r"\bUTMALDG\.2D\b") == 2
    assert _count(sass, r"\bHGMMA\.64x128x16\.F32\.BF16\b") == 4
    _, ref = _build(None, hl.Variant())
    assert sass != ref, f"{name} compiled to the same SASS as the reference"


@needs_nvcc
@pytest.mark.parametrize("variant", [hl.Variant(), hl.Variant(stages=2)], ids=str)
def test_release_mutant_has_no_wgmma_wait_in_its_loop(variant: hl.Variant) -> None:
    """The early-release mutant keeps its bug only if ptxas adds no wait of its own: the one
    wgmma.wait_group left is the 0 before the epilogue, and nothing warns of a serialized pipeline."""
    log, sass = _build("hopper_stage_released_before_wgmma_done", variant)
    waits = re.findall(r"WARPGROUP\.DEPBAR\.LE\s+gsb0,\s*(0x[0-9a-f]+)", sass)
    assert waits == ["0x0"], f"expected only the epilogue's wgmma.wait_group 0, found {waits}"
    assert "serializ" not in log.lower(), f"ptxas serialized the WGMMA pipeline:\n{log}"
    assert _count(sass, r"\bHGMMA\.64x128x16\.F32\.BF16\b") == 4
    mutant = MUTANTS["hopper_stage_released_before_wgmma_done"]
    assert mutant.expected_check == "coverage" and mutant.shapes and mutant.configs


# ----------------------------------------------------------------------------- spec and launcher (no GPU)


def test_spec_describes_the_kernel_and_its_shapes_respect_tma_alignment() -> None:
    from pytest_pipecheck.model import shapes
    from reference_kernels.hopper.spec import spec

    s = spec()
    assert s.tiles == {"M": 128, "N": 128, "K": 64}
    assert s.loop_dim == "K" and s.stages == 4
    assert s.launch_accepts_stages()
    generated = shapes.generate(s, level="small")
    assert generated and all(sh["K"] % 8 == 0 for sh in generated)
    assert spec(hl.Variant(consumers=1, bn=256, stages=3)).tiles == {"M": 64, "N": 256, "K": 64}


def test_launcher_refuses_cpu_tensors_with_a_clear_error() -> None:
    torch = pytest.importorskip("torch")
    a = torch.zeros(64, 64, dtype=torch.bfloat16)
    b = torch.zeros(64, 64, dtype=torch.bfloat16)
    c = torch.zeros(64, 64, dtype=torch.float32)
    with pytest.raises(hl.HopperLaunchError, match="on cpu; the Hopper GEMM needs CUDA tensors"):
        hl.gemm(a, b, c)


# ----------------------------------------------------------------------------- run_case outcomes (no GPU)


@pytest.mark.parametrize(("message", "fault"), [
    ("AcceleratorError: CUDA error: unspecified launch failure\nSearch for `cudaErrorLaunchFailure'", True),
    ("CUDA error: an illegal memory access was encountered", True),
    ("HopperLaunchError: cuLaunchKernel(...) failed: CUDA_ERROR_ILLEGAL_INSTRUCTION", True),
    ("HopperLaunchError: cuLaunchKernel(...) failed: CUDA_ERROR_INVALID_VALUE", False),
    ("HopperCompileError: nvcc failed (exit 1)", False),
    ("AssertionError: Torch not compiled with CUDA enabled", False),
])
def test_run_case_tells_a_kernel_fault_from_a_kernel_that_never_ran(message: str, fault: bool) -> None:
    from reference_kernels.hopper import run_case

    assert run_case.is_device_fault(RuntimeError(message)) is fault


def test_run_case_without_a_gpu_is_an_error_not_a_crash(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("needs a machine without a GPU: this tests the error path of run_case with no device")
    from reference_kernels.hopper import run_case

    status = run_case.main(["--shapes", "64x64x64"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    result = json.loads(last[len(run_case.RESULT_PREFIX):])
    assert status == run_case.EXIT_ERROR == 2 and result["outcome"] == "error" and result["status"] == 2
