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
  the worker's such tests in one lease (``SanitizerPlugin._finish_held``);
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

__all__ = ["LEASE_KEY", "GpuLease", "LeasePlugin", "lease_dir", "lease_path"]

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


class LeasePlugin:
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
        self.phase: tuple[pytest.Item, str] | None = None
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

    @contextlib.contextmanager
    def not_counted(self) -> Iterator[None]:
        """A wait that is not the running test's: paused for the watchdog, left out of its phase's duration."""
        timeout = self.config.pluginmanager.get_plugin("pipecheck-timeout")
        pause = timeout.not_counting() if timeout is not None and hasattr(timeout, "not_counting") \
            else contextlib.nullcontext()
        started = self.clock()
        try:
            with pause:
                yield
        finally:
            if self.phase is not None:
                state.note_wait(self.phase[0], self.phase[1], self.clock() - started)

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
            if self.taken_for is item and not self.ended:
                # a lease taken where the test asked is the test's: the other workers go on after it
                self.taken_for = None
                self.lease.share()

    def _in_phase(self, item: pytest.Item, when: str) -> Generator[Any, object, object]:
        self.phase = (item, when)
        try:
            return (yield)
        finally:
            self.phase = None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        try:
            return (yield)
        finally:
            self.end()  # every test of this worker has ended, its postponed timings too: the others may time

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.end()


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
