"""pytest side of the sanitizer check in a child: the marker plugin of each sanitizer child.

``ChildPlugin`` (``--pipecheck-child=TOOL``) prints the BEGIN/END lines that attribute output to tests, and
the COMPILE_BEGIN/COMPILE_END lines around Triton's compiles (:mod:`.compiling`), disables CuPy's memory
pools, waits for the device after each test (and says when its CUDA context is unusable), runs the canary
kernel last and, under memcheck, allocates every array at its exact size and prints its address range
(:mod:`.allocations`).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Generator
from typing import Any

import pytest

from .. import cuda_probe, envvars, state
from ..children import CHILD_ENV, Role
from ..config import CONSAN
from ..cuda_probe import cupy_context
from .child_command import canary_nodeid
from .consan import RECORD as CONSAN_RECORD
from .parse import BEGIN, END, FAILURE, POISONED

__all__ = ["POISONED", "ChildPlugin"]



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
