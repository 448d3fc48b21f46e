"""``--pipecheck-markdown PATH`` and GitHub's job summary: the merge verdict as a reviewer reads it in CI.

The first line is the verdict, and nothing else::

    ✅ pipecheck: merge OK — 412 checks passed, 37 skipped
    ❌ pipecheck: do not merge — 2 failing checks, 1 inconclusive check
    ❌ pipecheck: do not merge — the run was interrupted by SIGTERM before it finished
    ❌ pipecheck: do not merge — the run has not finished

"merge OK" is written only where the JSON report's ``ok`` is true: the run finished (``state`` is
``"finished"``), at least one test ran, no test failed, errored, crashed its worker or was left unrun,
no check result is a fail or an error, something was checked (a test or a check passed: a run in which
every test skipped or xfailed reads "do not merge — nothing was checked: ..." with the counts and the
first reasons), and the exit status is 0. Where every check skipped but tests passed (the CPU tier),
the line says so: "merge OK — 3 tests passed; 0 checks passed, 5 skipped". The JSON report's ``reason``
is this line's text after "do not merge —". The text is rendered from the very
document :func:`.json_report.build` makes, so the two reports cannot disagree. Every verdict that is
not "merge OK" starts with ``❌ pipecheck: do not merge —``; an inconclusive check is one whose verdict
is ``error`` (the check could not reach a verdict: a crashed sanitizer child, a compile error).

Then, each section only when it has something to say: the run's facts (tier, device, seed, exit
status, the tests' and the checks' totals); the failing and inconclusive checks with their messages
(one entry per distinct check and message, with its tests; a long message folded in a ``<details>``
block); the other tests that did not pass; the perf deltas against the base with their confidence
intervals; the skipped checks and skipped tests, grouped by reason with counts; the reports that
could not be written. Every list is bounded (the JSON report has everything), so the text stays far
below the 1 MiB GitHub accepts for one step's summary.

The perf rows come from a ``perf`` result's details. A comparison with another revision timed in the
same job (compare mode) is read from ``details["compare"]`` when that is a mapping, else from the
details themselves: ``base_median_us`` and ``head_median_us`` (both needed), ``ratio`` (head / base;
computed from the medians when absent), ``ci_low`` and ``ci_high`` (the confidence interval of the
ratio, as :mod:`~pytest_pipecheck.perf.stats` writes it) or ``ci`` (``[low, high]``), ``p_value``,
``rev`` (or ``base_rev``), ``decision``. Without them the stored-baseline gate's numbers are used:
``baseline_median_us``, ``median_us``, ``ratio``/``change``, ``ci_low``/``ci_high``, ``p_value``,
``regressed``. Every field is optional and read defensively: a row shows what is there.

GitHub Actions appends a step's summary from the file ``$GITHUB_STEP_SUMMARY`` names. When that
variable is set, the report writer appends the same text there (:class:`StepSummary`), besides
``--pipecheck-markdown`` when both are given. The text written when the run starts ("has not
finished") is replaced by the final one, as long as nothing was appended after it meanwhile;
otherwise the final text is appended below it.
"""

from __future__ import annotations

import html
import math
import os
import re
import stat
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .._atomic import refuse_non_regular
from ..device import TierInfo
from ..reproduce import rerun_argv, shell_line
from ..results import CheckResult, Verdict
from .interrupt import FINISHED, INTERRUPTED, RUNNING, Interruption
from .json_report import build, write_atomic
from .merge_verdict import (
    bad_check_nodeids,
    clip,
    interruption_words,
    markdown_text,
    other_bad_tests,
    plural,
    results_of,
    tests_of,
    verdict_line,
)
from .outcomes import TestOutcomes
from .terminal import status

__all__ = ["STEP_SUMMARY_ENV", "StepSummary", "render", "render_document", "verdict_line", "write"]

#: the variable GitHub Actions sets to the file of the running step's job summary
STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"


