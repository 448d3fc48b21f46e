"""Neither a kernel fault nor a crash takes the session down.

**A kernel fault.** An illegal or misaligned address, a launch failure or a device-side trap leaves a
*sticky* error in the process's CUDA context: every later CUDA call in that process fails with the same
error, so one faulting test would turn every test after it into a failure that blames itself
(docs/validation/2026-11-24-h100.md). After every phase of every test, pipecheck probes the context
(:mod:`.cuda_probe`, without ever creating one) and, when it is dead:

1. the test that left it dead fails, and says that it faulted (also when its own body passed: the
   fault can surface only at the next synchronization);
2. pipecheck triages the fault: it re-runs that one test alone under compute-sanitizer memcheck and
   attaches what memcheck reports (kernel, source line, address) to the failure and to a ``fault``
   result;
3. every later test of this process runs in a fresh pytest process (a *relay* child) and gets its own
   verdict, as if nothing had happened. A relay child that faults in its turn stops after that test; the
   rest goes to the next child.

**A crash.** A test that kills its process (a segmentation fault in Triton's interpreter or in an
extension) cannot be contained by the process it kills. On the CPU tier (the setting ``crash_isolation``:
``auto``), pipecheck therefore runs the tests in a relay child from the start and only replays their
reports here: when the child dies, the test it was running fails, saying that it crashed, with the signal
and the crash site (the kernel, where Python's fault handler named one); the tests before it keep their
verdicts, the tests after it run in a fresh child, and this process writes every report.

Relayed reports are replayed here as the child sends them, so the terminal, the JUnit XML,
pytest-xdist and pipecheck's reports see them as usual; :func:`pytest_pipecheck.verdicts.apply` makes
them agree with the sanitizer's verdicts, which this process decided. The sanitizer's own children have
their own containment (the child plugin stops a poisoned child; the runner gives the rest a fresh one).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import pytest

from . import children, cuda_probe, state
from .children import Role
from .gpu_lease import GRANT_EVENT
from .results import CheckResult, Verdict

__all__ = ["ContainmentPlugin", "crash_site", "should_isolate"]

_OUTPUT_TAIL = 4000
_LOG_TAIL = 64 * 1024  # of a relay child's output, read back when it dies
_POLL_S = 0.05  # how often the parent looks for a relay child's next events


def should_isolate(config: pytest.Config, role: Role) -> str | None:
    """Why this run's tests run in a relay child from the start (crash isolation), or None.

    ``crash_isolation = auto`` isolates the CPU tier of a run the user started: not a child pipecheck
    started, not pytest-xdist (whose controller survives a worker's crash and reports it), and not a
    session started from inside another pytest's test (pipecheck's own tests run many; the outer run
    contains their crashes)."""
    run_config = config.stash[state.RUN_CONFIG]
    mode = run_config.crash_isolation
    if mode == "off" or role.child or not run_config.enabled:
        return None
    if getattr(config, "workerinput", None) is not None or getattr(config.option, "dist", "no") != "no":
        return None
    if config.option.collectonly:
        return None
    if mode == "on":
        return "crash_isolation = on"
    if os.environ.get("PYTEST_CURRENT_TEST"):
        return None
    tier = config.stash[state.TIER]
    return None if tier.has_gpu else "the CPU tier (crash_isolation = auto)"


_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
_LIBRARY = re.compile(r"(site-packages|dist-packages|/lib/python\d|<frozen |/pytest_pipecheck/)")


def crash_site(output: str) -> str | None:
    """Where Python's fault handler says the crashing thread was: the innermost frame of the test's own code
    (not a library's), named as a Triton kernel when the frame below it is Triton's interpreter calling it."""
    start = max(output.rfind("Current thread"), output.rfind("Thread 0x"))
    if start < 0 or "Fatal Python error" not in output:
        return None
    frames = [m for m in (_FRAME.match(line) for line in output[start:].splitlines()) if m]
    for i, m in enumerate(frames):
        if _LIBRARY.search(m.group("file")):
            continue
        where = f"{os.path.basename(m.group('file'))}:{m.group('line')}"
        caller = frames[i + 1].group("file") if i + 1 < len(frames) else ""
        if "triton" in caller and "interpreter" in caller:
            return f"in the Triton kernel {m.group('func')} ({where}), run by Triton's interpreter"
        return f"in {m.group('func')} ({where})"
    return None


def _signal_name(returncode: int | None) -> str:
    if returncode is None or returncode >= 0:
        return f"exit status {returncode}"
    try:
        return f"signal {-returncode}, {signal.Signals(-returncode).name}"
    except ValueError:
        return f"signal {-returncode}"


@dataclass
class _Relayed:
    """What a relay child said about one test."""

    reports: list[dict[str, Any]] = field(default_factory=list)
    finished: bool = False


class _Child:
    """One relay child: started with the node ids it runs, followed through the events it writes."""

    def __init__(self, config: pytest.Config, nodeids: list[str], after: str, limit_s: float,
                 grant: Callable[[], float] | None = None, give_back: Callable[[], None] | None = None,
                 gpu_shared_by: tuple[str, ...] = ()) -> None:
        self.config = config
        self.nodeids = set(nodeids)
        self.tests: dict[str, _Relayed] = {}
        self.timed_out = False
        self.returncode: int | None = None
        self._offset = 0
        self._pending = ""
        self._dir = tempfile.mkdtemp(prefix="pipecheck-relay-")
        self.events = os.path.join(self._dir, "events.jsonl")
        open(self.events, "w").close()
        self._log = open(os.path.join(self._dir, "output.log"), "w+b")
        # on a GPU, the child's timings ask this process for the GPU alone (gpu_lease.RelayGpuGate): ``grant``
        # waits for it and returns the seconds that took, ``give_back`` ends it when the test ends
        self._grant, self._give_back = grant, give_back
        self._granted = False
        self._gate = os.path.join(self._dir, "gpu-alone") if grant is not None else None
        role = children.relay(self.events, after, self._gate, gpu_shared_by)
        # in the directory pytest was started in, with the node ids as paths from there: the tests see the
        # working directory they see without crash isolation, and the run's relative paths mean the same
        ids = self._ids_argument(children.from_run_dir(config, nodeids))
        cmd = children.command(config, config.stash[state.RUN_SEED], role, ids)
        self.deadline = time.monotonic() + limit_s
        try:
            self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                cmd, cwd=children.run_dir(config), stdin=subprocess.DEVNULL, stdout=self._log,
                stderr=subprocess.STDOUT, start_new_session=True)
            self.start_error = ""
        except OSError as exc:
            self.proc = None
            self.start_error = f"could not start {cmd[0]!r}: {exc}"

    def _ids_argument(self, nodeids: list[str]) -> list[str]:
        """The node ids, in a file read with pytest's ``@file`` where pytest has it (a long suite's ids
        would not fit one command line)."""
        if len(nodeids) < 64 or tuple(int(p) for p in pytest.__version__.split(".")[:2]) < (8, 2):
            return list(nodeids)
        path = os.path.join(self._dir, "nodeids.txt")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write("\n".join(nodeids) + "\n")
        return [f"@{path}"]

    def _read(self) -> None:
        try:
            with open(self.events, encoding="utf-8") as fh:
                fh.seek(self._offset)
                chunk = fh.read()
                self._offset = fh.tell()
        except OSError:
            return
        lines = (self._pending + chunk).split("\n")
        self._pending = lines.pop()  # a line still being written
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a line cut short by a dying child: the test it belonged to stays unfinished
            if event.get("event") == GRANT_EVENT:
                self._answer(event.get("number"))
                continue
            entry = self.tests.setdefault(str(event.get("nodeid", "")), _Relayed())
            if event.get("event") == "report" and isinstance(event.get("data"), dict):
                entry.reports.append(event["data"])
            elif event.get("event") == "finish":
                entry.finished = True
                self._end_grant()

    def _answer(self, number: object) -> None:
        """The child asks for the GPU alone before a timing: once this process has it to give, the grant file.
        The wait is not the child's: its time limit moves by as much."""
        if self._gate is None or self._grant is None or not isinstance(number, int):
            return
        self.deadline += self._grant()
        self._granted = True
        open(f"{self._gate}-{number}", "w").close()

    def _end_grant(self) -> None:
        if self._granted:
            self._granted = False
            if self._give_back is not None:
                self._give_back()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.returncode is None

    def wait_for(self, nodeid: str) -> _Relayed | None:
        """What the child said about ``nodeid`` once it finished that test, or ended without finishing it.
        Interrupted (SIGINT, or SIGTERM on the report writer), it kills the child: the child runs in a
        session of its own, which no signal meant for this process reaches."""
        try:
            return self._wait_for(nodeid)
        except BaseException:
            self.kill()
            raise

    def _wait_for(self, nodeid: str) -> _Relayed | None:
        while True:
            self._read()
            got = self.tests.get(nodeid)
            if (got is not None and got.finished) or not self.running:
                return got
            assert self.proc is not None
            self.returncode = self.proc.poll()
            if self.returncode is not None:
                self._read()
                return self.tests.get(nodeid)
            if time.monotonic() > self.deadline:
                self.timed_out = True
                self.kill()
                return self.tests.get(nodeid)
            time.sleep(_POLL_S)

    def kill(self) -> None:
        self._end_grant()  # a child that dies in a timed test gives the GPU back with its end
        if self.proc is None or self.proc.poll() is not None:
            if self.proc is not None:
                self.returncode = self.proc.returncode
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            self.proc.kill()
        self.returncode = self.proc.wait()

    def output_tail(self, size: int = _LOG_TAIL) -> str:
        try:
            self._log.flush()
            end = self._log.seek(0, os.SEEK_END)
            self._log.seek(max(0, end - size))
            return self._log.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    def close(self) -> None:
        self.kill()
        import shutil

        try:
            self._log.close()
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)


