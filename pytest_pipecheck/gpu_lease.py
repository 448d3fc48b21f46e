"""The GPU alone for a timing, among the pytest-xdist workers that share it.

A kernel is timed only where nothing else runs on its GPU (``TierInfo.timing_blocked``). Several xdist
workers pinned to one GPU run each other's kernels and sanitizer children between the timed launches, so
without this module every timing there is skipped, and a CI job that runs its GPU tier with ``-n 8`` on one
GPU gates nothing on time.

Each such worker holds a lock file of its GPU (one per GPU, in a folder the controller made for the run:
:func:`lease_dir`) *shared* from its start to the end of its tests, its sanitizer children included. A timing
takes it *alone* (``flock`` exclusive): it gets it once every other worker on that GPU has ended its tests
or waits for it too (a worker that waits for it holds it no more). So the timing runs after the others,
in the same session, where it used to be skipped:

* a test that asks for the GPU alone in its body while its reports are held (the sanitizer's overlap:
  ``sanitizer/beside.py``) stops there and runs again from its start at the end of the worker's tests, all of
  the worker's such tests in one lease (``sanitizer.held_reports.HeldReports._finish_held``);
* anywhere else (a fixture, a test that times with pytest-benchmark, a run with the sanitizer off) the test
  waits where it asks, and gives the lease back when it ends. The worker waits with it; the controller sends
  the other tests to the other workers meanwhile.

The wait is not the test's: the watchdog does not count it and the test's reported durations leave it out
(``state.WAITED``). Locks are the kernel's: a worker that dies gives its lock back with its process.
No two workers wait for each other: a worker asks for the lease alone only after giving up its shared
hold, so the last worker to end its tests always gets it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any

import pytest

from . import state
from .device import TierInfo

__all__ = ["GRANT_EVENT", "LEASE_KEY", "GpuLease", "LeasePlugin", "RelayGpuGate", "lease_dir", "lease_path",
           "not_counted", "relay_gate", "worker_lease"]

#: the workerinput key that carries the run's folder of GPU lock files to each xdist worker
LEASE_KEY = "pipecheck_gpu_lease"
_LEASE_DIR = pytest.StashKey[str]()


def lease_dir(config: pytest.Config) -> str:
    """On the xdist controller: the folder of this run's GPU lock files, made once and removed at its end."""
    path = config.stash.get(_LEASE_DIR, None)
    if path is None:
        path = config.stash[_LEASE_DIR] = tempfile.mkdtemp(prefix="pipecheck-gpu-lease-")
        config.add_cleanup(functools.partial(shutil.rmtree, path, ignore_errors=True))
    return path


def lease_path(folder: str, gpu: str) -> str:
    """The lock file of GPU ``gpu`` (its UUID or index, as the controller pinned it) in ``folder``."""
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in str(gpu))
    return os.path.join(folder, f"gpu-{safe}.lock")


class GpuLease:
    """One worker's hold on its GPU's lock file: ``none``, ``shared`` or ``alone``."""

    def __init__(self, path: str) -> None:
        import fcntl  # POSIX only; a platform without it gets no lease (and skips its timings as before)

        self._fcntl = fcntl
        self.path = path
        self.fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        self.state = "none"

    def _lock(self, how: int) -> None:
        if self.fd is None:
            raise RuntimeError(f"the GPU lease {self.path} is closed")
        self._fcntl.flock(self.fd, how)

    def share(self) -> None:
        """Hold the GPU with the other workers (waits while one has it alone)."""
        if self.state != "shared":
            self._lock(self._fcntl.LOCK_SH)
            self.state = "shared"

    def alone(self) -> None:
        """Hold the GPU alone: waits until no other worker holds it. The shared hold is given up first (flock
        converts a lock by releasing it), so two workers that ask at once do not wait for each other."""
        if self.state != "alone":
            if self.state == "shared":
                self._lock(self._fcntl.LOCK_UN)
                self.state = "none"
            self._lock(self._fcntl.LOCK_EX)
            self.state = "alone"

    def release(self) -> None:
        if self.state != "none" and self.fd is not None:
            self._lock(self._fcntl.LOCK_UN)
        self.state = "none"

    def close(self) -> None:
        self.release()
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


