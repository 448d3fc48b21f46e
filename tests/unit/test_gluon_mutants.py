"""The Gluon mutants (reference_kernels/mutants/gluon/): each is the reference Gluon GEMM plus exactly its
edits, declared in the engine's vocabulary, compiles ahead of time for sm_90a with the installed Triton
(plain and ConSan-instrumented) with its bug visible in the PTX, and the ConSan batch that the GPU test
runs is well formed and judged strictly. No GPU needed."""

from __future__ import annotations

import difflib

import pytest

from reference_kernels.mutants import engine
from reference_kernels.mutants import gluon as gluon_mutants
from reference_kernels.mutants.gluon import consan_batch

NAMES = list(gluon_mutants.MUTANTS)
# GPU_CONFIG of the reference: BLOCK_M 128, BLOCK_N 256, BLOCK_K 64, 4 stages
BLOCK_M, BLOCK_N, BLOCK_K, STAGES = 128, 256, 64, 4


def test_the_four_ring_bugs_of_issue_19_are_declared() -> None:
    assert set(NAMES) == {"gluon_release_before_read", "gluon_loader_skips_empty_wait",
                          "gluon_ready_wait_wrong_parity", "gluon_epilogue_skips_final_wait"}


@pytest.mark.parametrize("name", NAMES)
def test_source_is_the_reference_with_its_edits_applied_once(name: str) -> None:
    base = gluon_mutants.BASE_SOURCE.read_text()
    m = gluon_mutants.MUTANTS[name]
    for edit in m.edits:  # each edit's text occurs exactly once in today's reference
        assert edit.old is not None and base.count(edit.old) == 1, (name, edit.old)
    mutated = gluon_mutants.mutant_source(name)
    assert "# BUG" in mutated or "BUG:" in mutated, "a mutant marks its bug in the generated source"
    undone = mutated
    for edit in reversed(m.edits):
        assert not edit.new or undone.count(edit.new) == 1, (name, edit.new)
        undone = undone.replace(edit.new, edit.old or "", 1) if edit.new else _reinsert(undone, base, edit.old or "")
    assert undone == base


def _reinsert(mutated: str, base: str, old: str) -> str:
    """Undo a deletion: put ``old`` back where the base has it (the text before it is unchanged)."""
    tail = base[: base.index(old)][-60:]
    assert mutated.count(tail) == 1, tail
    i = mutated.index(tail) + len(tail)
    return mutated[:i] + old + mutated[i:]


