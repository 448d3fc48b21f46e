"""``python -m pytest_pipecheck baseline``: list, show and compare perf baseline files.

    python -m pytest_pipecheck baseline list [--dir pipecheck-baselines]
    python -m pytest_pipecheck baseline show FILE [--test SUBSTRING]
    python -m pytest_pipecheck baseline compare OLD NEW [--threshold 0.0275] [--alpha 0.001]
        [--anchor-mode per-kind|always|adaptive] [--clock-tolerance 0.015]

``compare`` applies the same gate as ``check_perf`` to every test case present in both files (when
both entries carry the same matmul anchor, on kernel/anchor ratios; on raw times otherwise, a copy
anchor included; the ``gated on`` column says which) and exits 1 when any
regressed, so it can run in CI on two committed files. Files from different
environments (GPU, driver, versions) are refused unless ``--allow-different-env`` is given: their
times are not comparable, and the output then says so on every line.

Exit codes: 0 fine, 1 regression found or an unreadable file listed, 2 bad input.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..perf.stats import ANCHOR_MODES, DEFAULT_THRESHOLD

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``list`` / ``show`` / ``compare`` sub-subcommands to ``parser``."""
    sub = parser.add_subparsers(dest="baseline_command", metavar="{list,show,compare}")
    sub.required = True
    p = sub.add_parser("list", help="list the baseline files of a directory and their environments")
    p.add_argument("--dir", default="pipecheck-baselines", help="baseline directory (default: %(default)s)")
    p = sub.add_parser("show", help="show the entries of one baseline file")
    p.add_argument("file")
    p.add_argument("--test", default=None, help="only test node ids containing this substring")
    p = sub.add_parser("compare", help="gate NEW against OLD for every test case present in both")
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                   help="practical threshold (default: %(default)s)")
    p.add_argument("--alpha", type=float, default=0.001, help="significance level (default: %(default)s)")
    p.add_argument("--anchor-mode", choices=ANCHOR_MODES, default=ANCHOR_MODES[0],
                   help="with a common anchor: per-kind gates on kernel/anchor ratios for a matmul anchor and "
                        "on raw times for a copy anchor; always on the ratios; adaptive on them only when the "
                        "anchor moved beyond the clock tolerance (default: %(default)s)")
    p.add_argument("--clock-tolerance", type=float, default=0.015,
                   help="adaptive: an anchor change within this fraction means the clock did not move "
                        "(default: %(default)s)")
    p.add_argument("--allow-different-env", action="store_true",
                   help="compare files from different GPUs or software stacks (informational only)")


def run(args: argparse.Namespace) -> int:
    """Run the chosen command; returns the exit code. Errors are one line on stderr, never a traceback."""
    from ..perf.baseline import BaselineError
    from ..perf.stats import StatsError

    try:
        if args.baseline_command == "list":
            return _list(args.dir)
        if args.baseline_command == "show":
            return _show(args.file, args.test)
        return _compare(args.old, args.new, args.threshold, args.alpha, args.allow_different_env,
                        anchor_mode=args.anchor_mode, clock_tolerance=args.clock_tolerance)
    except (BaselineError, StatsError) as exc:
        print(f"pipecheck baseline: {exc}", file=sys.stderr)
        return 2


def _table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip())


def _list(directory: str) -> int:
    from ..perf.baseline import BaselineFile, BaselineStore

    if not os.path.isdir(directory):
        print(f"pipecheck baseline: {directory} is not a directory (give --dir)", file=sys.stderr)
        return 2
    files = BaselineStore(directory).files()
    if not files:
        print(f"no baseline files in {directory}")
        return 0
    rows = []
    bad = 0
    for path, item in files:
        if isinstance(item, BaselineFile):
            cases = sum(len(c) for c in item.tests.values())
            rows.append([os.path.basename(path), str(len(item.tests)), str(cases), item.env.describe()])
        else:
            bad += 1
            rows.append([os.path.basename(path), "-", "-", f"UNREADABLE: {item}"])
    _table(rows, ["file", "tests", "cases", "environment"])
    return 1 if bad else 0


def _load(path: str) -> Any:
    from ..perf.baseline import BaselineError, read_file

    if not os.path.isfile(path):
        raise BaselineError(f"{path} is not a file")
    return read_file(path)


def _show(path: str, test: str | None) -> int:
    from ..perf.stats import anchor_label

    bf = _load(path)
    migrated = f" (schema version {bf.version}: no anchors)" if bf.version < 2 else ""
    print(f"{path}: {bf.env.describe()}{migrated}")
    rows = []
    for nodeid in sorted(bf.tests):
        if test and test not in nodeid:
            continue
        for case in sorted(bf.tests[nodeid]):
            s = bf.samples(nodeid, case)
            entry = bf.tests[nodeid][case]
            anchor = (f"{anchor_label(s.anchor)} {s.anchor_median:.2f} us" if s.anchored else "-")
            rows.append([nodeid, case, f"{s.median:.2f}", f"{s.q1:.2f}..{s.q3:.2f}", str(s.n),
                         str(s.meta.get("mode", "?")), anchor, str(entry.get("saved_at", "?"))])
    if not rows:
        print("no entries" + (f" matching {test!r}" if test else ""))
        return 0
    _table(rows, ["test", "case", "median us", "IQR us", "n", "mode", "anchor", "saved"])
    return 0


def _compare(old_path: str, new_path: str, threshold: float, alpha: float, allow_env: bool, *,
             anchor_mode: str = ANCHOR_MODES[0], clock_tolerance: float = 0.015) -> int:
    from ..perf.stats import compare

    old, new = _load(old_path), _load(new_path)
    note = ""
    if old.env != new.env:
        diff = ", ".join(new.env.differences(old.env))
        if not allow_env:
            print(f"pipecheck baseline: {old_path} and {new_path} come from different environments ({diff}); "
                  "their times are not comparable (use --allow-different-env to compare anyway)", file=sys.stderr)
            return 2
        note = " [different environments]"
        print(f"note: different environments ({diff}); the verdicts are informational")
    rows = []
    regressions = 0
    only = []
    for nodeid in sorted(set(old.tests) | set(new.tests)):
        for case in sorted(set(old.tests.get(nodeid, {})) | set(new.tests.get(nodeid, {}))):
            a, b = old.samples(nodeid, case), new.samples(nodeid, case)
            if a is None or b is None:
                only.append(f"{nodeid} [{case}] only in {old_path if b is None else new_path}")
                continue
            c = compare(a, b, threshold=threshold, alpha=alpha, anchor_mode=anchor_mode,
                        clock_tolerance=clock_tolerance)
            verdict = "REGRESSED" if c.regressed else ("faster" if c.change < -threshold else "ok")
            regressions += c.regressed
            gated = "anchor" if c.anchored else "raw"
            anchored = c.anchored_change
            moved = c.anchor_change
            rows.append([nodeid, case, f"{c.baseline_median_us:.2f}", f"{c.candidate_median_us:.2f}",
                         f"{c.raw_change:+.1%}", "-" if anchored is None else f"{anchored:+.1%}",
                         "-" if moved is None else f"{moved:+.1%}", gated, f"{c.p_value:.2g}", verdict + note])
    if rows:
        _table(rows, ["test", "case", "old us", "new us", "change", "anchored", "anchor moved", "gated on", "p",
                      "verdict"])
    for line in only:
        print(line)
    print(f"{len(rows)} compared, {regressions} regressed (threshold {threshold * 100:g}%, alpha {alpha:g}, anchor mode "
          f"{anchor_mode}, clock tolerance {clock_tolerance:.1%})")
    return 1 if regressions and not note else 0
