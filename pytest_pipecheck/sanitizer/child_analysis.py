"""What one compute-sanitizer child's output says: the findings of each of its tests, and how it ended.

:func:`_analyze` cuts the output at the ``PIPECHECK-BEGIN``/``PIPECHECK-END`` lines the child plugin prints
(:func:`.parse.split_markers`) and gives each test the findings printed inside it (with the ``--save`` XML's
details merged in, known false positives filtered out by their rule, an invalid access named by the tensor it
is past), keeps apart what was printed outside every test, and reconciles the records with the tool's own
count (:func:`.parse.reconcile`). :func:`child_health` says how the child ended as a whole (its exit status,
the tool's summary and its errors): what decides the tests their own records leave undecided.
:func:`_not_closed_by_canary` says whether a child that then failed at its exit was whole up to its last
test and the canary after it. :class:`.runner.SanitizerRunner` turns these into verdicts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .allocations import attribute
from .child_command import CANARY_EXPECTS, ERROR_EXITCODE, canary_nodeid
from .child_watch import ChildRun
from .known import filter_findings
from .launches import kernel_facts
from .parse import (
    Finding,
    MarkerSplit,
    Reconciliation,
    merge_xml,
    parse_text,
    parse_xml,
    reconcile,
    split_markers,
)
from .tool_outcomes import _OUTPUT_KEEP

__all__ = ["ChildHealth", "child_health"]

#: exit statuses of the child pytest that still allow a verdict: all passed, some failed, errors found
_CONSISTENT_RC = (0, 1, ERROR_EXITCODE)
_INTERRUPTED_RC = 2  # pytest's exit status after session.shouldstop


@dataclass
class _ChildAnalysis:
    split: MarkerSplit
    findings: dict[str, list[Finding]]
    outside: list[Finding]
    summary_seen: bool
    tool_errors: list[Finding]
    any_findings: bool
    rec: Reconciliation
    filtered: dict[str, dict[str, list[Finding]]] = field(default_factory=dict)  # nodeid -> rule -> records


def _analyze(run: ChildRun, tool: str, print_limit: int | None = None,
             version: tuple[int, ...] | None = None) -> _ChildAnalysis:
    split = split_markers(run.output)
    whole = parse_text(run.output, tool)
    per: dict[str, list[Finding]] = {}
    ordered: list[Finding] = []
    for nodeid in split.order:
        found = [f for f in parse_text(split.segments[nodeid].text, tool).findings]
        per[nodeid] = found
        ordered.extend(found)
    outside_all = parse_text(split.outside_text, tool).findings
    tool_errors = [f for f in whole.findings if f.kind == "tool_error"]
    outside = [f for f in outside_all if f.is_hazard]
    for found in per.values():
        found[:] = [f for f in found if f.is_hazard]
    if run.xml and not outside_all:
        merge_xml([f for f in ordered if f.is_hazard], [x for x in parse_xml(run.xml, tool)])
    # the tool counted the known false positives too: they explain its exit status before they are filtered
    any_findings = bool(outside) or any(per.values())
    filtered: dict[str, dict[str, list[Finding]]] = {}
    for nodeid, found in per.items():
        if nodeid.startswith("pipecheck-canary::"):
            continue
        kept, gone = filter_findings(found, tool, version, kernels=kernel_facts(split.segments.get(nodeid)))
        if gone:
            found[:] = kept
            filtered[nodeid] = gone
    for nodeid, found in per.items():
        seg = split.segments.get(nodeid)
        if seg is not None and seg.allocations:
            attribute(found, seg.allocations)  # name the tensor an invalid access is past
    rec = reconcile(whole, tool, print_limit=print_limit, xml=run.xml)
    return _ChildAnalysis(split, per, outside, whole.summary.seen, tool_errors, any_findings, rec, filtered)


@dataclass(frozen=True)
class ChildHealth:
    """How one child ended, as a whole: what decides the tests its records leave undecided."""

    interrupted: bool  # killed by the watchdog, or died inside a test with a non-zero status
    stopped: bool  # stopped by itself after a test left its CUDA context dead
    sound: bool  # the exit status and the tool's summary agree with each other
    consistent: bool  # sound, and a pass can be trusted (an exit 86 has its findings)
    why_not: str  # what is wrong where it is not consistent
    tail: str  # the end of the child's output


def child_health(run: ChildRun, an: _ChildAnalysis) -> ChildHealth:
    """:class:`ChildHealth` of ``run`` from its exit status, the tool's summary and its tool errors."""
    interrupted = run.killed_in is not None or (an.split.open is not None and run.returncode != 0)
    rc = run.returncode
    tail = run.output[-_OUTPUT_KEEP:]
    counted = an.rec.counted or 0
    # A child whose CUDA context died stops after that test (ChildPlugin prints POISONED and pytest
    # ends as interrupted, exit 2): the tests it finished keep their verdicts, the tests it never
    # began run in a fresh child.
    stopped = run.poisoned_by is not None and run.poisoned_by in an.split.segments
    ok_rc = _CONSISTENT_RC + ((_INTERRUPTED_RC,) if stopped else ())
    # the exit status and the summary agree with each other (whether the records add up is an.rec)
    sound = an.summary_seen and rc in ok_rc and not an.tool_errors and not (rc == 0 and counted > 0)
    if rc == 1 and not any(s.outcome == "failed" for s in an.split.segments.values()):
        sound = False
    # exit 86 and no finding: unexplained unless the records do not add up, which a re-run settles
    consistent = sound and not (rc == ERROR_EXITCODE and not an.any_findings and an.rec.ok)
    why_not = ("no compute-sanitizer summary line" if not an.summary_seen else
               f"tool error: {an.tool_errors[0].message}" if an.tool_errors else
               f"exit status {rc} without any finding" if rc == ERROR_EXITCODE else
               f"exit status 0 although the tool counted {counted} errors (--error-exitcode "
               f"{ERROR_EXITCODE} was asked for)" if rc == 0 and counted > 0 else
               f"unexpected exit status {rc}")
    return ChildHealth(interrupted, stopped, sound, consistent, why_not, tail)


#: the tool's words for a target that failed at its exit (compute-sanitizer 2026.4.0)
_EXIT_FAILURE = "process didn't terminate successfully"


def _not_closed_by_canary(tool: str, nodeids: Sequence[str], an: _ChildAnalysis) -> str | None:
    """None where the child's run was whole up to its last test although the process then failed: every test
    ended, the canary ran after all of them and its planted bug was reported (the tool was live to the
    end), no record lies outside a test, the tool's count reconciles with the records it printed, and its
    only error is the target's failed exit; else which of these does not hold (said when the tests run
    again)."""
    canary = canary_nodeid(tool)
    seg = an.split.segments.get(canary)
    if seg is None or seg.outcome is None:
        return "the canary did not run to its end in this child"
    if an.outside:
        return "a record lies outside every test"
    if not an.summary_seen or not an.rec.ok:
        return "the tool's count does not reconcile with its records: " + ("; ".join(an.rec.problems) or
                                                                          "no summary")
    if not any(f.kind == CANARY_EXPECTS.get(tool) for f in an.findings.get(canary, [])):
        return "the canary's bug was not reported in this child"
    other = [f.message for f in an.tool_errors if _EXIT_FAILURE not in f.message]
    if other:
        return f"the tool reported another error: {other[0][:200]}"
    order = an.split.order
    last = max((order.index(n) for n in nodeids if n in order), default=-1)
    if not all(n in an.split.segments and an.split.segments[n].outcome is not None for n in nodeids) \
            or order.index(canary) < last:
        return "the canary did not run after every test"
    return None
