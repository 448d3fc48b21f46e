"""The run's merge verdict in words: the first line of the Markdown report and the job summary, and the
JSON report's ``reason``. One module says it, so that the two reports cannot word it differently; both
are made from the document :func:`.json_report.build` returns.

"merge OK" is said only where that document's ``ok`` is true; every other verdict starts with
:data:`DO_NOT_MERGE` and lists what kept the run from passing (see :mod:`.markdown` for the rules).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ..results import CheckResult, Verdict
from .interrupt import FINISHED, INTERRUPTED, RUNNING, Interruption
from .outcomes import BAD_OUTCOMES
from .terminal import status

__all__ = ["DO_NOT_MERGE", "NOT_OK_MARK", "OK_MARK", "bad_check_nodeids", "clip", "interruption_words",
           "markdown_text", "not_ok_reason", "other_bad_tests", "plural", "results_of", "tests_of", "verdict_line"]

OK_MARK = "✅"
NOT_OK_MARK = "❌"
#: how every verdict that does not allow the merge begins
DO_NOT_MERGE = f"{NOT_OK_MARK} pipecheck: do not merge — "


def markdown_text(value: Any) -> str:
    """``value`` as one line of Markdown text that renders as itself (no emphasis, links, HTML or table
    cells made of what a kernel or a test id happens to contain)."""
    s = " ".join(str(value).split())
    s = s.replace("&", "&amp;")
    s = re.sub(r"([\\`*\[\]<>|~#])", r"\\\1", s)
    # an underscore between two letters or digits never starts emphasis: sm_90 stays as it is written
    return re.sub(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])", r"\\_", s)


def clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit].rstrip() + f" … ({len(text) - limit} more characters in the JSON report)"


def plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


# ----------------------------------------------------------------------------- the verdict


def results_of(doc: Mapping[str, Any]) -> list[CheckResult]:
    out = []
    for data in doc.get("results") or []:
        try:
            out.append(CheckResult.from_json(data))
        except (KeyError, TypeError, ValueError):  # a foreign entry: not a check result this report can show
            continue
    return out


def tests_of(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [t for t in doc.get("tests") or [] if isinstance(t, Mapping)]


def interruption_words(doc: Mapping[str, Any]) -> str:
    info = doc.get("interrupted")
    if isinstance(info, Mapping):
        return Interruption(info.get("signal"), str(info.get("reason") or "")).describe()
    return "interrupted"


_OUTCOME_WORDS = {"failed": "failed", "error": "errored", "crashed": "crashed its worker", "not run": "not run"}
_EXIT_WORDS = {1: "tests failed", 2: "interrupted", 3: "internal error", 4: "usage error", 5: "no tests ran"}


def bad_check_nodeids(results: Sequence[CheckResult]) -> set[str]:
    return {r.nodeid for r in results if status(r) in ("fail", "error")}


def other_bad_tests(doc: Mapping[str, Any], results: Sequence[CheckResult]) -> list[Mapping[str, Any]]:
    """The tests that did not pass for a reason other than a failing or inconclusive check of theirs."""
    explained = bad_check_nodeids(results)
    return [t for t in tests_of(doc) if t.get("outcome") in BAD_OUTCOMES and t.get("nodeid") not in explained]


_MAX_REASONS = 3
_MAX_REASON_CHARS = 120


def _nothing_checked(doc: Mapping[str, Any], results: Sequence[CheckResult], esc: Any) -> str:
    """The verdict's words for a run that checked nothing (``nothing_checked``: no test passed and no check
    passed): the check and test counts, and the first reasons the tests and checks gave for not running.
    ``esc`` turns the reasons, which are the tests' own text, into the report's text."""
    counts = Counter(status(r) for r in results)
    words = f"{plural(counts['pass'], 'check')} passed, {counts['skip']} skipped"
    totals = doc.get("test_totals")
    if isinstance(totals, Mapping):
        ran = ", ".join(f"{n} {o}" for o, n in totals.items() if n and o != "passed")
        words += "; 0 tests passed" + (f", {ran}" if ran else "")
    reasons = list(dict.fromkeys(
        [str(t.get("message") or "").removeprefix("Skipped: ") for t in tests_of(doc)
         if t.get("outcome") in ("skipped", "xfailed")]
        + [r.summary for r in results if r.verdict == Verdict.SKIP]))
    reasons = [r for r in reasons if r.strip()]
    if reasons:
        shown = [esc(clip(" ".join(r.split()), _MAX_REASON_CHARS)) for r in reasons[:_MAX_REASONS]]
        more = f"; and {len(reasons) - _MAX_REASONS} more" if len(reasons) > _MAX_REASONS else ""
        words += f" ({'; '.join(shown)}{more})"
    return "nothing was checked: " + words


def _problems(doc: Mapping[str, Any], results: Sequence[CheckResult], not_written: Sequence[str] = (), *,
              so_far: bool = False, esc: Any = markdown_text) -> list[str]:
    """What keeps a run from passing, in the verdict line's words (empty for a run that passed). ``so_far``:
    only what the tests that ran found (for a run that did not finish). ``esc``: how the tests' own text
    is written (Markdown text; the JSON report's ``reason`` takes it as it is)."""
    counts = Counter(status(r) for r in results)
    out = []
    if counts["fail"]:
        out.append(plural(counts["fail"], "failing check"))
    if counts["error"]:
        out.append(plural(counts["error"], "inconclusive check"))
    others = Counter(str(t.get("outcome")) for t in other_bad_tests(doc, results))
    prefix = "other " if out else ""
    for outcome in ("failed", "error", "crashed") + (() if so_far else ("not run",)):
        if others[outcome]:
            out.append(f"{plural(others[outcome], prefix + 'test')} {_OUTCOME_WORDS[outcome]}")
    if so_far:
        return out
    if not tests_of(doc) and doc.get("test_totals") is not None:
        out.append("no test ran")
    elif not out and doc.get("nothing_checked"):
        out.append(_nothing_checked(doc, results, esc))
    if not_written:
        out.append("a requested report could not be written")
    exitstatus = doc.get("exitstatus")
    if not out and isinstance(exitstatus, int) and exitstatus != 0:
        words = _EXIT_WORDS.get(exitstatus)
        out.append(f"pytest exited with status {exitstatus}" + (f" ({words})" if words else ""))
    return out


def not_ok_reason(doc: Mapping[str, Any]) -> str:
    """Why the run of the JSON report's document ``doc`` did not pass, in the words the Markdown verdict
    gives after "do not merge —" (the tests' own text as it is, not as Markdown): the JSON's ``reason``."""
    return _not_ok(doc, results_of(doc), tuple(doc.get("not_written") or ()), lambda value: str(value))


def _not_ok(doc: Mapping[str, Any], results: Sequence[CheckResult], not_written: Sequence[str], esc: Any) -> str:
    state = doc.get("state", FINISHED)
    if state == RUNNING:
        return "the run has not finished"
    if state == INTERRUPTED:
        tests = tests_of(doc)
        ran = sum(t.get("outcome") != "not run" for t in tests)
        found = _problems(doc, results, so_far=True, esc=esc)
        facts = [f"{ran} of {plural(len(tests), 'test')} ran"] if tests else []
        if found:
            facts.append(", ".join(found) + " so far")
        return f"the run was {interruption_words(doc)} before it finished" + (f" ({'; '.join(facts)})" if facts else "")
    return ", ".join(_problems(doc, results, not_written, esc=esc) or ["the run did not pass"])


def verdict_line(doc: Mapping[str, Any], not_written: Sequence[str] = ()) -> str:
    """The first line of the report for the JSON report's document ``doc``; ``not_written``: the lines
    saying which requested reports could not be written."""
    state = doc.get("state", FINISHED)
    results = results_of(doc)
    if state in (RUNNING, INTERRUPTED):
        return DO_NOT_MERGE + _not_ok(doc, results, not_written, markdown_text)
    ok = doc.get("ok")
    if ok is True and not not_written:
        counts = Counter(status(r) for r in results)
        if not results:
            passed = int((doc.get("test_totals") or {}).get("passed", 0))
            return f"{OK_MARK} pipecheck: merge OK — {plural(passed, 'test')} passed; no pipecheck check ran"
        parts = [f"{plural(counts['pass'], 'check')} passed", f"{counts['skip']} skipped"]
        if counts["caught"]:
            parts.append(f"{plural(counts['caught'], 'expected failure')} caught")
        if counts["xfailed"]:
            parts.append(f"{counts['xfailed']} xfailed (in tests their xfail markers expect to fail)")
        head = ""
        if not counts["pass"] and not counts["caught"]:
            # what passed was the tests alone (every check skipped: the CPU tier without a GPU): said first
            passed = int((doc.get("test_totals") or {}).get("passed", 0))
            head = f"{plural(passed, 'test')} passed; "
        return f"{OK_MARK} pipecheck: merge OK — " + head + ", ".join(parts)
    if ok is None and not not_written:
        return (f"{NOT_OK_MARK} pipecheck: no merge verdict — the tests' own outcomes were not given to this "
                "report")
    return DO_NOT_MERGE + _not_ok(doc, results, not_written, markdown_text)
