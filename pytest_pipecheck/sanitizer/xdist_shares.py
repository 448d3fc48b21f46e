"""A pytest-xdist scheduler that keeps each sanitizer share on one worker, and the controller's
account of the tests that no worker ever ran.

Each worker sanitizes, in one child per tool, the share of the collection that contains the first
test it is sent; if a share's tests were spread over several workers, each of them would sanitize
the whole share again. So the share is the unit of scheduling: this is xdist's scope scheduling
with the share as the scope. Shares are computed from the collection order, which xdist guarantees
is the same on every worker and on the controller, from the costs in pytest's cache or pytest-split's
durations file, which all of them read before any test runs (costs.py), and under ``--dist loadgroup``
from the xdist groups the workers collected (xdist_hooks.py). What the run's ``--dist`` mode keeps on
one worker (an xdist group, a module, a class) is never cut into two shares, so this scheduler keeps it
on one worker too (shares.shares_for).
Imported only when xdist asks for a scheduler, or on an xdist controller.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Generator, Mapping
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

from .costs import cost_estimator

__all__ = ["NEVER_RAN", "LostTests", "ShareScheduling"]

#: the start of the message of a test that no worker ran
NEVER_RAN = "pipecheck: never ran"


class ShareScheduling(LoadScopeScheduling):
    """Scope scheduling where a test's scope is its sanitizer share."""

    def __init__(self, config: pytest.Config, log: Any,
                 shares_for: Callable[[list[str], int], list[int]],
                 costs: Mapping[str, float] | None = None) -> None:
        super().__init__(config, log)
        self._shares_for = shares_for
        self._shares: dict[str, int] | None = None
        # with costs (each test's normal run plus its sanitizer seconds: costs.share_costs), the costliest share
        # waiting is handed out next (xdist_order = cost); with none known (no cache entry, no durations
        # file) the shares are equal counts, handed out in collection order
        self._costs = dict(costs) if costs else None
        self._estimate = cost_estimator(costs)
        self._first: set[str] = set()  # shares a crashed worker left: sent again before any other

    def _unit_cost(self, unit: Mapping[str, bool]) -> float:
        """The cost of a share's tests that did not run, each at its known or estimated cost (as when the
        shares were cut: :func:`.costs.cost_estimator`)."""
        return sum(self._estimate(nodeid) for nodeid, done in unit.items() if not done)

    def _assign_work_unit(self, node: Any) -> None:
        """Hand ``node`` the next share: the first waiting one, or under ``xdist_order = cost`` the
        costliest, unless the worker still has more work than a waiting share holds on average (a long
        test it cannot start before it knows its next one): then the cheapest, which delays the least
        behind it. A share a crashed worker left goes first either way."""
        if self._costs is not None and self.workqueue and next(iter(self.workqueue)) not in self._first:
            waiting = {scope: self._unit_cost(unit) for scope, unit in self.workqueue.items()}
            busy = sum(self._unit_cost(unit) for unit in self.assigned_work.get(node, {}).values())
            if busy > statistics.fmean(waiting.values()):
                pick = min(waiting, key=waiting.__getitem__)  # the first of equals: collection order
            else:
                pick = max(waiting, key=waiting.__getitem__)
            self.workqueue.move_to_end(pick, last=False)
        scope = next(iter(self.workqueue), None)
        super()._assign_work_unit(node)
        self._first.discard(scope or "")

    def _split_scope(self, nodeid: str) -> str:
        if self._shares is None:
            collection = list(self.collection or [])
            n = max(int(self.numnodes), 1)
            self._shares = dict(zip(collection, self._shares_for(collection, n)))
        return f"pipecheck-share-{self._shares.get(nodeid, 0)}"

    def remove_node(self, node: Any) -> str | None:
        """Remove a worker that finished or died; returns the test it died in, if any.

        xdist's scope scheduling puts the test a worker died in back in the queue with the rest of
        its scope, so the next worker runs it first and dies too, until "maximum crashed workers
        reached" ends the run and the tests after it are never run. Here the test it died in is
        settled (xdist reports it as failed, once) and only the rest of its share is sent again, to a
        live worker or to the one that replaces the dead one.
        """
        workload = self.assigned_work.pop(node)
        # tests the worker ran but whose reports it still held (until their sanitizer verdicts came) when it
        # died: sent again with the rest, the crash is not theirs
        unreported = self._unreported(workload)
        if not self._pending_of(workload) and not unreported:
            return None
        # a worker runs the tests it was sent in order: the first one not completed is where it died
        crashitem = next((nodeid for unit in workload.values() for nodeid, done in unit.items() if not done), None)
        if crashitem is None and not unreported:
            raise RuntimeError("Unable to identify crashitem on a workload with pending items")
        for unit in workload.values():
            if crashitem in unit:
                unit[crashitem] = True
            for nodeid in unreported & unit.keys():
                unit[nodeid] = False
        rest = {scope: unit for scope, unit in workload.items() if not all(unit.values())}
        # before every share not started yet: its share's child may already have run on no worker
        for scope in reversed(list(rest)):
            self.workqueue[scope] = rest[scope]
            self.workqueue.move_to_end(scope, last=False)
            self._first.add(scope)
        for other in self.assigned_work:
            self._reschedule(other)
        return crashitem

    def _unreported(self, workload: Mapping[str, Mapping[str, bool]]) -> set[str]:
        """The tests of ``workload`` that ran to their end on the worker and were never reported to this
        controller (LostTests keeps what was)."""
        manager = getattr(self.config, "pluginmanager", None)  # a stand-in config may have none
        lost = manager.get_plugin("pipecheck-lost-tests") if manager is not None else None
        if lost is None:
            return set()
        return {nodeid for unit in workload.values() for nodeid, done in unit.items()
                if done and nodeid not in lost.reported}


class LostTests:
    """On the xdist controller: every collected test ends with a report. A test that no worker reported (its
    workers crashed and xdist stopped replacing them, or its worker died while it held the test's reports
    until its sanitizer verdicts came) gets an error report that says so, where it would otherwise be
    missing from the counts while the run looked finished."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.collection: list[str] | None = None
        self.reported: set[str] = set()
        self.crashes: list[str] = []

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        if self.collection is None:
            self.collection = list(ids)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object | None) -> None:
        if error is not None:
            self.crashes.append(f"{getattr(getattr(node, 'gateway', None), 'id', node)}: {error}")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.reported.add(report.nodeid)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        result = yield
        if session.shouldfail or session.shouldstop:
            return result  # -x, --maxfail or an interrupt: the user asked the run to stop early
        self.report_lost()
        return result

    def lost(self) -> list[str]:
        """The collected tests that have no report at all."""
        return [n for n in self.collection or [] if n not in self.reported]

    def report_lost(self) -> None:
        lost = self.lost()
        if not lost:
            return
        dsession = self.config.pluginmanager.get_plugin("dsession")
        why = getattr(dsession, "_summary_report", None) or (
            "xdist ended the run" + (f" after worker(s) crashed ({'; '.join(self.crashes)})" if self.crashes else ""))
        for nodeid in lost:
            fspath = nodeid.split("::")[0]
            rep = pytest.TestReport(nodeid=nodeid, location=(fspath, None, nodeid), keywords={}, outcome="failed",
                                    longrepr=f"{NEVER_RAN}: no worker ran {nodeid} to its report ({why}); its "
                                             "result is unknown",
                                    when="setup")
            self.config.hook.pytest_runtest_logreport(report=rep)
