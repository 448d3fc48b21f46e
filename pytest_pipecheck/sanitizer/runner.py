"""Run batches of tests under compute-sanitizer in child processes, with a watchdog, and decide verdicts.

One child per tool runs many tests (Python start-up dominates the cost: 20 small tests took 11.5 s in one
child and about 170 s in one child each). The child plugin
prints ``PIPECHECK-BEGIN``/``PIPECHECK-END`` around each test, so every finding is attributed to the
test it was printed in. Only when that is ambiguous (a finding outside every test) is the batch split
in halves and re-run. The watchdog kills a child whose test has not ended within its timeout (a
consumer that never waits hangs forever, even under the sanitizer), reports that test as a hang, and
runs the remaining tests in a new child.

Verdicts cannot lie: a pass needs the test's END line with outcome ``passed``, no finding, the tool's
summary line, an exit status consistent with the findings, a child whose records reconcile with the
tool's own count (:func:`.parse.reconcile`), and a canary kernel with a known bug that the same tool
caught in this run. Everything else is a failure (a finding, a hang) or an error (inconclusive).

Reconciliation is per test: the tool counts errors per process, so when a child's count does not add
up (errors not printed because an earlier test used up ``--print-limit``, garbled or missing records,
a truncated ``--save`` XML) its tests without findings are run again in children without the tests
that had findings, split down to one test alone. A test alone whose child still does not reconcile is
an error (inconclusive), never a pass.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import queue
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import children
from ..reproduce import shell_line
from ..results import Verdict
from .allocations import attribute
from .known import filter_findings, option_args
from .launches import kernel_facts
from .parse import (
    BEGIN,
    COMPILE_BEGIN,
    COMPILE_END,
    END,
    POISONED,
    Finding,
    MarkerSplit,
    Reconciliation,
    group_findings,
    merge_xml,
    parse_text,
    parse_xml,
    reconcile,
    split_markers,
)

__all__ = [
    "CANARY_EXPECTS",
    "COMPILE_CAP",
    "DEFAULT_PRINT_LIMIT",
    "ERROR_EXITCODE",
    "BatchSpec",
    "CanaryStatus",
    "ChildGroup",
    "ChildRun",
    "ChildrenStopped",
    "SanitizerRunner",
    "TestOutcome",
    "allow_children",
    "build_command",
    "canary_nodeid",
    "format_failure",
    "run_child",
    "stop_children",
]

#: the exit code compute-sanitizer is told to use when it found errors
ERROR_EXITCODE = 86
#: --print-limit given to the tool. The limit counts every error of the process, so a noisy test can
#: use it up before a later test's finding prints; reconciliation catches what is left, and
#: the bound keeps a child's output (held in memory) finite.
DEFAULT_PRINT_LIMIT = 1000
#: the finding kind that proves each tool works, caught in the canary kernel
CANARY_EXPECTS = {"racecheck": "race", "synccheck": "barrier", "memcheck": "invalid_access",
                  "initcheck": "uninit_read"}
#: exit statuses of the child pytest that still allow a verdict: all passed, some failed, errors found
_CONSISTENT_RC = (0, 1, ERROR_EXITCODE)
_INTERRUPTED_RC = 2  # pytest's exit status after session.shouldstop
_OUTPUT_KEEP = 6000  # characters of a test's output kept in a result's details


def canary_nodeid(tool: str) -> str:
    """The pseudo node id the child prints around the canary kernel for ``tool``."""
    return f"pipecheck-canary::{tool}"


@dataclass(frozen=True)
class BatchSpec:
    """Tests that share one child per tool: same tool and the same sanitizer options."""

    tool: str
    nodeids: tuple[str, ...]
    racecheck_report: str = "analysis"
    suppressions: str | None = None
    kernel_filter: str | None = None
    kernel_exclude: str | None = None
    print_limit: int = DEFAULT_PRINT_LIMIT
    scope: str = "launch"  # what the child runs of each test (the setting sanitizer_scope)


@dataclass
class TestOutcome:
    """One test's verdict for one tool."""

    nodeid: str
    tool: str
    verdict: Verdict
    summary: str
    findings: list[Finding] = field(default_factory=list)
    child_outcome: str | None = None
    reason: str = ""
    output: str = ""
    command: str = ""
    child_wall: float | None = None  # seconds the child that decided this verdict ran
    child_tests: int | None = None   # how many tests that child was given
    seconds: float | None = None     # the test's own time in that child (its BEGIN to its END)
    compile_seconds: float | None = None  # of those, the seconds Triton spent compiling and loading kernels
    filtered: dict[str, list[Finding]] = field(default_factory=dict)  # known false positives, by rule id
    tool_version: str | None = None  # the compute-sanitizer version the rules were keyed to

    def details(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "child_wall_s": None if self.child_wall is None else round(self.child_wall, 2),
            "child_tests": self.child_tests,
            "test_seconds": None if self.seconds is None else round(self.seconds, 3),
            "compile_seconds": None if self.compile_seconds is None else round(self.compile_seconds, 3),
            "findings": [f.to_json() for f in self.findings[:50]],
            "groups": group_findings(self.findings),
            "child_outcome": self.child_outcome,
            "reason": self.reason,
            "output": self.output[-_OUTPUT_KEEP:],
            "reproduce": self.command,
            "filtered": {rule: {"records": len(found), "compute_sanitizer": self.tool_version,
                                "examples": [f.raw.splitlines()[0] for f in found[:3]],
                                "findings": [f.to_json() for f in found[:50]]}
                         for rule, found in self.filtered.items()},
        }

    def filtered_note(self) -> str:
        """``"3 findings filtered by rule X for compute-sanitizer 2025.3.1"`` (empty when none)."""
        return "; ".join(f"{len(found)} finding{'s' if len(found) != 1 else ''} filtered by rule {rule} for "
                         f"compute-sanitizer {self.tool_version or '?'}" for rule, found in self.filtered.items())


@dataclass
class CanaryStatus:
    state: str = "unproven"  # unproven, caught, missed, unavailable
    message: str = ""


