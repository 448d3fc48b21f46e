"""CPU checks of the CUDA sanitizer-mutant batch (reference_kernels/mutants/cuda/sanitizer_batch.py).

The GPU test (tests/gpu/test_cuda_kernels_gpu.py) runs the generated module under ``pytest --pipecheck``
and judges the run with ``evaluate``. Here: the generated module collects and skips without a GPU,
``evaluate`` accepts a report built by pipecheck's own parser and runner from real compute-sanitizer
output and rejects wrong ones, and the whole batch goes through the real plugin end to end with the
fake compute-sanitizer (tests/data/sanitizer/fake_compute_sanitizer.py) in a dry run.
"""

from __future__ import annotations

import copy
import json
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_pipecheck.results import CheckResult, Verdict
from pytest_pipecheck.sanitizer import tool_outcomes
from pytest_pipecheck.sanitizer.parse import parse_text
from reference_kernels.cuda.launch import SANITIZER_EXCLUSIONS
from reference_kernels.mutants.cuda import MUTANTS
from reference_kernels.mutants.cuda.sanitizer_batch import (
    TOOLS,
    Case,
    cases,
    evaluate,
    module_source,
    not_judged,
    own_source_refs,
)

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

DATA = Path(__file__).resolve().parents[1] / "data" / "sanitizer"
MODULE = "test_batch.py"
# real outputs (tests/data/sanitizer/README.md); the k3 racecheck one is this kernel's own, captured on a GPU
RACE_K3 = "racecheck_k3_missing_wait_prior_analysis.txt"
MEMCHECK = "memcheck_oob_x.txt"  # "at tail_oob+0x90 in <sha1>.cubin.cu:21": a CuPy NVRTC source
SYNCCHECK = "synccheck_divergent_hostbt.txt"  # no line info: "at divergent+0x70"
SOURCE_OF = {"racecheck": RACE_K3, "memcheck": MEMCHECK, "synccheck": SYNCCHECK}


def _with_line_info(text: str, entry: str) -> str:
    """The synccheck sample as the k1 mutant with --generate-line-info reports it: the renamed entry,
    and its line in the kernel's source as CuPy's NVRTC names it. Only the function and location change."""
    return text.replace("at divergent+0x70",
                        f"at {entry}+0x70 in a88c317b36ea7fb35b334988f71da0b06f1fa9bb.cubin.cu:60")


def _sample(tool: str, case: Case) -> str:
    text = (DATA / SOURCE_OF[tool]).read_text()
    if tool == "synccheck" and case.mutant is not None:
        text = _with_line_info(text, case.mutant.entry)
    return text


def _result(case: Case, tool: str, verdict: Verdict, summary: str, text: str = "", **kw: Any) -> dict[str, Any]:
    """A result as the plugin records it (tool_outcomes.TestOutcome -> CheckResult -> JSON)."""
    findings = [f for f in parse_text(text, tool).findings if f.is_hazard] if text else []
    out = tool_outcomes.TestOutcome(f"{MODULE}::{case.test}", tool, verdict, summary or tool_outcomes._describe_findings(findings),
                      findings=findings, output=text[-6000:], **kw)
    return CheckResult(f"sanitizer:{tool}", verdict, out.summary,
                       kernel=next((f.kernel for f in findings if f.kernel), None),
                       details=out.details(), nodeid=out.nodeid).to_json()


def _recorded() -> tuple[dict[str, Any], str]:
    """The JSON report and -rA lines of a batch run that went as it must, from real sample outputs."""
    results: list[dict[str, Any]] = []
    lines = []
    for c in cases():
        for tool in c.tools:
            if c.mutant is None:
                results.append(_result(c, tool, Verdict.PASS, "0 hazards"))
            elif c.hang:
                results.append(_result(c, tool, Verdict.FAIL, "hang: killed by the watchdog",
                                       (DATA / "racecheck_deadlock_timeout.txt").read_text(),
                                       reason="no PIPECHECK-END within 30 s (sanitizer_timeout): hang or deadlock"))
            else:
                results.append(_result(c, tool, Verdict.FAIL, "", _sample(tool, c)))
        lines.append(f"{'PASSED' if c.mutant is None else 'FAILED'} {MODULE}::{c.test}")
    return {"results": results}, "\n".join(lines)


