"""The per-test timeout, on every tier: a test that runs past its limit fails; one that cannot be
stopped ends the process with :data:`EXIT_HUNG` and every thread's stack, never hangs the run.

On the CPU tier Triton kernels run in Triton's interpreter, in this process; a kernel whose loop never
ends (a pipeline whose stage counter never advances) would hang the whole run, and a gate that never
answers is no gate. The sanitizer children have their own watchdog (sanitizer/child_watch.py); this one
guards the tests pytest runs here (and in a relay child, containment.py). A test that waits for this
process's sanitizer children to leave the GPU before it times a kernel (sanitizer/beside.py) does not
spend its limit on that wait (:meth:`TimeoutPlugin.not_counting`).

The limit is the setting ``timeout`` (``--pipecheck-timeout``, ini ``pipecheck_timeout``, the
marker's ``timeout=``; 0 turns it off). It counts from the start of the test's setup over its setup
and call; its teardown has a limit of its own, so that a stopped test still releases its fixtures. A watchdog thread looks at :attr:`TimeoutPlugin.clock` every ``poll`` seconds;
past the deadline it sends :data:`SIGNAL` to the main thread, whose handler fails the test where it
is (``pytest.fail``: a ``BaseException``, so ``except Exception`` in the test cannot swallow it, and
a blocking sleep or wait is interrupted). If the test is still running ``grace`` seconds later (the
signal was blocked, its handler replaced, or the failure caught), the watchdog writes every thread's
stack (faulthandler) and exits the process with :data:`EXIT_HUNG`; under pytest-xdist the controller
then reports the test as the one its worker crashed in.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any

import pytest

from . import state

__all__ = ["EXIT_HUNG", "SIGNAL", "TimeoutPlugin", "limit_for"]

#: exit status of a process whose test could not be stopped after its timeout
EXIT_HUNG = 88
#: the signal the watchdog sends to the main thread (SIGALRM is left to pytest-timeout and tests)
SIGNAL = getattr(signal, "SIGUSR2", None)

_START = pytest.StashKey[float]()


def limit_for(item: pytest.Item) -> tuple[float, str]:
    """The test's time limit in seconds (0: none) and where it came from, for the failure message."""
    cfg = state.item_config(item)
    source = cfg.sources.get("timeout")
    if source == "marker":
        where = f"timeout= of the pipecheck marker on {state.item_nodeid(item)}"
    elif source == "command line":
        where = "--pipecheck-timeout"
    elif source == "ini":
        where = "ini key pipecheck_timeout"
    else:
        where = "pipecheck's default; set --pipecheck-timeout, ini pipecheck_timeout or the marker's timeout="
    return float(cfg.timeout), where


class _Guard:
    """One phase of one test under watch: the thread, the signal handler, and what happened."""

    def __init__(self, owner: TimeoutPlugin, nodeid: str, phase: str, deadline: float, limit: float,
                 where: str) -> None:
        self.owner = owner
        self.nodeid = nodeid
        self.phase = phase
        self.deadline = deadline
        self.message = (f"pipecheck: {nodeid} ran past its timeout of {limit:g} s (from {where}) in its {phase}; "
                        f"it was stopped here")
        self.done = threading.Event()
        self.fired = False
        self.thread = threading.Thread(target=self._watch, name=f"pipecheck-watchdog {nodeid}", daemon=True)
        self.previous: Any = None

    def _handler(self, signum: int, frame: Any) -> None:
        if self.done.is_set() or not self.fired:
            return
        __tracebackhide__ = True
        pytest.fail(self.message)

    def __enter__(self) -> _Guard:
        if SIGNAL is not None and threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(SIGNAL, self._handler)
        if self.owner.clock() >= self.deadline:
            self.fired = True
            self.__exit__()
            pytest.fail(self.message)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        if self.thread.is_alive():
            self.thread.join()
        if self.previous is not None:
            signal.signal(SIGNAL, self.previous)  # type: ignore[arg-type]
            self.previous = None

    def _wait_until(self, deadline: Callable[[], float], pausable: bool = False) -> bool:
        """Wait for the phase to end or the clock to pass ``deadline()``; True when the phase ended. A
        ``pausable`` wait does not end while the owner is not counting (:meth:`TimeoutPlugin.not_counting`)."""
        while not self.done.wait(self.owner.poll):
            if pausable and self.owner.paused:
                continue
            if self.owner.clock() >= deadline():
                return self.done.is_set()
        return True

    def _watch(self) -> None:
        if self._wait_until(lambda: self.deadline, pausable=True):
            return
        self.fired = True
        main = threading.main_thread().ident
        if SIGNAL is not None and self.previous is not None and main is not None:
            try:
                signal.pthread_kill(main, SIGNAL)
            except (OSError, ValueError):
                pass
        end = self.owner.clock() + self.owner.grace
        if self._wait_until(lambda: end):
            return
        self.owner.give_up(self)