_MAX_FAILURE_GROUPS = 30
_MAX_TESTS_PER_GROUP = 20
_MAX_TEST_ROWS = 30
_MAX_PERF_ROWS = 40
_MAX_SKIP_ROWS = 30
_MAX_MESSAGE_CHARS = 4000
_MAX_CELL_CHARS = 300
_SHORT_MESSAGE = 200  # a one-line message up to this long is shown inline, not folded


# ----------------------------------------------------------------------------- escaping


def _code(value: Any, *, table: bool = False) -> str:
    """``value`` as an inline code span, whatever backticks it holds; in a table, pipes escaped (GitHub
    splits cells before it reads code spans)."""
    s = " ".join(str(value).split())
    longest = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * (longest + 1)
    if s.startswith("`") or s.endswith("`") or not s:
        s = f" {s} "
    if table:
        s = s.replace("|", "\\|")
    return f"{fence}{s}{fence}"


def _fenced(text: str) -> str:
    """``text`` as a fenced code block, the fence longer than any run of backticks in it."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text.rstrip()}\n{fence}"


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


# ----------------------------------------------------------------------------- the verdict


# ----------------------------------------------------------------------------- sections


def _facts(doc: Mapping[str, Any], results: Sequence[CheckResult]) -> list[str]:
    tier = _mapping(doc.get("tier"))
    device = _mapping(tier.get("device"))
    if device:
        cc = str(device.get("compute_capability") or "")
        arch = f"sm_{cc.replace('.', '')}" if cc else "?"
        where = f"tier gpu ({device.get('name', '?')}, {arch}, driver {device.get('driver') or '?'})"
    else:
        where = f"tier cpu (GPU checks skipped: {tier.get('reason') or 'no usable CUDA device'})"
    parts = [markdown_text(where), f"seed {_code(doc.get('seed'))}"]
    exitstatus = doc.get("exitstatus")
    parts.append(f"exit status {exitstatus}" if exitstatus is not None else "no exit status yet")
    revs = sorted({rev for r in results if (rev := _compare(r.details).get("rev"))})
    if revs:
        parts.append("perf compared with " + ", ".join(_code(rev) for rev in revs))
    lines = [" · ".join(parts), ""]
    totals = doc.get("test_totals")
    counted = []
    if isinstance(totals, Mapping):
        tests = ", ".join(f"{n} {o}" for o, n in totals.items() if n)
        counted.append(f"**Tests:** {tests or 'none'}")
    checks = Counter(status(r) for r in results)
    if results:
        words = {"pass": "pass", "fail": "fail", "error": "inconclusive", "skip": "skip",
                 "caught": "caught (mutants)", "xfailed": "xfailed (xfail markers)"}
        shown = ", ".join(f"{checks[k]} {w}" for k, w in words.items() if checks[k])
        counted.append(f"**Checks:** {shown}")
    else:
        counted.append("**Checks:** none ran (no test recorded a pipecheck check result)")
    lines.append(" · ".join(counted))
    return lines


def _details_block(summary: str, body: str) -> list[str]:
    return [f"<details><summary>{html.escape(summary)}</summary>", "", body, "", "</details>"]


def _failures(results: Sequence[CheckResult], seed: Any) -> list[str]:
    bad = [r for r in results if status(r) in ("fail", "error")]
    if not bad:
        return []
    groups: dict[tuple[str, str, str], list[CheckResult]] = {}
    for r in sorted(bad, key=lambda r: (status(r) != "fail", r.nodeid, r.check)):
        groups.setdefault((status(r), r.check, r.summary), []).append(r)
    fails = sum(status(r) == "fail" for r in bad)
    errors = len(bad) - fails
    title = " and ".join(p for p in (plural(fails, "failing check") if fails else "",
                                     plural(errors, "inconclusive check") if errors else "") if p)
    out = [f"#### {title}", ""]
    for (verdict, check, summary), group in list(groups.items())[:_MAX_FAILURE_GROUPS]:
        r = group[0]
        label = "FAIL" if verdict == "fail" else "INCONCLUSIVE"
        kernel = f" on {_code(r.kernel)}" if r.kernel else ""
        where = f"in {_code(r.nodeid or '?')}" if len(group) == 1 else \
            f"in {len(group)} tests, first {_code(r.nodeid or '?')}"
        head = clip(summary, _MAX_CELL_CHARS) if len(summary) <= _SHORT_MESSAGE else \
            clip(summary.splitlines()[0] if summary.strip() else "", _SHORT_MESSAGE)
        out.append(f"**{label}** {_code(check)}{kernel} {where}: {markdown_text(head)}")
        message = r.details.get("message")
        long_text = (message.strip() if isinstance(message, str) else "") or (summary if len(summary) > _SHORT_MESSAGE or "\n" in summary else "")
        if long_text:
            lines = long_text.count("\n") + 1
            out += ["", *_details_block(f"message ({plural(lines, 'line')})",
                                        _fenced(clip(long_text, _MAX_MESSAGE_CHARS)))]
        if len(group) > 1:
            shown = "\n".join(f"- {_code(g.nodeid or '?')}" for g in group[:_MAX_TESTS_PER_GROUP])
            rest = len(group) - _MAX_TESTS_PER_GROUP
            if rest > 0:
                shown += f"\n- … and {rest} more (the JSON report lists every one)"
            out += ["", *_details_block(f"the {len(group)} tests", shown)]
        if r.nodeid:
            out += ["", f"reproduce: {_code(shell_line(rerun_argv(r.nodeid, seed)))}"]
        out.append("")
    rest = len(groups) - _MAX_FAILURE_GROUPS
    if rest > 0:
        out += [f"… and {rest} more distinct failures: the JSON and HTML reports have every one.", ""]
    return out


def _other_tests(doc: Mapping[str, Any], results: Sequence[CheckResult]) -> list[str]:
    others = other_bad_tests(doc, results)
    if not others:
        return []
    besides = " besides the checks above" if bad_check_nodeids(results) else ""
    out = [f"#### {plural(len(others), 'test')} did not pass{besides}", "",
           "| test | outcome | phase | message |", "|---|---|---|---|"]
    for t in others[:_MAX_TEST_ROWS]:
        out.append(f"| {_code(t.get('nodeid') or '?', table=True)} | {markdown_text(t.get('outcome', '?'))} | "
                   f"{markdown_text(t.get('when') or '–')} | {markdown_text(clip(str(t.get('message') or ''), _MAX_CELL_CHARS))} |")
    if len(others) > _MAX_TEST_ROWS:
        out.append(f"| … and {len(others) - _MAX_TEST_ROWS} more | | | the JSON report lists every one |")
    return [*out, ""]


def _compare(details: Mapping[str, Any]) -> dict[str, Any]:
    """A comparison with another revision timed in this job, from compare mode's details (see the module's
    docstring); empty when there is none."""
    source = _mapping(details.get("compare")) or details
    base, head = _float(source.get("base_median_us")), _float(source.get("head_median_us"))
    if base is None or head is None:
        return {}
    ratio = _float(source.get("ratio"))
    if ratio is None and base > 0:
        ratio = head / base
    low, high = _float(source.get("ci_low")), _float(source.get("ci_high"))
    ci = source.get("ci")
    if (low is None or high is None) and isinstance(ci, (list, tuple)) and len(ci) == 2:
        low, high = _float(ci[0]), _float(ci[1])
    rev = source.get("rev") or source.get("base_rev")
    decision = source.get("decision")
    return {"base": base, "head": head, "ratio": ratio, "ci": (low, high), "p": _float(source.get("p_value")),
            "rev": str(rev) if rev else None, "decision": str(decision) if decision else None}


def _stored(details: Mapping[str, Any]) -> dict[str, Any]:
    """The stored-baseline gate's comparison (perf/gate.py); empty when the check compared nothing."""
    base = _float(details.get("baseline_median_us"))
    head = _float(details.get("candidate_median_us"))
    head = head if head is not None else _float(details.get("median_us"))
    if base is None or head is None:
        return {}
    ratio = _float(details.get("ratio"))
    change = _float(details.get("change"))
    if ratio is None:
        ratio = change + 1.0 if change is not None else (head / base if base > 0 else None)
    regressed = details.get("regressed")
    return {"base": base, "head": head, "ratio": ratio, "ci": (_float(details.get("ci_low")),
                                                               _float(details.get("ci_high"))),
            "p": _float(details.get("p_value")), "rev": None,
            "decision": "regression" if regressed is True else ("within the gate" if regressed is False else None)}


