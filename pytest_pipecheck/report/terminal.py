"""The end-of-run summary: per kernel and check, the verdict and its key number.

Written through pytest's terminal reporter. Verbosity follows pytest: ``-q`` shows only what did
not pass plus the totals, the default groups passing tests per kernel and check, ``-v`` lists
every test. Skipped checks are never folded into passes: each reason is listed with its count.
"""

from __future__ import annotations

import shlex
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from ..config import PipecheckConfig
from ..device import TIMING_ALONE, TierInfo
from ..results import CheckResult, Verdict

__all__ = ["STATUSES", "format_summary", "status", "unpoisoned", "write_summary"]

STATUSES = ("pass", "fail", "caught", "skip", "error", "xfailed")
_ORDER = {"error": 0, "fail": 1, "skip": 2, "xfailed": 3, "caught": 4, "pass": 5}


def status(r: CheckResult) -> str:
    """A result's status for reports: its verdict, with expected failures (mutants) as "caught", and the
    failures and errors of a test its xfail marker made xfailed as "xfailed" (pytest does not count it failed)."""
    if r.verdict == Verdict.FAIL and r.expected:
        return "caught"
    if r.xfailed and r.verdict in (Verdict.FAIL, Verdict.ERROR):
        return "xfailed"
    return r.verdict.value


def _kernel_of(r: CheckResult) -> str:
    if r.kernel:
        return r.kernel
    # fall back to the test function's name without parameters
    name = r.nodeid.rsplit("::", 1)[-1]
    return name.split("[", 1)[0] or "?"


def _table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> list[str]:
    widths = [len(h) for h in header]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    # the last column is free text: do not pad it
    def fmt(row: Sequence[str]) -> str:
        cells = [c.ljust(widths[i]) for i, c in enumerate(row[:-1])] + [row[-1]]
        return "  ".join(cells).rstrip()

    return [fmt(header)] + [fmt(r) for r in rows]


def format_summary(results: Iterable[CheckResult], tier: TierInfo, verbosity: int = 0) -> list[tuple[str, str]]:
    """Lines of the summary as (text, colour) pairs; colour is '', 'red', 'yellow' or 'green'."""
    results = list(results)
    lines: list[tuple[str, str]] = []
    if tier.device is not None:
        lines.append((f"tier: gpu ({tier.device.name}, {tier.device.arch})", ""))
    else:
        lines.append((f"tier: cpu; GPU checks skipped: {tier.reason}", "yellow"))
    if not results:
        lines.append(("no pipecheck checks ran (no test used the pipecheck fixture, or each one that did "
                      "stopped before its checks: see its error)", "yellow"))
        return lines

    rows: list[list[str]] = []
    if verbosity >= 1:
        for r in sorted(results, key=lambda r: (r.nodeid, r.check)):
            rows.append([r.nodeid, _kernel_of(r), r.check, status(r), r.summary])
        lines.extend((t, "") for t in _table(rows, ["test", "kernel", "check", "verdict", "key number"]))
    else:
        groups: dict[tuple[str, str], list[CheckResult]] = defaultdict(list)
        for r in results:
            groups[(_kernel_of(r), r.check)].append(r)
        for (kernel, check), group in sorted(groups.items()):
            counts = Counter(status(r) for r in group)
            worst = min(group, key=lambda r: _ORDER[status(r)])
            verdict = ", ".join(f"{counts[v]} {v}" for v in sorted(counts, key=lambda v: _ORDER[v]))
            if verbosity < 0 and status(worst) in ("pass", "skip", "caught"):
                continue
            key = worst.summary if status(worst) != "pass" else _representative(group)
            rows.append([kernel, check, verdict, key])
        if rows:
            lines.extend((t, "") for t in _table(rows, ["kernel", "check", "verdicts", "key number (worst)"]))

    bad = [r for r in results if status(r) in ("fail", "error")]
    if bad and verbosity < 1:
        lines.append(("not passed:", "red"))
        for r in sorted(bad, key=lambda r: (r.nodeid, r.check)):
            lines.append((f"  {r.verdict.value.upper()} {r.check} {r.nodeid}: {r.summary}", "red"))

    weak = unpoisoned(results)
    if weak:
        lines.append(("coverage without the unwritten-element check (an element the kernel never wrote cannot be "
                      "told from a written one):", "yellow"))
        for (kernel, output, why), nodeids in sorted(weak.items()):
            lines.append((f"  {kernel} {output!r} x{len(nodeids)}: {why}", "yellow"))

    skips: Counter[tuple[str, str]] = Counter(
        (r.check, r.summary) for r in results if r.verdict == Verdict.SKIP
    )
    if skips:
        lines.append(("skipped checks (not passed, not run):", "yellow"))
        for (check, reason), n in sorted(skips.items()):
            lines.append((f"  {check} x{n}: {reason}", "yellow"))
    untimed = sorted({r.nodeid for r in results if r.verdict == Verdict.SKIP and TIMING_ALONE in r.summary})
    if untimed:
        shown = " ".join(shlex.quote(n) for n in untimed[:8])
        rest = f" (and {len(untimed) - 8} more: every node id is in --pipecheck-json's report)" if len(untimed) > 8 else ""
        lines.append((f"{len(untimed)} test(s) ran without their timings (xdist workers shared a GPU); time them "
                      f"alone with: pytest --pipecheck -n 0 {shown}{rest}", "yellow"))

    totals = Counter(status(r) for r in results)
    text = ", ".join(f"{totals.get(v, 0)} {v}" for v in ("pass", "fail", "skip", "error"))
    if totals.get("caught"):
        text += f", {totals['caught']} caught (expected failures: mutants the checks caught)"
    if totals.get("xfailed"):
        text += f", {totals['xfailed']} xfailed (in tests their xfail markers expect to fail)"
    colour = "red" if bad else ("yellow" if skips else "green")
    lines.append((f"pipecheck checks: {text}", colour))
    return lines


