"""The ``inspect`` check: assert what the compiled code of a kernel contains.

``pipecheck.check_sass(target, expect=...)`` compiles or loads ``target``, disassembles it, reads
the Triton IR when there is one, and compares the findings with ``expect``. Without a GPU.

Targets:
    a ``.cu`` path (compiled with nvcc for each ``arch``, ``defines=`` / ``include_dirs=`` /
    ``options=`` passed on), a ``.cubin`` path or cubin ``bytes``, a Triton compiled kernel
    (``triton.compile`` result or a JIT launch's return value), or a ``@triton.jit`` function with
    ``args=(...)`` (AOT-compiled for each ``arch`` with the JIT's specialization; ``num_warps=``,
    ``num_stages=`` and other compile options passed on).

Expectations (``expect``), a dict, a preset name, or a list of both:
    ``async_copies``  True/False, or the kind that must appear: "LDGSTS"/"cp.async",
                      "UTMALDG"/"TMA", "UBLKCP"/"bulk"
    ``overlap``       True/False: an async copy in flight while matrix instructions issue
                      (definition: :mod:`pytest_pipecheck.inspect.analysis`)
    ``overlap_strict`` True/False: the stricter same-iteration, no-BAR.SYNC reading
    ``mma``           "HMMA", "HGMMA", "QGMMA"... (must appear), True (any matrix instruction),
                      False or "none" (none at all)
    ``spills``        True/False (ptxas spill bytes when compiled here, else LDL/STL)
    ``local_memory``  True/False: any LDL/STL
    ``pipelined``     True/False: Triton's software pipeliner fired (Triton targets only)
    ``warp_specialized`` True/False: Triton IR partitions, or (CUDA) producer/consumer loops
    Presets: "pipelined" = async copies + overlap (+ IR pipelined for Triton), "warp_specialized",
    "no_spills". A value may be a dict keyed by architecture (``{"sm_80": "HMMA", "sm_90": "HGMMA"}``)
    to state a per-architecture expectation; architectures it does not name are not checked.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..results import CheckResult, PipecheckError, PipecheckFailure, Verdict

if TYPE_CHECKING:  # pragma: no cover
    from ..inspect.analysis import KernelFindings
    from ..inspect.triton_ir import TritonFindings
    from .context import CheckContext

__all__ = ["EXPECT_KEYS", "PRESETS", "check_sass", "normalize_expect"]

EXPECT_KEYS = (
    "async_copies",
    "overlap",
    "overlap_strict",
    "mma",
    "spills",
    "local_memory",
    "pipelined",
    "warp_specialized",
)
PRESETS: dict[str, dict[str, Any]] = {
    "pipelined": {"async_copies": True, "overlap": True, "pipelined": True},
    "warp_specialized": {"async_copies": True, "warp_specialized": True},
    "no_spills": {"spills": False},
}
_COPY_ALIASES = {
    "LDGSTS": "LDGSTS",
    "CP.ASYNC": "LDGSTS",
    "CPASYNC": "LDGSTS",
    "UTMALDG": "UTMALDG",
    "TMA": "UTMALDG",
    "UBLKCP": "UBLKCP",
    "BULK": "UBLKCP",
}


def normalize_expect(expect: Any) -> dict[str, Any]:
    """Merge presets and dicts into one expectation dict; raises PipecheckError naming a bad entry."""
    if expect is None:
        raise PipecheckError(
            f"check_sass needs expect=..., e.g. 'pipelined' or {{'overlap': True}}; keys: "
            f"{', '.join(EXPECT_KEYS)}"
        )
    items = expect if isinstance(expect, (list, tuple)) else [expect]
    out: dict[str, Any] = {}
    for item in items:
        if isinstance(item, str):
            if item not in PRESETS:
                raise PipecheckError(f"expect={item!r} is not a preset; presets: {', '.join(PRESETS)}")
            out.update(PRESETS[item])
        elif isinstance(item, dict):
            for key in item:
                if key not in EXPECT_KEYS:
                    raise PipecheckError(
                        f"expect key {key!r} is unknown; known keys: {', '.join(EXPECT_KEYS)}"
                    )
            out.update(item)
        else:
            raise PipecheckError(
                f"expect={item!r} must be a preset name or a dict of {', '.join(EXPECT_KEYS)}"
            )
    return out


def _for_arch(value: Any, arch: str | None) -> tuple[bool, Any]:
    """(applies, value) of an expectation for ``arch``: per-arch dicts pick their entry."""
    if isinstance(value, dict):
        if arch is None:
            return False, None
        base = arch.rstrip("af")
        for key in (arch, base):
            if key in value:
                return True, value[key]
        return False, None
    return True, value


def _yn(flag: bool) -> str:
    return "yes" if flag else "no"


def _compare(findings: KernelFindings, ir: TritonFindings | None, expect: dict[str, Any]) -> list[str]:
    """Each unmet expectation as "expected X, found Y (why)"; [] when all hold."""
    problems: list[str] = []
    arch = findings.arch
    for key, raw in expect.items():
        applies, want = _for_arch(raw, arch)
        if not applies:
            continue
        if key == "async_copies":
            if isinstance(want, str):
                kind = _COPY_ALIASES.get(want.upper())
                if kind is None:
                    raise PipecheckError(
                        f"expect async_copies={want!r}: known kinds {', '.join(_COPY_ALIASES)}"
                    )
                if kind not in findings.async_copies:
                    problems.append(f"expected {kind} async copies, found {_copies(findings)}")
            elif bool(want) != findings.has_async_copies:
                problems.append(f"expected async copies {_yn(bool(want))}, found {_copies(findings)}")
        elif key == "overlap":
            if bool(want) != findings.overlap:
                problems.append(
                    f"expected overlap {_yn(bool(want))}, found overlap {_yn(findings.overlap)} "
                    f"({findings.overlap_reason})"
                )
        elif key == "overlap_strict":
            if bool(want) != findings.overlap_strict:
                problems.append(
                    f"expected strict overlap {_yn(bool(want))}, found {_yn(findings.overlap_strict)}"
                )
        elif key == "mma":
            found = sorted(findings.mma) or ["none"]
            if isinstance(want, str) and want.lower() != "none":
                if want.upper() not in findings.mma:
                    extra = (
                        f" (only {', '.join(sorted(findings.fma))})"
                        if not findings.mma and findings.fma
                        else ""
                    )
                    problems.append(f"expected {want.upper()}, found {', '.join(found)}{extra}")
            else:
                expect_any = bool(want) and not (isinstance(want, str) and want.lower() == "none")
                if expect_any != bool(findings.mma):
                    problems.append(
                        f"expected matrix instructions {_yn(expect_any)}, found {', '.join(found)}"
                    )
        elif key == "spills":
            if bool(want) != findings.spills:
                problems.append(f"expected spills {_yn(bool(want))}, found {findings.spill_text()}")
        elif key == "local_memory":
            has = findings.local_loads + findings.local_stores > 0
            if bool(want) != has:
                problems.append(
                    f"expected local memory {_yn(bool(want))}, found LDL x{findings.local_loads}, "
                    f"STL x{findings.local_stores}"
                )
        elif key == "pipelined":
            if ir is not None and bool(want) != ir.pipelined:
                why = ir.pipeline_reason if not ir.pipelined else ir.summary()
                problems.append(
                    f"expected Triton pipelined {_yn(bool(want))}, found {_yn(ir.pipelined)} ({why})"
                )
        elif key == "warp_specialized":
            if ir is not None:
                if bool(want) != ir.warp_specialized:
                    why = ir.warp_specialize_reason or f"{ir.partitions} partitions"
                    problems.append(
                        f"expected warp specialization {_yn(bool(want))}, found "
                        f"{_yn(ir.warp_specialized)} ({why})"
                    )
            else:
                ws = findings.overlap_mode == "warp-specialized"
                if bool(want) != ws:
                    problems.append(
                        f"expected warp-specialized producer/consumer loops {_yn(bool(want))}, "
                        f"found {_yn(ws)}"
                    )
    return problems


def _copies(findings: KernelFindings) -> str:
    return ", ".join(f"{k} x{v}" for k, v in sorted(findings.async_copies.items())) or "no async copies"


# ----------------------------------------------------------------------------- targets


def _archs(arch: str | Sequence[str] | None, ctx: CheckContext) -> list[str]:
    from ..arch import parse_arch_list

    return list(parse_arch_list(ctx.config.arch if arch is None else arch, where="check_sass(arch=...)"))


def _cuda_arch(arch: str) -> str:
    # wgmma and setmaxnreg exist only on the arch-specific targets; inspecting sm_90 code means sm_90a.
    return "sm_90a" if arch == "sm_90" else arch


def _collect(
    ctx: CheckContext, target: Any, arch: str | Sequence[str] | None, kernel: str | None, kw: dict[str, Any]
) -> list[tuple[str, KernelFindings, TritonFindings | None]]:
    from ..inspect import inspect_cu, inspect_cubin
    from ..inspect.triton_ir import analyze_triton, aot_compile

    out: list[tuple[str, KernelFindings, TritonFindings | None]] = []
    if isinstance(target, (bytes, bytearray)):
        for f in inspect_cubin(bytes(target), kernel=kernel):
            out.append((f.arch or "?", f, None))
        return out
    if isinstance(target, (str, os.PathLike)):
        path = Path(target)
        if path.suffix == ".cubin":
            if not path.is_file():
                raise PipecheckError(f"cubin {path} does not exist")
            for f in inspect_cubin(path, kernel=kernel):
                out.append((f.arch or "?", f, None))
            return out
        if path.suffix in (".cu", ".cuh"):
            opts = {k: kw.pop(k) for k in ("defines", "include_dirs", "options") if k in kw}
            if kw:
                raise PipecheckError(
                    f"check_sass on {path.name}: unexpected arguments {', '.join(sorted(kw))}"
                )
            for a in _archs(arch, ctx):
                for f in inspect_cu(path, _cuda_arch(a), kernel=kernel, **opts):
                    out.append((a, f, None))
            return out
        raise PipecheckError(f"check_sass target {str(target)!r} must be a .cu or .cubin file")
    compiled_list: list[tuple[str, Any]] = []
    if hasattr(target, "arg_names") and hasattr(target, "fn"):  # a @triton.jit function
        args = kw.pop("args", None)
        if args is None:
            raise PipecheckError(
                f"check_sass on Triton function {target.__name__}: pass args=(...) to compile it"
            )
        for a in _archs(arch, ctx):
            compiled_list.append((a, aot_compile(target, tuple(args), arch=a, **kw)))
    elif isinstance(getattr(target, "asm", None), dict):
        if kw:
            raise PipecheckError(
                f"check_sass on a compiled Triton kernel: unexpected arguments {', '.join(sorted(kw))}"
            )
        compiled_list.append(("", target))
    else:
        raise PipecheckError(
            f"check_sass target of type {type(target).__name__} is not a .cu/.cubin path, cubin bytes, "
            "a Triton compiled kernel or a @triton.jit function"
        )
    for a, compiled in compiled_list:
        cubin = compiled.asm.get("cubin")
        if not cubin:
            raise PipecheckError("the Triton kernel's asm has no 'cubin'")
        ir = analyze_triton(compiled)
        for f in inspect_cubin(cubin, name=f"{ir.name} ({ir.arch or a})", kernel=kernel):
            out.append((a or f.arch or "?", f, ir))
    return out


def check_sass(
    ctx: CheckContext,
    target: Any,
    *,
    expect: Any,
    arch: str | Sequence[str] | None = None,
    kernel: str | None = None,
    **kw: Any,
) -> CheckResult:
    """Check the compiled code of ``target`` against ``expect`` (see the module docstring).

    Records one CheckResult (check "inspect") on ``ctx``. Raises :class:`PipecheckFailure` listing
    what was found instead and the relevant SASS lines when an expectation fails,
    :class:`PipecheckError` for bad input (unknown expectation, missing file, failing compile), and
    skips the test, with the package to install, when no disassembler is available.
    """
    __tracebackhide__ = True
    from ..inspect import DisassemblerNotFound

    wanted = normalize_expect(expect)
    label = kernel or ctx.config.kernel
    try:
        found = _collect(ctx, target, arch, kernel, dict(kw))
    except DisassemblerNotFound as exc:
        ctx.skip_check("inspect", str(exc), kernel=label)
        pytest.skip(f"inspect: {exc}")
    except PipecheckError as exc:
        ctx.record(CheckResult("inspect", Verdict.ERROR, str(exc), kernel=label, details={"error": str(exc)}))
        raise
    failures: list[str] = []
    details: dict[str, Any] = {"expect": _jsonable(wanted), "kernels": []}
    lines: list[str] = []
    for a, findings, ir in found:
        entry = {"arch": a, "sass": findings.to_dict(), "triton": ir.to_dict() if ir else None}
        details["kernels"].append(entry)
        lines.append(f"{a} {findings.name}: {findings.summary()}" + (f"; {ir.summary()}" if ir else ""))
        problems = _compare(findings, ir, wanted)
        if problems:
            block = [f"{a} {findings.name}:"] + [f"  {p}" for p in problems]
            block.append(f"  found: {findings.summary()}" + (f"; IR: {ir.summary()}" if ir else ""))
            if findings.evidence:
                block.append("  relevant SASS:")
                block += [f"    {ln}" for ln in findings.evidence[:16]]
            failures.append("\n".join(block))
    summary = "; ".join(lines) if len(lines) > 1 else (lines[0].split(": ", 1)[1] if lines else "no kernels")
    name = label or (found[0][1].name if found else None)
    if failures:
        result = ctx.record(CheckResult("inspect", Verdict.FAIL, summary, kernel=name, details=details))
        raise PipecheckFailure(
            "inspect: compiled code does not match expectations\n" + "\n".join(failures), result
        )
    return ctx.record(CheckResult("inspect", Verdict.PASS, summary, kernel=name, details=details))


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)
