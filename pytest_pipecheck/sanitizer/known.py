"""What each compute-sanitizer version can see, the reviewed false positives of older versions, and the
known bugs of the toolchain that newer versions report.

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

**Known toolchain bugs.** A rule may also describe a real bug of code the user did not write and cannot
change, reported from some compute-sanitizer version on (``since``) and present only with some versions of
the toolchain that generated it (``applies``): Triton 3.6's warp-specialized kernels re-initialize an
mbarrier without invalidating it, which compute-sanitizer 2026.4.0's synccheck reports. Such a rule is
matched as narrowly (the record names code the compiler generated, not a line the user wrote), counted and
reported the same way, and stops applying with a toolchain version it was not measured with, so a newer
Triton that still has the bug fails the test rather than passing it.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

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
    # --check-warpgroup-mma: measured on an H100 with 2025.3.1 and 2026.4.0 (scripts/gpu/warpgroup_probe.py,
    # docs/validation/2026-11-25-h100-0950.md): with "yes" synccheck reports a warp that skips the wgmma and
    # memcheck a wgmma descriptor past shared memory; with "no" neither is reported (the second only as an
    # unattributed illegal address).
    SanitizerOption(("--check-warpgroup-mma", "yes"), frozenset({"memcheck", "synccheck"}), (2025, 3),
                    "listed by compute-sanitizer 2025.3.1 and 2026.4.0 --help; measured on both"),
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


_REINIT = "Already initialized. Invalidate before reinitializing"


#: folders looked into under the working directory for a record's source file, at most
_SEARCH_FOLDERS = 20000


@functools.lru_cache(maxsize=64)
def _source_candidates(name: str, cwd: str) -> tuple[str, ...]:
    """The files a record's source name may stand for: the path itself when it exists, else every loaded
    module and every file under ``cwd`` (hidden folders skipped, :data:`_SEARCH_FOLDERS` at most) with that
    base name. A search cut short finds fewer files, so a rule that needs them matches less, never more."""
    path = Path(name)
    if path.is_absolute() or path.is_file():
        return (str(path.resolve()),) if path.is_file() else ()
    files = [getattr(m, "__file__", None) for m in list(sys.modules.values())]
    found = {str(Path(f).resolve()) for f in files if isinstance(f, str) and os.path.basename(f) == path.name}
    for n, (folder, subdirs, names) in enumerate(os.walk(cwd)):
        if n >= _SEARCH_FOLDERS:
            return ()  # not searched to the end: another file of that name may say otherwise
        subdirs[:] = [d for d in subdirs if not d.startswith(".")]
        if path.name in names:
            found.add(str(Path(folder, path.name).resolve()))
    return tuple(sorted(found))


def _is_def_line(name: str | None, line: int | None, func: str | None) -> bool:
    """``name:line`` is the line ``def func(`` in every file the name may stand for (at least one): code
    the compiler generated for the kernel as a whole, not a statement of the kernel's body."""
    if not name or not line or not func:
        return False
    files = _source_candidates(name, os.getcwd())
    if not files:
        return False
    for file in files:
        try:
            lines = Path(file).read_text(errors="replace").splitlines()
        except OSError:
            return False
        if line > len(lines) or not re.match(rf"\s*def\s+{re.escape(func)}\s*\(", lines[line - 1]):
            return False
    return True


def _triton_ws_barrier_reinit(f: Finding) -> bool:
    """A synccheck "Already initialized. Invalidate before reinitializing" record in a Triton/Gluon kernel
    attributed to the kernel's ``def`` line: the mbarrier init Triton's warp-specialize lowering emits
    (triton-lang/triton#9592), not an ``mbarrier.init`` the kernel's author wrote (which has its own line)."""
    if f.kind != "barrier" or _REINIT not in f.raw.splitlines()[0]:
        return False
    return bool(f.file and f.file.endswith(".py")) and _is_def_line(f.file, f.line, f.kernel)


def _triton_version() -> Version | None:
    from importlib import metadata

    from ..toolkit import version_tuple

    try:
        return version_tuple(metadata.version("triton"))
    except metadata.PackageNotFoundError:
        return None


def _triton_before_3_7() -> bool:
    """Triton 3.6 or older is installed (the versions measured with the bug); not for an unknown one."""
    v = _triton_version()
    return v is not None and v < (3, 7)


def _within_four_bytes(matched: Sequence[Finding]) -> bool:
    """Where the records give shared addresses (``--racecheck-report hazard``), they all lie within one
    4-byte state word (one byte per worker warp); otherwise none of them is the dispatch state."""
    addrs = [int(m.group("addr"), 16) for m in (_ADDRESS.search(f.raw) for f in matched) if m]
    return not addrs or max(addrs) - min(addrs) < 4


@dataclass(frozen=True)
class Rule:
    """A reviewed false positive of compute-sanitizer ``tool`` before ``fixed_in``, or a known bug of the
    toolchain that versions from ``since`` report while ``applies()`` (the toolchain has the bug)."""

    id: str
    tool: str
    fixed_in: Version | None  # the first version measured not to report it; None: not the tool's error
    measured_in: str
    what: str
    evidence: str
    match: Callable[[Finding], bool]
    together: Callable[[Sequence[Finding]], bool] = lambda _found: True  # a check over one test's matches
    since: Version = ()  # the first version that reports it
    applies: Callable[[], bool] = lambda: True  # the installed toolchain has the bug

    def applies_to(self, version: Version) -> bool:
        return version >= self.since and (self.fixed_in is None or version < self.fixed_in) and self.applies()


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
    Rule(
        id="triton-ws-barrier-reinit",
        tool="synccheck",
        fixed_in=None,
        measured_in="2026.4.0 with Triton 3.6",
        what=("'Barrier error detected. Already initialized. Invalidate before reinitializing.' at the def line "
              "of a Triton warp-specialized kernel: Triton 3.6's warp-specialize lowering initializes an "
              "mbarrier in shared memory another barrier used without invalidating it (a real Triton bug, "
              "against the PTX rules; fixed upstream by triton-lang/triton#9592)"),
        evidence=("Triton's TMA GEMM with warp_specialize=True (tests/data/sass/triton_gemm.py, 512^3): 16 records, "
                  "one per program, at the kernel's def line, under 2026.4.0 and none under 2025.3.1; the same "
                  "kernel without warp specialization clean under both; exact results without the tool and under "
                  "2025.3.1 (H100 2026-11-25, "
                  "docs/validation/2026-11-25-h100-0950.md); sample "
                  "tests/data/sanitizer/synccheck_triton_ws_barrier_reinit_2026_4_0.txt"),
        match=_triton_ws_barrier_reinit,
        since=(2026, 4),
        applies=_triton_before_3_7,
    ),
)


def applicable_rules(tool: str, version: Version | None) -> list[Rule]:
    """The rules for ``tool`` that apply to ``version``; none for an unknown version."""
    if version is None:
        return []
    return [r for r in RULES if r.tool == tool and r.applies_to(version)]


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
    bugs: list[str] = []
    for rule in RULES:
        if rule.tool in tools and rule.applies_to(version):
            said = "a known false positive" if rule.fixed_in is not None else "a known bug of the toolchain"
            line = (f"{name} {rule.tool} reports {said} ({rule.what}); rule {rule.id} "
                    f"filters exactly those records, counts them and reports them")
            (out if rule.fixed_in is not None else bugs).append(line)
    if out:
        out.append(f"pip install pytest-pipecheck[sanitizer] installs {PINNED_PACKAGE}, which has none of these")
    return out + bugs
