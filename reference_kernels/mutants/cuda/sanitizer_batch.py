"""The CUDA sanitizer mutants as one ``pytest --pipecheck`` batch, and the verdicts that batch must reach.

:func:`module_source` writes a test module with one test per sanitizer mutant (plus the hang mutant)
and one clean control per base kernel. Each test launches its kernel once, at a small ragged shape,
through the ``pipecheck`` fixture, so pipecheck's sanitizer plugin selects it; its marker picks the
tool(s): a mutant gets the tool its ``check`` declares, a control every tool the mutants use. Run it
with::

    python -m pytest --pipecheck --pipecheck-tier=gpu --pipecheck-sanitizer=racecheck,synccheck,memcheck \\
        -p no:cacheprovider -rA --pipecheck-json=REPORT.json GENERATED.py

and hand the JSON report and the output to :func:`evaluate`, which lists every way the run fell short
(an empty list: each mutant failed with its hazard, located in the kernel's own sources, and each
control passed every tool clean). A mutant is launched only inside the sanitizer child
(``PIPECHECK_CHILD`` is set there): in the parent a hang would hang the run and a memcheck or
synccheck abort would kill the CUDA context for the tests after it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reference_kernels.cuda.launch import KERNELS, SANITIZER_EXCLUSIONS, gemm

from ..engine import batch_module_head, pytest_outcomes, short_result
from . import MUTANTS, CudaMutant

__all__ = ["SHAPE", "TOOLS", "Case", "cases", "evaluate", "module_source", "own_source_refs", "run_case"]

#: (M, N, K): ragged in every dimension (129 = 128 + 1 rows and columns, K = 3 tiles of 32 + 4)
SHAPE = (129, 129, 100)
#: the tool the hang mutant runs under (racecheck reports "Deadlock detected" and never exits)
HANG_TOOL = "racecheck"
#: sanitizer_timeout (s) of the hang mutant's test: compile + launch take a few seconds
HANG_TIMEOUT = 30.0
#: the finding kind of pipecheck's parser each tool must report for its mutants
KIND = {"racecheck": "race", "synccheck": "barrier", "memcheck": "invalid_access"}
# CuPy compiles a RawModule's source under the name "<sha1 of the source and options>.cubin.cu", so
# that is how a sanitizer names lines of a k*.cu file; headers keep their own names (gemm_common.cuh)
_NVRTC_NAME = re.compile(r"^[0-9a-f]{32,64}\.cubin\.cu$")
_FILE_LINE = re.compile(r"([\w.\-]+\.(?:cuh|cu|h)):(\d+)")


def _tool(m: CudaMutant) -> str:
    return m.check.split(":", 1)[1] if m.check.startswith("sanitizer:") else HANG_TOOL


def _mutants() -> list[CudaMutant]:
    return [m for m in MUTANTS.values() if (m.check.startswith("sanitizer:") or m.check == "hang")
            and not m.extra.get("outside_batch")]


#: every tool a sanitizer mutant declares, in a fixed order (the controls run under all of them)
TOOLS: tuple[str, ...] = tuple(t for t in ("racecheck", "synccheck", "memcheck", "initcheck")
                               if any(_tool(m) == t for m in _mutants()))


@dataclass(frozen=True)
class Case:
    """One generated test: a clean control (``mutant`` None) or one mutant."""

    test: str                   # test function name in the generated module
    kernel: str                 # the base kernel (key of KERNELS)
    tools: tuple[str, ...]
    mutant: CudaMutant | None = None
    timeout: float | None = None  # sanitizer_timeout for the marker (None: the run's default)

    @property
    def name(self) -> str:
        return self.mutant.name if self.mutant else self.kernel

    @property
    def hang(self) -> bool:
        return self.mutant is not None and self.mutant.check == "hang"


def cases(hang_timeout: float = HANG_TIMEOUT) -> list[Case]:
    """Controls first, then the hang mutant, then the other mutants in declaration order.

    The hang comes before the other racecheck mutants on purpose: the watchdog kills that child, and
    the tests after it must still get a verdict from a fresh one.
    """
    muts = _mutants()
    bases = [k for k in KERNELS if any(m.base == k for m in muts)]
    # a control runs every tool the mutants use, minus the reviewed exclusions of its kernel
    out = [Case(f"test_control_{k}", k, tuple(t for t in TOOLS if t not in SANITIZER_EXCLUSIONS.get(k, {})))
           for k in bases]
    for m in sorted(muts, key=lambda m: m.check != "hang"):
        if _tool(m) in SANITIZER_EXCLUSIONS.get(m.base, {}):
            continue  # listed by not_judged(): this compute-sanitizer cannot judge the mutant's tool there
        out.append(Case(f"test_mutant_{m.name}", m.base, (_tool(m),), m,
                        hang_timeout if m.check == "hang" else None))
    return out


def module_source(*, dry_run: bool = False, hang_timeout: float = HANG_TIMEOUT) -> str:
    """The generated test module. ``dry_run`` launches nothing (for testing the batch without a GPU)."""
    lines = batch_module_head("reference_kernels.mutants.cuda.sanitizer_batch",
                              "every CUDA sanitizer mutant and its clean base kernels, one launch each, checked by "
                              "pipecheck's sanitizer plugin", dry_run=dry_run)
    for c in cases(hang_timeout):
        kw = f'sanitizer="{",".join(c.tools)}"'
        if c.timeout is not None:
            kw += f", sanitizer_timeout={c.timeout!r}"
        lines += ["", "", f"@pytest.mark.pipecheck({kw})", f"def {c.test}(pipecheck):",
                  f"    run_case({c.name!r}, pipecheck, dry_run=DRY_RUN)"]
    return "\n".join(lines) + "\n"


def run_case(name: str, pipecheck: Any, *, dry_run: bool = False, shape: Sequence[int] = SHAPE) -> None:
    """Launch kernel or mutant ``name`` once at ``shape``; a control must also be exact.

    A mutant is launched only in a sanitizer child; in the parent its test body is empty and its
    verdict is the sanitizer's.
    """
    mutant = MUTANTS.get(name)
    if dry_run or (mutant is not None and not os.environ.get("PIPECHECK_CHILD")):
        return
    import cupy

    M, N, K = (int(x) for x in shape)
    rng = cupy.random.default_rng(pipecheck.seed)
    a = rng.integers(-3, 4, size=(M, K)).astype(cupy.float16)
    b = rng.integers(-3, 4, size=(K, N)).astype(cupy.float16)
    c = cupy.full((M, N), cupy.nan, dtype=cupy.float32)
    if mutant is not None:
        mutant.launch(a, b, c)
        cupy.cuda.Device().synchronize()
        return
    gemm(name, a, b, c)
    cupy.cuda.Device().synchronize()
    want = a.astype(cupy.float64) @ b.astype(cupy.float64)
    bad = int(cupy.count_nonzero(~(c == want)))  # small integers: every fp32 sum is exact
    assert bad == 0, f"{name} at M={M} N={N} K={K}: {bad} of {M * N} elements differ from the float64 reference"


# --------------------------------------------------------------------------- verdicts


def own_source_refs(finding: Mapping[str, Any], kernel: str) -> list[str]:
    """``file:line`` references of a finding (JSON of parse.Finding) into the kernel's own sources.

    Own sources: gemm_common.cuh, the kernel's .cu file, or that file as CuPy's NVRTC names it. Looks
    at both accesses of a race and at the record's raw text (device frames of an inlined helper).
    """
    own = {"gemm_common.cuh", KERNELS[kernel].file}

    def is_own(path: str) -> bool:
        base = path.replace("\\", "/").rsplit("/", 1)[-1]
        return base in own or bool(_NVRTC_NAME.match(base))

    refs: list[str] = []
    for fk, lk in (("file", "line"), ("second_file", "second_line")):
        path = finding.get(fk)
        if path and is_own(str(path)):
            refs.append(f"{str(path).rsplit('/', 1)[-1]}:{finding.get(lk)}")
    for m in _FILE_LINE.finditer(str(finding.get("raw") or "")):
        ref = f"{m.group(1)}:{m.group(2)}"
        if is_own(m.group(1)) and ref not in refs:
            refs.append(ref)
    return refs


def evaluate(report: Mapping[str, Any], output: str = "", *,
             case_list: Sequence[Case] | None = None) -> list[str]:
    """Every problem with a batch run (``--pipecheck-json`` document and ``-rA`` output); [] when it
    shows what it must: controls clean under every tool, each mutant failed by its declared tool with
    its hazard kind in its own sources, the hang reported as a hang and the tests after it run."""
    case_list = list(case_list if case_list is not None else cases())
    by: dict[tuple[str, str], dict[str, Any]] = {}
    for r in report.get("results", []):
        test = str(r.get("nodeid", "")).rsplit("::", 1)[-1]
        if str(r.get("check", "")).startswith("sanitizer:"):
            by[(test, r["check"])] = r
    outcomes = pytest_outcomes(output)
    problems: list[str] = []
    for c in case_list:
        got_tools = sorted(t.split(":", 1)[1] for (test, t) in by if test == c.test)
        if got_tools != sorted(c.tools):
            problems.append(f"{c.test}: sanitizer results for {got_tools}, expected exactly {sorted(c.tools)}")
        want_outcome = "PASSED" if c.mutant is None else "FAILED"
        if output and outcomes.get(c.test) != want_outcome:
            problems.append(f"{c.test}: pytest outcome {outcomes.get(c.test, 'missing')}, expected {want_outcome}")
        for tool in c.tools:
            r = by.get((c.test, f"sanitizer:{tool}"))
            what = f"{c.test} sanitizer:{tool}"
            if r is None:
                problems.append(f"{what}: no result")
                continue
            summary = str(r.get("summary", ""))
            if c.mutant is None:
                if r.get("verdict") != "pass" or summary != "0 hazards":
                    problems.append(f"{what}: control not clean: {short_result(r)}")
                continue
            if r.get("verdict") != "fail":
                problems.append(f"{what}: mutant not caught: {short_result(r)}")
                continue
            if c.hang:
                if not summary.startswith("hang") or c.mutant.expect not in summary:
                    problems.append(f"{what}: expected a hang ({c.mutant.expect!r}), got {short_result(r)}")
                continue
            problems += _mutant_problems(what, c, tool, r)
        if c.hang:
            later = [x for x in case_list[case_list.index(c) + 1:] if HANG_TOOL in x.tools]
            ran = [x.test for x in later
                   if (by.get((x.test, f"sanitizer:{HANG_TOOL}")) or {}).get("verdict") in ("pass", "fail")
                   and not str(by[(x.test, f"sanitizer:{HANG_TOOL}")].get("summary", "")).startswith("hang")]
            if not later:
                problems.append(f"{c.test}: no {HANG_TOOL} test after the hang (the batch order proves nothing)")
            elif len(ran) != len(later):
                missing = [x.test for x in later if x.test not in ran]
                problems.append(f"{c.test}: {HANG_TOOL} tests after the hang got no verdict: {missing}")
    return problems


def _mutant_problems(what: str, c: Case, tool: str, r: Mapping[str, Any]) -> list[str]:
    assert c.mutant is not None
    m = c.mutant
    d = r.get("details") or {}
    findings = list(d.get("findings") or [])
    groups = list(d.get("groups") or [])
    summary = str(r.get("summary", ""))
    problems: list[str] = []
    if summary.startswith("hang"):
        problems.append(f"{what}: reported as a hang, expected a {KIND[tool]} finding: {short_result(r)}")
    kinds = sorted({str(f.get("kind")) for f in findings})
    hits = [f for f in findings if f.get("kind") == KIND[tool]
            and (tool != "memcheck" or f.get("space") == "global")]
    if not hits:
        problems.append(f"{what}: no {KIND[tool]} finding (kinds: {kinds}): {short_result(r)}")
    labels = [str(g.get("label", "")) for g in groups]
    if m.expect not in summary and not any(m.expect in lb for lb in labels):
        problems.append(f"{what}: {m.expect!r} (CudaMutant.expect) is in neither the summary {summary!r} "
                        f"nor the finding labels {labels}")
    refs = [ref for f in hits for ref in own_source_refs(f, c.kernel)]
    if hits and not refs:
        where = sorted({f"{f.get('file')}:{f.get('line')} / {f.get('second_file')}:{f.get('second_line')}"
                        for f in hits})[:6]
        problems.append(f"{what}: no {KIND[tool]} finding points into {c.kernel}'s sources (gemm_common.cuh, "
                        f"{KERNELS[c.kernel].file}): locations {where}; {short_result(r)}")
    return problems


def not_judged() -> dict[str, str]:
    """Mutants left out of the batch, with the reason: their tool is excluded on their base kernel for the
    compute-sanitizer that runs (:data:`~reference_kernels.cuda.launch.SANITIZER_EXCLUSIONS`)."""
    return {m.name: SANITIZER_EXCLUSIONS[m.base][_tool(m)] for m in _mutants()
            if m.check != "hang" and _tool(m) in SANITIZER_EXCLUSIONS.get(m.base, {})}
