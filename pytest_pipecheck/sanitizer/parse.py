"""Parse compute-sanitizer output (text and ``--xml --save``) into typed findings.

The text parser works on the raw, interleaved stdout of a child process: sanitizer records are the
lines that contain the ``========= `` prefix (possibly after pytest's progress dots), everything else
is the program's own output and is ignored here. A record head the parser does not know (a new kind
such as ``Warp Misaligned Address``, a garbled or truncated line, a continuation line whose head was
lost) is a finding of kind ``other``, never dropped; a line the parser failed on is kept in
:attr:`ParsedOutput.unparsed`. The parser never raises on any input.

:func:`reconcile` checks the parsed records against the tool's own summary (errors counted, records
printed, errors not printed) and the ``--save`` XML: a run whose count does not add up cannot vouch
for a clean test.

:func:`split_markers` cuts a child's output at the ``PIPECHECK-BEGIN`` / ``PIPECHECK-END`` lines the
child plugin prints around each test, which is how a finding is attributed to a test: the tool's report
of a racy kernel appears between its test's lines and nowhere else.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "ALLOC",
    "BEGIN",
    "COMPILE_BEGIN",
    "COMPILE_END",
    "END",
    "FAILURE",
    "KINDS",
    "LAUNCH",
    "POISONED",
    "Finding",
    "MarkerSplit",
    "ParsedOutput",
    "Reconciliation",
    "Segment",
    "Summary",
    "group_findings",
    "merge_xml",
    "parse_text",
    "parse_xml",
    "reconcile",
    "split_markers",
    "xml_record_count",
]

PREFIX = "========= "
BEGIN = "PIPECHECK-BEGIN "
END = "PIPECHECK-END "
FAILURE = "PIPECHECK-FAILURE "
#: printed by a child after the test that left its CUDA context unusable (sticky fault); the child stops
POISONED = "PIPECHECK-POISONED "
#: printed by a compute-sanitizer child, inside a test, at the test's first launch of each Triton kernel: the
#: kernel's facts as JSON (sanitizer/launches.py), which some known-false-positive rules need
LAUNCH = "PIPECHECK-LAUNCH "
#: printed by a memcheck child, inside a test, for each array it allocates at its exact size: the array's name
#: and address range as JSON (sanitizer/allocations.py), which name the tensor an invalid access is past
ALLOC = "PIPECHECK-ALLOC "
#: printed by a sanitizer child when Triton starts compiling or loading a kernel (JSON: the test, the kernel,
#: the step), and when no compile or load is going on any more (sanitizer/compiling.py): the runner's watchdog
#: does not count that time against the test's timeout, and bounds it on its own
COMPILE_BEGIN = "PIPECHECK-COMPILE-BEGIN "
COMPILE_END = "PIPECHECK-COMPILE-END "

#: every kind a Finding may have
KINDS = ("race", "barrier", "invalid_access", "uninit_read", "leak", "deadlock", "api_error",
         "tool_error", "other")


@dataclass
class Finding:
    """One sanitizer report (one record of text, or one ``<record>`` of XML)."""

    tool: str
    kind: str  # one of KINDS
    severity: str = "error"  # "error" or "warning"
    message: str = ""
    hazard: str | None = None  # RAW / WAR / WAW for races
    access: str | None = None  # read / write (invalid access, uninitialized read); wgmma (a barrier record of a wgmma sequence)
    space: str | None = None  # global / shared / local
    kernel: str | None = None
    file: str | None = None
    line: int | None = None
    second_kernel: str | None = None  # races: the other access
    second_file: str | None = None
    second_line: int | None = None
    block: str | None = None  # "(0,0,0)"
    thread: str | None = None
    second_thread: str | None = None
    count: int = 1  # hazards this record stands for ("[1024 hazards]")
    raw: str = ""
    size: int | None = None  # bytes of the access ("of size 2 bytes")
    address: int | None = None  # where it went ("Access to 0x... is out of bounds")
    nearest: int | None = None  # the start of the allocation the tool calls the nearest one
    pc: int | None = None  # the instruction's offset in its kernel ("at gemm+0x1a0"): records of one instruction
    tensor: str | None = None  # the array pipecheck allocated there ("past 'a'"; sanitizer/allocations.py)
    tensor_note: str | None = None  # how the access relates to it ("reads past 'a' (ends at 0x..., ...)")
    cause: str | None = None  # which bound the access misses, at which case (sanitizer/allocations.py)

    @property
    def where(self) -> str:
        """``file:line`` (basename) of the first access, or the kernel name when there is no line."""
        return _loc(self.file, self.line) or (self.kernel or "?")

    @property
    def second_where(self) -> str | None:
        return _loc(self.second_file, self.second_line)

    @property
    def is_hazard(self) -> bool:
        """Whether this finding is a defect of the program (not a note or a tool problem)."""
        return self.kind not in ("tool_error",)

    def label(self) -> str:
        """Short human name of the kind: ``RAW race``, ``invalid __global__ write``, ..."""
        if self.kind == "race":
            return f"{self.hazard or 'data'} race"
        if self.kind == "invalid_access":
            return f"invalid __{self.space or '?'}__ {self.access or 'access'}"
        if self.kind == "uninit_read":
            return f"uninitialized __{self.space or 'global'}__ read"
        if self.kind == "barrier":
            return "wgmma sequence error" if self.access == "wgmma" else "barrier error"
        if self.kind == "other" and self.message:
            return self.message[:60]  # a record pipecheck does not know: its own words
        return self.kind.replace("_", " ")

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if len(data["raw"]) > 2000:
            data["raw"] = data["raw"][:2000] + " ..."
        return data


def _loc(path: str | None, line: int | None) -> str | None:
    if not path:
        return None
    base = path.replace("\\", "/").rsplit("/", 1)[-1]
    return f"{base}:{line}" if line is not None else base


@dataclass
class Summary:
    """The summary lines of one sanitizer run; None where a line was absent."""

    errors: int | None = None  # "ERROR SUMMARY: N errors" or racecheck's "(E errors, W warnings)"
    warnings: int | None = None
    hazards_displayed: int | None = None
    not_printed: int | None = None
    leaked_bytes: int | None = None
    seen: bool = False  # a summary line was present at all


@dataclass
class ParsedOutput:
    findings: list[Finding] = field(default_factory=list)
    summary: Summary = field(default_factory=Summary)
    target_error: bool = False  # "Target application returned an error"
    header_seen: bool = False  # "COMPUTE-SANITIZER": the tool started
    unparsed: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- text

_AT = r"(?P<func>.+?)\+(?P<pc>0x[0-9a-fA-F]+)(?: in (?P<file>.+?):(?P<line>\d+))?"
_RE_RACE_HEAD = re.compile(r"^(?P<sev>Error|Warning): Race reported between (?P<a1>\w+) access at " + _AT + r"\s*$")
_RE_RACE_SECOND = re.compile(
    r"^and (?P<a2>\w+) access at " + _AT.replace("?P<func>", "?P<func2>").replace("?P<file>", "?P<file2>")
    .replace("?P<line>", "?P<line2>").replace("?P<pc>", "?P<pc2>") + r"(?:\s*\[(?P<count>\d+) hazards?\])?\s*$"
)
_RE_HAZARD = re.compile(
    r"^(?P<sev>Error|Warning): (?:\([^)]*\) )?Potential (?P<type>RAW|WAR|WAW) hazard detected"
    r"(?: \([^)]*\))? at __(?P<space>\w+)__ 0x[0-9a-fA-F]+ in block (?P<block>\([\d, ]+\))"
)
_RE_THREAD_AT = re.compile(r"^(?P<acc>Write|Read) Thread (?P<thread>\([\d, ]+\)) at " + _AT + r"\s*$")
_RE_INVALID = re.compile(r"^Invalid __(?P<space>\w+)__ (?P<acc>read|write|atomic)\b(?: of size (?P<size>\d+) bytes?)?")
# memcheck: "Access to 0x7fcf52800780 is out of bounds" (initcheck: "Address 0x7ff2c2800580")
_RE_ADDRESS = re.compile(r"^(?:Access to|Address) (?P<addr>0x[0-9a-fA-F]+)\b")
_RE_NEAREST = re.compile(r"^and is (?P<n>\d+) bytes? (?:after|before) the nearest allocation at (?P<at>0x[0-9a-fA-F]+)")
_RE_UNINIT = re.compile(r"^Uninitialized __(?P<space>\w+)__ memory read")
_RE_AT = re.compile(r"^at " + _AT + r"\s*$")
_RE_BY = re.compile(r"^by thread (?P<thread>\([\d, ]+\)) in block (?P<block>\([\d, ]+\))")
# synccheck: a barrier misused; with --check-warpgroup-mma, a wgmma that the warps of a warpgroup did
# not issue together (compute-sanitizer's manual, "Synccheck support for wgmma")
_RE_BARRIER = re.compile(r"^(?:Barrier|(?P<wgmma>Warpgroup MMA sequence)) error detected")
_RE_DEADLOCK = re.compile(r"^Deadlock detected.*?(?: at (?P<func>[^\s+]+)\+0x[0-9a-fA-F]+)?\s*$")
_RE_DEADLOCK_BLOCK = re.compile(r"in block (?P<block>\([\d, ]+\))")
_RE_LEAK = re.compile(r"^Leaked (?P<bytes>\d+) bytes")
_RE_API = re.compile(r"^Program hit (?P<err>\w+)")
_RE_ERR_SUMMARY = re.compile(r"^ERROR SUMMARY: (?P<n>\d+) errors?(?P<rest>.*)$")
_RE_RACE_SUMMARY = re.compile(
    r"^RACECHECK SUMMARY: (?P<n>\d+) hazards? displayed \((?P<e>\d+) errors?, (?P<w>\d+) warnings?\)"
)
_RE_LEAK_SUMMARY = re.compile(r"^LEAK SUMMARY: (?P<n>\d+) bytes leaked")


def _norm_xyz(text: str | None) -> str | None:
    return text.replace(" ", "") if text else text


# exactly nine "=" then a space or the end of the line: a longer run is a pytest separator line
_RE_PREFIX = re.compile(r"(?<!=)=========(?= |$)")
# pytest's own separator lines ("========= FAILURES =========") are the program's output, not records
_RE_PYTEST_SEP = re.compile(r"^=+ .*[^=] =+$")


def _sanitizer_lines(text: str) -> Iterable[str]:
    """The sanitizer records of ``text``, prefix removed (the prefix may follow program output)."""
    for line in text.splitlines():
        m = _RE_PREFIX.search(line)
        if m is None:
            continue
        if _RE_PYTEST_SEP.match(line[m.start():].rstrip()):
            continue
        rest = line[m.end():]
        # one space separates the prefix from the record; continuation lines add four more
        yield rest[1:] if rest.startswith(" ") else rest


def _access_hazard(first: str, second: str) -> str | None:
    pair = (first.lower(), second.lower())
    return {("write", "read"): "RAW", ("read", "write"): "WAR", ("write", "write"): "WAW"}.get(pair)


def parse_text(text: str, tool: str = "") -> ParsedOutput:
    """Parse compute-sanitizer text output into findings, summary and flags. Never raises."""
    out = ParsedOutput()
    current: Finding | None = None
    for rec in _sanitizer_lines(text):
        try:
            current = _parse_line(rec, tool, current, out)
        except Exception:  # pragma: no cover - defensive: a parser bug must not hide a run
            out.unparsed.append(rec)
    return out


def _start(out: ParsedOutput, finding: Finding) -> Finding:
    out.findings.append(finding)
    return finding


def _parse_line(rec: str, tool: str, current: Finding | None, out: ParsedOutput) -> Finding | None:
    stripped = rec.strip()
    if not stripped:
        return None  # a blank record line ends the current record
    continuation = rec.startswith(" ")
    if continuation and current is not None:
        current.raw += "\n" + stripped
        _continue(current, stripped)
        return current
    if stripped == "COMPUTE-SANITIZER":
        out.header_seen = True
        return None
    m = _RE_ERR_SUMMARY.match(stripped)
    if m:
        out.summary.seen = True
        if "not printed" in m.group("rest"):
            out.summary.not_printed = int(m.group("n"))
        else:
            out.summary.errors = int(m.group("n"))
        return None
    m = _RE_RACE_SUMMARY.match(stripped)
    if m:
        out.summary.seen = True
        out.summary.hazards_displayed = int(m.group("n"))
        out.summary.errors = int(m.group("e"))
        out.summary.warnings = int(m.group("w"))
        return None
    m = _RE_LEAK_SUMMARY.match(stripped)
    if m:
        out.summary.leaked_bytes = int(m.group("n"))
        return None
    if stripped.startswith("Target application returned an error"):
        out.target_error = True
        return None
    if stripped.startswith("Warning: Detected possible deadlock") and current is not None \
            and current.kind == "deadlock":
        current.raw += "\n" + stripped
        return current
    f = Finding(tool=tool, kind="other", message=stripped, raw=stripped)
    m = _RE_RACE_HEAD.match(stripped)
    if m:
        f.kind = "race"
        f.severity = m.group("sev").lower()
        f.access = m.group("a1").lower()
        f.kernel, f.file = m.group("func"), m.group("file")
        f.line = int(m.group("line")) if m.group("line") else None
        return _start(out, f)
    m = _RE_HAZARD.match(stripped)
    if m:
        f.kind = "race"
        f.severity = m.group("sev").lower()
        f.hazard = m.group("type")
        f.space = m.group("space")
        f.block = _norm_xyz(m.group("block"))
        return _start(out, f)
    m = _RE_INVALID.match(stripped)
    if m:
        f.kind, f.space, f.access = "invalid_access", m.group("space"), m.group("acc")
        f.size = int(m.group("size")) if m.group("size") else None
        return _start(out, f)
    m = _RE_UNINIT.match(stripped)
    if m:
        f.kind, f.space, f.access = "uninit_read", m.group("space"), "read"
        return _start(out, f)
    m = _RE_BARRIER.match(stripped)
    if m:
        f.kind, f.space = "barrier", None
        if m.group("wgmma"):
            f.access = "wgmma"
        return _start(out, f)
    m = _RE_DEADLOCK.match(stripped)
    if m:
        f.kind = "deadlock"
        f.kernel = m.group("func")
        b = _RE_DEADLOCK_BLOCK.search(stripped)
        f.block = _norm_xyz(b.group("block")) if b else None
        return _start(out, f)
    m = _RE_LEAK.match(stripped)
    if m:
        f.kind = "leak"
        return _start(out, f)
    m = _RE_API.match(stripped)
    if m:
        f.kind = "api_error"
        return _start(out, f)
    if stripped.startswith(("Error", "Internal", "Unable", "Failed")):
        f.kind = "tool_error"
        return _start(out, f)
    if stripped.startswith("Warning"):
        f.severity = "warning"
        return _start(out, f)
    # A record the parser does not know (a new kind, a garbled head, a continuation whose head was
    # lost): a finding of kind "other". Dropping it would turn a real report into a clean verdict.
    _continue(f, stripped)  # an orphan "at kernel+0x.. in file:line" still names the place
    return _start(out, f)


def _continue(f: Finding, line: str) -> None:
    if f.kind == "race" and f.hazard is None:
        m = _RE_RACE_SECOND.match(line)
        if m:
            f.second_kernel, f.second_file = m.group("func2"), m.group("file2")
            f.second_line = int(m.group("line2")) if m.group("line2") else None
            f.hazard = _access_hazard(f.access or "", m.group("a2"))
            f.access = None
            if m.group("count"):
                f.count = int(m.group("count"))
            return
    if f.kind == "race":
        m = _RE_THREAD_AT.match(line)
        if m:
            func, path = m.group("func"), m.group("file")
            lineno = int(m.group("line")) if m.group("line") else None
            if f.thread is None:
                f.thread = _norm_xyz(m.group("thread"))
                f.kernel, f.file, f.line = func, path, lineno
            else:
                f.second_thread = _norm_xyz(m.group("thread"))
                f.second_kernel, f.second_file, f.second_line = func, path, lineno
                _prefer_kernel_frame(f)
            return
    m = _RE_AT.match(line)
    if m and f.kernel is None:
        f.kernel, f.file = m.group("func"), m.group("file")
        f.line = int(m.group("line")) if m.group("line") else None
        f.pc = int(m.group("pc"), 16)
        return
    m = _RE_BY.match(line)
    if m and f.thread is None:
        f.thread, f.block = _norm_xyz(m.group("thread")), _norm_xyz(m.group("block"))
        return
    m = _RE_ADDRESS.match(line)
    if m and f.address is None:
        f.address = int(m.group("addr"), 16)
        return
    m = _RE_NEAREST.match(line)
    if m and f.nearest is None:
        f.nearest = int(m.group("at"), 16)


def _is_helper(func: str | None, path: str | None) -> bool:
    """A frame inside a library header (cp.async helpers, cuda::pipeline) rather than the kernel."""
    return bool((func and "::" in func) or (path and re.search(r"\.(h|hpp|cuh)$", path)))


def _prefer_kernel_frame(f: Finding) -> None:
    # For a cp.async race the write is inside cuda_pipeline_helpers.h and the read is in the
    # kernel: name the kernel the user wrote, keep the helper as the second access.
    if _is_helper(f.kernel, f.file) and not _is_helper(f.second_kernel, f.second_file):
        f.kernel, f.second_kernel = f.second_kernel, f.kernel
        f.file, f.second_file = f.second_file, f.file
        f.line, f.second_line = f.second_line, f.line
        f.thread, f.second_thread = f.second_thread, f.thread


# --------------------------------------------------------------------------- XML


def _text(node: ET.Element | None, path: str) -> str | None:
    if node is None:
        return None
    found = node.find(path)
    return found.text.strip() if found is not None and found.text else None


def _xyz(node: ET.Element | None) -> str | None:
    if node is None:
        return None
    parts = [_text(node, a) or "0" for a in ("x", "y", "z")]
    return "(" + ",".join(parts) + ")"


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _hex(text: str | None) -> int | None:
    """``0x7fcf52800780`` as a number; None for no text or text that is not hexadecimal."""
    try:
        return int(text, 16) if text else None
    except ValueError:
        return None


def xml_record_count(text: str) -> int | None:
    """How many ``<record>`` elements a ``--save`` file holds; None when it is not well-formed XML
    (truncated, empty, garbled). A clean run's file is ``<ComputeSanitizerOutput/>`` (0 records)."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError:
        return None
    return sum(1 for _ in root.iter("record"))


