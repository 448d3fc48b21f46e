"""Mutants of the Hopper TMA + WGMMA GEMM (reference_kernels/hopper/tma_wgmma_gemm.cu): one bug each.

Each mutant replaces the line(s) of the reference tagged ``// pipecheck:<tag>`` (usually one; a bug
that moves a statement touches two), at load time, so the reference file stays the single source
and a mutant can never drift from it. The project's tests assert that each mutant differs from the
reference by exactly its tagged lines, that it still compiles for sm_90a, and (on a GPU) that the
check named in ``expected_check`` catches it.

``expected_check`` is the pipecheck check that must catch the bug:

* ``coverage``            -- a wrong result (poisoned outputs / comparison against the reference);
* ``hang``                -- the kernel never finishes; only ever run it in a child process with a
                             timeout (the sanitizer runner's watchdog, or ``run_case`` under
                             ``subprocess.run(timeout=...)``);
* ``sanitizer:racecheck`` -- a race that only compute-sanitizer's racecheck can be expected to report.

``may_also`` lists the other outcomes a timing-dependent bug can produce, so a test accepts those as
"caught" too, never as "passed": any of the above, or ``crash`` -- the kernel faulted (a CUDA launch
failure or illegal address surfaced at the launch or the next synchronize). A fault fails pipecheck's
coverage check too (it reports that the kernel raised), so it is a catch; a kernel that never ran
(a compile error, a Python error before the launch) is not.

``shapes`` and ``configs`` say where the bug shows: the run_case shapes and the run_case variant
arguments (``("--stages", "2", ...)``) to try, each next to the reference at the same configuration
(empty: the tests' defaults).
"""

from __future__ import annotations

from dataclasses import dataclass

from reference_kernels.mutants import engine

__all__ = ["ENTRY", "EXPECTED_CHECKS", "MUTANTS", "OUTCOMES", "HopperMutant", "apply_mutant", "as_mutants",
           "tagged_line"]

ENTRY = "hopper_tma_wgmma_gemm"  # the base kernel (reference_kernels.hopper.launch.ENTRY)


EXPECTED_CHECKS = ("coverage", "hang", "sanitizer:racecheck")
OUTCOMES = (*EXPECTED_CHECKS, "crash")


@dataclass(frozen=True)
class HopperMutant:
    name: str
    tag: str             # the `// pipecheck:<tag>` line it replaces
    old: str             # text that must occur in that line
    new: str             # what replaces it
    bug: str             # the bug, in one sentence
    expected_check: str  # one of EXPECTED_CHECKS
    may_also: tuple[str, ...] = ()  # among OUTCOMES
    note: str = ""
    also: tuple[tuple[str, str, str], ...] = ()  # more (tag, old, new) edits, for a bug that moves a statement
    shapes: str = ""                              # run_case --shapes that expose it ("" = the tests' default)
    configs: tuple[tuple[str, ...], ...] = ()     # run_case variant arguments to try (() = the default variant)

    def __post_init__(self) -> None:
        if self.expected_check not in EXPECTED_CHECKS:
            raise ValueError(f"mutant {self.name}: expected_check {self.expected_check!r} is not one of "
                             f"{EXPECTED_CHECKS}")
        unknown = [o for o in self.may_also if o not in OUTCOMES]
        if unknown:
            raise ValueError(f"mutant {self.name}: may_also {unknown} not among {OUTCOMES}")

    @property
    def edits(self) -> tuple[tuple[str, str, str], ...]:
        """Every (tag, old, new) edit, the main one first."""
        return ((self.tag, self.old, self.new), *self.also)


