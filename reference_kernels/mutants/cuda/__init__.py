"""CUDA mutants: each ladder kernel with one deliberate pipelining bug, named for the bug.

A mutant is not a copy of a .cu file. The reference kernels mark the lines a bug would touch with a
trailing ``// pipecheck:<tag>`` comment; a mutant is a declaration (base kernel, {tag: replacement
line}, the pipecheck check that must catch it, and a fragment of what that check says) applied to
the base source when it is loaded. So a mutant provably differs from its kernel in exactly the tagged
lines (plus its entry point, renamed ``<entry>__<mutant>`` so memcheck and synccheck reports name the
mutant; racecheck's analysis report names only the accessing functions), and
a fix to a reference kernel reaches its mutants automatically.

``expect`` is a fragment of what that check itself says: for a ``sanitizer:<tool>`` mutant, of
pipecheck's summary or finding label (``RAW race``, ``barrier error``, ``invalid __global__ read``, the
labels of pytest_pipecheck.sanitizer.parse.Finding.label), never of the raw sanitizer text; for
``hang``, of the verdict of pipecheck's watchdog (``hang: killed by the watchdog``).

``check`` is one of: ``coverage``, ``tile_probe`` (wrong numbers), ``sanitizer:racecheck``,
``sanitizer:synccheck``, ``sanitizer:memcheck``, ``hang`` (needs a watchdog: never launch it in the
test process), ``perf`` (correct but slower), ``occupancy`` (a cliff provable from the cubin).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reference_kernels.cuda.launch import KERNELS, CudaKernel, gemm, kernel_source
from reference_kernels.mutants import engine
from reference_kernels.mutants.engine import MutantError

__all__ = ["MUTANTS", "CudaMutant", "MutantError", "apply_edits", "as_mutants", "mutant"]

_TAG_RE = re.compile(r"//\s*pipecheck:([A-Za-z0-9_]+)")
CHECKS = ("coverage", "tile_probe", "sanitizer:racecheck", "sanitizer:synccheck", "sanitizer:memcheck",
          "hang", "perf", "occupancy")
assert set(CHECKS) <= set(engine.CHECKS)


def tagged_lines(source: str) -> dict[str, int]:
    """{tag: 0-based line index} of every ``// pipecheck:<tag>`` marker; a duplicated tag is an error."""
    out: dict[str, int] = {}
    for i, line in enumerate(source.splitlines()):
        m = _TAG_RE.search(line)
        if m:
            if m.group(1) in out:
                raise MutantError(f"tag pipecheck:{m.group(1)} appears on lines {out[m.group(1)] + 1} and {i + 1}")
            out[m.group(1)] = i
    return out


def apply_edits(source: str, edits: Mapping[str, str], *, name: str = "mutant") -> str:
    """Replace each tagged line with its replacement (indentation kept; "" deletes the statement)."""
    tags = tagged_lines(source)  # a duplicated tag anywhere is an error
    for tag in edits:
        if tag not in tags:
            raise MutantError(f"{name}: tag pipecheck:{tag} not found in the base source (known: {sorted(tags)})")
    return engine.apply_edits(source, _edits(edits), name=name)


def _edits(edits: Mapping[str, str]) -> tuple[engine.Edit, ...]:
    return tuple(engine.Edit(None, replacement, tag) for tag, replacement in edits.items())


@dataclass(frozen=True)
class CudaMutant:
    name: str
    base: str                   # key of reference_kernels.cuda.launch.KERNELS
    edits: Mapping[str, str]    # tag -> replacement line
    check: str                  # the pipecheck check that must catch it (see CHECKS)
    expect: str                 # a fragment of what that check reports
    bug: str                    # the bug, in one line
    stages: int | None = None   # stage count to run it with (None: the source's own)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.check not in CHECKS:
            raise MutantError(f"{self.name}: check {self.check!r} is not one of {CHECKS}")

    @property
    def kernel(self) -> CudaKernel:
        return KERNELS[self.base]

    @property
    def entry(self) -> str:
        return f"{self.kernel.entry}__{self.name}"

    def source(self) -> str:
        base = kernel_source(self.kernel)
        mutated = apply_edits(base, self.edits, name=self.name)
        renamed, count = re.subn(rf"\b{re.escape(self.kernel.entry)}\b", self.entry, mutated)
        if count != 1:
            raise MutantError(f"{self.name}: entry {self.kernel.entry} appears {count} times in the base source")
        return renamed

    def launch(self, a: Any, b: Any, c: Any, **kwargs: Any) -> Any:
        """Launch the mutant like :func:`reference_kernels.cuda.launch.gemm` (never for ``check='hang'``
        outside a watchdog)."""
        kwargs.setdefault("stages", self.stages)
        return gemm(self.kernel, a, b, c, source=self.source(), entry=self.entry,
                    label=f"{self.base} mutant {self.name}", **kwargs)


