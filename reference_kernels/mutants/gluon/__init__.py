"""Gluon mutants: the warp-specialized Gluon GEMM (reference_kernels/triton/gluon_gemm.py) with one
named, exact text edit each, in the vocabulary of :mod:`reference_kernels.mutants.engine`.

The edits are to ``gluon_gemm.py``'s own source, so a mutant follows whatever the reference kernel
does on each Triton version (its Triton 3.6 / 3.9 switches included) and stops loudly when the kernel
changes under it. :func:`load` writes the edited source to a module file and imports it (``gluon.jit``
reads real source lines); the module has the reference's whole host side (``launch_gluon_gemm``,
``compile_for_sm90``...) bound to the mutated kernel. Importing this package imports no GPU package.

Every bug here is in the mbarrier ring between the 1-warp TMA loader and the wgmma consumers, where
both sides of each hazard are asynchronous-proxy operations (TMA writes, wgmma reads): the check that
must catch them is Triton's concurrency sanitizer (``consan``), which tracks exactly those. Each
mutant says at which launch (``extra["shape"]``: M, K, N; ``extra["num_programs"]``) it shows its
bug and terminates: a wrong parity or a missing wait can otherwise turn a race into a deadlock, and a
mutant is never declared at a launch where it may hang. ``tests/unit/test_gluon_mutants.py`` compiles
each one for sm_90a; ``tests/gpu/test_gluon_mutants_gpu.py`` runs them under ConSan.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import ModuleType

from reference_kernels.mutants.engine import Edit, Mutant, edited_source, import_source

__all__ = ["BASE", "BASE_SOURCE", "MUTANTS", "base", "load", "mutant_source"]

BASE = "gluon_gemm"  # reference_kernels/triton/gluon_gemm.py
BASE_SOURCE = Path(__file__).resolve().parents[2] / "triton" / f"{BASE}.py"

_READY_WAIT = "                mbarrier.wait(ready.index(s), (it // NUM_STAGES) & 1)\n"
_EMPTY_WAIT = "                mbarrier.wait(empty.index(s), parity ^ 1)\n"
_LOOP_RELEASE = "                mbarrier.arrive(empty.index((it + NUM_STAGES - 1) % NUM_STAGES), pred=kt > 0)\n"
_TILE_RELEASE = "            mbarrier.arrive(empty.index((it + NUM_STAGES - 1) % NUM_STAGES), pred=k_tiles > 0)\n"
_DRAIN = "            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))\n"

# the default launch configuration (gluon_gemm.GPU_CONFIG): 128 x 256 x 64 tiles, 4 stages, 8 consumer warps
_ONE_TILE_ONE_LAP = (128, 256, 256)     # one output tile, 4 K steps: each ring slot is filled once
_ONE_TILE_TWO_LAPS = (128, 512, 256)    # one output tile, 8 K steps: every slot is refilled once
_ONE_TILE_FOUR_LAPS = (128, 1024, 256)  # one output tile, 16 K steps: every slot is refilled 3 times
_TWO_TILES_ONE_LAP = (256, 256, 256)    # two output tiles on one program: tile 1 refills tile 0's slots


#: ConSan names a hazard on an async buffer "outstanding" (reads/writes not yet waited for) or "pending
#: access" (the async copy or wgmma still in flight), depending on which side it sees first
_HAZARD = "outstanding|pending access"


def _gluon(name: str, edits: tuple[Edit, ...], expect: str, bug: str, tags: set[str],
           shape: tuple[int, int, int], why: str) -> Mutant:
    return Mutant(name, "triton", BASE, edits, "consan", expect, bug, frozenset(tags),
                  extra={"shape": shape, "num_programs": 1, "terminates": why})


MUTANTS: dict[str, Mutant] = {
    m.name: m
    for m in (
        _gluon(
            "gluon_release_before_read",
            (Edit(_READY_WAIT, _READY_WAIT + "                mbarrier.arrive(empty.index(s))  # BUG: released "
                                              "before the wgmma below reads slot s\n"),
             Edit(_LOOP_RELEASE, ""), Edit(_TILE_RELEASE, "")),
            _HAZARD,
            "the consumer arrives on a slot's empty barrier as soon as the slot is full, before its wgmma "
            "reads it, so the loader's next TMA load into that slot overwrites operands still being read",
            {"barrier", "steady_state", "sanitizer", "wgmma", "tma"}, _ONE_TILE_FOUR_LAPS,
            "every slot is still released exactly once per use, so every barrier phase completes"),
        _gluon(
            "gluon_loader_skips_empty_wait",
            (Edit(_EMPTY_WAIT, "                # BUG: no wait for the consumer to release slot s "
                               "(mbarrier.wait(empty.index(s), parity ^ 1))\n"),),
            _HAZARD,
            "the loader never waits on a slot's empty barrier: its TMA load into slot s for K step it + "
            "NUM_STAGES is issued while step it's load may be in flight and its wgmma may still read it",
            {"barrier", "steady_state", "sanitizer", "tma"}, _ONE_TILE_TWO_LAPS,
            "ConSan stops the kernel at the first refill of a slot; uninstrumented, two laps keep it to one "
            "refill per slot (a loader that laps a slot twice before the consumer sees its first phase "
            "leaves the consumer waiting on the wrong phase: a deadlock)"),
        _gluon(
            "gluon_ready_wait_wrong_parity",
            (Edit(_READY_WAIT, "                mbarrier.wait(ready.index(s), ((it // NUM_STAGES) & 1) ^ 1)  "
                               "# BUG: the parity of the phase before\n"),),
            _HAZARD,
            "the consumer waits on a slot's ready barrier with the parity flipped: on a fresh barrier that "
            "phase counts as complete, so the wait passes at once and wgmma reads the slot while its TMA "
            "load is still landing",
            {"barrier", "prologue", "sanitizer", "wgmma", "tma"}, _ONE_TILE_ONE_LAP,
            "one lap of the ring: every wait is on a fresh barrier and passes (a flipped parity after the "
            "first lap blocks on a phase that already completed: a deadlock)"),
        _gluon(
            "gluon_epilogue_skips_final_wait",
            (Edit(_DRAIN, "            # BUG: no warpgroup_mma_wait(num_outstanding=0) before the epilogue "
                          "reads acc\n"),),
            _HAZARD,
            "no final warpgroup_mma_wait before the epilogue: the accumulator is read while the tile's last "
            "wgmma may still run, and that wgmma's slot is released to the loader while it reads it",
            {"barrier", "epilogue", "sanitizer", "wgmma"}, _TWO_TILES_ONE_LAP,
            "only the drain is missing; every barrier is arrived on and waited for as in the reference"),
    )
}


def mutant_source(name: str) -> str:
    """The generated source of mutant ``name`` (``gluon_gemm.py`` with its edits applied)."""
    return edited_source(MUTANTS, name, "Gluon", BASE_SOURCE)


_LOCK = threading.Lock()
_BUILT: dict[str, ModuleType] = {}


def _build(name: str, source: str) -> ModuleType:
    return import_source("gluon", name, source)


def load(name: str) -> ModuleType:
    """The mutated ``gluon_gemm`` module of mutant ``name``, built once per process (imports triton)."""
    with _LOCK:
        if name not in _BUILT:
            _BUILT[name] = _build(name, mutant_source(name))
        return _BUILT[name]


def base() -> ModuleType:
    """The reference module, built the same way as the mutants (the control of every mutant)."""
    with _LOCK:
        if BASE not in _BUILT:
            _BUILT[BASE] = _build(BASE, BASE_SOURCE.read_text())
        return _BUILT[BASE]
