"""What each compute-sanitizer version can see, the reviewed false positives of older versions, and the
known bugs of the toolchain that newer versions report.

**Options by version.** :data:`OPTIONS` lists the options pipecheck passes only to a version that has
them, with the first version known to have each and where that comes from. An unknown version gets
none of them.

**Known false positives.** :data:`RULES` are reviewed rules, each keyed to the versions that report a
toolchain-internal finding which is not a bug of the kernel: from the first version it was measured with
(``since``, which every rule has) to the first measured not to report it (``fixed_in``). A rule filters
exactly the records it describes (by the frame that reports them, the pcs and the shared address), never
a whole tool for a whole kernel, and only in the kind of kernel it was reviewed on: a rule about code
Triton generates for warp specialization matches only a kernel that the test launched and whose compiled
IR says Triton warp-specialized it (the child records these facts, launches.py); without them it matches
nothing. Every other finding of the same test still fails it. Filtered records are counted and named in
the test's result ("N findings filtered by rule X for compute-sanitizer V") and kept in its details, and
the run header says which rules apply to the version that runs. A rule never applies to a version
pipecheck could not read (its findings fail the test), nor to one outside its window.

Review: each rule was checked against the evidence named in it (captured outputs kept under
``tests/data/sanitizer/`` and the validation runs under ``docs/validation/``), with the same kernels
measured clean under compute-sanitizer 2026.4.0 (package ``nvidia-cuda-sanitizer-api`` 13.5.25). The
versions between 2025.3.1 and 2026.4.0 were not measured: the rules apply to them too (the release notes
of 2025.4 list fixes of synccheck and racecheck false positives around mbarriers, but not these records),
and every filtered record is reported, so nothing is filtered silently.

**Known toolchain bugs.** A rule may also describe a real bug of code the user did not write and cannot
change, reported from some compute-sanitizer version on (``since``) and present only with some versions of
the toolchain that generated it (``applies``): Triton 3.6's warp-specialized kernels re-initialize an
mbarrier without invalidating it, which compute-sanitizer 2026.4.0's synccheck reports. Such a rule is
matched as narrowly (the record names code the compiler generated, not a line the user wrote, in a kernel
the compiler warp-specialized), counted and reported the same way, and applies only with the toolchain
version it was measured with, so an older or a newer Triton that has the bug fails the test rather than
passing it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .launches import KernelFacts
from .parse import Finding

__all__ = ["INSTALL_PINNED", "OPTIONS", "PINNED_PACKAGE", "PINNED_VERSION", "RULES", "Rule", "SanitizerOption", "applicable_rules",
           "filter_findings", "limitations", "option_args"]

Version = tuple[int, ...]

#: the package pipecheck's ``sanitizer`` extra installs, and the version of the tool in it
PINNED_PACKAGE = "nvidia-cuda-sanitizer-api==13.5.25"
#: how to install it, in words that work as written: pipecheck is installed from a clone or from git, not an index
INSTALL_PINNED = (f"pip install '{PINNED_PACKAGE}' (what pipecheck's sanitizer extra installs: "
                  "pip install -e '.[sanitizer]' in a clone of pytest-pipecheck)")
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


def _qualified_name(func: str) -> str:
    """The qualified name of a demangled frame, without its return type and parameter list:
    ``unsigned long long cuda::ptx::__4::mbarrier_arrive<void>(unsigned long long *)`` ->
    ``cuda::ptx::__4::mbarrier_arrive<void>``. Brackets inside template arguments are skipped."""
    depth = 0
    start = 0
    for i, ch in enumerate(func):
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif depth == 0 and ch == " ":
            start = i + 1
        elif depth == 0 and ch == "(":
            return func[start:i]
    return func[start:]


def _pipeline_producer_commit(f: Finding, kernels: Sequence[KernelFacts]) -> bool:
    """A synccheck "Missing wait" reported inside ``cuda::pipeline<...>::producer_commit()``: every frame
    from the reporting one up to ``producer_commit`` is libcu++'s (a name in namespace ``cuda::``), so the
    arrive that is flagged is the pipeline's own. Without a device backtrace this cannot be told: not matched."""
    if f.kind != "barrier" or "Missing wait" not in f.raw.splitlines()[0]:
        return False
    for func in _frames(f.raw):
        name = _qualified_name(func)
        if not name.startswith("cuda::"):
            return False
        if re.match(r"cuda::(?:__\w+::)?pipeline<.*>::producer_commit$", name):
            return True
    return False


#: the dispatch loop of Triton's warp-specialize lowering runs at kernel entry: its pcs are below this
_ENTRY_PC = 0x200
#: the shared address compute-sanitizer gives the first byte of a Triton kernel's shared memory on sm_90: the
#: 1 KB below it is reserved by the hardware (docs/validation/2026-11-23-h200-1257.md, run E)
_SHARED_BASE = 0x400


def _launched(name: str | None, kernels: Sequence[KernelFacts]) -> list[KernelFacts]:
    """Every launch of the test's kernels named ``name`` (several when one name was compiled more than once)."""
    return [k for k in kernels if name is not None and k.name == name]


