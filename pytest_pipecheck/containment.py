"""A kernel fault must not take the session down.

An illegal or misaligned address, a launch failure or a device-side trap leaves a *sticky* error in
the process's CUDA context: every later CUDA call in that process fails with the same error. Measured
on an H100 (FACTS.md 7): one third-party Triton matmul that faulted at a ragged shape turned the 70
tests after it into failures that all blamed themselves. So, after every phase of every test, pipecheck
probes the context (without ever creating one) and, when it is dead:

1. the test that left it dead fails, and says that it faulted (also when its own body passed: the
   fault can surface only at the next synchronization);
2. pipecheck triages the fault: it re-runs that one test alone under compute-sanitizer memcheck and
   attaches what memcheck reports (kernel, source line, address) to the failure and to a ``fault``
   result;
3. every later test of this process runs in a fresh pytest process (a *relay* child) and gets its own
   verdict, as if nothing had happened; their reports are replayed here, so the terminal, the JUnit XML,
   pytest-xdist and pipecheck's reports see them as usual. A relay child that faults in its turn stops
   after that test; the rest goes to the next child.

The sanitizer's children have their own containment (``ChildPlugin`` stops a poisoned child and the
runner re-runs the rest in a fresh one).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import pytest

from . import children, cuda_probe, state
from .children import Role
from .results import CheckResult, Verdict

__all__ = ["ContainmentPlugin"]

_OUTPUT_TAIL = 4000


@dataclass
class _Relayed:
    """What a relay child said about one test."""

    reports: list[dict[str, Any]] = field(default_factory=list)
    finished: bool = False


@dataclass
class _ChildRun:
    tests: dict[str, _Relayed]
    returncode: int | None
    output: str
    timed_out: bool
    nodeids: list[str]


class ContainmentPlugin:
    """Probes the CUDA context after each test phase; fails, triages and relays after a fault."""

    def __init__(self, config: pytest.Config, role: Role) -> None:
        self.config = config
        self.relay_file: str | None = role.relay_file if role.relay else None
        self.poisoned: str | None = None  # the error, once the context is dead
        self.poisoned_by: str | None = None
        self.cache: dict[str, _Relayed] = {}
        self.children = 0
        self._relay_out: Any = None
        if self.relay_file:
            self._relay_out = open(self.relay_file, "a", encoding="utf-8")  # kept open for the whole run

    # ------------------------------------------------------------------ relay child side
    def _emit(self, event: dict[str, Any]) -> None:
        if self._relay_out is not None:
            self._relay_out.write(json.dumps(event, default=str) + "\n")
            self._relay_out.flush()

    def pytest_runtest_logstart(self, nodeid: str, location: object) -> None:
        self._emit({"event": "start", "nodeid": nodeid})

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self._relay_out is not None:
            data = self.config.hook.pytest_report_to_serializable(config=self.config, report=report)
            self._emit({"event": "report", "nodeid": report.nodeid, "data": data})

    def pytest_runtest_logfinish(self, nodeid: str, location: object) -> None:
        self._emit({"event": "finish", "nodeid": nodeid})

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._relay_out is not None:
            self._relay_out.close()
            self._relay_out = None

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

    def _triage(self, item: pytest.Item, error: str, when: str) -> tuple[str, CheckResult]:
        """Fail message and ``fault`` result for the test that killed the context, with memcheck's
        findings from re-running that test alone."""
        from .contract import finalize

        nodeid = state.item_nodeid(item)
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
        cfg = state.item_config(item)
        dev = self.config.stash[state.TIER].device
        result = finalize(CheckResult("fault", Verdict.FAIL, summary, details=details), nodeid=nodeid,
                          kernel=cfg.kernel, expecting=bool(cfg.expect_failures),
                          gpu=f"{dev.name} (index {dev.index}, {dev.uuid})" if dev is not None else None)
        return "\n".join(lines), result

    def _memcheck(self, item: pytest.Item) -> tuple[str, dict[str, Any]]:
        from .sanitizer.locate import HOW_TO_GET, find_compute_sanitizer, not_found

        tier = self.config.stash[state.TIER]
        found = find_compute_sanitizer()
        if found is None or tier.device is None:
            why = f"{not_found()}; {HOW_TO_GET}" if tier.device is not None else "no GPU"
            return f"triage: not run: {why}", {"ran": False, "reason": why}
        from .sanitizer.runner import BatchSpec, SanitizerRunner, default_child_env, format_failure

        nodeid = state.item_nodeid(item)
        cfg = state.item_config(item)
        self._write(f"triage: re-running {nodeid} alone under compute-sanitizer memcheck")
        runner = SanitizerRunner(found.path, cwd=str(self.config.rootpath), child_args=children.base_command(self.config, self.config.stash[state.RUN_SEED],
                                                                           quiet_output=False),
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
        if self.poisoned is None or self.relay_file:
            return None
        nodeid = state.item_nodeid(item)
        relayed = self.cache.pop(nodeid, None)
        problem = ""
        if relayed is None:
            run = self._run_child(self._batch(item))
            for n, r in run.tests.items():
                self.cache.setdefault(n, r)
            relayed = self.cache.pop(nodeid, None)
            if relayed is None or not relayed.finished:
                problem = self._describe_death(run, relayed)
        elif not relayed.finished:
            problem = "the fresh process ended before this test finished"
        ihook = item.ihook
        ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        reports = [self._report(item, d) for d in (relayed.reports if relayed else [])]
        if problem:
            reports = [r for r in reports if r.when == "setup" and r.passed]
            reports.append(pytest.TestReport(item.nodeid, item.location, {}, "failed", problem, "call",
                                             user_properties=[]))
        for rep in reports:
            if rep.when == "call" or (rep.when == "setup" and not rep.passed):
                self._merge_sanitizer(item, rep)
            ihook.pytest_runtest_logreport(report=rep)
        ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    def _report(self, item: pytest.Item, data: dict[str, Any]) -> pytest.TestReport:
        data = dict(data)
        # JSON turned the tuples of a serialized report into lists; pytest expects tuples back
        for key in ("location", "longrepr"):
            if isinstance(data.get(key), list):
                data[key] = tuple(data[key])
        rep = self.config.hook.pytest_report_from_serializable(config=self.config, data=data)
        rep.nodeid = item.nodeid  # keeps a pytest-xdist group suffix the child does not have
        rep.sections.append(("pipecheck: relayed", f"run in a fresh process after the CUDA context of this one "
                                                   f"died in {self.poisoned_by} ({self.poisoned})"))
        return rep

    def _merge_sanitizer(self, item: pytest.Item, rep: pytest.TestReport) -> None:
        plugin = self.config.pluginmanager.get_plugin("pipecheck-sanitizer")
        if plugin is not None and hasattr(plugin, "relayed_report"):
            plugin.relayed_report(item, rep)

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

    def _child_command(self, nodeids: list[str], relay_file: str) -> list[str]:
        return children.command(self.config, self.config.stash[state.RUN_SEED], children.relay(relay_file, "fault"),
                                nodeids)

    def _time_limit(self, count: int) -> float:
        per_test = float(getattr(self.config.stash[state.RUN_CONFIG], "timeout", 0) or 0) or \
            self.config.stash[state.RUN_CONFIG].sanitizer_timeout
        return 120.0 + count * per_test

    def _run_child(self, nodeids: list[str]) -> _ChildRun:
        self.children += 1
        self._write(f"running {len(nodeids)} test(s) in a fresh process (relay {self.children})")
        fd, path = tempfile.mkstemp(prefix="pipecheck-relay-", suffix=".jsonl")
        os.close(fd)
        log_fd, log_path = tempfile.mkstemp(prefix="pipecheck-relay-", suffix=".log")
        timed_out = False
        try:
            cmd = self._child_command(nodeids, path)
            with os.fdopen(log_fd, "w+b") as log:
                try:
                    proc = subprocess.Popen(cmd, cwd=str(self.config.rootpath), stdin=subprocess.DEVNULL,
                                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
                except OSError as exc:
                    return _ChildRun({}, None, f"could not start {cmd[0]!r}: {exc}", False, nodeids)
                deadline = time.monotonic() + self._time_limit(len(nodeids))
                rc: int | None = None
                try:
                    while rc is None:
                        try:
                            rc = proc.wait(timeout=1.0)
                        except subprocess.TimeoutExpired:
                            if time.monotonic() > deadline:
                                timed_out = True
                                _kill_group(proc)
                                rc = proc.wait()
                except BaseException:
                    # interrupted (SIGINT, or SIGTERM on the report writer): the child runs in a session of
                    # its own, which no signal meant for this process reaches, so it is killed here
                    _kill_group(proc)
                    proc.wait()
                    raise
                log.seek(0)
                output = log.read().decode("utf-8", "replace")
            tests = _read_events(path)
        finally:
            for p in (path, log_path):
                try:
                    os.unlink(p)
                except OSError:
                    pass
        return _ChildRun(tests, rc, output, timed_out, nodeids)

    def _describe_death(self, run: _ChildRun, relayed: _Relayed | None) -> str:
        tail = run.output[-_OUTPUT_TAIL:]
        if run.timed_out:
            what = "was killed after its time limit while running this test"
        elif relayed is None and not run.tests:
            what = f"reported no test at all (exit status {run.returncode})"
        elif relayed is None:
            what = f"ended before it reached this test (exit status {run.returncode})"
        else:
            what = f"died while running this test (exit status {run.returncode})"
        return (f"pipecheck: the fresh process that runs the tests after the kernel fault in {self.poisoned_by} "
                f"{what}; its output ends:\n{tail}")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _read_events(path: str) -> dict[str, _Relayed]:
    tests: dict[str, _Relayed] = {}
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return tests
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line cut short by a dying child: the test it belonged to stays unfinished
        nodeid = str(event.get("nodeid", ""))
        entry = tests.setdefault(nodeid, _Relayed())
        if event.get("event") == "report" and isinstance(event.get("data"), dict):
            entry.reports.append(event["data"])
        elif event.get("event") == "finish":
            entry.finished = True
    return tests