def parse_xml(text: str, tool: str = "") -> list[Finding]:
    """Parse ``--xml --save`` output into findings. Malformed XML gives ``[]`` (the text is primary)."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError:
        return []
    out: list[Finding] = []
    for rec in root.iter("record"):
        try:
            out.append(_xml_record(rec, tool))
        except Exception:  # pragma: no cover - defensive
            out.append(Finding(tool=tool, kind="other", raw=ET.tostring(rec, encoding="unicode")))
    return out


def _xml_record(rec: ET.Element, tool: str) -> Finding:
    kind = (_text(rec, "kind") or "").lower()
    level = (_text(rec, "level") or "error").lower()
    what = rec.find("what")
    msg = _text(what, "text") or ""
    f = Finding(tool=tool, kind="other", severity="warning" if level.startswith("warn") else "error",
                message=msg, raw=ET.tostring(rec, encoding="unicode"))
    if kind == "analysis" and what is not None:
        f.kind = "race"
        src, dst = what.find("source"), what.find("destination")
        a1, a2 = _text(src, "direction") or "", _text(dst, "direction") or ""
        f.hazard = _access_hazard(a1, a2)
        f.kernel, f.file, f.line = _text(src, "where/func"), _text(src, "where/path"), _int(_text(src, "where/line"))
        f.second_kernel, f.second_file = _text(dst, "where/func"), _text(dst, "where/path")
        f.second_line = _int(_text(dst, "where/line"))
        f.count = _int(_text(dst, "count")) or _int(_text(src, "count")) or 1
        return f
    if kind == "hazard" and what is not None:
        f.kind = "race"
        f.hazard = _text(what, "common/type")
        f.block = _xyz(what.find("common/blockIdx"))
        t0, t1 = what.find("thread0"), what.find("thread1")
        f.thread, f.second_thread = _xyz(t0.find("threadIdx") if t0 is not None else None), \
            _xyz(t1.find("threadIdx") if t1 is not None else None)
        f.kernel, f.file, f.line = _text(t0, "where/func"), _text(t0, "where/path"), _int(_text(t0, "where/line"))
        f.second_kernel, f.second_file = _text(t1, "where/func"), _text(t1, "where/path")
        f.second_line = _int(_text(t1, "where/line"))
        _prefer_kernel_frame(f)
        return f
    f.thread = _xyz(rec.find("who/threadIdx"))
    f.block = _xyz(rec.find("who/blockIdx"))
    f.kernel, f.file, f.line = _text(rec, "where/func"), _text(rec, "where/path"), _int(_text(rec, "where/line"))
    f.pc = _hex(_text(rec, "where/pc"))
    low = msg.lower()
    space = _text(what, "space")
    if space:
        f.space = space.strip("_")
    direction = _text(what, "direction")
    f.address = _hex(_text(what, "address"))
    f.size = _int(_text(what, "size"))
    if low.startswith("invalid"):
        f.kind, f.access = "invalid_access", (direction or "").lower() or None
    elif low.startswith("uninitialized"):
        f.kind, f.access = "uninit_read", "read"
    elif "barrier" in low:
        f.kind = "barrier"
    elif "deadlock" in low:
        f.kind = "deadlock"
    elif "leak" in low:
        f.kind = "leak"
    elif kind == "hostapierror" or "api" in kind:
        f.kind = "api_error"
    return f


def merge_xml(text_findings: list[Finding], xml_findings: list[Finding]) -> list[Finding]:
    """Fill gaps in text findings (file, line, threads) from XML records of the same run.

    The XML carries no test markers, so records are matched by order and only when the two lists
    describe the same reports (same length, same kinds); otherwise the text findings are returned as
    they are.
    """
    if len(text_findings) != len(xml_findings):
        return text_findings
    if any(t.kind != x.kind for t, x in zip(text_findings, xml_findings)):
        return text_findings
    for t, x in zip(text_findings, xml_findings):
        for name in ("hazard", "space", "access", "kernel", "file", "line", "second_kernel", "second_file",
                     "second_line", "block", "thread", "second_thread", "size", "address", "pc"):
            if getattr(t, name) is None and getattr(x, name) is not None:
                setattr(t, name, getattr(x, name))
    return text_findings


# --------------------------------------------------------------------------- reconciliation


@dataclass
class Reconciliation:
    """Whether the records parsed from one sanitizer run account for every error the tool counted.

    ``problems`` is empty when they do. Any problem means an error may exist that no test was given,
    so no test of that run may be called clean on its evidence.
    """

    tool: str
    counted: int | None  # errors the tool says it found (racecheck: its error count)
    printed: int | None  # records the tool says it printed (None: not derivable from its summary)
    parsed: int  # records pipecheck parsed from the text
    xml_records: int | None = None  # records in the --save file (None: not requested or unreadable)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def reconcile(parsed: ParsedOutput, tool: str, *, print_limit: int | None = None,
              xml: str | None = None) -> Reconciliation:
    """Reconcile the tool's summary of one run with the records parsed from its output.

    ``parsed`` is the parse of the run's whole output; ``print_limit`` the ``--print-limit`` the run
    was given (0: no limit); ``xml`` the text of its ``--save`` file (``""`` when the file was asked
    for and is missing, None when it was not asked for). Problems found: no summary line; errors the
    tool did not print (``... errors were not printed``, or racecheck displaying as many hazards as
    the print limit allows); fewer records parsed than the tool printed; lines the parser failed on;
    a missing, truncated or malformed XML file, or one holding more records than the text. Never raises.
    """
    records = [f for f in parsed.findings if f.kind != "tool_error"]
    s = parsed.summary
    rec = Reconciliation(tool, s.errors, None, len(records))
    problems = rec.problems
    if not s.seen:
        problems.append("no compute-sanitizer summary line (the run did not finish)")
    elif s.hazards_displayed is not None:  # racecheck: "N hazards displayed (E errors, W warnings)"
        rec.printed = s.hazards_displayed
        if s.hazards_displayed == 0 and ((s.errors or 0) + (s.warnings or 0)) > 0:
            problems.append(f"the tool counted {s.errors} errors and {s.warnings} warnings but displayed none")
        if print_limit and s.hazards_displayed >= print_limit:
            problems.append(f"the tool displayed {s.hazards_displayed} hazards, as many as --print-limit "
                            f"{print_limit} allows: later ones were not printed")
    elif s.errors is not None or s.not_printed is not None:
        if s.not_printed:
            problems.append(f"the tool did not print {s.not_printed} of the {s.errors} errors it found "
                            f"(--print-limit {print_limit if print_limit is not None else '?'})")
        if s.errors is not None:
            rec.printed = s.errors - (s.not_printed or 0)
    if rec.printed is not None and rec.printed > rec.parsed:
        problems.append(f"the tool's summary counts {rec.printed} printed records, pipecheck parsed "
                        f"{rec.parsed} (garbled, truncated or missing records)")
    if parsed.unparsed:
        problems.append(f"{len(parsed.unparsed)} sanitizer line(s) could not be parsed: "
                        f"{parsed.unparsed[0][:200]!r}")
    if xml is not None:
        if not xml.strip():
            problems.append("the --xml --save file is missing or empty")
        else:
            rec.xml_records = xml_record_count(xml)
            if rec.xml_records is None:
                problems.append("the --xml --save file is truncated or not well-formed XML")
            elif rec.xml_records > rec.parsed:
                problems.append(f"the --xml --save file holds {rec.xml_records} records, the text output "
                                f"{rec.parsed}")
    return rec


# --------------------------------------------------------------------------- markers


@dataclass
class Segment:
    """What a child printed between one test's BEGIN and END lines."""

    nodeid: str
    lines: list[str] = field(default_factory=list)
    outcome: str | None = None  # None: no END line (the child died or was killed in this test)
    failure: str | None = None  # the child's own failure text, when the test failed there
    launches: list[Any] = field(default_factory=list)  # the LAUNCH payloads (a str where one was not JSON)
    allocations: list[Any] = field(default_factory=list)  # the ALLOC payloads, in the order they were made

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