def _triton_ws_dispatch_state(f: Finding, kernels: Sequence[KernelFacts]) -> bool:
    """A racecheck record on the dispatch state of Triton's warp-specialize lowering, in a kernel that
    Triton warp-specialized.

    What every record must show: one kernel function, a ``.py`` source, exactly one read, in the worker
    warps' dispatch loop at kernel entry (pc < 0x200), and writes (one, or two in the analysis report when
    the default partition writes the state where the partitioned region starts and where it ends) all past
    the entry. What the test's kernel facts (launches.py) must show: every kernel of that name the test
    launched is warp-specialized according to its TTGIR, and the read is at its ``def`` line (from the
    TTGIR), where Triton attributes the dispatch loop, code it generates for the kernel as a whole; every
    statement the user wrote has its own line. A kernel that is not warp-specialized, or whose facts the
    child did not record, is never matched: the record shape alone is what a user's own race can have.

    Which bytes: the hazard report (``--racecheck-report hazard``) gives the shared address, which must lie
    in the dispatch state of a kernel of that name the test launched (several when one kernel was compiled
    for several shapes), where its LLVM IR places it (base: :data:`_SHARED_BASE`). The analysis report,
    pipecheck's default, prints no address; what it establishes is the above: Triton's own read at the
    entry of a warp-specialized kernel, within the versions the rule was measured on (``since`` to
    ``fixed_in``). What it cannot establish is which byte a write touched, so a write of the user's own
    code into the dispatch state would be filtered with it; the hazard report settles such a doubt."""
    if f.kind != "race":
        return False
    accesses = [m for m in (_ACCESS.search(line) for line in f.raw.splitlines()) if m]
    if len(accesses) < 2:
        return False
    if len({m.group("func") for m in accesses}) != 1 or not all(m.group("file").endswith(".py") for m in accesses):
        return False
    reads = [m for m in accesses if m.group("acc") == "Read"]
    writes = [m for m in accesses if m.group("acc") == "Write"]
    if not (len(reads) == 1 and len(writes) == len(accesses) - 1 and int(reads[0].group("pc"), 16) < _ENTRY_PC
            and all(int(w.group("pc"), 16) >= _ENTRY_PC for w in writes)):
        return False
    read = reads[0]
    launched = _launched(read.group("func"), kernels)
    if not launched or not all(k.warp_specialized and k.defined_at(read.group("file"), int(read.group("line")))
                               for k in launched):
        return False
    address = _ADDRESS.search(f.raw)
    if address is None:
        return True  # the analysis report: what it can establish is checked (see above)
    offset = int(address.group("addr"), 16) - _SHARED_BASE
    return any(s is not None and s[0] <= offset < s[1] for s in (k.dispatch_state for k in launched))


_REINIT = "Already initialized. Invalidate before reinitializing"


def _triton_ws_barrier_reinit(f: Finding, kernels: Sequence[KernelFacts]) -> bool:
    """A synccheck "Already initialized. Invalidate before reinitializing" record in a kernel that Triton
    warp-specialized (every kernel of that name the test launched, by its TTGIR), attributed to the
    kernel's ``def`` line (from its TTGIR): the mbarrier init Triton's warp-specialize lowering emits
    (triton-lang/triton#9592), not an ``mbarrier.init`` the kernel's author wrote (which has its own line)."""
    if f.kind != "barrier" or _REINIT not in f.raw.splitlines()[0]:
        return False
    if not (f.file and f.file.endswith(".py")):
        return False
    launched = _launched(f.kernel, kernels)
    return bool(launched) and all(k.warp_specialized and k.defined_at(f.file, f.line) for k in launched)


def _triton_version() -> Version | None:
    from importlib import metadata

    from ..toolkit import version_tuple

    try:
        return version_tuple(metadata.version("triton"))
    except metadata.PackageNotFoundError:
        return None


def _triton_before_3_7() -> bool:
    """Triton 3.6 or older is installed; not for an unknown one."""
    v = _triton_version()
    return v is not None and v < (3, 7)


def _triton_3_6() -> bool:
    """Triton 3.6 is installed (the version the warp-specialize barrier bug was measured with); not for an
    unknown one, an older one or a newer one."""
    v = _triton_version()
    return v is not None and (3, 6) <= v < (3, 7)


Match = Callable[[Finding, Sequence[KernelFacts]], bool]


@dataclass(frozen=True)
class Rule:
    """A reviewed false positive of compute-sanitizer ``tool`` from ``since`` (the first version it was
    measured with) until ``fixed_in``, or a known bug of the toolchain that versions from ``since`` report
    while ``applies()`` (the toolchain has the bug). ``match`` sees one record and the facts of the Triton
    kernels the test launched (empty where the child recorded none)."""

    id: str
    tool: str
    since: Version  # the first version measured to report it; a rule keyed to no lower bound is refused
    fixed_in: Version | None  # the first version measured not to report it; None: not the tool's error
    measured_in: str
    what: str
    evidence: str
    match: Match
    together: Callable[[Sequence[Finding]], bool] = lambda _found: True  # a check over one test's matches
    applies: Callable[[], bool] = lambda: True  # the installed toolchain has the bug

    def __post_init__(self) -> None:
        if not self.since:
            raise ValueError(f"rule {self.id}: no lower version bound (since); a rule applies only to the "
                             f"versions it was measured on")

    def applies_to(self, version: Version) -> bool:
        return version >= self.since and (self.fixed_in is None or version < self.fixed_in) and self.applies()


