"""Parse a SASS listing into kernels, instructions and loops, and classify each instruction.

Both listing formats are read: cuobjdump ``-sass`` (``Function : name`` headers, branch targets
as hexadecimal offsets) and nvdisasm (``.text.name:`` sections, branch targets as ``.L_x_N``
labels). A loop is a backward branch: a ``BRA`` whose target offset is not after the branch; its
body is every instruction from the target up to and including the branch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = [
    "ASYNC_COPY",
    "MATRIX",
    "Instruction",
    "Loop",
    "SassKernel",
    "classify",
    "parse_sass",
]

# Instruction kinds, keyed by the opcode's first dotted component.
ASYNC_COPY = {
    "LDGSTS": "cp.async (global->shared)",
    "UBLKCP": "bulk copy (cp.async.bulk)",
    "UTMALDG": "TMA load",
}
ASYNC_STORE = {"UTMASTG": "TMA store", "UBLKRED": "bulk reduction", "UTMAREDG": "TMA reduction"}
MATRIX = {
    "HMMA": "tensor core MMA (fp16/bf16/tf32)",
    "IMMA": "tensor core MMA (int)",
    "DMMA": "tensor core MMA (fp64)",
    "BMMA": "tensor core MMA (binary)",
    "HGMMA": "warpgroup MMA (fp16/bf16/tf32)",
    "IGMMA": "warpgroup MMA (int8)",
    "QGMMA": "warpgroup MMA (fp8)",
    "BGMMA": "warpgroup MMA (binary)",
    "UTCHMMA": "tcgen05 MMA (fp16/bf16)",
    "UTCIMMA": "tcgen05 MMA (int8)",
    "UTCQMMA": "tcgen05 MMA (fp8/fp6/fp4)",
    "UTCOMMA": "tcgen05 MMA (block-scaled)",
}
SCALAR_FMA = {"FFMA": "fp32 FMA", "HFMA2": "fp16x2 FMA", "DFMA": "fp64 FMA"}

_KIND_BY_BASE: dict[str, str] = {
    **dict.fromkeys(ASYNC_COPY, "async_copy"),
    **dict.fromkeys(ASYNC_STORE, "async_store"),
    **dict.fromkeys(MATRIX, "mma"),
    **dict.fromkeys(SCALAR_FMA, "fma"),
    "LDGDEPBAR": "copy_commit",
    "DEPBAR": "copy_wait",
    "ARRIVES": "copy_arrive",  # cp.async.mbarrier.arrive
    "SYNCS": "mbarrier",
    "BAR": "barrier",
    "BARRIER": "barrier",
    "WARPSYNC": "warpsync",
    "LDL": "local_load",
    "STL": "local_store",
    "LDS": "shared_load",
    "LDSM": "shared_load",
    "STS": "shared_store",
    "STSM": "shared_store",
    "LDG": "global_load",
    "STG": "global_store",
    "BRA": "branch",
    "EXIT": "exit",
}


def classify(opcode: str) -> str:
    """Kind of an instruction from its opcode (``"LDGSTS.E.BYPASS.128"`` -> ``"async_copy"``)."""
    base = opcode.split(".", 1)[0]
    kind = _KIND_BY_BASE.get(base)
    if kind is not None:
        return kind
    return "other"


@dataclass(frozen=True)
class Instruction:
    """One SASS instruction. ``opcode`` keeps its modifiers; ``base`` drops them."""

    offset: int
    opcode: str
    operands: str
    predicate: str = ""
    target: int | None = None  # resolved branch target offset

    @property
    def base(self) -> str:
        return self.opcode.split(".", 1)[0]

    @property
    def kind(self) -> str:
        return classify(self.opcode)

    @property
    def is_block_barrier(self) -> bool:
        """BAR.SYNC / BAR.RED (and BARRIER.SYNC): every participating thread waits for the others.

        BAR.ARV (arrive without waiting) is not a wait and does not count.
        """
        if self.base not in ("BAR", "BARRIER"):
            return False
        mods = self.opcode.split(".")[1:]
        return "ARV" not in mods

    def text(self) -> str:
        pred = f"{self.predicate} " if self.predicate else ""
        ops = f" {self.operands}" if self.operands else ""
        return f"/*{self.offset:04x}*/ {pred}{self.opcode}{ops}"


@dataclass(frozen=True)
class Loop:
    """A loop found from a backward branch: body = instructions with ``start <= offset <= end``."""

    start: int
    end: int

    def contains(self, inst: Instruction) -> bool:
        return self.start <= inst.offset <= self.end


@dataclass
class SassKernel:
    """One kernel's instructions in address order, its architecture and its loops."""

    name: str
    arch: str | None
    instructions: list[Instruction] = field(default_factory=list)

    @property
    def loops(self) -> list[Loop]:
        """Loops, one per backward-branch target (its farthest back edge), outermost first."""
        ends: dict[int, int] = {}
        exits = [i.offset for i in self.instructions if i.base == "EXIT" and not i.predicate]
        for inst in self.instructions:
            if inst.base != "BRA" or inst.target is None or inst.target > inst.offset:
                continue
            # The trailing `BRA <self>` after EXIT is padding, not a loop.
            if inst.target == inst.offset and not inst.predicate:
                continue
            # Cold stubs placed after the kernel's EXIT (mbarrier try-wait retries) jump back into
            # the middle of the code: a "backward" branch that closes no loop. A real loop body
            # never holds an unconditional EXIT.
            if any(inst.target < e < inst.offset for e in exits):
                continue
            ends[inst.target] = max(ends.get(inst.target, inst.offset), inst.offset)
        return sorted((Loop(s, e) for s, e in ends.items()), key=lambda lp: (lp.start, -lp.end))

    def body(self, loop: Loop) -> list[Instruction]:
        return [i for i in self.instructions if loop.contains(i)]


