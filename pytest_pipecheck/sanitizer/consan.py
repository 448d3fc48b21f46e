"""Triton's concurrency sanitizer (ConSan), run like a compute-sanitizer tool: ``sanitizer="consan"``.

What ConSan is (read from Triton 3.6.0 and 3.9.0, the GPU machine's and CI's versions)
    A compiler pass. With ``TRITON_INSTRUMENTATION_MODE=consan`` in the environment when Triton is
    imported (the knob ``triton.knobs.compilation.instrumentation_mode``), the NVIDIA backend rewrites
    every kernel it compiles, Triton and Gluon alike: each access to shared or tensor memory, each
    mbarrier wait and arrive, TMA copy, ``cp.async`` group and ``wgmma`` is preceded by a call to a
    helper function (named ``__triton_consan_*``) that tracks which partition may see which write, and
    asserts. The knob also turns on ``debug`` (so the asserts survive) and adds global scratch memory
    (3.6: ``global_scratch_size``; 3.9: ``profile_scratch_size``) for the tracking state.

What a violation does
    A device-side assert whose message names it ("Buffer being accessed has outstanding writes.",
    "Accessing buffer with pending access. Pending access type: ...", "Deadlock detected ...": the list
    is :data:`VIOLATIONS`). The kernel traps, the CUDA context is dead for the rest of the process, and
    the next synchronization raises ("device-side assert triggered"). So it runs in a child process,
    like the compute-sanitizer tools, and the child stops after that test (the context probe of
    ``ChildPlugin``); the tests it never began run in a new child.

Where it applies
    Kernels compiled by Triton for an NVIDIA GPU of compute capability 9.0 or newer. On sm_80 the
    lowering of a pipelined ``tl.dot`` under ConSan aborts the compiler ("LLVM ERROR: Cannot select:
    intrinsic %llvm.nvvm.elect.sync", Triton 3.6 and 3.9), so an older GPU is a skip. CUDA kernels
    (CuPy, NVRTC, nvcc, PyTorch's own) are not instrumented: a test that launches no Triton kernel is a
    skip. A kernel without shared memory, barriers or async copies compiles without any helper: nothing
    to check, also a skip.

Verification
    A misspelled or ignored knob, or a binary reused from a cache, compiles no instrumentation and runs
    clean, so no verdict trusts the knob: the child chains a hook onto Triton's
    ``knobs.runtime.kernel_load_end_hook`` (which gets each loaded kernel's cache files) and
    ``knobs.runtime.launch_enter_hook`` (which gets the CUfunction of each launch). For every kernel a
    test launches it reads the binary that was actually loaded: the cubin must hold ConSan's helper
    functions (their names are symbols of the cubin) and the kernel's metadata must say
    ``instrumentation_mode`` consan. A test passes only when every Triton kernel it launched is
    instrumented and none asserted; a launched kernel without instrumentation is an error.

Cache
    Both versions put ``instrumentation_mode`` into the compile options, so into the cache key of the
    in-memory and the on-disk cache; the children still get a cache directory of their own (one per
    session, shared by every ConSan child of it and by nothing else), so that no binary compiled outside
    ConSan can be loaded, whatever the version, and each kernel is compiled with ConSan once per session
    rather than once per child.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import children
from ..reproduce import shell_line
from ..results import Verdict
from .child_command import BatchSpec
from .child_watch import COMPILE_CAP, ChildGroup, ChildRun, run_child
from .launches import read_metadata_group
from .parse import Segment, split_markers
from .tool_outcomes import TestOutcome, budget_exhausted, hang_summary, no_progress

__all__ = [
    "KNOB_ENV",
    "MIN_CAPABILITY",
    "MODE",
    "RECORD",
    "VIOLATIONS",
    "ConsanRunner",
    "KernelEvidence",
    "Recorder",
    "ensure_scratch_allocator",
    "evidence_from_binary",
    "evidence_from_group",
    "find_violation",
    "parse_records",
    "unavailable_reason",
    "verdict_from_record",
]

#: the environment variable Triton reads (at import) into ``knobs.compilation.instrumentation_mode``
KNOB_ENV = "TRITON_INSTRUMENTATION_MODE"
MODE = "consan"
#: the oldest GPU ConSan compiles for (see the module docstring)
MIN_CAPABILITY = (9, 0)
#: the line a ConSan child prints, before a test's END line, with what the test launched
RECORD = "PIPECHECK-CONSAN "
#: the prefix of the helper functions the ConSan pass calls; their names are symbols of the cubin
_SYMBOL = re.compile(rb"__triton_consan_[A-Za-z0-9_]+")
#: the start of every assert message of ConSan's checks, in Triton 3.6 and 3.9 (read from libtriton.so)
VIOLATIONS = (
    "Buffer being accessed has outstanding writes",
    "Buffer being accessed has outstanding reads",
    "Accessing buffer with pending access",
    "Deadlock detected",
    "Barrier arrive underflow",
    "Barrier invalidated while a thread is waiting",
    "Barrier re-initialized without prior invalidation",
    "Barrier used before initialization or after invalidation",
    "Async shared-memory access is missing fence_async_shared",
)
_OUTPUT_KEEP = 6000


# --------------------------------------------------------------------------- availability


def _capability(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    try:
        major, minor = text.split(".")
        return int(major), int(minor)
    except ValueError:
        return None


def unavailable_reason(compute_capability: str | None) -> str | None:
    """Why ConSan cannot run here (a skip's reason), or None when it can.

    ``compute_capability`` is the GPU's (``"9.0"``). Imports Triton (not torch; no CUDA context)."""
    try:
        import triton
        from triton import knobs
    except Exception as exc:  # ImportError, or a broken install raising at import
        return f"ConSan is part of Triton, and Triton is not importable ({type(exc).__name__}: {exc})"
    version = getattr(triton, "__version__", "?")
    if not hasattr(getattr(knobs, "compilation", None), "instrumentation_mode"):
        return (f"Triton {version} has no instrumentation knob (knobs.compilation.instrumentation_mode, "
                f"{KNOB_ENV}); ConSan needs Triton 3.6 or newer")
    try:
        from triton.backends.nvidia.compiler import CUDAOptions
    except Exception as exc:
        return f"Triton {version} has no NVIDIA backend ({type(exc).__name__}: {exc})"
    if "instrumentation_mode" not in getattr(CUDAOptions, "__dataclass_fields__", {}):
        return f"Triton {version}'s NVIDIA backend has no instrumentation_mode option; ConSan needs Triton 3.6 or newer"
    runtime = getattr(knobs, "runtime", None)
    for hook in ("kernel_load_end_hook", "launch_enter_hook"):
        if not hasattr(getattr(runtime, hook, None), "add"):
            return (f"Triton {version} has no chainable knobs.runtime.{hook}, which pipecheck needs to verify "
                    f"that each launched kernel was instrumented")
    cap = _capability(compute_capability)
    if cap is not None and cap < MIN_CAPABILITY:
        return (f"ConSan needs compute capability {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]} or newer; this GPU is "
                f"{compute_capability} (Triton's ConSan lowering aborts the compiler on sm_80)")
    return None


# --------------------------------------------------------------------------- evidence


def _modes(value: Any) -> set[str]:
    return {m.strip() for m in str(value or "").split(",") if m.strip()}


@dataclass(frozen=True)
class KernelEvidence:
    """What the binary a kernel was loaded from says about ConSan."""

    name: str
    mode: str | None  # the compiled metadata's instrumentation_mode; None: no metadata could be read
    checks: int  # distinct ConSan helper functions in the cubin
    problem: str = ""  # why the binary or its metadata could not be read

    @property
    def compiled_with_consan(self) -> bool:
        return MODE in _modes(self.mode)

    @property
    def instrumented(self) -> bool:
        return self.compiled_with_consan and self.checks > 0 and not self.problem

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "mode": self.mode, "checks": self.checks, "problem": self.problem}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> KernelEvidence:
        return cls(str(data.get("name") or "?"), data.get("mode"), int(data.get("checks") or 0),
                   str(data.get("problem") or ""))