@dataclass
class MarkerSplit:
    segments: dict[str, Segment] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)  # lines outside every BEGIN/END pair
    open: str | None = None  # the test whose BEGIN had no END

    @property
    def outside_text(self) -> str:
        return "\n".join(self.outside)


def split_markers(text: str) -> MarkerSplit:
    """Cut a child's output into per-test segments at the BEGIN/END marker lines; a test's FAILURE text,
    LAUNCH payloads and ALLOC payloads go with its segment (ALLOC lines are not among its lines, nor are the
    COMPILE_BEGIN/COMPILE_END lines, which only the watchdog reads)."""
    split = MarkerSplit()
    current: Segment | None = None
    for line in text.splitlines():
        at = max(line.find(COMPILE_BEGIN), line.find(COMPILE_END))
        if at >= 0:
            before = line[:at]
            if before.strip():
                (current.lines if current is not None else split.outside).append(before)
            continue
        b = line.find(BEGIN)
        e = line.find(END)
        fl = line.find(FAILURE)
        if b >= 0:
            before = line[:b]
            if before.strip():
                (current.lines if current else split.outside).append(before)
            nodeid = line[b + len(BEGIN):].strip()
            current = Segment(nodeid)
            split.segments[nodeid] = current
            split.order.append(nodeid)
            split.open = nodeid
            continue
        if e >= 0:
            before = line[:e]
            rest = line[e + len(END):].strip()
            if rest in split.segments:  # an END line without an outcome
                nodeid, outcome = rest, ""
            else:
                nodeid, _, outcome = rest.rpartition(" ")
            target = split.segments.get(nodeid) or current
            if before.strip() and target is not None:
                target.lines.append(before)
            if target is not None:
                target.outcome = outcome or "unknown"
            current = None
            split.open = None
            continue
        al = line.find(ALLOC)
        if al >= 0 and current is not None:
            try:
                current.allocations.append(json.loads(line[al + len(ALLOC):].strip()))
            except ValueError:
                current.allocations.append(line[al + len(ALLOC):].strip())
            continue
        la = line.find(LAUNCH)
        if la >= 0 and current is not None:
            # kept among the test's lines too: its output shows what it launched
            current.lines.append(line)
            payload = line[la + len(LAUNCH):].strip()
            try:
                current.launches.append(json.loads(payload))
            except ValueError:
                current.launches.append(payload)
            continue
        if fl >= 0:
            rest = line[fl + len(FAILURE):]
            nodeid, _, payload = rest.partition(" ")
            seg = split.segments.get(nodeid)
            if seg is not None:
                try:
                    seg.failure = str(json.loads(payload))
                except ValueError:
                    seg.failure = payload
            continue
        (current.lines if current is not None else split.outside).append(line)
    return split


