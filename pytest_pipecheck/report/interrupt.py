"""A run that does not reach its end: what the reports say about it, and the signals that end it.

A report at its path must never read as a pass for a run that did not finish. The report writer
marks each report as ``running`` when the session starts (a run that dies without a word, killed
or out of memory, leaves that behind, never the previous run's verdict), and rewrites it as
``interrupted`` or ``finished`` at the end.

A CI job's timeout sends SIGTERM, whose default action ends the process at once: no report is
written and the children pipecheck started (each in a process session of its own, which no
signal meant for the run reaches) keep running. :class:`SignalGuard` turns SIGTERM into the
interruption pytest already handles for SIGINT (``KeyboardInterrupt``: the session ends, the
reports are written, the exit status is 2), says which signal it was, and kills the children first.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

__all__ = ["FINISHED", "INTERRUPTED", "RUNNING", "STATES", "Interruption", "SignalGuard", "SignalReceived"]

#: the run has not finished: written when it starts (if a reader finds this after the run, it died)
RUNNING = "running"
#: the session was ended early (a signal, KeyboardInterrupt, ``pytest.exit``): what finished is reported
INTERRUPTED = "interrupted"
#: the session ran to its end, whatever its verdict
FINISHED = "finished"
STATES = (RUNNING, INTERRUPTED, FINISHED)

_CHILD_WATCH = "pytest_pipecheck.sanitizer.child_watch"


@dataclass(frozen=True)
class Interruption:
    """Why the session ended early: the signal (``"SIGTERM"``, ``"SIGINT"``) when one was received, and
    the exception pytest ended the session with."""

    signal: str | None
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"signal": self.signal, "reason": self.reason}

    def describe(self) -> str:
        """``"interrupted by SIGTERM"``, or by what pytest said when there was no signal."""
        return f"interrupted by {self.signal}" if self.signal else f"interrupted ({self.reason})"


class SignalReceived(KeyboardInterrupt):
    """Raised on the main thread for a signal whose previous handler did not raise: pytest ends the
    session as for Ctrl-C, and the reports are written."""


def stop_children() -> None:
    """Kill the sanitizer children running now and refuse new ones, on every thread.

    Only when :mod:`pytest_pipecheck.sanitizer.child_watch` (which runs them) was imported: without it, no
    such child was started. No import here: this runs in a signal handler, which must not wait for the
    import lock the main thread may hold.
    """
    watch = sys.modules.get(_CHILD_WATCH)
    if watch is not None:
        watch.stop_children()


def allow_children() -> None:
    """Let the runner start children again (for the next session in this process)."""
    watch = sys.modules.get(_CHILD_WATCH)
    if watch is not None:
        watch.allow_children()


Handler = Callable[[int, FrameType | None], Any] | int | None


class SignalGuard:
    """Handlers for SIGTERM and SIGINT (or the signals named) on the main thread, until :meth:`restore`.

    On a signal the handler records its name (the first one received is :attr:`received`), runs
    ``on_signal`` (kills the children) and then the handler it replaced when that was Python code
    (SIGINT's default raises ``KeyboardInterrupt``); when that returns, or there was none (SIGTERM's
    default), it raises :class:`SignalReceived`. A signal whose handler was ``SIG_IGN`` stays ignored.
    Inside :meth:`deferred` a signal is only recorded.
    """

    def __init__(self, on_signal: Callable[[], None] | None = stop_children) -> None:
        self.on_signal = on_signal
        self.received: str | None = None
        self._previous: dict[int, Handler] = {}
        self._active = False
        self._deferring = 0
        self._pending: str | None = None
        self._raised = False  # the first signal outside deferred() raised: a later one is only recorded
        self._handler = self._handle  # one bound method: restore compares it with what is installed

    def install(self, names: tuple[str, ...] = ("SIGTERM", "SIGINT")) -> bool:
        """Install the handlers; False (and nothing installed) off the main thread, where Python
        cannot set signal handlers (a pytest run from a thread)."""
        if threading.current_thread() is not threading.main_thread():
            return False
        for name in names:
            signum = getattr(signal, name, None)
            if signum is None:
                continue
            previous = signal.getsignal(signum)
            if previous is signal.SIG_IGN or previous is None:
                continue  # ignored on purpose, or a handler set outside Python: left as it is
            signal.signal(signum, self._handler)
            self._previous[int(signum)] = previous
        self._active = True
        return True

    def restore(self) -> None:
        """Put back the handlers :meth:`install` replaced, where this guard's is still the one installed
        (a handler installed later stays: it may call this one, which then only passes the signal on)."""
        self._active = False
        for signum, previous in self._previous.items():
            if signal.getsignal(signum) == self._handler and previous is not None:
                signal.signal(signum, previous)
        self._previous.clear()

    @contextlib.contextmanager
    def deferred(self, *, raise_after: bool) -> Iterator[None]:
        """Within the block a signal is recorded (and the children killed) but raises nothing, so a
        report is never left half-decided; after it, one that arrived raises when ``raise_after``."""
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1
        if raise_after and not self._deferring and self._pending is not None:
            name, self._pending = self._pending, None
            raise SignalReceived(f"{name} received")

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        previous = self._previous.get(signum)
        name = signal.Signals(signum).name
        if not self._active:  # restored, but still called by a handler installed after this one
            if callable(previous):
                previous(signum, frame)
                return
            raise SignalReceived(f"{name} received")
        if self.received is None:
            self.received = name
        if self.on_signal is not None:
            self.on_signal()
        if self._deferring:
            self._pending = self._pending or name
            return
        if self._raised:
            # a second signal while the first one's exception unwinds (a CI runner's SIGINT then SIGTERM, or a
            # signal sent to a process group): raising again from whatever frame it lands in (a lock's
            # release inside threading) would break the unwinding into an INTERNALERROR; the session is
            # ending already, so it is only recorded
            return
        self._raised = True
        if callable(previous):
            previous(signum, frame)  # SIGINT's default raises KeyboardInterrupt here
        raise SignalReceived(f"{name} received")
