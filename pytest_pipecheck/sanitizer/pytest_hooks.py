"""pytest side of the sanitizer check: the parent's batch runner and the child's marker plugin.

``SanitizerPlugin`` (the parent, under ``--pipecheck``) runs every selected test under each tool in
child processes, beside the normal test loop (:mod:`.beside`: each test waits for its own verdicts before
its setup), then, when each test runs normally, records a ``sanitizer:<tool>`` result and fails the test
on a finding or a hang (errors it on an inconclusive run). ``ChildPlugin`` (``--pipecheck-child=TOOL``)
prints the BEGIN/END lines that attribute output to tests, and the COMPILE_BEGIN/COMPILE_END lines around
Triton's compiles (:mod:`.compiling`), disables CuPy's memory pools, runs the canary kernel last and, under
memcheck, allocates every array at its exact size and prints its address range (:mod:`.allocations`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import pytest

from .. import cuda_probe, envvars, state
from ..children import CHILD_ENV, Role
from ..config import CONSAN
from ..cuda_probe import cupy_context
from ..device import TierInfo
from ..gpu_lease import GpuLease, LeasePlugin
from ..results import CheckResult, Verdict
from ..xdist_hooks import (
    KEEPS_TOGETHER,
    SHARE_SCHEDULED,
    dist_mode,
    publish_groups,
    read_groups,
    reporting_as,
    together_key,
    worker_interactor,
)
from .beside import Pending, Postponed, beside_children
from .consan import KNOB_ENV as CONSAN_KNOB
from .consan import RECORD as CONSAN_RECORD
from .consan import ConsanRunner
from .costs import (
    RunSeconds,
    assign_shares,
    children_at_once,
    costs_for_balance,
    record_costs,
    share_costs,
    worker_children_at_once,
)
from .locate import HOW_TO_GET, SanitizerInstall, find_compute_sanitizer, not_found
from .parse import BEGIN, END, FAILURE, POISONED
from .runner import (
    BatchSpec,
    ChildGroup,
    SanitizerRunner,
    TestOutcome,
    canary_nodeid,
    default_child_env,
    format_failure,
)
from .suppressions import SuppressionError, load_suppressions

__all__ = ["POISONED", "ChildPlugin", "SanitizerPlugin"]

OUTCOMES = pytest.StashKey[dict[str, TestOutcome]]()
RECORDED = pytest.StashKey[bool]()  # the test's sanitizer verdicts are among its results
POSTPONED = pytest.StashKey[bool]()  # the held run of the test asked for the GPU alone: it runs again at the end
SHARE = state.SHARE
_ONE_TEST = re.compile(r": test \d+ of \d+ ")  # a child's progress line for one test it ran
GROUP_UNKNOWN = pytest.StashKey[str]()  # why the controller cannot keep this test's xdist group on one worker


def shares_for(config: pytest.Config, nodeids: list[str], workers: int,
               groups: dict[str, str] | None = None) -> list[int]:
    """The share of each collected test: ``workers`` x ``xdist_shares`` contiguous runs of about equal cost,
    each test's normal run plus its sanitizer seconds as the last runs left them in pytest's cache, else from
    pytest-split's durations file (equal counts without either: costs.py); a single share without xdist,
    and under ``--dist each``, where every worker runs every test. The tests that the ``--dist`` mode keeps
    on one worker (an xdist group, a module, a class) are never cut apart; ``groups`` (node id -> xdist
    group) are a worker's own, the controller reads what its workers wrote.
    Workers and the controller compute it from the same collection order, groups, cache and settings.

    With several shares a worker, a share ends only where a module does, unless the module costs more than a
    share's mean (:func:`.costs.assign_shares` ``modules``): xdist hands the shares out as workers free up, so
    unequal shares still even out, and a module's tests share one set of sanitizer children. With one share a
    worker the shares must be equal, and are cut wherever the cost says.

    Contiguous shares beat shares dealt round robin (docs/validation/2026-11-22-h200-0754.md,
    docs/validation/2026-11-22-h200-0453.md)."""
    dist = dist_mode(config)
    per_worker = config.stash[state.RUN_CONFIG].xdist_shares
    shares = workers * per_worker if workers > 1 and dist != "each" else 1
    if dist == "loadgroup" and groups is None:
        groups = read_groups(config)
    keys = [together_key(nodeid, dist, groups) for nodeid in nodeids]
    return assign_shares(nodeids, shares, share_costs(config), keys if any(k is not None for k in keys) else None,
                         modules=per_worker > 1)


def _selected(item: pytest.Item) -> bool:
    return "pipecheck" in getattr(item, "fixturenames", ()) or item.get_closest_marker("pipecheck") is not None


def _times_with_benchmark(item: pytest.Item) -> bool:
    """The test times kernels with pytest-benchmark's ``benchmark`` fixture, which asks pipecheck nothing: it
    must have the GPU to itself from its setup on."""
    return "benchmark" in getattr(item, "fixturenames", ())


def expected_tools(item: pytest.Item) -> tuple[str, ...]:
    """The sanitizer tools whose verdict ``item`` must carry when it runs (none for a test pipecheck does
    not select, one whose settings are in error, or one that does not want the sanitizer check)."""
    if not _selected(item) or state.ITEM_CONFIG_ERROR in item.stash:
        return ()
    cfg = state.item_config(item)
    if not cfg.wants("sanitizer") or not cfg.sanitizer:
        return ()
    return tuple(cfg.sanitizer)


def child_args(config: pytest.Config) -> list[str]:
    """The command line of a child pytest that runs some of this session's tests under the sanitizer (its
    role and node ids follow)."""
    from .. import children

    return children.base_command(config, config.stash[state.RUN_SEED], quiet_output=False)


def record_outcomes(config: pytest.Config, item: pytest.Item, outcomes: dict[str, TestOutcome]) -> list[CheckResult]:
    """Record each tool's verdict on ``item`` through the one result contract (contract.finalize):
    the marker's kernel name and ``expect_failures`` apply to sanitizer verdicts as to every check.
    Returns the recorded results, in the order of ``outcomes``."""
    from ..contract import finalize

    cfg = state.item_config(item)
    dev = config.stash[state.TIER].device  # the child ran on this process's GPU (under xdist: the worker's)
    gpu = f"{dev.name} (index {dev.index}, {dev.uuid})" if dev is not None else None
    results = state.item_results(item)
    recorded = []
    for tool, out in outcomes.items():
        details = out.details()
        if out.verdict in (Verdict.FAIL, Verdict.ERROR):
            details["message"] = format_failure(out)  # what the test's failure says (verdicts.py)
        found_kernel = next((f.kernel for f in out.findings if f.kernel), None)
        if found_kernel is not None:
            details["finding_kernel"] = found_kernel
        result = finalize(CheckResult(f"sanitizer:{tool}", out.verdict, out.summary, details=details),
                          nodeid=state.item_nodeid(item), kernel=cfg.kernel or found_kernel,
                          expecting=bool(cfg.expect_failures), gpu=gpu)
        results.append(result)
        recorded.append(result)
    return recorded


@dataclass
class _Unit:
    """One part of a batch: the tests one child (and its re-runs) sanitizes under one tool."""

    weight: float  # the last run's sanitizer seconds of its tests (1 a test where unknown)
    label: str
    spec: BatchSpec
    members: list[pytest.Item]
    notes: list[str]
    first: int  # where its first test is in the collection


@dataclass
class _Plan:
    """What sanitizes a share: its parts, in the order they start, and what their runners need."""

    units: list[_Unit]
    jobs: int
    found: SanitizerInstall | None
    env: dict[str, str]
    use_xml: bool
    timeouts: dict[str, float]
    default_timeout: float


class SanitizerPlugin:
    """Parent side: batches, runs and reports (registered only where this process is no child)."""

    #: the normal-run seconds of this run's tests, on the process that writes pytest's cache (from its first report)
    run_seconds: RunSeconds | None = None
    #: test bodies run beside this process's children, their reports held (set in __init__)
    holds: bool = False

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.runner: SanitizerRunner | ConsanRunner | None = None
        run_config = config.stash[state.RUN_CONFIG]
        tier = config.stash[state.TIER]
        if (run_config.tier == "gpu" and tier.has_gpu and set(run_config.sanitizer) - {CONSAN}
                and find_compute_sanitizer() is None):
            raise pytest.UsageError(
                f"pipecheck: --pipecheck-tier=gpu needs compute-sanitizer for the sanitizer check, and it "
                f"was not found; {HOW_TO_GET}"
            )
        if run_config.suppressions:
            try:
                load_suppressions(run_config.suppressions, "--pipecheck-suppressions / pipecheck_suppressions")
            except SuppressionError as exc:
                raise pytest.UsageError(f"pipecheck: {exc}") from None
        self.done: set[int] = set()
        self.limits_said = False
        # Beside the tests (beside.py): a share's children run on a thread of their own while the tests run.
        # PIPECHECK_SANITIZER_OVERLAP=0 runs them to their end before the first test instead (slower: on one
        # H100, 86.0 s against 76.8 s for the bundled suite, 135.8 s against 112.0 s for examples/, in
        # docs/validation/2026-11-27-h100-0615.md); =trail makes each test wait until a child has ended it
        # (neither faster nor slower there: 72.2 and 73.9 s against 62.1 and 70.9 s for the bundled suite,
        # 93.3 s against 99.9 s for examples/, on H100s of one morning).
        # An xdist worker does the same with each share it is sent.
        mode = envvars.value("PIPECHECK_SANITIZER_OVERLAP")  # "1", "0" or "trail", checked at start-up
        self.overlap = mode != "0"
        self.trails = mode == "trail"
        self.pending = Pending()
        # The overlap holds the reports (:meth:`_run_held`): a test runs while the children that judge it still
        # run, and is logged once its verdicts are in. In an xdist worker too: its controller counts a test as
        # run when its run ends (and sends the next), and takes its reports when they come. A worker that dies
        # with reports held loses them: those tests are sent again with the rest of its share, or are errors
        # with no worker left, never passes (xdist_shares.ShareScheduling.remove_node, LostTests). (Waiting
        # before each test for its own verdicts instead was the slower: 126.7 s against 114.6 s for the
        # bundled suite on one H100, docs/validation/2026-11-27-h100-0144.md.)
        self.holds = self.overlap
        # ... and with =trail a held test runs once a child has ended it: the kernels it compiled are then in
        # the caches, and the children (several at once) compile them rather than this process
        self.held: list[tuple[pytest.Item, list[pytest.TestReport]]] = []  # ran, not logged yet, in order
        self.postponed: list[pytest.Item] = []  # asked for the GPU alone while children ran: run at the end
        self.holding: pytest.Item | None = None  # the test whose held run is under way
        self.group = ChildGroup()
        self.threads: list[threading.Thread] = []
        self.tier_alone: TierInfo | None = None  # the tier, while the tests get one that waits before a timing
        self.phase: tuple[pytest.Item, str] | None = None  # the test phase running on the main thread
        self.consan_cache: str | None = None  # the one Triton cache of this session's ConSan children
        self.lock = threading.Lock()
        self.worker_count = 0
        self._indices: dict[int, int] | None = None  # id(item) -> its place in the session's items
        self._interactor: Any | None = None  # an xdist worker's reporting plugin, once found
        workerinput = getattr(config, "workerinput", None)
        if workerinput is not None:
            self.worker_count = int(workerinput.get("workercount", 1))
        # an xdist worker whose GPU other workers share: a timing takes the GPU alone (gpu_lease.py), and a held
        # test that asks for it stops and runs again at the end of this worker's tests, as beside its children
        self.lease: LeasePlugin | None = config.pluginmanager.get_plugin(LeasePlugin.name)
        if self.lease is not None:
            self.lease.before.append(self._wait_for_the_gpu)

    # ------------------------------------------------------------------ helpers
    def _write(self, msg: str) -> None:
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr.write_line(f"pipecheck sanitizer: {msg}")

    def _child_args(self) -> list[str]:
        return child_args(self.config)

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

    def start_share(self, item: pytest.Item) -> None:
        """Start sanitizing the share ``item`` belongs to, unless that already happened in this process: on a
        thread of its own beside the tests, or (the overlap off) to its end."""
        problem = item.stash.get(GROUP_UNKNOWN, None)
        if problem is not None:
            raise pytest.UsageError(problem)
        share = item.stash.get(SHARE, None)
        if share is None or share in self.done or not expected_tools(item):
            return  # a test that wants no tool neither waits for its share nor fails with it
        self.done.add(share)
        try:
            self._run_all([i for i in item.session.items if i.stash.get(SHARE, None) == share])
        except BaseException:
            self.done.discard(share)  # not sanitized: the next test of the share tries again, never passes
            raise

    def ensure_share(self, item: pytest.Item, tell: bool = False) -> None:
        """Sanitize the share ``item`` belongs to (:meth:`start_share`), and wait for ``item``'s own verdicts
        (``tell``: outside a test phase, where the children's progress lines may be written)."""
        self.start_share(item)
        if not self.overlap or not expected_tools(item) or state.HELD in item.stash:
            return  # a held test's verdicts are awaited when it is logged (_log_held)
        self.pending.wait(item, self._tell if tell else None)
        error = self.pending.error
        if error is not None and any(t not in item.stash.get(OUTCOMES, {}) for t in expected_tools(item)):
            raise error  # the run beside the tests was interrupted before it judged this test

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

    def _reached(self, items: dict[str, pytest.Item], nodeid: str) -> None:
        if nodeid in items:
            self.pending.reached(items[nodeid])

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

    # ------------------------------------------------------------------ beside the tests
    def _tell(self, lines: list[str]) -> None:
        for line in lines:
            self._write(line)

    def _start_beside(self, plan: _Plan) -> None:
        """Run ``plan`` on a thread of its own; each test waits for its own verdicts (:meth:`ensure_share`)."""
        tier = self.config.stash[state.TIER]
        if self.tier_alone is None and self.lease is None and tier.has_gpu and tier.timing_blocked is None:
            # from now on until the children end, a timing first waits for them (beside.py)
            self.tier_alone = tier
            self.config.stash[state.TIER] = beside_children(tier, self._wait_for_the_gpu)
        for unit in plan.units:
            self.pending.expect(unit.members)
        self.pending.run_started()

        def run() -> None:
            error: BaseException | None = None
            try:
                self._execute(plan)
            except BaseException as exc:  # kept for the tests that wait for verdicts it never gave
                error = exc
            finally:
                self.pending.run_ended(error)

        thread = threading.Thread(target=run, name="pipecheck-sanitizer", daemon=True)
        self.threads.append(thread)
        thread.start()

    def _lease_shared(self) -> bool:
        """Other xdist workers may still run on this worker's GPU (its lease is not held alone)."""
        return self.lease is not None and self.lease.others_may_run

    def _wait_for_the_gpu(self, lease: GpuLease | None = None, in_test: bool = False) -> bool:
        """Inside a test that is about to time a kernel: wait until this process's children have ended. The
        wait is not the test's: the watchdog does not count it, and its report's duration leaves it out. A
        held test stops instead (:class:`Postponed`), and runs again from its start after the other tests, so
        that the tests after it run beside the children meanwhile; in an xdist worker whose GPU other workers
        share, also where no child of its own runs (it is called by the lease first, with ``lease``: the
        lease is taken alone for the postponed tests). In the test's call, or in its setup where the test's
        function-scoped ``pipecheck`` fixture asks (``in_test``). Returns False: the tier answers as it would."""
        shared = lease is not None and lease.state != "alone"
        if not self.pending.running and not shared:
            return False
        # only in the test's call, or its setup asked through its own pipecheck fixture: a fixture of a wider
        # scope that raised would keep the exception for the tests after it (pytest caches a fixture's
        # failure), so such a fixture waits instead
        if self.holding is not None and self.phase is not None and (
                self.phase == (self.holding, "call") or (in_test and self.phase == (self.holding, "setup"))):
            self.holding.stash[POSTPONED] = True
            why = ("sanitizer children run on its GPU: it runs again, from its start, once they have ended"
                   if self.pending.running else "other pytest-xdist workers share its GPU: it runs again, from its "
                   "start, after this worker's other tests, with the GPU alone")
            raise Postponed(f"pipecheck: this test times a kernel while {why}")
        if not self.pending.running:
            return False  # the lease waits for the other workers where the test asked
        from contextlib import nullcontext

        timeout = self.config.pluginmanager.get_plugin("pipecheck-timeout")
        pause = timeout.not_counting() if timeout is not None and hasattr(timeout, "not_counting") else nullcontext()
        started = time.monotonic()
        with pause:
            self.pending.wait(None)
        if self.phase is not None:
            state.note_wait(self.phase[0], self.phase[1], time.monotonic() - started)
        return False

    def wait_for_children(self) -> None:
        """Until every sanitizer child of this process has ended (a relay child is about to time a kernel:
        containment.py); at once where none runs."""
        self.pending.wait(None, self._tell)

    def _stop_beside(self) -> None:
        """The test loop is over: children still running (the run stopped early) are stopped, the tier is
        given back, and what they said is written, with the tests of a run that stopped early that ran but
        are not reported."""
        if self.pending.running:
            self.group.stop()
        for thread in self.threads:
            thread.join()
        self.threads = []
        if self.tier_alone is not None:
            self.config.stash[state.TIER] = self.tier_alone
            self.tier_alone = None
        self._tell(self.pending.take_messages())
        left = [i.nodeid for i, _ in self.held] + [i.nodeid for i in self.postponed]
        if left:
            self._write(f"the run stopped early: {len(left)} test(s) not reported (their sanitizer verdicts were "
                        f"not awaited, or they were to run at the end): {', '.join(left[:5])}"
                        + (", ..." if len(left) > 5 else ""))
        self.held, self.postponed = [], []

    def _consan_reason(self) -> str | None:
        """Why ConSan cannot run on this process's GPU (computed once), or None."""
        if not hasattr(self, "_consan_why"):
            from .consan import unavailable_reason

            device = self.config.stash[state.TIER].device
            self._consan_why = unavailable_reason(device.compute_capability if device is not None else None)
        return self._consan_why

    def _run_all(self, items: list[pytest.Item]) -> None:
        """Sanitize ``items`` under every tool they want: beside the tests, or (the overlap off) to the end."""
        plan = self._plan(items)
        if plan is None:
            return
        if self.overlap:
            self._start_beside(plan)
        else:
            self._execute(plan)

    def _plan(self, items: list[pytest.Item]) -> _Plan | None:
        """The parts (one child's batch each) that sanitize ``items``; the verdicts that need no child (no GPU,
        no tool, a bad suppressions file) are given here. None: nothing to run."""
        tier = self.config.stash[state.TIER]
        found = find_compute_sanitizer()
        batches: dict[tuple[Any, ...], list[pytest.Item]] = {}
        timeouts: dict[str, float] = {}
        for item in items:
            wanted = expected_tools(item)
            if not wanted:
                continue
            cfg = state.item_config(item)
            outcomes = item.stash.setdefault(OUTCOMES, {})
            for tool in wanted:
                if not tier.has_gpu:
                    outcomes[tool] = TestOutcome(state.item_nodeid(item), tool, Verdict.SKIP,
                                                 f"needs a CUDA GPU: {tier.reason}")
                    continue
                if tool == CONSAN:
                    # Triton's own instrumentation, in a child without compute-sanitizer: suppressions and
                    # kernel filters are compute-sanitizer options and do not apply
                    why = self._consan_reason()
                    if why is not None:
                        outcomes[tool] = TestOutcome(state.item_nodeid(item), tool, Verdict.SKIP, why)
                        continue
                    batches.setdefault((tool, "", None, None, None, cfg.sanitizer_scope), []).append(item)
                    timeouts[state.item_nodeid(item)] = cfg.sanitizer_timeout
                    continue
                if found is None:
                    outcomes[tool] = TestOutcome(state.item_nodeid(item), tool, Verdict.SKIP,
                                                 f"{not_found()}: {HOW_TO_GET}")
                    continue
                if cfg.suppressions:
                    try:
                        load_suppressions(cfg.suppressions, f"the pipecheck marker on {item.nodeid}")
                    except SuppressionError as exc:
                        outcomes[tool] = TestOutcome(state.item_nodeid(item), tool, Verdict.ERROR, str(exc))
                        continue
                key = (tool, cfg.racecheck_report if tool == "racecheck" else "", cfg.suppressions,
                       cfg.kernel_filter, cfg.kernel_exclude, cfg.sanitizer_scope)
                batches.setdefault(key, []).append(item)
                timeouts[state.item_nodeid(item)] = cfg.sanitizer_timeout
        if not batches or tier.device is None:
            return None
        device = tier.device
        env = default_child_env(device.uuid or str(device.index))
        use_xml = bool(envvars.value("PIPECHECK_SANITIZER_XML"))
        run_config = self.config.stash[state.RUN_CONFIG]
        jobs = children_at_once(run_config.sanitizer_jobs)
        if self.worker_count > 1 and "sanitizer_jobs" not in run_config.sources:
            # xdist workers sanitize their shares at the same time: the cores are shared among them
            jobs = worker_children_at_once(self.worker_count)
        tools = sorted({k[0] for k in batches} - {CONSAN})
        if CONSAN in {k[0] for k in batches}:
            import triton

            self._write(f"ConSan: Triton {triton.__version__}, knob {CONSAN_KNOB}={CONSAN} in its children")
        if found is not None and tools:
            self._write(f"{found.describe()}, {len(batches)} batch(es)"
                        + (f", up to {jobs} children at once" if jobs > 1 else ""))
        if found is not None and tools and not self.limits_said:
            # once per process (per xdist worker): what this version cannot see
            self.limits_said = True
            from .known import limitations

            for line in limitations(found.version, found.version_tuple, tools):
                self._write(line)
        # Each batch (one tool and its options) is cut into contiguous parts of about equal cost (the last
        # run's sanitizer seconds), so many that every batch's parts together make `jobs` children (each
        # batch at least one part): they run at once, `jobs` at a time. More parts than that would only add
        # children, each starting Python, CUDA and the test modules and compiling its kernels again, in a
        # second wave. To its end before the tests: longest first. Beside the tests, which wait for their own
        # verdicts in collection order: the part holding the earliest test first (longest first among parts
        # that start at the same test), so that the first tests' verdicts come first.
        costs = costs_for_balance(self.config) if jobs > 1 else {}
        units: list[_Unit] = []
        per_batch = max(1, -(-jobs // len(batches)))
        position = {id(item): n for n, item in enumerate(items)}
        # Batches whose tools want the same tests (racecheck and synccheck, by default) are cut at the same
        # places, and with more than one child at once their parts run side by side: two children would reach
        # each kernel at the same time and compile it twice, where the first compile is what costs (Triton's,
        # CuPy's). So every other batch runs each part's tests from its end: the two children meet in the
        # middle, each compiling about half the part's kernels and finding the other half in the cache; where
        # they meet, one waits for the other's Triton compile (model/shared_compiles.py) rather than doing it
        # again.
        for number, (key, group) in enumerate(batches.items()):
            tool, report, supp, kfilter, kexclude, scope = key
            notes: list[str] = []
            if supp:
                reasons = load_suppressions(supp)
                notes.append(f"suppressions {supp}: " + "; ".join(f"{s.kind} {s.what}: {s.reason}" for s in reasons))
                self._write(notes[-1])
            ids = [state.item_nodeid(i) for i in group]
            parts = min(per_batch, len(group))
            share_of = assign_shares(ids, parts, costs) if parts > 1 else [0] * len(group)
            for part in range(parts):
                members = [item for item, sh in zip(group, share_of) if sh == part]
                if not members:
                    continue
                if number % 2 and jobs > 1:
                    members.reverse()
                spec = BatchSpec(tool, tuple(state.item_nodeid(i) for i in members), report or "analysis", supp,
                                 kfilter, kexclude, scope=scope)
                label = tool if parts == 1 else f"{tool} [{part + 1}/{parts}]"
                weight = sum(costs.get(n, 1.0) for n in spec.nodeids)
                units.append(_Unit(weight, label, spec, members, notes, min(position[id(i)] for i in members)))
        if self.overlap:
            units.sort(key=lambda u: (u.first, -u.weight))
        else:
            units.sort(key=lambda u: -u.weight)
        return _Plan(units, jobs, found, env, use_xml, timeouts, run_config.sanitizer_timeout)

    def _execute(self, plan: _Plan) -> None:
        """Run the parts of ``plan``, ``plan.jobs`` at a time; each part's verdicts go to its tests' stash as it
        ends (:meth:`ensure_share` waits for them)."""
        units, jobs, found, env, use_xml = plan.units, plan.jobs, plan.found, plan.env, plan.use_xml
        timeouts = plan.timeouts
        canary: dict[str, Any] = {}  # one canary status per tool is shared: a tool proven once is proven
        with self.lock:
            if any(u.spec.tool == CONSAN for u in units) and self.consan_cache is None:
                # one ConSan cache for the session: each kernel is compiled with ConSan once, not once per part
                self.consan_cache = tempfile.mkdtemp(prefix="pipecheck-consan-cache-")
        lock = threading.Lock()
        started = time.monotonic()
        children = [0]

        def write(msg: str) -> None:
            if self.overlap:
                # said by the main thread, between tests (one test done in a child: only while it waits)
                self.pending.say(msg, detail=_ONE_TEST.search(msg) is not None)
                return
            with lock:
                self._write(msg)

        def run_unit(unit: _Unit) -> None:
            try:
                run_part(unit)
            finally:
                if self.overlap:
                    self.pending.settle(unit.members)

        def run_part(unit: _Unit) -> None:
            label, spec, members, notes = unit.label, unit.spec, unit.members, unit.notes

            def progress(msg: str) -> None:
                write(msg.replace(spec.tool, label, 1) if msg.startswith(spec.tool) else msg)

            runner: SanitizerRunner | ConsanRunner
            if spec.tool == CONSAN:
                runner = ConsanRunner(cwd=str(self.config.rootpath), child_args=self._child_args(), env=env,
                                      timeouts=timeouts, default_timeout=plan.default_timeout,
                                      progress=progress, cache_dir=self.consan_cache, group=self.group)
            else:
                assert found is not None  # no compute-sanitizer batch is made without it
                runner = SanitizerRunner(
                    found.path, cwd=str(self.config.rootpath), child_args=self._child_args(), env=env,
                    timeouts=timeouts, default_timeout=plan.default_timeout, progress=progress,
                    use_xml=use_xml, version=found.version, group=self.group)
                runner.canary = canary
                if self.holds and self.trails:
                    runner.on_ended = functools.partial(self._reached, {state.item_nodeid(i): i for i in members})
            self.runner = runner
            write(f"{label}: {len(members)} test(s) in one child")
            try:
                results = runner.run(spec)
            except Exception as exc:  # a runner bug must surface as an error, never as a pass
                results = {n: TestOutcome(n, spec.tool, Verdict.ERROR,
                                          f"inconclusive: runner failed: {type(exc).__name__}: {exc}")
                           for n in spec.nodeids}
            with lock:
                children[0] += runner.children
            write(f"{label}: done in {time.monotonic() - started:.1f} s, {children[0]} child(ren) so far")
            for item in members:
                nodeid = state.item_nodeid(item)
                out = results.get(nodeid) or TestOutcome(nodeid, spec.tool, Verdict.ERROR,
                                                         "inconclusive: no result from the runner")
                if notes:
                    out.reason = (out.reason + "\n" if out.reason else "") + "\n".join(notes)
                item.stash[OUTCOMES][spec.tool] = out

        if jobs == 1 or len(units) == 1:
            for unit in units:
                run_unit(unit)
        else:
            with concurrent.futures.ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="pipecheck-san") as pool:
                for future in [pool.submit(run_unit, u) for u in units]:
                    future.result()
        if len(units) > 1:
            write(f"all tools done in {time.monotonic() - started:.1f} s, {children[0]} child(ren)")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]
                                  ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield  # the test's waits for the GPU are left out of its durations by verdicts.py
        if state.HELD not in item.stash:  # else when it is logged, its verdicts in (_log_held)
            self._charge_sanitizer_seconds(item, report)
        return report

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

    def outcomes_of(self, item: pytest.Item) -> dict[str, TestOutcome]:
        """``item``'s sanitizer verdicts, one per tool it expects: a tool that left none (its share was
        never sanitized, or a plugin changed the collection after pipecheck cut the shares) is an error,
        never a silent pass."""
        outcomes = item.stash.setdefault(OUTCOMES, {})
        share = item.stash.get(SHARE, None)
        for tool in expected_tools(item):
            if tool not in outcomes:
                where = ("it was not in the collection pipecheck cut into shares (a plugin added or "
                         "replaced it afterwards)" if share is None else
                         f"its share ({share}) was {'sanitized' if share in self.done else 'not sanitized'} "
                         "in this process and holds no verdict for it")
                outcomes[tool] = TestOutcome(state.item_nodeid(item), tool, Verdict.ERROR,
                                             "inconclusive: no sanitizer verdict for this test",
                                             reason=f"no {tool} child judged this test: {where}")
        return outcomes

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

    def record_for(self, item: pytest.Item) -> list[CheckResult]:
        """Record ``item``'s sanitizer verdicts, once: for a test run here, or one whose reports are replayed
        from a relay child (containment.py), which ran no sanitizer."""
        if item.stash.get(RECORDED, False):
            return []
        item.stash[RECORDED] = True
        self.ensure_share(item)  # under xdist a relayed test's share may not have been sanitized yet
        return record_outcomes(self.config, item, self.outcomes_of(item))


# --------------------------------------------------------------------------- child


def _emit(line: str) -> None:
    """Write a marker line to the real stdout (fd 1), after whatever pytest has buffered.

    The parent attributes sanitizer output by these lines, which the sanitizer interleaves with the
    child's fd 1; they must not go through pytest's capture or terminal writer.
    """
    for stream in (sys.stdout, sys.__stdout__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    os.write(1, ("\n" + line + "\n").encode("utf-8", "replace"))


def _flush_c_stdio() -> None:
    """fflush(NULL): what the CUDA driver printed for the device (printf, assert messages) reaches the
    pipe now, inside the test's markers, instead of at exit."""
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):
        pass


def _synchronize() -> str | None:
    """Wait for the device (only through modules the test already imported, and only where a CUDA
    context exists: see :func:`~pytest_pipecheck.cuda_probe.cupy_context`); the error text, if any."""
    try:
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.synchronize()
        cupy = sys.modules.get("cupy")
        if cupy is not None and cupy_context(cupy):
            cupy.cuda.runtime.deviceSynchronize()
    except Exception as exc:
        return f"device synchronize failed: {type(exc).__name__}: {exc}"
    return None


class ChildPlugin:
    """Child side: BEGIN/END lines per test, pools off, canary last."""

    def __init__(self, config: pytest.Config, role: Role) -> None:
        self.config = config
        self.role = role
        self.tool = str(role.tool)
        self.reports: dict[str, list[pytest.TestReport]] = {}
        # lets a test (or pipecheck's own tests) know it runs under a sanitizer; taken back at the end
        state.set_session_env(config, CHILD_ENV, self.tool)
        self._disable_pools()
        self.consan: Any = None
        self.consan_problem = ""
        if self.tool == CONSAN:
            from .consan import Recorder, ensure_scratch_allocator

            try:
                self.consan = Recorder()
            except Exception as exc:  # no Triton, or hooks it cannot chain: every record says so
                self.consan_problem = f"cannot record launches: {type(exc).__name__}: {exc}"
            ensure_scratch_allocator()
        from .known import RULES
        from .launches import Recorder as LaunchRecorder

        # the facts of the Triton kernels each test launches, which rules of this tool may need
        self.launches = LaunchRecorder(_emit) if self.tool in {r.tool for r in RULES} else None
        from .compiling import CompileMarks

        # when Triton compiles or loads a kernel: time the parent's watchdog does not count against the test
        self.compiles = CompileMarks(_emit)
        if self.tool == "memcheck":
            from .allocations import start as allocate_exactly

            # each array its own allocation of exactly its view's size, and its address range printed: a
            # read past a tensor then lands outside every allocation, and the verdict can name the tensor
            allocate_exactly(_emit)

    @staticmethod
    def _disable_pools() -> None:
        import importlib.util

        if envvars.value("PIPECHECK_CANARY_DRYRUN") or importlib.util.find_spec("cupy") is None:
            return
        try:
            import cupy

            # the pool hides out-of-bounds accesses from memcheck (a write past a 4-float array: 0 errors
            # with the pool, 39 without)
            cupy.cuda.set_allocator(None)
            cupy.cuda.set_pinned_memory_allocator(None)
        except Exception:
            pass

    def pytest_runtest_logstart(self, nodeid: str, location: object) -> None:
        self.reports[nodeid] = []
        if self.consan is not None:
            self.consan.start_test()
        _emit(BEGIN + nodeid)
        self.compiles.start_test(nodeid)
        if self.launches is not None:
            self.launches.start_test()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> None:
        self.compiles.follow()  # Triton first imported by the test's setup (a fixture) is followed from here

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.reports.setdefault(report.nodeid, []).append(report)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.compiles.close()
        if self.tool == "memcheck":
            from .allocations import stop

            stop()

    def pytest_runtest_logfinish(self, nodeid: str, location: object) -> None:
        reports = self.reports.pop(nodeid, [])
        sync_error = _synchronize()
        dead = cuda_probe.probe_context()
        self.compiles.end_test()
        outcome = "passed"
        text = ""
        for r in reports:
            if r.failed:
                outcome, text = "failed", r.longreprtext
                break
            if r.skipped:
                outcome, text = "skipped", r.longreprtext
        if sync_error and outcome == "passed":
            outcome, text = "failed", sync_error
        if text:
            _emit(FAILURE + nodeid + " " + json.dumps(text[-4000:]))
        if self.tool == CONSAN:
            # a device assert's message goes through C stdio (buffered on a pipe): out before END
            _flush_c_stdio()
            record = self.consan.record() if self.consan is not None else {"problem": self.consan_problem}
            _emit(f"{CONSAN_RECORD}{nodeid} {json.dumps(record)}")
        _emit(f"{END}{nodeid} {outcome}")
        if dead is not None:
            # every later test here would fail at its first CUDA call: stop, and let the runner give
            # the rest a fresh child
            _emit(POISONED + nodeid + " " + json.dumps(dead))
            session = getattr(self, "session", None)
            if session is not None:
                session.shouldstop = f"pipecheck: CUDA context unusable after {nodeid}"

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        try:
            return (yield)
        finally:
            if self.role.canary and not session.shouldstop:
                from .canary import run_canary

                nodeid = canary_nodeid(self.tool)
                _emit(BEGIN + nodeid)
                outcome, message = run_canary(self.tool)
                _synchronize()
                if message and outcome != "passed":
                    _emit(FAILURE + nodeid + " " + json.dumps(message))
                _emit(f"{END}{nodeid} {outcome}")