@dataclass
class ChildRun:
    """What one child process did."""

    command: list[str]
    output: str
    returncode: int | None
    killed_in: str | None = None  # the test that was running when the watchdog fired
    kill_reason: str = ""
    wall: float = 0.0
    xml: str | None = None  # the --save file's text; "" when asked for and missing; None: not asked for
    test_seconds: dict[str, float] = field(default_factory=dict)  # BEGIN to END of each finished test
    poisoned_by: str | None = None  # the test after which the child said its CUDA context was dead
    kill_kind: str = ""  # why the watchdog killed it: "hang" (a test's own time), "compile" (the compile cap), "idle"
    compile_seconds: dict[str, float] = field(default_factory=dict)  # each finished test's seconds of Triton compiles


# --------------------------------------------------------------------------- commands


def build_command(sanitizer: str, spec: BatchSpec, child_args: Sequence[str], nodeids: Sequence[str],
                  xml_path: str | None = None, version: tuple[int, ...] | None = None,
                  canary: bool = False) -> list[str]:
    """The full child command line: compute-sanitizer, its options (those gated on ``version`` only
    when the tool has them: :data:`.known.OPTIONS`), then the child pytest (``child_args``:
    :func:`pytest_pipecheck.children.base_command`) with its role and node ids."""
    cmd = [sanitizer, "--tool", spec.tool, "--error-exitcode", str(ERROR_EXITCODE),
           "--print-limit", str(spec.print_limit), *option_args(spec.tool, version)]
    if xml_path:
        cmd += ["--xml", "--save", xml_path]
    if spec.tool == "racecheck":
        cmd += ["--racecheck-report", spec.racecheck_report]
    if spec.tool in ("memcheck", "initcheck"):
        # CuPy and PyTorch pools are disabled in the child; padding makes small overruns visible
        cmd += ["--padding", "32"] if spec.tool == "memcheck" else []
        # Host API calls that return an error are not kernel findings: a clean test reports a few "api
        # errors" outside its body (torch/CuPy probing at import and exit). A failing call that
        # matters (a launch) raises in the test itself, which the child's own outcome reports.
        cmd += ["--report-api-errors", "no"]
    if spec.suppressions:
        cmd += ["--suppressions", spec.suppressions]
    if spec.kernel_filter:
        cmd += ["--kernel-name", f"kns={spec.kernel_filter}"]
    if spec.kernel_exclude:
        cmd += ["--kernel-name-exclude", f"kns={spec.kernel_exclude}"]
    role = children.sanitizer(spec.tool, spec.scope, canary)
    return cmd + list(child_args) + role.args() + list(nodeids)


# --------------------------------------------------------------------------- one child


def _reader(stream: Any, q: queue.Queue[str | None]) -> None:
    try:
        for raw in iter(stream.readline, b""):
            q.put(raw.decode("utf-8", "replace").rstrip("\r\n"))
    except (OSError, ValueError):
        pass
    finally:
        q.put(None)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            proc.kill()
        except OSError:
            pass


class ChildrenStopped(KeyboardInterrupt):
    """The run is being interrupted: :func:`run_child` killed its child, or refused to start one.

    A ``KeyboardInterrupt``, so that no ``except Exception`` on the way turns it into a verdict.
    """


# The children run_child watches, on any thread. A child runs in a process session of its own (so that
# its whole group can be killed), which also keeps every signal meant for this process away from it:
# when the run is interrupted, these are killed here. Plain set operations and copies, which the GIL
# makes atomic, because stop_children is called from a signal handler, which may run while the main
# thread is inside run_child.
_WATCHED: set[subprocess.Popen[bytes]] = set()
_STOPPING = threading.Event()


def stop_children() -> None:
    """Kill every child :func:`run_child` is watching, on every thread, and refuse to start new ones
    until :func:`allow_children`: the run is being interrupted. Safe to call from a signal handler."""
    _STOPPING.set()
    for proc in list(_WATCHED):
        _kill(proc)


def allow_children() -> None:
    """Let :func:`run_child` start children again (the interrupted session is over)."""
    _STOPPING.clear()


def _stopped() -> ChildrenStopped:
    return ChildrenStopped("pipecheck: the run is being interrupted: its sanitizer children were killed")


class ChildGroup:
    """The children of one owner (a session's sanitizer run going on beside its tests), stopped together.

    :meth:`stop` kills the group's children and makes :func:`run_child` refuse new ones for it, as
    :func:`stop_children` does for every child of the process; other owners' children (a pytester session
    in the same process, say) are left alone."""

    def __init__(self) -> None:
        self._stopping = threading.Event()
        self._procs: set[subprocess.Popen[bytes]] = set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def stop(self) -> None:
        self._stopping.set()
        for proc in list(self._procs):
            _kill(proc)


#: the longest one Triton compile (or binary load) in a sanitizer child may take before the watchdog calls it
#: a compile hang; a test's own ``sanitizer_timeout`` raises it for that test (never stricter than the timeout)
COMPILE_CAP = 300.0