def _pct(ratio: float | None) -> str:
    return f"{ratio - 1.0:+.1%}" if ratio is not None else "–"


def _perf(results: Sequence[CheckResult]) -> list[str]:
    rows = []
    for r in results:
        if r.check != "perf" or not isinstance(r.details, Mapping):
            continue
        numbers = _compare(r.details) or _stored(r.details)
        if not numbers:
            continue
        against = _code(numbers["rev"], table=True) if numbers["rev"] else "stored baseline"
        case = r.details.get("case")
        label = r.nodeid + (f" [{case}]" if case not in (None, "", "default") else "")
        low, high = numbers["ci"]
        ci = f"{_pct(low)} … {_pct(high)}" if low is not None and high is not None else "–"
        p = numbers["p"]
        decision = numbers["decision"] or {"pass": "pass", "fail": "regression", "skip": "skipped",
                                           "error": "inconclusive", "caught": "caught",
                                           "xfailed": "xfailed"}[status(r)]
        bad = status(r) in ("fail", "error")
        rows.append(((not bad, -(numbers["ratio"] or 0.0), label),
                     f"| {_code(label, table=True)} | {against} | {numbers['base']:.1f} | {numbers['head']:.1f} | "
                     f"{'**' if bad else ''}{_pct(numbers['ratio'])}{'**' if bad else ''} | {ci} | "
                     f"{f'{p:.2g}' if p is not None else '–'} | {markdown_text(clip(decision, _MAX_CELL_CHARS))} |"))
    if not rows:
        return []
    rows.sort(key=lambda row: row[0])
    out = ["#### Perf against the base", "",
           "Change of the head's median time against the base's (+ is slower), with the 95% confidence "
           "interval of that change; regressions and inconclusive comparisons first, then the largest changes.",
           "", "| test | against | base (µs) | head (µs) | change | 95% CI | p | decision |",
           "|---|---|---:|---:|---:|---|---:|---|"]
    out += [row for _, row in rows[:_MAX_PERF_ROWS]]
    if len(rows) > _MAX_PERF_ROWS:
        out.append(f"| … and {len(rows) - _MAX_PERF_ROWS} more | | | | | | | the JSON report has every one |")
    return [*out, ""]


