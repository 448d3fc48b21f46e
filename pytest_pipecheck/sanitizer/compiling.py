"""When Triton compiles or loads a kernel in a sanitizer child: the marker lines the runner's watchdog reads.

A sanitizer child runs each test under the tool, and the first launch of a kernel there compiles it (an
autotuned kernel: every config) and loads its binary, which the tool instruments. On an H200 the first
test of an autotuned fla-core kernel spent most of its 60.7 s under racecheck compiling, against a
watchdog meant for a kernel that never finishes. So the child says when Triton is compiling: the runner
(:func:`.child_watch.run_child`) stops the test's clock from :data:`.parse.COMPILE_BEGIN` to
:data:`.parse.COMPILE_END` and bounds each such stretch on its own (its compile cap), so that a compiler
that hangs is still caught, as a compile hang.

What is followed, in the child, once Triton is imported (the test modules import it; nothing here
imports it)
    The compile: ``triton.compiler.compile``, which every ``JITFunction`` (Triton's and Gluon's, the
    autotuner's configs among them) calls through the reference its binder takes when the kernel first
    runs on a device. It is wrapped, so the stretch ends whether the compile returns or raises. A kernel
    whose binder was made before the wrapper was in place (launched at import) compiles unseen, and its
    compile counts as the test's own time, as it always did.

    The load: ``knobs.runtime.kernel_load_start_hook`` to ``kernel_load_end_hook`` (the driver loads the
    binary, and the tool instruments it). A load that raises between the two (out of resources) leaves
    the stretch open until the next launch (``launch_enter_hook``: a kernel is about to run, so nothing
    is compiling on this thread) or the end of the test.

Only the start of the first stretch and the end of the last one are printed (stretches on other threads,
under Triton's asynchronous compile mode, overlap): the test's clock stands still while any is going on.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from typing import Any

from .parse import COMPILE_BEGIN, COMPILE_END

__all__ = ["CompileMarks"]


class CompileMarks:
    """Prints COMPILE_BEGIN/COMPILE_END around Triton's compiles and binary loads in a sanitizer child."""

    def __init__(self, emit: Callable[[str], None]) -> None:
        self.emit = emit
        self.nodeid: str | None = None
        self.depth = 0
        self.problem = ""
        self._lock = threading.Lock()
        self._compiler: Any = None  # the triton.compiler module whose compile is wrapped
        self._original: Any = None
        self._runtime: Any = None  # knobs.runtime, whose hooks are chained

    # ------------------------------------------------------------------ the test
    def start_test(self, nodeid: str) -> None:
        """A test begins: follow Triton if it is imported and not followed yet."""
        with self._lock:
            self.nodeid, self.depth = nodeid, 0
        self.follow()

    def end_test(self) -> None:
        """The test ended (its END line comes next): a stretch left open is over."""
        self._close()
        with self._lock:
            self.nodeid = None

    # ------------------------------------------------------------------ stretches
    def _begin(self, kernel: str, step: str) -> None:
        with self._lock:
            self.depth += 1
            if self.depth > 1:
                return
            payload = json.dumps({"test": self.nodeid, "kernel": kernel, "step": step})
        self.emit(COMPILE_BEGIN + payload)

    def _end(self) -> None:
        with self._lock:
            if self.depth == 0:
                return
            self.depth -= 1
            if self.depth:
                return
            payload = json.dumps({"test": self.nodeid})
        self.emit(COMPILE_END + payload)

    def _close(self) -> None:
        with self._lock:
            if self.depth == 0:
                return
            self.depth = 0
            payload = json.dumps({"test": self.nodeid})
        self.emit(COMPILE_END + payload)

    # ------------------------------------------------------------------ Triton
    def follow(self) -> None:
        """Wrap Triton's compile and chain its load and launch hooks, once, where Triton is imported."""
        if self._compiler is not None or self._runtime is not None or self.problem or "triton" not in sys.modules:
            return
        try:
            import triton.compiler as compiler
            from triton import knobs

            original = compiler.compile
            runtime = knobs.runtime
            hooks = (runtime.kernel_load_start_hook, runtime.kernel_load_end_hook, runtime.launch_enter_hook)
            if not all(hasattr(h, "add") and hasattr(h, "remove") for h in hooks):
                raise AttributeError("knobs.runtime's load and launch hooks cannot be chained")
        except Exception as exc:  # an old Triton: its compiles count as the test's time, as they always did
            self.problem = f"cannot follow Triton's compiles: {type(exc).__name__}: {exc}"
            return
        marks = self

        def compile(src: Any, *args: Any, **kwargs: Any) -> Any:
            if marks._compiler is None:  # taken back (the session is over): a binder kept this reference
                return original(src, *args, **kwargs)
            marks._begin(_kernel_name(src), "compile")
            try:
                return original(src, *args, **kwargs)
            finally:
                marks._end()

        compile.__wrapped__ = original  # type: ignore[attr-defined]
        compiler.compile = compile
        runtime.kernel_load_start_hook.add(self._on_load_start)
        runtime.kernel_load_end_hook.add(self._on_load_end)
        runtime.launch_enter_hook.add(self._on_launch)
        self._compiler, self._original, self._runtime = compiler, original, runtime

    def close(self) -> None:
        """Give Triton back what :meth:`follow` changed (the session is over)."""
        if self._compiler is not None:
            if getattr(self._compiler.compile, "__wrapped__", None) is self._original:
                self._compiler.compile = self._original
            self._compiler = None
        if self._runtime is not None:
            self._runtime.kernel_load_start_hook.remove(self._on_load_start)
            self._runtime.kernel_load_end_hook.remove(self._on_load_end)
            self._runtime.launch_enter_hook.remove(self._on_launch)
            self._runtime = None

    def _on_load_start(self, module: Any, function: Any, name: str, metadata_group: Any, hash: str) -> None:
        try:
            self._begin(str(name), "load")
        except Exception:
            pass  # a load must not fail because of pipecheck

    def _on_load_end(self, module: Any, function: Any, name: str, metadata_group: Any, hash: str) -> None:
        try:
            self._end()
        except Exception:
            pass

    def _on_launch(self, metadata: Any) -> None:
        try:
            self._close()
        except Exception:
            pass


def _kernel_name(src: Any) -> str:
    """The kernel's name from what ``triton.compiler.compile`` was given (an ``ASTSource``, or an IR file)."""
    for candidate in (getattr(src, "name", None), getattr(getattr(src, "fn", None), "__name__", None)):
        if isinstance(candidate, str) and candidate:
            return candidate
    return str(src)[:80] if isinstance(src, str) else "a kernel"
