"""Triton's ConSan as a sanitizer tool, without a GPU: its selection, its skip reasons, and the
verification that a launched kernel really was instrumented, on kernels compiled ahead of time with
and without the knob (pytest_pipecheck/sanitizer/consan.py)."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_pipecheck.config import ConfigError, apply_marker, resolve
from pytest_pipecheck.results import Verdict
from pytest_pipecheck.sanitizer import consan
from pytest_pipecheck.sanitizer.parse import Segment

ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- selection


def test_consan_is_selected_like_a_tool_from_every_layer() -> None:
    assert resolve({}, {"sanitizer": "consan"}).sanitizer == ("consan",)
    assert resolve({"sanitizer": "racecheck,consan"}, {}).sanitizer == ("racecheck", "consan")
    run = resolve({}, {"sanitizer": "+consan"})
    assert run.sanitizer == ("racecheck", "synccheck", "memcheck", "consan")
    assert apply_marker(run, {"sanitizer": "-consan"}, "t").sanitizer == ("racecheck", "synccheck", "memcheck")
    assert apply_marker(resolve({}, {}), {"sanitizer": "+consan"}, "t").sanitizer == (
        "racecheck", "synccheck", "memcheck", "consan")
    assert apply_marker(resolve({}, {}), {"sanitizer": ["consan"]}, "t").sanitizer == ("consan",)


def test_all_means_the_compute_sanitizer_tools_and_consan_is_named_on_its_own() -> None:
    four = ("racecheck", "synccheck", "memcheck", "initcheck")
    assert resolve({}, {"sanitizer": "all"}).sanitizer == four
    assert resolve({}, {"sanitizer": "all,consan"}).sanitizer == (*four, "consan")
    assert resolve({}, {"sanitizer": "+all"}).sanitizer == four


@pytest.mark.parametrize("raw, message", [
    ("consann", "did you mean 'consan'"),
    ("+consann", "did you mean '+consan'"),
    ("all,consann", "names unknown 'consann'"),
])
def test_misspelled_consan_is_an_error_naming_it(raw: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        resolve({}, {"sanitizer": raw})


def test_the_check_is_registered() -> None:
    from pytest_pipecheck.contract import is_registered, selection_of

    assert is_registered("sanitizer:consan") and selection_of("sanitizer:consan") == "sanitizer"


# --------------------------------------------------------------------------- skip reasons


def test_unavailable_on_gpus_older_than_sm90() -> None:
    why = consan.unavailable_reason("8.0")
    assert why is not None and "9.0 or newer" in why and "8.0" in why
    assert consan.unavailable_reason("9.0") is None  # the installed Triton has the knob and the hooks
    assert consan.unavailable_reason("10.0") is None


def test_unavailable_without_the_knob(monkeypatch: pytest.MonkeyPatch) -> None:
    from triton import knobs

    monkeypatch.delattr(type(knobs.compilation), "instrumentation_mode")
    why = consan.unavailable_reason("9.0")
    assert why is not None and "no instrumentation knob" in why and consan.KNOB_ENV in why


def test_unavailable_without_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "triton", None)  # import triton raises ImportError
    why = consan.unavailable_reason("9.0")
    assert why is not None and "Triton is not importable" in why


# --------------------------------------------------------------------------- verification

@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory, consan_aot: Any) -> dict[str, dict[str, Any]]:
    if importlib.util.find_spec("triton") is None:
        pytest.skip("needs Triton")
    tmp = tmp_path_factory.mktemp("consan")
    aot = consan_aot
    return {"consan": aot.aot_groups(tmp / "consan", "consan"), "plain": aot.aot_groups(tmp / "plain", "")}


@pytest.mark.parametrize("arch", ["90", "100"])
def test_a_kernel_compiled_under_the_knob_is_instrumented(compiled: dict[str, Any], arch: str) -> None:
    entry = compiled["consan"][arch]
    ev = consan.evidence_from_group(entry["name"], entry["group"])
    assert ev.compiled_with_consan and ev.checks >= 10 and not ev.problem, ev
    assert ev.instrumented


@pytest.mark.parametrize("arch", ["90", "100"])
def test_a_kernel_compiled_without_the_knob_is_not(compiled: dict[str, Any], arch: str) -> None:
    entry = compiled["plain"][arch]
    ev = consan.evidence_from_group(entry["name"], entry["group"])
    assert ev.mode == "" and ev.checks == 0 and not ev.instrumented


def test_the_cache_key_includes_the_knob(compiled: dict[str, Any]) -> None:
    """Both compiles name the same kernel; the knob gives it another cache entry (another hash)."""
    a, b = compiled["consan"]["90"]["group"], compiled["plain"]["90"]["group"]
    assert {Path(p).parent.name for p in a.values()}.isdisjoint({Path(p).parent.name for p in b.values()})


def test_the_knob_in_metadata_is_not_enough(compiled: dict[str, Any], tmp_path: Path) -> None:
    """A binary whose metadata claims ConSan but whose cubin has no helper is not instrumented; the
    helper names without the metadata's mode are not either."""
    inst, plain = compiled["consan"]["90"]["group"], compiled["plain"]["90"]["group"]
    cubin = next(p for n, p in plain.items() if n.endswith(".cubin"))
    meta = json.loads(Path(next(p for n, p in inst.items() if n.endswith(".json") and not n.startswith("__grp__")))
                      .read_text())
    ev = consan.evidence_from_binary("k", meta, Path(cubin).read_bytes())
    assert ev.compiled_with_consan and ev.checks == 0 and not ev.instrumented
    inst_cubin = Path(next(p for n, p in inst.items() if n.endswith(".cubin"))).read_bytes()
    ev = consan.evidence_from_binary("k", {"instrumentation_mode": ""}, inst_cubin)
    assert ev.checks > 0 and not ev.instrumented
    missing = consan.evidence_from_group("k", {"k.cubin": str(tmp_path / "gone.cubin")})
    assert missing.problem and not missing.instrumented


