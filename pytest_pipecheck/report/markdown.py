"""``--pipecheck-markdown PATH`` and GitHub's job summary: the merge verdict as a reviewer reads it in CI.

The first line is the verdict, and nothing else::

    ✅ pipecheck: merge OK — 412 checks passed, 37 skipped
    ❌ pipecheck: do not merge — 2 failing checks, 1 inconclusive check
    ❌ pipecheck: do not merge — the run was interrupted by SIGTERM before it finished
    ❌ pipecheck: do not merge — the run has not finished

"merge OK" is written only where the JSON report's ``ok`` is true: the run finished (``state`` is
``"finished"``), at least one test ran, no test failed, errored, crashed its worker or was left unrun,
no check result is a fail or an error, and the exit status is 0. The text is rendered from the very
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
import shlex
import stat
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .._atomic import refuse_non_regular
from ..device import TierInfo
from ..results import CheckResult, Verdict
from .interrupt import FINISHED, INTERRUPTED, RUNNING, Interruption
from .json_report import build, write_atomic
from .outcomes import BAD_OUTCOMES, TestOutcomes
from .terminal import status

__all__ = ["STEP_SUMMARY_ENV", "StepSummary", "render", "render_document", "verdict_line", "write"]

#: the variable GitHub Actions sets to the file of the running step's job summary
STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"

OK_MARK = "✅"
NOT_OK_MARK = "❌"
#: how every verdict that does not allow the merge begins
DO_NOT_MERGE = f"{NOT_OK_MARK} pipecheck: do not merge — "

_MAX_FAILURE_GROUPS = 30
_MAX_TESTS_PER_GROUP = 20
_MAX_TEST_ROWS = 30
_MAX_PERF_ROWS = 40
_MAX_SKIP_ROWS = 30
_MAX_MESSAGE_CHARS = 4000
_MAX_CELL_CHARS = 300
_SHORT_MESSAGE = 200  # a one-line message up to this long is shown inline, not folded


# ----------------------------------------------------------------------------- escaping


def _text(value: Any) -> str:
    """``value`` as one line of Markdown text that renders as itself (no emphasis, links, HTML or table
    cells made of what a kernel or a test id happens to contain)."""
    s = " ".join(str(value).split())
    s = s.replace("&", "&amp;")
    s = re.sub(r"([\\`*\[\]<>|~#])", r"\\\1", s)
    # an underscore between two letters or digits never starts emphasis: sm_90 stays as it is written
    return re.sub(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])", r"\\_", s)


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


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit].rstrip() + f" … ({len(text) - limit} more characters in the JSON report)"


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


# ----------------------------------------------------------------------------- the verdict


def _results(doc: Mapping[str, Any]) -> list[CheckResult]:
    out = []
    for data in doc.get("results") or []:
        try:
            out.append(CheckResult.from_json(data))
        except (KeyError, TypeError, ValueError):  # a foreign entry: not a check result this report can show
            continue
    return out


def _tests(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [t for t in doc.get("tests") or [] if isinstance(t, Mapping)]


def _interruption(doc: Mapping[str, Any]) -> str:
    info = doc.get("interrupted")
    if isinstance(info, Mapping):
        return Interruption(info.get("signal"), str(info.get("reason") or "")).describe()
    return "interrupted"


_OUTCOME_WORDS = {"failed": "failed", "error": "errored", "crashed": "crashed its worker", "not run": "not run"}
_EXIT_WORDS = {1: "tests failed", 2: "interrupted", 3: "internal error", 4: "usage error", 5: "no tests ran"}


def _bad_check_nodeids(results: Sequence[CheckResult]) -> set[str]:
    return {r.nodeid for r in results if status(r) in ("fail", "error")}


def _other_bad_tests(doc: Mapping[str, Any], results: Sequence[CheckResult]) -> list[Mapping[str, Any]]:
    """The tests that did not pass for a reason other than a failing or inconclusive check of theirs."""
    explained = _bad_check_nodeids(results)
    return [t for t in _tests(doc) if t.get("outcome") in BAD_OUTCOMES and t.get("nodeid") not in explained]


def _problems(doc: Mapping[str, Any], results: Sequence[CheckResult], not_written: Sequence[str] = (), *,
              so_far: bool = False) -> list[str]:
    """What keeps a run from passing, in the verdict line's words (empty for a run that passed). ``so_far``:
    only what the tests that ran found (for a run that did not finish)."""
    counts = Counter(status(r) for r in results)
    out = []
    if counts["fail"]:
        out.append(_plural(counts["fail"], "failing check"))
    if counts["error"]:
        out.append(_plural(counts["error"], "inconclusive check"))
    others = Counter(str(t.get("outcome")) for t in _other_bad_tests(doc, results))
    prefix = "other " if out else ""
    for outcome in ("failed", "error", "crashed") + (() if so_far else ("not run",)):
        if others[outcome]:
            out.append(f"{_plural(others[outcome], prefix + 'test')} {_OUTCOME_WORDS[outcome]}")
    if so_far:
        return out
    if not _tests(doc) and doc.get("test_totals") is not None:
        out.append("no test ran")
    if not_written:
        out.append("a requested report could not be written")
    exitstatus = doc.get("exitstatus")
    if not out and isinstance(exitstatus, int) and exitstatus != 0:
        words = _EXIT_WORDS.get(exitstatus)
        out.append(f"pytest exited with status {exitstatus}" + (f" ({words})" if words else ""))
    return out


def verdict_line(doc: Mapping[str, Any], not_written: Sequence[str] = ()) -> str:
    """The first line of the report for the JSON report's document ``doc``; ``not_written``: the lines
    saying which requested reports could not be written."""
    state = doc.get("state", FINISHED)
    results = _results(doc)
    if state == RUNNING:
        return DO_NOT_MERGE + "the run has not finished"
    if state == INTERRUPTED:
        tests = _tests(doc)
        ran = sum(t.get("outcome") != "not run" for t in tests)
        found = _problems(doc, results, so_far=True)
        facts = [f"{ran} of {_plural(len(tests), 'test')} ran"] if tests else []
        if found:
            facts.append(", ".join(found) + " so far")
        return DO_NOT_MERGE + f"the run was {_interruption(doc)} before it finished" + \
            (f" ({'; '.join(facts)})" if facts else "")
    ok = doc.get("ok")
    if ok is True and not not_written:
        counts = Counter(status(r) for r in results)
        if not results:
            passed = int((doc.get("test_totals") or {}).get("passed", 0))
            return f"{OK_MARK} pipecheck: merge OK — {_plural(passed, 'test')} passed; no pipecheck check ran"
        parts = [f"{_plural(counts['pass'], 'check')} passed", f"{counts['skip']} skipped"]
        if counts["caught"]:
            parts.append(f"{_plural(counts['caught'], 'expected failure')} caught")
        return f"{OK_MARK} pipecheck: merge OK — " + ", ".join(parts)
    if ok is None and not not_written:
        return (f"{NOT_OK_MARK} pipecheck: no merge verdict — the tests' own outcomes were not given to this "
                "report")
    problems = _problems(doc, results, not_written) or ["the run did not pass"]
    return DO_NOT_MERGE + ", ".join(problems)


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
    parts = [_text(where), f"seed {_code(doc.get('seed'))}"]
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
                 "caught": "caught (mutants)"}
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
    title = " and ".join(p for p in (_plural(fails, "failing check") if fails else "",
                                     _plural(errors, "inconclusive check") if errors else "") if p)
    out = [f"#### {title}", ""]
    for (verdict, check, summary), group in list(groups.items())[:_MAX_FAILURE_GROUPS]:
        r = group[0]
        label = "FAIL" if verdict == "fail" else "INCONCLUSIVE"
        kernel = f" on {_code(r.kernel)}" if r.kernel else ""
        where = f"in {_code(r.nodeid or '?')}" if len(group) == 1 else \
            f"in {len(group)} tests, first {_code(r.nodeid or '?')}"
        head = _clip(summary, _MAX_CELL_CHARS) if len(summary) <= _SHORT_MESSAGE else \
            _clip(summary.splitlines()[0] if summary.strip() else "", _SHORT_MESSAGE)
        out.append(f"**{label}** {_code(check)}{kernel} {where}: {_text(head)}")
        message = r.details.get("message")
        long_text = (message.strip() if isinstance(message, str) else "") or (summary if len(summary) > _SHORT_MESSAGE or "\n" in summary else "")
        if long_text:
            lines = long_text.count("\n") + 1
            out += ["", *_details_block(f"message ({_plural(lines, 'line')})",
                                        _fenced(_clip(long_text, _MAX_MESSAGE_CHARS)))]
        if len(group) > 1:
            shown = "\n".join(f"- {_code(g.nodeid or '?')}" for g in group[:_MAX_TESTS_PER_GROUP])
            rest = len(group) - _MAX_TESTS_PER_GROUP
            if rest > 0:
                shown += f"\n- … and {rest} more (the JSON report lists every one)"
            out += ["", *_details_block(f"the {len(group)} tests", shown)]
        if r.nodeid:
            out += ["", f"reproduce: {_code(f'pytest {shlex.quote(r.nodeid)} --pipecheck --pipecheck-seed={seed}')}"]
        out.append("")
    rest = len(groups) - _MAX_FAILURE_GROUPS
    if rest > 0:
        out += [f"… and {rest} more distinct failures: the JSON and HTML reports have every one.", ""]
    return out


def _other_tests(doc: Mapping[str, Any], results: Sequence[CheckResult]) -> list[str]:
    others = _other_bad_tests(doc, results)
    if not others:
        return []
    besides = " besides the checks above" if _bad_check_nodeids(results) else ""
    out = [f"#### {_plural(len(others), 'test')} did not pass{besides}", "",
           "| test | outcome | phase | message |", "|---|---|---|---|"]
    for t in others[:_MAX_TEST_ROWS]:
        out.append(f"| {_code(t.get('nodeid') or '?', table=True)} | {_text(t.get('outcome', '?'))} | "
                   f"{_text(t.get('when') or '–')} | {_text(_clip(str(t.get('message') or ''), _MAX_CELL_CHARS))} |")
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
                                           "error": "inconclusive", "caught": "caught"}[status(r)]
        bad = status(r) in ("fail", "error")
        rows.append(((not bad, -(numbers["ratio"] or 0.0), label),
                     f"| {_code(label, table=True)} | {against} | {numbers['base']:.1f} | {numbers['head']:.1f} | "
                     f"{'**' if bad else ''}{_pct(numbers['ratio'])}{'**' if bad else ''} | {ci} | "
                     f"{f'{p:.2g}' if p is not None else '–'} | {_text(_clip(decision, _MAX_CELL_CHARS))} |"))
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
        out.append(f"| {len(names)} | {_text(_clip(reason or '(no reason given)', _MAX_CELL_CHARS))} | {shown} |")
    if len(ordered) > _MAX_SKIP_ROWS:
        rest = ordered[_MAX_SKIP_ROWS:]
        out.append(f"| {sum(len(v) for _, v in rest)} | … {len(rest)} more reasons: the JSON report has them | |")
    return [*out, ""]


def _skips(doc: Mapping[str, Any], results: Sequence[CheckResult]) -> list[str]:
    checks = _grouped("Skipped checks, not run and not passed",
                      ((r.summary, r.check) for r in results if r.verdict == Verdict.SKIP), "checks")
    tests = _grouped("Skipped tests", ((str(t.get("message") or ""), str(t.get("nodeid") or "?"))
                                       for t in _tests(doc) if t.get("outcome") == "skipped"), "tests")
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
    results = _results(doc)
    if state == INTERRUPTED:
        lines += [f"The run was {_text(_interruption(doc))}: what follows are the results of the tests that "
                  "finished before it; the others are counted as not run. It did not pass.", ""]
    lines += [*_facts(doc, results), ""]
    if not_written:
        lines += ["#### Reports that could not be written", ""]
        lines += [f"- {_text(line)}" for line in not_written] + [""]
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
