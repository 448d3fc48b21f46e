"""On a GPU of compute capability 9.0 or newer: Triton's ConSan as a pipecheck sanitizer tool.

Runs tests/gpu/consan_targets/targets.py in one ``pytest --pipecheck --pipecheck-sanitizer=consan``
subprocess and reads every test's ConSan verdict from its output: the bundled Gluon warp-specialized
GEMM passes with evidence that its kernel was instrumented (ConSan helper functions in the loaded
cubin), a cp.async ordering bug is caught with ConSan's own message, its twin without the bug passes,
and a test that launches only PyTorch kernels is a skip. Skipped with the reason without a GPU, on an
older one, or where this Triton has no ConSan.

Run on a GPU machine: ``python3 -m pytest tests/gpu/test_consan_gpu.py -v -s -p no:cacheprovider``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _pipecheck_results import DUMPER, results

HERE = Path(__file__).resolve().parent
TARGETS = HERE / "consan_targets"
ROOT = HERE.parents[1]

@pytest.mark.gpu
def test_consan_on_the_gluon_gemm_and_a_seeded_race(pytester: pytest.Pytester,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    cap = torch.cuda.get_device_capability()
    from pytest_pipecheck.sanitizer.consan import unavailable_reason

    why = unavailable_reason(f"{cap[0]}.{cap[1]}")
    if why is not None:
        pytest.skip(why)
    if cap != (9, 0):
        pytest.skip(f"the Gluon GEMM needs sm_90 (wgmma); this GPU is sm_{cap[0]}{cap[1]}")
    from reference_kernels.triton.gluon_gemm import gluon_unavailable_reason

    reason = gluon_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    monkeypatch.delenv("TRITON_INSTRUMENTATION_MODE", raising=False)
    pytester.makeconftest(DUMPER)
    pytester.makepyfile(consan_kernels=(TARGETS / "kernels.py").read_text(),
                        test_targets=(TARGETS / "targets.py").read_text())
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=consan", "-p", "no:cacheprovider",
                                           "-rA", timeout=600)
    text = result.stdout.str()
    print(text[-20000:])
    res = results(text)
    problems = []
    for case in ("one-tile", "ring-wraps", "ragged"):  # one program: 1 tile / 16 K steps on 4 tiles / ragged
        got = res.get((f"test_gluon_ws_gemm[{case}]", "sanitizer:consan"))
        if got is None or got[0] != "pass" or "instrumented: gluon_ws_gemm_kernel (" not in got[1]:
            problems.append(f"gluon GEMM {case}: {got}")
    race = res.get(("test_overwrite_in_flight_race", "sanitizer:consan"))
    if race is None or race[0] != "fail" or "ConSan violation" not in race[1]:
        problems.append(f"race: {race}")
    clean = res.get(("test_overwrite_in_flight_clean", "sanitizer:consan"))
    if clean is None or clean[0] != "pass" or "instrumented: overwrite_in_flight (" not in clean[1]:
        problems.append(f"clean twin: {clean}")
    none = res.get(("test_no_triton_kernel", "sanitizer:consan"))
    if none != ("skip", "no Triton kernel launched"):
        problems.append(f"no Triton kernel: {none}")
    assert not problems, "\n".join(problems)
    result.assert_outcomes(passed=5, failed=1)
