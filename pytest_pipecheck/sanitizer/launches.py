"""Which Triton kernels each test launched in a compute-sanitizer child, and what their compiled
metadata and IR say about them: the facts a known-false-positive rule (:mod:`.known`) needs before it
may call a record Triton's own code rather than the user's.

Child side
    :class:`Recorder` chains onto Triton's ``knobs.runtime.kernel_load_end_hook`` (which gets the cache
    files a kernel was loaded from: its metadata JSON and its IR) and ``launch_enter_hook`` (which gets
    the CUfunction of each launch), as the ConSan recorder does. The first launch of each kernel in a
    test prints one :data:`.parse.LAUNCH` line with the kernel's :class:`KernelFacts` (JSON) to fd 1,
    inside the test's BEGIN/END lines, when the launch happens: a test whose child dies in it (a
    synccheck report that ends the kernel) still has the facts of what it launched.

    The hooks are chained at the start of the first test that finds Triton imported (the test modules
    are imported by then): the child imports nothing for a suite that has no Triton. A kernel loaded
    before that has no facts, and no rule that needs them applies to it.

Parent side
    :func:`kernel_facts` reads them back from the test's segment of the child's output.

What is read, and why it can be trusted
    Warp specialization: the TTGIR (the ``.ttgir`` cache file) holds a ``ttg.warp_specialize`` op. Triton
    creates it for ``tl.range(..., warp_specialize=True)`` loops it partitioned and for Gluon's
    ``gl.warp_specialize``; its LLVM lowering (the dispatch loop at kernel entry and the dispatch state)
    exists only where the op does. A kernel without a readable TTGIR is "unknown", never "yes".

    The dispatch state: the lowering keeps one byte per worker warp in shared memory, where Triton's
    allocator put it (the last bytes of the Gluon GEMM of the evidence, not of every kernel). Its offset
    is read from the kernel's LLVM IR (the ``.llir`` cache file): the lowering's dispatch loop switches on
    the state byte, and the last state of that switch (every worker warp: return) is what the default
    partition stores into each state byte, one constant ``store i8`` to each, before the kernel returns.
    The worker warps are the block's warps (metadata ``num_warps``, which warp specialization raises to
    the total) less the default partition's (the TTGIR module's ``"ttg.num-warps"``). Where the stores
    are not exactly one run of that many bytes, the offset is unknown.

    The kernel's ``def`` line: the location of the ``tt.func`` in the TTGIR, where the code Triton
    generates for the kernel as a whole (the dispatch loop among it) is attributed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .parse import LAUNCH, Segment

__all__ = ["KernelFacts", "Recorder", "facts_from_group", "facts_from_ir", "kernel_facts", "read_metadata_group"]

#: the op itself (custom or generic form), not ``ttg.warp_specialize.partitions`` nor a loop attribute
_WS_OP = re.compile(r'(?<![\w."])"?ttg\.warp_specialize"?\(')
_NUM_WARPS = re.compile(r'"ttg\.num-warps"\s*=\s*(\d+)')
_ALIAS = re.compile(r'^#(loc\d*)\s*=\s*loc\("((?:[^"\\]|\\.)*)":(\d+):\d+\)', re.M)
_INLINE_LOC = re.compile(r'loc\("((?:[^"\\]|\\.)*)":(\d+):\d+\)')
_ALIAS_REF = re.compile(r'\(#(loc\d*)\)')
_SWITCH_I8 = re.compile(r"^\s*switch i8 %[\w.]+, label %[\w.]+ \[(?P<cases>[^\]]*)\]", re.M)
_CASE = re.compile(r"\bi8 (-?\d+), label")
_STORE_I8 = re.compile(r"^\s*store i8 (?P<value>-?\d+), ptr addrspace\(3\) (?:getelementptr (?:inbounds )?"
                       r"\(i8, ptr addrspace\(3\) @global_smem, i(?:32|64) (?P<offset>\d+)\)|@global_smem),", re.M)


@dataclass(frozen=True)
class KernelFacts:
    """What one loaded Triton kernel's cache files say. None where they did not say it."""

    name: str
    warp_specialized: bool | None = None
    shared: int | None = None  # bytes of the kernel's (dynamic) shared memory, metadata "shared"
    num_warps: int | None = None  # warps of the block, worker warps included (metadata "num_warps")
    default_warps: int | None = None  # warps of the default partition (TTGIR "ttg.num-warps")
    def_file: str | None = None  # where the kernel's def is, from the TTGIR's location of the tt.func
    def_line: int | None = None
    dispatch_offset: int | None = None  # where the dispatch state starts in shared memory, from the LLVM IR
    problem: str = ""  # why something could not be read

    @property
    def workers(self) -> int | None:
        """The worker warps of a warp-specialized kernel (one dispatch state byte each)."""
        if not self.warp_specialized or self.num_warps is None or self.default_warps is None:
            return None
        n = self.num_warps - self.default_warps
        return n if n > 0 else None

    @property
    def dispatch_state(self) -> tuple[int, int] | None:
        """[start, end) offsets, in the kernel's shared memory, of the warp-specialize dispatch state; None
        unless the kernel is warp-specialized and its IR says where the state is."""
        workers = self.workers
        if workers is None or self.dispatch_offset is None or self.shared is None:
            return None
        end = self.dispatch_offset + workers
        return (self.dispatch_offset, end) if end <= self.shared else None

    def defined_at(self, file: str | None, line: int | None) -> bool:
        """Whether ``file:line`` (as compute-sanitizer names it: the file's base name) is this kernel's def line."""
        if not file or line is None or self.def_file is None or self.def_line is None:
            return False
        return os.path.basename(file) == os.path.basename(self.def_file) and line == self.def_line

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "warp_specialized": self.warp_specialized, "shared": self.shared,
                "num_warps": self.num_warps, "default_warps": self.default_warps, "def_file": self.def_file,
                "def_line": self.def_line, "dispatch_offset": self.dispatch_offset, "problem": self.problem}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> KernelFacts:
        def num(key: str) -> int | None:
            value = data.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        ws = data.get("warp_specialized")
        def_file = data.get("def_file")
        return cls(str(data.get("name") or "?"), ws if isinstance(ws, bool) else None, num("shared"),
                   num("num_warps"), num("default_warps"), def_file if isinstance(def_file, str) else None,
                   num("def_line"), num("dispatch_offset"), str(data.get("problem") or ""))