def run_child(cmd: Sequence[str], *, cwd: str, env: dict[str, str], timeouts: dict[str, float],
              default_timeout: float, idle_limit: float,
              on_begin: Callable[[str], None] | None = None,
              clock: Callable[[], float] = time.monotonic, poll: float = 0.2,
              compile_cap: float = COMPILE_CAP, group: ChildGroup | None = None,
              on_line: Callable[[str], None] | None = None) -> ChildRun:
    """Run one child and watch it: a test whose END is not printed in time is killed (a hang).

    A test's time is its kernels' and its own code's, not the compiler's: while the child says Triton is
    compiling or loading a kernel (its COMPILE_BEGIN line, until COMPILE_END, or the test's END) the test's
    clock stands still. One compile longer than ``compile_cap`` (or the test's timeout, where that is
    longer) is killed as a compile hang. ``idle_limit`` bounds the time with no output at all outside a test
    (start-up, collection); a compile outside any test is bounded by the compile cap instead.
    ``clock`` (seconds) times the tests and drives the watchdog; it is read only on this thread, once
    per line when the line is taken (a test's seconds are its BEGIN to its END line) and once each
    ``poll`` seconds without output, so a test can drive it from ``on_begin`` (called with each test's node
    id after its BEGIN line) or ``on_line`` (called with every line after it was taken).
    ``group`` (when given) is the owner whose :meth:`ChildGroup.stop` also stops this child.
    """
    start = clock()
    if _STOPPING.is_set() or (group is not None and group.stopping):
        raise _stopped()
    try:
        proc = subprocess.Popen(list(cmd), cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as exc:
        return ChildRun(list(cmd), f"could not start {cmd[0]!r}: {exc}", None, wall=0.0)
    _WATCHED.add(proc)
    if group is not None:
        group._procs.add(proc)
    watch = _Watch(timeouts, default_timeout, idle_limit, compile_cap, start)
    try:
        return _watch(proc, cmd, watch, on_begin, on_line, clock, poll, group)
    except BaseException:
        # interrupted (KeyboardInterrupt on this thread, or stop_children from another): the child must
        # not outlive the run, and no signal meant for this process reaches its session
        _kill(proc)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass  # stuck in the kernel (a GPU driver call): SIGKILL is delivered when it returns
        raise
    finally:
        _WATCHED.discard(proc)
        if group is not None:
            group._procs.discard(proc)


class _Watch:
    """What the watchdog knows of one child: the test running, its own seconds so far, the compile going on."""

    def __init__(self, timeouts: dict[str, float], default_timeout: float, idle_limit: float, compile_cap: float,
                 start: float) -> None:
        self.timeouts = timeouts
        self.default_timeout = default_timeout
        self.idle_limit = idle_limit
        self.compile_cap = compile_cap
        self.current: str | None = None
        self.began_run = self.began = self.last = start
        self.compiling: float | None = None  # since when Triton compiles or loads (None: it does not)
        self.compiling_what = ""
        self.compiled = 0.0  # the current test's seconds of compiles that ended
        self.seconds: dict[str, float] = {}
        self.compile_seconds: dict[str, float] = {}
        self.killed_in: str | None = None
        self.kind = ""
        self.reason = ""

    def timeout(self) -> float:
        return self.timeouts.get(self.current, self.default_timeout) if self.current is not None else 0.0

    def cap(self) -> float:
        return max(self.compile_cap, self.timeout())

    def own(self, now: float) -> float:
        """The current test's seconds so far, less what Triton spent compiling."""
        running = now - self.compiling if self.compiling is not None else 0.0
        return now - self.began - self.compiled - running

    def begin_test(self, nodeid: str, now: float) -> None:
        self.current, self.began = nodeid, now
        self.compiling, self.compiled = None, 0.0

    def end_test(self, now: float) -> None:
        self.end_compile(now)
        if self.current is not None:
            self.seconds[self.current] = now - self.began
            if self.compiled:
                self.compile_seconds[self.current] = self.compiled
        self.current = None
        self.compiling, self.compiled = None, 0.0

    def begin_compile(self, payload: str, now: float) -> None:
        if self.compiling is not None:
            return
        self.compiling = now
        try:
            data = json.loads(payload)
        except ValueError:
            data = None
        what = data if isinstance(data, dict) else {}
        self.compiling_what = f"{what.get('step') or 'compile'} of {what.get('kernel') or 'a kernel'}"

    def end_compile(self, now: float) -> None:
        if self.compiling is not None:
            self.compiled += now - self.compiling
            self.compiling = None

    def check(self, now: float) -> bool:
        """Whether the child must be killed now (and why: :attr:`kind`, :attr:`reason`)."""
        if self.compiling is not None:
            if now - self.compiling > self.cap():
                self.killed_in = self.current if self.current is not None else ""
                self.kind = "compile"
                where = "" if self.current is not None else " outside any test"
                self.reason = (f"Triton's {self.compiling_what}{where} did not end within {self.cap():g} s "
                               f"(pipecheck's compile cap): compile hang")
        elif self.current is not None and self.own(now) > self.timeout():
            self.killed_in = self.current
            self.kind = "hang"
            note = (f" (its {self.compiled:.1f} s of Triton compiles not counted)" if self.compiled else "")
            self.reason = (f"no PIPECHECK-END within {self.timeout():g} s (sanitizer_timeout) of the test's own "
                           f"time{note}: hang or deadlock")
        elif self.current is None and now - self.last > self.idle_limit:
            self.killed_in = ""
            self.kind = "idle"
            self.reason = f"no output for {self.idle_limit:g} s outside any test"
        return self.killed_in is not None


def _watch(proc: subprocess.Popen[bytes], cmd: Sequence[str], w: _Watch, on_begin: Callable[[str], None] | None,
           on_line: Callable[[str], None] | None, clock: Callable[[], float], poll: float,
           group: ChildGroup | None) -> ChildRun:
    def stopping() -> bool:
        return _STOPPING.is_set() or (group is not None and group.stopping)

    if stopping():  # stop_children ran between the check above and the child joining _WATCHED
        raise _stopped()
    q: queue.Queue[str | None] = queue.Queue()
    thread = threading.Thread(target=_reader, args=(proc.stdout, q), daemon=True)
    thread.start()
    lines: list[str] = []
    poisoned: str | None = None
    while True:
        if stopping():
            raise _stopped()
        try:
            line = q.get(timeout=poll)
        except queue.Empty:
            if w.check(clock()):
                _kill(proc)
                break
            continue
        if line is None:
            break
        w.last = stamp = clock()
        cb, ce = line.find(COMPILE_BEGIN), line.find(COMPILE_END)
        if cb >= 0 or ce >= 0:
            before = line[:max(cb, ce)]
            if before.strip():  # output the marker line was printed into the middle of
                lines.append(before)
            if cb >= 0:
                w.begin_compile(line[cb + len(COMPILE_BEGIN):].strip(), stamp)
            else:
                w.end_compile(stamp)
        else:
            lines.append(line)
            b = line.find(BEGIN)
            if b >= 0:
                w.begin_test(line[b + len(BEGIN):].strip(), stamp)
                if on_begin is not None:
                    on_begin(w.current or "")
            elif END in line:
                w.end_test(stamp)
            elif POISONED in line:
                poisoned = line[line.find(POISONED) + len(POISONED):].split(" ", 1)[0]
        if on_line is not None:
            on_line(line)
        if w.check(stamp):  # a child that never stops printing is watched too
            _kill(proc)
            break
    if stopping():  # its output ended because stop_children killed it: no verdict from that
        raise _stopped()
    try:
        rc = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        _kill(proc)
        rc = proc.wait(timeout=30)
    thread.join(timeout=5)
    while True:  # output that arrived between the kill and the pipe closing
        try:
            line = q.get_nowait()
        except queue.Empty:
            break
        if line is not None and COMPILE_BEGIN not in line and COMPILE_END not in line:
            lines.append(line)
    return ChildRun(list(cmd), "\n".join(lines), rc, w.killed_in, w.reason, clock() - w.began_run,
                    test_seconds=w.seconds, poisoned_by=poisoned, kill_kind=w.kind,
                    compile_seconds=w.compile_seconds)


# --------------------------------------------------------------------------- verdicts


def format_failure(outcome: TestOutcome) -> str:
    """The failure message: findings grouped per kernel and location pair, then the reproducer."""
    label = "Triton ConSan" if outcome.tool == "consan" else f"compute-sanitizer {outcome.tool}"
    lines = [f"{label}: {outcome.summary}"]
    if outcome.reason:
        lines.append(outcome.reason)
    if outcome.filtered:
        lines.append(f"({outcome.filtered_note()}; see pytest_pipecheck/sanitizer/known.py)")
    groups = group_findings(outcome.findings)
    causes = list(dict.fromkeys(g["cause"] for g in groups if g.get("cause")))
    lines.extend(f"  cause: {c}" for c in causes[:3])
    for g in groups[:12]:
        where = g["where"] + (f" / {g['second_where']}" if g["second_where"] else "")
        hz = f", {g['hazards']} hazards" if g["hazards"] != g["records"] else ""
        lines.append(f"  {g['records']} x {g['label']} ({g['severity']}) in {g['kernel'] or '?'} at {where}{hz}")
        if g.get("tensor_note"):
            lines.append(f"      {g['tensor_note']}")
        for ex in g["examples"]:
            lines.append(f"      e.g. {ex}")
    if not outcome.findings and outcome.output:
        lines.append("  partial output of the child:")
        lines.extend("    " + ln for ln in outcome.output.splitlines()[-25:])
    if outcome.command:
        lines.append(f"reproduce: {outcome.command}")
    return "\n".join(lines)


def _describe_findings(findings: list[Finding]) -> str:
    groups = group_findings(findings)
    if not groups:
        return "0 hazards"
    g = groups[0]
    where = g["where"] + (f"/{g['second_where']}" if g["second_where"] else "")
    head = f"{g['records']} {g['label']}{'s' if g['records'] != 1 else ''} in {g['kernel'] or '?'} ({where})"
    if g.get("tensor"):
        head += f" {g['tensor']}"
    more = sum(x["records"] for x in groups[1:])
    return head + (f" and {more} more" if more else "")


@dataclass
class _ChildAnalysis:
    split: MarkerSplit
    findings: dict[str, list[Finding]]
    outside: list[Finding]
    summary_seen: bool
    tool_errors: list[Finding]
    any_findings: bool
    rec: Reconciliation
    filtered: dict[str, dict[str, list[Finding]]] = field(default_factory=dict)  # nodeid -> rule -> records


def _analyze(run: ChildRun, tool: str, print_limit: int | None = None,
             version: tuple[int, ...] | None = None) -> _ChildAnalysis:
    split = split_markers(run.output)
    whole = parse_text(run.output, tool)
    per: dict[str, list[Finding]] = {}
    ordered: list[Finding] = []
    for nodeid in split.order:
        found = [f for f in parse_text(split.segments[nodeid].text, tool).findings]
        per[nodeid] = found
        ordered.extend(found)
    outside_all = parse_text(split.outside_text, tool).findings
    tool_errors = [f for f in whole.findings if f.kind == "tool_error"]
    outside = [f for f in outside_all if f.is_hazard]
    for found in per.values():
        found[:] = [f for f in found if f.is_hazard]
    if run.xml and not outside_all:
        merge_xml([f for f in ordered if f.is_hazard], [x for x in parse_xml(run.xml, tool)])
    # the tool counted the known false positives too: they explain its exit status before they are filtered
    any_findings = bool(outside) or any(per.values())
    filtered: dict[str, dict[str, list[Finding]]] = {}
    for nodeid, found in per.items():
        if nodeid.startswith("pipecheck-canary::"):
            continue
        kept, gone = filter_findings(found, tool, version, kernels=kernel_facts(split.segments.get(nodeid)))
        if gone:
            found[:] = kept
            filtered[nodeid] = gone
    for nodeid, found in per.items():
        seg = split.segments.get(nodeid)
        if seg is not None and seg.allocations:
            attribute(found, seg.allocations)  # name the tensor an invalid access is past
    rec = reconcile(whole, tool, print_limit=print_limit, xml=run.xml)
    return _ChildAnalysis(split, per, outside, whole.summary.seen, tool_errors, any_findings, rec, filtered)


@dataclass(frozen=True)
class ChildHealth:
    """How one child ended, as a whole: what decides the tests its records leave undecided."""

    interrupted: bool  # killed by the watchdog, or died inside a test with a non-zero status
    stopped: bool  # stopped by itself after a test left its CUDA context dead
    sound: bool  # the exit status and the tool's summary agree with each other
    consistent: bool  # sound, and a pass can be trusted (an exit 86 has its findings)
    why_not: str  # what is wrong where it is not consistent
    tail: str  # the end of the child's output


def child_health(run: ChildRun, an: _ChildAnalysis) -> ChildHealth:
    """:class:`ChildHealth` of ``run`` from its exit status, the tool's summary and its tool errors."""
    interrupted = run.killed_in is not None or (an.split.open is not None and run.returncode != 0)
    rc = run.returncode
    tail = run.output[-_OUTPUT_KEEP:]
    counted = an.rec.counted or 0
    # A child whose CUDA context died stops after that test (ChildPlugin prints POISONED and pytest
    # ends as interrupted, exit 2): the tests it finished keep their verdicts, the tests it never
    # began run in a fresh child.
    stopped = run.poisoned_by is not None and run.poisoned_by in an.split.segments
    ok_rc = _CONSISTENT_RC + ((_INTERRUPTED_RC,) if stopped else ())
    # the exit status and the summary agree with each other (whether the records add up is an.rec)
    sound = an.summary_seen and rc in ok_rc and not an.tool_errors and not (rc == 0 and counted > 0)
    if rc == 1 and not any(s.outcome == "failed" for s in an.split.segments.values()):
        sound = False
    # exit 86 and no finding: unexplained unless the records do not add up, which a re-run settles
    consistent = sound and not (rc == ERROR_EXITCODE and not an.any_findings and an.rec.ok)
    why_not = ("no compute-sanitizer summary line" if not an.summary_seen else
               f"tool error: {an.tool_errors[0].message}" if an.tool_errors else
               f"exit status {rc} without any finding" if rc == ERROR_EXITCODE else
               f"exit status 0 although the tool counted {counted} errors (--error-exitcode "
               f"{ERROR_EXITCODE} was asked for)" if rc == 0 and counted > 0 else
               f"unexpected exit status {rc}")
    return ChildHealth(interrupted, stopped, sound, consistent, why_not, tail)


class SanitizerRunner:
    """Runs batches for one pytest session; remembers per tool whether the canary was caught."""

    def __init__(self, sanitizer: str, *, cwd: str, child_args: Sequence[str], env: dict[str, str],
                 timeouts: dict[str, float], default_timeout: float = 120.0,
                 progress: Callable[[str], None] | None = None, use_xml: bool = True,
                 max_children: int = 64, clock: Callable[[], float] = time.monotonic,
                 version: str | None = None, compile_cap: float = COMPILE_CAP, group: ChildGroup | None = None,
                 on_line: Callable[[str], None] | None = None) -> None:
        from ..toolkit import version_tuple

        self.sanitizer = sanitizer
        self.version = version  # as the tool printed it; gates options and known-false-positive rules
        self.version_tuple = version_tuple(version)
        self.cwd = cwd
        self.child_args = list(child_args)
        self.env = env
        self.timeouts = dict(timeouts)
        self.default_timeout = default_timeout
        self.progress = progress or (lambda _msg: None)
        self.use_xml = use_xml
        self.canary: dict[str, CanaryStatus] = {}
        self.children = 0
        self.max_children = max_children
        self.clock = clock  # times tests and children, drives the watchdog (injected by tests)
        self.compile_cap = compile_cap
        self.group = group
        #: told the node id of each test a child of this runner has ended (or stopped in: it died there)
        self.on_ended: Callable[[str], None] | None = None
        self.on_line = on_line  # each line of each child, as run_child takes it (tests move their clock in it)

    # ------------------------------------------------------------------ public
    def reproduce_command(self, spec: BatchSpec, nodeid: str) -> str:
        """The command that replays one test under the tool, as the runner ran it."""
        cmd = build_command(self.sanitizer, spec, self.child_args, [nodeid], version=self.version_tuple)
        return shell_line(cmd, cwd=self.cwd)

    def run(self, spec: BatchSpec) -> dict[str, TestOutcome]:
        """Sanitize every test of ``spec``; returns one outcome per node id."""
        status = self.canary.setdefault(spec.tool, CanaryStatus())
        final = self._run_tests(spec, list(spec.nodeids), depth=0)
        if status.state in ("unproven", "missed") and any(o.verdict == Verdict.PASS for o in final.values()):
            # The canary did not complete in the test children (a dead context, a crash), or its
            # report did not appear: --print-limit counts every error of the process, so tests with
            # many findings can use it up before the canary runs. Run it alone, in a child whose only
            # test is deselected; only a canary missed there too proves the tool is not working.
            if status.state == "missed":
                self.progress(f"{spec.tool}: canary not reported in the batch ({status.message}); "
                              f"running it alone")
                status.state = "unproven"
            first = spec.nodeids[0]
            run = self._child(spec, [first, "--deselect", first], True, 0, 0)
            self._update_canary(spec.tool, _analyze(run, spec.tool, spec.print_limit, self.version_tuple))
        if status.state != "caught":
            why = {
                "missed": f"the canary kernel's known bug was NOT caught by compute-sanitizer {spec.tool}: "
                          f"the tool is not working, so no clean verdict can be trusted",
                "unavailable": f"the canary could not run ({status.message}); a clean verdict from "
                               f"{spec.tool} cannot be trusted",
                "unproven": f"the canary never completed under {spec.tool} ({status.message or 'child died first'})",
            }[status.state]
            for out in final.values():
                if out.verdict == Verdict.PASS:
                    out.verdict, out.summary, out.reason = Verdict.ERROR, "inconclusive: tool not proven", why
        return final

    # ------------------------------------------------------------------ internals
    def _child(self, spec: BatchSpec, nodeids: list[str], canary: bool, total: int, done: int) -> ChildRun:
        env = dict(self.env)
        xml_path = None
        tmpdir = None
        if self.use_xml:
            tmpdir = tempfile.mkdtemp(prefix="pipecheck-san-")
            xml_path = os.path.join(tmpdir, f"{spec.tool}.xml")
        cmd = build_command(self.sanitizer, spec, self.child_args, nodeids, xml_path, version=self.version_tuple,
                            canary=canary)
        started = self.clock()
        seen = [done]
        last: list[str | None] = [None]  # the test the child began last

        def ended() -> None:
            if last[0] is not None and self.on_ended is not None:
                self.on_ended(last[0])
            last[0] = None

        def on_begin(nodeid: str) -> None:
            ended()  # a child begins a test after it ended the one before
            if nodeid.startswith("pipecheck-canary::"):
                self.progress(f"{spec.tool}: canary ({self.clock() - started:.1f} s)")
                return
            seen[0] += 1
            last[0] = nodeid
            self.progress(f"{spec.tool}: test {seen[0]} of {total} ({self.clock() - started:.1f} s) {nodeid}")

        timeouts = dict(self.timeouts)
        timeouts.setdefault(canary_nodeid(spec.tool), max(120.0, self.default_timeout))
        idle = max(300.0, 2 * max([self.default_timeout, *timeouts.values()]))
        self.children += 1
        try:
            run = run_child(cmd, cwd=self.cwd, env=env, timeouts=timeouts, default_timeout=self.default_timeout,
                            idle_limit=idle, on_begin=on_begin, clock=self.clock, compile_cap=self.compile_cap,
                            group=self.group, on_line=self.on_line)
        finally:
            ended()
        if xml_path:
            run.xml = ""  # asked for: a missing file is evidence lost, not "no records"
            try:
                with open(xml_path, encoding="utf-8", errors="replace") as fh:
                    run.xml = fh.read()
            except OSError:
                pass
        if tmpdir:
            for name in os.listdir(tmpdir):
                try:
                    os.unlink(os.path.join(tmpdir, name))
                except OSError:
                    pass
            try:
                os.rmdir(tmpdir)
            except OSError:
                pass
        return run

    def _update_canary(self, tool: str, an: _ChildAnalysis) -> None:
        status = self.canary.setdefault(tool, CanaryStatus())
        seg = an.split.segments.get(canary_nodeid(tool))
        if seg is None or status.state == "caught":
            return
        if seg.outcome == "unavailable":
            message = seg.failure or "unknown reason"
            # a launch failure after a memcheck/synccheck abort is retried in a fresh child;
            # only a missing CuPy is final
            status.state = "unavailable" if message.startswith("cupy is not importable") else "unproven"
            status.message = message
            return
        if seg.outcome is None:
            status.message = "the child died in the canary"
            return
        expected = CANARY_EXPECTS.get(tool)
        if any(f.kind == expected for f in an.findings.get(canary_nodeid(tool), [])):
            status.state, status.message = "caught", ""
        else:
            status.state = "missed"
            status.message = f"expected a {expected} finding, got " + (
                ", ".join(sorted({f.kind for f in an.findings.get(canary_nodeid(tool), [])})) or "none")

    def _run_tests(self, spec: BatchSpec, nodeids: list[str], depth: int) -> dict[str, TestOutcome]:
        final: dict[str, TestOutcome] = {}
        pending = list(nodeids)
        total = len(nodeids)
        while pending:
            if self.children >= self.max_children:
                final.update(budget_exhausted(pending, functools.partial(self._outcome, spec), self.max_children,
                                              "sanitizer"))
                break
            status = self.canary.setdefault(spec.tool, CanaryStatus())
            want_canary = status.state == "unproven"
            run = self._child(spec, pending, want_canary, total, total - len(pending))
            an = _analyze(run, spec.tool, spec.print_limit, self.version_tuple)
            self._update_canary(spec.tool, an)
            decided, rerun = self._decide(spec, pending, run, an, depth)
            for nodeid, out in decided.items():  # verdicts of split sub-batches keep their own child's
                if out.child_wall is None:
                    out.child_wall, out.child_tests = run.wall, len(pending)
                    if nodeid in an.filtered:
                        out.filtered = an.filtered[nodeid]
                        if out.verdict == Verdict.PASS:
                            out.summary = f"{out.summary} ({out.filtered_note()})"
                if out.seconds is None and nodeid in run.test_seconds:
                    out.seconds = run.test_seconds[nodeid]
                    out.compile_seconds = run.compile_seconds.get(nodeid)
            final.update(decided)
            if rerun == pending:  # no progress: never loop forever
                final.update(no_progress(rerun, functools.partial(self._outcome, spec), run))
                break
            pending = rerun
        return final

    def _outcome(self, spec: BatchSpec, nodeid: str, verdict: Verdict, summary: str, **kw: Any) -> TestOutcome:
        out = TestOutcome(nodeid, spec.tool, verdict, summary, **kw)
        out.tool_version = self.version
        if not out.command:
            out.command = self.reproduce_command(spec, nodeid)
        if len(out.output) > _OUTPUT_KEEP:
            out.output = out.output[-_OUTPUT_KEEP:]
        return out

    def _decide(self, spec: BatchSpec, nodeids: list[str], run: ChildRun, an: _ChildAnalysis,
                depth: int) -> tuple[dict[str, TestOutcome], list[str]]:
        """Verdicts this child settles, and the tests that must run again in a new child.

        A test that failed on its own in a child of scope ``launch`` (its body needs what that scope
        skips: a check's numbers, a reference) is sanitized again, whole, in a child of scope ``test``,
        so the scope never changes a verdict.
        """
        decided, rerun = self._decide_child(spec, nodeids, run, an, depth)
        if spec.scope != "launch":
            return decided, rerun
        widen = [n for n, out in decided.items()
                 if out.verdict == Verdict.ERROR and out.child_outcome == "failed" and not out.findings]
        if widen:
            self.progress(f"{spec.tool}: {len(widen)} test(s) failed on their own with sanitizer_scope=launch; "
                          "sanitizing them whole")
            decided.update(self._run_tests(dataclasses.replace(spec, scope="test"), widen, depth + 1))
        return decided, rerun

    def _decide_child(self, spec: BatchSpec, nodeids: list[str], run: ChildRun, an: _ChildAnalysis,
                      depth: int) -> tuple[dict[str, TestOutcome], list[str]]:
        """Every test of one child: decided here, run again (``rerun``: in a fresh child with the rest), or,
        when nothing in its own record decides it, settled by how the child as a whole ended."""
        health = child_health(run, an)
        decided, rerun, provisional = self._decide_each(spec, nodeids, run, an, health)
        if not provisional:
            return decided, rerun
        return self._settle(spec, nodeids, provisional, decided, rerun, run, an, health, depth)

    def _decide_each(self, spec: BatchSpec, nodeids: list[str], run: ChildRun, an: _ChildAnalysis,
                     health: ChildHealth) -> tuple[dict[str, TestOutcome], list[str], list[str]]:
        """What each test's own record decides: a hang, a finding, a test that did not run, died or failed on
        its own; the tests to run again; and the tests nothing in their record decides (``provisional``)."""
        decided: dict[str, TestOutcome] = {}
        rerun: list[str] = []
        tail, rc = health.tail, run.returncode
        provisional: list[str] = []
        # memcheck and synccheck errors abort the kernel and leave the CUDA context dead:
        # tests that fail after such a finding in the same child are run again in a fresh child.
        poisoned = False
        for n in nodeids:
            seg = an.split.segments.get(n)
            found = an.findings.get(n, [])
            if poisoned and not found and seg is not None and seg.outcome == "failed":
                rerun.append(n)
                continue
            if (found or n in an.filtered) and spec.tool in ("memcheck", "synccheck"):
                poisoned = True
            if run.killed_in == n:
                decided[n] = self._outcome(
                    spec, n, Verdict.FAIL, hang_summary(run), findings=found,
                    reason=run.kill_reason + (f"; the sanitizer reported: {_describe_findings(found)}" if found else ""),
                    output=seg.text if seg else tail)
            elif found:
                decided[n] = self._outcome(spec, n, Verdict.FAIL, _describe_findings(found), findings=found,
                                           child_outcome=seg.outcome if seg else None,
                                           output=seg.text if seg else "")
            elif seg is None:
                if health.interrupted or health.stopped:
                    rerun.append(n)
                else:
                    decided[n] = self._outcome(
                        spec, n, Verdict.ERROR, "inconclusive: did not run in the child",
                        reason=f"no PIPECHECK-BEGIN for this test (exit status {rc})", output=tail)
            elif seg.outcome is None:
                # a finding a rule filtered may still have ended the kernel (synccheck stops the threads it
                # reports): say so, or the death reads as unexplained
                gone = an.filtered.get(n, {})
                said = "; ".join(f"{len(v)} records filtered by rule {k}" for k, v in gone.items())
                decided[n] = self._outcome(
                    spec, n, Verdict.ERROR, "inconclusive: the child died during this test"
                    + (f" after {said} (the tool's report ends the kernel: the known bug stops this check)"
                       if said else ""),
                    reason=f"exit status {rc}, no PIPECHECK-END", output=seg.text)
            elif seg.outcome == "failed":
                decided[n] = self._outcome(
                    spec, n, Verdict.ERROR, "the test failed on its own in the child (not a sanitizer finding)",
                    child_outcome="failed", reason=(seg.failure or "")[-2000:], output=seg.text)
            elif health.interrupted:
                # the child was killed or died later: its summary line is missing, so run again
                rerun.append(n)
            else:
                provisional.append(n)
        return decided, rerun, provisional

    def _settle(self, spec: BatchSpec, nodeids: list[str], provisional: list[str], decided: dict[str, TestOutcome],
                rerun: list[str], run: ChildRun, an: _ChildAnalysis, health: ChildHealth,
                depth: int) -> tuple[dict[str, TestOutcome], list[str]]:
        """The tests nothing in their own record decided: a finding outside every test split among them, a
        count that does not reconcile run down to one test alone, a child that ended badly run once more; else
        each passes (or skips) where the child as a whole is consistent, and is inconclusive where it is not."""
        tail = health.tail
        sound, consistent, why_not = health.sound, health.consistent, health.why_not
        if an.outside and run.killed_in is None:
            if len(provisional) == 1 and len(nodeids) == 1:
                n = provisional[0]
                decided[n] = self._outcome(
                    spec, n, Verdict.FAIL, _describe_findings(an.outside), findings=an.outside,
                    reason="reported outside the test body (import, collection, fixture or exit)", output=tail)
                return decided, rerun
            if len(provisional) > 1 and depth < 12:
                half = len(provisional) // 2
                for part in (provisional[:half], provisional[half:]):
                    self.progress(f"{spec.tool}: finding outside any test; splitting ({len(part)} tests)")
                    decided.update(self._run_tests(spec, part, depth + 1))
                return decided, rerun
            if len(provisional) == 1:
                self.progress(f"{spec.tool}: finding outside any test; re-running {provisional[0]} alone")
                decided.update(self._run_tests(spec, provisional, depth + 1))
                return decided, rerun
        if sound and not an.rec.ok and run.killed_in is None:
            # The tool counted errors that no test was given (not printed, garbled, lost): any of these
            # tests may hold one. Run them again without the tests that had findings, down to one alone.
            problem = "; ".join(an.rec.problems)
            if provisional != nodeids and depth < 12:
                self.progress(f"{spec.tool}: {problem}; re-running {len(provisional)} test(s) without the others")
                decided.update(self._run_tests(spec, provisional, depth + 1))
                return decided, rerun
            if len(provisional) > 1 and depth < 12:
                half = len(provisional) // 2
                for part in (provisional[:half], provisional[half:]):
                    self.progress(f"{spec.tool}: {problem}; splitting ({len(part)} tests)")
                    decided.update(self._run_tests(spec, part, depth + 1))
                return decided, rerun
            for n in provisional:
                decided[n] = self._outcome(
                    spec, n, Verdict.ERROR, "inconclusive: the tool's error count does not reconcile",
                    child_outcome=an.split.segments[n].outcome,
                    reason=f"{problem} (in a child running {'this test alone' if len(nodeids) == 1 else 'these tests'})",
                    output=tail)
            return decided, rerun
        ended_badly = not consistent and bool(an.tool_errors) and run.killed_in is None
        open_by = _not_closed_by_canary(spec.tool, nodeids, an) if ended_badly else None
        at_exit = ended_badly and not decided and len(provisional) == len(nodeids)
        note = ""  # why the verdicts stand although the child ended badly
        if ended_badly and open_by is None:
            # Every test ended, then the canary ran and was caught, and the tool's count reconciles with the
            # records it printed; only then did the process fail to exit cleanly. The tool was live after
            # the last test and accounted for every error: nothing hides in the crash, so the verdicts
            # stand without running the tests again (the re-run cost a second child on the suite's longest
            # part: docs/validation/2026-12-02-h200-2011.md). That holds as well where another test of the
            # child was decided by its own record (a finding, or a test that failed on its own and is
            # sanitized again whole): a finding that killed the CUDA context would have kept the canary from
            # being reported after it.
            self.progress(f"{spec.tool}: {why_not} after every test and the canary had ended; the tool's "
                          "count reconciles with its records, so the verdicts stand")
            consistent, note = True, f"after every test and the canary, the child did not exit cleanly ({why_not})"
        elif not consistent and decided and len(provisional) < len(nodeids) and depth < 12 and run.killed_in is None:
            # The child did not end cleanly after another test's finding (a synccheck or memcheck error
            # leaves the CUDA context dead, and the process then fails at exit): that explains the
            # tool's error, not a fault of these tests. Run them again without the tests decided here,
            # so each gets a verdict of its own rather than "inconclusive".
            self.progress(f"{spec.tool}: {why_not} after a finding in the same child; re-running "
                          f"{len(provisional)} test(s) without the tests it decided"
                          + (f" ({open_by})" if open_by else ""))
            decided.update(self._run_tests(spec, provisional, depth + 1))
            return decided, rerun
        elif at_exit and depth == 0:
            # Every test ran to its end without a finding, and only then did the process fail (a child can
            # crash at exit in a plugin's summary under heavy contention, docs/validation/2026-11-26-h100.md).
            # Nothing ties that to any
            # test: they run once more in a fresh child, whose verdicts stand; failing again the same way,
            # they read "inconclusive", never pass.
            self.progress(f"{spec.tool}: {why_not} after every test had ended; re-running {len(provisional)} "
                          f"test(s) once in a fresh child (their verdicts would stand without it, but {open_by})")
            again = self._run_tests(spec, provisional, depth + 1)
            for out in again.values():
                out.reason = "; ".join(filter(None, [out.reason, f"the first child ran every test, then: {why_not}"]))
            decided.update(again)
            return decided, rerun
        for n in provisional:
            seg = an.split.segments[n]
            if consistent and seg.outcome == "skipped":
                # a skip is a verdict only where the child's records add up, as a pass is: a record the
                # parser could not read in a test that then skipped is inconclusive (above), never a skip
                decided[n] = self._outcome(spec, n, Verdict.SKIP, "skipped in the child", child_outcome="skipped",
                                           reason="; ".join(filter(None, [seg.failure or "", note])), output=seg.text)
            elif consistent:
                decided[n] = self._outcome(spec, n, Verdict.PASS, "0 hazards", child_outcome=seg.outcome,
                                           reason=note, output=seg.text)
            else:
                decided[n] = self._outcome(spec, n, Verdict.ERROR, "inconclusive", child_outcome=seg.outcome,
                                           reason=why_not, output=tail)
        return decided, rerun


#: the tool's words for a target that failed at its exit (compute-sanitizer 2026.4.0)
_EXIT_FAILURE = "process didn't terminate successfully"


def _not_closed_by_canary(tool: str, nodeids: Sequence[str], an: _ChildAnalysis) -> str | None:
    """None where the child's run was whole up to its last test although the process then failed: every test
    ended, the canary ran after all of them and its planted bug was reported (the tool was live to the
    end), no record lies outside a test, the tool's count reconciles with the records it printed, and its
    only error is the target's failed exit; else which of these does not hold (said when the tests run
    again)."""
    canary = canary_nodeid(tool)
    seg = an.split.segments.get(canary)
    if seg is None or seg.outcome is None:
        return "the canary did not run to its end in this child"
    if an.outside:
        return "a record lies outside every test"
    if not an.summary_seen or not an.rec.ok:
        return "the tool's count does not reconcile with its records: " + ("; ".join(an.rec.problems) or
                                                                          "no summary")
    if not any(f.kind == CANARY_EXPECTS.get(tool) for f in an.findings.get(canary, [])):
        return "the canary's bug was not reported in this child"
    other = [f.message for f in an.tool_errors if _EXIT_FAILURE not in f.message]
    if other:
        return f"the tool reported another error: {other[0][:200]}"
    order = an.split.order
    last = max((order.index(n) for n in nodeids if n in order), default=-1)
    if not all(n in an.split.segments and an.split.segments[n].outcome is not None for n in nodeids) \
            or order.index(canary) < last:
        return "the canary did not run after every test"
    return None


def hang_summary(run: ChildRun) -> str:
    """The summary of the test the watchdog killed ``run`` in: a hang of its own code and kernels, or of
    Triton's compiler (its compile cap)."""
    return "compile hang: killed by the watchdog" if run.kill_kind == "compile" else "hang: killed by the watchdog"


def budget_exhausted(pending: list[str], outcome: Any, limit: int, what: str) -> dict[str, TestOutcome]:
    """The verdicts of tests left when a run has started ``limit`` children: errors, never passes."""
    return {n: outcome(n, Verdict.ERROR, "inconclusive: child budget exhausted",
                       reason=f"more than {limit} {what} children") for n in pending}


def no_progress(pending: list[str], outcome: Any, run: ChildRun) -> dict[str, TestOutcome]:
    """The verdicts of tests a child was given again and settled none of: errors, never passes."""
    return {n: outcome(n, Verdict.ERROR, "inconclusive: child made no progress", output=run.output,
                       reason=f"exit status {run.returncode}") for n in pending}


def default_child_env(device_id: str | None) -> dict[str, str]:
    """The child's environment: pools off, output unbuffered, the parent's GPU pinned."""
    env = dict(os.environ)
    env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    if device_id is not None:
        env["CUDA_VISIBLE_DEVICES"] = device_id
    return env

