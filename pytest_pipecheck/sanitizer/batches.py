"""The parent's sanitizer runs: each share of the tests planned into batches and run in child processes.

``SanitizerBatches`` (the base of :class:`.parent_plugin.SanitizerPlugin`) sanitizes each share once in this
process. Each batch (one tool and its options) is cut into parts of about equal cost, one child each, several
at once (:mod:`.costs`); they run on a thread of their own beside the normal test loop (:mod:`.beside`), or,
with the overlap off, to their end before the first test. Each test waits before its setup for its own
verdicts; a timing waits for the children (a held test stops instead: :class:`.beside.Postponed`). Where no
GPU, no tool or a bad suppressions file decides a verdict, no child runs for it.
"""

from __future__ import annotations

import concurrent.futures
import functools
import re
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any

import pytest

from .. import envvars, state
from ..config import CONSAN
from ..device import TierInfo
from ..gpu_lease import GpuLease, LeasePlugin
from ..results import CheckResult, Verdict
from .beside import Pending, Postponed, beside_children
from .child_command import BatchSpec, default_child_env
from .child_watch import ChildGroup
from .consan import KNOB_ENV as CONSAN_KNOB
from .consan import ConsanRunner
from .costs import assign_shares, children_at_once, costs_for_balance, worker_children_at_once
from .item_verdicts import OUTCOMES, POSTPONED, RECORDED, expected_tools, record_outcomes
from .locate import HOW_TO_GET, SanitizerInstall, find_compute_sanitizer, not_found
from .runner import SanitizerRunner
from .shares import GROUP_UNKNOWN, SHARE
from .suppressions import SuppressionError, load_suppressions
from .tool_outcomes import TestOutcome

__all__ = ["SanitizerBatches", "child_args"]

_ONE_TEST = re.compile(r": test \d+ of \d+ ")  # a child's progress line for one test it ran


def child_args(config: pytest.Config) -> list[str]:
    """The command line of a child pytest that runs some of this session's tests under the sanitizer (its
    role and node ids follow)."""
    from .. import children

    return children.base_command(config, config.stash[state.RUN_SEED], quiet_output=False)


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


class SanitizerBatches:
    """Parent side: plans, runs and awaits each share's sanitizer batches (the hooks: SanitizerPlugin)."""

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

    def _reached(self, items: dict[str, pytest.Item], nodeid: str) -> None:
        if nodeid in items:
            self.pending.reached(items[nodeid])

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

    def record_for(self, item: pytest.Item) -> list[CheckResult]:
        """Record ``item``'s sanitizer verdicts, once: for a test run here, or one whose reports are replayed
        from a relay child (containment.py), which ran no sanitizer."""
        if item.stash.get(RECORDED, False):
            return []
        item.stash[RECORDED] = True
        self.ensure_share(item)  # under xdist a relayed test's share may not have been sanitized yet
        return record_outcomes(self.config, item, self.outcomes_of(item))
