"""What each compute-sanitizer version can see, and the reviewed false positives of older versions.

**Options by version.** :data:`OPTIONS` lists the options pipecheck passes only to a version that has
them, with the first version known to have each and where that comes from. An unknown version gets
none of them.

**Known false positives.** :data:`RULES` are reviewed rules, each keyed to the versions that report a
toolchain-internal finding which is not a bug of the kernel. A rule filters exactly the records it
describes (by the frame that reports them, the pcs and the shared address), never a whole tool for a
whole kernel: every other finding of the same test still fails it. Filtered records are counted and
named in the test's result ("N findings filtered by rule X for compute-sanitizer V"), and the run
header says which rules apply to the version that runs. A rule never applies to a version pipecheck
could not read (its findings fail the test), nor to a version at or past ``fixed_in``.

Review: each rule was checked against the evidence named in it (captured outputs kept under
``tests/data/sanitizer/`` and the validation runs under ``docs/validation/``) by the maintainers of
pytest-pipecheck on 2026-11-24, with the same kernels measured clean under compute-sanitizer
2026.4.0 (package ``nvidia-cuda-sanitizer-api`` 13.5.25) on an H100, driver 580.159.04. The versions
between 2025.3.1 and 2026.4.0 were not measured: the rules apply to them too (the release notes of
2025.4 list fixes of synccheck and racecheck false positives around mbarriers, but not these
records), and every filtered record is reported, so nothing is filtered silently.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .parse import Finding

__all__ = ["OPTIONS", "PINNED_PACKAGE", "PINNED_VERSION", "RULES", "Rule", "SanitizerOption", "applicable_rules",
           "filter_findings", "limitations", "option_args"]

Version = tuple[int, ...]

#: the package ``pip install pytest-pipecheck[sanitizer]`` installs, and the version of the tool in it
PINNED_PACKAGE = "nvidia-cuda-sanitizer-api==13.5.25"
PINNED_VERSION: Version = (2026, 4)


@dataclass(frozen=True)
class SanitizerOption:
    """Arguments given to ``tools`` by a compute-sanitizer at or past ``since``."""

    args: tuple[str, ...]
    tools: frozenset[str]
    since: Version
    source: str


OPTIONS: tuple[SanitizerOption, ...] = (
    # Release notes, "Updates in 2025.4": "Added support for initcheck on shared memory using the
    # --initcheck-address-space option". "all" checks global and shared memory.
    SanitizerOption(("--initcheck-address-space", "all"), frozenset({"initcheck"}), (2025, 4),
                    "compute-sanitizer release notes 2025.4"),
    # Both default to "yes" in 2026.4.0 (its --help); passed explicitly so that a changed default does not
    # turn them off. The release notes do not say which version added them, so they are gated on the
    # version measured to have them (2026.4.0); an older version that has them runs without the option.
    SanitizerOption(("--check-bulk-copy", "yes"), frozenset({"memcheck", "racecheck", "synccheck", "initcheck"}),
                    (2026, 4), "listed by compute-sanitizer 2026.4.0 --help (first version unknown)"),
    SanitizerOption(("--check-warpgroup-mma", "yes"), frozenset({"memcheck", "synccheck"}), (2026, 4),
                    "listed by compute-sanitizer 2026.4.0 --help (first version unknown)"),
)


def option_args(tool: str, version: Version | None) -> list[str]:
    """The version-gated arguments for ``tool``; none for an unknown version."""
    if version is None:
        return []
    return [a for opt in OPTIONS if tool in opt.tools and version >= opt.since for a in opt.args]


# --------------------------------------------------------------------------- rules

_FRAME = re.compile(r"^(?:at|Device Frame:)\s+(?P<func>.+?)\+0x[0-9a-fA-F]+(?: in \S+)?\s*$")
_ACCESS = re.compile(r"\b(?P<acc>Write|Read)(?: access| Thread \([\d, ]+\)) at (?P<func>\S+?)\+0x(?P<pc>[0-9a-fA-F]+)"
                     r" in (?P<file>[^\s:]+):(?P<line>\d+)")
_ADDRESS = re.compile(r"at __shared__ 0x(?P<addr>[0-9a-fA-F]+)")


def _frames(raw: str) -> list[str]:
    """The device frames of a record, innermost first (its ``at`` line, then ``Device Frame:`` lines)."""
    out = []
    for line in raw.splitlines():
        m = _FRAME.match(line.strip())
        if m:
            out.append(m.group("func"))
    return out


def _pipeline_producer_commit(f: Finding) -> bool:
    """A synccheck "Missing wait" reported inside ``cuda::pipeline<...>::producer_commit()``: every frame
    from the reporting one up to ``producer_commit`` is libcu++'s (``cuda::``), so the arrive that is
    flagged is the pipeline's own. Without a device backtrace this cannot be told: not matched."""
    if f.kind != "barrier" or "Missing wait" not in f.raw.splitlines()[0]:
        return False
    for func in _frames(f.raw):
        if "cuda::" not in func.split("(", 1)[0]:  # the name before its template/parameter lists
            return False
        if re.match(r"cuda::(?:__\w+::)?pipeline<.*>::producer_commit\(\)$", func):
            return True
    return False


#: the dispatch loop of Triton's warp-specialize lowering runs at kernel entry: its pcs are below this
_ENTRY_PC = 0x200