def _representative(group: list[CheckResult]) -> str:
    """The summary that stands for a passing group: the result that came closest to its tolerance (the
    largest ``of_tol`` in its details: coverage, tile probe), else the last one."""
    if not group:
        return ""
    margins = [r for r in group if isinstance(r.details.get("of_tol"), (int, float))]
    if margins:
        return max(margins, key=lambda r: float(r.details["of_tol"])).summary
    return group[-1].summary


def unpoisoned(results: Iterable[CheckResult]) -> dict[tuple[str, str, str], list[str]]:
    """Outputs checked without the unwritten-element check, by (kernel, output, why), with the tests.

    An output that starts zeroed (``init="zeros"``), that the wrapper allocated initialized (``torch.zeros``
    in a ``call=``), that pipecheck could not intercept, or an inout, holds a value a kernel may write: an
    element it never wrote passes wherever the reference equals that value. Coverage records why in its
    details (``unwritten_not_checked``); the reports list it so that a weaker check never reads as a full one.
    """
    out: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for r in results:
        if r.check != "coverage" or r.verdict == Verdict.SKIP:
            continue
        outputs = r.details.get("outputs")
        if not isinstance(outputs, dict):
            continue
        for name, info in outputs.items():
            why = info.get("unwritten_not_checked") if isinstance(info, dict) else None
            if why:
                out[(_kernel_of(r), str(name), str(why))].append(r.nodeid)
    return dict(out)


def write_summary(terminalreporter: Any, results: Iterable[CheckResult], tier: TierInfo,
                  run_config: PipecheckConfig) -> None:
    """Write the summary section through pytest's terminal reporter."""
    verbosity = int(getattr(terminalreporter.config.option, "verbose", 0) or 0)
    terminalreporter.write_sep("=", "pipecheck summary")
    for text, colour in format_summary(results, tier, verbosity):
        kwargs = {colour: True} if colour else {}
        terminalreporter.write_line(text, **kwargs)


def header_line(config: Any) -> str:
    """The run's header line: the tier and its device, the seed, the backends and the sanitizer in use."""
    from ..device import arch_table_note
    from ..state import RUN_CONFIG, RUN_SEED, TIER

    tier = config.stash[TIER]
    seed = config.stash[RUN_SEED]
    run_config = config.stash[RUN_CONFIG]
    if tier.device is not None:
        d = tier.device
        where = f"gpu ({d.name}, {d.arch}, driver {d.driver})"
    else:
        where = f"cpu (no GPU: {tier.reason})"
    parts = [f"pipecheck: tier {where}", f"seed {seed}"]
    if tier.device is not None:
        parts.append(arch_table_note(tier))
    for name, version in tier.backends.items():
        parts.append(f"{name} {version or 'not installed'}")
    if run_config.enabled and run_config.wants("sanitizer") and set(run_config.sanitizer) - {"consan"}:
        from ..sanitizer.locate import find_compute_sanitizer, not_found

        found = find_compute_sanitizer()
        parts.append(f"compute-sanitizer {found.version or 'unknown version'}" if found else not_found())
    if run_config.enabled and run_config.wants("sanitizer") and "consan" in run_config.sanitizer:
        parts.append("Triton ConSan selected")
    parts.append("checks on" if run_config.enabled else "checks off (use --pipecheck)")
    return ", ".join(parts)