def evidence_from_binary(name: str, metadata: Mapping[str, Any] | None, cubin: bytes | None) -> KernelEvidence:
    """The evidence of one compiled kernel: its metadata (``instrumentation_mode``) and its cubin."""
    problems = []
    if metadata is None:
        problems.append("no compiled metadata")
    if cubin is None:
        problems.append("no cubin")
    mode = None if metadata is None else str(metadata.get("instrumentation_mode", ""))
    checks = len(set(_SYMBOL.findall(cubin))) if cubin is not None else 0
    return KernelEvidence(name, mode, checks, "; ".join(problems))


def evidence_from_group(name: str, metadata_group: Mapping[str, str] | None) -> KernelEvidence:
    """The evidence of a kernel from the files Triton loaded it from (its cache entry: the
    ``metadata_group`` that ``kernel_load_end_hook`` receives, file name -> path)."""
    metadata, files, problems = read_metadata_group(metadata_group, ".cubin")
    ev = evidence_from_binary(name, metadata, files.get(".cubin"))
    if problems:
        ev = KernelEvidence(ev.name, ev.mode, ev.checks, "; ".join(filter(None, [ev.problem, *problems])))
    return ev


# --------------------------------------------------------------------------- child side


class Recorder:
    """In a ConSan child: which kernels each test launched, and whether each was instrumented.

    Chained onto Triton's ``kernel_load_end_hook`` (evidence read once per loaded kernel, from the
    files it was loaded from) and ``launch_enter_hook`` (each launch looked up by its CUfunction)."""

    def __init__(self) -> None:
        import triton
        from triton import knobs

        self.triton = getattr(triton, "__version__", "?")
        self.knob = getattr(getattr(knobs, "compilation", None), "instrumentation_mode", None)
        self.loaded: dict[Any, KernelEvidence] = {}
        self.launched: dict[Any, list[Any]] = {}  # CUfunction -> [evidence, launches]
        self._runtime = knobs.runtime
        knobs.runtime.kernel_load_end_hook.add(self.on_load)
        knobs.runtime.launch_enter_hook.add(self.on_launch)

    def close(self) -> None:
        self._runtime.kernel_load_end_hook.remove(self.on_load)
        self._runtime.launch_enter_hook.remove(self.on_launch)

    def on_load(self, module: Any, function: Any, name: str, metadata_group: Mapping[str, str], hash: str) -> None:
        self.loaded[function] = evidence_from_group(str(name), metadata_group)

    def on_launch(self, metadata: Any) -> None:
        data = getattr(metadata, "data", metadata)  # Triton's LazyDict; never evaluate the user's extras
        name = str(data.get("name", "?")) if isinstance(data, Mapping) else "?"
        function = data.get("function") if isinstance(data, Mapping) else None
        ev = self.loaded.get(function)
        key: Any = function
        if ev is None:
            key = ("unseen", name)
            ev = KernelEvidence(name, None, 0, "launched, but its load was not seen by pipecheck's hook (loaded "
                                               "before the hook was chained): its binary is unverified")
        entry = self.launched.setdefault(key, [ev, 0])
        entry[1] += 1

    def start_test(self) -> None:
        self.launched = {}

    def record(self) -> dict[str, Any]:
        return {"triton": self.triton, "knob": self.knob,
                "kernels": [{**ev.to_json(), "launches": n} for ev, n in self.launched.values()]}