# ----------------------------------------------------------------------------- parsing

_CUOBJDUMP_FUNC = re.compile(r"^\s*Function\s*:\s*(\S+)")
_NVDISASM_FUNC = re.compile(r"^\s*\.text\.([^:\s,]+):\s*$")
_ARCH = re.compile(r"^\s*(?:code for|\.target)\s+(sm_\w+)")
_LABEL = re.compile(r"^\s*(\.L[\w.$]+):\s*$")
_INST = re.compile(
    r"^\s*/\*(?P<off>[0-9a-fA-F]{4,})\*/\s+"
    r"(?P<pred>@!?U?P(?:T|\d+)\s+)?"
    r"(?P<op>[A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)"
    r"(?P<rest>[^;]*);"
)
_HEX_TARGET = re.compile(r"^\s*(?:\S+\s*,\s*)*(0x[0-9a-fA-F]+)\s*$")
_LABEL_TARGET = re.compile(r"`\(([^)]+)\)")


def parse_sass(text: str) -> list[SassKernel]:
    """Split a cuobjdump or nvdisasm listing into :class:`SassKernel` objects (possibly none).

    Branch targets are resolved to offsets: cuobjdump writes them as hex offsets, nvdisasm as
    labels that are defined on the line before the target instruction.
    """
    kernels: list[SassKernel] = []
    arch: str | None = None
    current: SassKernel | None = None
    pending_labels: list[str] = []
    labels: dict[str, int] = {}
    label_refs: list[tuple[SassKernel, int, str]] = []
    for line in text.splitlines():
        m = _ARCH.match(line)
        if m:
            arch = m.group(1)
            continue
        m = _CUOBJDUMP_FUNC.match(line) or _NVDISASM_FUNC.match(line)
        if m:
            current = SassKernel(name=m.group(1), arch=arch)
            kernels.append(current)
            pending_labels = []
            continue
        m = _LABEL.match(line)
        if m:
            pending_labels.append(m.group(1))
            continue
        m = _INST.match(line)
        if not m or current is None:
            continue
        offset = int(m.group("off"), 16)
        for lab in pending_labels:
            labels[f"{current.name}:{lab}"] = offset
        pending_labels = []
        opcode = m.group("op")
        rest = m.group("rest").strip()
        target: int | None = None
        if opcode.split(".", 1)[0] in ("BRA", "BRX", "JMP", "CALL", "BSSY", "BREAK", "SSY", "PBK"):
            hm = _HEX_TARGET.match(rest)
            if hm:
                target = int(hm.group(1), 16)
            else:
                lm = _LABEL_TARGET.search(rest)
                if lm:
                    label_refs.append((current, len(current.instructions), lm.group(1)))
        current.instructions.append(
            Instruction(
                offset=offset,
                opcode=opcode,
                operands=rest,
                predicate=(m.group("pred") or "").strip(),
                target=target,
            )
        )
    for kernel, index, label in label_refs:
        resolved = labels.get(f"{kernel.name}:{label}")
        if resolved is not None:
            old = kernel.instructions[index]
            kernel.instructions[index] = Instruction(
                old.offset, old.opcode, old.operands, old.predicate, resolved
            )
    # nvdisasm may list a kernel's section once per symbol alias; keep kernels that have code.
    return [k for k in kernels if k.instructions]