def test_cases_cover_every_sanitizer_and_hang_mutant() -> None:
    cs = cases()
    names = {c.name for c in cs if c.mutant is not None}
    skipped = not_judged()  # under a compute-sanitizer before 2026.4.0 or none: the k4 mutant
    # a mutant judged elsewhere says where (a_rows_unguarded: under the default tools, next to its twins)
    elsewhere = {n for n, m in MUTANTS.items() if m.extra.get("outside_batch")}
    assert elsewhere == {"a_rows_unguarded"} and all("tests/gpu/" in MUTANTS[n].extra["outside_batch"] for n in elsewhere)
    assert names == {n for n, m in MUTANTS.items() if m.check.startswith("sanitizer:") or m.check == "hang"} - set(
        skipped) - elsewhere
    assert all(MUTANTS[n].base in SANITIZER_EXCLUSIONS and "synccheck excluded" in why for n, why in skipped.items())
    assert TOOLS == ("racecheck", "synccheck", "memcheck")
    controls = [c for c in cs if c.mutant is None]
    assert {c.kernel for c in controls} == {c.kernel for c in cs if c.mutant is not None} | {
        MUTANTS[n].base for n in skipped}
    # every tool the mutants use, minus a kernel's reviewed exclusions (k5: synccheck)
    assert all(c.tools == tuple(t for t in TOOLS if t not in SANITIZER_EXCLUSIONS.get(c.kernel, {}))
               for c in controls)
    # before compute-sanitizer 2026.4.0 (or none found: the CPU tier) k5 runs without synccheck; from
    # 2026.4.0 on nothing is excluded
    k5 = next(c for c in controls if c.kernel == "k5_warp_specialized").tools
    assert k5 == (("racecheck", "memcheck") if "k5_warp_specialized" in SANITIZER_EXCLUSIONS else TOOLS)
    for c in cs:
        if c.mutant is not None and not c.hang:
            assert c.tools == (c.mutant.check.split(":")[1],)
    hang = next(c for c in cs if c.hang)
    assert hang.timeout == 30.0 and hang.tools == ("racecheck",)
    # racecheck tests run after the hang, in a fresh child
    assert any("racecheck" in c.tools and c.mutant for c in cs[cs.index(hang) + 1:])


