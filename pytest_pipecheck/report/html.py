"""``--pipecheck-html PATH``: one self-contained HTML page a reviewer can open anywhere.

The page needs no network when viewed: the CSS is inline, plots are PNGs embedded as ``data:``
URIs, there is no script. It shows, in order:

- a header: tier (GPU model, architecture, driver, SM count, or why there is no GPU), the seed,
  versions of pipecheck, Python, pytest and the backends, the run's configuration, and totals;
- for a run that did not finish, first of all, that it did not: the page written when the run starts
  says only that (a run that dies leaves it behind), an interrupted run's page names the signal;
- what did not pass (fail and error), each with its message and the command that reproduces it;
- the skipped checks with their reasons (a skip is never a pass);
- the outputs whose coverage could not look for unwritten elements (zeroed, initialized by the wrapper,
  not intercepted, inouts), with why and the tests: a weaker check than a poisoned output's;
- per kernel, a table of verdicts per test and check, coloured, followed by what the details carry:
  the occupancy plot (blocks/SM against shared memory per block for each target architecture, the
  kernel's point, its cliffs), the stage sweep (measured against cost-model predicted), the
  baseline history, and sanitizer findings with the source line each points at.

Every value from a result is escaped. Plots need matplotlib (the ``html`` extra); without it the
tables still carry every number and the page says what is missing. A plot that cannot be drawn
from odd details is replaced by its reason, never by a failed report.

The details this module reads (each optional, each read defensively):

``archs`` (what the occupancy check writes) or ``per_arch``
    ``{arch: {"threads", "registers", "static_smem", "dynamic_smem", "smem_per_block",
    "blocks_per_sm", "limiters", "smem_up", "smem_down", "opt_in", "cliff"}}`` or a list of such
    dicts with an ``"arch"`` key (``Occupancy.to_json()`` spellings are accepted); ``floor``.
``median_us``, ``q1_us``, ``q3_us``, ``baseline_median_us``, ``change``, ``p_value``, ``threshold``
    on ``perf`` results (what the perf gate writes): the table and plot of time against baseline.
``stage_sweep``
    ``[{"stages", "measured_us", "predicted_us"}]``, optionally with ``q1_us``, ``q3_us``,
    ``blocks_per_sm``, ``tflops`` and ``note`` per row (what ``check_stage_sweep`` writes), and
    ``chosen``, ``best_stages``, ``loss`` beside it: extra columns and marks appear when present.
``history``
    ``[{"label", "median_us"}]``, oldest first; the run's own time from ``median_us``.
``findings``
    ``[{"kind", "kernel", "file", "line", "count"}]`` (plus ``hazard``, ``second_file``,
    ``second_line``, ``message``, ``tool`` where the sanitizer gives them).
``outputs``
    ``{output: {"unwritten_not_checked": why, ...}}`` on ``coverage`` results: the weaker-coverage list.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import linecache
import os
import platform
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from ..config import CHECKS, PipecheckConfig
from ..device import TierInfo
from ..reproduce import rerun_argv, shell_line
from ..results import CheckResult, PipecheckError, Verdict
from . import json_report, plots
from .interrupt import FINISHED, INTERRUPTED, RUNNING, STATES, Interruption
from .json_report import write_atomic
from .outcomes import TestOutcomes
from .terminal import status, unpoisoned

__all__ = ["HtmlReportError", "render", "write_html", "write_html_for_run"]

_ORDER = {"error": 0, "fail": 1, "skip": 2, "xfailed": 3, "caught": 4, "pass": 5}
_MAX_PLOTS_PER_KIND = 3  # per kernel: distinct configurations drawn before the rest are only tabled
_MAX_DETAILS_CHARS = 20_000
_MAX_SOURCE_CHARS = 240


class HtmlReportError(PipecheckError, OSError):
    """The HTML report could not be written; the message names the path and why."""


# ----------------------------------------------------------------------------- small helpers


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _kernel_of(r: CheckResult) -> str:
    # same rule as the terminal summary: the declared kernel, else the test function's name
    if r.kernel:
        return r.kernel
    name = r.nodeid.rsplit("::", 1)[-1]
    return name.split("[", 1)[0] or "?"


def _check_order(check: str) -> tuple[int, str]:
    base = check.split(":", 1)[0]
    return (CHECKS.index(base) if base in CHECKS else len(CHECKS), check)


def _badge(verdict: Verdict | str, text: str | None = None) -> str:
    """A coloured badge for a verdict, or a status ("caught" for an expected failure)."""
    name = verdict.value if isinstance(verdict, Verdict) else verdict
    return f'<span class="badge v-{name}">{_e(text if text is not None else name)}</span>'


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if out == out and out not in (float("inf"), float("-inf")) else None


def _bytes(n: int | None) -> str:
    if n is None:
        return "–"
    kb, rest = divmod(n, 1024)
    if rest == 0:
        return f"{kb} KB"
    return f"{n / 1024:.1f} KB"


# ----------------------------------------------------------------------------- reading details


def _arch_points(details: Mapping[str, Any]) -> list[plots.ArchPoint]:
    # the occupancy check writes "archs" (Occupancy.to_json() plus "cliff"); "per_arch" is accepted too
    raw = details.get("per_arch", details.get("archs"))
    items: list[tuple[str, Mapping[str, Any]]] = []
    if isinstance(raw, Mapping):
        items = [(str(k), v) for k, v in raw.items() if isinstance(v, Mapping)]
    elif isinstance(raw, Sequence) and not isinstance(raw, (str, bytes)):
        items = [(str(v.get("arch")), v) for v in raw if isinstance(v, Mapping) and v.get("arch")]
    points = []
    for arch, d in items:
        static = _int(d.get("static_smem")) or 0
        dynamic = _int(d.get("dynamic_smem")) or 0
        smem = _int(d.get("smem_per_block"))
        if smem is None:
            # a kernel that could not launch reports what it asked for as "required"
            smem = static + dynamic or _int(d.get("required")) or 0
        blocks = _int(d.get("blocks_per_sm"))
        if blocks is None:
            continue
        limiters = d.get("limiters") or ()
        if isinstance(limiters, str):
            limiters = tuple(p for p in limiters.replace("+", ",").split(",") if p)
        points.append(plots.ArchPoint(
            arch=arch,
            threads=_int(d.get("threads", d.get("threads_per_block"))),
            registers=_int(d.get("registers", d.get("registers_per_thread"))),
            smem_per_block=max(smem, 0),
            blocks_per_sm=blocks,
            opt_in=bool(d.get("opt_in", details.get("opt_in", True))),
            limiters=tuple(str(x) for x in limiters) if isinstance(limiters, Iterable) else (),
            smem_up=_int(d.get("smem_up")),
            smem_down=_int(d.get("smem_down")),
            cliff=str(d["cliff"]) if isinstance(d.get("cliff"), str) else None,
        ))
    return points


def _stage_entries(details: Mapping[str, Any]) -> list[tuple[int, Mapping[str, Any]]]:
    """(stage count, row) of each well-formed row of a stage sweep; odd rows are left out."""
    raw = details.get("stage_sweep")
    if not isinstance(raw, Sequence) or isinstance(raw, (str, bytes)):
        return []
    out = []
    for d in raw:
        if isinstance(d, Mapping):
            stages = _int(d.get("stages"))
            if stages is not None:
                out.append((stages, d))
    return out


def _stage_rows(details: Mapping[str, Any]) -> list[tuple[int, float | None, float | None]]:
    return sorted((s, _float(d.get("measured_us")), _float(d.get("predicted_us"))) for s, d in _stage_entries(details))


def _stage_extras(details: Mapping[str, Any]) -> dict[int, dict[str, Any]]:
    """Per stage count, the optional columns of a stage sweep row (check_stage_sweep writes them)."""
    out: dict[int, dict[str, Any]] = {}
    for stages, d in _stage_entries(details):
        note = d.get("note")
        out[stages] = {
            "q1_us": _float(d.get("q1_us")),
            "q3_us": _float(d.get("q3_us")),
            "blocks_per_sm": _int(d.get("blocks_per_sm")),
            "tflops": _float(d.get("tflops")),
            "note": note if isinstance(note, str) else "",
        }
    return out


def _history_rows(details: Mapping[str, Any]) -> list[tuple[str, float]]:
    raw = details.get("history")
    if not isinstance(raw, Sequence) or isinstance(raw, (str, bytes)):
        return []
    rows = []
    for i, d in enumerate(raw):
        if not isinstance(d, Mapping):
            continue
        median = _float(d.get("median_us"))
        if median is None:
            continue
        rows.append((str(d.get("label") or f"#{i + 1}"), median))
    return rows


def _findings(details: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    raw = details.get("findings")
    if not isinstance(raw, Sequence) or isinstance(raw, (str, bytes)):
        return []
    return [f for f in raw if isinstance(f, Mapping)]


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _source_line(path: Any, line: Any, roots: Sequence[str]) -> str | None:
    """The text of ``path:line`` when the file lies under one of ``roots`` (the session's rootdir).

    A finding names whatever file the tool says; the page embeds a line of it only when the file,
    with every symlink resolved, is inside a root: a report must not carry a line of ``/etc/shadow``
    or of a file a symlink in the checkout points at.
    """
    lineno = _int(line)
    if not isinstance(path, str) or not path or "\0" in path or lineno is None or lineno < 1:
        return None
    real_roots = [os.path.realpath(root) for root in roots]
    candidates = [path] if os.path.isabs(path) else [os.path.join(root, path) for root in real_roots]
    for candidate in candidates:
        real = os.path.realpath(candidate)
        if not any(_under(real, root) for root in real_roots):
            continue
        if os.path.isfile(real):
            candidate = real
            text = linecache.getline(candidate, lineno).rstrip("\n")
            if text:
                return text.strip()[:_MAX_SOURCE_CHARS]
    return None


# ----------------------------------------------------------------------------- page parts

_CSS = """
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       margin: 0; color: #1f2328; background: #ffffff; }
header { background: #24292f; color: #f6f8fa; padding: 16px 28px; }
header h1 { margin: 0 0 6px 0; font-size: 22px; }
header .meta { display: flex; flex-wrap: wrap; gap: 4px 22px; font-size: 13px; }
header .meta b { color: #ffffff; }
main { padding: 8px 28px 40px 28px; max-width: 1320px; }
h2 { border-bottom: 1px solid #d0d7de; padding-bottom: 4px; margin-top: 28px; }
h3 { margin: 18px 0 6px 0; }
table { border-collapse: collapse; margin: 6px 0 12px 0; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
code, pre { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 12px; }
pre { background: #f6f8fa; padding: 8px; overflow-x: auto; max-height: 360px; white-space: pre-wrap; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; color: #ffffff;
         font-weight: 600; font-size: 12px; }
.badge.v-pass { background: #1a7f37; } .badge.v-fail { background: #cf222e; }
.badge.v-skip { background: #9a6700; } .badge.v-error { background: #8250df; }
.badge.v-caught { background: #0969da; } td.v-caught { background: #ddf4ff; }
.badge.v-xfailed { background: #57606a; } td.v-xfailed { background: #f6f8fa; }
td.v-pass { background: #dafbe1; } td.v-fail { background: #ffebe9; }
td.v-skip { background: #fff8c5; } td.v-error { background: #fbefff; }
td.v-none { background: #ffffff; color: #8c959f; }
.cell + .cell { border-top: 1px dashed #d0d7de; margin-top: 3px; padding-top: 3px; }
.banner { padding: 10px 14px; border-radius: 6px; margin: 14px 0; border: 1px solid; }
.banner.warn { background: #fff8c5; border-color: #d4a72c; }
.banner.bad { background: #ffebe9; border-color: #ff8182; }
.banner.good { background: #dafbe1; border-color: #4ac26b; }
.failure { border-left: 4px solid #cf222e; padding: 4px 12px; margin: 10px 0; background: #fffafa; }
.failure.v-error { border-left-color: #8250df; }
.note { color: #57606a; font-style: italic; }
figure { margin: 8px 0 14px 0; }
figure img { max-width: 100%; border: 1px solid #d0d7de; }
figcaption { color: #57606a; font-size: 12px; }
section.kernel { margin-bottom: 30px; }
"""


def _header(results: Sequence[CheckResult], tier: TierInfo, seed: int, run_config: PipecheckConfig | None,
            created: str, outcomes: TestOutcomes | None = None) -> str:
    from .. import __version__

    if tier.device is not None:
        d = tier.device
        where = f"gpu: {d.name} ({d.arch}"
        if d.sm_count:
            where += f", {d.sm_count} SMs"
        if d.driver:
            where += f", driver {d.driver}"
        where += ")"
    else:
        where = f"cpu (no GPU: {tier.reason})" if tier.reason else "cpu"
    versions = [f"pytest-pipecheck {__version__}", f"Python {platform.python_version()}"]
    try:
        import pytest

        versions.append(f"pytest {pytest.__version__}")
    except ImportError:  # pragma: no cover - the plugin runs inside pytest
        pass
    for name, version in tier.backends.items():
        versions.append(f"{name} {version or 'not installed'}")
    totals = Counter(status(r) for r in results)
    badges = " ".join(_badge(v, f"{totals.get(v, 0)} {v}")
                      for v in ("pass", "fail", "skip", "error", "caught", "xfailed")
                      if v not in ("caught", "xfailed") or totals.get(v))
    meta = [
        ("tier", where),
        ("seed", str(seed)),
        ("created", created),
        ("versions", ", ".join(versions)),
    ]
    if run_config is not None:
        meta.append(("checks", ", ".join(run_config.checks) if run_config.enabled else "off (no --pipecheck)"))
        meta.append(("arch", ", ".join(run_config.arch)))
        meta.append(("sanitizer", ", ".join(run_config.sanitizer) or "none"))
        meta.append(("floor", f"{run_config.min_blocks} blocks/SM"))
    # which GPU ran what: under pytest-xdist each worker has its own (every result records its GPU)
    gpus: dict[str, set[str]] = defaultdict(set)
    for r in results:
        gpu = r.details.get("gpu") if isinstance(r.details, Mapping) else None
        if isinstance(gpu, str) and gpu:
            gpus[gpu].add(r.nodeid)
    if gpus:
        meta.append(("ran on", "; ".join(f"{g}: {len(n)} tests" for g, n in sorted(gpus.items()))))
    parts = "".join(f"<span><b>{_e(k)}</b> {_e(v)}</span>" for k, v in meta)
    return (f'<header><h1>pipecheck report</h1><div class="meta">{parts}</div>'
            f'<div class="meta" style="margin-top:8px"><span><b>totals</b> {badges}</span>'
            f"<span>{len(results)} check results, "
            f"{len({_kernel_of(r) for r in results})} kernels, {len({r.nodeid for r in results})} tests</span>"
            "</div>" + _test_totals_line(outcomes) + "</header>")


_TEST_BADGE = {"passed": "pass", "failed": "fail", "error": "error", "crashed": "error", "not run": "error",
               "skipped": "skip", "xfailed": "caught", "xpassed": "pass"}


def _test_totals_line(outcomes: TestOutcomes | None) -> str:
    if outcomes is None:
        return ('<div class="meta" style="margin-top:4px" id="test-totals"><span><b>tests</b> '
                "outcomes not given to this report</span></div>")
    totals = outcomes.totals()
    badges = " ".join(_badge(_TEST_BADGE[o], f"{n} {o}") for o, n in totals.items()
                      if n or o in ("passed", "failed"))
    return (f'<div class="meta" style="margin-top:4px" id="test-totals"><span><b>tests</b> {badges}</span>'
            f"<span>{sum(totals.values())} tests (their own outcomes, checks and all)</span></div>")


def _state_banner(state: str, interrupted: Interruption | None) -> str:
    if state == RUNNING:
        return ('<div class="banner bad" id="run-not-finished"><b>The run did not finish</b> (or is still '
                "running). pipecheck wrote this page when the run started and replaces it when the run ends; "
                "if the run is over, it died before it could write its results (killed, out of memory, a "
                "crash). Nothing here is a pass.</div>")
    if state == INTERRUPTED:
        why = interrupted.describe() if interrupted is not None else "interrupted"
        return (f'<div class="banner bad" id="run-interrupted"><b>The run did not finish: it was {_e(why)}.</b> '
                "What follows are the results of the tests that finished before it; the others are listed "
                "as not run. It did not pass.</div>")
    return ""


def _banners(results: Sequence[CheckResult], tier: TierInfo, seed: int, outcomes: TestOutcomes | None = None,
             exitstatus: int | None = None, state: str = FINISHED) -> str:
    out = []
    # the tests' own outcomes first: a test can pass every check and fail after them
    tests_bad = outcomes.bad() if outcomes is not None else []
    if tests_bad:
        kinds = Counter(t.outcome for t in tests_bad)
        what = ", ".join(f"{n} {o}" for o, n in sorted(kinds.items()))
        out.append(f'<div class="banner bad" id="tests-not-passed"><b>{len(tests_bad)} '
                   f'test{"s" if len(tests_bad) != 1 else ""} did not pass</b> ({_e(what)}); see '
                   '<a href="#tests-failed">Tests that did not pass</a>.</div>')
    elif exitstatus not in (None, 0):
        out.append(f'<div class="banner bad" id="exit-status"><b>The run exited with status {_e(exitstatus)}</b> '
                   "(not 0): it did not pass.</div>")
    if outcomes is not None and state == FINISHED and not tests_bad and json_report.nothing_checked(results, outcomes):
        # every test skipped or xfailed and no check passed: a gate that checked nothing is not a pass
        out.append('<div class="banner bad" id="nothing-checked"><b>Nothing was checked</b>: no test passed and no '
                   "pipecheck check passed (every test skipped, xfailed or none ran). It did not pass.</div>")
    # the run passed as the JSON report's ok and the Markdown's "merge OK" say it did: the page says so too
    run_passed = (outcomes is not None and not tests_bad and exitstatus in (None, 0) and outcomes.ok(exitstatus)
                  and state == FINISHED and not json_report.nothing_checked(results, outcomes)
                  and not any(status(r) in ("fail", "error") for r in results))
    if not results:
        out.append('<div class="banner warn" id="no-results"><b>No pipecheck checks ran.</b> No test recorded '
                   "a check result: did a test use the <code>pipecheck</code> fixture, and was "
                   "<code>--pipecheck</code> (or a <code>pipecheck</code> marker) given?</div>")
        if run_passed:
            out.append('<div class="banner good" id="all-passed"><b>Every test passed</b>; no pipecheck check '
                       "ran.</div>")
        return "".join(out)
    if not tier.has_gpu:
        out.append(f'<div class="banner warn"><b>CPU tier.</b> Checks that need a GPU were skipped, not '
                   f"passed: {_e(tier.reason or 'no usable CUDA device')}.</div>")
    bad = sum(status(r) in ("fail", "error") for r in results)
    if bad:
        out.append(f'<div class="banner bad"><b>{bad} check result{"s" if bad != 1 else ""} did not pass.</b> '
                   f"Reproduce any of them with the run seed <code>--pipecheck-seed={seed}</code>.</div>")
    elif all(status(r) in ("pass", "caught") for r in results):
        if outcomes is None:
            out.append('<div class="banner warn" id="checks-passed"><b>Every check passed</b>, but the tests\' '
                       "own outcomes were not given to this report: it cannot say whether the tests passed.</div>")
        elif not tests_bad and exitstatus in (None, 0) and outcomes.ok(exitstatus) and state == FINISHED:
            out.append('<div class="banner good" id="all-passed"><b>Every test and every check passed.</b></div>')
    elif run_passed:
        skipped = sum(status(r) == "skip" for r in results)
        xfailed = sum(status(r) == "xfailed" for r in results)
        out.append(f'<div class="banner good" id="all-passed"><b>Every test passed, and every check that ran.</b> '
                   f'{skipped} check result{"s" if skipped != 1 else ""} skipped: not run, not passed (see '
                   '<a href="#skipped">Skipped checks</a>).'
                   + (f" {xfailed} check result{'s' if xfailed != 1 else ''} xfailed: in tests their xfail markers "
                      "expect to fail, as pytest counts them." if xfailed else "") + "</div>")
    return "".join(out)


def _tests_section(outcomes: TestOutcomes | None) -> str:
    if outcomes is None:
        return ""
    bad = outcomes.bad()
    if not bad:
        return ""
    rows = "".join(f'<tr><td><code>{_e(t.nodeid)}</code></td><td class="v-{_TEST_BADGE[t.outcome]}">'
                   f"{_e(t.outcome)}</td><td>{_e(t.when)}</td><td>{_e(t.message)}</td></tr>" for t in bad)
    return (f'<h2 id="tests-failed">Tests that did not pass ({len(bad)})</h2>'
            "<table><tr><th>test</th><th>outcome</th><th>phase</th><th>message</th></tr>" + rows + "</table>")


def _details_block(details: Mapping[str, Any], label: str = "details") -> str:
    if not details:
        return ""
    try:
        text = json.dumps(details, indent=1, sort_keys=True, default=str)
    except (TypeError, ValueError):
        text = repr(details)
    if len(text) > _MAX_DETAILS_CHARS:
        text = text[:_MAX_DETAILS_CHARS] + f"\n... ({len(text) - _MAX_DETAILS_CHARS} more characters)"
    return f"<details><summary>{_e(label)}</summary><pre>{_e(text)}</pre></details>"


def _failures(results: Sequence[CheckResult], seed: int) -> str:
    bad = sorted((r for r in results if status(r) in ("fail", "error")),
                 key=lambda r: (_ORDER[status(r)], r.nodeid, r.check))
    if not bad:
        return ""
    # one block per distinct (status, check, summary): an inconclusive tool on 80 tests is one
    # finding, listed with its tests, not 80 identical blocks
    groups: dict[tuple[str, str, str], list[CheckResult]] = {}
    for r in bad:
        groups.setdefault((status(r), r.check, r.summary), []).append(r)
    items = []
    for (_, check, summary), group in groups.items():
        r = group[0]
        message = r.details.get("message") if isinstance(r.details, Mapping) else None
        msg = f"<pre>{_e(message)}</pre>" if isinstance(message, str) and message.strip() else ""
        reproduce = shell_line(rerun_argv(r.nodeid, seed)) if r.nodeid else ""
        where = f"in <code>{_e(r.nodeid or '?')}</code>"
        if len(group) > 1:
            tests = "".join(f"<div><code>{_e(g.nodeid or '?')}</code></div>" for g in group)
            where = (f"in {len(group)} tests <details><summary>tests</summary>{tests}</details>"
                     f"first: <code>{_e(r.nodeid or '?')}</code>")
        items.append(
            f'<div class="failure v-{r.verdict.value}">{_badge(r.verdict)} <b>{_e(check)}</b> '
            f"on <b>{_e(_kernel_of(r))}</b> {where}"
            f"<div>{_e(summary)}</div>{msg}"
            + (f"<div>reproduce: <code>{_e(reproduce)}</code></div>" if reproduce else "")
            + _details_block(r.details)
            + "</div>"
        )
    return f'<h2 id="not-passed">Not passed ({len(bad)})</h2>' + "".join(items)


def _skips(results: Sequence[CheckResult]) -> str:
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for r in results:
        if r.verdict == Verdict.SKIP:
            groups[(r.check, r.summary)].append(r.nodeid)
    if not groups:
        return ""
    rows = []
    for (check, reason), nodeids in sorted(groups.items(), key=lambda kv: (_check_order(kv[0][0]), kv[0][1])):
        tests = "".join(f"<div><code>{_e(n)}</code></div>" for n in sorted(set(nodeids)))
        rows.append(f'<tr><td class="v-skip">{_e(check)}</td><td class="num">{len(nodeids)}</td>'
                    f"<td>{_e(reason)}<details><summary>tests</summary>{tests}</details></td></tr>")
    return ('<h2 id="skipped">Skipped checks (not run, not passed)</h2>'
            "<table><tr><th>check</th><th>count</th><th>reason</th></tr>" + "".join(rows) + "</table>")


def _unpoisoned(results: Sequence[CheckResult]) -> str:
    """Outputs whose coverage could not look for unwritten elements (zeroed, initialized by the wrapper, not
    intercepted, inouts): a weaker check than the poisoned one, so it is listed, not folded into the passes."""
    weak = unpoisoned(results)
    if not weak:
        return ""
    rows = []
    for (kernel, output, why), nodeids in sorted(weak.items()):
        tests = "".join(f"<div><code>{_e(n)}</code></div>" for n in sorted(set(nodeids)))
        rows.append(f'<tr><td class="v-skip">{_e(kernel)}</td><td><code>{_e(output)}</code></td>'
                    f'<td class="num">{len(nodeids)}</td>'
                    f"<td>{_e(why)}<details><summary>tests</summary>{tests}</details></td></tr>")
    return ('<h2 id="unpoisoned">Coverage without the unwritten-element check</h2>'
            "<p>These outputs do not start poisoned, so an element the kernel never wrote cannot be told from "
            "a written one: it is found only where the reference differs from the starting value.</p>"
            "<table><tr><th>kernel</th><th>output</th><th>tests</th><th>why</th></tr>" + "".join(rows) + "</table>")


def _verdict_table(results: Sequence[CheckResult]) -> str:
    checks = sorted({r.check for r in results}, key=_check_order)
    by_test: dict[str, dict[str, list[CheckResult]]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        by_test[r.nodeid][r.check].append(r)
    head = "<tr><th>test</th>" + "".join(f"<th>{_e(c)}</th>" for c in checks) + "</tr>"
    rows = []
    for nodeid in sorted(by_test):
        cells = []
        for check in checks:
            group = by_test[nodeid].get(check)
            if not group:
                cells.append('<td class="v-none">–</td>')
                continue
            worst = min(group, key=lambda r: _ORDER[status(r)])
            inner = "".join(f'<div class="cell">{_badge(status(r))} {_e(r.summary)}</div>' for r in group)
            cells.append(f'<td class="v-{status(worst)}">{inner}</td>')
        rows.append(f"<tr><td><code>{_e(nodeid or '?')}</code></td>{''.join(cells)}</tr>")
    return f'<table class="verdicts">{head}{"".join(rows)}</table>'


def _figure(png: bytes, alt: str, caption: str) -> str:
    return (f'<figure><img src="{plots.data_uri(png)}" alt="{_e(alt)}">'
            f"<figcaption>{_e(caption)}</figcaption></figure>")


def _plot(draw: Any, alt: str, caption: str, missing: str | None) -> str:
    if missing:
        return f'<p class="note">{_e(missing)}</p>'
    try:
        png = draw()
    except Exception as exc:  # a plot must never cost the report
        return f'<p class="note">plot not drawn ({_e(type(exc).__name__)}: {_e(exc)}); the table has the data</p>'
    return _figure(png, alt, caption)


def _occupancy_section(results: Sequence[CheckResult], missing: str | None) -> str:
    seen: list[tuple[Any, ...]] = []
    parts = []
    omitted = 0
    for r in results:
        points = _arch_points(r.details)
        if not points:
            continue
        floor = _int(r.details.get("floor", r.details.get("min_blocks")))
        key = (tuple(points), floor)
        if key in seen:
            continue
        seen.append(key)
        if len(seen) > _MAX_PLOTS_PER_KIND:
            omitted += 1
            continue
        rows = []
        for p in points:
            cliffs = [p.cliff] if p.cliff else []
            if not cliffs and p.smem_up is not None:
                cliffs.append(f"≤ {_bytes(p.smem_up)} for {p.blocks_per_sm + 1}")
            if not p.cliff and p.smem_down is not None:
                cliffs.append(f"≥ {_bytes(p.smem_down)} drops to {max(p.blocks_per_sm - 1, 0)}")
            low = floor is not None and p.blocks_per_sm < floor
            cls = ' class="v-fail"' if low else ""
            rows.append(
                f"<tr><td>{_e(p.arch)}</td><td class=\"num\">{_e(p.threads if p.threads is not None else '–')}</td>"
                f"<td class=\"num\">{_e(p.registers if p.registers is not None else '–')}</td>"
                f'<td class="num">{_e(_bytes(p.smem_per_block))}</td>'
                f'<td class="num"{cls}>{p.blocks_per_sm}</td><td>{_e(", ".join(p.limiters) or "–")}</td>'
                f"<td>{_e('; '.join(cliffs) or '–')}</td></tr>")
        table = ("<table><tr><th>arch</th><th>threads</th><th>registers</th><th>smem/block</th>"
                 "<th>blocks/SM</th><th>limited by</th><th>cliffs</th></tr>" + "".join(rows) + "</table>")
        title = f"{r.nodeid}" + (f" (floor {floor} blocks/SM)" if floor else "")
        alt = "occupancy: " + ", ".join(f"{p.arch} {p.blocks_per_sm} blocks/SM at {_bytes(p.smem_per_block)}"
                                        for p in points)
        plot = _plot(lambda pts=points, fl=floor: plots.occupancy_plot(pts, floor=fl), alt,
                     "blocks per SM against shared memory per block; the dot is this kernel, dashed lines "
                     "its cliffs", missing)
        parts.append(f"<h4>{_e(title)}</h4>{table}{plot}")
    if not parts:
        return ""
    more = f'<p class="note">{omitted} more configurations not drawn.</p>' if omitted else ""
    return '<h3 class="occupancy">Occupancy per architecture</h3>' + "".join(parts) + more


_R = TypeVar("_R", bound=Sequence[Any])


def _plotted(results: Sequence[CheckResult],
             rows_of: Callable[[Mapping[str, Any]], _R]) -> Iterator[tuple[CheckResult, _R]]:
    """(result, its rows) for the results that have rows to show, at most _MAX_PLOTS_PER_KIND of them."""
    shown = 0
    for r in results:
        rows = rows_of(r.details)
        if not rows:
            continue
        if shown >= _MAX_PLOTS_PER_KIND:
            break
        shown += 1
        yield r, rows


def _stage_section(results: Sequence[CheckResult], missing: str | None) -> str:
    parts: list[str] = []
    for r, rows in _plotted(results, _stage_rows):
        extras = _stage_extras(r.details)
        chosen = _int(r.details.get("chosen"))
        best = _int(r.details.get("best_stages"))

        def has(key: str, ex: dict[int, dict[str, Any]] = extras) -> bool:
            return any(e.get(key) not in (None, "") for e in ex.values())

        show_spread, show_blocks, show_tflops = has("q1_us") and has("q3_us"), has("blocks_per_sm"), has("tflops")
        show_note = has("note") or chosen is not None or best is not None
        head = "<tr><th>stages</th><th>measured (µs)</th><th>predicted (µs)</th>"
        head += "<th>q1 – q3 (µs)</th>" if show_spread else ""
        head += "<th>blocks/SM</th>" if show_blocks else ""
        head += "<th>TFLOP/s</th>" if show_tflops else ""
        head += "<th>note</th>" if show_note else ""
        body = []
        for s, m, p in rows:
            e = extras.get(s, {})
            cells = (f"<td class=\"num\">{s}</td><td class=\"num\">{_e(f'{m:.2f}' if m is not None else '–')}</td>"
                     f"<td class=\"num\">{_e(f'{p:.2f}' if p is not None else '–')}</td>")
            if show_spread:
                q1, q3 = e.get("q1_us"), e.get("q3_us")
                spread = f"{q1:.2f} – {q3:.2f}" if q1 is not None and q3 is not None else "–"
                cells += f'<td class="num">{_e(spread)}</td>'
            if show_blocks:
                b = e.get("blocks_per_sm")
                cells += f'<td class="num">{_e(b if b is not None else "–")}</td>'
            if show_tflops:
                t = e.get("tflops")
                cells += f'<td class="num">{_e(f"{t:.1f}" if t is not None else "–")}</td>'
            if show_note:
                marks = ", ".join(w for w, on in (("best", s == best), ("chosen", s == chosen)) if on)
                note = "; ".join(x for x in (marks, e.get("note") or "") if x)
                fail = ' class="v-fail"' if (s == chosen and r.verdict == Verdict.FAIL) else ""
                cells += f"<td{fail}>{_e(note or '–')}</td>"
            body.append(f"<tr>{cells}</tr>")
        table = "<table>" + head + "</tr>" + "".join(body) + "</table>"
        blocks = {s: e["blocks_per_sm"] for s, e in extras.items() if e.get("blocks_per_sm") is not None}
        no_fit = [s for s, m, _ in rows if m is None and "does not fit" in extras.get(s, {}).get("note", "")]
        plot = _plot(lambda rw=rows, bl=blocks, ch=chosen, nf=no_fit: plots.stage_sweep_plot(
            rw, blocks_per_sm=bl or None, chosen=ch, no_fit=nf), "stage sweep: " + ", ".join(
            f"{s} stages {f'{m:.1f}' if m is not None else '?'} us" for s, m, _ in rows),
            "time against stage count, measured and cost-model predicted"
            + ("; bars: blocks per SM" if blocks else ""), missing)
        title = r.nodeid
        loss = _float(r.details.get("loss"))
        if best is not None:
            title += f" (best {best} stages" + (f", chosen {chosen}" if chosen is not None else "")
            title += (f": {loss:+.1%}" if loss is not None and chosen is not None else "") + ")"
        parts.append(f"<h4>{_e(title)}</h4>{table}{plot}")
    return '<h3 class="stage-sweep">Stage sweep</h3>' + "".join(parts) if parts else ""


def _history_section(results: Sequence[CheckResult], missing: str | None) -> str:
    parts: list[str] = []
    for r, rows in _plotted(results, _history_rows):
        current = _float(r.details.get("median_us"))
        body = "".join(f"<tr><td>{_e(label)}</td><td class=\"num\">{m:.2f}</td></tr>" for label, m in rows)
        if current is not None:
            body += f'<tr><td><b>this run</b></td><td class="num"><b>{current:.2f}</b></td></tr>'
        table = "<table><tr><th>baseline</th><th>median (µs)</th></tr>" + body + "</table>"
        plot = _plot(lambda rw=rows, c=current: plots.history_plot(rw, current=c),
                     "baseline history: " + ", ".join(f"{lbl} {m:.2f} us" for lbl, m in rows),
                     "median time of each recorded baseline, and this run", missing)
        parts.append(f"<h4>{_e(r.nodeid)}</h4>{table}{plot}")
    return '<h3 class="history">Baseline history</h3>' + "".join(parts) if parts else ""


def _perf_section(results: Sequence[CheckResult], missing: str | None) -> str:
    rows = []
    bars: list[tuple[str, float, bool]] = []
    threshold: float | None = None
    for r in results:
        d = r.details
        median = _float(d.get("median_us"))
        if r.check != "perf" or median is None:
            continue
        base = _float(d.get("baseline_median_us"))
        change = _float(d.get("change"))
        if change is None and base:
            change = median / base - 1.0
        p_value = _float(d.get("p_value"))
        q1, q3 = _float(d.get("q1_us")), _float(d.get("q3_us"))
        spread = f"{q1:.2f} – {q3:.2f}" if q1 is not None and q3 is not None else "–"
        label = r.nodeid + (f" [{d['case']}]" if d.get("case") not in (None, "", "default") else "")
        rows.append(
            f'<tr><td><code>{_e(label)}</code></td><td class="num">{median:.2f}</td><td class="num">{_e(spread)}</td>'
            f'<td class="num">{_e(f"{base:.2f}" if base is not None else "–")}</td>'
            f'<td class="num v-{r.verdict.value}">{_e(f"{change:+.1%}" if change is not None else "–")}</td>'
            f'<td class="num">{_e(f"{p_value:.2g}" if p_value is not None else "–")}</td></tr>')
        if change is not None:
            bars.append((label, change, r.verdict == Verdict.FAIL))
            threshold = _float(d.get("threshold")) if threshold is None else threshold
    if not rows:
        return ""
    table = ("<table><tr><th>test</th><th>median (µs)</th><th>q1 – q3 (µs)</th><th>baseline median (µs)</th>"
             "<th>change</th><th>p-value</th></tr>" + "".join(rows) + "</table>")
    plot = ""
    if bars:
        plot = _plot(lambda: plots.perf_change_plot(bars, threshold=threshold),
                     "time against baseline: " + ", ".join(f"{lbl} {c:+.1%}" for lbl, c, _ in bars[:10]),
                     "median time against the stored baseline; red bars failed the gate", missing)
    return '<h3 class="perf">Time against baseline</h3>' + table + plot


def _findings_section(results: Sequence[CheckResult], roots: Sequence[str]) -> str:
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in results:
        for f in _findings(r.details):
            kind = str(f.get("kind") or "?")
            if f.get("hazard"):
                kind = f"{f.get('hazard')} {kind}"
            key = (str(f.get("tool") or r.details.get("tool") or r.check), kind, f.get("kernel"),
                   f.get("file"), f.get("line"), f.get("second_file"), f.get("second_line"))
            entry = merged.setdefault(key, {"count": 0, "tests": set(), "message": f.get("message")})
            entry["count"] += max(_int(f.get("count")) or 1, 1)
            entry["tests"].add(r.nodeid)
    if not merged:
        return ""
    rows = []
    for (tool, kind, kernel, file, line, file2, line2), entry in sorted(
            merged.items(), key=lambda kv: -kv[1]["count"]):
        where = f"{file}:{line}" if file else "?"
        source = _source_line(file, line, roots)
        src = f"<pre>{_e(source)}</pre>" if source else '<span class="note">source not found here</span>'
        if file2:
            where2 = f"{file2}:{line2}"
            source2 = _source_line(file2, line2, roots)
            src += f"<div>with <code>{_e(where2)}</code></div>"
            if source2:
                src += f"<pre>{_e(source2)}</pre>"
        rows.append(f'<tr><td class="v-fail">{_e(kind)}</td><td>{_e(tool)}</td><td><code>{_e(kernel or "?")}'
                    f'</code></td><td><code>{_e(where)}</code></td><td class="num">{entry["count"]}</td>'
                    f"<td>{src}</td><td>{len(entry['tests'])}</td></tr>")
    return ('<h3 class="findings">Sanitizer findings</h3><table><tr><th>kind</th><th>tool</th><th>kernel</th>'
            "<th>location</th><th>count</th><th>source line</th><th>tests</th></tr>" + "".join(rows) + "</table>")


def _kernel_sections(results: Sequence[CheckResult], missing: str | None, roots: Sequence[str]) -> str:
    by_kernel: dict[str, list[CheckResult]] = defaultdict(list)
    for r in results:
        by_kernel[_kernel_of(r)].append(r)
    out = []
    for i, kernel in enumerate(sorted(by_kernel)):
        group = by_kernel[kernel]
        counts = Counter(status(r) for r in group)
        badges = " ".join(_badge(v, f"{counts[v]} {v}") for v in sorted(counts, key=lambda v: _ORDER[v]))
        worst = status(min(group, key=lambda r: _ORDER[status(r)]))
        out.append(
            f'<section class="kernel v-{worst}" id="kernel-{i}"><h2>{_e(kernel)} {badges}</h2>'
            + _verdict_table(group)
            + _occupancy_section(group, missing)
            + _perf_section(group, missing)
            + _stage_section(group, missing)
            + _history_section(group, missing)
            + _findings_section(group, roots)
            + "</section>"
        )
    return "".join(out)


# ----------------------------------------------------------------------------- public API


def render(results: Iterable[CheckResult], tier: TierInfo, seed: int, run_config: PipecheckConfig | None = None,
           *, created: str | None = None, source_roots: Sequence[str] | None = None,
           outcomes: TestOutcomes | None = None, exitstatus: int | None = None, state: str = FINISHED,
           interrupted: Interruption | None = None) -> str:
    """The report page for ``results`` as one HTML string (no external resources).

    ``created`` overrides the timestamp (for reproducible output); ``source_roots`` are the
    directories sanitizer file names are looked up in, and the only ones a source line is embedded
    from (default: the working directory; the plugin gives the session's rootdir). ``outcomes``
    (the tests' own outcomes) and ``exitstatus`` decide the headline with the check results: the
    page says "every test and every check passed" only when both say so, and the run finished. ``state``
    (:data:`.interrupt.STATES`) and ``interrupted`` say whether it did: a run that did not finish says so
    first; the page for one still ``running`` says nothing else. Plots are drawn when matplotlib is
    importable; otherwise the page says so.
    """
    if state not in STATES:
        raise ValueError(f"unknown run state {state!r}: expected one of {', '.join(STATES)}")
    results = list(results)
    created = created or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    roots = list(source_roots) if source_roots is not None else [os.getcwd()]
    missing = plots.missing_reason() if results else None
    note = f'<div class="banner warn" id="no-matplotlib">{_e(missing)}</div>' if missing and any(
        _arch_points(r.details) or _stage_rows(r.details) or _history_rows(r.details)
        or (r.check == "perf" and "median_us" in r.details) for r in results) else ""
    if state == RUNNING:
        body = _header(results, tier, seed, run_config, created, outcomes) + "<main>" + \
            _state_banner(state, interrupted) + "</main>"
    else:
        body = (
            _header(results, tier, seed, run_config, created, outcomes)
            + "<main>"
            + _state_banner(state, interrupted)
            + _banners(results, tier, seed, outcomes, exitstatus, state)
            + note
            + _tests_section(outcomes)
            + _failures(results, seed)
            + _skips(results)
            + _unpoisoned(results)
            + _kernel_sections(results, missing, roots)
            + "</main>"
        )
    title = _title_counts(results, outcomes)
    if state == RUNNING:
        title = "run not finished"
    elif state == INTERRUPTED:
        title = f"run not finished ({interrupted.describe() if interrupted is not None else 'interrupted'}); {title}"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>pipecheck report: {_e(title)}</title><style>{_CSS}</style></head>"
            f"<body>{body}</body></html>\n")


def _title_counts(results: Sequence[CheckResult], outcomes: TestOutcomes | None = None) -> str:
    totals = Counter(status(r) for r in results)
    checks = ", ".join(f"{totals.get(v, 0)} {v}" for v in ("pass", "fail", "skip", "error"))
    if outcomes is None:
        return checks
    bad = len(outcomes.bad())
    return (f"{bad} test{'s' if bad != 1 else ''} not passed; " if bad else "") + checks


def write_html(path: str | os.PathLike[str], results: Iterable[CheckResult], tier: TierInfo, seed: int,
               run_config: PipecheckConfig | None = None, *, outcomes: TestOutcomes | None = None,
               exitstatus: int | None = None, source_roots: Sequence[str] | None = None, state: str = FINISHED,
               interrupted: Interruption | None = None) -> None:
    """Write the self-contained HTML report to ``path``, atomically.

    An empty ``results`` still writes a page, which says that no checks ran. Raises
    :class:`HtmlReportError` (an ``OSError``) naming the path when it is a directory or cannot be
    written, or names a symlink, FIFO, device or anything but a regular file; nothing is left
    half-written. ``outcomes``, ``exitstatus``, ``source_roots``, ``state`` and ``interrupted`` are passed
    to :func:`render`.
    """
    target = os.fspath(path)
    if not target.strip():
        raise HtmlReportError("cannot write the HTML report: the path is empty")
    if os.path.isdir(target):
        raise HtmlReportError(f"cannot write the HTML report to {target!r}: it is a directory; give a file "
                              "name such as report.html")
    page = render(results, tier, seed, run_config, outcomes=outcomes, exitstatus=exitstatus,
                  source_roots=source_roots, state=state, interrupted=interrupted)
    try:
        write_atomic(target, page)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise HtmlReportError(f"cannot write the HTML report to {target!r}: {reason}") from exc
    _readable(target)


def _readable(path: str) -> None:
    # the temporary file behind the atomic write is created 0600; a report is for sharing (CI
    # artifacts, a web server), so give it the mode a plain open() would have
    umask = _umask()
    try:
        os.chmod(path, 0o666 & ~umask)
    except OSError:  # the report is written; its mode is a nicety
        pass


def _umask() -> int:
    # read, not set-and-restore: os.umask() changes the whole process for a moment
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def write_html_for_run(path: str | os.PathLike[str], results: Iterable[CheckResult], tier: TierInfo, seed: int,
                       run_config: PipecheckConfig | None = None, *, outcomes: TestOutcomes | None = None,
                       exitstatus: int | None = None,
                       source_roots: Sequence[str] | None = None, state: str = FINISHED,
                       interrupted: Interruption | None = None) -> tuple[bool, str]:
    """Write the report at the end of a run; never raises. Returns (written, the line to show).

    The plugin calls this from ``pytest_sessionfinish``: a report that cannot be written (or a bug
    in drawing it) is one red line after the results, never a traceback that hides them; the
    plugin then makes the run's exit status non-zero.
    """
    results = list(results)
    target = os.fspath(path)
    try:
        write_html(target, results, tier, seed, run_config, outcomes=outcomes, exitstatus=exitstatus,
                   source_roots=source_roots, state=state, interrupted=interrupted)
    except HtmlReportError as exc:
        return False, f"pipecheck: {exc}"
    except Exception as exc:  # a bug in the report must not cost the run its results
        return False, f"pipecheck: could not write the HTML report to {target!r}: {type(exc).__name__}: {exc}"
    if state == RUNNING:
        return True, f"pipecheck: HTML report at {target} marked as in progress until the run ends"
    if not results:
        return True, (f"pipecheck: HTML report written to {target} (no pipecheck checks ran; "
                      "the page says so)")
    return True, f"pipecheck: HTML report written to {target} ({len(results)} check results)"
