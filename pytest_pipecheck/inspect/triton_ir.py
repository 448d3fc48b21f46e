"""Triton compiler IR: did the software pipeliner fire, and was warp specialization applied?

Read from a compiled kernel's ``asm`` dict (``ttir``, ``ttgir``; no GPU needed):

* **pipelined**: the TTGIR holds a multi-buffered shared-memory allocation (a ``ttg.local_alloc``
  of rank >= 3 whose leading dimension, the stage ring, is >= 2) and async copies into it
  (``ttg.async_copy_global_to_local`` for cp.async, ``ttng.async_tma_copy_global_to_local`` /
  ``ttng.async_tma_gather`` for TMA). When not, the reason: ``num_stages`` <= 1, no loop, or loads
  left as synchronous ``tt.load`` in the loop, naming the arguments that lack
  ``tt.divisibility`` (an AOT compile without the JIT's specialization hints never pipelines:
  :mod:`pytest_pipecheck.resources.triton` derives them as the JIT does).
* **warp specialized**: the TTGIR holds a ``ttg.warp_specialize`` op (its ``partitionN`` regions
  run in separate warps). Requested means the TTIR loop carries ``tt.warp_specialize``.

Op names were checked against Triton 3.9 output; 3.6 uses the same names for these ops.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from ..results import PipecheckError

__all__ = ["TritonFindings", "analyze_triton", "aot_compile", "triton_asm"]

_ALLOC = re.compile(r"ttg\.local_alloc\b[^\n]*?->\s*!ttg\.memdesc<([0-9x]+)x([a-z]+[0-9]*)\b")
_ASYNC_CP = re.compile(r"\bttg\.async_copy_global_to_local\b")
_TMA_LOAD = re.compile(r"\bttng\.(?:async_tma_copy_global_to_local|async_tma_gather)\b")
_WS_OP = re.compile(r"\bttg\.warp_specialize\b\s*\(")
_PARTITION = re.compile(r"^\s*partition\d+\s*\(", re.MULTILINE)
_LOAD = re.compile(r"=\s*tt\.load\b")
_FOR = re.compile(r"\bscf\.for\b")
_MMA_OPS = re.compile(r"\b(ttng\.warp_group_dot|ttng\.tc_gen5_mma|tt\.dot)\b")
_FUNC = re.compile(r"tt\.func\s+(?:public\s+)?@([\w$.]+)\((.*?)\)\s*(?:attributes|\{)", re.DOTALL)
_ARG = re.compile(r"%([\w$.]+)\s*:\s*(!tt\.ptr<[^>]*>|i\d+|[a-z]+\d*)\s*(\{[^}]*\})?")


@dataclass
class TritonFindings:
    """What the Triton IR says about one compiled kernel. ``to_dict`` is JSON-serialisable."""

    name: str
    arch: str | None
    num_stages: int | None
    num_warps: int | None
    shared: int | None
    loops: int
    buffers: list[str] = field(default_factory=list)  # "3x128x64xf16" for multi-buffered allocs
    async_copies: int = 0
    tma_loads: int = 0
    loop_loads: int = 0
    mma_ops: dict[str, int] = field(default_factory=dict)
    pipelined: bool = False
    pipeline_reason: str = ""
    warp_specialize_requested: bool = False
    warp_specialized: bool = False
    partitions: int = 0
    warp_specialize_reason: str = ""
    missing_divisibility: list[str] = field(default_factory=list)

    @property
    def stages_built(self) -> int:
        """Depth of the deepest shared-memory stage ring (0 when not multi-buffered)."""
        return max((int(b.split("x", 1)[0]) for b in self.buffers), default=0)

    def summary(self) -> str:
        if self.pipelined:
            copies = f"{self.tma_loads} TMA loads" if self.tma_loads else f"{self.async_copies} async copies"
            text = f"pipelined ({self.stages_built}-deep buffers, {copies})"
        else:
            text = f"not pipelined: {self.pipeline_reason}"
        if self.warp_specialize_requested or self.warp_specialized:
            text += (
                f"; warp-specialized ({self.partitions} partitions)"
                if self.warp_specialized
                else f"; not warp-specialized: {self.warp_specialize_reason}"
            )
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "arch": self.arch,
            "num_stages": self.num_stages,
            "num_warps": self.num_warps,
            "shared": self.shared,
            "loops": self.loops,
            "buffers": list(self.buffers),
            "stages_built": self.stages_built,
            "async_copies": self.async_copies,
            "tma_loads": self.tma_loads,
            "loop_loads": self.loop_loads,
            "mma_ops": dict(self.mma_ops),
            "pipelined": self.pipelined,
            "pipeline_reason": self.pipeline_reason,
            "warp_specialize_requested": self.warp_specialize_requested,
            "warp_specialized": self.warp_specialized,
            "partitions": self.partitions,
            "warp_specialize_reason": self.warp_specialize_reason,
            "missing_divisibility": list(self.missing_divisibility),
            "summary": self.summary(),
        }


def triton_asm(compiled: Any) -> dict[str, Any]:
    """The ``asm`` dict of a Triton compiled kernel (or the dict itself); raises PipecheckError otherwise."""
    asm = compiled if isinstance(compiled, dict) else getattr(compiled, "asm", None)
    if not isinstance(asm, dict):
        raise PipecheckError(
            f"{type(compiled).__name__} is not a Triton compiled kernel (it has no .asm dict)"
        )
    if "ttgir" not in asm:
        raise PipecheckError(f"the Triton kernel's asm has no 'ttgir' (it has: {', '.join(sorted(asm))})")
    return asm


def _meta(compiled: Any, key: str) -> Any:
    meta = getattr(compiled, "metadata", None)
    if meta is None:
        return None
    if isinstance(meta, dict):
        return meta.get(key)
    return getattr(meta, key, None)


def _loop_regions(text: str) -> list[str]:
    """Text of each top-level ``scf.for`` region, by brace matching from the op."""
    out = []
    for m in _FOR.finditer(text):
        start = text.find("{", m.end())
        if start < 0:
            continue
        depth, i = 0, start
        while i < len(text):
            c = text[i]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        out.append(text[start : i + 1])
    return out


def _missing_divisibility(ttir: str) -> list[str]:
    m = _FUNC.search(ttir)
    if not m:
        return []
    missing = []
    for am in _ARG.finditer(m.group(2)):
        name, ty, attrs = am.group(1), am.group(2), am.group(3) or ""
        if (ty.startswith("!tt.ptr") or re.fullmatch(r"i(32|64)", ty)) and "tt.divisibility" not in attrs:
            missing.append(name)
    return missing


def analyze_triton(
    compiled: Any,
    *,
    num_stages: int | None = None,
    warp_specialize: bool | None = None,
) -> TritonFindings:
    """Read a Triton compiled kernel's IR (see the module docstring for what is checked).

    ``compiled`` is a ``CompiledKernel`` (from ``triton.compile`` or a JIT launch) or its ``asm``
    dict; ``num_stages`` and ``warp_specialize`` override what the metadata and IR say was asked.
    Raises :class:`PipecheckError` when ``compiled`` has no TTGIR.
    """
    asm = triton_asm(compiled)
    ttgir = str(asm["ttgir"])
    ttir = str(asm.get("ttir", ""))
    fm = _FUNC.search(ttgir)
    name = _meta(compiled, "name") or (fm.group(1) if fm else "kernel")
    target = _meta(compiled, "target")
    arch_num = getattr(target, "arch", None) or _meta(compiled, "arch")
    stages = num_stages if num_stages is not None else _meta(compiled, "num_stages")
    loops = _loop_regions(ttgir)
    findings = TritonFindings(
        name=str(name),
        arch=f"sm_{arch_num}" if arch_num is not None else None,
        num_stages=int(stages) if stages is not None else None,
        num_warps=_meta(compiled, "num_warps"),
        shared=_meta(compiled, "shared"),
        loops=len(_FOR.findall(ttgir)),
    )
    for shape, dtype in _ALLOC.findall(ttgir):
        dims = shape.split("x")
        # rank >= 3 with a leading ring dimension; Nx1xi64 allocations are mbarriers, not buffers
        if len(dims) >= 3 and int(dims[0]) >= 2 and dtype != "i64":
            findings.buffers.append(f"{shape}x{dtype}")
    findings.async_copies = len(_ASYNC_CP.findall(ttgir))
    findings.tma_loads = len(_TMA_LOAD.findall(ttgir))
    findings.loop_loads = sum(len(_LOAD.findall(body)) for body in loops)
    for op in _MMA_OPS.findall(ttgir):
        findings.mma_ops[op] = findings.mma_ops.get(op, 0) + 1
    findings.missing_divisibility = _missing_divisibility(ttir or ttgir)

    has_copies = findings.async_copies + findings.tma_loads > 0
    findings.pipelined = bool(findings.buffers) and has_copies
    if not findings.pipelined:
        if findings.num_stages is not None and findings.num_stages <= 1:
            findings.pipeline_reason = f"num_stages={findings.num_stages}: the software pipeliner is off"
        elif not loops:
            findings.pipeline_reason = "the kernel has no loop (scf.for) to pipeline"
        elif findings.loop_loads and findings.missing_divisibility:
            findings.pipeline_reason = (
                f"the loop's {findings.loop_loads} loads stayed synchronous tt.load; arguments without "
                f"tt.divisibility=16: {', '.join(findings.missing_divisibility)} (the JIT adds it to "
                "16-byte-aligned pointers and integers divisible by 16; an AOT compile must pass the same hints)"
            )
        elif findings.loop_loads:
            findings.pipeline_reason = (
                f"the loop's {findings.loop_loads} loads stayed synchronous tt.load although every argument "
                "carries tt.divisibility (loads too narrow for cp.async, or a pattern the pipeliner rejects)"
            )
        elif has_copies:
            findings.pipeline_reason = "async copies but no multi-buffered shared memory (a single stage)"
        else:
            findings.pipeline_reason = "no global loads in the loop"

    requested = warp_specialize
    if requested is None:
        requested = "tt.warp_specialize" in ttir or "tt.warp_specialize" in ttgir
    findings.warp_specialize_requested = bool(requested)
    findings.warp_specialized = _WS_OP.search(ttgir) is not None
    findings.partitions = len(_PARTITION.findall(ttgir)) + (1 if findings.warp_specialized else 0)
    if not findings.warp_specialized:
        version = _meta(compiled, "triton_version")
        who = f"Triton {version}" if version else "this Triton"
        findings.warp_specialize_reason = (
            f"no ttg.warp_specialize region in the TTGIR: {who} did not partition the loop"
            + (f" for {findings.arch}" if findings.arch else "")
            if findings.warp_specialize_requested
            else "not requested (no tt.warp_specialize on any loop)"
        )
    return findings


# ----------------------------------------------------------------------------- AOT compile

_TORCH_DTYPES = {
    "float16": "fp16",
    "bfloat16": "bf16",
    "float32": "fp32",
    "float64": "fp64",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "bool": "i1",
    "float8_e4m3fn": "fp8e4nv",
    "float8_e5m2": "fp8e5",
}


def _arg_type(name: str, value: Any) -> tuple[str, bool, bool]:
    """(signature type, divisible by 16, equals 1) of one runtime argument, as the JIT sees it."""
    if hasattr(value, "data_ptr") and hasattr(value, "dtype"):
        dt = str(value.dtype).rsplit(".", 1)[-1]
        if dt not in _TORCH_DTYPES:
            raise PipecheckError(f"argument {name!r}: tensor dtype {value.dtype} has no Triton pointer type")
        return f"*{_TORCH_DTYPES[dt]}", value.data_ptr() % 16 == 0, False
    if isinstance(value, bool):
        return "i1", False, False
    if isinstance(value, int):
        ty = "i32" if -(2**31) <= value < 2**31 else "i64"
        return ty, value % 16 == 0, value == 1
    if isinstance(value, float):
        return "fp32", False, False
    raise PipecheckError(f"argument {name!r}: cannot derive a Triton type from {type(value).__name__}")


def _constexpr_indices(fn: Any) -> set[int]:
    """Indices of the ``tl.constexpr`` parameters (JITFunction lists them; an interpreted one does not)."""
    if hasattr(fn, "constexprs"):
        return set(fn.constexprs)
    import inspect as _inspect

    params = _inspect.signature(getattr(fn, "fn", fn)).parameters.values()
    return {i for i, p in enumerate(params) if "constexpr" in str(p.annotation)}


def _interpreting(fn: Any) -> bool:
    """True when this process imported Triton under TRITON_INTERPRET=1 (pipecheck's CPU tier).

    Then every ``@triton.jit`` function, Triton's own ``tl.cdiv`` included, is an interpreter
    object that ``triton.compile`` cannot lower, whatever the variable says now.
    """
    if type(fn).__name__ == "InterpretedFunction":
        return True
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")


@dataclass
class AotKernel:
    """What a child-process compile returns: the ``asm`` dict and the metadata fields pipecheck reads."""

    asm: dict[str, Any]
    metadata: dict[str, Any]


_CHILD = r"""
import importlib.util, json, os, pickle, sys
req = pickle.load(open(sys.argv[1], "rb"))
spec = importlib.util.spec_from_file_location(req["module"], req["file"])
mod = importlib.util.module_from_spec(spec)
sys.modules[req["module"]] = mod
spec.loader.exec_module(mod)
fn = mod
for part in req["qualname"].split("."):
    fn = getattr(fn, part)
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
k = triton.compile(ASTSource(fn, req["signature"], req["constexprs"], req["attrs"]),
                   target=GPUTarget("cuda", req["arch"], 32), options=req["options"])
meta = {n: getattr(k.metadata, n, None) for n in ("name", "num_stages", "num_warps", "shared")}
meta["arch"] = req["arch"]
meta["triton_version"] = triton.__version__
pickle.dump({"asm": dict(k.asm), "metadata": meta}, open(sys.argv[2], "wb"))
"""


def _compile_in_child(
    fn: Any,
    signature: dict[str, str],
    constexprs: dict[str, Any],
    attrs: dict[tuple[int, ...], list[list[Any]]],
    arch: int,
    options: dict[str, Any],
) -> AotKernel:
    import inspect as _inspect
    import pickle
    import subprocess
    import sys
    import tempfile

    pyfn = getattr(fn, "fn", fn)
    file = _inspect.getsourcefile(pyfn)
    if file is None:
        raise PipecheckError(
            f"cannot find the source file of {pyfn.__name__} to compile it in a child process"
        )
    for k, v in constexprs.items():
        if not isinstance(v, (int, float, bool, str, type(None))):
            raise PipecheckError(
                f"constexpr {k}={v!r} cannot be sent to the compile process under TRITON_INTERPRET=1; "
                "pass a plain number, bool or string"
            )
    req = {
        "module": f"_pipecheck_aot_{pyfn.__module__.replace('.', '_')}",
        "file": file,
        "qualname": pyfn.__qualname__,
        "signature": signature,
        "constexprs": constexprs,
        "attrs": attrs,
        "arch": arch,
        "options": options,
    }
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    with tempfile.TemporaryDirectory(prefix="pipecheck-aot-") as tmp:
        req_file, out_file = os.path.join(tmp, "req.pkl"), os.path.join(tmp, "out.pkl")
        with open(req_file, "wb") as fh:
            pickle.dump(req, fh)
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, req_file, out_file],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
            check=False,
        )
        if proc.returncode != 0:
            lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
            last = lines[-1] if lines else f"exit status {proc.returncode}"
            raise PipecheckError(f"triton.compile of {pyfn.__name__} for sm_{arch} failed: {last}")
        with open(out_file, "rb") as fh:
            data = pickle.load(fh)
    return AotKernel(asm=data["asm"], metadata=data["metadata"])


def aot_compile(fn: Any, args: tuple[Any, ...] | list[Any], *, arch: str = "sm_90", **options: Any) -> Any:
    """Compile a ``@triton.jit`` function for ``arch`` without a GPU, specialized like the JIT would.

    ``args`` are the launch arguments in order (tensors may live on the CPU; only their dtype and
    data pointer alignment matter); ``options`` go to ``triton.compile`` (``num_warps``,
    ``num_stages``...). Pointers 16-byte aligned and integers divisible by 16 get
    ``tt.divisibility=16``; integers equal to 1 become constants, as in the JIT.
    Raises :class:`PipecheckError` for arguments it cannot type or a failing compile.
    """
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise PipecheckError(f"compiling a Triton kernel needs triton: {exc}") from None
    m = re.fullmatch(r"sm_(\d+)[af]?", arch)
    if not m:
        raise PipecheckError(f"arch {arch!r} is not an architecture name (expected e.g. sm_90)")
    names = list(getattr(fn, "arg_names", []))
    if not names:
        raise PipecheckError(f"{fn!r} is not a @triton.jit function")
    if len(args) != len(names):
        raise PipecheckError(
            f"{fn.__name__} takes {len(names)} arguments ({', '.join(names)}), got {len(args)}"
        )
    constexpr_idx = _constexpr_indices(fn)
    signature: dict[str, str] = {}
    constexprs: dict[str, Any] = {}
    attrs: dict[tuple[int, ...], list[list[Any]]] = {}
    for i, (name, value) in enumerate(zip(names, args)):
        param = fn.params[i] if hasattr(fn, "params") else None  # absent when interpreted
        if i in constexpr_idx:
            signature[name] = "constexpr"
            constexprs[name] = value
            continue
        ty, div16, one = _arg_type(name, value)
        no_spec = bool(getattr(param, "do_not_specialize", False))
        if one and not no_spec:
            signature[name] = "constexpr"
            constexprs[name] = 1
            continue
        signature[name] = ty
        if div16 and not no_spec and not ty.startswith(("fp", "i1")):
            attrs[(i,)] = [["tt.divisibility", 16]]
    if _interpreting(fn):
        return _compile_in_child(fn, signature, constexprs, attrs, int(m.group(1)), options)
    try:
        return triton.compile(
            ASTSource(fn, signature, constexprs, attrs),
            target=GPUTarget("cuda", int(m.group(1)), 32),
            options=options,
        )
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PipecheckError(f"triton.compile of {fn.__name__} for {arch} failed: {first}") from exc
