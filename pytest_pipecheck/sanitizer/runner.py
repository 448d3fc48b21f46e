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

The parts it is made of lie beside it: what a child is started with (:mod:`.child_command`), running and
watching one child (:mod:`.child_watch`), what one child's output says (:mod:`.child_analysis`), and a
test's outcome and its failure message (:mod:`.tool_outcomes`). :class:`SanitizerRunner` here decides the
verdicts.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..reproduce import shell_line
from ..results import Verdict
from .child_analysis import ChildHealth, _analyze, _ChildAnalysis, _not_closed_by_canary, child_health
from .child_command import CANARY_EXPECTS, BatchSpec, build_command, canary_nodeid
from .child_watch import COMPILE_CAP, ChildGroup, ChildRun, run_child
from .tool_outcomes import (
    _OUTPUT_KEEP,
    TestOutcome,
    _describe_findings,
    budget_exhausted,
    hang_summary,
    no_progress,
)

__all__ = [
    "CanaryStatus",
    "SanitizerRunner",
]


@dataclass
class CanaryStatus:
    state: str = "unproven"  # unproven, caught, missed, unavailable
    message: str = ""


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

    def _run_halves(self, spec: BatchSpec, tests: list[str], depth: int, why: str) -> dict[str, TestOutcome]:
        """Run ``tests`` again in two halves, each in a child of its own; ``why`` says what sent them there."""
        decided: dict[str, TestOutcome] = {}
        half = len(tests) // 2
        for part in (tests[:half], tests[half:]):
            self.progress(f"{spec.tool}: {why}; splitting ({len(part)} tests)")
            decided.update(self._run_tests(spec, part, depth + 1))
        return decided

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
                decided.update(self._run_halves(spec, provisional, depth, "finding outside any test"))
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
                decided.update(self._run_halves(spec, provisional, depth, problem))
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