@contextlib.contextmanager
def not_counted(config: pytest.Config, phase: tuple[pytest.Item, str] | None,
                clock: Callable[[], float] = time.monotonic) -> Iterator[None]:
    """A wait that is not the running test's: paused for the watchdog, left out of ``phase``'s duration."""
    timeout = config.pluginmanager.get_plugin("pipecheck-timeout")
    pause = timeout.not_counting() if timeout is not None and hasattr(timeout, "not_counting") \
        else contextlib.nullcontext()
    started = clock()
    try:
        with pause:
            yield
    finally:
        if phase is not None:
            state.note_wait(phase[0], phase[1], clock() - started)


class _PhaseTracker:
    """A plugin that knows which test phase runs on the main thread (:attr:`phase`): a wait asked outside a
    test is answered differently from one inside. :meth:`_test_ended` runs after each test's teardown."""

    phase: tuple[pytest.Item, str] | None = None

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, object, object]:
        return (yield from self._in_phase(item, "setup"))

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, object, object]:
        return (yield from self._in_phase(item, "call"))

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None
                                ) -> Generator[None, object, object]:
        try:
            return (yield from self._in_phase(item, "teardown"))
        finally:
            self._test_ended(item)

    def _in_phase(self, item: pytest.Item, when: str) -> Generator[Any, object, object]:
        self.phase = (item, when)
        try:
            return (yield)
        finally:
            self.phase = None

    def _test_ended(self, item: pytest.Item) -> None:
        pass


class LeasePlugin(_PhaseTracker):
    """On an xdist worker whose GPU other workers share: holds the GPU's lease, and gives the tests a tier whose
    ``timing_blocked`` takes the lease alone before it answers (beside.TierBesideChildren)."""

    name = "pipecheck-gpu-lease"

    def __init__(self, config: pytest.Config, lease: GpuLease, clock: Callable[[], float] = time.monotonic) -> None:
        from .sanitizer.beside import beside_children

        self.config = config
        self.lease = lease
        self.clock = clock
        self.shared_tier: TierInfo = config.stash[state.TIER]
        #: asked first, in order, each time a timing is about to be taken: the sanitizer's wait for this
        #: process's own children (which may stop a held test instead: beside.Postponed)
        self.before: list[Callable[..., object]] = []
        self.phase = None
        self.taken_for: pytest.Item | None = None  # the test that took the lease alone where it asked
        self.ended = False
        lease.share()
        config.stash[state.TIER] = beside_children(self.shared_tier, self.wait)

    @property
    def others_may_run(self) -> bool:
        """Other workers may still run on this GPU: the lease is not held alone, and this worker's tests go on."""
        return not self.ended and self.lease.state != "alone"

    def wait(self, in_test: bool = False) -> bool:
        """Before a timing in a test: what :attr:`before` asks, then the lease alone (unless held already). True:
        this process has the GPU to itself now; False outside a test, where the tier answers as it would.
        ``in_test``: asked through the test's function-scoped ``pipecheck`` fixture (beside.TierBesideChildren)."""
        if self.ended or self.phase is None:
            return False  # outside a test (or after this worker's tests): nothing is taken, the tier answers
        for before in self.before:
            before(self.lease, in_test=in_test)
        if self.lease.state != "alone":
            with self.not_counted():
                self.lease.alone()
            if self.phase is not None:
                self.taken_for = self.phase[0]
        return True

    def not_counted(self) -> contextlib.AbstractContextManager[None]:
        """A wait that is not the running test's (:func:`not_counted`)."""
        return not_counted(self.config, self.phase, self.clock)

    def alone_for_a_child(self) -> None:
        """The GPU alone for a relay child's timed test (containment.py), until :meth:`shared_again`."""
        if not self.ended:
            self.lease.alone()

    def shared_again(self) -> None:
        """That test ended: the other workers go on (unless this worker's tests are over)."""
        if not self.ended and self.lease.state == "alone":
            self.lease.share()

    @contextlib.contextmanager
    def alone_for_the_rest(self) -> Iterator[None]:
        """The GPU alone for what runs inside (a worker's postponed timings, after its other tests), then
        given back for good: this worker has ended its tests."""
        try:
            self.lease.alone()
            yield
        finally:
            self.end()

    def end(self) -> None:
        if not self.ended:
            self.ended = True
            self.lease.close()
            self.config.stash[state.TIER] = self.shared_tier

    # ------------------------------------------------------------------ hooks
    def _test_ended(self, item: pytest.Item) -> None:
        if self.taken_for is item and not self.ended:
            # a lease taken where the test asked is the test's: the other workers go on after it
            self.taken_for = None
            self.lease.share()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        try:
            return (yield)
        finally:
            self.end()  # every test of this worker has ended, its postponed timings too: the others may time

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.end()


