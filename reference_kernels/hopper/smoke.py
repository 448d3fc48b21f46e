"""The Hopper module's smoke run: the kernel once in a child process, under a time limit, before any
launch in the test process (a broken mbarrier handshake hangs a kernel forever; in a child it costs a
failure with the child's report, not a stuck pytest).

The run takes seconds (a fresh interpreter, torch, the compile), so the Hopper module's conftest starts it
as soon as the collection holds a test that needs it, and the module fixture only waits for it: the tests
collected before the module run meanwhile. Without that early start the fixture starts it itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

__all__ = [
    "COMMAND",
    "TIMEOUT_S",
    "SmokeRun",
    "device_problem",
    "start_early_run",
    "stop_early_run",
    "take_early_run",
]

ROOT = Path(__file__).resolve().parents[2]
#: the smoke run's command: the reference kernel at one ragged shape, checked against float64
COMMAND = (sys.executable, "-m", "reference_kernels.hopper.run_case", "--shapes", "129x257x72")
#: seconds the run may take, from its start, before it counts as a hang
TIMEOUT_S = 90.0


def device_problem() -> str | None:
    """Why the Hopper kernel cannot run here (no torch, no sm_90 GPU, no cuda-python), or None."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        return "needs an sm_90 GPU (H100/H200)"
    try:
        import cuda.bindings.driver  # noqa: F401
    except ImportError:
        return "cuda-python is needed for cuTensorMapEncodeTiled"
    return None


class SmokeRun:
    """One smoke run in a child process, started at construction; :meth:`failure` waits for its verdict."""

    def __init__(self, command: Sequence[str] = COMMAND, timeout_s: float = TIMEOUT_S, *, cwd: Path = ROOT,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.command = list(command)
        self.timeout_s = timeout_s
        self._clock = clock
        # files, not pipes: a child that writes more than a pipe holds would stop until the fixture reads it
        self._out: IO[bytes] = tempfile.TemporaryFile()
        self._err: IO[bytes] = tempfile.TemporaryFile()
        self.started = clock()
        self._proc = subprocess.Popen(self.command, cwd=cwd, stdout=self._out, stderr=self._err,
                                      stdin=subprocess.DEVNULL, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        self._failure: str | None = None
        self._done = False

    def failure(self) -> str | None:
        """Wait for the run (up to ``timeout_s`` from its start, then kill it); None when the kernel matched
        its reference, else what went wrong, with the end of the child's output."""
        if self._done:
            return self._failure
        left = max(0.0, self.timeout_s - (self._clock() - self.started))
        shown = " ".join(self.command)
        try:
            code = self._proc.wait(timeout=left)
        except subprocess.TimeoutExpired:
            self.stop()
            self._failure = f"the Hopper GEMM hung in a child process ({self.timeout_s:g} s): {shown}"
            return self._failure
        if code != 0:
            self._failure = (f"the Hopper GEMM failed in a child process (exit {code}): {shown}\n"
                             f"{self._tail(self._out)}\n{self._tail(self._err)}")
        self._done = True
        self._out.close()
        self._err.close()
        return self._failure

    def stop(self) -> None:
        """Kill the run if it still runs (a session that ends before its tests did)."""
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        if not self._done:
            self._done = True
            self._failure = "the Hopper smoke run was stopped before it ended"
            self._out.close()
            self._err.close()

    @staticmethod
    def _tail(f: IO[bytes], limit: int = 3000) -> str:
        f.seek(0)
        return f.read().decode("utf-8", "replace")[-limit:]


_EARLY: list[SmokeRun] = []


def start_early_run(run: Callable[[], SmokeRun] = SmokeRun) -> SmokeRun:
    """Start the smoke run now, for the module fixture to take later (:func:`take_early_run`)."""
    stop_early_run()
    _EARLY.append(run())
    return _EARLY[-1]


def take_early_run() -> SmokeRun | None:
    """The run :func:`start_early_run` started, if any (once)."""
    return _EARLY.pop() if _EARLY else None


def stop_early_run() -> None:
    """Kill a run started early that no fixture took (the session ended before the Hopper tests)."""
    while _EARLY:
        _EARLY.pop().stop()