@pytest.mark.parametrize("name", NAMES)
def test_declared_in_the_engines_vocabulary(name: str) -> None:
    m = gluon_mutants.MUTANTS[name]
    reg = engine.registry()
    assert reg[name] is m
    assert m.language == "triton" and m.base == gluon_mutants.BASE == "gluon_gemm"
    assert m.check == "consan" and m.check in engine.CHECKS
    assert m.tags <= set(engine.TAGS) and {"barrier", "sanitizer"} <= m.tags
    assert m.expect and m.bug and m.extra["terminates"]
    # the launch each mutant is run at: one program, the shapes its termination argument needs
    mm, k, n = m.extra["shape"]  # type: ignore[misc]
    assert m.extra["num_programs"] == 1 and n % 8 == 0  # TMA epilogue: rows end on 16-byte boundaries
    steps = -(-mm // BLOCK_M) * -(-n // BLOCK_N) * -(-k // BLOCK_K)  # K steps of the one program
    if name == "gluon_ready_wait_wrong_parity":
        assert steps <= STAGES, "a flipped ready parity terminates only while every slot is filled once"
    if name == "gluon_loader_skips_empty_wait":
        assert STAGES < steps <= 2 * STAGES, "a refill per slot, never two"
    if name == "gluon_epilogue_skips_final_wait":
        assert -(-mm // BLOCK_M) * -(-n // BLOCK_N) >= 2, "a second tile must reuse the released slot"
    if name == "gluon_release_before_read":
        assert steps > STAGES


# --------------------------------------------------------------------------- ahead-of-time compiles


def _gluon_or_skip() -> None:
    pytest.importorskip("triton")
    from reference_kernels.triton.gluon_gemm import gluon_unavailable_reason

    reason = gluon_unavailable_reason()
    if reason:
        pytest.skip(reason)


_PTX_WORDS = ("wgmma.wait_group", "mbarrier.try_wait", "mbarrier.arrive")


def _counts(ptx: str) -> dict[str, int]:
    return {w: ptx.count(w) for w in _PTX_WORDS}


@pytest.fixture(scope="module")
def base_ptx() -> str:
    _gluon_or_skip()
    return str(gluon_mutants.base().compile_for_sm90().asm["ptx"])


# what each bug removes from (or changes in) the reference's PTX: {word: change in its count}
PTX_CHANGE = {
    "gluon_release_before_read": {"mbarrier.arrive": -1},      # two delayed releases become one early one
    "gluon_loader_skips_empty_wait": {"mbarrier.try_wait": -1},  # the loader's wait on empty is gone
    "gluon_ready_wait_wrong_parity": {},                        # same instructions, another parity
    "gluon_epilogue_skips_final_wait": {"wgmma.wait_group": -1},  # the drain before the epilogue is gone
}


@pytest.mark.parametrize("name", NAMES)
def test_compiles_for_sm90a_with_its_bug_in_the_ptx(base_ptx: str, name: str) -> None:
    compiled = gluon_mutants.load(name).compile_for_sm90()
    ptx = str(compiled.asm["ptx"])
    assert compiled.asm.get("cubin"), "ptxas produced no cubin"
    assert ".target sm_90a" in ptx
    want = {w: c + PTX_CHANGE[name].get(w, 0) for w, c in _counts(base_ptx).items()}
    assert _counts(ptx) == want
    assert ptx != base_ptx
    assert compiled.metadata.shared <= 232448


def test_the_parity_mutant_differs_from_the_reference_only_in_a_parity() -> None:
    _gluon_or_skip()
    ttgir_base = str(gluon_mutants.base().compile_for_sm90().asm["ttgir"])
    ttgir = str(gluon_mutants.load("gluon_ready_wait_wrong_parity").compile_for_sm90().asm["ttgir"])
    diff = [d for d in difflib.ndiff(ttgir_base.splitlines(), ttgir.splitlines()) if d[:2] in ("- ", "+ ")]
    assert any("arith.xori" in d for d in diff if d.startswith("+ ")), diff[:20]


def _consan_supported() -> bool:
    from triton.backends.nvidia.compiler import CUDAOptions

    return "instrumentation_mode" in CUDAOptions.__dataclass_fields__


@pytest.mark.parametrize("name", NAMES)
def test_compiles_with_consan_instrumentation(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the GPU test runs under: the mutant instrumented by ConSan (the PTX carries ConSan's checks,
    so the setting was not silently ignored)."""
    _gluon_or_skip()
    import triton

    if tuple(int(p) for p in triton.__version__.split(".")[:2]) < (3, 9):
        # 3.6 instruments only when the knob is set before Triton is imported (as pipecheck's ConSan child
        # does); tests/gpu/test_gluon_mutants_gpu.py checks the instrumentation in the cubins there
        pytest.skip(f"Triton {triton.__version__} does not instrument an in-process compile (3.9 does)")
    from pytest_pipecheck.sanitizer.consan import KNOB_ENV

    monkeypatch.setenv(KNOB_ENV, "consan")
    if not _consan_supported():
        pytest.skip("this Triton has no instrumentation_mode option (ConSan)")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import compile as triton_compile
    from triton.experimental.gluon._runtime import GluonASTSource

    module = gluon_mutants.load(name)
    signature, constexprs, attrs = module.aot_signature()
    compiled = triton_compile(GluonASTSource(module.gluon_ws_gemm_kernel, signature, constexprs, attrs),
                              target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": 8, "num_stages": 1, "instrumentation_mode": "consan"})
    ptx = str(compiled.asm["ptx"])
    import re

    helpers = set(re.findall(r"__triton_consan_\w+", ptx))
    # ConSan's checks of buffer visibility (reads/writes behind a barrier) and of in-flight wgmma/TMA
    # ("outstanding" accesses): the hazards these mutants create (names with their type suffixes)
    for check in ("__triton_consan_verify_read_visibility", "__triton_consan_verify_write_visibility",
                  "__triton_consan_check_outstanding_commits"):
        assert any(h.startswith(check) for h in helpers), (check, sorted(helpers)[:5])
    monkeypatch.delenv(KNOB_ENV)
    assert "__triton_consan_" not in str(module.compile_for_sm90().asm["ptx"])  # the uninstrumented build


# --------------------------------------------------------------------------- the ConSan batch


def test_batch_module_has_a_control_and_a_mutant_test_per_mutant() -> None:
    src = consan_batch.module_source()
    compile(src, "test_gluon_consan_batch.py", "exec")
    cs = consan_batch.cases()
    assert [c.mutant for c in cs if not c.control] == NAMES
    assert {c.mutant for c in cs if c.control} == set(NAMES)
    for c in cs:
        assert f"def {c.test}(pipecheck):" in src
    assert src.count('@pytest.mark.pipecheck(sanitizer="consan", sanitizer_timeout=180.0)') == len(cs)
    assert "dry_run=DRY_RUN" in src and "DRY_RUN = False" in src


def _report(**override: dict[str, object]) -> tuple[dict[str, object], str]:
    results = []
    lines = []
    for c in consan_batch.cases():
        if c.control:
            r: dict[str, object] = {"verdict": "pass", "summary": "0 hazards"}
        else:
            r = {"verdict": "fail", "summary": "1 ConSan violation",
                 "details": {"output": "Buffer being accessed has outstanding reads"}}
        r = {**r, **override.get(c.test, {}), "check": "sanitizer:consan",
             "nodeid": f"test_gluon_consan_batch.py::{c.test}"}
        results.append(r)
        lines.append(f"{'PASSED' if c.control else 'FAILED'} test_gluon_consan_batch.py::{c.test}")
    return {"results": results}, "\n".join(lines)


def test_evaluate_accepts_every_mutant_caught_and_every_control_clean() -> None:
    report, output = _report()
    assert consan_batch.evaluate(report, output) == []


def test_evaluate_rejects_what_the_gpu_run_must_not_show() -> None:
    m = "test_mutant_gluon_ready_wait_wrong_parity"
    report, output = _report(**{m: {"verdict": "pass", "summary": "0 hazards", "details": {}}})
    assert any("mutant not caught" in p for p in consan_batch.evaluate(report, output))
    report, output = _report(**{m: {"summary": "hang: killed by the watchdog", "details": {}}})
    assert any("reported as a hang" in p for p in consan_batch.evaluate(report, output))
    report, output = _report(**{m: {"summary": "1 error", "details": {"output": "illegal memory access"}}})
    assert any("without naming the hazard" in p for p in consan_batch.evaluate(report, output))
    c = "test_control_gluon_release_before_read"
    report, output = _report(**{c: {"verdict": "fail", "summary": "1 ConSan violation"}})
    assert any("reference is not clean" in p for p in consan_batch.evaluate(report, output))
    report, output = _report()
    assert consan_batch.evaluate({"results": []}, output)  # no result at all is a problem, never a pass
    assert any("pytest outcome missing" in p for p in consan_batch.evaluate(report, output.split("\n", 1)[1]))
