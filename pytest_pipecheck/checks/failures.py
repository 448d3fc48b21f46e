"""How a correctness check fails: the message, the recorded result and the exception, the same way for the
launcher form (:mod:`.coverage`) and the wrapper form (:mod:`.wrapper`)."""

from __future__ import annotations

import math
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from ..model import tolerance as _tol
from ..model import values as _values
from ..model.spec import KernelSpec, Shape
from ..results import CheckResult, PipecheckError, PipecheckFailure, Verdict
from .context import CheckContext

__all__ = ["MAX_ERROR_LINES", "MAX_ERROR_LINE_CHARS", "OutputCheck", "coverage_key", "error_lines", "fail",
           "inconclusive", "pct", "raised", "where"]

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


def raised(ctx: CheckContext, spec: KernelSpec, shape: Shape, exc: Exception, what: str, check: str,
            who: str = "the kernel", pattern: _values.Pattern | None = None) -> NoReturn:
    """Record and raise the PipecheckFailure for ``exc``, raised by ``who`` during ``what``."""
    __tracebackhide__ = True
    last = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    loc = f" (at {last[0].filename}:{last[0].lineno})" if last else ""
    hint = ""
    if "out of bounds" in str(exc).lower() or "illegal" in str(exc).lower():
        hint = "; an unmasked load or store past an edge?"
    first, *rest = error_lines(exc) or [""]
    message = "\n    ".join([f"{where(spec, shape, pattern)}: {who} raised during {what}: {type(exc).__name__}: "
                             f"{first}{loc}{hint}", *rest])
    result = ctx.record(CheckResult(check, Verdict.FAIL, f"kernel raised {type(exc).__name__} at {shape}",
                                   kernel=spec.name, details={"shape": str(shape), "error": message}))
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
