"""memcheck sees reads past a tensor: exact allocations in its children, and the tensor named in its verdict.

A guard band is valid memory to compute-sanitizer, so in a memcheck child every array is its own
allocation of exactly its view's extent (pytest_pipecheck/model/layouts.py ``placement(exact=True)``), and
the child prints each one's address range (``PIPECHECK-ALLOC``); the parent names, in each invalid access
that carries an address, the array it is past. The end-to-end run through the fake compute-sanitizer is
tests/plugin/test_sanitizer_memcheck_exact.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_pipecheck.model.layouts import placement
from pytest_pipecheck.results import Verdict
from pytest_pipecheck.sanitizer import tool_outcomes
from pytest_pipecheck.sanitizer.allocations import attribute
from pytest_pipecheck.sanitizer.parse import ALLOC, BEGIN, END, parse_text, parse_xml, split_markers

DATA = Path(__file__).resolve().parents[1] / "data" / "sanitizer"
# the recorded run: 200 floats at 0x7fcf52800400 (800 bytes), read 96 bytes past their end
X = {"name": "x", "start": 0x7FCF52800400, "bytes": 800, "itemsize": 4, "dtype": "float32", "shape": [200],
     "strides": [1], "offset": 0}


def test_memcheck_records_carry_address_size_and_nearest_allocation() -> None:
    first = parse_text((DATA / "memcheck_oob_x.txt").read_text(), "memcheck").findings[0]
    assert (first.kind, first.access, first.size, first.address, first.nearest) == (
        "invalid_access", "read", 4, 0x7FCF52800780, 0x7FCF52800400)
    xml = parse_xml((DATA / "memcheck_oob_x.xml").read_text(), "memcheck")[0]
    assert (xml.kind, xml.access, xml.size, xml.address) == ("invalid_access", "read", 4, 0x7FCF52800780)


def test_the_finding_names_the_tensor_it_reads_past() -> None:
    findings = parse_text((DATA / "memcheck_oob_x.txt").read_text(), "memcheck").findings
    other = {**X, "name": "w", "start": 0x7FCF52800800, "bytes": 64}
    attribute(findings, [X, other])
    f = findings[0]
    assert f.tensor == "past 'x'"
    # 0x780 - 0x720 = 96 bytes past the last float: element 224 of x by its unit stride
    assert f.tensor_note == "reads past 'x' (ends at 0x7fcf52800720, read at 0x7fcf52800720+96: x[224] by its strides)"
    out = tool_outcomes.TestOutcome("t.py::test_x", "memcheck", Verdict.FAIL, tool_outcomes._describe_findings(findings),
                             findings=findings)
    assert out.summary.startswith("3 invalid __global__ reads in tail_oob") and out.summary.endswith("past 'x'")
    assert "      reads past 'x' (ends at 0x7fcf52800720, read at 0x7fcf52800720+96" in tool_outcomes.format_failure(out)


def test_without_the_tools_nearest_allocation_the_closest_latest_one_is_named() -> None:
    [f] = parse_text("========= Invalid __global__ write of size 2 bytes\n=========     at k+0x10 in k.py:3\n"
                     "=========     by thread (0,0,0) in block (0,0,0)\n"
                     "=========     Access to 0x1000 is out of bounds\n=========\n", "memcheck").findings
    freed = {"name": "old", "start": 0xE00, "bytes": 0x100, "itemsize": 2}  # the same range, allocated before
    a = {"name": "a", "start": 0xE00, "bytes": 0x100, "itemsize": 2, "shape": [8, 100], "strides": [128, 1],
         "offset": 0}
    attribute([f], [freed, {"name": "far", "start": 0x100, "bytes": 16}, a, "not json"])
    assert f.tensor == "past 'a'"
    # 0x1000 - 0xE00 = 512 bytes = element 256 = row 2, column 0 by a's strides
    assert f.tensor_note == "writes past 'a' (ends at 0xf00, written at 0xf00+256: a[2, 0] by its strides)"
    f.address, f.tensor = 0xDF0, None
    attribute([f], [a])
    # 16 bytes before = 8 elements before a[0, 0]: column -8 of row 0 (not column 120 of row -1)
    assert f.tensor == "before 'a'"
    assert f.tensor_note == "writes before 'a' (starts at 0xe00, written at 0xe00-16: a[0, -8] by its strides)"


def test_the_cause_names_the_bound_the_access_misses_and_the_case() -> None:
    """The ``cause:`` line of an invalid access: the direction, the case the child launched (the allocation's
    label), and the dimension whose bound the index leaves; it goes first in the failure's message."""
    [f] = parse_text("========= Invalid __global__ read of size 2 bytes\n=========     at gemm+0x10 in g.py:9\n"
                     "=========     by thread (0,0,0) in block (2,0,0)\n"
                     "=========     Access to 0x1100 is out of bounds\n=========\n", "memcheck").findings
    a = {"name": "a", "start": 0x1000, "bytes": 0x100, "itemsize": 2, "shape": [2, 64], "strides": [64, 1],
         "offset": 0, "case": "gemm at M2-N8-K64", "dims": ["M", "K"]}
    attribute([f], [a])
    assert f.cause == ("a load past the end of 'a' at gemm at M2-N8-K64: a[2, 0] is M index 2 of 2, so the load is "
                       "not bounded (masked) on M (whether or not its value is used: a value masked after the load "
                       "was still read)")
    assert f.tensor_note.endswith(", at gemm at M2-N8-K64")
    out = tool_outcomes.TestOutcome("t.py::test_g", "memcheck", Verdict.FAIL, tool_outcomes._describe_findings([f]), findings=[f])
    assert tool_outcomes.format_failure(out).splitlines()[1] == f"  cause: {f.cause}"
    # before the start, on the inner dimension; without dims the dimensions are numbered
    f.address, f.cause = 0x0FFE, None
    attribute([f], [{k: v for k, v in a.items() if k not in ("dims", "case")}])
    assert f.cause.startswith("a load before the start of 'a': a[0, -1] is dim 1 index -1 of 64, so the load is "
                              "not bounded (masked) on dim 1 at 0")
    # a whole row before: the outer dimension
    f.address, f.cause = 0x1000 - 128, None
    attribute([f], [a])
    assert "a[-1, 0] is M index -1 of 2" in f.cause
    # an address inside a freed allocation says no cause: it is not a bound
    f.address, f.cause = 0x1010, None
    attribute([f], [a])
    assert f.tensor == "inside 'a'" and f.cause is None