#: the event a relay child writes to its parent (containment.py) to ask for the GPU alone
GRANT_EVENT = "gpu-alone"


class RelayGpuGate(_PhaseTracker):
    """In a relay child (containment.py): a timing first asks the parent for the GPU alone.

    The relay child runs tests for a parent whose sanitizer children may still run on the GPU, and whose GPU
    other xdist workers may share; neither is this process's to wait for. So before a timing it writes a
    :data:`GRANT_EVENT` (with a number) to its parent, which waits for its own children to end and takes its
    lease alone (:meth:`.containment.ContainmentPlugin.grant_gpu`), then makes the file ``PREFIX-N``. The grant
    holds until the test ends; the wait is not the test's. Where no grant can come (the parent is gone), the
    tier answers as it would: a timing on a GPU other workers share is skipped, with the reason."""

    name = "pipecheck-relay-gpu"

    def __init__(self, config: pytest.Config, prefix: str, emit: Callable[[dict[str, Any]], None],
                 poll: float = 0.05, clock: Callable[[], float] = time.monotonic) -> None:
        from .sanitizer.beside import beside_children

        self.config = config
        self.prefix = prefix
        self.emit = emit
        self.poll = poll
        self.clock = clock
        self.phase = None
        self.granted_for: pytest.Item | None = None
        self.asked = 0
        self.parent = os.getppid()
        config.stash[state.TIER] = beside_children(config.stash[state.TIER], self.wait)

    def wait(self, in_test: bool = False) -> bool:
        """Before a timing in a test: the parent's grant (True: the GPU is this test's alone); False outside a
        test, or where the parent is gone."""
        if self.phase is None:
            return False
        item = self.phase[0]
        if self.granted_for is item:
            return True
        self.asked += 1
        grant = f"{self.prefix}-{self.asked}"
        self.emit({"event": GRANT_EVENT, "nodeid": item.nodeid, "number": self.asked})
        with not_counted(self.config, self.phase, self.clock):
            while not os.path.exists(grant):
                if os.getppid() != self.parent:
                    return False  # the parent died: no grant comes
                time.sleep(self.poll)
        self.granted_for = item
        return True

    def _test_ended(self, item: pytest.Item) -> None:
        self.granted_for = None  # the parent gives the GPU back when it reads the test's end


def relay_gate(config: pytest.Config, role: Any) -> RelayGpuGate | None:
    """Register the gate in a relay child whose parent gave it one (a GPU tier); None elsewhere."""
    if not role.relay or not role.gpu_gate or not config.stash[state.TIER].has_gpu:
        return None
    containment = config.pluginmanager.get_plugin("pipecheck-containment")
    if containment is None:
        return None
    gate = RelayGpuGate(config, role.gpu_gate, containment.emit)
    config.pluginmanager.register(gate, RelayGpuGate.name)
    return gate


def worker_lease(config: pytest.Config) -> LeasePlugin | None:
    """Register the lease on an xdist worker whose GPU other workers share, where the controller named a folder
    for it; None elsewhere (the GPU is this process's alone, or timings there are skipped as before)."""
    workerinput = getattr(config, "workerinput", None) or {}
    folder, gpu = workerinput.get(LEASE_KEY), workerinput.get("pipecheck_gpu")
    tier = config.stash[state.TIER]
    if not folder or not gpu or not tier.has_gpu or len(tier.gpu_shared_by) < 2:
        return None
    try:
        lease = GpuLease(lease_path(str(folder), str(gpu)))
    except (ImportError, OSError):
        return None  # no lock here: timings on the shared GPU are skipped, with the reason, as before
    plugin = LeasePlugin(config, lease)
    config.pluginmanager.register(plugin, LeasePlugin.name)
    return plugin
