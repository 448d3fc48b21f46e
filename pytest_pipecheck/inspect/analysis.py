"""Per-kernel findings from SASS: async copies, matrix instructions, barriers, spills, overlap.

The overlap test
----------------
The *main loop* is the loop (see :mod:`.sass`) whose body holds the most matrix instructions
(HMMA/IMMA/HGMMA/QGMMA/...; when a kernel has none, FFMA/HFMA2/DFMA stand in), preferring loops
that also hold async copies (LDGSTS, UBLKCP, UTMALDG).

Walk the main loop's body as a cycle, starting after an async copy ``C`` and ending just before
``C`` again (so a copy issued after the MMA of one iteration is followed into the next iteration,
as a multistage loop issues it). The loop **overlaps** when for some ``C`` a matrix instruction
``M`` is reached on that walk before anything that waits for ``C`` to complete:

* for LDGSTS, a ``DEPBAR.LE SB0, N`` reached after more than ``N`` commit points (LDGDEPBAR)
  since ``C`` (the wait retires every group but the newest ``N``; ``C``'s group is among them only
  while at most ``N`` groups were committed since). ``cp.async.wait_all`` compiles to the same.
* for bulk/TMA copies, the completion wait is on an mbarrier whose address is a runtime value,
  so no wait is attributed to ``C``: the walk only checks that ``M`` is reached at all.

A block-wide barrier (BAR.SYNC/BAR.RED) does not wait for async copies, so it does not break
overlap in this definition: Triton's pipelined sm_90 loop issues ``BAR.SYNC`` between every TMA
load and the next HGMMA and still overlaps. The stricter reading, "this iteration's copies are
issued before this iteration's MMA (in program order, without wrapping) with no block barrier and
no drain between", is reported too, as ``overlap_strict``.

When no loop holds both copies and matrix instructions, but one loop holds copies, another
holds matrix instructions and the kernel uses mbarriers (SYNCS), producers and consumers run in
different warps: ``overlap`` is true with ``overlap_mode = "warp-specialized"``.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .sass import ASYNC_COPY, MATRIX, SCALAR_FMA, Instruction, Loop, SassKernel

__all__ = [
    "KernelFindings",
    "analyze_kernel",
    "analyze_sass",
    "parse_ptxas_spills",
]

_DEPBAR_LE = re.compile(r"SB0\s*,\s*(0x[0-9a-fA-F]+|\d+)")
_PTXAS_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PTXAS_SPILL = re.compile(r"(\d+)\s+bytes spill stores,\s*(\d+)\s+bytes spill loads")
_PTXAS_STACK = re.compile(r"(\d+)\s+bytes stack frame")


def parse_ptxas_spills(log: str) -> dict[str, dict[str, int]]:
    """Per entry function, ``{"spill_stores": B, "spill_loads": B, "stack": B}`` from a ``ptxas -v`` log."""
    out: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in log.splitlines():
        m = _PTXAS_ENTRY.search(line)
        if m:
            current = m.group(1)
            continue
        if current is None:
            continue
        m = _PTXAS_SPILL.search(line)
        if m:
            entry = out.setdefault(current, {})
            entry["spill_stores"] = int(m.group(1))
            entry["spill_loads"] = int(m.group(2))
            sm = _PTXAS_STACK.search(line)
            if sm:
                entry["stack"] = int(sm.group(1))
    return out


@dataclass
class KernelFindings:
    """What the compiled code of one kernel contains. ``to_dict`` is JSON-serialisable."""

    name: str
    arch: str | None
    instructions: int
    async_copies: dict[str, int]
    async_stores: dict[str, int]
    mma: dict[str, int]
    fma: dict[str, int]
    block_barriers: int
    mbarrier_ops: int
    copy_commits: int
    copy_waits: int
    local_loads: int
    local_stores: int
    spill_stores: int | None = None  # bytes, from a ptxas -v log when one was available
    spill_loads: int | None = None
    loops: int = 0
    main_loop: tuple[int, int] | None = None
    overlap: bool = False
    overlap_strict: bool = False
    overlap_mode: str = ""
    overlap_reason: str = ""
    evidence: list[str] = field(default_factory=list)

    # ---------------------------------------------------------------- derived facts
    @property
    def has_async_copies(self) -> bool:
        return sum(self.async_copies.values()) > 0

    @property
    def mma_kind(self) -> str:
        """The dominant matrix instruction (``"HMMA"``, ``"HGMMA"``...), ``"FFMA"``-style when none, or ``"none"``."""
        for table in (self.mma, self.fma):
            if table:
                return max(table.items(), key=lambda kv: kv[1])[0]
        return "none"

    @property
    def spills(self) -> bool:
        """Spill bytes from ptxas when known; otherwise any local-memory traffic (LDL/STL)."""
        if self.spill_stores is not None or self.spill_loads is not None:
            return bool(self.spill_stores or self.spill_loads)
        return self.local_loads + self.local_stores > 0

    @property
    def spills_source(self) -> str:
        if self.spill_stores is not None or self.spill_loads is not None:
            return "ptxas"
        return "LDL/STL"

    def spill_text(self) -> str:
        if self.spills_source == "ptxas":
            if not (self.spill_stores or self.spill_loads):
                return "0 spills"
            return f"{self.spill_stores or 0} B spill stores, {self.spill_loads or 0} B spill loads"
        n = self.local_loads + self.local_stores
        if n == 0:
            return "0 spills"
        return f"local memory: LDL x{self.local_loads}, STL x{self.local_stores}"

    def summary(self) -> str:
        """One line: ``"LDGSTS x8, HMMA x64, overlap yes, 0 spills"``."""
        parts = [f"{k} x{v}" for k, v in sorted(self.async_copies.items())] or ["no async copies"]
        if self.mma:
            parts += [f"{k} x{v}" for k, v in sorted(self.mma.items())]
        elif self.fma:
            parts.append(f"no MMA ({', '.join(f'{k} x{v}' for k, v in sorted(self.fma.items()))})")
        else:
            parts.append("no MMA")
        if self.overlap:
            ov = "overlap yes" + (f" ({self.overlap_mode})" if self.overlap_mode != "same loop" else "")
        else:
            ov = "overlap no"
        parts.append(ov)
        parts.append(self.spill_text())
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "arch": self.arch,
            "instructions": self.instructions,
            "async_copies": dict(self.async_copies),
            "async_stores": dict(self.async_stores),
            "mma": dict(self.mma),
            "mma_kind": self.mma_kind,
            "fma": dict(self.fma),
            "block_barriers": self.block_barriers,
            "mbarrier_ops": self.mbarrier_ops,
            "copy_commits": self.copy_commits,
            "copy_waits": self.copy_waits,
            "local_loads": self.local_loads,
            "local_stores": self.local_stores,
            "spill_stores": self.spill_stores,
            "spill_loads": self.spill_loads,
            "spills": self.spills,
            "spills_source": self.spills_source,
            "loops": self.loops,
            "main_loop": list(self.main_loop) if self.main_loop else None,
            "overlap": self.overlap,
            "overlap_strict": self.overlap_strict,
            "overlap_mode": self.overlap_mode,
            "overlap_reason": self.overlap_reason,
            "summary": self.summary(),
            "evidence": list(self.evidence),
        }


# ----------------------------------------------------------------------------- overlap


def _depbar_keep(inst: Instruction) -> int | None:
    """``N`` of ``DEPBAR.LE SB0, N`` (groups allowed to stay pending); None for other waits."""
    if inst.base != "DEPBAR" or ".LE" not in inst.opcode:
        return None
    m = _DEPBAR_LE.search(inst.operands)
    return int(m.group(1), 0) if m else None


def _drains(copy: Instruction, inst: Instruction, commits_since: int) -> bool:
    if copy.base != "LDGSTS":
        return False  # bulk/TMA completion goes through an mbarrier we cannot attribute
    keep = _depbar_keep(inst)
    return keep is not None and commits_since > keep


def _is_compute(inst: Instruction, use_fma: bool) -> bool:
    return inst.base in MATRIX or (use_fma and inst.base in SCALAR_FMA)


def _overlap_in_body(body: list[Instruction], use_fma: bool) -> tuple[bool, bool, list[str]]:
    """(overlap, overlap_strict, evidence lines) for one loop body; see the module docstring."""
    n = len(body)
    found = strict = False
    evidence: list[str] = []
    for i, copy in enumerate(body):
        if copy.base not in ASYNC_COPY:
            continue
        commits = 0
        barrier_seen = False
        for step in range(1, n):
            j = (i + step) % n
            inst = body[j]
            wrapped = i + step >= n
            if inst.base == "LDGDEPBAR":
                commits += 1
            if _drains(copy, inst, commits):
                break
            if inst.is_block_barrier:
                barrier_seen = True
            if _is_compute(inst, use_fma):
                if not found:
                    evidence = [copy.text(), inst.text()]
                found = True
                if not wrapped and not barrier_seen:
                    strict = True
                    evidence = [copy.text(), inst.text()]
                break
        if strict:
            break
    return found, strict, evidence


def _serializing_lines(body: list[Instruction]) -> list[str]:
    """The copies, commits, waits, barriers and first matrix instructions of a body, for a report."""
    keep: list[str] = []
    mma_shown = 0
    for inst in body:
        if inst.base in MATRIX or inst.base in SCALAR_FMA:
            if mma_shown >= 2:
                continue
            mma_shown += 1
        elif not (
            inst.base in ASYNC_COPY or inst.base in ("LDGDEPBAR", "DEPBAR", "SYNCS") or inst.is_block_barrier
        ):
            continue
        keep.append(inst.text())
        if len(keep) >= 16:
            break
    return keep


def _choose_main_loop(kernel: SassKernel, use_fma: bool) -> tuple[Loop | None, list[Instruction]]:
    best: tuple[tuple[int, int, int], Loop, list[Instruction]] | None = None
    for loop in kernel.loops:
        body = kernel.body(loop)
        n_mma = sum(1 for i in body if _is_compute(i, use_fma))
        if n_mma == 0:
            continue
        n_copy = sum(1 for i in body if i.base in ASYNC_COPY)
        # Prefer loops with copies, then more matrix work, then the tighter (inner) loop.
        key = (1 if n_copy else 0, n_mma, -len(body))
        if best is None or key > best[0]:
            best = (key, loop, body)
    if best is None:
        return None, []
    return best[1], best[2]


def analyze_kernel(kernel: SassKernel, spills: dict[str, int] | None = None) -> KernelFindings:
    """Findings for one parsed kernel; ``spills`` is its entry from :func:`parse_ptxas_spills`."""
    counts = Counter(i.base for i in kernel.instructions)
    mma = {k: counts[k] for k in MATRIX if counts[k]}
    # HFMA2.MMA with zero operands is the Ampere register-move idiom, not arithmetic.
    counts["HFMA2"] -= sum(1 for i in kernel.instructions if i.opcode.startswith("HFMA2.MMA"))
    fma = {k: counts[k] for k in SCALAR_FMA if counts[k] > 0}
    use_fma = not mma
    findings = KernelFindings(
        name=kernel.name,
        arch=kernel.arch,
        instructions=len(kernel.instructions),
        async_copies={k: counts[k] for k in ASYNC_COPY if counts[k]},
        async_stores={k: counts[k] for k in ("UTMASTG", "UBLKRED", "UTMAREDG") if counts[k]},
        mma=mma,
        fma=fma,
        block_barriers=sum(1 for i in kernel.instructions if i.is_block_barrier),
        # mbarrier traffic: SYNCS on sm_90+; on sm_80 arrive/wait compile to ATOMS.ARRIVE and ARRIVES
        mbarrier_ops=counts["SYNCS"]
        + counts["ARRIVES"]
        + sum(1 for i in kernel.instructions if i.opcode.startswith("ATOMS.ARRIVE")),
        copy_commits=counts["LDGDEPBAR"],
        copy_waits=counts["DEPBAR"],
        local_loads=counts["LDL"],
        local_stores=counts["STL"],
        loops=len(kernel.loops),
    )
    if spills:
        findings.spill_stores = spills.get("spill_stores")
        findings.spill_loads = spills.get("spill_loads")
    local = [i.text() for i in kernel.instructions if i.base in ("LDL", "STL")][:4]

    loop, body = _choose_main_loop(kernel, use_fma)
    if loop is not None:
        findings.main_loop = (loop.start, loop.end)
    if not findings.has_async_copies:
        findings.overlap_reason = "no async copies (LDGSTS/UBLKCP/UTMALDG) anywhere in the kernel"
    elif loop is None:
        findings.overlap_reason = "no loop contains matrix instructions"
    else:
        found, strict, ev = _overlap_in_body(body, use_fma)
        findings.overlap, findings.overlap_strict = found, strict
        if found:
            findings.overlap_mode = "same loop"
            findings.overlap_reason = "an async copy is in flight when a matrix instruction issues"
            findings.evidence = ev
        elif not any(i.base in ASYNC_COPY for i in body):
            copy_loops = [lp for lp in kernel.loops if any(i.base in ASYNC_COPY for i in kernel.body(lp))]
            if copy_loops and findings.mbarrier_ops:
                first_copy = next(i for i in kernel.body(copy_loops[0]) if i.base in ASYNC_COPY)
                first_mma = next(i for i in body if _is_compute(i, use_fma))
                findings.evidence = [first_copy.text(), first_mma.text()]
                findings.overlap = True
                findings.overlap_mode = "warp-specialized"
                findings.overlap_reason = (
                    "copies and matrix instructions run in different loops joined by mbarriers "
                    "(producer and consumer warps)"
                )
            else:
                findings.overlap_reason = (
                    f"the main loop [{loop.start:#x}, {loop.end:#x}] issues no async copies; "
                    "the copies are outside it"
                )
                findings.evidence = _serializing_lines(body)
        else:
            findings.overlap_reason = (
                "every async copy in the main loop is waited for (DEPBAR) before the next matrix instruction"
            )
            findings.evidence = _serializing_lines(body)
    if findings.spills and local:
        findings.evidence = [*findings.evidence, *local]
    return findings


def analyze_sass(kernels: list[SassKernel], ptxas_log: str | None = None) -> list[KernelFindings]:
    """Findings for every kernel; spill bytes come from ``ptxas_log`` (``ptxas -v``) when given."""
    spills = parse_ptxas_spills(ptxas_log) if ptxas_log else {}
    return [analyze_kernel(k, spills.get(k.name)) for k in kernels]
