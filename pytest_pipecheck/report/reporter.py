"""The run's reports: every test's outcome and check results gathered, the terminal summary, and the
JSON, HTML and Markdown files (the Markdown text also appended to GitHub's job summary), written by the
one process that has every result (the controller under pytest-xdist; never a worker or a child
pipecheck started).

The report writer marks each report as in progress when the session starts, and on SIGTERM or SIGINT
ends the session early, writing what it has and which signal interrupted it (:mod:`.interrupt`); a
report at its path never reads as a pass for a run that did not finish.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Literal

import pytest

from ..config import PipecheckConfig
from ..results import CheckResult
from ..state import RUN_CONFIG, RUN_SEED, SESSION_OUTCOMES, SESSION_RESULTS, TIER
from .interrupt import (
    FINISHED,
    INTERRUPTED,
    RUNNING,
    Interruption,
    SignalGuard,
    SignalReceived,
    allow_children,
)
from .markdown import STEP_SUMMARY_ENV, StepSummary
from .outcomes import TestOutcomes

__all__ = ["REPORT_WRITE_FAILED", "ReportPlugin", "check_report_paths", "report_option", "step_summary_path"]

#: the exit status of a run whose report (--pipecheck-json / --pipecheck-html / --pipecheck-markdown /
#: $GITHUB_STEP_SUMMARY) could not be written at the end, when it would otherwise have been 0: pytest's
#: "usage error", as for a bad report path caught at start-up. A run that already failed keeps its own status.
REPORT_WRITE_FAILED = int(pytest.ExitCode.USAGE_ERROR)

#: the report files, by setting name
REPORTS = ("json", "html", "markdown")
#: how messages name the job summary file, which no option gives
STEP_SUMMARY = "$GITHUB_STEP_SUMMARY"
#: the node id of the failure a run that checked nothing ends with (docs/verdicts.md, "A run that checked nothing")
NOTHING_CHECKED = "pipecheck::nothing_checked"
#: the node id of the failure a run whose requested report could not be written ends with
REPORTS_NOT_WRITTEN = "pipecheck::reports"
#: the node id of the failure an interrupted run ends with, where none of its tests failed
INTERRUPTED_RUN = "pipecheck::interrupted"
#: the run's failure for a parametrized mutant test none of whose cases caught its bug: EXPECT_FAILURES[function]
EXPECT_FAILURES = "pipecheck::expect_failures"


def step_summary_path(run_config: PipecheckConfig) -> str | None:
    """The job summary file to append the Markdown report to: ``$GITHUB_STEP_SUMMARY`` (GitHub Actions
    sets it in every step) when it is set and the run checks with pipecheck or asks for a report; else None.
    """
    path = os.environ.get(STEP_SUMMARY_ENV, "").strip()
    if not path or not (run_config.enabled or any(getattr(run_config, name) for name in REPORTS)):
        return None
    return path


def report_option(run_config: PipecheckConfig, name: str, value: str | None = None) -> str:
    """Where a report path came from (``--pipecheck-json`` or the ini key), with its value if given."""
    if run_config.sources.get(name, "") == "ini":
        return f"pipecheck_{name} = {value} in the ini file" if value is not None else f"pipecheck_{name} (ini file)"
    return f"--pipecheck-{name}={value}" if value is not None else f"--pipecheck-{name}"


def _path_problem(path: str, *, append: bool) -> str | None:
    """Why a report cannot be written at ``path`` (None when it can): a directory, a symlink, a FIFO or a
    device there (reports are written as regular files only), or no writable directory for it. A file
    that is ``append``-ed to must be writable itself, and its directory must exist (it is not created)."""
    from .._atomic import describe_non_regular

    target = os.path.abspath(path)
    found = describe_non_regular(target)
    if found:
        return f"the path is {found}; reports are written as regular files only"
    parent = os.path.dirname(target)
    if append:
        if os.path.lexists(target):
            return None if os.access(target, os.W_OK) else "the file is not writable"
        if not os.path.lexists(parent):
            return f"the directory {parent!r} does not exist"
    while not os.path.lexists(parent) and os.path.dirname(parent) != parent:
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return f"{parent!r} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"the directory {parent!r} is not writable"
    return None


def check_report_paths(run_config: PipecheckConfig, step_summary: str | None = None) -> None:
    """A report path that cannot be written is a usage error now, not a line after the results.

    The path must not be a directory, a symlink, a FIFO or a device (reports are written as regular
    files only), and its nearest existing parent must be a writable directory. ``step_summary``, the
    job summary the Markdown report is appended to, must be a writable file or one that can be created
    in its existing directory.
    """
    for name in REPORTS:
        path = getattr(run_config, name)
        if not path:
            continue
        problem = _path_problem(path, append=False)
        if problem is not None:
            raise pytest.UsageError(f"pipecheck: {report_option(run_config, name, path)}: the report cannot be "
                                    f"written there: {problem}")
    if step_summary:
        problem = _path_problem(step_summary, append=True)
        if problem is not None:
            raise pytest.UsageError(
                f"pipecheck: {STEP_SUMMARY}={step_summary} (the job summary GitHub Actions shows): the Markdown "
                f"report cannot be appended there: {problem}; unset {STEP_SUMMARY_ENV} for no job summary")


class ReportPlugin:
    """Gathers every test's outcome and check results on this process; on the report writer (``writes``),
    prints the summary and writes the report files."""

    def __init__(self, config: pytest.Config, *, writes: bool) -> None:
        self.config = config
        self.writes = writes
        self.guard: SignalGuard | None = None
        self.interruption: Interruption | None = None
        #: per parametrized mutant test function: its expectation and what each case caught
        self.expectations: dict[str, dict[str, Any]] = {}
        self.expectation_lines: list[str] = []  # the functions whose bug some case caught, for the summary
        config.stash[SESSION_RESULTS] = []
        config.stash[SESSION_OUTCOMES] = TestOutcomes()
        # read once, here: the variable names the summary of the step this run started in
        path = step_summary_path(config.stash[RUN_CONFIG]) if writes else None
        self.step_summary = StepSummary(path) if path else None
        if writes:
            check_report_paths(config.stash[RUN_CONFIG], path)

    def _wants_reports(self) -> bool:
        run_config = self.config.stash[RUN_CONFIG]
        return self.step_summary is not None or any(getattr(run_config, name) for name in REPORTS)

    # ------------------------------------------------------------------ the run's start and its interruption
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        run_config = self.config.stash[RUN_CONFIG]
        wants_reports = self._wants_reports()
        if self.writes and (wants_reports or run_config.enabled):
            # SIGTERM (a CI job's timeout) would end the process with no report and leave the children
            # running; SIGINT is already a KeyboardInterrupt, but which signal it was is kept
            self._guard(("SIGTERM", "SIGINT"))
        elif not self.writes and run_config.enabled and getattr(self.config, "workerinput", None) is not None:
            # an xdist worker that is stopped gets SIGINT (from its controller, or Ctrl-C): the sanitizer
            # children its other threads watch are killed too. SIGTERM keeps its default action here.
            self._guard(("SIGINT",))
        if self.writes and wants_reports:
            # a run that dies from here on (killed, out of memory, a crash) leaves this, not the last verdict
            with self._deferred(raise_after=True):
                self._write_reports(RUNNING, None)

    def _guard(self, names: tuple[str, ...]) -> None:
        guard = SignalGuard()
        if guard.install(names):
            self.guard = guard

    def _deferred(self, *, raise_after: bool) -> AbstractContextManager[None]:
        return self.guard.deferred(raise_after=raise_after) if self.guard is not None else nullcontext()

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        if not self.writes:
            return
        signal_name = self.guard.received if self.guard is not None else None
        exc = excinfo.value
        reason = str(exc) if isinstance(exc, SignalReceived) else (excinfo.exconly().strip().splitlines() or [""])[0]
        self.interruption = Interruption(signal_name, reason[:500])
        # written now, before the other plugins wind down (pytest-xdist waits for its workers): a second
        # signal or a kill during that wait still leaves a report that says what happened
        returncode = getattr(excinfo.value, "returncode", None)
        status = int(returncode) if isinstance(returncode, int) else int(pytest.ExitCode.INTERRUPTED)
        if self._wants_reports():
            with self._deferred(raise_after=False):  # what could not be written is said at the end
                self._write_reports(INTERRUPTED, status, quiet=True)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.guard is not None:
            self.guard.restore()
            self.guard = None
        allow_children()  # a later session in this process (pytester's) may start children again

    # ------------------------------------------------------------------ gathering
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if getattr(report, "pipecheck_run_failure", False):
            return  # the run's own failure, not a test's: the reports say it in their words (nothing_checked, ...)
        self.config.stash[SESSION_OUTCOMES].add(report)
        expect = getattr(report, "pipecheck_expect", None)
        if isinstance(expect, dict) and isinstance(expect.get("function"), str):
            entry = self.expectations.setdefault(expect["function"], {"expect": expect.get("expect"), "cases": {}})
            entry["cases"][str(expect.get("case"))] = [str(n) for n in expect.get("caught") or []]
        data = getattr(report, "pipecheck_results", None)
        if data:
            self.config.stash[SESSION_RESULTS].extend(CheckResult.from_json(d) for d in data)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed or report.skipped:  # a skipped module is in the reports, with its reason
            self.config.stash[SESSION_OUTCOMES].add(report)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if not session.config.option.collectonly:
            self.config.stash[SESSION_OUTCOMES].expect(item.nodeid for item in session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        # the controller of pytest-xdist collects nothing itself: each worker sends its node ids
        if not self.config.option.collectonly:
            self.config.stash[SESSION_OUTCOMES].expect(ids)

    # outermost (tryfirst) of the wrappers: the tests other plugins log after the loop (the held tests of the
    # sanitizer, the tests no xdist worker ran) are in before the run is judged
    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        result = yield
        self._judge_mutants_across_cases(session)
        self._fail_a_run_that_checked_nothing(session)
        return result

    def _judge_mutants_across_cases(self, session: pytest.Session) -> None:
        """A parametrized mutant test (``expect_failures``) passes when the checks it names caught its bug at some
        of its cases (:func:`pytest_pipecheck.verdicts.mutant_function`): said in the summary, with the cases
        that caught it. Where no case did, the run fails (``pipecheck::expect_failures[...]``) and a failing
        ``expect_failures`` check result names the function and its cases, so every report says so. Not judged
        for a run that stopped early: its cases did not all run, and its status says so already."""
        if not self.writes or session.shouldfail or session.shouldstop or session.config.option.collectonly:
            return
        from ..contract import expected_checks, unmet_across_cases
        from ..results import Verdict

        for function, entry in sorted(self.expectations.items()):
            cases: dict[str, list[str]] = entry["cases"]
            expect = tuple(entry["expect"]) if isinstance(entry["expect"], list) else True
            unmet = unmet_across_cases(cases, expect)
            caught = [c.removeprefix(function) for c, got in cases.items() if got]
            if not unmet:
                shown = ", ".join(caught[:6]) + (f" and {len(caught) - 6} more" if len(caught) > 6 else "")
                self.expectation_lines.append(
                    f"pipecheck: {function}: the planted bug was caught at {len(caught)} of {len(cases)} cases "
                    f"({shown}); at the others it did not show")
                continue
            named = expected_checks(expect)
            summary = ((f"expected {', '.join(named)} to catch the planted bug at some case; {', '.join(unmet)} "
                        f"caught it at none of its {len(cases)} cases") if named else
                       f"expected a check to catch the planted bug at some case; none did at any of its {len(cases)} "
                       "cases") + " (the mutant was missed)"
            session.config.stash[SESSION_RESULTS].append(
                CheckResult("expect_failures", Verdict.FAIL, summary, nodeid=function,
                            details={"cases": sorted(cases), "caught_at": caught, "unmet": unmet}))
            self._run_failure(f"{EXPECT_FAILURES}[{function}]", f"pipecheck: {function}: {summary}; cases: "
                                                               + ", ".join(c.removeprefix(function) for c in cases))

    def _fail_a_run_that_checked_nothing(self, session: pytest.Session) -> None:
        """A run under pipecheck (``--pipecheck`` or a report asked for) in which no test passed and no check
        passed ends with a failure of its own, so that pytest's exit status (1) and the JUnit XML say what the
        reports say (``nothing_checked``): a gate that checked nothing is not a pass. pytest alone exits 0
        when every test skipped (5 when none was collected). Not for a run that failed, stopped early or only
        collected: its status says that already."""
        run_config = self.config.stash[RUN_CONFIG]
        if not self.writes or not (run_config.enabled or self._wants_reports()):
            return
        if session.config.option.collectonly or session.testsfailed or session.shouldfail or session.shouldstop:
            return
        outcomes = self.config.stash[SESSION_OUTCOMES]
        results = self.config.stash[SESSION_RESULTS]
        from . import json_report

        if outcomes.bad() or not json_report.nothing_checked(results, outcomes):
            return
        doc = json_report.build(results, self.config.stash[TIER], self.config.stash[RUN_SEED], outcomes, 0)
        text = (f"pipecheck: {doc['reason']}\n(a merge gate that checked nothing does not pass: run the tests "
                "where they can run, with their kernel library and the GPU they need; docs/verdicts.md, \"A run "
                "that checked nothing\")")
        self._run_failure(NOTHING_CHECKED, text)

    def _run_failure(self, nodeid: str, text: str) -> None:
        """Log a failure of the run itself (not of a test) as pytest logs a test's: the JUnit XML, the terminal
        and every other plugin see it; pipecheck's own reports say it in their own words instead."""
        path, _, name = nodeid.partition("::")
        phases: tuple[tuple[Literal["call", "teardown"], Literal["failed", "passed"]], ...] = (
            ("call", "failed"), ("teardown", "passed"))
        for when, outcome in phases:
            report = pytest.TestReport(nodeid=nodeid, location=(path, None, name), keywords={},
                                       outcome=outcome, longrepr=text if outcome == "failed" else None,
                                       when=when, user_properties=[])
            report.pipecheck_run_failure = True  # type: ignore[attr-defined]
            self.config.hook.pytest_runtest_logreport(report=report)

    # ------------------------------------------------------------------ the summary and the files
    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if not self.writes:
            return
        results = config.stash.get(SESSION_RESULTS, [])
        run_config = config.stash[RUN_CONFIG]
        if not results and not run_config.enabled:
            return
        from . import terminal

        terminal.write_summary(terminalreporter, results, config.stash[TIER], run_config)
        for line in self.expectation_lines:
            terminalreporter.write_line(line)

    # first: before pytest's JUnit XML is written, so that a report that could not be written is a failure there too
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if not self.writes:
            return
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        interruption = self.interruption
        if interruption is not None and interruption.signal and tr is not None:
            said = "; the reports say the run was interrupted and did not pass" if self._wants_reports() else ""
            tr.write_line(f"pipecheck: {interruption.signal} received: the session ended early{said}", red=True)
        gates = self.config.stash[RUN_CONFIG].enabled or self._wants_reports()
        if interruption is not None and gates and session.exitstatus == 0:
            # pytest.exit(returncode=0) in a test or a plugin: the run did not finish, and its reports say so; its
            # exit status must not say pass
            session.exitstatus = exitstatus = pytest.ExitCode.INTERRUPTED
        with self._deferred(raise_after=False):  # a second signal must not leave a report half-decided
            failed = self._write_reports(INTERRUPTED if interruption is not None else FINISHED, int(exitstatus))
        if interruption is not None and gates and not session.testsfailed:
            # nothing failed before the interruption: the JUnit XML (written after this) would list only passes
            self._run_failure(INTERRUPTED_RUN, f"pipecheck: the run was {interruption.describe()} before it finished: "
                                               "the tests it did not reach were not run, and it did not pass")
        if failed:
            if session.exitstatus == 0:
                # a report that CI relies on is missing: the run must not read as a success
                session.exitstatus = REPORT_WRITE_FAILED
                if tr is not None:
                    tr.write_line(f"pipecheck: exit status {REPORT_WRITE_FAILED}: a requested report could not be "
                                  "written", red=True)
                # the JUnit XML (written after this) and the terminal's counts say so too, not "all passed"
                self._run_failure(REPORTS_NOT_WRITTEN, "\n".join(failed))

    def _write_reports(self, state: str, status: int | None, *, quiet: bool = False) -> list[str]:
        """Write the requested reports for a run in ``state`` with exit status ``status``; the lines saying
        what could not be written (shown in red unless ``quiet``), or none."""
        config = self.config
        run_config = config.stash[RUN_CONFIG]
        results = config.stash.get(SESSION_RESULTS, [])
        outcomes = config.stash.get(SESSION_OUTCOMES, None) or TestOutcomes()
        interruption = self.interruption if state == INTERRUPTED else None
        tr = config.pluginmanager.get_plugin("terminalreporter")
        if state == RUNNING:  # the run's start: nothing gathered yet, whatever this process holds
            results, outcomes = [], TestOutcomes()
        failed: list[str] = []
        # a report that fails changes the run's verdict (a passing run's exit status becomes 4): the reports written
        # before it are written again with that status, so that none of them says "ok" for that run
        broken: set[str] = set()
        seen = -1
        while len(failed) != seen:
            seen = len(failed)
            shown = REPORT_WRITE_FAILED if failed and status == 0 and state == FINISHED else status
            again = seen > 0
            if run_config.json and "json" not in broken:
                from . import json_report

                try:
                    json_report.write(run_config.json, results, config.stash[TIER], config.stash[RUN_SEED],
                                      outcomes, shown, state=state, interrupted=interruption,
                                      not_written=list(failed))
                except Exception as exc:  # a bug in the report must not hide the results: it fails the run instead
                    reason = (exc.strerror or str(exc)) if isinstance(exc, OSError) \
                        else f"{type(exc).__name__}: {exc}"
                    failed.append(f"pipecheck: could not write the JSON report to {run_config.json!r} "
                                  f"({report_option(run_config, 'json')}): {reason}")
                    broken.add("json")
            if run_config.html and "html" not in broken:
                from . import html as html_report

                # never raises: a bad path or a plotting bug becomes a red line and a failed run
                written, line = html_report.write_html_for_run(run_config.html, results, config.stash[TIER],
                                                               config.stash[RUN_SEED], run_config, outcomes=outcomes,
                                                               exitstatus=shown, source_roots=[str(config.rootpath)],
                                                               state=state, interrupted=interruption)
                if written:
                    if tr is not None and not quiet and state != RUNNING and not again:
                        tr.write_line(line)
                else:
                    failed.append(f"{line} ({report_option(run_config, 'html')})")
                    broken.add("html")
            if "markdown" not in broken:
                before = len(failed)
                self._write_markdown(state, status, interruption, results, outcomes, failed, quiet=quiet or again)
                if len(failed) > before:
                    broken.add("markdown")  # its targets that could be written say so already
        if state == RUNNING and failed:
            failed = [f"{line}; a run that ends without its reports leaves the previous ones at their paths"
                      for line in failed]
        for line in failed:
            if tr is not None and not quiet:
                tr.write_line(line, red=True)
        return failed

    def _write_markdown(self, state: str, status: int | None, interruption: Interruption | None,
                        results: list[CheckResult], outcomes: TestOutcomes, failed: list[str], *, quiet: bool) -> None:
        """Write the Markdown report and append it to the job summary; what could not be written goes to
        ``failed``. Written after the other reports, so that its verdict counts theirs: a run whose JSON
        report could not be written ends with exit status 4, and the Markdown says so."""
        config = self.config
        run_config = config.stash[RUN_CONFIG]
        if not run_config.markdown and self.step_summary is None:
            return
        from . import markdown

        targets: list[tuple[str, str, Any]] = []
        if run_config.markdown:
            targets.append((run_config.markdown, report_option(run_config, "markdown"),
                            lambda t, p=run_config.markdown: markdown.write(p, t)))
        if self.step_summary is not None:
            targets.append((self.step_summary.path, STEP_SUMMARY, self.step_summary.write))
        # a target that fails changes the run's verdict (its exit status becomes 4): the others are written
        # again, so that none of them says "merge OK" for that run
        ok = list(targets)
        rendered: dict[int, str] = {}
        seen = -1
        while len(failed) != seen:
            seen = len(failed)
            for target in list(ok):
                path, option, write = target
                shown = REPORT_WRITE_FAILED if failed and status == 0 and state == FINISHED else status
                try:
                    # rendered once for what has failed so far: the file and the job summary get the same text,
                    # to its time stamp
                    if len(failed) not in rendered:
                        rendered[len(failed)] = markdown.render(results, config.stash[TIER], config.stash[RUN_SEED],
                                                                outcomes, shown, state=state, interrupted=interruption,
                                                                not_written=failed)
                    write(rendered[len(failed)])
                except Exception as exc:  # a bug in the report must not hide the results: it fails the run
                    reason = (exc.strerror or str(exc)) if isinstance(exc, OSError) \
                        else f"{type(exc).__name__}: {exc}"
                    failed.append(f"pipecheck: could not write the Markdown report to {path!r} ({option}): "
                                  f"{reason}")
                    ok.remove(target)
        tr = config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None and not quiet and state != RUNNING:
            for path, option, _ in ok:
                done = "appended to" if option == STEP_SUMMARY else "written to"
                tr.write_line(f"pipecheck: Markdown report {done} {path} ({option})")