class TimeoutPlugin:
    """Fails a test that runs past its time limit; ends the process if it cannot be stopped."""

    def __init__(self, config: pytest.Config, *, clock: Callable[[], float] = time.monotonic, poll: float = 0.25,
                 grace: float = 30.0, exit_process: Callable[[int], Any] = os._exit) -> None:
        self.config = config
        self.clock = clock  # seconds; injected by tests so that nothing waits on the wall clock
        self.poll = poll
        self.grace = grace
        self.exit_process = exit_process
        self._lock = threading.Lock()
        self._pauses = 0
        self._running: dict[int, tuple[_Guard, pytest.Item]] = {}  # the phases under watch now

    @property
    def paused(self) -> bool:
        return self._pauses > 0

    @contextlib.contextmanager
    def not_counting(self) -> Iterator[None]:
        """Time that is not the running test's own (it waits for this process's sanitizer children to leave
        the GPU to a timing): the watchdog does not fire meanwhile, and the test's deadline moves by it."""
        start = self.clock()
        with self._lock:
            self._pauses += 1
        try:
            yield
        finally:
            spent = max(0.0, self.clock() - start)
            with self._lock:
                self._pauses -= 1
                for guard, item in self._running.values():
                    guard.deadline += spent
                    if guard.phase != "teardown" and _START in item.stash:
                        item.stash[_START] += spent  # setup and call share one limit from the setup's start

    def _guard(self, item: pytest.Item, phase: str) -> _Guard | None:
        limit, where = limit_for(item)
        if limit <= 0:
            return None
        now = self.clock()
        # setup and call share one limit; teardown has its own, so that a test stopped at its limit
        # still releases its fixtures (and a teardown that hangs is still bounded)
        start = now if phase == "teardown" else item.stash.setdefault(_START, now)
        return _Guard(self, state.item_nodeid(item), phase, start + limit, limit, where)

    def _run(self, item: pytest.Item, phase: str) -> Generator[None, object, object]:
        guard = self._guard(item, phase)
        if guard is None:
            return (yield)
        with self._lock:
            self._running[id(guard)] = (guard, item)
        try:
            with guard:
                return (yield)
        finally:
            with self._lock:
                self._running.pop(id(guard), None)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, object, object]:
        # the share of the sanitizer check this test belongs to is run before its clock starts: that
        # batch has its own watchdog and may take far longer than one test (sanitizer/batches.py)
        sanitizer = self.config.pluginmanager.get_plugin("pipecheck-sanitizer")
        if sanitizer is not None and hasattr(sanitizer, "ensure_share"):
            try:
                sanitizer.ensure_share(item)
            except Exception:
                pass  # raised again by the sanitizer's own setup hook, inside the setup phase
        return (yield from self._run(item, "setup"))

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, object, object]:
        return (yield from self._run(item, "call"))

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
        return (yield from self._run(item, "teardown"))

    def give_up(self, guard: _Guard) -> None:
        """The test did not stop when told: every thread's stack to stderr, then exit :data:`EXIT_HUNG`."""
        text = (f"\n{guard.message.replace('it was stopped here', 'it could not be stopped')} "
                f"(still running {self.grace:g} s after it was told to stop; the signal was blocked, its handler "
                f"replaced or the failure caught); ending this process with exit status {EXIT_HUNG}. "
                f"Stacks of every thread:\n")
        capman = self.config.pluginmanager.get_plugin("capturemanager")
        try:  # pytest captures fd 2 during a test: give the real stderr back first
            if capman is not None:
                capman.suspend_global_capture(in_=True)
        except Exception:
            pass
        try:
            sys.stderr.write(text)
            sys.stderr.flush()
            faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
            sys.stderr.flush()
        except (OSError, ValueError, AttributeError):
            try:
                os.write(2, text.encode("utf-8", "replace"))
                faulthandler.dump_traceback(file=2, all_threads=True)
            except OSError:
                pass
        self.exit_process(EXIT_HUNG)