def ensure_scratch_allocator() -> bool:
    """Give Triton a scratch allocator (PyTorch's) where none is set; True when one was installed.

    ConSan keeps its tracking state in scratch memory the launcher allocates per launch. Triton 3.6
    takes it from ``triton.set_allocator`` (``global_scratch_size``), which has no default: without
    one every instrumented launch raises "Kernel requires a runtime memory allocation". Triton 3.9 uses
    profile scratch with a default. A test's own allocator, set earlier or later, wins."""
    try:
        import triton
        from triton.runtime import _allocation
    except Exception:
        return False
    holder = getattr(_allocation, "_allocator", None)
    null = getattr(_allocation, "NullAllocator", None)
    if holder is None or null is None or not isinstance(holder.get(), null):
        return False
    try:
        import torch
    except Exception:
        return False

    def allocate(size: int, alignment: int, stream: Any) -> Any:
        return torch.empty(size, dtype=torch.int8, device="cuda")

    triton.set_allocator(allocate)
    return True


# --------------------------------------------------------------------------- parent side


def parse_records(segment: Segment) -> dict[str, Any] | None:
    """The ConSan record a child printed in a test's segment (the last one), or None."""
    found = None
    for line in segment.lines:
        at = line.find(RECORD)
        if at < 0:
            continue
        _, _, payload = line[at + len(RECORD):].partition(" ")
        try:
            found = json.loads(payload)
        except ValueError:
            found = {"garbled": payload[:200]}
    return found


