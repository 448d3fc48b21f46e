"""How a correctness check fails: the message, the recorded result and the exception, the same way for the
launcher form (:mod:`.launch`) and the wrapper form (:mod:`.wrapper`)."""

from __future__ import annotations

import math
import os
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from ..model import tolerance as _tol
from ..model import values as _values
from ..model.shape import Shape
from ..model.spec import KernelSpec
from ..results import CheckResult, PipecheckError, PipecheckFailure, Verdict
from .context import CheckContext

__all__ = ["MAX_ERROR_LINES", "MAX_ERROR_LINE_CHARS", "TRITON_NO_DRIVER", "OutputCheck", "coverage_key",
           "cpu_tier_triton_problem", "error_lines", "fail", "inconclusive", "pct", "raised", "where"]

MAX_ERROR_LINES = 16  # of a kernel's exception message kept in a failure (head and tail)
MAX_ERROR_LINE_CHARS = 240


def where(spec: KernelSpec, shape: Shape, pattern: _values.Pattern | None = None) -> str:
    if pattern is None or pattern.name == "normal":
        return f"{spec.name} at {shape}"
    return f"{spec.name} at {shape} {pattern.id}"


def error_lines(exc: BaseException, max_lines: int = MAX_ERROR_LINES,
                 max_line_chars: int = MAX_ERROR_LINE_CHARS) -> list[str]:
    """The informative part of an exception's message, bounded to ``max_lines`` lines of at most
    ``max_line_chars`` characters.

    A Triton ``CompilationError`` reads ``at 29:17:``, the source lines up to the failing one, a caret,
    then the underlying error (``NameError('a is not defined')``): its first line alone says nothing.
    A long message keeps its first lines and its last ones (where a compiler puts the error), with a
    line saying how many were left out between. A cause (``raise ... from``, or the exception being
    handled) whose text the message does not already contain is added as a last line.
    """
    lines = [ln.rstrip() for ln in str(exc).strip().splitlines() if ln.strip()]
    cause = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    cause_text = str(cause).strip() if cause is not None else ""
    if cause is not None and cause_text not in "\n".join(lines):
        lines.append(f"caused by {type(cause).__name__}: {cause_text.splitlines()[0] if cause_text else ''}")
    if len(lines) > max_lines:
        head = max(1, max_lines // 4)
        tail = max_lines - head - 1
        lines = [*lines[:head], f"... ({len(lines) - head - tail} lines left out) ...", *lines[len(lines) - tail:]]
    return [ln if len(ln) <= max_line_chars else ln[:max_line_chars - 3] + "..." for ln in lines]


#: what Triton says when a compiled kernel is launched where it has no GPU driver (Triton 3.x, 3.6 to 3.9:
#: ``0 active drivers ([]). There should only be one.``; with TRITON_DEFAULT_BACKEND set, ``Backend device
#: '...' is not active.``; with a GPU present but CPU tensors, ``Pointer argument cannot be accessed from
#: Triton (cpu tensor?)``)
TRITON_NO_DRIVER = ("active drivers", "is not active", "(cpu tensor?)")
_AUTOTUNER_BENCHMARK = ("benchmark", "_bench", "do_bench")


def _kernel_name(kernel: Any) -> str:
    """``module.function`` of a Triton kernel (through an Autotuner and its JITFunction to the Python function)."""
    fn = kernel
    for _ in range(4):
        inner = getattr(fn, "fn", None)
        if hasattr(fn, "__code__") or inner is None:
            break
        fn = inner
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(kernel).__name__
    module = getattr(fn, "__module__", None)
    return f"{module}.{name}" if module else str(name)


def _triton_launch(exc: BaseException) -> tuple[list[Any], list[Any]]:
    """The compiled Triton kernels (``triton.runtime.jit.JITFunction``, never an interpreter one) and the
    Autotuners benchmarking (``Autotuner.benchmark`` / ``_bench`` / ``do_bench``) that ``exc`` passed through,
    read from the ``self`` of its traceback's frames."""
    compiled: list[Any] = []
    tuning: list[Any] = []
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        obj = frame.f_locals.get("self")
        kind = type(obj)
        module = getattr(kind, "__module__", "") or ""
        if not module.startswith("triton."):
            continue
        if kind.__name__ == "JITFunction" and module.endswith(".jit") and not any(o is obj for o in compiled):
            compiled.append(obj)
        elif kind.__name__ == "Autotuner" and frame.f_code.co_name in _AUTOTUNER_BENCHMARK:
            if not any(o is obj for o in tuning):
                tuning.append(obj)
            inner = getattr(obj, "fn", None)
            if type(inner).__name__ == "JITFunction" and not any(o is inner for o in compiled):
                compiled.append(inner)
    return compiled, tuning


def cpu_tier_triton_problem(ctx: CheckContext, spec: KernelSpec, exc: BaseException,
                            who: str = "the kernel") -> tuple[str, str] | None:
    """(summary, explanation) when ``exc`` is a Triton launch that cannot work on the CPU tier, not a defect
    of the kernel; None otherwise (and always on the GPU tier).

    Two set-ups end in Triton's bare "0 active drivers" there: a kernel compiled by ``triton.jit``
    because its module was imported before pipecheck set ``TRITON_INTERPRET=1`` (``triton.jit`` reads the
    variable when it decorates: a ``conftest.py`` that imports the kernel library does so before pytest
    configures plugins), and an autotuned kernel launched without a pinned config (the Autotuner
    benchmarks its configs, which needs a GPU). The kernel object says which: a ``JITFunction`` in the
    traceback (the interpreter's is an ``InterpretedFunction``), or an ``Autotuner`` benchmarking.
    """
    if ctx.has_gpu:
        return None
    text = str(exc)
    compiled, tuning = _triton_launch(exc)
    no_driver = any(marker in text for marker in TRITON_NO_DRIVER)
    first = (text.strip().splitlines() or [""])[0]
    if compiled and (no_driver or not tuning):
        names = ", ".join(_kernel_name(k) for k in compiled)
        env = os.environ.get("TRITON_INTERPRET")
        if env not in (None, "1"):
            why = (f"TRITON_INTERPRET={env} is set in the environment, and pipecheck leaves a value it finds alone, "
                   "so triton.jit compiled it")
            todo = "set TRITON_INTERPRET=1 (or unset it) for runs without a GPU"
        else:
            why = ("triton.jit decided to compile it when the kernel was defined, before pipecheck set "
                   "TRITON_INTERPRET=1: its module was imported before pytest configured pipecheck (by a "
                   "conftest.py or a plugin)")
            todo = ("set TRITON_INTERPRET=1 before that import (in the environment of CPU runs, or in the first "
                    "lines of the conftest.py when there is no GPU), or move that import out of the conftest.py "
                    "into the test modules or the tests, which pytest imports after pipecheck is configured")
        return ("inconclusive: a compiled Triton kernel on the CPU tier (imported before TRITON_INTERPRET=1)",
                f"{who} launched the compiled Triton kernel {names} (a triton JITFunction), but this is the CPU "
                f"tier, where Triton kernels run in Triton's interpreter: {why}. Without a GPU driver, Triton "
                f"fails with {type(exc).__name__}: {first}\n    What to do: {todo} (docs/tutorial.md, "
                "\"Without a GPU\"). This is not a verdict on the kernel.")
    if tuning:
        names = ", ".join(_kernel_name(k) for k in tuning)
        configs = len(getattr(tuning[0], "configs", ()) or ())
        if spec.autotune is not None:
            ids = [c.id for c in spec.autotune_configs]
            shown = ", ".join(ids[:4]) + (f", ... ({len(ids)} in all)" if len(ids) > 4 else "")
            todo = (f"pin one: take a `config` argument in the test (one test per config: {shown}) and pass it "
                    f"on, pipecheck.check_kernel({spec.name}, shape, config=config), or pass "
                    f"config={ids[0]!r}" if ids else "pin one with config=")
            what = (f"spec {spec.name!r} is autotuned (autotune={_kernel_name(spec.autotune)}) and was checked "
                    "without a config")
        else:
            todo = ("declare it, KernelSpec(..., autotune=<the kernel>), and pin a config with config= or a "
                    "`config` test argument (or pin one in the launcher with "
                    "pytest_pipecheck.model.autotune.pinned)")
            what = f"{who} launched the autotuned kernel {names} without a pinned config (spec {spec.name!r})"
        return ("inconclusive: an autotuned kernel without a config on the CPU tier",
                f"{what}: Triton's Autotuner benchmarks its {configs} configs on the first launch, which needs a "
                f"GPU, so on the CPU tier it fails with {type(exc).__name__}: {first}\n    What to do: {todo}. "
                "This is not a verdict on the kernel.")
    return None


def raised(ctx: CheckContext, spec: KernelSpec, shape: Shape, exc: Exception, what: str, check: str,
            who: str = "the kernel", pattern: _values.Pattern | None = None) -> NoReturn:
    """Record and raise the PipecheckFailure for ``exc``, raised by ``who`` during ``what``.

    A launch that cannot work on the CPU tier (:func:`cpu_tier_triton_problem`) is not the kernel's fault:
    it is recorded as an ERROR and raised as a PipecheckError that says what happened and what to do, so
    it never reads as a mutant caught.
    """
    __tracebackhide__ = True
    setup = cpu_tier_triton_problem(ctx, spec, exc, who)
    if setup is not None:
        summary, explanation = setup
        message = f"{where(spec, shape, pattern)}: {explanation}\n  reproduce: {ctx.reproduce}"
        inconclusive(ctx, check, spec, summary, message,
                     {"shape": str(shape), "error": f"{type(exc).__name__}: {exc}", "message": message})
    last = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    loc = f" (at {last[0].filename}:{last[0].lineno})" if last else ""
    hint = ""
    if "out of bounds" in str(exc).lower() or "illegal" in str(exc).lower():
        hint = "; an unmasked load or store past an edge?"
    first, *rest = error_lines(exc) or [""]
    message = "\n    ".join([f"{where(spec, shape, pattern)}: {who} raised during {what}: {type(exc).__name__}: "
                             f"{first}{loc}{hint}", *rest])
    # the exception's classes, so that an xfail marker's raises= can tell the failure it declares from others
    raised = [c.__name__ for c in type(exc).__mro__ if c not in (object, BaseException)]
    result = ctx.record(CheckResult(check, Verdict.FAIL, f"kernel raised {type(exc).__name__} at {shape}",
                                   kernel=spec.name, details={"shape": str(shape), "error": message,
                                                              "raised": raised}))
    raise PipecheckFailure(f"{message}\n  reproduce: {ctx.reproduce}", result) from exc


def inconclusive(ctx: CheckContext, check: str, spec: KernelSpec, summary: str, message: str,
                  details: dict[str, Any]) -> NoReturn:
    """Record an ERROR (the check could not reach a verdict) and raise PipecheckError with ``message``.

    The result is recorded, not only raised, so a test that catches the error still fails at its
    end: an inconclusive check must never leave a passing test behind.
    """
    __tracebackhide__ = True
    ctx.record(CheckResult(check, Verdict.ERROR, summary, kernel=spec.name, details=details))
    raise PipecheckError(message)


def fail(ctx: CheckContext, check: str, spec: KernelSpec, summary: str, lines: list[str],
          details: dict[str, Any]) -> None:
    __tracebackhide__ = True
    result = ctx.record(CheckResult(check, Verdict.FAIL, summary, kernel=spec.name, details=details))
    message = "\n  ".join(lines) + f"\n  reproduce: {ctx.reproduce}"
    raise PipecheckFailure(message, result)


def pct(n: int, total: int) -> str:
    return f"{n} of {total} ({100.0 * n / total:.2f}%)" if total else f"{n}"


@dataclass(frozen=True)
class OutputCheck:
    """What coverage found in one compared output: the facts its key number is made of."""

    name: str
    size: int
    #: elements still holding poison
    unwritten: int
    cmp: _tol.Comparison
    tol: _tol.Tolerance
    #: elements written outside it (guard bands, row padding)
    outside: int = 0
    #: NaN or inf expected by a non-finite value pattern and not written
    nonfinite: int = 0


def _err(value: float) -> str:
    return "NaN" if math.isnan(value) else f"{value:.2g}"


def _defects(o: OutputCheck) -> str | None:
    """``c: 17 of 16383 wrong (0.104%), worst err 0.004 vs tol 0.001`` (None when ``o`` has no defect)."""
    parts = []
    wrong = o.unwritten + o.cmp.bad + o.nonfinite
    if wrong:
        share = f"{100.0 * wrong / o.size:.3g}%" if o.size else "all"
        how = [f"{o.unwritten} never written"] if o.unwritten and o.unwritten < wrong else (
            ["never written"] if o.unwritten else [])
        if o.cmp.nan:
            how.append(f"{o.cmp.nan} NaN")
        if o.nonfinite:
            how.append(f"{o.nonfinite} not the NaN/inf expected")
        text = f"{wrong} of {o.size} wrong ({share}{'; ' + ', '.join(how) if how else ''})"
        if o.cmp.bad:
            text += (f", worst err {_err(abs(o.cmp.worst_got - o.cmp.worst_want))} vs tol "
                     f"{o.cmp.worst_allowed:.2g}")
        parts.append(text)
    if o.outside:
        parts.append(f"{o.outside} written outside it")
    return f"{o.name}: {'; '.join(parts)}" if parts else None


def coverage_key(outputs: Sequence[OutputCheck], inputs_written: Sequence[str] = ()) -> str:
    """The key number of a coverage result, the one line the summary shows for it.

    A failure says how many elements of each bad output are wrong out of how many (never written,
    outside the tolerance, NaN) and the worst error against the tolerance at that element; writes
    outside an output or into an input are named. A pass says how close the worst element came to
    its tolerance (``worst err 0.31 of tol``), with the tolerance of that output.
    """
    bad = [d for d in (_defects(o) for o in outputs) if d]
    bad += [f"input {name!r} written" for name in inputs_written]
    if bad:
        return "; ".join(bad)
    if not outputs:
        return "nothing compared"
    closest = max(outputs, key=lambda o: o.cmp.of_tol)
    return f"worst err {closest.cmp.of_tol:.2g} of tol ({closest.tol.short})"