def test_generated_module_collects_and_skips_without_gpu(pytester: pytest.Pytester,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIPECHECK_NO_GPU", "1")
    src = module_source()
    compile(src, MODULE, "exec")
    assert 'sanitizer="racecheck", sanitizer_timeout=30.0' in src
    pytester.makepyfile(test_batch=src)
    result = pytester.runpytest_subprocess("--pipecheck", f"--pipecheck-sanitizer={','.join(TOOLS)}",
                                           "-p", "no:cacheprovider", "-rA", "-v")
    # every test skipped: under --pipecheck a run that checked nothing ends with a failure of its own
    result.assert_outcomes(skipped=len(cases()), failed=1)
    result.stdout.fnmatch_lines(["*needs a CUDA GPU*", "FAILED pipecheck::nothing_checked - pipecheck: nothing was*"])
    text = result.stdout.str()
    for c in cases():
        assert f"{MODULE}::{c.test} SKIPPED" in text, c.test


def test_evaluate_accepts_a_run_that_shows_every_bug() -> None:
    report, output = _recorded()
    assert evaluate(report, output) == []
    by = {(r["nodeid"].rsplit("::")[-1], r["check"]): r for r in report["results"]}
    race = by[("test_mutant_missing_wait_prior", "sanitizer:racecheck")]
    # what the real k3 report gives: RAW races, the cp.async write vs an ldmatrix read in gemm_common.cuh
    assert race["summary"].startswith("4 RAW races in nvcuda::"), race["summary"]
    assert "(cuda_pipeline_helpers.h:203/gemm_common.cuh:95) and 1 more" in race["summary"]
    assert own_source_refs(race["details"]["findings"][0], "k3_cp_async") == ["gemm_common.cuh:88"]


def _broken(edit: Any) -> list[str]:
    report, output = _recorded()
    report = copy.deepcopy(report)
    edit(report)
    return evaluate(report, output)


def _find(report: dict[str, Any], test: str, tool: str) -> dict[str, Any]:
    return next(r for r in report["results"] if r["nodeid"].endswith("::" + test) and r["check"] == f"sanitizer:{tool}")


def test_evaluate_rejects_what_the_gpu_run_must_not_show() -> None:
    def control_dirty(rep: dict[str, Any]) -> None:
        _find(rep, "test_control_k3_cp_async", "memcheck").update(verdict="error", summary="inconclusive")

    def mutant_missed(rep: dict[str, Any]) -> None:
        _find(rep, "test_mutant_unguarded_tail", "memcheck").update(verdict="pass", summary="0 hazards")

    def wrong_kind(rep: dict[str, Any]) -> None:
        r = _find(rep, "test_mutant_divergent_barrier", "synccheck")
        for f in r["details"]["findings"]:
            f["kind"] = "other"

    def not_in_kernel(rep: dict[str, Any]) -> None:
        r = _find(rep, "test_mutant_divergent_barrier", "synccheck")
        case = next(c for c in cases() if c.test == "test_mutant_divergent_barrier")
        plain = _result(case, "synccheck", Verdict.FAIL, "", (DATA / SYNCCHECK).read_text())
        r.update(plain)  # the sample without line info: "at divergent+0x70", no file

    def hang_not_hang(rep: dict[str, Any]) -> None:
        _find(rep, "test_mutant_consumer_skips_wait", "racecheck").update(summary="inconclusive")

    def after_hang_lost(rep: dict[str, Any]) -> None:
        _find(rep, "test_mutant_stages_exceed_buffers", "racecheck").update(
            verdict="error", summary="inconclusive: child made no progress")

    def extra_tool(rep: dict[str, Any]) -> None:
        rep["results"].append(dict(_find(rep, "test_mutant_unguarded_tail", "memcheck"), check="sanitizer:racecheck"))

    expected = {
        control_dirty: "test_control_k3_cp_async sanitizer:memcheck: control not clean",
        mutant_missed: "test_mutant_unguarded_tail sanitizer:memcheck: mutant not caught",
        wrong_kind: "test_mutant_divergent_barrier sanitizer:synccheck: no barrier finding",
        not_in_kernel: "test_mutant_divergent_barrier sanitizer:synccheck: no barrier finding points into",
        hang_not_hang: "test_mutant_consumer_skips_wait sanitizer:racecheck: expected a hang",
        after_hang_lost: "racecheck tests after the hang got no verdict: ['test_mutant_stages_exceed_buffers']",
        extra_tool: "test_mutant_unguarded_tail: sanitizer results for ['memcheck', 'racecheck']",
    }
    for edit, needle in expected.items():
        problems = _broken(edit)
        assert any(needle in p for p in problems), (edit.__name__, problems)
    report, output = _recorded()
    problems = evaluate(report, output.replace("FAILED test_batch.py::test_mutant_unguarded_tail", ""))
    assert problems == ["test_mutant_unguarded_tail: pytest outcome missing, expected FAILED"]
    assert any("no result" in p or "sanitizer results for []" in p for p in evaluate({"results": []}, output))


def test_batch_through_the_plugin_with_the_fake_sanitizer(pytester: pytest.Pytester, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The generated module (dry run: nothing is launched) through the real plugin, batching, watchdog
    and JSON report, with recorded findings injected into each mutant's test by the fake sanitizer."""
    wrapper = tmp_path / "bin" / "compute-sanitizer"
    wrapper.parent.mkdir()
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {DATA / 'fake_compute_sanitizer.py'} \"$@\"\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PIPECHECK_COMPUTE_SANITIZER", str(wrapper))
    monkeypatch.delenv("PIPECHECK_NO_GPU", raising=False)
    # the fake prints a sample file's records; a synccheck one gets its mutant's name and line
    sync = DATA / SYNCCHECK
    synccheck: dict[str, str] = {}
    for n, m in MUTANTS.items():
        if m.check == "sanitizer:synccheck":
            local = tmp_path / f"synccheck_{n}_line_info.txt"
            local.write_text(_with_line_info(sync.read_text(), m.entry))
            synccheck[f"test_mutant_{n}"] = str(local)
    assert set(synccheck) == {"test_mutant_divergent_barrier", "test_mutant_pipeline_wait_half_warp_barrier"}
    races = {f"test_mutant_{n}": RACE_K3 for n, m in MUTANTS.items() if m.check == "sanitizer:racecheck"}
    plan = {
        "racecheck": {"inject": races, "hang": "test_mutant_consumer_skips_wait"},
        "synccheck": {"inject": synccheck},
        "memcheck": {"inject": {"test_mutant_unguarded_tail": MEMCHECK}},
    }
    monkeypatch.setenv("FAKE_SANITIZER_PLAN", json.dumps(plan))
    pytester.makeconftest('''
import pytest_pipecheck.device as _device
from pytest_pipecheck.device import DeviceInfo

def _fake_device():
    return DeviceInfo(0, "Fake H100", "9.0", 132, 81559, "580.00", "GPU-fake-0000"), ""
_device.detect_device = _fake_device
''')
    pytester.makepyfile(test_batch=module_source(dry_run=True, hang_timeout=3.0))
    report_path = tmp_path / "report.json"
    result = pytester.runpytest_subprocess("--pipecheck", f"--pipecheck-sanitizer={','.join(TOOLS)}",
                                           "-p", "no:cacheprovider", "-rA", f"--pipecheck-json={report_path}",
                                           timeout=240)
    text = result.stdout.str()
    report = json.loads(report_path.read_text())
    problems = evaluate(report, text, case_list=cases(hang_timeout=3.0))
    assert problems == [], "\n".join(problems) + "\n" + text[-6000:]
    result.assert_outcomes(passed=sum(c.mutant is None for c in cases()),
                           failed=sum(c.mutant is not None for c in cases()))


def test_exclusions_are_keyed_to_the_compute_sanitizer_version() -> None:
    """synccheck stays off for the cuda::pipeline kernels only under a compute-sanitizer older than the one
    they were measured clean with (2026.4.0), or one whose version is unknown; the reason names it."""
    from reference_kernels.cuda.launch import sanitizer_exclusions

    assert sanitizer_exclusions((2026, 4)) == {} and sanitizer_exclusions((2027, 1, 0)) == {}
    old = sanitizer_exclusions((2025, 3, 1))
    assert set(old) == {"k4_cuda_pipeline", "k5_warp_specialized", "k6_loader_compute_storer"}
    assert all(set(v) == {"synccheck"} for v in old.values())
    assert "compute-sanitizer 2025.3.1" in old["k4_cuda_pipeline"]["synccheck"]
    assert "unknown version" in sanitizer_exclusions(None)["k5_warp_specialized"]["synccheck"]
