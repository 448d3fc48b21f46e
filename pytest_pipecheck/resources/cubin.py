"""Resources of CUDA C++ kernels per target architecture, read from the compiler.

Each target is compiled to a cubin (nvcc when present, otherwise NVRTC through NVIDIA's cuda-python)
with ptxas in verbose mode, and its report is parsed kernel by kernel::

    ptxas info    : Compiling entry function '_Z4tmplILi256EEvPfi' for 'sm_90'
    ptxas info    : Function properties for _Z4tmplILi256EEvPfi
        0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
    ptxas info    : Used 10 registers, used 1 barriers, 1024 bytes smem, 364 bytes cmem[0]

The wording differs between toolkit versions and targets (``barriers`` and ``cmem`` come and go,
older versions say ``lmem``), so each comma-separated item is matched on its own and unknown items
are ignored. A cubin without a log (Triton's) is read with ``cuobjdump -res-usage``.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import toolkit
from ..arch import arch_spec
from ..toolkit import Compiled, CompileError, ToolkitError, clear_cache

if TYPE_CHECKING:  # pragma: no cover
    from ..occupancy import Occupancy

__all__ = [
    "CompileError",
    "KernelResources",
    "ResourceError",
    "clear_cache",
    "compile_cubin",
    "compile_resources",
    "demangle",
    "parse_ptxas_log",
    "parse_res_usage",
]

# Resources could not be determined: a missing tool, an unreadable file. The toolkit's error, so that a
# CompileError (the kernel source did not compile) is one too.
ResourceError = ToolkitError


@dataclass(frozen=True)
class KernelResources:
    """What one compiled kernel uses on one architecture.

    ``static_smem`` is ``__shared__`` arrays (ptxas "bytes smem"); ``dynamic_smem`` is known only for
    kernels whose launch fixes it (Triton's ``metadata.shared``), else 0 and given at the launch.
    ``stack_frame`` is the per-thread local memory (stack, spills included). ``barriers`` is None when
    the compiler did not say. ``num_warps`` is set when the kernel fixes its block size (Triton).
    """

    name: str
    mangled: str
    arch: str
    registers: int
    static_smem: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack_frame: int = 0
    barriers: int | None = None
    const_bytes: int | None = None
    dynamic_smem: int = 0
    num_warps: int | None = None
    num_stages: int | None = None
    origin: str = "nvcc"  # nvcc, nvrtc, cuobjdump, triton-aot, triton-live, cupy-live
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def spills(self) -> int:
        """Bytes spilled to local memory (stores plus loads), 0 for a kernel that does not spill. Check
        :attr:`spills_known` first: read from a cubin, the count is not there and this is 0."""
        return self.spill_stores + self.spill_loads

    @property
    def spills_known(self) -> bool:
        """False when the numbers came from the binary, which has no spill count (``cuobjdump -res-usage``,
        Triton ahead of time): then ``spill_stores`` and ``spill_loads`` say nothing, and ``to_json`` and
        ``pipecheck resources`` show them as unknown."""
        return bool(self.extra.get("spills_known", True))

    @property
    def threads(self) -> int | None:
        return None if self.num_warps is None else self.num_warps * 32

    def occupancy(self, threads: int | None = None, dynamic_smem: int | None = None, *,
                  opt_in: bool = True) -> Occupancy:
        """Blocks/SM of this kernel on its architecture with ``threads`` per block.

        ``threads`` defaults to the kernel's own block size (Triton: num_warps * 32) and
        ``dynamic_smem`` to the kernel's own (Triton: metadata.shared). Raises
        :class:`~pytest_pipecheck.occupancy.OccupancyInputError` for bad numbers, and
        :class:`ResourceError` when the block size is unknown.
        """
        from ..occupancy import occupancy

        if threads is None:
            threads = self.threads
            if threads is None:
                raise ResourceError(f"kernel {self.name!r} on {self.arch}: give threads= (block size is "
                                    "set at the launch)")
        dyn = self.dynamic_smem if dynamic_smem is None else dynamic_smem
        barriers = 1 if self.barriers is None else self.barriers
        return occupancy(self.arch, threads, self.registers, self.static_smem, dyn, opt_in=opt_in,
                         barriers=barriers)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "mangled": self.mangled,
            "arch": self.arch,
            "registers": self.registers,
            "static_smem": self.static_smem,
            "dynamic_smem": self.dynamic_smem,
            "spill_stores": self.spill_stores if self.spills_known else None,
            "spill_loads": self.spill_loads if self.spills_known else None,
            "stack_frame": self.stack_frame,
            "barriers": self.barriers,
            "num_warps": self.num_warps,
            "num_stages": self.num_stages,
            "origin": self.origin,
        }


# ----------------------------------------------------------------------------- parsing

_ENTRY = re.compile(r"Compiling entry function\s+'([^']+)'\s+for\s+'([^']+)'")
_PROPS = re.compile(r"Function properties for\s+'?([^'\s:]+)'?")
_ITEM = re.compile(r"(\d+)\s+(.+)")


# what ptxas -v calls each number (a prefix of its words, first match wins) -> our key
_PTXAS_FIELDS = (
    ("register", "registers"),
    ("barrier", "barriers"),
    ("smem", "smem"),
    ("cmem[0]", "cmem"),
    ("lmem", "lmem"),
    ("stack frame", "stack_frame"),
    ("spill store", "spill_stores"),
    ("spill load", "spill_loads"),
    ("cumulative stack", "cumulative_stack"),
)


def _parse_items(text: str) -> dict[str, int]:
    """``"Used 40 registers, used 1 barriers, 8192 bytes smem"`` -> {registers: 40, barriers: 1, smem: 8192}."""
    out: dict[str, int] = {}
    for raw in text.split(","):
        item = raw.strip().lower()
        item = re.sub(r"^used\s+", "", item)
        m = _ITEM.match(item)
        if not m:
            continue
        value, what = int(m.group(1)), m.group(2).strip()
        what = re.sub(r"^bytes\s+", "", what)
        key = next((k for prefix, k in _PTXAS_FIELDS if what.startswith(prefix)), None)
        if key is not None:
            out[key] = value
    return out


def parse_ptxas_log(log: str, *, arch: str | None = None) -> dict[str, dict[str, int]]:
    """Per mangled entry name, the numbers ptxas ``-v`` reported (keys: registers, barriers, smem,
    stack_frame, spill_stores, spill_loads, cmem, lmem). Only entry functions are returned.

    ``arch`` (canonical ``sm_XY``) keeps only entries compiled for that target when the log covers
    several. Lines that do not parse are skipped: the format varies between versions.
    """
    entries: dict[str, dict[str, int]] = {}
    props: dict[str, dict[str, int]] = {}
    current: str | None = None  # the function whose "Used ..." line comes next
    in_props: str | None = None
    entry_names: list[str] = []
    for line in log.splitlines():
        m = _ENTRY.search(line)
        if m:
            name, target = m.group(1), m.group(2)
            in_props = None
            if arch is not None and _base(target) != _base(arch):
                current = None
                continue
            current = name
            entries.setdefault(name, {})
            entry_names.append(name)
            continue
        m = _PROPS.search(line)
        if m:
            in_props = m.group(1)
            continue
        stripped = line.strip()
        if in_props is not None and ("stack frame" in stripped or "spill" in stripped):
            props.setdefault(in_props, {}).update(_parse_items(stripped))
            continue
        if "Used" in line and "register" in line:
            items = _parse_items(line.split(":", 1)[1] if ":" in line else line)
            if current is not None:
                entries[current].update(items)
            in_props = None
    for name in entry_names:
        merged = dict(props.get(name, {}))
        merged.update(entries[name])
        entries[name] = merged
    return entries


def _base(arch: str) -> str:
    m = re.search(r"(\d+)", arch)
    return m.group(1) if m else arch


_RES_FUNC = re.compile(r"^\s*Function\s+([^:\s]+)\s*:")
_RES_KV = re.compile(r"([A-Z_]+(?:\[\d+\])?):(\d+)")


def parse_res_usage(text: str) -> dict[str, dict[str, int]]:
    """``cuobjdump -res-usage`` output -> per mangled function {REG, STACK, SHARED, LOCAL, ...}."""
    out: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in text.splitlines():
        m = _RES_FUNC.match(line)
        if m:
            current = m.group(1)
            out[current] = {}
            continue
        if current is not None:
            pairs = _RES_KV.findall(line)
            if pairs:
                out[current].update({k: int(v) for k, v in pairs})
    return out


# ----------------------------------------------------------------------------- names

_DEMANGLE_CACHE: dict[str, str] = {}


def _strip_signature(demangled: str) -> str:
    """``"void tmpl<256>(float*, int)"`` -> ``"tmpl<256>"``; ``"ns::k(float*)"`` -> ``"ns::k"``."""
    depth = 0
    cut = len(demangled)
    for i, ch in enumerate(demangled):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    head = demangled[:cut].strip()
    # a template function's demangled name starts with its return type: drop what precedes the name
    depth = 0
    for i in range(len(head) - 1, -1, -1):
        ch = head[i]
        if ch == ">":
            depth += 1
        elif ch == "<":
            depth -= 1
        elif ch == " " and depth == 0:
            return head[i + 1:]
    return head


def _mini_demangle(mangled: str) -> str | None:
    """Plain and namespaced functions (``_Z3fooPf``, ``_ZN2ns3fooEv``) without a demangler tool."""
    m = re.match(r"_ZN((?:\d+[A-Za-z_]\w*)+)E", mangled)
    if m:
        parts, rest = [], m.group(1)
        while rest:
            n = re.match(r"(\d+)", rest)
            assert n is not None
            length = int(n.group(1))
            start = len(n.group(1))
            parts.append(rest[start:start + length])
            rest = rest[start + length:]
        return "::".join(parts)
    m = re.match(r"_Z(\d+)", mangled)
    if m:
        length = int(m.group(1))
        start = 2 + len(m.group(1))
        name = mangled[start:start + length]
        if mangled[start + length:start + length + 1] == "I":
            return None  # a template: leave it to a real demangler
        return name
    return None


# cu++filt writes integer template arguments with a cast ("tmpl<(int)256>"), c++filt without one;
# the name as written in source has none
_INT_CAST = re.compile(r"\((?:(?:unsigned|signed|long|short|int|char|bool)\s*)+\)(-?\d+)")


def demangle(mangled: Sequence[str]) -> dict[str, str]:
    """Map each mangled kernel name to its name as written in source, without parameters.

    ``extern "C"`` names stay as they are; C++ names go through ``cu++filt`` or ``c++filt`` when one is
    installed, else a small built-in demangler for non-template names (templates then keep their
    mangled names).
    """
    todo = [n for n in mangled if n.startswith("_Z") and n not in _DEMANGLE_CACHE]
    if todo:
        cufilt = toolkit.find_tool("cu++filt")
        tool = cufilt.path if cufilt is not None else toolkit.which("c++filt") or toolkit.which("llvm-cxxfilt")
        results: list[str] | None = None
        if tool:
            try:
                proc = subprocess.run([tool], input="\n".join(todo) + "\n", capture_output=True, text=True,
                                      timeout=30)
                lines = proc.stdout.splitlines()
                if proc.returncode == 0 and len(lines) == len(todo):
                    results = lines
            except (OSError, subprocess.SubprocessError):
                results = None
        for i, name in enumerate(todo):
            full = results[i] if results is not None else None
            if full and full != name:
                _DEMANGLE_CACHE[name] = _INT_CAST.sub(r"\1", _strip_signature(full))
            else:
                _DEMANGLE_CACHE[name] = _mini_demangle(name) or name
    return {n: _DEMANGLE_CACHE.get(n, n) for n in mangled}


# ----------------------------------------------------------------------------- compiling


def compile_cubin(source: str | os.PathLike[str], arch: str, *, options: Sequence[str] = (),
                  include_dirs: Sequence[str] = (), defines: Mapping[str, str] | None = None) -> bytes:
    """Compile CUDA C++ ``source`` (a .cu path or source text) for ``arch``; return the cubin bytes.

    Uses nvcc when present, else NVRTC. Cached per (source, arch, options). Raises
    :class:`CompileError` with the compiler's output when it does not compile, :class:`ArchError` for
    an unknown architecture, :class:`ResourceError` when no compiler is available.
    """
    return toolkit.compile_cuda(source, arch, options=options, include_dirs=include_dirs, defines=defines).cubin


def compile_resources(source: str | os.PathLike[str], arch: str, *, options: Sequence[str] = (),
                      include_dirs: Sequence[str] = (),
                      defines: Mapping[str, str] | None = None) -> dict[str, KernelResources]:
    """Per-kernel resources of CUDA C++ ``source`` compiled for ``arch``.

    Keys are the kernel names as written in the source, without parameters (``"gemm"``,
    ``"ns::gemm"``, ``"tile<128>"``). Values are :class:`KernelResources` with registers, static
    shared memory, spills, stack frame and barriers as ptxas reported them. Cached per (source hash,
    arch, options). Raises :class:`CompileError` (compiler output and target in the message),
    :class:`ArchError`, or :class:`ResourceError` when no compiler is available or the log names no
    kernel.
    """
    compiled = toolkit.compile_cuda(source, arch, options=options, include_dirs=include_dirs, defines=defines)
    return _resources_from_log(compiled, compiled.target)


def _resources_from_log(compiled: Compiled, target: str) -> dict[str, KernelResources]:
    parsed = parse_ptxas_log(compiled.log, arch=target)
    if not parsed and compiled.cubin:
        # No resource report in the compiler's log (NVRTC 12.9+ left it empty on a hit in its own cache, which
        # the toolkit now turns off: docs/validation/2026-11-27-h200x2-1401.md). Fall back to reading the cubin,
        # and say so: the binary has no spill or barrier counts, which must read as unknown, not as 0 spills.
        note = (f"{compiled.compiler} printed no resource report (ptxas -v); read from the cubin with "
                "cuobjdump -res-usage, which has no spill or barrier counts")
        return {key: dataclasses.replace(r, extra={**r.extra, "compiler": compiled.compiler, "note": note})
                for key, r in resources_from_cubin(compiled.cubin, target).items()}
    names = demangle(list(parsed))
    out: dict[str, KernelResources] = {}
    for mangled, nums in parsed.items():
        key = names[mangled]
        if key in out:  # overloads share a name: keep them apart by the mangled name
            key = mangled
        out[key] = KernelResources(
            name=names[mangled],
            mangled=mangled,
            arch=target,
            registers=nums.get("registers", 0),
            static_smem=nums.get("smem", 0),
            spill_stores=nums.get("spill_stores", 0),
            spill_loads=nums.get("spill_loads", 0),
            stack_frame=nums.get("stack_frame", nums.get("lmem", 0)),
            barriers=nums.get("barriers"),
            const_bytes=nums.get("cmem"),
            origin=compiled.compiler,
        )
    return out


def resources_from_cubin(cubin: bytes, arch: str, *, origin: str = "cuobjdump") -> dict[str, KernelResources]:
    """Per-kernel resources read from cubin bytes with ``cuobjdump -res-usage``.

    On sm_90 and later cuobjdump counts the driver's reserved 1 KB inside SHARED; it is taken out so
    ``static_smem`` means the same as ptxas's "bytes smem". Spill and barrier counts are not in this
    report: ``spills_known`` is False and ``barriers`` None.
    Raises :class:`ResourceError` when cuobjdump is not found or fails.
    """
    target = toolkit.target(arch)
    found = toolkit.find_tool("cuobjdump")
    if found is None:
        raise ResourceError("cuobjdump not found (the CUDA toolkit or the triton wheel provides it; "
                            "or point PIPECHECK_CUOBJDUMP at it)")
    tool = found.path
    with tempfile.TemporaryDirectory(prefix="pipecheck-res-") as tmp:
        f = Path(tmp) / "k.cubin"
        f.write_bytes(cubin)
        try:
            proc = subprocess.run([tool, "-res-usage", str(f)], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as exc:
            raise ResourceError(f"cuobjdump -res-usage failed: {exc}") from None
    if proc.returncode != 0:
        raise ResourceError(f"cuobjdump -res-usage failed (exit {proc.returncode}): {toolkit.trim_log(proc.stderr)}")
    usage = parse_res_usage(proc.stdout)
    reserved = arch_spec(target).smem_reserved_per_block if arch_spec(target).major >= 9 else 0
    names = demangle(list(usage))
    out: dict[str, KernelResources] = {}
    for mangled, nums in usage.items():
        out[names[mangled]] = KernelResources(
            name=names[mangled], mangled=mangled, arch=target, registers=nums.get("REG", 0),
            static_smem=max(0, nums.get("SHARED", 0) - reserved), stack_frame=nums.get("STACK", 0),
            const_bytes=nums.get("CONSTANT[0]"), origin=origin, extra={"spills_known": False},
        )
    return out