def test_alloc_lines_go_with_their_test() -> None:
    payload = json.dumps(X)
    text = "\n".join([f"{BEGIN}t.py::test_a", f"{ALLOC}{payload}", "output", f"{END}t.py::test_a passed",
                      f"{ALLOC}{payload}"])
    split = split_markers(text)
    seg = split.segments["t.py::test_a"]
    assert seg.allocations == [X] and seg.lines == ["output"]


@pytest.mark.parametrize("kind, shape, before, total", [
    ("padded", (9, 40), 0, 8 * 64 + 40),      # rows 64 apart; ends just past the last element
    ("contiguous", (9, 40), 0, 9 * 40),
    ("offset", (9, 40), 1, 1 + 9 * 40),       # the misaligned base is what the layout is about
    ("sliced", (5,), 0, 9),                   # every other element: the last one ends it
    ("padded", (0, 40), 0, 0),
])
def test_exact_placement_has_no_guard_bands(kind: str, shape: tuple[int, ...], before: int, total: int) -> None:
    strides, first, size = placement(shape, (16, 16)[:len(shape)], kind, exact=True)
    assert (first, size) == (before, total)
    assert strides == placement(shape, (16, 16)[:len(shape)], kind)[0]


def test_alloc_guarded_allocates_exactly_while_switched() -> None:
    torch = pytest.importorskip("torch")
    from pytest_pipecheck.checks import arrays, wrapper

    seen: list[tuple[str, int, bool]] = []
    arrays.allocate_exactly(lambda name, buf, g: seen.append((name, buf.untyped_storage().nbytes(), g is not None)))
    try:
        g = arrays.alloc_guarded("a", (9, 40), "float16", role="input", values=torch.ones(9, 40), tiles=(16, 16))
        assert g.offset == 0 and g.strides == (64, 1) and g.buffer.numel() == 8 * 64 + 40
        assert bool((g.array == 1).all())
        with wrapper.PoisonAllocations(0, 16) as mode:
            y = torch.empty(3, 5)
        assert mode.allocations == [] and y.untyped_storage().nbytes() == 60  # torch's own, exact allocation
    finally:
        arrays.allocate_exactly(None)
    assert seen[0] == ("a", (8 * 64 + 40) * 2, True)
    assert seen[1][0].startswith("torch.empty at test_sanitizer_allocations.py:") and seen[1][1:] == (60, False)
    assert arrays.alloc_guarded("a", (9, 40), "float16", role="input", values=torch.ones(9, 40)).offset > 0