MUTANTS: dict[str, HopperMutant] = {
    m.name: m
    for m in (
        HopperMutant(
            "hopper_full_wait_wrong_parity", "full_wait",
            "mbar_wait(&full[s], phase);", "mbar_wait(&full[s], phase ^ 1);",
            "the consumers wait for the full-barrier phase of the wrong parity: on a fresh barrier that "
            "returns at once, so WGMMA reads a stage before (or while) TMA fills it",
            "coverage", may_also=("hang", "crash"),
            note="once the consumers run a phase ahead the producer's parity wait can also miss a phase "
                 "and deadlock; WGMMA reading a stage while TMA writes it can also fault the kernel (run 1 "
                 "on the H200: 'unspecified launch failure'); all three outcomes count as caught",
        ),
        HopperMutant(
            "hopper_expect_tx_bytes_mismatch", "expect_tx",
            "mbar_arrive_expect_tx(&full[s], STAGE_BYTES);",
            "mbar_arrive_expect_tx(&full[s], STAGE_BYTES + 16);",
            "the producer announces 16 bytes more than its two TMA copies deliver, so no full-barrier "
            "phase ever completes and the consumers wait forever",
            "hang",
        ),
        HopperMutant(
            "hopper_stage_released_before_wgmma_done", "release",
            "if (kt > 0 && lane == 0) mbar_arrive(&empty[(kt - 1) % STAGES]);",
            "if (lane == 0) mbar_arrive(&empty[s]);",
            "the consumers release stage s on the empty barrier right after issuing the WGMMA group that "
            "reads it, with no wgmma.wait_group in the loop at all, so the producer's TMA refills a stage "
            "that queued or running tensor-core reads have not consumed yet",
            "coverage", may_also=("crash", "sanitizer:racecheck"),
            also=(("wgmma_wait", "wgmma_wait<1>();", "/* wgmma.wait_group dropped */"),),
            note="run 1 tried a milder form (only wgmma.wait_group 1 dropped; stage kt-1 still released one "
                 "iteration late): right result and 0 racecheck hazards at 128x128x1024, since by then the "
                 "older group had long finished. Here the consumers wait only on full barriers, so they run "
                 "ahead of the tensor cores by up to STAGES tiles and each refill races a queued group; a "
                 "long K (128 tiles) with few CTAs keeps the tensor cores, not memory, the bottleneck, "
                 "which is when the queue builds. Racecheck did not model the WGMMA smem reads in run 1, "
                 "so it is only may_also",
            shapes="256x256x8192,128x256x8192",
            configs=(("--stages", "2", "--consumers", "2", "--bn", "128"),
                     ("--stages", "4", "--consumers", "2", "--bn", "128"),
                     ("--stages", "4", "--consumers", "2", "--bn", "256"),
                     ("--stages", "6", "--consumers", "2", "--bn", "128")),
        ),
        HopperMutant(
            "hopper_tma_coordinates_swapped", "tma_a",
            "tma_load_2d(stage, &tma_a, &full[s], kt * BK, m0);",
            "tma_load_2d(stage, &tma_a, &full[s], m0, kt * BK);",
            "the A tile is loaded at (row = k offset, col = m offset) instead of (m offset, k offset)",
            "coverage",
            note="at a single tile (M <= BM and K <= 64, e.g. 64x64x64) both coordinates are 0 and the "
                 "result is right: only shapes with more than one M or K tile expose it",
        ),
    )
}


def tagged_line(source: str, tag: str) -> tuple[int, str]:
    """(index, text) of the one line of ``source`` tagged ``// pipecheck:<tag>``; ValueError otherwise."""
    marker = f"// pipecheck:{tag}"
    hits = [(i, line) for i, line in enumerate(source.splitlines()) if line.rstrip().endswith(marker)]
    if len(hits) != 1:
        raise ValueError(f"expected exactly one line tagged {marker!r} in the Hopper GEMM source, "
                         f"found {len(hits)}")
    return hits[0]


def apply_mutant(source: str, name: str) -> str:
    """The reference ``source`` with mutant ``name``'s tagged lines replaced; ValueError if it no longer applies."""
    try:
        mutant = MUTANTS[name]
    except KeyError:
        raise ValueError(f"unknown Hopper mutant {name!r} (known: {', '.join(MUTANTS)})") from None
    for tag, _, _ in mutant.edits:
        tagged_line(source, tag)  # exactly one line ends with the tag
    return engine.apply_edits(source, _edits(mutant), name=name)


def _edits(mutant: HopperMutant) -> tuple[engine.Edit, ...]:
    return tuple(engine.Edit(old, new, tag) for tag, old, new in mutant.edits)


# where each bug sits, in the engine's tags (reference_kernels.mutants.engine.TAGS)
_TAGS: dict[str, frozenset[str]] = {
    "hopper_full_wait_wrong_parity": frozenset({"barrier", "steady_state"}),
    "hopper_expect_tx_bytes_mismatch": frozenset({"hang", "barrier", "tma"}),
    "hopper_stage_released_before_wgmma_done": frozenset({"barrier", "steady_state", "wgmma"}),
    "hopper_tma_coordinates_swapped": frozenset({"tma"}),
}


def as_mutants() -> dict[str, engine.Mutant]:
    """:data:`MUTANTS` in the engine's vocabulary (:mod:`reference_kernels.mutants.engine`); ``expect`` is
    the outcome tests/gpu/test_hopper_gpu.py classifies a child run as (``coverage``, ``hang``), and
    ``extra["may_also"]`` the other outcomes that count as caught."""
    return {
        name: engine.Mutant(name, "cuda", ENTRY, _edits(m), m.expected_check, m.expected_check, m.bug,
                            _TAGS[name], extra={"may_also": m.may_also, "note": m.note, "shapes": m.shapes,
                                                "configs": m.configs})
        for name, m in MUTANTS.items()
    }