MUTANTS: dict[str, CudaMutant] = {
    m.name: m
    for m in (
        CudaMutant(
            "missing_wait_prior", "k3_cp_async", {"wait": ""}, "sanitizer:racecheck",
            "RAW race",
            "no __pipeline_wait_prior: the barrier passes while tile k's cp.async copies are still landing"),
        CudaMutant(
            "missing_sync_after_wait", "k3_cp_async", {"sync_after_wait": ""}, "sanitizer:racecheck",
            "race",
            "no __syncthreads after the wait: a warp reads chunks other threads' copies have not delivered, "
            "and refills a stage other warps still read"),
        CudaMutant(
            "epilogue_wrong_buffer", "k2_register_prefetch",
            {"epilogue_buffer": "const int last_buf = num_k_tiles & 1;"}, "tile_probe", "the last",
            "the epilogue multiplies buffer num_k_tiles & 1 instead of (num_k_tiles - 1) & 1"),
        CudaMutant(
            "epilogue_skipped", "k2_register_prefetch", {"epilogue": ""}, "tile_probe", "never reached",
            "the epilogue is dropped: the last K tile is staged but never multiplied"),
        CudaMutant(
            "stages_exceed_buffers", "k3_cp_async",
            {"prologue_depth": "for (int fill = 0; fill < STAGES; ++fill) {",
             "fetch_distance": "const int fetch_tile = k_tile + STAGES;",
             "wait": "__pipeline_wait_prior(STAGES - 1);"},
            "sanitizer:racecheck", "race",
            "STAGES tiles in flight in a ring of STAGES buffers: the refill lands in the stage being read"),
        CudaMutant(
            "consumer_skips_wait", "k5_warp_specialized", {"consumer_wait": ""}, "hang", "hang",
            "a consumer releases stages it never waited for: the phase parities never line up (deadlock)"),
        CudaMutant(
            "serialized_wait_after_commit", "k3_cp_async",
            {"commit": "__pipeline_commit(); __pipeline_wait_prior(0); __syncthreads();"}, "perf", "slower",
            "the wait moved after the commit and tightened to wait_prior(0): every copy completes before "
            "the compute it should overlap (correct, serialized)"),
        CudaMutant(
            "unguarded_tail", "k3_cp_async", {"tail_guard": "const bool whole = true;"},
            "sanitizer:memcheck", "invalid __global__ read",
            "the ragged-tail guard is dropped: every chunk is a 16-byte cp.async, past the matrix edges too"),
        CudaMutant(
            "a_rows_unguarded", "k3_cp_async",
            {"a_rows": "copy_chunk(&As[map.a_smem(i)], A, M + BM, K, lda, block_m0 + r, k0 + map.a_col);"},
            "sanitizer:memcheck", "past 'A'",
            "the M bound of A's edge-tile copies is dropped: the last M tile's cp.async reads rows of A past M, "
            "whose products the masked store then discards (coverage cannot see it; memcheck with exact "
            "allocations does)",
            extra={"outside_batch": "judged under the GPU tier's default tools, next to a Triton GEMM and two row "
                                    "sums: tests/gpu/test_default_tier_oob_gpu.py"}),
        CudaMutant(
            "divergent_barrier", "k1_sync_tiled", {"sync_stored": "if (lane < 16) __syncthreads();"},
            "sanitizer:synccheck", "barrier error",
            "the barrier after the smem stores sits under a per-lane condition: divergent __syncthreads"),
        CudaMutant(
            "stage_cliff_sm86", "k3_cp_async", {"stages": "#define PIPECHECK_STAGES 3"}, "occupancy", "sm_86",
            "one more stage (2 -> 3, 56832 B smem) halves blocks/SM on sm_86 (49 KB cliff) but not on sm_90"),
        # warp-specialized ring bugs: each terminates, so racecheck reports the race, not a hang
        CudaMutant(
            "ws_release_before_read", "k5_warp_specialized",
            {"consumer_wait": "pipe.consumer_wait(); pipe.consumer_release();", "consumer_release": ""},
            "sanitizer:racecheck", "race",
            "the consumers release a stage (arrive on its consumed barrier) right after waiting for it and "
            "before their ldmatrix reads of it, so the producer's cp.async refill lands while they read"),
        CudaMutant(
            "ws_producer_skips_acquire", "k5_warp_specialized", {"producer_acquire": ""},
            "sanitizer:racecheck", "race",
            "the producer never waits on a stage's consumed (empty) barrier before refilling it: tile "
            "STAGES overwrites stage 0 while the consumers may still read tile 0",
            extra={"note": "at the batch shape K = 100 is STAGES + 1 = 4 K tiles, so only stage 0 is refilled, "
                           "once: every barrier phase still completes and the kernel ends. With more K tiles "
                           "the producer can lap a stage twice before the consumers see its first phase, and "
                           "their parity wait then never returns (a hang, which the batch reports as a "
                           "failure of this mutant)"}),
        CudaMutant(
            "ws_storer_skips_full_wait", "k6_loader_compute_storer",
            {"storer_full_wait": "(void)c_full.arrive();  // no wait: reads the pass before it is written"},
            "sanitizer:racecheck", "race",
            "the storer (k6's epilogue warp) arrives on the C hand-off barrier but does not wait for it, so it "
            "reads the staged accumulators before the compute warps have written them"),
        CudaMutant(
            "pipeline_wait_half_warp_barrier", "k4_cuda_pipeline",
            {"consumer_wait": "pipe.consumer_wait(); if (lane < 16) __syncthreads();"},
            "sanitizer:synccheck", "barrier error",
            "a __syncthreads added after consumer_wait (to make the whole stage visible before the MMA) sits "
            "under a per-lane condition: half of each warp reaches the block barrier (a divergent barrier in "
            "a cuda::pipeline consumer; every warp still arrives once per K step, so the launch ends)"),
    )
}