def _record(pc: int, address: int, thread: int, line: int = 40, kernel: str = "gemm") -> str:
    return (f"========= Invalid __global__ read of size 16 bytes\n"
            f"=========     at {kernel}+{pc:#x} in gemm.py:{line}\n"
            f"=========     by thread ({thread},0,0) in block (1,0,0)\n"
            f"=========     Access to {address:#x} is out of bounds\n=========\n")


# the Triton GEMM's layout on the device (docs/validation/2026-12-02-h200-1805.md): A ends at +0x80 of its
# page, B starts at +0x200; one load instruction's threads 0-7 read +0x80..+0xff and threads 8-15 read
# +0x100..+0x17f, the later ones nearer B's start than A's end
BASE = 0x7F0000000000
A = {"name": "a", "start": BASE - 0x100, "bytes": 0x180, "itemsize": 2, "shape": [3, 64], "strides": [64, 1],
     "offset": 0}
B = {"name": "b", "start": BASE + 0x200, "bytes": 0x400, "itemsize": 2, "shape": [8, 64], "strides": [64, 1],
     "offset": 0}


def test_the_records_of_one_load_instruction_name_one_tensor() -> None:
    text = "".join(_record(0x1A0, BASE + 0x80 + 16 * t, t) for t in range(16))
    findings = parse_text(text, "memcheck").findings
    assert {f.pc for f in findings} == {0x1A0}
    attribute(findings, [A, B])
    assert {f.tensor for f in findings} == {"past 'a'"}
    last = findings[-1]  # 0x17f is 0x81 before b's start and 0xff past a's end
    assert last.tensor_note.startswith("reads past 'a' (ends at ") and "before" not in last.cause
    assert last.cause.startswith("a load past the end of 'a': a[4, 56] is dim 0 index 4 of 3")
    # without the grouping the last threads would read as before 'b': each record alone
    alone = parse_text(_record(0x1A0, BASE + 0x170, 14), "memcheck").findings
    attribute(alone, [A, B])
    assert alone[0].tensor == "before 'b'"


def test_two_instructions_keep_their_own_tensors() -> None:
    """A load past 'a' and another instruction's load just before 'b' are two bugs: each names its own."""
    text = _record(0x1A0, BASE + 0x80, 0) + _record(0x2C0, BASE + 0x1F0, 0, line=41)
    findings = parse_text(text, "memcheck").findings
    attribute(findings, [A, B])
    assert [f.tensor for f in findings] == ["past 'a'", "before 'b'"]
    # the same instruction in two kernels is two instructions
    text = _record(0x1A0, BASE + 0x80, 0) + _record(0x1A0, BASE + 0x1F0, 0, kernel="other")
    findings = parse_text(text, "memcheck").findings
    attribute(findings, [A, B])
    assert [f.tensor for f in findings] == ["past 'a'", "before 'b'"]


def test_one_instruction_at_two_cases_names_each_cases_allocation() -> None:
    """A test launches at several cases, each with its own 'a': a record is named by the 'a' nearest it."""
    a2 = {**A, "start": BASE + 0x10000, "case": "gemm at M3"}
    text = _record(0x1A0, BASE + 0x80, 0) + _record(0x1A0, a2["start"] + a2["bytes"] + 0x100, 1)
    findings = parse_text(text, "memcheck").findings
    attribute(findings, [A, B, a2])
    assert [f.tensor for f in findings] == ["past 'a'", "past 'a'"]
    assert findings[1].tensor_note.endswith(", at gemm at M3")


def test_the_xml_record_carries_the_instruction() -> None:
    xml = parse_xml((DATA / "memcheck_oob_x.xml").read_text(), "memcheck")[0]
    assert xml.pc == 0x90
    text = parse_text((DATA / "memcheck_oob_x.txt").read_text(), "memcheck").findings[0]
    assert text.pc == 0x90


def test_one_offset_at_two_source_lines_is_two_instructions() -> None:
    """A kernel compiled for two cases can hold different loads at one offset: the line tells them apart."""
    text = _record(0x1A0, BASE + 0x80, 0, line=40) + _record(0x1A0, BASE + 0x1F0, 0, line=52)
    findings = parse_text(text, "memcheck").findings
    attribute(findings, [A, B])
    assert [f.tensor for f in findings] == ["past 'a'", "before 'b'"]