def _def_location(name: str, ttgir: str) -> tuple[str | None, int | None]:
    """The file and line of ``tt.func public @name`` in a TTGIR: its own location, which the printer
    writes as an alias (``#loc``) named by the function's arguments, or inline."""
    m = re.search(rf'^\s*tt\.func\s+public\s+@{re.escape(name)}\((.*)$', ttgir, re.M)
    if m is None:
        return None, None
    line = m.group(1)
    ref = _ALIAS_REF.search(line)
    if ref is not None:
        for alias in _ALIAS.finditer(ttgir):
            if alias.group(1) == ref.group(1):
                return alias.group(2), int(alias.group(3))
        return None, None
    inline = _INLINE_LOC.search(line)
    if inline is not None:
        return inline.group(1), int(inline.group(2))
    return None, None


def _function(llir: str, name: str) -> str | None:
    """The body of ``define ... @name(`` in an LLVM IR module."""
    m = re.search(rf"^define [^\n]*@{re.escape(name)}\(", llir, re.M)
    if m is None:
        return None
    end = llir.find("\n}", m.end())
    return llir[m.start():] if end < 0 else llir[m.start():end]


def _dispatch_offset(llir: str, name: str, workers: int) -> int | None:
    """Where the dispatch state starts, from the kernel's LLVM IR: the offsets of the constant ``store i8``
    of the dispatch switch's last state (the exit the default partition stores before returning) must
    form one run of ``workers`` bytes (repeated once per return at most); otherwise unknown."""
    body = _function(llir, name)
    if body is None:
        return None
    switch = _SWITCH_I8.search(body)
    if switch is None:
        return None
    cases = [int(c) for c in _CASE.findall(switch.group("cases"))]
    if not cases:
        return None
    last = max(cases)
    offsets = [int(m.group("offset") or 0) for m in _STORE_I8.finditer(body) if int(m.group("value")) == last]
    if not offsets or len(offsets) % workers:
        return None
    start = min(offsets)
    run = list(range(start, start + workers))
    for i in range(0, len(offsets), workers):
        if sorted(offsets[i:i + workers]) != run:
            return None
    return start


def facts_from_ir(name: str, metadata: Mapping[str, Any] | None, ttgir: str | None, llir: str | None = None,
                  problems: tuple[str, ...] = ()) -> KernelFacts:
    """The facts of one compiled kernel from its metadata (``shared``, ``num_warps``, ``name``), TTGIR and
    LLVM IR."""
    said = list(problems)
    if metadata is None:
        said.append("no compiled metadata")
        metadata = {}
    name = str(metadata.get("name") or name)
    shared = metadata.get("shared")
    num_warps = metadata.get("num_warps")
    ws: bool | None = None
    default_warps = None
    def_file: str | None = None
    def_line: int | None = None
    if ttgir is None:
        said.append("no TTGIR among the kernel's cache files")
    else:
        ws = _WS_OP.search(ttgir) is not None
        m = _NUM_WARPS.search(ttgir)
        default_warps = int(m.group(1)) if m else None
        def_file, def_line = _def_location(name, ttgir)
    facts = KernelFacts(name, ws, shared if isinstance(shared, int) else None,
                        num_warps if isinstance(num_warps, int) else None, default_warps, def_file, def_line)
    offset = None
    if facts.workers is not None:
        if llir is None:
            said.append("no LLVM IR among the kernel's cache files")
        else:
            offset = _dispatch_offset(llir, name, facts.workers)
            if offset is None:
                said.append("the dispatch state's place was not found in the LLVM IR")
    return dataclasses.replace(facts, dispatch_offset=offset, problem="; ".join(said))


