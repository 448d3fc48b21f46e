"""Configuration in layers: default < ini < command line < marker, validated where each value enters.

Every setting is declared once in :data:`SETTINGS`. From that one table the plugin registers the
``--pipecheck-*`` options, their ini twins and the marker keywords, and resolves them into a frozen
:class:`PipecheckConfig`. A bad value raises :class:`ConfigError` whose one-line message names the
value, where it came from (command line, ini file, or the marker on a given test) and what it must be::

    `stages=0` from the pipecheck marker on tests/test_gemm.py::test_gemm must be >= 1
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from .arch import ArchError, normalize_arch, parse_arch_list
from .contract import SELECTIONS
from .results import PipecheckError

__all__ = [
    "CHECKS",
    "CONSAN",
    "SANITIZER_CHOICES",
    "SANITIZER_TOOLS",
    "SETTINGS",
    "ConfigError",
    "PipecheckConfig",
    "Setting",
    "apply_marker",
    "normalize_arch",
]

#: what ``--pipecheck-checks`` selects: derived from the checks' registry
CHECKS = SELECTIONS
#: the compute-sanitizer tools (``all`` names these four)
SANITIZER_TOOLS = ("racecheck", "synccheck", "memcheck", "initcheck")
#: Triton's concurrency sanitizer: selected like a tool, run without compute-sanitizer (sanitizer/consan.py)
CONSAN = "consan"
#: every name the setting ``sanitizer`` accepts
SANITIZER_CHOICES = (*SANITIZER_TOOLS, CONSAN)
#: the tools a run uses unless told otherwise: races, barriers, and (with each tensor allocated exactly in
#: its child) reads and writes past a tensor, the ones whose values a kernel discards included
DEFAULT_SANITIZER_TOOLS = ("racecheck", "synccheck", "memcheck")


class ConfigError(PipecheckError):
    """A configuration value is invalid; the message names the value and its source."""


class _Invalid(Exception):
    """Raised by a parser with the reason only; the caller adds value and source."""


# --------------------------------------------------------------------------- parsers
# Each parser takes the raw value (a string from the command line or ini, or any Python
# value from a marker) and returns the typed value or raises _Invalid("must be ...").


def _parse_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        low = raw.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
    raise _Invalid("must be a boolean (true/false)")


def _int_parser(minimum: int | None = None, maximum: int | None = None) -> Callable[[Any], int]:
    def parse(raw: Any) -> int:
        if isinstance(raw, bool):
            raise _Invalid("must be an integer")
        if isinstance(raw, int):
            value = raw
        elif isinstance(raw, str) and re.fullmatch(r"\s*[-+]?\d+\s*", raw):
            value = int(raw)
        else:
            raise _Invalid("must be an integer")
        if minimum is not None and value < minimum:
            raise _Invalid(f"must be >= {minimum}")
        if maximum is not None and value > maximum:
            raise _Invalid(f"must be <= {maximum}")
        return value

    return parse


def _jobs_parser(maximum: int) -> Callable[[Any], int | str]:
    """``auto`` or a whole number from 1 to ``maximum``."""
    whole = _int_parser(1, maximum)

    def parse(raw: Any) -> int | str:
        if isinstance(raw, str) and raw.strip().lower() == "auto":
            return "auto"
        try:
            return whole(raw)
        except _Invalid as exc:
            raise _Invalid(f"must be auto or a whole number ({exc})") from None

    return parse


def _float_parser(
    minimum: float | None = None, *, exclusive: bool = False, maximum: float | None = None
) -> Callable[[Any], float]:
    def parse(raw: Any) -> float:
        if isinstance(raw, bool):
            raise _Invalid("must be a number")
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise _Invalid("must be a number") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise _Invalid("must be a finite number")
        if minimum is not None:
            if exclusive and value <= minimum:
                raise _Invalid(f"must be > {minimum:g}")
            if not exclusive and value < minimum:
                raise _Invalid(f"must be >= {minimum:g}")
        if maximum is not None and value > maximum:
            raise _Invalid(f"must be <= {maximum:g}")
        return value

    return parse


def _choice_parser(choices: tuple[str, ...]) -> Callable[[Any], str]:
    def parse(raw: Any) -> str:
        if not isinstance(raw, str) or raw.strip().lower() not in choices:
            raise _Invalid(f"must be one of {', '.join(choices)}")
        return raw.strip().lower()

    return parse


def _split(raw: Any) -> list[str]:
    if isinstance(raw, str):
        return [p.strip() for p in re.split(r"[,\s]+", raw) if p.strip()]
    if isinstance(raw, (list, tuple, set, frozenset)):
        out = []
        for p in raw:
            if not isinstance(p, str):
                raise _Invalid("must be a list of names")
            out.append(p.strip())
        return out
    raise _Invalid("must be a comma-separated list or a list of names")


def _subset_parser(choices: tuple[str, ...], *, allow_none: bool, allow_all: bool,
                   all_means: tuple[str, ...] | None = None) -> Callable[[Any], tuple[str, ...]]:
    """``all_means``: what ``all`` stands for, when not every choice (the sanitizer's ``all`` is the four
    compute-sanitizer tools; ConSan is named on its own)."""
    every = choices if all_means is None else all_means

    def parse(raw: Any) -> tuple[str, ...]:
        if raw is None and allow_none:
            return ()  # a marker's explicit None
        names = [n.lower() for n in _split(raw)]
        if allow_none and names == ["none"]:
            return ()
        if allow_all and "all" in names:
            if names == ["all"]:
                return every
            # "all,consan": the four compute-sanitizer tools and ConSan
            rest = [n for n in names if n != "all"]
            if all_means is not None:
                names = rest + [c for c in every if c not in rest]
        if not names:
            # An empty list is what an unset shell variable or a stray comma produces; reading it as
            # "none" would switch a check off without anyone having asked for that.
            off = " or `none` to turn it off" if allow_none else ""
            raise _Invalid(f"is empty: name at least one of {', '.join(choices)}{off}")
        unknown = [n for n in names if n not in choices]
        if unknown:
            hint = difflib.get_close_matches(unknown[0], choices, n=1)
            extra = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise _Invalid(f"names unknown {unknown[0]!r}{extra}; must be among {', '.join(choices)}")
        # keep declaration order, drop duplicates
        return tuple(c for c in choices if c in names)

    return parse


@dataclass(frozen=True)
class _Delta:
    """A change to the value of the layer below (``+initcheck``, ``-racecheck``), not a value itself.

    :func:`resolve` and :func:`apply_marker` apply it to the value already in place: the default, then
    the ini file, then the command line, then the marker, so ``sanitizer="+initcheck"`` on one test
    adds initcheck to whatever tools the run chose.
    """

    add: tuple[str, ...]
    remove: tuple[str, ...]
    order: tuple[str, ...]  # every allowed name, in declaration order (the result keeps it)

    def apply(self, current: tuple[str, ...]) -> tuple[str, ...]:
        keep = (set(current) | set(self.add)) - set(self.remove)
        return tuple(c for c in self.order if c in keep)


def _delta_parser(choices: tuple[str, ...], plain: Callable[[Any], tuple[str, ...]], *,
                  all_means: tuple[str, ...] | None = None) -> Callable[[Any], Any]:
    """Like ``plain``, but a list whose every entry starts with ``+`` or ``-`` extends (or trims) the
    value of the layer below instead of replacing it; a list that mixes the two forms is an error.
    ``+all``/``-all`` stand for ``all_means`` (every choice when None)."""

    def parse(raw: Any) -> Any:
        names = _split(raw) if raw is not None else []
        signed = [n for n in names if n[:1] in "+-"]
        if not signed:
            return plain(raw)
        if len(signed) != len(names):
            bare = next(n for n in names if n[:1] not in "+-")
            raise _Invalid(f"mixes tools to add or remove ({signed[0]}) with a plain list ({bare}): write every "
                           f"entry with + or - to extend the run's list, or none of them to replace it")
        add: list[str] = []
        remove: list[str] = []
        for entry in names:
            name = entry[1:].strip().lower()
            group = add if entry[0] == "+" else remove
            if name == "all":
                group.extend(choices if all_means is None else all_means)
                continue
            if name not in choices:
                hint = difflib.get_close_matches(name, choices, n=1)
                extra = f" (did you mean {entry[0] + hint[0]!r}?)" if hint else ""
                raise _Invalid(f"names unknown {entry!r}{extra}; must be among {', '.join(choices)}, each with "
                               "+ (add to the run's list) or - (remove from it)")
            group.append(name)
        both = sorted(set(add) & set(remove))
        if both:
            raise _Invalid(f"both adds and removes {both[0]!r}")
        return _Delta(tuple(add), tuple(remove), choices)

    return parse


def _settle(value: Any, current: Any) -> Any:
    """The value a layer leaves: ``value`` itself, or a :class:`_Delta` applied to ``current``."""
    return value.apply(tuple(current)) if isinstance(value, _Delta) else value


def _parse_arch_list(raw: Any) -> tuple[str, ...]:
    try:
        return parse_arch_list(raw)
    except ArchError as exc:
        raise _Invalid(f"is invalid: {exc}") from None


def _parse_optional_path(must_exist: bool, *, want_file: bool = True) -> Callable[[Any], str | None]:
    def parse(raw: Any) -> str | None:
        if raw is None:
            return None
        if isinstance(raw, os.PathLike):
            raw = os.fspath(raw)
        if not isinstance(raw, str):
            raise _Invalid("must be a path")
        path = raw.strip()
        if not path or path.lower() == "none":
            return None
        if must_exist:
            if not os.path.exists(path):
                raise _Invalid("names a file that does not exist")
            if want_file and os.path.isdir(path):
                raise _Invalid("names a directory; a file is required")
        return path

    return parse


def _parse_optional_str(raw: Any) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise _Invalid("must be a string")
    return raw.strip() or None


def _parse_spec(raw: Any) -> Any:
    if raw is None:
        return None
    # duck-typed so config.py stays free of spec.py's imports
    if not all(hasattr(raw, a) for a in ("name", "tiles", "tensors", "launch", "reference")):
        raise _Invalid("must be a pytest_pipecheck.KernelSpec")
    return raw


def _parse_expect(raw: Any) -> bool | tuple[str, ...]:
    """``expect_failures``: a boolean, or the checks that must each catch the bug (names or groups)."""
    from .contract import REGISTRY, is_registered

    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        return _parse_bool(raw)
    try:
        names = _split(raw)
    except _Invalid:
        raise _Invalid("must be a boolean or the names of the checks that must catch the bug") from None
    if not names:
        raise _Invalid("is empty: give True or name the checks that must catch the bug")
    known = sorted({k.name for k in REGISTRY} | {k.selection for k in REGISTRY if k.selection})
    for name in names:
        if not is_registered(name):
            hint = difflib.get_close_matches(name, known, n=1)
            extra = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise _Invalid(f"names unknown check {name!r}{extra}; known: {', '.join(known)}")
    return tuple(dict.fromkeys(names))


def _parse_optional_seed(raw: Any) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, str) and raw.strip().lower() in ("", "random"):
        return None
    return _int_parser(0, 2**63 - 1)(raw)


def _parse_optional_float(minimum: float) -> Callable[[Any], float | None]:
    inner = _float_parser(minimum)

    def parse(raw: Any) -> float | None:
        if raw is None or (isinstance(raw, str) and raw.strip().lower() in ("", "auto", "none")):
            return None
        return inner(raw)

    return parse


def _parse_optional_int(minimum: int) -> Callable[[Any], int | None]:
    inner = _int_parser(minimum)

    def parse(raw: Any) -> int | None:
        if raw is None:
            return None
        return inner(raw)

    return parse


#: the longest ``compare_timeout``: a wait longer than a day is no timeout at all, and the socket and process
#: waits it bounds accept far less than every finite float (a socket timeout past the platform's time_t range
#: raises OverflowError at the first compared check, long after start-up)
MAX_COMPARE_TIMEOUT_S = 86400.0


def _parse_compare_timeout(raw: Any) -> float:
    value = _float_parser(0.0, exclusive=True)(raw)
    if value > MAX_COMPARE_TIMEOUT_S:
        raise _Invalid(f"must be <= {MAX_COMPARE_TIMEOUT_S:g} (seconds: a day is the longest wait compare mode "
                       "allows for one answer of REV's process)")
    return value


# --------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class Setting:
    """One configuration value: its parser, default, help and where it may be set."""

    name: str
    parse: Callable[[Any], Any]
    default: Any
    help: str
    metavar: str = "VALUE"
    cli: bool = True
    ini: bool = True
    marker: bool = True
    flag: bool = False  # a store_true command-line flag

    @property
    def option(self) -> str:
        return "--pipecheck" if self.name == "enabled" else "--pipecheck-" + self.name.replace("_", "-")

    @property
    def ini_name(self) -> str:
        return "pipecheck" if self.name == "enabled" else "pipecheck_" + self.name

    @property
    def dest(self) -> str:
        return "pipecheck_" + self.name


SETTINGS: tuple[Setting, ...] = (
    Setting("enabled", _parse_bool, False, "turn on all pipecheck checks (sanitizer, coverage, occupancy, perf)",
            marker=False, flag=True),
    Setting("seed", _parse_optional_seed, None,
            "run seed (each test's seed is derived from it and the test's node id); default: random, printed",
            metavar="INT", marker=False),
    Setting("tier", _choice_parser(("auto", "cpu", "gpu")), "auto",
            "auto: use a GPU when one is usable; cpu: never touch a GPU; gpu: a missing GPU or "
            "compute-sanitizer is an error, not a skip", metavar="auto|cpu|gpu", marker=False),
    Setting("checks", _subset_parser(CHECKS, allow_none=False, allow_all=True), CHECKS,
            f"checks to run under --pipecheck ({', '.join(CHECKS)}, or all)", metavar="LIST"),
    Setting("arch", _parse_arch_list, ("sm_80", "sm_86", "sm_89", "sm_90"),
            "target architectures for the occupancy and compile checks", metavar="LIST"),
    Setting("min_blocks", _int_parser(1, 64), 1,
            "occupancy floor: blocks per SM each kernel must reach on every target (>= 1: a kernel with 0 "
            "blocks/SM cannot launch)", metavar="N"),
    Setting("sanitizer", _delta_parser(SANITIZER_CHOICES, _subset_parser(SANITIZER_CHOICES, allow_none=True,
                                                                           allow_all=True, all_means=SANITIZER_TOOLS),
                                       all_means=SANITIZER_TOOLS),
            DEFAULT_SANITIZER_TOOLS,
            "sanitizers to run: compute-sanitizer tools (racecheck, synccheck, memcheck, initcheck; all: these "
            "four), Triton's concurrency sanitizer for Gluon and warp-specialized Triton kernels (consan, named "
            "on its own), or none; a plain list replaces the list of the layer below (default < ini < command "
            "line < marker), a list whose every entry starts with + or - extends or trims it (+consan, "
            "-racecheck)",
            metavar="LIST"),
    Setting("sanitizer_timeout", _float_parser(0.0, exclusive=True), 120.0,
            "seconds one test may run under a sanitizer before the watchdog calls it a hang", metavar="SECONDS"),
    Setting("sanitizer_scope", _choice_parser(("launch", "test")), "launch",
            "what a sanitizer child runs: launch (each correctness check launches the kernel once per shape and "
            "judges nothing; the reference, tile probe and determinism repeats run only in the normal run) or "
            "test (the whole test, as the normal run does); a test that fails on its own in a launch child is "
            "sanitized again with scope test", metavar="launch|test"),
    Setting("sanitizer_jobs", _jobs_parser(64), "auto",
            "sanitizer children at once on one GPU (auto: half the CPU cores this process may use, from 1 to 8): "
            "the tools' tests are cut into this many parts in all (each tool's into N / tools, at least one), of "
            "about equal cost (the last run's sanitizer seconds, else pytest-split's durations), which run side "
            "by side (under xdist the default is the cores shared among the workers, from 1 to 8 each)",
            metavar="N|auto",
            marker=False),
    Setting("xdist_shares", _int_parser(1, 16), 1,
            "sanitizer shares per pytest-xdist worker: the collection is cut into workers x N contiguous shares of "
            "about equal cost and xdist hands a worker the next share when it finishes one, so a share whose cost "
            "was misjudged holds up one worker less; each share with sanitized tests starts its own children, so "
            "with N > 1 a share ends where a module ends, unless the module costs more than a share's mean",
            metavar="N", marker=False),
    Setting("xdist_order", _choice_parser(("collection", "cost")), "collection",
            "the order pytest-xdist hands out sanitizer shares: collection (the order the tests were collected) or "
            "cost (the costliest share first, by the same costs the shares were cut by, so a long test starts at "
            "once instead of behind others, and the cheapest to a worker still busy with more than a waiting "
            "share's mean cost; a share a crashed worker left is still sent again first)",
            metavar="collection|cost", marker=False),
    Setting("timeout", _float_parser(0.0), 300.0,
            "seconds one test may run (setup and call; its teardown as long again), on every tier, before "
            "pipecheck's watchdog fails it; one that cannot be stopped ends the run with exit status 88 and every "
            "thread's stack; 0 turns it off; applies under --pipecheck or wherever it is set", metavar="SECONDS"),
    Setting("crash_isolation", _choice_parser(("auto", "on", "off")), "auto",
            "run the tests in a fresh process that pipecheck follows, so that a test that crashes its process (a "
            "segmentation fault in a kernel) fails alone and every report is still written: auto (the CPU tier, "
            "without pytest-xdist, whose controller contains its workers' crashes), on, off",
            metavar="auto|on|off", marker=False),
    Setting("racecheck_report", _choice_parser(("analysis", "hazard", "all")), "analysis",
            "racecheck report mode", metavar="analysis|hazard|all"),
    Setting("suppressions", _parse_optional_path(True), None,
            "compute-sanitizer suppressions file (reviewed known false positives)", metavar="FILE"),
    Setting("kernel_filter", _parse_optional_str, None,
            "only sanitize kernels whose name contains this substring", metavar="SUBSTRING"),
    Setting("kernel_exclude", _parse_optional_str, None,
            "do not sanitize kernels whose name contains this substring", metavar="SUBSTRING"),
    Setting("shape_level", _choice_parser(("small", "medium", "large")), "small",
            "how many and how large the generated ragged shapes are", metavar="small|medium|large"),
    Setting("shape_budget_mib", _int_parser(1, 1 << 30), 1024,
            "memory budget of one generated shape (its guarded inputs and outputs), in MiB; a shape over it "
            "is dropped, with the reason, instead of allocated", metavar="MIB"),
    Setting("determinism_runs", _int_parser(2, 100), 2,
            "runs on the same inputs that must be bitwise equal", metavar="N"),
    Setting("deterministic", _parse_bool, True,
            "whether the kernel's output must be bitwise reproducible", metavar="BOOL", cli=False, ini=False),
    Setting("rtol", _parse_optional_float(0.0), None,
            "relative tolerance override (default: by dtype)", metavar="FLOAT", cli=False, ini=False),
    Setting("atol", _parse_optional_float(0.0), None,
            "absolute tolerance override (default: by dtype, grown with the loop's length)", metavar="FLOAT",
            cli=False, ini=False),
    Setting("stages", _parse_optional_int(1), None,
            "override the kernel spec's stage count", metavar="N", cli=False, ini=False),
    Setting("spec", _parse_spec, None,
            "the KernelSpec this test checks: parametrizes a `shape` argument with its generated shapes, and a "
            "`values` argument with its value patterns (paired with the shapes when the test takes both)",
            metavar="KernelSpec", cli=False, ini=False),
    Setting("expect_failures", _parse_expect, False,
            "the test provokes check failures on purpose (a mutant): they are reported as caught, a caught "
            "failure that ends the test's body does not fail it, and the test fails if none is caught (True), "
            "or if a named check does not catch it (e.g. 'tile_probe' or ['coverage', 'sanitizer:racecheck'])",
            metavar="BOOL|CHECKS", cli=False, ini=False),
    Setting("kernel", _parse_optional_str, None,
            "kernel name shown in the summary", metavar="NAME", cli=False, ini=False),
    Setting("json", _parse_optional_path(False), None, "write the results as JSON to this path",
            metavar="PATH", marker=False),
    Setting("html", _parse_optional_path(False), None, "write a self-contained HTML report to this path",
            metavar="PATH", marker=False),
    Setting("markdown", _parse_optional_path(False), None,
            "write the merge verdict and what decides it as Markdown to this path (for a review comment or a CI "
            "artifact); where $GITHUB_STEP_SUMMARY is set, a run with --pipecheck or any report also appends "
            "the same text to that file (GitHub Actions' job summary)",
            metavar="PATH", marker=False),
    Setting("baseline_dir", _parse_optional_path(False), "pipecheck-baselines",
            "directory holding perf baselines", metavar="DIR", marker=False),
    Setting("baseline_save", _parse_bool, False, "save perf results as the new baselines",
            marker=False, ini=False, flag=True),
    Setting("perf_threshold", _float_parser(0.0, exclusive=True, maximum=10.0), 0.0275,
            "practical threshold: slowdowns below this fraction never fail", metavar="FRACTION"),
    Setting("perf_alpha", _float_parser(0.0, exclusive=True, maximum=0.5), 0.001,
            "significance level of the perf regression test", metavar="P"),
    Setting("perf_anchor_mode", _choice_parser(("per-kind", "always", "adaptive")), "per-kind",
            "how perf uses a clock anchor both runs carry: per-kind gates on the kernel/anchor ratios for a "
            "matmul anchor (compute-bound kernel) and on raw times for a copy anchor (memory-bound); always "
            "gates on the ratios; adaptive on them only when the anchor shows the clock moved",
            metavar="per-kind|always|adaptive"),
    Setting("perf_clock_tolerance", _float_parser(0.0, maximum=0.5), 0.015,
            "adaptive anchoring: an anchor change within this fraction means the clock did not move, so "
            "raw times are gated", metavar="FRACTION"),
    Setting("perf_baseline_runs", _int_parser(1, 20), 2,
            "runs timed and pooled into a baseline when it is saved (a check times one run)", metavar="N"),
    Setting("compare", _parse_optional_str, None,
            "compare mode: time each perf check's kernel as of this git revision (typically the merge base "
            "with origin/main) and as of the working tree, in turns on the same GPU, and gate on the paired "
            "ratios; a stored baseline is reported alongside", metavar="REV", marker=False),
    Setting("compare_threshold", _float_parser(0.0, exclusive=True, maximum=10.0), 0.015,
            "compare mode's practical threshold: a head slower than REV by less than this fraction never fails",
            metavar="FRACTION"),
    Setting("compare_timeout", _parse_compare_timeout, 300.0,
            "compare mode: seconds to wait for REV's process at any step (to reach a perf check, to warm up, "
            "for one sample; to start and collect, at least 120) before the check is an error and the process "
            f"is stopped; at most {MAX_COMPARE_TIMEOUT_S:g} (a day)", metavar="SECONDS"),
)

SETTINGS_BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
MARKER_KEYWORDS: tuple[str, ...] = tuple(s.name for s in SETTINGS if s.marker)


@dataclass(frozen=True)
class PipecheckConfig:
    """Resolved configuration. One per run (from ini and CLI), and one per test (plus its marker)."""

    enabled: bool = False
    seed: int | None = None
    tier: str = "auto"
    checks: tuple[str, ...] = CHECKS
    arch: tuple[str, ...] = ("sm_80", "sm_86", "sm_89", "sm_90")
    min_blocks: int = 1
    sanitizer: tuple[str, ...] = DEFAULT_SANITIZER_TOOLS
    sanitizer_timeout: float = 120.0
    sanitizer_scope: str = "launch"
    sanitizer_jobs: int | str = "auto"
    xdist_shares: int = 1
    xdist_order: str = "collection"
    timeout: float = 300.0
    crash_isolation: str = "auto"
    racecheck_report: str = "analysis"
    suppressions: str | None = None
    kernel_filter: str | None = None
    kernel_exclude: str | None = None
    shape_level: str = "small"
    shape_budget_mib: int = 1024
    determinism_runs: int = 2
    deterministic: bool = True
    rtol: float | None = None
    atol: float | None = None
    stages: int | None = None
    spec: Any = None
    expect_failures: bool | tuple[str, ...] = False
    kernel: str | None = None
    json: str | None = None
    html: str | None = None
    markdown: str | None = None
    baseline_dir: str | None = "pipecheck-baselines"
    baseline_save: bool = False
    perf_threshold: float = 0.0275
    perf_alpha: float = 0.001
    perf_anchor_mode: str = "per-kind"
    perf_clock_tolerance: float = 0.015
    perf_baseline_runs: int = 2
    compare: str | None = None
    compare_threshold: float = 0.015
    compare_timeout: float = 300.0
    # where each non-default value came from, for messages ("ini", "command line", "marker")
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def wants(self, check: str) -> bool:
        """Whether ``check`` is selected (under --pipecheck or by a marker)."""
        return check in self.checks


def _describe(setting: Setting, raw: Any, where: str) -> str:
    if where == "command line":
        shown = setting.option if setting.flag else f"{setting.option}={raw}"
        return f"`{shown}` from the command line"
    if where == "-o":
        return f"`-o {setting.ini_name}={raw}` from the command line"
    if where.startswith("ini"):
        return f"`{setting.ini_name} = {raw}` from the {where}"
    return f"`{setting.name}={raw!r}` from {where}"


def parse_value(setting: Setting, raw: Any, where: str) -> Any:
    """Parse ``raw`` for ``setting``; ``where`` names the source for the error message."""
    try:
        return setting.parse(raw)
    except _Invalid as exc:
        raise ConfigError(f"{_describe(setting, raw, where)} {exc}") from None


#: what to give instead of an empty value, by the setting's metavar (else its name), for the message
_GIVE = {
    "REV": "a git revision", "PATH": "a path", "DIR": "a directory", "FILE": "a file", "SUBSTRING": "a substring",
    "INT": "an integer or random", "N": "a whole number", "MIB": "a whole number of MiB",
    "SECONDS": "a number of seconds", "FRACTION": "a fraction", "P": "a probability", "LIST": "a list",
    "N|auto": "a whole number or auto", "enabled": "true or false",
}


def _empty(setting: Setting, where: str) -> str:
    """The message for a setting given an empty value: the CLI's ``--pipecheck-compare=`` (an unset
    ``$BASE_SHA``), ``-o pipecheck_compare=``, or a key with no value in the ini file.

    An empty value never means "off" or "the default": a CI job whose variable went unset would turn a check
    off without anyone having asked for that (an empty REV left compare mode off and the perf gate unmeasured)."""
    lists = {"sanitizer": f"the tools to run ({', '.join(SANITIZER_CHOICES)}) or none",
             "checks": f"the checks to run ({', '.join(CHECKS)}) or all",
             "arch": "the target architectures (sm_80,sm_90)"}
    give = lists.get(setting.name) or _GIVE.get(setting.name) or _GIVE.get(setting.metavar)
    if give is None:
        choices = setting.metavar.split("|")
        give = f"{', '.join(choices[:-1])} or {choices[-1]}" if len(choices) > 1 else f"a value ({setting.metavar})"
    if where == "command line":
        return f"{setting.option}= is empty (an unset variable?): give {give}, or leave the option out"
    if where == "-o":
        return f"-o {setting.ini_name}= is empty (an unset variable?): give {give}, or leave the override out"
    return (f"`{setting.ini_name} =` in the {where} is empty: give {give}, or remove the key to keep the default "
            f"(pipecheck reads an empty ini value as a mistake, not as unset)")


def resolve(ini: Mapping[str, Any], cli: Mapping[str, Any], *, ini_file: str = "ini file",
            overridden: Collection[str] = ()) -> PipecheckConfig:
    """Resolve the run configuration from ini values then command-line values (later wins).

    ``ini`` and ``cli`` map setting names to raw values; absent or None means "not set". ``overridden``: the
    settings whose ini value came from ``-o`` on the command line rather than from the ini file, for messages.
    An empty string in either layer is an error (:func:`_empty`).
    """
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for setting in SETTINGS:
        raw = ini.get(setting.name)
        if setting.ini and raw is not None:
            where = "-o" if setting.name in overridden else f"ini file ({ini_file})"
            if isinstance(raw, str) and not raw.strip():
                raise ConfigError(_empty(setting, where))
            values[setting.name] = _settle(parse_value(setting, raw, where), setting.default)
            sources[setting.name] = "ini"
        raw = cli.get(setting.name)
        if setting.cli and raw is not None and raw is not False:
            if isinstance(raw, str) and not raw.strip():
                raise ConfigError(_empty(setting, "command line"))
            values[setting.name] = _settle(parse_value(setting, raw, "command line"),
                                           values.get(setting.name, setting.default))
            sources[setting.name] = "command line"
    config = PipecheckConfig(**values, sources=sources)
    _check_conflicts(config)
    return config


def _check_conflicts(config: PipecheckConfig, where: str | None = None) -> None:
    """Reject settings that contradict each other, so that nothing silently does not run."""
    if config.compare is not None and config.baseline_save:
        where_rev = "the command line" if config.sources.get("compare") == "command line" else "the ini file"
        raise ConfigError(
            f"--pipecheck-baseline-save and compare mode (`compare={config.compare}` from {where_rev}, "
            "--pipecheck-compare / pipecheck_compare) ask for two different things: saving accepts the working "
            "tree's times as the new baselines, compare mode gates them against that revision; run them separately"
        )
    chose_checks = "checks" in config.sources and config.checks != CHECKS
    if chose_checks and "sanitizer" in config.checks and not config.sanitizer and "sanitizer" in config.sources:
        checks_from = where if config.sources["checks"] == "marker" and where else config.sources["checks"]
        tools_from = where if config.sources["sanitizer"] == "marker" and where else config.sources["sanitizer"]
        raise ConfigError(
            f"checks={','.join(config.checks)} (from {checks_from}) selects the sanitizer, but sanitizer=none "
            f"(from {tools_from}) runs no tool: name the tools (racecheck, synccheck, memcheck, initcheck) or "
            f"drop sanitizer from the checks"
        )


def apply_marker(base: PipecheckConfig, kwargs: Mapping[str, Any], nodeid: str,
                 marker_name: str = "pipecheck") -> PipecheckConfig:
    """Return ``base`` overridden by a marker's keywords; unknown keywords are errors."""
    where = f"the {marker_name} marker on {nodeid}"
    values: dict[str, Any] = {}
    for key, raw in kwargs.items():
        setting = SETTINGS_BY_NAME.get(key)
        if setting is None or not setting.marker:
            hint = difflib.get_close_matches(key, MARKER_KEYWORDS, n=1)
            extra = f"; did you mean {hint[0]!r}?" if hint else ""
            raise ConfigError(
                f"unknown keyword `{key}` in {where}{extra} (known: {', '.join(MARKER_KEYWORDS)})"
            )
        values[key] = _settle(parse_value(setting, raw, where), getattr(base, key))
    if not values:
        return base
    sources = dict(base.sources)
    sources.update(dict.fromkeys(values, "marker"))
    config = dataclasses.replace(base, **values, sources=sources)
    _check_conflicts(config, where)
    return config


def marker_signature() -> str:
    """The pipecheck marker's signature as shown by ``pytest --markers``."""
    parts = []
    for s in SETTINGS:
        if s.marker:
            parts.append(f"{s.name}={s.default!r}" if not isinstance(s.default, tuple) else
                         f"{s.name}={','.join(s.default) or 'none'!r}")
    return "pipecheck(" + ", ".join(parts) + ")"