def find_violation(text: str) -> str | None:
    """The first line of ``text`` that reports a ConSan violation (a device assert with one of
    :data:`VIOLATIONS`), or None."""
    for line in text.splitlines():
        if any(v in line for v in VIOLATIONS):
            return line.strip()
    return None


def verdict_from_record(record: dict[str, Any] | None) -> tuple[Verdict, str, str]:
    """(verdict, summary, reason) of a test that passed in the ConSan child, from what it launched."""
    if record is None:
        return Verdict.ERROR, "inconclusive: no ConSan record", (
            "the child printed no record of the kernels this test launched")
    if "garbled" in record:
        return Verdict.ERROR, "inconclusive: garbled ConSan record", record["garbled"]
    if record.get("problem"):
        return Verdict.ERROR, "inconclusive: the child could not record launches", str(record["problem"])
    kernels = [KernelEvidence.from_json(k) for k in record.get("kernels", [])]
    knob = record.get("knob")
    if not kernels:
        return Verdict.SKIP, "no Triton kernel launched", (
            "ConSan instruments kernels compiled by Triton (Triton and Gluon); this test launched none "
            "(CUDA kernels are checked by racecheck and synccheck)")
    bad = [k for k in kernels if not k.compiled_with_consan or k.problem]
    if bad:
        k = bad[0]
        why = (k.problem if k.problem else
               f"its compiled metadata says instrumentation_mode={k.mode!r}, not {MODE!r}")
        return Verdict.ERROR, f"inconclusive: {k.name} was not compiled with ConSan", (
            f"{why} (the child's knob: {KNOB_ENV}={knob!r}, Triton {record.get('triton')}); a binary compiled "
            f"without ConSan runs clean, so this is not a pass")
    checked = [k for k in kernels if k.instrumented]
    if not checked:
        names = ", ".join(sorted({k.name for k in kernels}))
        return Verdict.SKIP, "nothing for ConSan to check", (
            f"ConSan compiled {names} and inserted no check: no shared or tensor memory, barrier or async copy")
    names = ", ".join(f"{k.name} ({k.checks} ConSan helpers)" for k in checked)
    rest = len(kernels) - len(checked)
    extra = f"; {rest} kernel(s) with nothing to check" if rest else ""
    return Verdict.PASS, f"no violation; instrumented: {names}{extra}", ""


def consan_env(base: Mapping[str, str], cache_dir: str) -> dict[str, str]:
    """The environment of a ConSan child: the knob and a cache of its own."""
    env = dict(base)
    env[KNOB_ENV] = MODE
    env["TRITON_CACHE_DIR"] = cache_dir
    return env


