"""The parent's held reports: tests run while the sanitizer children that judge them still run.

``HeldReports`` (between :class:`.batches.SanitizerBatches` and :class:`.parent_plugin.SanitizerPlugin`) runs
a test at once beside the children, holds its reports, and logs them in collection order once its verdicts are
in, each report made to agree with its results (:mod:`pytest_pipecheck.verdicts`). A held test that asks for
the GPU alone stops, and runs again from its start at the end, the children done. In an xdist worker the
reports go out as the test's (:func:`pytest_pipecheck.xdist_hooks.reporting_as`).
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from .. import state
from ..results import Verdict
from ..xdist_hooks import reporting_as, worker_interactor
from .batches import SanitizerBatches
from .item_verdicts import OUTCOMES, POSTPONED, RECORDED, _times_with_benchmark, expected_tools
from .tool_outcomes import TestOutcome

__all__ = ["HeldReports"]


class HeldReports(SanitizerBatches):
    """Parent side: the held runs of the tests and their reports, logged once their verdicts are in."""

    # ------------------------------------------------------------------ held reports
    #: plugins whose pytest_runtest_protocol (not a wrapper) a held run may stand in for: pytest's own runner,
    #: this plugin, and the containment relay (which logs the held tests before it takes over)
    PROTOCOLS_HELD_FOR = frozenset({"runner", "pipecheck-sanitizer", "pipecheck-containment"})

    def _others_run_no_tests(self, config: pytest.Config) -> bool:
        """Whether no other plugin runs tests its own way (a pytest_runtest_protocol that is not a wrapper:
        pytest-rerunfailures, say). A held run would stand in for it; so such a run waits before each test
        for its verdicts instead, and says so once."""
        if not hasattr(self, "_other_protocols"):
            hook = config.pluginmanager.hook.pytest_runtest_protocol
            self._other_protocols = sorted(
                {impl.plugin_name for impl in hook.get_hookimpls() if not (impl.hookwrapper or impl.wrapper)}
                - self.PROTOCOLS_HELD_FOR)
            if self._other_protocols:
                self._write(f"{', '.join(self._other_protocols)} run(s) tests its own way "
                            "(pytest_runtest_protocol): each test waits for its sanitizer verdicts before it runs, "
                            "rather than running beside the children")
        return not self._other_protocols

    def _run_held(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool:
        """Run ``item`` now, while children that judge it may still run, holding its reports until its verdicts
        are in (they are logged in collection order: :meth:`_flush_held`). False where it runs as usual instead:
        no child runs any more, or it times with pytest-benchmark (the GPU to itself: it waits first)."""
        from _pytest.runner import runtestprotocol

        if self.worker_count and self._worker_interactor() is None:
            return False  # an xdist whose worker cannot send a report late: each test waits for its verdicts
        try:
            self.start_share(item)
        except Exception:
            pass  # its setup tries again and errs with it; it holds nothing back
        self._tell(self.pending.take_messages(details=False))
        shared = self._lease_shared()
        # a test that times with pytest-benchmark waits for the GPU alone before it runs, unless other xdist workers
        # share it: then it would wait for all of them, its worker with it (and the tests sent to it meanwhile); held,
        # its timing stops it and it runs again at the end of its worker's tests, as any held test's
        if not shared and (not self.pending.running or _times_with_benchmark(item)):
            self.flush_held()  # the tests before it are logged before it
            return False
        if self.trails:
            self.pending.wait_reached(item, self._tell)
        item.stash[state.HELD] = {}
        self.holding = item
        try:
            reports = runtestprotocol(item, log=False, nextitem=nextitem)
        finally:
            self.holding = None
        if item.stash.get(POSTPONED, False):
            self._forget_run(item)
            self.postponed.append(item)
        else:
            self.held.append((item, reports))
        self._flush_held(wait=False)
        return True

    @staticmethod
    def _forget_run(item: pytest.Item) -> None:
        """What the postponed first run of ``item`` left on it: its second run starts from nothing."""
        from ..verdicts import CALL_FAILED

        keys: tuple[pytest.StashKey[Any], ...] = (state.HELD, POSTPONED, state.WAITED, RECORDED, CALL_FAILED,
                                                   state.ATTACHED)
        for key in keys:
            if key in item.stash:
                del item.stash[key]
        state.item_results(item).clear()
        item.user_properties.clear()

    def flush_held(self) -> None:
        """Log every held test, each once its verdicts are in (before a test that is not held runs)."""
        self._flush_held(wait=True)

    def _flush_held(self, wait: bool) -> None:
        """Log the held tests whose verdicts are in, in order (``wait``: all of them, waiting for each); stops
        where the session is to stop (``-x``, ``--maxfail``): the tests left are said at the end."""
        while self.held:
            item, reports = self.held[0]
            if self.pending.waits(item):
                if not wait:
                    return
                self.pending.wait(item, self._tell)
            if item.session.shouldfail or item.session.shouldstop:
                return
            self.held.pop(0)
            self._log_held(item, reports)

    def _log_held(self, item: pytest.Item, reports: list[pytest.TestReport]) -> None:
        """Log the reports of a held test as its run would have: its verdicts recorded before its call's report
        (as :meth:`pytest_runtest_call` does), each report made to agree with its results."""
        from ..verdicts import finish

        raised = item.stash.get(state.HELD, {})
        del item.stash[state.HELD]
        try:
            self.ensure_share(item)
        except Exception as exc:  # the run beside the tests was interrupted before it judged this test
            outcomes = item.stash.setdefault(OUTCOMES, {})
            for tool in expected_tools(item):
                outcomes.setdefault(tool, TestOutcome(
                    state.item_nodeid(item), tool, Verdict.ERROR, "inconclusive: the sanitizer run ended early",
                    reason=f"{type(exc).__name__}: {exc}"))
        ihook = item.ihook
        with self._reporting_as(item):
            ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
            for report in reports:
                if report.when == "call":
                    self.record_for(item)
                finish(item, report, raised.get(report.when))
                self._charge_sanitizer_seconds(item, report)
                ihook.pytest_runtest_logreport(report=report)
            ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)

    def _worker_interactor(self) -> Any | None:
        """This xdist worker's reporting plugin (:func:`.xdist_hooks.worker_interactor`), found once."""
        if self._interactor is None:
            self._interactor = worker_interactor(self.config)
        return self._interactor

    def _reporting_as(self, item: pytest.Item) -> contextlib.AbstractContextManager[None]:
        """Reports logged inside go out as ``item``'s: in an xdist worker, whose reporting plugin names the
        test it runs now, under ``item``'s place in the session's items; elsewhere as they are."""
        interactor = self._worker_interactor() if self.worker_count else None
        if interactor is None:
            return contextlib.nullcontext()
        if self._indices is None:
            self._indices = {id(i): n for n, i in enumerate(item.session.items)}
        return reporting_as(interactor, self._indices[id(item)])

    def _finish_held(self, session: pytest.Session) -> None:
        """The test loop ended: every child ends, the held tests are logged, then the postponed tests run, the
        GPU to themselves."""
        self.pending.wait(None, self._tell)
        self._flush_held(wait=True)
        postponed, self.postponed = self.postponed, []
        if not postponed or session.shouldfail or session.shouldstop:
            self.postponed = postponed
            return
        alone: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
        if self._lease_shared():
            assert self.lease is not None
            alone = self.lease.alone_for_the_rest()
            self._write(f"{len(postponed)} test(s) that time kernels wait for the GPU alone (the other pytest-xdist "
                        "workers on it to end their tests)")
        with alone:
            self._write(f"{len(postponed)} test(s) that time kernels run now, the sanitizer children done")
            for n, item in enumerate(postponed):
                if session.shouldfail or session.shouldstop:
                    self.postponed = postponed[n:]
                    break
                nextitem = postponed[n + 1] if n + 1 < len(postponed) else None
                # an xdist worker sends its reports as this test's, though it ran (and counted) it long ago
                with self._reporting_as(item):
                    item.ihook.pytest_runtest_protocol(item=item, nextitem=nextitem)

    @staticmethod
    def _charge_sanitizer_seconds(item: pytest.Item, report: pytest.TestReport) -> None:
        if report.when == "call" and item.config.getoption("store_durations", default=False):
            # pytest-split stores each test's report durations (--store-durations) and splits the suite
            # over CI machines by them (--splits/--group): a test's cost includes the seconds its
            # sanitizer children spent on it, which run before the test, outside its own duration
            spent = sum(out.seconds or 0.0 for out in item.stash.get(OUTCOMES, {}).values())
            if spent > 0:
                report.duration += spent
                report.user_properties.append(("pipecheck.sanitizer_seconds", round(spent, 3)))
