"""On a GPU: each seeded bug is caught by the right tool, named and attributed; clean kernels stay clean.

Runs tests/gpu/sanitizer_targets/targets.py in one ``pytest --pipecheck`` subprocess (all four tools,
per-test tool selection by marker) and reads every test's sanitizer verdicts from its output.
Needs a CUDA GPU, compute-sanitizer and CuPy; skipped with the reason otherwise.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _pipecheck_results import DUMPER, results

HERE = Path(__file__).resolve().parent
TARGETS = HERE / "sanitizer_targets" / "targets.py"

def _bug_lines() -> dict[str, int]:
    text = TARGETS.read_text()
    out = {}
    for name in ("RACE", "CPASYNC", "DIVERGENT", "TAIL", "UNINIT", "UNINIT_SHARED", "BULK_OOB"):
        m = re.search(name + r' = r"""(.*?)"""', text, re.S)
        assert m, name
        out[name] = next(i for i, ln in enumerate(m.group(1).splitlines(), 1) if "// BUG" in ln)
    return out


@pytest.mark.gpu
def test_seeded_bugs_caught_by_the_right_tool(pytester: pytest.Pytester) -> None:
    pytest.importorskip("cupy")
    from pytest_pipecheck.sanitizer.locate import find_compute_sanitizer

    found = find_compute_sanitizer()
    if found is None:
        pytest.skip("compute-sanitizer not found")
    pytester.makeconftest(DUMPER)
    pytester.makepyfile(test_targets=TARGETS.read_text())
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=all", "-p", "no:cacheprovider",
                                           "-rA", timeout=300)
    text = result.stdout.str()
    print(text[-20000:])
    res = {(name, check.split(":")[-1]): got for (name, check), got in results(text).items()}
    lines = _bug_lines()
    problems: list[str] = []

    def expect(test: str, tool: str, verdict: str, *needles: str) -> None:
        got = res.get((test, tool))
        if got is None:
            problems.append(f"{test} {tool}: no result")
        elif got[0] != verdict or not all(n in got[1] for n in needles):
            problems.append(f"{test} {tool}: expected {verdict} with {needles}, got {got}")

    for tool in ("racecheck", "synccheck", "memcheck", "initcheck"):
        expect("test_clean_tile", tool, "pass", "0 hazards")
        expect("test_cpasync_clean", tool, "pass", "0 hazards")
    expect("test_missing_syncthreads", "racecheck", "fail", "race", "racy_tile")
    # racecheck names the function the racing access sits in: here the inlined cp.async helper of
    # cuda_pipeline.h (compute-sanitizer 2025.3.1), with the kernel's own line as the other side of the pair
    expect("test_missing_pipeline_wait", "racecheck", "fail", "RAW race", f".cu:{lines['CPASYNC']}")
    expect("test_divergent_barrier", "synccheck", "fail", "barrier error", "divergent_barrier")
    expect("test_oob_tail", "memcheck", "fail", "invalid __global__", "tail_oob", f":{lines['TAIL']}")
    expect("test_uninit_read", "initcheck", "fail", "uninitialized", "uninit_read", f":{lines['UNINIT']}")
    expect("test_consumer_never_waits", "racecheck", "fail", "hang")
    # the version-gated options (pytest_pipecheck/sanitizer/known.py): shared memory is seen by initcheck
    # only from 2025.4, where pipecheck passes --initcheck-address-space all; an older version misses it,
    # and the run header says so
    if found.version_tuple is not None and found.version_tuple >= (2025, 4):
        expect("test_uninit_shared_read", "initcheck", "fail", "uninit_shared", f":{lines['UNINIT_SHARED']}")
    else:
        expect("test_uninit_shared_read", "initcheck", "pass", "0 hazards")
        if "cannot check shared memory in initcheck" not in text:
            problems.append(f"compute-sanitizer {found.version}: the header does not say it misses shared memory")
    # a TMA bulk copy reading past its source (memcheck with --check-bulk-copy yes), on sm_90 and newer
    bulk = res.get(("test_bulk_copy_out_of_bounds", "memcheck"))
    if not (bulk and bulk[0] == "skip" and "sm_90" in bulk[1]):
        expect("test_bulk_copy_out_of_bounds", "memcheck", "fail", "bulk_copy_oob")
    # warpgroup MMA (sm_90a), checked by synccheck and memcheck with --check-warpgroup-mma yes (pipecheck passes
    # it from 2025.3, where it was measured): a warp that skips the wgmma, a descriptor past shared memory
    wg = res.get(("test_wgmma_clean", "synccheck"))
    if not (wg and wg[0] == "skip" and "sm_90" in wg[1]):
        for tool in ("synccheck", "memcheck"):
            expect("test_wgmma_clean", tool, "pass", "0 hazards")
        expect("test_wgmma_warp_skips_the_mma", "synccheck", "fail", "wgmma sequence error", "wgmma_skips_a_warp")
        expect("test_wgmma_descriptor_past_shared_memory", "memcheck", "fail", "invalid __shared__ read",
               "wgmma_desc_oob")
    for tool in ("racecheck", "synccheck", "memcheck"):
        got = res.get(("test_triton_matmul_clean", tool))
        if got is not None and got[0] != "skip":
            expect("test_triton_matmul_clean", tool, "pass", "0 hazards")
    # a line of the race pair must be the buggy read (RACE's write is the line before)
    race = res.get(("test_missing_syncthreads", "racecheck"), ("", ""))[1]
    if f":{lines['RACE']}" not in race:
        problems.append(f"racy_tile: line {lines['RACE']} not named in {race!r}")
    assert not problems, "\n".join(problems)
