"""The HTML report's parts about the run as a whole, in the order the page shows them: the header (tier,
seed, versions, configuration, totals), the banners (a run that did not finish, tests that did not pass,
nothing checked, the headline), the tests that did not pass, the check results that did not pass (each with
its message and the command that reproduces it), the skipped checks with their reasons, and the outputs whose
coverage could not look for unwritten elements.
"""

from __future__ import annotations

import json
import platform
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from ..config import PipecheckConfig
from ..device import TierInfo
from ..reproduce import rerun_argv, shell_line
from ..results import CheckResult, Verdict
from . import json_report
from .html_markup import _ORDER, _badge, _check_order, _e, _kernel_of
from .interrupt import FINISHED, INTERRUPTED, RUNNING, Interruption
from .outcomes import TestOutcomes
from .terminal import status, unpoisoned

_MAX_DETAILS_CHARS = 20_000


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