class ConsanRunner:
    """Runs one batch of tests under ConSan in child pytest processes (no compute-sanitizer), with
    the sanitizer's watchdog; one verdict per test (:func:`verdict_from_record`, :func:`find_violation`).

    A test that ends its child (a violation kills the CUDA context, the child stops after it; an
    abort kills the child) keeps its verdict; the tests that child never began run in a new one."""

    tool = MODE

    def __init__(self, *, cwd: str, child_args: Sequence[str], env: Mapping[str, str],
                 timeouts: Mapping[str, float], default_timeout: float = 120.0,
                 progress: Callable[[str], None] | None = None, max_children: int = 64,
                 clock: Callable[[], float] = time.monotonic, cache_dir: str | None = None,
                 compile_cap: float = COMPILE_CAP, group: ChildGroup | None = None,
                 on_line: Callable[[str], None] | None = None) -> None:
        self.cwd = cwd
        self.child_args = list(child_args)
        self.env = dict(env)
        self.timeouts = dict(timeouts)
        self.default_timeout = default_timeout
        self.progress = progress or (lambda _msg: None)
        self.max_children = max_children
        self.clock = clock
        self.children = 0
        self.compile_cap = compile_cap
        self.group = group
        self.on_line = on_line
        # given: the one cache of every ConSan child of the session (its owner removes it); else one per run()
        self.shared_cache = cache_dir
        self.cache_dir: str | None = cache_dir

    def command(self, nodeids: Sequence[str], scope: str = "test") -> list[str]:
        return [*self.child_args, *children.sanitizer(MODE, scope).args(), *nodeids]

    def reproduce_command(self, spec: BatchSpec, nodeid: str) -> str:
        """The command that replays one test under ConSan, as the runner ran it."""
        return shell_line(self.command([nodeid], spec.scope), cwd=self.cwd, env={KNOB_ENV: MODE},
                          fresh_dirs=("TRITON_CACHE_DIR",))

    def run(self, spec: BatchSpec) -> dict[str, TestOutcome]:
        """ConSan verdicts for every test of ``spec``; a cache directory of the run's own is removed afterwards."""
        if self.shared_cache is not None:
            return self._run_tests(spec, list(spec.nodeids))
        self.cache_dir = tempfile.mkdtemp(prefix="pipecheck-consan-cache-")
        try:
            return self._run_tests(spec, list(spec.nodeids))
        finally:
            shutil.rmtree(self.cache_dir, ignore_errors=True)

    def _outcome(self, spec: BatchSpec, nodeid: str, verdict: Verdict, summary: str, **kw: Any) -> TestOutcome:
        out = TestOutcome(nodeid, MODE, verdict, summary, **kw)
        out.command = out.command or self.reproduce_command(spec, nodeid)
        out.output = out.output[-_OUTPUT_KEEP:]
        return out

    def _run_tests(self, spec: BatchSpec, nodeids: list[str]) -> dict[str, TestOutcome]:
        final: dict[str, TestOutcome] = {}
        pending = list(nodeids)
        total = len(nodeids)
        widen: list[str] = []
        while pending:
            if self.children >= self.max_children:
                final.update(budget_exhausted(pending, functools.partial(self._outcome, spec), self.max_children,
                                              "ConSan"))
                break
            self.children += 1
            on_begin = self._progress_hook(total - len(pending), total)
            assert self.cache_dir is not None
            env = consan_env(self.env, self.cache_dir)
            timeouts = dict(self.timeouts)
            idle = max(300.0, 2 * max([self.default_timeout, *timeouts.values()]))
            run = run_child(self.command(pending, spec.scope), cwd=self.cwd, env=env, timeouts=timeouts,
                            default_timeout=self.default_timeout, idle_limit=idle, on_begin=on_begin,
                            clock=self.clock, compile_cap=self.compile_cap, group=self.group, on_line=self.on_line)
            decided, rerun, failed_alone = self._decide(spec, pending, run)
            for n, out in decided.items():
                out.child_wall, out.child_tests = run.wall, len(pending)
                out.seconds = run.test_seconds.get(n)
                out.compile_seconds = run.compile_seconds.get(n)
            final.update(decided)
            widen += failed_alone
            if rerun == pending:  # no progress: never loop forever
                final.update(no_progress(rerun, functools.partial(self._outcome, spec), run))
                break
            pending = rerun
        if widen:
            # a test that failed on its own with sanitizer_scope=launch (its body needs what that scope
            # skips) is run again whole, so the scope never changes a verdict
            self.progress(f"{MODE}: {len(widen)} test(s) failed on their own with sanitizer_scope=launch; "
                          "running them whole")
            whole = BatchSpec(spec.tool, tuple(widen), scope="test")
            final.update(self._run_tests(whole, widen))
        return final

    def _progress_hook(self, done: int, total: int) -> Callable[[str], None]:
        started = self.clock()
        seen = [done]

        def on_begin(nodeid: str) -> None:
            seen[0] += 1
            self.progress(f"{MODE}: test {seen[0]} of {total} ({self.clock() - started:.1f} s) {nodeid}")

        return on_begin

    def _decide(self, spec: BatchSpec, nodeids: list[str], run: ChildRun
                ) -> tuple[dict[str, TestOutcome], list[str], list[str]]:
        """Verdicts this child settles, the tests to run in a new child, and the tests that failed on
        their own with scope ``launch`` (run again whole)."""
        split = split_markers(run.output)
        rc = run.returncode
        ended_early = (run.killed_in is not None or split.open is not None or rc not in (0, 1)
                       or run.poisoned_by is not None)
        # A violation's message is printed by the device through C stdio; whatever the child could not
        # flush before its END line belongs to the test that killed the context (or the one open).
        stray = find_violation(split.outside_text)
        owner = run.poisoned_by or split.open or run.killed_in
        decided: dict[str, TestOutcome] = {}
        rerun: list[str] = []
        failed_alone: list[str] = []
        tail = run.output[-_OUTPUT_KEEP:]
        for n in nodeids:
            seg = split.segments.get(n)
            text = seg.text if seg is not None else ""
            failure = (seg.failure or "") if seg is not None else ""
            violation = find_violation(text + "\n" + failure) or (stray if n == owner else None)
            if run.killed_in == n:
                decided[n] = self._outcome(
                    spec, n, Verdict.FAIL, hang_summary(run), output=text or tail,
                    reason=run.kill_reason + (f"; ConSan reported: {violation}" if violation else ""))
            elif seg is None:
                if ended_early:
                    rerun.append(n)
                else:
                    decided[n] = self._outcome(spec, n, Verdict.ERROR, "inconclusive: did not run in the child",
                                               reason=f"no PIPECHECK-BEGIN for this test (exit status {rc})",
                                               output=tail)
            elif violation:
                decided[n] = self._outcome(spec, n, Verdict.FAIL, f"ConSan violation: {_message(violation)}",
                                           child_outcome=seg.outcome, reason=violation, output=text)
            elif seg.outcome is None:
                crashed = "LLVM ERROR" in text
                decided[n] = self._outcome(
                    spec, n, Verdict.ERROR, "inconclusive: the child died during this test",
                    reason=(f"exit status {rc}, no PIPECHECK-END" + (
                        "; Triton's compiler aborted (LLVM ERROR) while compiling with ConSan" if crashed else
                        "; a ConSan violation prints its message before the process ends, and none was seen")),
                    output=text)
            elif seg.outcome == "failed":
                if spec.scope == "launch":
                    failed_alone.append(n)
                else:
                    decided[n] = self._outcome(
                        spec, n, Verdict.ERROR, "the test failed on its own in the ConSan child (not a ConSan finding)",
                        child_outcome="failed", reason=(seg.failure or "")[-2000:], output=text)
            elif seg.outcome == "skipped":
                decided[n] = self._outcome(spec, n, Verdict.SKIP, "skipped in the child", child_outcome="skipped",
                                           reason=seg.failure or "", output=text)
            else:
                verdict, summary, reason = verdict_from_record(parse_records(seg))
                decided[n] = self._outcome(spec, n, verdict, summary, child_outcome=seg.outcome, reason=reason,
                                           output=text)
        return decided, rerun, failed_alone


def _message(line: str) -> str:
    """The assert's own message out of a device-assert line (``... Assertion `MSG` failed.``)."""
    m = re.search(r"Assertion `(.+?)` failed", line)
    if m:
        return m.group(1)
    for v in VIOLATIONS:
        at = line.find(v)
        if at >= 0:
            return line[at:at + 200]
    return line[:200]