def _grouped(title: str, entries: Iterable[tuple[str, str]], what: str) -> list[str]:
    """A table of (reason, name) pairs grouped by reason: the count, the reason, the names involved."""
    groups: dict[str, list[str]] = defaultdict(list)
    for reason, name in entries:
        groups[reason].append(name)
    if not groups:
        return []
    total = sum(len(v) for v in groups.values())
    out = [f"#### {title}: {total}", "", f"| count | reason | {what} |", "|---:|---|---|"]
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    for reason, names in ordered[:_MAX_SKIP_ROWS]:
        distinct = sorted(set(names))
        shown = ", ".join(_code(n, table=True) for n in distinct[:5])
        if len(distinct) > 5:
            shown += f" and {len(distinct) - 5} more"
        out.append(f"| {len(names)} | {markdown_text(clip(reason or '(no reason given)', _MAX_CELL_CHARS))} | {shown} |")
    if len(ordered) > _MAX_SKIP_ROWS:
        rest = ordered[_MAX_SKIP_ROWS:]
        out.append(f"| {sum(len(v) for _, v in rest)} | … {len(rest)} more reasons: the JSON report has them | |")
    return [*out, ""]


def _skips(doc: Mapping[str, Any], results: Sequence[CheckResult]) -> list[str]:
    checks = _grouped("Skipped checks, not run and not passed",
                      ((r.summary, r.check) for r in results if r.verdict == Verdict.SKIP), "checks")
    tests = _grouped("Skipped tests", ((str(t.get("message") or ""), str(t.get("nodeid") or "?"))
                                       for t in tests_of(doc) if t.get("outcome") == "skipped"), "tests")
    return checks + tests