def _record(*kernels: consan.KernelEvidence) -> dict[str, Any]:
    return {"triton": "3.6.0", "knob": "consan", "kernels": [{**k.to_json(), "launches": 1} for k in kernels]}


def test_verdicts_from_what_a_test_launched() -> None:
    good = consan.KernelEvidence("gemm", "consan", 97)
    bare = consan.KernelEvidence("add", "consan", 0)
    stale = consan.KernelEvidence("old", "", 0)
    verdict, summary, _ = consan.verdict_from_record(_record(good, bare))
    assert verdict == Verdict.PASS and "instrumented: gemm (97 ConSan helpers)" in summary and "1 kernel(s)" in summary
    verdict, summary, reason = consan.verdict_from_record(_record())
    assert verdict == Verdict.SKIP and "no Triton kernel launched" in summary and "CUDA kernels" in reason
    verdict, summary, reason = consan.verdict_from_record(_record(bare))
    assert verdict == Verdict.SKIP and "nothing for ConSan to check" in summary and "add" in reason
    verdict, summary, reason = consan.verdict_from_record(_record(good, stale))
    assert verdict == Verdict.ERROR and "old was not compiled with ConSan" in summary and "not a pass" in reason
    assert consan.verdict_from_record(None)[0] == Verdict.ERROR
    assert consan.verdict_from_record({"problem": "no triton"})[0] == Verdict.ERROR


def test_records_and_violations_are_read_from_the_child_output() -> None:
    seg = Segment("t", ["noise", consan.RECORD + "t " + json.dumps(_record(consan.KernelEvidence("k", "consan", 3)))])
    assert consan.parse_records(seg)["kernels"][0]["checks"] == 3  # type: ignore[index]
    assert consan.parse_records(Segment("t", ["x"])) is None
    assert "garbled" in (consan.parse_records(Segment("t", [consan.RECORD + "t {nope"])) or {})
    line = ("/src/k.py:12: overwrite_in_flight: block: [0,0,0], thread: [0,0,0] Assertion `Accessing buffer with "
            "pending access. Pending access type: async_copy_global_to_shared` failed.")
    assert consan.find_violation("a\n" + line + "\nb") == line.strip()
    assert consan.find_violation("Assertion `x > 0` failed.") is None  # a user's own device_assert


# --------------------------------------------------------------------------- the child's recorder


def test_recorder_follows_triton_hooks(compiled: dict[str, Any]) -> None:
    """The recorder on Triton's own hook chains: a load gives the evidence, a launch (looked up by its
    CUfunction) attributes it to the running test; a launch whose load it never saw is unverified."""
    from triton import knobs

    rec = consan.Recorder()
    try:
        inst, plain = compiled["consan"]["90"], compiled["plain"]["90"]
        knobs.runtime.kernel_load_end_hook(None, 111, inst["name"], inst["group"], "h1")
        knobs.runtime.kernel_load_end_hook(None, 222, plain["name"], plain["group"], "h2")
        rec.start_test()
        for _ in range(3):
            knobs.runtime.launch_enter_hook({"name": inst["name"], "function": 111, "stream": 0})
        first = rec.record()
        rec.start_test()
        knobs.runtime.launch_enter_hook({"name": plain["name"], "function": 222, "stream": 0})
        knobs.runtime.launch_enter_hook({"name": "unseen", "function": 333, "stream": 0})
        second = rec.record()
    finally:
        rec.close()
    assert [k["launches"] for k in first["kernels"]] == [3]
    assert consan.verdict_from_record(first)[0] == Verdict.PASS
    assert consan.verdict_from_record(second)[0] == Verdict.ERROR
    unseen = next(k for k in second["kernels"] if k["name"] == "unseen")
    assert "unverified" in unseen["problem"]
    assert rec.on_load not in knobs.runtime.kernel_load_end_hook.calls  # closed: nothing left chained