def read_metadata_group(metadata_group: Mapping[str, str] | None,
                        *suffixes: str) -> tuple[dict[str, Any] | None, dict[str, Any], list[str]]:
    """Read the files Triton loaded a kernel from (the ``metadata_group`` that ``kernel_load_end_hook``
    receives: file name -> path): its metadata JSON (the one that is not a ``__grp__`` file), the content
    of each file whose name ends in one of ``suffixes`` (bytes for ``.cubin``, text otherwise) keyed by
    that suffix, and one line per file that could not be read."""
    metadata: dict[str, Any] | None = None
    files: dict[str, Any] = {}
    problems = []
    for fname, path in (metadata_group or {}).items():
        suffix = next((s for s in suffixes if fname.endswith(s)), None)
        try:
            if fname.endswith(".json") and not fname.startswith("__grp__"):
                with open(path, encoding="utf-8") as fh:
                    metadata = json.load(fh)
            elif suffix == ".cubin":
                with open(path, "rb") as fh:
                    files[suffix] = fh.read()
            elif suffix is not None:
                with open(path, encoding="utf-8", errors="replace") as fh:
                    files[suffix] = fh.read()
        except (OSError, ValueError) as exc:
            problems.append(f"{fname}: {type(exc).__name__}: {exc}")
    return metadata, files, problems


def facts_from_group(name: str, metadata_group: Mapping[str, str] | None) -> KernelFacts:
    """The facts of a kernel from the files Triton loaded it from (the ``metadata_group`` that
    ``kernel_load_end_hook`` receives: file name -> path)."""
    metadata, files, problems = read_metadata_group(metadata_group, ".ttgir", ".llir")
    return facts_from_ir(name, metadata, files.get(".ttgir"), files.get(".llir"), tuple(problems))


class Recorder:
    """In a compute-sanitizer child: prints the facts of each kernel a test launches, once per test."""

    def __init__(self, emit: Callable[[str], None]) -> None:
        self.emit = emit
        self.loaded: dict[Any, KernelFacts] = {}  # CUfunction -> facts
        self.said: set[Any] = set()  # what this test's LAUNCH lines already named
        self.problem = ""
        self._runtime: Any = None

    def start_test(self) -> None:
        """A test begins: chain the hooks if Triton is imported and they are not chained yet."""
        self.said = set()
        if self._runtime is None and not self.problem and "triton" in sys.modules:
            try:
                from triton import knobs

                runtime = knobs.runtime
                runtime.kernel_load_end_hook.add(self.on_load)
                runtime.launch_enter_hook.add(self.on_launch)
                self._runtime = runtime
            except Exception as exc:  # an old Triton without chainable hooks: no facts, no rule needing them
                self.problem = f"cannot follow Triton's launches: {type(exc).__name__}: {exc}"

    def close(self) -> None:
        if self._runtime is not None:
            self._runtime.kernel_load_end_hook.remove(self.on_load)
            self._runtime.launch_enter_hook.remove(self.on_launch)
            self._runtime = None

    def on_load(self, module: Any, function: Any, name: str, metadata_group: Mapping[str, str], hash: str) -> None:
        try:
            self.loaded[function] = facts_from_group(str(name), metadata_group)
        except Exception as exc:  # never break the test's launch
            self.loaded[function] = KernelFacts(str(name), problem=f"{type(exc).__name__}: {exc}")

    def on_launch(self, metadata: Any) -> None:
        try:
            data = getattr(metadata, "data", metadata)  # Triton's LazyDict; the user's extras are not evaluated
            if not isinstance(data, Mapping):
                return
            function = data.get("function")
            facts = self.loaded.get(function)
            key: Any = function
            if facts is None:
                name = str(data.get("name", "?"))
                key = ("unseen", name)
                facts = KernelFacts(name, problem="launched, but its load was not seen (loaded before pipecheck "
                                                  "followed Triton's launches)")
            if key in self.said:
                return
            self.said.add(key)
            self.emit(LAUNCH + json.dumps(facts.to_json()))
        except Exception:
            return  # a launch must not fail because of pipecheck; a kernel left unsaid has no facts


def kernel_facts(segment: Segment | None) -> list[KernelFacts] | None:
    """The kernels a test launched, from its segment; None where any LAUNCH line could not be read (what
    was launched is then not known, and no rule that needs it applies)."""
    if segment is None:
        return None
    out = []
    for payload in segment.launches:
        if not isinstance(payload, Mapping) or "name" not in payload:
            return None
        out.append(KernelFacts.from_json(payload))
    return out