class ContainmentPlugin:
    """Probes the CUDA context after each test phase; fails, triages and relays after a fault; with crash
    isolation, relays every test from the start."""

    def __init__(self, config: pytest.Config, role: Role, isolate: str | None = None) -> None:
        self.config = config
        self.relay_file: str | None = role.relay_file if role.relay else None
        self.isolate = isolate  # why every test runs in a relay child (crash isolation), or None
        self.poisoned: str | None = None  # the error, once the context is dead
        self.poisoned_by: str | None = None
        self.children = 0
        self.child: _Child | None = None
        self._relay_out: Any = None
        if self.relay_file:
            self._relay_out = open(self.relay_file, "a", encoding="utf-8")  # kept open for the whole run

    # ------------------------------------------------------------------ relay child side
    def emit(self, event: dict[str, Any]) -> None:
        """One event to the parent (a relay child's only channel to it)."""
        if self._relay_out is not None:
            self._relay_out.write(json.dumps(event, default=str) + "\n")
            self._relay_out.flush()

    def pytest_runtest_logstart(self, nodeid: str, location: object) -> None:
        self.emit({"event": "start", "nodeid": nodeid})

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self._relay_out is not None:
            data = self.config.hook.pytest_report_to_serializable(config=self.config, report=report)
            self.emit({"event": "report", "nodeid": report.nodeid, "data": data})

    def pytest_runtest_logfinish(self, nodeid: str, location: object) -> None:
        self.emit({"event": "finish", "nodeid": nodeid})

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._relay_out is not None:
            self._relay_out.close()
            self._relay_out = None
        if self.child is not None:  # the run stopped early (-x, an interrupt): its child goes too
            self.child.close()
            self.child = None

    # ------------------------------------------------------------------ detection and triage
    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
        report = yield
        if self.poisoned is not None:
            return report
        error = cuda_probe.probe_context()
        if error is None:
            return report
        self.poisoned, self.poisoned_by = error, state.item_nodeid(item)
        self._write(f"CUDA context unusable after {report.when} of {self.poisoned_by}: {error}")
        message, result = self._triage(item, error, report.when)
        state.item_results(item).append(result)
        if report.passed and not result.expected:
            report.outcome = "failed"
            report.longrepr = message
        else:
            report.sections.append(("pipecheck: kernel fault", message))
        if self.relay_file:
            # a relay child stops here; its parent hands the rest to a fresh child
            item.session.shouldstop = f"pipecheck: CUDA context unusable after {self.poisoned_by}"
        return report

    def _write(self, msg: str) -> None:
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr.write_line(f"pipecheck: {msg}", yellow=True)

    def _finalized(self, item: pytest.Item, result: CheckResult) -> CheckResult:
        from .contract import finalize

        cfg = state.item_config(item)
        dev = self.config.stash[state.TIER].device
        return finalize(result, nodeid=state.item_nodeid(item), kernel=cfg.kernel,
                        expecting=bool(cfg.expect_failures),
                        gpu=f"{dev.name} (index {dev.index}, {dev.uuid})" if dev is not None else None)

    def _triage(self, item: pytest.Item, error: str, when: str) -> tuple[str, CheckResult]:
        """Fail message and ``fault`` result for the test that killed the context, with memcheck's
        findings from re-running that test alone."""
        lines = [f"pipecheck: the CUDA context of this process is unusable after the {when} of this test: "
                 f"{error}",
                 "(a sticky fault: illegal or misaligned address, launch failure or trap; every later CUDA call "
                 "in this process would fail too, so the later tests run in a fresh process)"]
        details: dict[str, Any] = {"error": error, "phase": when}
        summary = f"CUDA context dead after this test: {error}"
        triage, triage_details = self._memcheck(item)
        lines.append(triage)
        details["triage"] = triage_details
        if triage_details.get("findings_summary"):
            summary += f"; memcheck: {triage_details['findings_summary']}"
        return "\n".join(lines), self._finalized(item, CheckResult("fault", Verdict.FAIL, summary, details=details))

    def _memcheck(self, item: pytest.Item) -> tuple[str, dict[str, Any]]:
        from .sanitizer.locate import HOW_TO_GET, find_compute_sanitizer, not_found

        tier = self.config.stash[state.TIER]
        found = find_compute_sanitizer()
        if found is None or tier.device is None:
            why = f"{not_found()}; {HOW_TO_GET}" if tier.device is not None else "no GPU"
            return f"triage: not run: {why}", {"ran": False, "reason": why}
        from .sanitizer.child_command import BatchSpec, default_child_env
        from .sanitizer.runner import SanitizerRunner
        from .sanitizer.tool_outcomes import format_failure

        nodeid = state.item_nodeid(item)
        cfg = state.item_config(item)
        self._write(f"triage: re-running {nodeid} alone under compute-sanitizer memcheck")
        base = children.base_command(self.config, self.config.stash[state.RUN_SEED], quiet_output=False)
        runner = SanitizerRunner(found.path, cwd=str(self.config.rootpath), child_args=base,
                                 env=default_child_env(tier.device.uuid or str(tier.device.index)),
                                 timeouts={nodeid: cfg.sanitizer_timeout}, default_timeout=cfg.sanitizer_timeout,
                                 use_xml=True)
        try:
            out = runner.run(BatchSpec("memcheck", (nodeid,)))[nodeid]
        except Exception as exc:  # the triage is help, not the verdict: the test fails either way
            return (f"triage: memcheck could not run: {type(exc).__name__}: {exc}",
                    {"ran": False, "reason": str(exc)})
        info: dict[str, Any] = {"ran": True, "verdict": out.verdict.value, "summary": out.summary,
                                "findings": [f.to_json() for f in out.findings[:20]], "reproduce": out.command}
        if out.findings:
            info["findings_summary"] = out.summary
            return "triage (this test alone under memcheck):\n" + format_failure(out), info
        return (f"triage: memcheck re-ran this test alone and reported no invalid access ({out.verdict.value}: "
                f"{out.summary}); the fault may depend on the tests before it, or need racecheck or synccheck.\n"
                f"reproduce: {out.command}"), info

    # ------------------------------------------------------------------ relay, parent side
    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
        if self.relay_file or (self.poisoned is None and self.isolate is None):
            return None
        sanitizer = self.config.pluginmanager.get_plugin("pipecheck-sanitizer")
        if sanitizer is not None:
            sanitizer.flush_held()  # the tests that ran here before this one are logged first
        nodeid = state.item_nodeid(item)
        child = self.child
        fresh = child is None or nodeid not in child.nodeids or (not child.running and nodeid not in child.tests)
        if fresh:
            child = self._start_child(self._batch(item))
        assert child is not None
        relayed = child.wait_for(nodeid)
        if relayed is None and not fresh:
            # the child stopped before this test (it faulted in an earlier one): a fresh one runs the rest
            child = self._start_child(self._batch(item))
            relayed = child.wait_for(nodeid)
        problem: CheckResult | None = None
        if relayed is None or not relayed.finished:
            problem = self._describe_death(item, child, relayed)
            if child is not None:
                child.close()
            self.child = None
        ihook = item.ihook
        ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        reports = [self._report(item, d) for d in (relayed.reports if relayed else [])]
        if problem is not None:
            reports = [r for r in reports if r.when == "setup" and r.passed]
            state.item_results(item).append(problem)
            reports.append(pytest.TestReport(item.nodeid, item.location, {}, "failed",
                                             str(problem.details.get("message", problem.summary)), "call",
                                             user_properties=[]))
        self._replay(item, reports)
        ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    def _replay(self, item: pytest.Item, reports: list[pytest.TestReport]) -> None:
        """Each report, made to agree with this process's verdicts on the test (the sanitizer's), then
        logged as if the test had run here."""
        from . import verdicts
        from .results import CheckResult as _Result

        sanitizer = self.config.pluginmanager.get_plugin("pipecheck-sanitizer")
        for rep in reports:
            if sanitizer is not None and (rep.when == "call" or (rep.when == "setup" and not rep.passed)):
                sanitizer.record_for(item)
            carried = [_Result.from_json(d) for d in getattr(rep, "pipecheck_results", None) or []]
            verdicts.apply(item, rep, carried=carried)
            item.ihook.pytest_runtest_logreport(report=rep)

    def _report(self, item: pytest.Item, data: dict[str, Any]) -> pytest.TestReport:
        data = dict(data)
        # JSON turned the tuples of a serialized report into lists; pytest expects tuples back
        for key in ("location", "longrepr"):
            if isinstance(data.get(key), list):
                data[key] = tuple(data[key])
        rep = self.config.hook.pytest_report_from_serializable(config=self.config, data=data)
        rep.nodeid = item.nodeid  # keeps a pytest-xdist group suffix the child does not have
        if self.poisoned is not None:
            rep.sections.append(("pipecheck: relayed", f"run in a fresh process after the CUDA context of this "
                                                       f"one died in {self.poisoned_by} ({self.poisoned})"))
        return rep

    def _batch(self, item: pytest.Item) -> list[str]:
        """The node ids a new relay child runs: every later test this process would run, where that is
        known (without pytest-xdist, or under pipecheck's share scheduler); else this test alone."""
        items = item.session.items
        try:
            start = items.index(item)
        except ValueError:
            return [state.item_nodeid(item)]
        if getattr(self.config, "workerinput", None) is None:
            later = items[start:]
        else:
            share = item.stash.get(state.SHARE, None)
            later = [item] if share is None else [i for i in items[start:] if i.stash.get(state.SHARE, None) == share]
        return [state.item_nodeid(i) for i in later]

    def _time_limit(self, count: int) -> float:
        run_config = self.config.stash[state.RUN_CONFIG]
        per_test = float(getattr(run_config, "timeout", 0) or 0) or run_config.sanitizer_timeout
        return 120.0 + count * per_test

    def _start_child(self, nodeids: list[str]) -> _Child:
        if self.child is not None:
            self.child.close()
        self.children += 1
        why = (f"after the CUDA context died in {self.poisoned_by}" if self.poisoned is not None
               else f"to contain crashes on {self.isolate}")
        if self.poisoned is not None or self.children > 1:
            self._write(f"running {len(nodeids)} test(s) in a fresh process ({why}, relay {self.children})")
        tier = self.config.stash[state.TIER]
        self.child = _Child(self.config, nodeids, "fault" if self.poisoned is not None else "crash",
                            self._time_limit(len(nodeids)), self.grant_gpu if tier.has_gpu else None,
                            self.give_back_gpu if tier.has_gpu else None,
                            tuple(tier.gpu_shared_by) if tier.has_gpu else ())
        return self.child

    # ------------------------------------------------------------------ the GPU alone for a relay child's timing
    def grant_gpu(self) -> float:
        """A relay child is about to time a kernel: wait until nothing else of this run may run on the GPU. This
        process's sanitizer children end first, then the GPU's lease is taken alone (the other xdist workers on
        it have ended their tests, or wait for it too). Returns the seconds it waited."""
        started = time.monotonic()
        sanitizer = self.config.pluginmanager.get_plugin("pipecheck-sanitizer")
        if sanitizer is not None:
            sanitizer.wait_for_children()
        lease = self.config.pluginmanager.get_plugin("pipecheck-gpu-lease")
        if lease is not None:
            lease.alone_for_a_child()
        return time.monotonic() - started

    def give_back_gpu(self) -> None:
        lease = self.config.pluginmanager.get_plugin("pipecheck-gpu-lease")
        if lease is not None:
            lease.shared_again()

    def _describe_death(self, item: pytest.Item, child: _Child | None, relayed: _Relayed | None) -> CheckResult:
        """The result of a test its relay child did not finish: a crash (the child died in it), a hang past
        the child's time limit, or a child that never reached it."""
        if child is None or child.proc is None:
            reason = child.start_error if child is not None else "no relay child"
            text = f"pipecheck: the fresh process for this test could not run: {reason}"
            return self._finalized(item, CheckResult("crash", Verdict.ERROR, text, details={"message": text}))
        tail = child.output_tail()
        how = _signal_name(child.returncode)
        after = f" after the kernel fault in {self.poisoned_by}" if self.poisoned is not None else ""
        if child.timed_out:
            text = (f"pipecheck: the process running this test{after} was killed after its time limit; its "
                    f"output ends:\n{tail[-_OUTPUT_TAIL:]}")
            return self._finalized(item, CheckResult("crash", Verdict.ERROR, "killed after its time limit",
                                                     details={"message": text}))
        if relayed is None:
            what = "reported no test at all" if not child.tests else "ended before it reached this test"
            text = (f"pipecheck: the fresh process that runs the tests{after} {what} ({how}); its output "
                    f"ends:\n{tail[-_OUTPUT_TAIL:]}")
            return self._finalized(item, CheckResult("crash", Verdict.ERROR, f"relay ended before this test ({how})",
                                                     details={"message": text}))
        site = crash_site(tail)
        died = (f"the fresh process that runs the tests{after} died while running this test ({how})" if after
                else f"the test process crashed during this test ({how})")
        summary = died + (f" {site}" if site else "")
        start = tail.rfind("Fatal Python error")
        # the fault handler's report from its first line (the innermost frames first), else the output's end
        excerpt = tail[start:start + _OUTPUT_TAIL] if start >= 0 else tail[-_OUTPUT_TAIL:]
        text = (f"pipecheck: {summary}.\nThe tests before it keep their verdicts; the tests after it run in a fresh "
                f"process. The process's last output:\n{excerpt}")
        return self._finalized(item, CheckResult("crash", Verdict.FAIL, summary,
                                                 details={"message": text, "returncode": child.returncode,
                                                          "site": site}))
