"""pytest side of the sanitizer check in the parent: ``SanitizerPlugin``'s hooks (under ``--pipecheck``).

``SanitizerPlugin`` runs every selected test under each tool in child processes, beside the normal test loop
(:mod:`.beside`: each test waits for its own verdicts before its setup; the batches: :mod:`.batches`, the held
reports: :mod:`.held_reports`), then, when each test runs normally, records a ``sanitizer:<tool>`` result and
fails the test on a finding or a hang (errors it on an inconclusive run). It gives each test its share
(:mod:`.shares`), under pytest-xdist a scheduler that keeps each share on one worker (:mod:`.xdist_shares`),
and keeps each test's costs in pytest's cache for the next run's shares (:mod:`.costs`).
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Generator
from typing import Any

import pytest

from .. import state
from ..results import CheckResult
from ..xdist_hooks import KEEPS_TOGETHER, SHARE_SCHEDULED, dist_mode, publish_groups
from .costs import RunSeconds, record_costs, share_costs
from .held_reports import HeldReports
from .item_verdicts import _times_with_benchmark, expected_tools
from .shares import GROUP_UNKNOWN, SHARE, shares_for

__all__ = ["SanitizerPlugin"]


class SanitizerPlugin(HeldReports):
    """Parent side: batches, runs and reports (registered only where this process is no child)."""

    #: the normal-run seconds of this run's tests, on the process that writes pytest's cache (from its first report)
    run_seconds: RunSeconds | None = None

    # ------------------------------------------------------------------ hooks
    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        """Under pytest-xdist, send every test of a share to one worker, which sanitizes that share on its own
        GPU. ``load`` and ``worksteal`` promise only that each test runs once, somewhere: the share scheduler
        keeps that. ``loadscope``, ``loadfile`` and ``loadgroup`` keep some tests on one worker: their shares
        never split such a set (:func:`shares_for`). ``each`` (every worker runs every test, and so sanitizes
        every test) is left to xdist. A mode pipecheck does not know is refused rather than replaced."""
        dist = config.getvalue("dist")
        if dist == "each":
            return None
        if dist not in SHARE_SCHEDULED + KEEPS_TOGETHER:
            raise pytest.UsageError(
                f"pipecheck: --dist={dist} (pytest-xdist) is not supported with the sanitizer check on: each "
                f"worker sanitizes whole shares of the tests, and pipecheck does not know what this mode promises "
                f"about where tests run. Use --dist={'|'.join(('each', *SHARE_SCHEDULED, *KEEPS_TOGETHER))}, or "
                f"turn the sanitizer off with --pipecheck-sanitizer=none (ini pipecheck_sanitizer = none)")
        from .xdist_shares import ShareScheduling

        costs = share_costs(config) if config.stash[state.RUN_CONFIG].xdist_order == "cost" else None
        return ShareScheduling(config, log, functools.partial(shares_for, config), costs)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """On the controller (or a run without xdist): each test's normal-run seconds, kept in pytest's cache
        at the end with its sanitizer seconds, so that the next run's shares are balanced by both."""
        if getattr(self.config, "workerinput", None) is not None:
            return
        if self.run_seconds is None:
            self.run_seconds = RunSeconds(strip_group=dist_mode(self.config) == "loadgroup")
        self.run_seconds.add(report)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """On the controller (or a run without xdist): remember each test's sanitizer seconds and normal-run
        seconds in pytest's cache, so that the next run's shares are balanced by cost (costs.py)."""
        if self.consan_cache is not None:
            shutil.rmtree(self.consan_cache, ignore_errors=True)
            self.consan_cache = None
        if getattr(session.config, "workerinput", None) is None:
            results: list[CheckResult] = session.config.stash.get(state.SESSION_RESULTS, [])
            record_costs(session.config, results, self.run_seconds.seconds() if self.run_seconds else None)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """Give each test its share (``xdist_shares`` per xdist worker, or a single share without xdist); under
        ``--dist loadgroup`` a worker first tells the controller the xdist group of each test."""
        groups = None
        if self.worker_count and dist_mode(config) == "loadgroup":
            groups, problem = publish_groups(config, items)
            if problem is not None:  # the controller may spread a group over the workers: its tests say so
                for item in items:
                    if item.nodeid in groups:
                        item.stash[GROUP_UNKNOWN] = problem
        if self.holds and config.stash[state.TIER].has_gpu:
            # the tests that time with pytest-benchmark wait for every child: after the others, which run beside
            timed = [i for i in items if _times_with_benchmark(i)]
            if timed:
                items[:] = [i for i in items if not _times_with_benchmark(i)] + timed
        for item, share in zip(items, shares_for(config, [i.nodeid for i in items], self.worker_count, groups)):
            item.stash[SHARE] = share

    # Innermost of the wrappers: the held tests logged and the postponed tests run after the loop are still
    # inside what other plugins wrap around the loop (coverage's collection, pytest's live logging).
    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        # Without xdist the one share (every test) starts before the first test: beside the tests (each
        # waits for its own verdicts), or, with the overlap off, to its end. In an xdist worker the tests it
        # will run are not known yet: each share starts when its first test arrives.
        if not self.worker_count and session.items and not session.config.option.collectonly:
            try:
                first = next((i for i in session.items if expected_tools(i)), None)
                if first is not None:
                    self.start_share(first)
            except Exception:
                pass  # outside a test phase it would end the session: each test's setup tries again, as its error
        try:
            result = yield
            if self.held or self.postponed:
                self._finish_held(session)
            return result
        finally:
            self._stop_beside()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
        if self.holds and self.holding is None and self._others_run_no_tests(item.config) \
                and self._run_held(item, nextitem):
            return True
        # The share is started, and the test waits for its verdicts, here: before its setup starts its clock,
        # so the children are not counted in its duration (pytest-split's durations file and --durations
        # would charge them to it) nor against its timeout, and outside output capture (progress lines).
        try:
            self.ensure_share(item, tell=True)
            if self.overlap and _times_with_benchmark(item):
                self.pending.wait(None, self._tell)  # pytest-benchmark times it: the GPU to itself
        except Exception:
            pass  # outside a test phase it would end the session: the setup below tries again, as its error
        return None

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self.phase = (item, "setup")  # what a wait for the GPU is subtracted from (the call and teardown follow)
        self.ensure_share(item)  # a protocol of another plugin may have run instead of pytest's

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None
                                ) -> Generator[None, object, object]:
        self.phase = (item, "teardown")
        try:
            return (yield)
        finally:
            self.phase = None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]
                                  ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield  # the test's waits for the GPU are left out of its durations by verdicts.py
        if state.HELD not in item.stash:  # else when it is logged, its verdicts in (_log_held)
            self._charge_sanitizer_seconds(item, report)
        return report

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, object, object]:
        """Record this test's sanitizer verdicts whatever its body does (passes, skips, xfails, raises);
        :mod:`pytest_pipecheck.verdicts` makes its reports agree with them."""
        self.phase = (item, "call")
        try:
            return (yield)
        finally:
            if state.HELD not in item.stash:  # a held test's, when it is logged (_log_held)
                self.record_for(item)