def _triton_ws_dispatch_state(f: Finding) -> bool:
    """A racecheck record in one Triton/Gluon kernel (a ``.py`` source) whose one read is the worker warps'
    dispatch loop at kernel entry (pc < 0x200) and whose writes (one, or two in the analysis report when
    the default partition writes the state where the partitioned region starts and where it ends) are all
    past the entry in the same kernel function."""
    if f.kind != "race":
        return False
    accesses = [m for m in (_ACCESS.search(line) for line in f.raw.splitlines()) if m]
    if len(accesses) < 2:
        return False
    if len({m.group("func") for m in accesses}) != 1 or not all(m.group("file").endswith(".py") for m in accesses):
        return False
    reads = [m for m in accesses if m.group("acc") == "Read"]
    writes = [m for m in accesses if m.group("acc") == "Write"]
    return len(reads) == 1 and len(writes) == len(accesses) - 1 and int(reads[0].group("pc"), 16) < _ENTRY_PC \
        and all(int(w.group("pc"), 16) >= _ENTRY_PC for w in writes)


def _within_four_bytes(matched: Sequence[Finding]) -> bool:
    """Where the records give shared addresses (``--racecheck-report hazard``), they all lie within one
    4-byte state word (one byte per worker warp); otherwise none of them is the dispatch state."""
    addrs = [int(m.group("addr"), 16) for m in (_ADDRESS.search(f.raw) for f in matched) if m]
    return not addrs or max(addrs) - min(addrs) < 4


@dataclass(frozen=True)
class Rule:
    """A reviewed false positive of compute-sanitizer ``tool`` before ``fixed_in``."""

    id: str
    tool: str
    fixed_in: Version  # the first version measured not to report it
    measured_in: str
    what: str
    evidence: str
    match: Callable[[Finding], bool]
    together: Callable[[Sequence[Finding]], bool] = lambda _found: True  # a check over one test's matches


RULES: tuple[Rule, ...] = (
    Rule(
        id="cuda-pipeline-producer-commit",
        tool="synccheck",
        fixed_in=(2026, 4),
        measured_in="2025.3.1",
        what="'Barrier error detected. Missing wait.' reported inside cuda::pipeline::producer_commit",
        evidence=("every cuda::pipeline kernel (k4, k5, k6 and a 20-line textbook pipeline), every build, H200 "
                  "2026-11-22 (docs/validation/2026-11-22-h200-0453/pipeline_synccheck_probe.md); 0 errors "
                  "and exact results under 2026.4.0 on an H100, 2026-11-24; sample "
                  "tests/data/sanitizer/synccheck_pipeline_producer_commit_2025_3_1.txt"),
        match=_pipeline_producer_commit,
    ),
    Rule(
        id="triton-ws-dispatch-state",
        tool="racecheck",
        fixed_in=(2026, 4),
        measured_in="2025.3.1",
        what=("hazards on the 4 bytes of Triton's warp-specialize dispatch state (read by the worker warps' "
              "dispatch loop at kernel entry, written by the default partition)"),
        evidence=("the Gluon warp-specialized GEMM, six variants, H200 2026-11-23 "
                  "(docs/validation/2026-11-23-h200-1257/run-e/gluon_race_probe.md): every hazard on the last "
                  "4 bytes of the block's shared memory, none on the A/B ring or C staging, ConSan clean; "
                  "0 hazards under 2026.4.0 on an H100, 2026-11-24; its suite test under 2025.3.1 with this "
                  "rule, H100 2026-11-25 (docs/validation/2026-11-25-h100-0723.md); samples "
                  "tests/data/sanitizer/racecheck_triton_ws_dispatch_hazard_2025_3_1.txt, "
                  "..._analysis_2025_3_1.txt and ..._suite_2025_3_1.txt"),
        match=_triton_ws_dispatch_state,
        together=_within_four_bytes,
    ),
)


def applicable_rules(tool: str, version: Version | None) -> list[Rule]:
    """The rules for ``tool`` that apply to ``version``; none for an unknown version."""
    if version is None:
        return []
    return [r for r in RULES if r.tool == tool and version < r.fixed_in]


def filter_findings(findings: Sequence[Finding], tool: str, version: Version | None
                    ) -> tuple[list[Finding], dict[str, list[Finding]]]:
    """One test's findings split into (kept, {rule id: filtered}). Only records a rule matches are
    filtered, and only when its check over all of them (``together``) holds."""
    kept = list(findings)
    filtered: dict[str, list[Finding]] = {}
    for rule in applicable_rules(tool, version):
        matched = [f for f in kept if rule.match(f)]
        if matched and rule.together(matched):
            filtered[rule.id] = matched
            kept = [f for f in kept if not any(f is m for m in matched)]
    return kept, filtered


def limitations(version_text: str | None, version: Version | None, tools: Sequence[str]) -> list[str]:
    """What this compute-sanitizer cannot see or misreports, for the run header (one line each)."""
    name = f"compute-sanitizer {version_text}" if version_text else "compute-sanitizer"
    if version is None:
        return [f"{name}: version unknown, so no version-gated option is used (shared-memory initcheck, "
                f"--check-bulk-copy, --check-warpgroup-mma) and no known-false-positive rule applies; "
                f"pip install pytest-pipecheck[sanitizer] installs {PINNED_PACKAGE}"]
    out = []
    if "initcheck" in tools and version < OPTIONS[0].since:
        out.append(f"{name} cannot check shared memory in initcheck (--initcheck-address-space needs 2025.4): "
                   f"a read of shared memory that no thread wrote is not reported")
    for rule in RULES:
        if rule.tool in tools and version < rule.fixed_in:
            out.append(f"{name} {rule.tool} reports a known false positive ({rule.what}); rule {rule.id} "
                       f"filters exactly those records, counts them and reports them")
    if out:
        out.append(f"pip install pytest-pipecheck[sanitizer] installs {PINNED_PACKAGE}, which has none of these")
    return out
