"""One sanitizer child process, run and watched: its watchdog, its output, and stopping children together.

:func:`run_child` starts one child in a process session of its own, reads its output on a thread, and kills
it when a test has not printed its END line within its timeout (a hang: the seconds Triton spends compiling
are not the test's), when one compile runs past the compile cap (a compile hang), or when nothing is printed
outside a test for too long; what the child did comes back as a :class:`ChildRun`. :func:`stop_children`
(the run is being interrupted: it is safe in a signal handler) kills every child watched here, on every
thread, and refuses new ones until :func:`allow_children`; a :class:`ChildGroup` does the same for the
children of one owner only. The children of compute-sanitizer (:mod:`.runner`) and of ConSan
(:mod:`.consan`) are run here alike.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .parse import BEGIN, COMPILE_BEGIN, COMPILE_END, END, POISONED

__all__ = [
    "COMPILE_CAP",
    "ChildGroup",
    "ChildRun",
    "ChildrenStopped",
    "allow_children",
    "run_child",
    "stop_children",
]


@dataclass
class ChildRun:
    """What one child process did."""

    command: list[str]
    output: str
    returncode: int | None
    killed_in: str | None = None  # the test that was running when the watchdog fired
    kill_reason: str = ""
    wall: float = 0.0
    xml: str | None = None  # the --save file's text; "" when asked for and missing; None: not asked for
    test_seconds: dict[str, float] = field(default_factory=dict)  # BEGIN to END of each finished test
    poisoned_by: str | None = None  # the test after which the child said its CUDA context was dead
    kill_kind: str = ""  # why the watchdog killed it: "hang" (a test's own time), "compile" (the compile cap), "idle"
    compile_seconds: dict[str, float] = field(default_factory=dict)  # each finished test's seconds of Triton compiles


def _reader(stream: Any, q: queue.Queue[str | None]) -> None:
    try:
        for raw in iter(stream.readline, b""):
            q.put(raw.decode("utf-8", "replace").rstrip("\r\n"))
    except (OSError, ValueError):
        pass
    finally:
        q.put(None)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            proc.kill()
        except OSError:
            pass


class ChildrenStopped(KeyboardInterrupt):
    """The run is being interrupted: :func:`run_child` killed its child, or refused to start one.

    A ``KeyboardInterrupt``, so that no ``except Exception`` on the way turns it into a verdict.
    """


# The children run_child watches, on any thread. A child runs in a process session of its own (so that
# its whole group can be killed), which also keeps every signal meant for this process away from it:
# when the run is interrupted, these are killed here. Plain set operations and copies, which the GIL
# makes atomic, because stop_children is called from a signal handler, which may run while the main
# thread is inside run_child.
_WATCHED: set[subprocess.Popen[bytes]] = set()
_STOPPING = threading.Event()


def stop_children() -> None:
    """Kill every child :func:`run_child` is watching, on every thread, and refuse to start new ones
    until :func:`allow_children`: the run is being interrupted. Safe to call from a signal handler."""
    _STOPPING.set()
    for proc in list(_WATCHED):
        _kill(proc)


def allow_children() -> None:
    """Let :func:`run_child` start children again (the interrupted session is over)."""
    _STOPPING.clear()


def _stopped() -> ChildrenStopped:
    return ChildrenStopped("pipecheck: the run is being interrupted: its sanitizer children were killed")


class ChildGroup:
    """The children of one owner (a session's sanitizer run going on beside its tests), stopped together.

    :meth:`stop` kills the group's children and makes :func:`run_child` refuse new ones for it, as
    :func:`stop_children` does for every child of the process; other owners' children (a pytester session
    in the same process, say) are left alone."""

    def __init__(self) -> None:
        self._stopping = threading.Event()
        self._procs: set[subprocess.Popen[bytes]] = set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def stop(self) -> None:
        self._stopping.set()
        for proc in list(self._procs):
            _kill(proc)


#: the longest one Triton compile (or binary load) in a sanitizer child may take before the watchdog calls it
#: a compile hang; a test's own ``sanitizer_timeout`` raises it for that test (never stricter than the timeout)
COMPILE_CAP = 300.0


def run_child(cmd: Sequence[str], *, cwd: str, env: dict[str, str], timeouts: dict[str, float],
              default_timeout: float, idle_limit: float,
              on_begin: Callable[[str], None] | None = None,
              clock: Callable[[], float] = time.monotonic, poll: float = 0.2,
              compile_cap: float = COMPILE_CAP, group: ChildGroup | None = None,
              on_line: Callable[[str], None] | None = None) -> ChildRun:
    """Run one child and watch it: a test whose END is not printed in time is killed (a hang).

    A test's time is its kernels' and its own code's, not the compiler's: while the child says Triton is
    compiling or loading a kernel (its COMPILE_BEGIN line, until COMPILE_END, or the test's END) the test's
    clock stands still. One compile longer than ``compile_cap`` (or the test's timeout, where that is
    longer) is killed as a compile hang. ``idle_limit`` bounds the time with no output at all outside a test
    (start-up, collection); a compile outside any test is bounded by the compile cap instead.
    ``clock`` (seconds) times the tests and drives the watchdog; it is read only on this thread, once
    per line when the line is taken (a test's seconds are its BEGIN to its END line) and once each
    ``poll`` seconds without output, so a test can drive it from ``on_begin`` (called with each test's node
    id after its BEGIN line) or ``on_line`` (called with every line after it was taken).
    ``group`` (when given) is the owner whose :meth:`ChildGroup.stop` also stops this child.
    """
    start = clock()
    if _STOPPING.is_set() or (group is not None and group.stopping):
        raise _stopped()
    try:
        proc = subprocess.Popen(list(cmd), cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as exc:
        return ChildRun(list(cmd), f"could not start {cmd[0]!r}: {exc}", None, wall=0.0)
    _WATCHED.add(proc)
    if group is not None:
        group._procs.add(proc)
    watch = _Watch(timeouts, default_timeout, idle_limit, compile_cap, start)
    try:
        return _watch(proc, cmd, watch, on_begin, on_line, clock, poll, group)
    except BaseException:
        # interrupted (KeyboardInterrupt on this thread, or stop_children from another): the child must
        # not outlive the run, and no signal meant for this process reaches its session
        _kill(proc)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass  # stuck in the kernel (a GPU driver call): SIGKILL is delivered when it returns
        raise
    finally:
        _WATCHED.discard(proc)
        if group is not None:
            group._procs.discard(proc)


class _Watch:
    """What the watchdog knows of one child: the test running, its own seconds so far, the compile going on."""

    def __init__(self, timeouts: dict[str, float], default_timeout: float, idle_limit: float, compile_cap: float,
                 start: float) -> None:
        self.timeouts = timeouts
        self.default_timeout = default_timeout
        self.idle_limit = idle_limit
        self.compile_cap = compile_cap
        self.current: str | None = None
        self.began_run = self.began = self.last = start
        self.compiling: float | None = None  # since when Triton compiles or loads (None: it does not)
        self.compiling_what = ""
        self.compiled = 0.0  # the current test's seconds of compiles that ended
        self.seconds: dict[str, float] = {}
        self.compile_seconds: dict[str, float] = {}
        self.killed_in: str | None = None
        self.kind = ""
        self.reason = ""

    def timeout(self) -> float:
        return self.timeouts.get(self.current, self.default_timeout) if self.current is not None else 0.0

    def cap(self) -> float:
        return max(self.compile_cap, self.timeout())

    def own(self, now: float) -> float:
        """The current test's seconds so far, less what Triton spent compiling."""
        running = now - self.compiling if self.compiling is not None else 0.0
        return now - self.began - self.compiled - running

    def begin_test(self, nodeid: str, now: float) -> None:
        self.current, self.began = nodeid, now
        self.compiling, self.compiled = None, 0.0

    def end_test(self, now: float) -> None:
        self.end_compile(now)
        if self.current is not None:
            self.seconds[self.current] = now - self.began
            if self.compiled:
                self.compile_seconds[self.current] = self.compiled
        self.current = None
        self.compiling, self.compiled = None, 0.0

    def begin_compile(self, payload: str, now: float) -> None:
        if self.compiling is not None:
            return
        self.compiling = now
        try:
            data = json.loads(payload)
        except ValueError:
            data = None
        what = data if isinstance(data, dict) else {}
        self.compiling_what = f"{what.get('step') or 'compile'} of {what.get('kernel') or 'a kernel'}"

    def end_compile(self, now: float) -> None:
        if self.compiling is not None:
            self.compiled += now - self.compiling
            self.compiling = None

    def check(self, now: float) -> bool:
        """Whether the child must be killed now (and why: :attr:`kind`, :attr:`reason`)."""
        if self.compiling is not None:
            if now - self.compiling > self.cap():
                self.killed_in = self.current if self.current is not None else ""
                self.kind = "compile"
                where = "" if self.current is not None else " outside any test"
                self.reason = (f"Triton's {self.compiling_what}{where} did not end within {self.cap():g} s "
                               f"(pipecheck's compile cap): compile hang")
        elif self.current is not None and self.own(now) > self.timeout():
            self.killed_in = self.current
            self.kind = "hang"
            note = (f" (its {self.compiled:.1f} s of Triton compiles not counted)" if self.compiled else "")
            self.reason = (f"no PIPECHECK-END within {self.timeout():g} s (sanitizer_timeout) of the test's own "
                           f"time{note}: hang or deadlock")
        elif self.current is None and now - self.last > self.idle_limit:
            self.killed_in = ""
            self.kind = "idle"
            self.reason = f"no output for {self.idle_limit:g} s outside any test"
        return self.killed_in is not None


def _watch(proc: subprocess.Popen[bytes], cmd: Sequence[str], w: _Watch, on_begin: Callable[[str], None] | None,
           on_line: Callable[[str], None] | None, clock: Callable[[], float], poll: float,
           group: ChildGroup | None) -> ChildRun:
    def stopping() -> bool:
        return _STOPPING.is_set() or (group is not None and group.stopping)

    if stopping():  # stop_children ran between the check above and the child joining _WATCHED
        raise _stopped()
    q: queue.Queue[str | None] = queue.Queue()
    thread = threading.Thread(target=_reader, args=(proc.stdout, q), daemon=True)
    thread.start()
    lines: list[str] = []
    poisoned: str | None = None
    while True:
        if stopping():
            raise _stopped()
        try:
            line = q.get(timeout=poll)
        except queue.Empty:
            if w.check(clock()):
                _kill(proc)
                break
            continue
        if line is None:
            break
        w.last = stamp = clock()
        cb, ce = line.find(COMPILE_BEGIN), line.find(COMPILE_END)
        if cb >= 0 or ce >= 0:
            before = line[:max(cb, ce)]
            if before.strip():  # output the marker line was printed into the middle of
                lines.append(before)
            if cb >= 0:
                w.begin_compile(line[cb + len(COMPILE_BEGIN):].strip(), stamp)
            else:
                w.end_compile(stamp)
        else:
            lines.append(line)
            b = line.find(BEGIN)
            if b >= 0:
                w.begin_test(line[b + len(BEGIN):].strip(), stamp)
                if on_begin is not None:
                    on_begin(w.current or "")
            elif END in line:
                w.end_test(stamp)
            elif POISONED in line:
                poisoned = line[line.find(POISONED) + len(POISONED):].split(" ", 1)[0]
        if on_line is not None:
            on_line(line)
        if w.check(stamp):  # a child that never stops printing is watched too
            _kill(proc)
            break
    if stopping():  # its output ended because stop_children killed it: no verdict from that
        raise _stopped()
    try:
        rc = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        _kill(proc)
        rc = proc.wait(timeout=30)
    thread.join(timeout=5)
    while True:  # output that arrived between the kill and the pipe closing
        try:
            line = q.get_nowait()
        except queue.Empty:
            break
        if line is not None and COMPILE_BEGIN not in line and COMPILE_END not in line:
            lines.append(line)
    return ChildRun(list(cmd), "\n".join(lines), rc, w.killed_in, w.reason, clock() - w.began_run,
                    test_seconds=w.seconds, poisoned_by=poisoned, kill_kind=w.kind,
                    compile_seconds=w.compile_seconds)