def mutant(name: str) -> CudaMutant:
    """The mutant called ``name``; a clear error listing the known ones otherwise."""
    try:
        return MUTANTS[name]
    except KeyError:
        raise MutantError(f"unknown CUDA mutant {name!r} (known: {', '.join(MUTANTS)})") from None


# where each bug sits, in the engine's tags (reference_kernels.mutants.engine.TAGS)
_TAGS: dict[str, frozenset[str]] = {
    "missing_wait_prior": frozenset({"sanitizer", "steady_state"}),
    "missing_sync_after_wait": frozenset({"sanitizer", "barrier", "steady_state"}),
    "epilogue_wrong_buffer": frozenset({"epilogue"}),
    "epilogue_skipped": frozenset({"epilogue"}),
    "stages_exceed_buffers": frozenset({"sanitizer", "prologue", "steady_state"}),
    "consumer_skips_wait": frozenset({"hang", "barrier"}),
    "serialized_wait_after_commit": frozenset({"perf", "steady_state"}),
    "unguarded_tail": frozenset({"sanitizer", "tail"}),
    "a_rows_unguarded": frozenset({"sanitizer", "tail"}),
    "divergent_barrier": frozenset({"sanitizer", "barrier"}),
    "stage_cliff_sm86": frozenset({"occupancy"}),
    "ws_release_before_read": frozenset({"sanitizer", "barrier", "steady_state"}),
    "ws_producer_skips_acquire": frozenset({"sanitizer", "barrier", "steady_state"}),
    "ws_storer_skips_full_wait": frozenset({"sanitizer", "barrier", "epilogue"}),
    "pipeline_wait_half_warp_barrier": frozenset({"sanitizer", "barrier", "steady_state"}),
}


def as_mutants() -> dict[str, engine.Mutant]:
    """:data:`MUTANTS` in the engine's vocabulary (:mod:`reference_kernels.mutants.engine`)."""
    return {
        name: engine.Mutant(name, "cuda", m.base, _edits(m.edits), m.check, m.expect, m.bug, _TAGS[name],
                            extra={"stages": m.stages, **m.extra})
        for name, m in MUTANTS.items()
    }
