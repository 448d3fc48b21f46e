"""REV's process, the parent's side: start it, ask it to time a case, read its samples, stop it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import TYPE_CHECKING, Any

import pytest

from ... import children
from .errors import CompareError
from .tree import Relocation, Revision
from .wire import Channel, ChannelClosed, ChannelTimeout

if TYPE_CHECKING:  # pragma: no cover
    pass

_TAIL = 3000  # characters of REV's output quoted in an error


def _signal_name(code: int | None) -> str:
    if code is None:
        return "still running"
    if code >= 0:
        return f"exit status {code}"
    try:
        return f"signal {-code}, {signal.Signals(-code).name}"
    except ValueError:
        return f"signal {-code}"


class RevProcess:
    """REV's pytest process, started in REV's tree, followed over its socket."""

    def __init__(self, config: pytest.Config, revision: Revision, tree: str, files: list[str],
                 timeout: float) -> None:
        self.revision = revision
        self.collected: set[str] = set()
        self.errors: dict[str, str] = {}
        self.skipped: dict[str, str] = {}  # files (or directories) REV's process skipped collecting, and why
        self.current: str | None = None  # the test REV's process runs now
        self.passed: dict[str, list[str]] = {}  # test -> cases REV called that were not paired
        self.ended: set[str] = set()
        self.outcomes: dict[str, str] = {}
        self.pending: dict[str, Any] | None = None  # REV's arrival at its next check, not answered yet
        # beside the tree (removed with it at the end of the run, even when this process is killed first),
        # unless that makes the socket's path too long for AF_UNIX (about 100 bytes)
        beside = os.path.dirname(tree)
        short = beside if len(beside) < 80 else ("/tmp" if os.path.isdir("/tmp") else None)
        self.dir = tempfile.mkdtemp(prefix="pcc-", dir=short)
        self.log_path = os.path.join(self.dir, "rev-output.log")
        path = os.path.join(self.dir, "s")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(1)
        self.channel: Channel | None = None
        head_top = revision.toplevel
        reloc = Relocation(head_top, tree)
        cwd = reloc(str(config.invocation_params.dir))
        if not os.path.isdir(cwd):
            cwd = reloc(str(config.rootpath))
        cwd = cwd if os.path.isdir(cwd) else tree
        from ...state import RUN_SEED

        cmd = children.command(config, config.stash[RUN_SEED], children.compare(path), files,
                               relocate=lambda p: reloc(p) if os.path.exists(reloc(p)) else p)
        env = dict(os.environ)
        paths = [reloc(p) for p in sys.path if p and reloc.inside(p)]
        paths = list(dict.fromkeys([*paths, tree]))
        env["PYTHONPATH"] = os.pathsep.join([*paths, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
        self._log = open(self.log_path, "w+b")
        try:
            self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                start_new_session=True)
        except OSError as exc:
            self.close()
            raise CompareError(f"could not start REV's process ({cmd[0]}): {exc}") from None
        self._accept(timeout)

    def output_tail(self) -> str:
        try:
            self._log.flush()
            with open(self.log_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - _TAIL))
                return fh.read().decode(errors="replace").strip()
        except OSError:
            return ""

    def _failed(self, what: str, closed: bool = False) -> CompareError:
        """The process failed while ``what``: stop it and say how it ended, with the end of its output.
        ``closed``: its end of the socket closed, so it is ending (given a moment to be reaped)."""
        code = self.proc.poll() if self.proc is not None else None
        if code is None and closed and self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = self.proc.wait(timeout=10)
        if code is None:
            self.kill()
            how = "it did not answer and was stopped"
        else:
            how = f"it ended ({_signal_name(code)})"
        tail = self.output_tail()
        self.close()
        quoted = "\n    ".join(tail.splitlines()[-25:]) if tail else "(no output)"
        return CompareError(f"REV's process failed while {what}: {how}\n  REV's output ends:\n    {quoted}")

    def _accept(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        self.listener.settimeout(0.2)
        while True:
            try:
                conn, _ = self.listener.accept()
                break
            except TimeoutError:
                if self.proc is None or self.proc.poll() is not None or time.monotonic() > deadline:
                    raise self._failed(f"starting in REV's tree (collecting; {timeout:g} s allowed)") from None
        self.channel = Channel(conn)
        ready = self.recv(timeout, "collecting REV's tests")
        if ready.get("op") != "ready":
            raise self._failed(f"collecting REV's tests (it said {ready.get('op')!r}, not 'ready')")
        self.collected = set(ready.get("collected") or [])
        self.errors = {str(k): str(v) for k, v in (ready.get("errors") or {}).items()}
        self.skipped = {str(k): str(v) for k, v in (ready.get("skipped") or {}).items()}

    def send(self, message: dict[str, Any], what: str) -> None:
        assert self.channel is not None
        try:
            self.channel.send(message)
        except ChannelClosed:
            raise self._failed(what, closed=True) from None

    def recv(self, timeout: float, what: str) -> dict[str, Any]:
        assert self.channel is not None
        try:
            message = self.channel.recv(timeout)
        except ChannelTimeout:
            raise self._failed(f"{what} ({timeout:g} s allowed, compare_timeout)") from None
        except ChannelClosed:
            raise self._failed(what, closed=True) from None
        if message.get("op") == "done":
            test = str(message.get("nodeid"))
            self.ended.add(test)
            self.outcomes[test] = str(message.get("outcome", "ended"))
            if self.current == test:
                self.current = None
        return message

    def next_message(self, timeout: float, what: str) -> dict[str, Any]:
        """The arrival held back by :meth:`hold`, else the next message."""
        if self.pending is not None:
            message, self.pending = self.pending, None
            return message
        return self.recv(timeout, what)

    def hold(self, timeout: float, what: str) -> None:
        """Wait until REV's test reaches its next check (held back, unanswered) or ends: whenever the head
        runs anything of its own, REV's process is idle, so it never shares the GPU with the head's timings."""
        if self.current is not None and self.pending is None:
            message = self.recv(timeout, what)
            if message.get("op") == "arrive":
                self.pending = message

    def finish_current(self, timeout: float) -> None:
        """Let the test REV's process runs end: every check it reaches now is not paired."""
        while self.current is not None:
            test = self.current
            message = self.next_message(timeout, f"finishing {test}")
            if message.get("op") == "arrive":
                self.passed.setdefault(test, []).append(str(message.get("case")))
                self.send({"op": "pass", "why": "the head's test made no more perf checks"}, f"finishing {test}")

    def start_test(self, nodeid: str, timeout: float) -> None:
        if self.current == nodeid or nodeid in self.ended:
            return
        self.finish_current(timeout)
        self.send({"op": "run", "nodeid": nodeid}, f"asked to run {nodeid}")
        self.current = nodeid

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)

    def close(self) -> None:
        """Ask the process to quit, stop it if it does not, and remove its socket and log."""
        if self.channel is not None and self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(CompareError):
                self.channel.send({"op": "quit"})
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        else:
            self.kill()
        if self.channel is not None:
            self.channel.close()
        with contextlib.suppress(OSError):
            self.listener.close()
        with contextlib.suppress(OSError):
            self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self.channel is not None
