"""Mutants of the Hopper TMA + WGMMA GEMM (reference_kernels/hopper/tma_wgmma_gemm.cu): one bug each.

Each mutant replaces one line of the reference, the one tagged ``// pipecheck:<tag>``, at load time,
so the reference file stays the single source and a mutant can never drift from it. The project's
tests assert that each mutant differs from the reference by exactly that line, that it still
compiles for sm_90a, and (on a GPU) that the check named in ``expected_check`` catches it.

``expected_check`` is the pipecheck check that must catch the bug:

* ``coverage``            -- a wrong result (poisoned outputs / comparison against the reference);
* ``hang``                -- the kernel never finishes; only ever run it in a child process with a
                             timeout (the sanitizer runner's watchdog, or ``run_case`` under
                             ``subprocess.run(timeout=...)``);
* ``sanitizer:racecheck`` -- a race that the output rarely shows (the TMA latency hides it), so only
                             compute-sanitizer's racecheck with ``--check-warpgroup-mma`` /
                             ``--check-bulk-copy`` can be expected to report it.

``may_also`` lists the other outcomes a timing-dependent bug can produce (a phase bug can also
deadlock), so a test accepts those as "caught" too, never as "passed".
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MUTANTS", "HopperMutant", "apply_mutant", "tagged_line"]


@dataclass(frozen=True)
class HopperMutant:
    name: str
    tag: str             # the `// pipecheck:<tag>` line it replaces
    old: str             # text that must occur in that line
    new: str             # what replaces it
    bug: str             # the bug, in one sentence
    expected_check: str  # coverage | hang | sanitizer:racecheck
    may_also: tuple[str, ...] = ()
    note: str = ""


MUTANTS: dict[str, HopperMutant] = {
    m.name: m
    for m in (
        HopperMutant(
            "hopper_full_wait_wrong_parity", "full_wait",
            "mbar_wait(&full[s], phase);", "mbar_wait(&full[s], phase ^ 1);",
            "the consumers wait for the full-barrier phase of the wrong parity: on a fresh barrier that "
            "returns at once, so WGMMA reads a stage before (or while) TMA fills it",
            "coverage", may_also=("hang",),
            note="once the consumers run a phase ahead the producer's parity wait can also miss a phase "
                 "and deadlock; both outcomes count as caught",
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
            "hopper_stage_released_before_wgmma_done", "wgmma_wait",
            "wgmma_wait<1>();", "/* wgmma.wait_group dropped */",
            "the consumers release stage (kt-1) right after issuing k-tile kt without waiting for "
            "k-tile kt-1's WGMMA group, so TMA may overwrite a stage the tensor cores are still reading",
            "sanitizer:racecheck", may_also=("coverage",),
            note="the write-after-read window is shorter than a TMA round trip, so the output is usually "
                 "right: a comparison alone rarely catches it",
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
    """The reference ``source`` with mutant ``name``'s one line replaced; ValueError if it no longer applies."""
    try:
        mutant = MUTANTS[name]
    except KeyError:
        raise ValueError(f"unknown Hopper mutant {name!r} (known: {', '.join(MUTANTS)})") from None
    lines = source.splitlines(keepends=True)
    index, text = tagged_line(source, mutant.tag)
    if mutant.old not in text:
        raise ValueError(f"mutant {name}: the line tagged pipecheck:{mutant.tag} no longer contains "
                         f"{mutant.old!r} (it reads {text.strip()!r}); update the mutant")
    lines[index] = lines[index].replace(mutant.old, mutant.new, 1)
    return "".join(lines)
