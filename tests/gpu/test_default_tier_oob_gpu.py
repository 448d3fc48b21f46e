"""On a GPU, with the GPU tier's default tools: a read past a tensor whose values the kernel discards fails its
test, naming the tensor, the direction and the case; its masked twin passes every check.

Runs tests/gpu/memcheck_targets/default_tier_oob.py (a Triton and a CUDA GEMM, a Triton and a CUDA row sum,
each as a masked-load mutant and its masked twin) in one ``pytest --pipecheck --pipecheck-tier=gpu``
subprocess with no sanitizer option: memcheck is a default tool. The normal run's coverage passes every
mutant (the guard bands are valid memory and the values read are discarded), so the verdict is memcheck's.
When PIPECHECK_EVIDENCE_DIR is set, the inner run's output is written there. Needs a CUDA GPU, CuPy and
compute-sanitizer; skipped with the reason otherwise.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _pipecheck_results import DUMPER, keep_output, needs_compute_sanitizer, results

HERE = Path(__file__).resolve().parent
TARGETS = HERE / "memcheck_targets" / "default_tier_oob.py"

#: per kernel: what memcheck's verdict on the mutant says of the tensor (direction included) and the cause
EXPECT = {
    "triton_gemm": ("past 'a'", "a load past the end of 'a' at mutant_gemm_a_rows_unmasked at M129-N128-K64",
                    "is M index"),
    "cuda_gemm": ("past 'A'", "a load past the end of 'A' at k3_cp_async__a_rows_unguarded at M129-N128-K64",
                  "is M index"),
    "triton_reduce": ("before 'x'", "a load before the start of 'x' at triton_row_sum_reverse_mutant at M33-N301",
                      "is N index -"),
    "cuda_reduce": ("past 'x'", "a load past the end of 'x' at cuda_row_sum4_mutant at M33-N301",
                    "is N index 30"),
}


@pytest.mark.gpu
def test_default_tools_fail_discarded_reads_past_a_tensor(pytester: pytest.Pytester) -> None:
    needs_compute_sanitizer("triton", "cupy")
    from pytest_pipecheck.config import DEFAULT_SANITIZER_TOOLS

    assert "memcheck" in DEFAULT_SANITIZER_TOOLS
    pytester.makeconftest(DUMPER)
    pytester.makepyfile(test_default_tier_oob=TARGETS.read_text())
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-tier=gpu", "-p", "no:cacheprovider", "-rA",
                                           timeout=540)
    text = keep_output(result, "default-tier-oob-output.txt")
    res = results(text)
    for kernel, (tensor, cause, bound) in EXPECT.items():
        mutant, twin = f"test_mutant[{kernel}]", f"test_twin[{kernel}]"
        # the normal run cannot see the reads: their values never reach an output
        assert res[(mutant, "coverage")][0] == "pass", (kernel, text[-8000:])
        verdict, summary = res[(mutant, "sanitizer:memcheck")]
        assert verdict == "fail" and "invalid __global__ read" in summary and tensor in summary, \
            (kernel, summary)
        line = next((ln for ln in text.splitlines() if f"cause: {cause}" in ln), None)
        assert line is not None and bound in line, (kernel, text[-8000:])
        for tool in DEFAULT_SANITIZER_TOOLS:
            assert res[(twin, f"sanitizer:{tool}")][0] == "pass", (kernel, tool, res.get((twin, f"sanitizer:{tool}")))
        for check in ("coverage", "tile_probe", "determinism"):
            assert res[(twin, check)][0] == "pass", (kernel, check, res.get((twin, check)))
    # every record of the GEMMs' one load instruction is about A: none reads as "before B" (the rows past A's
    # end lie nearer B's start for a warp's last threads; docs/validation/2026-12-02-h200-1805.md)
    for wrong in ("before 'b'", "before 'B'", "before the start of 'b'", "before the start of 'B'"):
        assert wrong not in text, (wrong, text[-8000:])
    result.assert_outcomes(failed=len(EXPECT), passed=len(EXPECT))
