"""The parser on every recorded compute-sanitizer output in tests/data/sanitizer (README.md there)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_pipecheck.sanitizer.launches import KernelFacts, kernel_facts
from pytest_pipecheck.sanitizer.parse import (
    LAUNCH,
    Segment,
    group_findings,
    merge_xml,
    parse_text,
    parse_xml,
    split_markers,
)
from pytest_pipecheck.sanitizer.suppressions import SuppressionError, load_suppressions

DATA = Path(__file__).resolve().parents[1] / "data" / "sanitizer"


def _read(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def test_race_analysis_text_and_xml() -> None:
    p = parse_text(_read("racecheck_race_analysis.txt"), "racecheck")
    assert p.summary.seen and p.summary.errors == 1 and p.summary.warnings == 0
    [f] = p.findings
    assert (f.kind, f.hazard, f.severity, f.kernel, f.line, f.second_line, f.count) == (
        "race", "RAW", "error", "racy_tile", 5, 6, 1024)
    [x] = parse_xml(_read("racecheck_race_analysis.xml"), "racecheck")
    assert (x.kind, x.hazard, x.kernel, x.line, x.second_line, x.count) == ("race", "RAW", "racy_tile", 5, 6, 1024)


@pytest.mark.parametrize("name, errors, warnings, shown, kernel, line", [
    ("racecheck_race_hazard", 32, 992, 3, "racy_tile", 5),
    ("racecheck_cpasync_all", 33, 992, 3, "cpasync_nowait", 13),
])
def test_hazard_reports(name: str, errors: int, warnings: int, shown: int, kernel: str, line: int) -> None:
    p = parse_text(_read(name + ".txt"), "racecheck")
    assert (p.summary.errors, p.summary.warnings, p.summary.hazards_displayed) == (errors, warnings, shown)
    assert len(p.findings) == shown
    for f in p.findings:
        assert (f.kind, f.hazard, f.space, f.block, f.kernel, f.line) == ("race", "RAW", "shared", "(0,0,0)",
                                                                         kernel, line)
        assert f.thread and f.second_thread and f.thread != f.second_thread
    xml = parse_xml(_read(name + ".xml"), "racecheck")
    assert [(x.kernel, x.line, x.thread) for x in xml] == [(f.kernel, f.line, f.thread) for f in p.findings]


def test_cpasync_names_the_kernel_not_the_helper() -> None:
    f = parse_text(_read("racecheck_cpasync_all.txt"), "racecheck").findings[0]
    assert f.kernel == "cpasync_nowait" and f.second_file == "cuda_pipeline_helpers.h" and f.second_line == 190
    assert f.thread == "(128,0,0)"  # the reading thread, in the kernel
    groups = group_findings(parse_text(_read("racecheck_cpasync_all.txt"), "racecheck").findings)
    assert len(groups) == 1 and groups[0]["records"] == 3


def test_cpasync_without_line_info_and_host_backtrace() -> None:
    p = parse_text(_read("racecheck_cpasync_nowait_analysis_hostbt.txt"), "racecheck")
    assert len(p.findings) == 5 and p.summary.errors == 33
    assert all(f.kernel == "cpasync" and f.line is None and f.hazard == "RAW" for f in p.findings)
    assert all("Host Frame" in f.raw for f in p.findings)


def test_deadlock_has_no_summary() -> None:
    p = parse_text(_read("racecheck_deadlock_timeout.txt"), "racecheck")
    [f] = p.findings
    assert (f.kind, f.kernel, f.block) == ("deadlock", "ws_sum", "(0,0,0)")
    assert not p.summary.seen  # the process hung: inconclusive without the watchdog


@pytest.mark.parametrize("name, tool", [("racecheck_triton_ws_clean.txt", "racecheck"),
                                        ("synccheck_triton_ws_clean.txt", "synccheck"),
                                        ("memcheck_oob_hidden_by_pool.txt", "memcheck")])
def test_clean_outputs(name: str, tool: str) -> None:
    p = parse_text(_read(name), tool)
    assert p.findings == [] and p.summary.seen and p.summary.errors == 0 and not p.target_error


def test_synccheck_divergent_barrier() -> None:
    p = parse_text(_read("synccheck_divergent_hostbt.txt"), "synccheck")
    assert len(p.findings) == 16 == p.summary.errors
    assert {f.kind for f in p.findings} == {"barrier"} and {f.kernel for f in p.findings} == {"divergent"}
    assert sorted(int(f.thread.strip("()").split(",")[0]) for f in p.findings if f.thread) == list(range(16))
    assert p.target_error


def test_memcheck_oob() -> None:
    p = parse_text(_read("memcheck_oob_x.txt"), "memcheck")
    assert p.summary.errors == 41 and p.summary.not_printed == 38 and p.target_error
    assert [(f.kind, f.access, f.space, f.kernel, f.line, f.block) for f in p.findings] == [
        ("invalid_access", "read", "global", "tail_oob", 21, "(1,0,0)")] * 3
    xml = parse_xml(_read("memcheck_oob_x.xml"), "memcheck")
    assert [(x.kind, x.access, x.line) for x in xml] == [("invalid_access", "read", 21)] * 3
    q = parse_text(_read("memcheck_oob_nopool.txt"), "memcheck")
    assert q.summary.errors == 39 and all(f.label() == "invalid __global__ write" for f in q.findings)


def test_initcheck_uninitialized() -> None:
    p = parse_text(_read("initcheck_uninit.txt"), "initcheck")
    assert p.summary.errors == 256 and p.summary.not_printed == 251
    assert len(p.findings) == 5 and {f.kind for f in p.findings} == {"uninit_read"}
    assert {f.kernel for f in p.findings} == {"uninit_read"}


def test_batched_markers_attribute_the_race() -> None:
    text = _read("racecheck_batched_pytest_markers.txt")
    split = split_markers(text)
    assert len(split.order) == 7 and split.open is None
    with_findings = [n for n in split.order if parse_text(split.segments[n].text, "racecheck").findings]
    assert with_findings == ["test_attr.py::test_racy"]
    assert parse_text(split.outside_text).findings == []
    assert parse_text(split.outside_text).summary.errors == 1


def test_markers_open_segment_and_failure_line() -> None:
    text = ("PIPECHECK-BEGIN t.py::a\n.PIPECHECK-FAILURE t.py::a \"boom\"\nPIPECHECK-END t.py::a failed\n"
            "PIPECHECK-BEGIN t.py::b[x y]\n========= Invalid __shared__ write of size 4 bytes\n")
    split = split_markers(text)
    assert split.segments["t.py::a"].outcome == "failed" and split.segments["t.py::a"].failure == "boom"
    assert split.open == "t.py::b[x y]" and split.segments["t.py::b[x y]"].outcome is None
    [f] = parse_text(split.segments["t.py::b[x y]"].text).findings
    assert f.label() == "invalid __shared__ write"


def test_launch_lines_go_with_their_test() -> None:
    """A compute-sanitizer child prints a LAUNCH line (sanitizer/launches.py) at a test's first launch of each
    Triton kernel; the parent reads them back per test, and no line it cannot read passes for a fact."""
    ws = KernelFacts("k", True, 1024, 12, 8, "k.py", 3, 1020)
    text = (f"{LAUNCH}{json.dumps(KernelFacts('before').to_json())}\n"
            "PIPECHECK-BEGIN t.py::a\n"
            f"{LAUNCH}{json.dumps(ws.to_json())}\n"
            "========= Error: Race reported between Read access at k+0x100 in k.py:3\n"
            "=========     and Write access at k+0x1040 in k.py:9 [2 hazards]\n"
            "PIPECHECK-END t.py::a passed\n"
            "PIPECHECK-BEGIN t.py::b[x y]\n"
            f"{LAUNCH}{{not json\n"
            "PIPECHECK-END t.py::b[x y] passed\n"
            "PIPECHECK-BEGIN t.py::c\n"
            "PIPECHECK-END t.py::c passed\n")
    split = split_markers(text)
    a = split.segments["t.py::a"]
    assert kernel_facts(a) == [ws] and len(parse_text(a.text, "racecheck").findings) == 1
    assert any(LAUNCH in ln for ln in a.lines)  # the test's output shows what it launched
    assert kernel_facts(split.segments["t.py::b[x y]"]) is None  # garbled: what it launched is not known
    assert kernel_facts(split.segments["t.py::c"]) == []  # launched no Triton kernel
    assert kernel_facts(None) is None
    assert any(LAUNCH in ln for ln in split.outside)  # outside every test: no test's fact
    assert kernel_facts(Segment("t", launches=[{"warp_specialized": True}])) is None  # no name


def test_merge_xml_fills_missing_line_info_only_when_lists_agree() -> None:
    text = parse_text(_read("racecheck_race_hazard.txt"), "racecheck").findings
    for f in text:
        f.line = None
    merged = merge_xml(text, parse_xml(_read("racecheck_race_hazard.xml"), "racecheck"))
    assert [f.line for f in merged] == [5, 5, 5]
    short = parse_text(_read("racecheck_race_hazard.txt"), "racecheck").findings[:1]
    short[0].line = None
    assert merge_xml(short, parse_xml(_read("racecheck_race_hazard.xml")))[0].line is None


def test_malformed_xml_is_empty() -> None:
    assert parse_xml("<ComputeSanitizerOutput><record>") == []


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(
    st.text(max_size=80),
    st.sampled_from(["========= Error: Race reported between Write access at k+0x1",
                     "=========     and Read access at k+0x2 [x hazards]",
                     "=========     Write Thread (1,0,0) at +0x in :",
                     "========= Invalid __global__ write", "=========     by thread (", "=========     at ",
                     "========= ERROR SUMMARY: 12 errors", "========= RACECHECK SUMMARY: 1 hazards displayed (",
                     "PIPECHECK-BEGIN ", "PIPECHECK-END x", "PIPECHECK-FAILURE a {", "========= "]),
), max_size=30))
def test_fuzz_never_raises(lines: list[str]) -> None:
    text = "\n".join(lines)
    p = parse_text(text, "racecheck")
    assert all(f.kind in ("race", "barrier", "invalid_access", "uninit_read", "leak", "deadlock", "api_error",
                          "tool_error", "other") for f in p.findings)
    split_markers(text)
    group_findings(p.findings)
    parse_xml(text)


def test_suppressions_validation(tmp_path: Path) -> None:
    good = tmp_path / "s.xml"
    good.write_text("<ComputeSanitizerOutput><!-- known Triton shuffle false positive -->"
                    "<record><kind>Hazard</kind><what><text>Potential RAW hazard detected</text></what></record>"
                    "</ComputeSanitizerOutput>")
    [s] = load_suppressions(str(good))
    assert (s.kind, s.reason) == ("Hazard", "known Triton shuffle false positive")
    bad = tmp_path / "bad.xml"
    for content, message in [("<oops", "not valid XML"), ("<Other/>", "root element"),
                             ("<ComputeSanitizerOutput/>", "holds no <record>"),
                             ("<ComputeSanitizerOutput><record/></ComputeSanitizerOutput>", "has no <kind>")]:
        bad.write_text(content)
        with pytest.raises(SuppressionError, match=message):
            load_suppressions(str(bad), "ini")
    with pytest.raises(SuppressionError, match="does not exist"):
        load_suppressions(str(tmp_path / "none.xml"))


# --------------------------------------------------------------------------- reconciliation (docs/verdicts.md)

from pytest_pipecheck.sanitizer.parse import reconcile, xml_record_count  # noqa: E402


def _sample(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


@pytest.mark.parametrize("name,tool,xml", [
    ("racecheck_race_analysis.txt", "racecheck", "racecheck_race_analysis.xml"),
    ("racecheck_triton_ws_clean.txt", "racecheck", None),
    ("synccheck_divergent_hostbt.txt", "synccheck", None),
    ("synccheck_triton_ws_clean.txt", "synccheck", None),
])
def test_real_complete_outputs_reconcile(name: str, tool: str, xml: str | None) -> None:
    rec = reconcile(parse_text(_sample(name), tool), tool, print_limit=1000, xml=_sample(xml) if xml else None)
    assert rec.ok, rec.problems


@pytest.mark.parametrize("name,tool,limit,expect", [
    ("memcheck_oob_x.txt", "memcheck", 3, "did not print 38 of the 41 errors"),
    ("initcheck_uninit.txt", "initcheck", 5, "did not print 251 of the 256 errors"),
    ("racecheck_race_hazard.txt", "racecheck", 3, "as many as --print-limit 3 allows"),
])
def test_real_outputs_cut_by_the_print_limit_do_not_reconcile(name: str, tool: str, limit: int, expect: str) -> None:
    rec = reconcile(parse_text(_sample(name), tool), tool, print_limit=limit)
    assert not rec.ok and any(expect in p for p in rec.problems), rec.problems


def test_damaged_records_and_xml_do_not_reconcile() -> None:
    clean = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 2 errors\n"
    rec = reconcile(parse_text(clean, "memcheck"), "memcheck", xml="<ComputeSanitizerOutput/>")
    assert any("counts 2 printed records, pipecheck parsed 0" in p for p in rec.problems)
    ok = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
    assert reconcile(parse_text(ok, "memcheck"), "memcheck", xml="<ComputeSanitizerOutput/>").ok
    for xml, words in (("", "missing or empty"), ("<?xml version='1.0'?>\n<ComputeSanitizerOutput>\n  <rec",
                                                  "truncated"),
                       ("<ComputeSanitizerOutput><record/></ComputeSanitizerOutput>", "holds 1 records")):
        rec = reconcile(parse_text(ok, "memcheck"), "memcheck", xml=xml)
        assert any(words in p for p in rec.problems), (xml, rec.problems)
    assert xml_record_count(_sample("memcheck_oob_x.xml")) == 3
    assert reconcile(parse_text("no sanitizer output", "memcheck"), "memcheck").problems == [
        "no compute-sanitizer summary line (the run did not finish)"]


def test_unknown_and_garbled_records_are_findings_not_dropped() -> None:
    text = ("========= COMPUTE-SANITIZER\n"
            "========= Warp Misaligned Address\n=========     at k+0x30 in k.cu:7\n========= \n"
            "=========     at racy+0x90 in r.cu:21\n"  # a continuation whose head was lost
            "========= =========== FAILURES ===========\n"
            "=========================== short test summary info ============================\n"
            "========= ERROR SUMMARY: 2 errors\n")
    p = parse_text(text, "memcheck")
    assert [(f.kind, f.where) for f in p.findings] == [("other", "k.cu:7"), ("other", "r.cu:21")]
    assert p.findings[0].label() == "Warp Misaligned Address"
    assert reconcile(p, "memcheck").ok