RULES: tuple[Rule, ...] = (
    Rule(
        id="cuda-pipeline-producer-commit",
        tool="synccheck",
        since=(2025, 3),
        fixed_in=(2026, 4),
        measured_in="2025.3.1",
        what="'Barrier error detected. Missing wait.' reported inside cuda::pipeline::producer_commit",
        evidence=("every cuda::pipeline kernel (k4, k5, k6 and a 20-line textbook pipeline), every build, "
                  "under 2025.3.1 (docs/validation/2026-11-22-h200-0453/pipeline_synccheck_probe.md); 0 errors "
                  "and exact results under 2026.4.0; sample "
                  "tests/data/sanitizer/synccheck_pipeline_producer_commit_2025_3_1.txt"),
        match=_pipeline_producer_commit,
    ),
    Rule(
        id="triton-ws-dispatch-state",
        tool="racecheck",
        since=(2025, 3),
        fixed_in=(2026, 4),
        measured_in="2025.3.1",
        what=("hazards on Triton's warp-specialize dispatch state in a kernel Triton warp-specialized (one byte "
              "of shared memory per worker warp, read by the worker warps' dispatch loop at kernel entry, "
              "written by the default partition)"),
        evidence=("the Gluon warp-specialized GEMM, six variants, under 2025.3.1 "
                  "(docs/validation/2026-11-23-h200-1257/run-e/gluon_race_probe.md): every hazard on the last "
                  "4 bytes of the block's shared memory (4 worker warps), none on the A/B ring or C staging, "
                  "ConSan clean; 0 hazards under 2026.4.0; its suite test under 2025.3.1 "
                  "(docs/validation/2026-11-25-h100-0723.md); samples "
                  "tests/data/sanitizer/racecheck_triton_ws_dispatch_hazard_2025_3_1.txt, "
                  "..._analysis_2025_3_1.txt and ..._suite_2025_3_1.txt; with the cache files of the kernels "
                  "(Triton 3.6): tests/data/sanitizer/racecheck_gluon_ws_gemm_{hazard,analysis}_2025_3_1.txt and "
                  "tests/data/sanitizer/triton_3_6_gluon_ws_gemm/"),
        match=_triton_ws_dispatch_state,
    ),
    Rule(
        id="triton-ws-barrier-reinit",
        tool="synccheck",
        since=(2026, 4),
        fixed_in=None,
        measured_in="2026.4.0 with Triton 3.6",
        what=("'Barrier error detected. Already initialized. Invalidate before reinitializing.' at the def line "
              "of a Triton warp-specialized kernel: Triton 3.6's warp-specialize lowering initializes an "
              "mbarrier in shared memory another barrier used without invalidating it (a real Triton bug, "
              "against the PTX rules; fixed upstream by triton-lang/triton#9592)"),
        evidence=("Triton's TMA GEMM with warp_specialize=True (tests/data/sass/triton_gemm.py, 512^3): 16 records, "
                  "one per program, at the kernel's def line, under 2026.4.0 and none under 2025.3.1; the same "
                  "kernel without warp specialization clean under both; exact results without the tool and under "
                  "2025.3.1 (docs/validation/2026-11-25-h100-0950.md); sample "
                  "tests/data/sanitizer/synccheck_triton_ws_barrier_reinit_2026_4_0.txt"),
        match=_triton_ws_barrier_reinit,
        applies=_triton_3_6,
    ),
)


def applicable_rules(tool: str, version: Version | None) -> list[Rule]:
    """The rules for ``tool`` that apply to ``version``; none for an unknown version."""
    if version is None:
        return []
    return [r for r in RULES if r.tool == tool and r.applies_to(version)]


def filter_findings(findings: Sequence[Finding], tool: str, version: Version | None,
                    kernels: Sequence[KernelFacts] | None = None) -> tuple[list[Finding], dict[str, list[Finding]]]:
    """One test's findings split into (kept, {rule id: filtered}). Only records a rule matches are
    filtered, and only when its check over all of them (``together``) holds. ``kernels``: the Triton
    kernels the test launched, as its child recorded them (launches.py); None where it recorded none,
    and then no rule about a Triton kernel matches."""
    kept = list(findings)
    filtered: dict[str, list[Finding]] = {}
    facts = list(kernels or ())
    for rule in applicable_rules(tool, version):
        matched = [f for f in kept if rule.match(f, facts)]
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
                f"the version pipecheck was validated with: {INSTALL_PINNED}"]
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
        out.append(f"{PINNED_PACKAGE} has none of these: {INSTALL_PINNED}")
    return out + bugs