def render_document(doc: Mapping[str, Any], *, not_written: Sequence[str] = ()) -> str:
    """The Markdown report for the JSON report's document ``doc`` (:func:`.json_report.build`).

    ``not_written``: the lines saying which requested reports could not be written, shown in a section
    of their own.
    """
    lines = [verdict_line(doc, not_written), ""]
    state = doc.get("state", FINISHED)
    if state == RUNNING:
        lines += ["pipecheck wrote this when the run started and replaces it when the run ends. If the run is "
                  "over, it died before it could write its results (killed, out of memory, a crash): nothing "
                  "here is a pass.", ""]
        return "\n".join(lines)
    results = results_of(doc)
    if state == INTERRUPTED:
        lines += [f"The run was {markdown_text(interruption_words(doc))}: what follows are the results of the tests that "
                  "finished before it; the others are counted as not run. It did not pass.", ""]
    lines += [*_facts(doc, results), ""]
    if not_written:
        lines += ["#### Reports that could not be written", ""]
        lines += [f"- {markdown_text(line)}" for line in not_written] + [""]
    lines += _failures(results, doc.get("seed"))
    lines += _other_tests(doc, results)
    lines += _perf(results)
    lines += _skips(doc, results)
    created = doc.get("created")
    lines.append(f"<sub>pytest-pipecheck report{f', {html.escape(str(created))}' if created else ''}; "
                 "the JSON and HTML reports (--pipecheck-json, --pipecheck-html) have every result.</sub>")
    return "\n".join(lines).rstrip("\n") + "\n"


def render(results: Iterable[CheckResult], tier: TierInfo, seed: int, outcomes: TestOutcomes | None = None,
           exitstatus: int | None = None, *, state: str = FINISHED, interrupted: Interruption | None = None,
           not_written: Sequence[str] = ()) -> str:
    """The Markdown report for ``results`` and the tests' ``outcomes`` (the arguments of
    :func:`.json_report.build`, whose document it renders)."""
    return render_document(build(results, tier, seed, outcomes, exitstatus, state=state, interrupted=interrupted),
                           not_written=not_written)


def write(path: str, text: str) -> None:
    """Write the report ``text`` to ``path`` atomically, as a regular file (raises OSError naming it)."""
    write_atomic(path, text, "Markdown report")


class StepSummary:
    """pipecheck's section of the job summary file GitHub Actions reads after the step
    (``$GITHUB_STEP_SUMMARY``): appended, since the step's other commands write there too, and replaced
    on a later :meth:`write` of this run while it is still the file's last part."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._start: int | None = None
        self._written = b""

    def write(self, text: str) -> None:
        """Append ``text`` (or replace this run's earlier section with it); raises OSError naming the
        file. Only a regular file is written: a symlink, FIFO or device there is refused."""
        refuse_non_regular(self.path, f"job summary (${STEP_SUMMARY_ENV})")
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(self.path, flags, 0o666)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(f"job summary (${STEP_SUMMARY_ENV}) {self.path!r} is not a regular file")
            size = st.st_size
            if self._start is not None and size == self._start + len(self._written):
                if os.pread(fd, len(self._written), self._start) == self._written:
                    os.ftruncate(fd, self._start)  # ours, and nothing after it: replaced
                    size = self._start
            if size != self._start:  # a first write, or someone wrote after ours: ours stays, this goes below
                self._start = size
            separator = b""
            if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
                separator = b"\n"
            data = separator + b"\n" + text.encode("utf-8") if size > 0 else text.encode("utf-8")
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
            self._written = data
        finally:
            os.close(fd)