# --------------------------------------------------------------------------- grouping


def group_findings(findings: Iterable[Finding]) -> list[dict[str, Any]]:
    """Group findings per (kind, kernel, location pair, tensor): counts, examples; largest group first."""
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for f in findings:
        key = (f.label(), f.severity, f.kernel, f.where, f.second_where, f.tensor)
        g = groups.get(key)
        if g is None:
            g = groups[key] = {
                "label": f.label(), "severity": f.severity, "kernel": f.kernel, "where": f.where,
                "second_where": f.second_where, "records": 0, "hazards": 0, "examples": [],
                "message": f.message,
            }
            if f.tensor is not None:  # the first record's account: which tensor, and how far past it
                g["tensor"], g["tensor_note"], g["cause"] = f.tensor, f.tensor_note, f.cause
        g["records"] += 1
        g["hazards"] += max(f.count, 1)
        ex = " ".join(p for p in (f"block {f.block}" if f.block else "",
                                  f"thread {f.thread}" if f.thread else "",
                                  f"vs thread {f.second_thread}" if f.second_thread else "") if p)
        if ex and len(g["examples"]) < 3 and ex not in g["examples"]:
            g["examples"].append(ex)
    return sorted(groups.values(), key=lambda g: (g["severity"] != "error", -g["hazards"]))
