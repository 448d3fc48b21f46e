"""One path for every result: what every check goes through before its verdict counts.

Every check pipecheck has is registered here (:data:`REGISTRY`): the name its results carry, the
``--pipecheck-checks`` entry that selects it, one line on what it catches, what it does in a sanitizer
child (``child``) and how it records (``records``). The names ``--pipecheck-checks`` accepts are derived
from it (:data:`SELECTIONS`). Every result, whether a check called from a test body or a sanitizer verdict
decided in a child process, goes through :func:`finalize`, which applies the same rules to all of them:

* the test's node id, the GPU that ran it, and the kernel name the test gave (``kernel=`` in the
  marker) where the check did not name one;
* ``expect_failures``: a failure the test provokes on purpose (a mutant) is *caught*, not failed; only
  then: a result that arrives marked expected in a test that expects nothing is a plain failure again;
* nothing else: a verdict is never upgraded here.

:func:`deselection` decides whether a check may run under the test's configuration, and
:func:`unmet_expectation` whether a test that expected failures got the ones it expected (as
``xfail(strict=True)`` does for a whole test). A new check is one module plus one row in
:data:`REGISTRY` (and the fixture method that runs it through
:func:`pytest_pipecheck.checks.context.run_check`); CONTRIBUTING.md has the steps. A check from outside
pipecheck brings its row with it (:mod:`pytest_pipecheck.outside`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .results import CheckResult, Verdict

__all__ = [
    "CHILD_LAUNCH",
    "CHILD_ONCE",
    "CHILD_RUN",
    "CHILD_SKIP",
    "REGISTRY",
    "SELECTIONS",
    "CheckKind",
    "deselection",
    "expected_checks",
    "finalize",
    "is_registered",
    "kind_of",
    "selection_of",
    "unmet_expectation",
]


#: in a sanitizer child, a check of this policy launches its kernel once for the tool and judges nothing
#: (scope ``launch``; under scope ``test`` it runs as in the normal run); deselected, it still launches
CHILD_LAUNCH = "launch"
#: ... runs its callable once for the tool, untimed, and records a skip (timing there would time the tool)
CHILD_ONCE = "once"
#: ... records a skip: nothing it does is for the tool (the normal run judges it)
CHILD_SKIP = "skip"
#: ... runs as in the normal run: it launches nothing (compiles, reads tables)
CHILD_RUN = "run"
#: not a check a test calls: its results are recorded by pipecheck itself (the sanitizer, a fault, a skip)
CHILD_NONE = "-"

#: one result per call
RECORDS_ONE = "one"
#: recorded by pipecheck itself, not by a call from the test
RECORDS_PIPECHECK = "pipecheck"


@dataclass(frozen=True)
class CheckKind:
    """A registered check: the name its results carry, the selection entry that turns it on, what it
    catches, what it does in a sanitizer child and how its results are recorded."""

    name: str
    selection: str | None  # entry of --pipecheck-checks; None: always on (not a check one can deselect)
    catches: str
    child: str = CHILD_RUN
    records: str = RECORDS_ONE


REGISTRY: tuple[CheckKind, ...] = (
    CheckKind("coverage", "coverage", "unwritten elements, reads and writes past an edge (on the CPU tier every load "
              "and store of the run), mismatches against the reference", child=CHILD_LAUNCH),
    CheckKind("tile_probe", "tile_probe", "a loop tile dropped or counted twice (prologue, epilogue, tail)",
              child=CHILD_LAUNCH),
    CheckKind("determinism", "determinism", "results that differ between runs on the same inputs",
              child=CHILD_LAUNCH),
    CheckKind("extent", "coverage", "a program that covers several tiles and drops or doubles one of them, measured "
              "with a grid of one program", child=CHILD_SKIP),
    CheckKind("occupancy", "occupancy", "blocks per SM below the floor on a target architecture"),
    CheckKind("sanitizer:racecheck", "sanitizer", "shared-memory races, async-copy hazards",
              child=CHILD_NONE, records=RECORDS_PIPECHECK),
    CheckKind("sanitizer:synccheck", "sanitizer", "divergent or invalid barriers", child=CHILD_NONE,
              records=RECORDS_PIPECHECK),
    CheckKind("sanitizer:memcheck", "sanitizer", "out-of-bounds and misaligned accesses", child=CHILD_NONE,
              records=RECORDS_PIPECHECK),
    CheckKind("sanitizer:initcheck", "sanitizer", "reads of uninitialized memory", child=CHILD_NONE,
              records=RECORDS_PIPECHECK),
    CheckKind("sanitizer:consan", "sanitizer", "unordered shared/tensor-memory accesses, barrier misuse and "
              "deadlocks in Gluon and warp-specialized Triton kernels (Triton's ConSan)", child=CHILD_NONE,
              records=RECORDS_PIPECHECK),
    CheckKind("perf", "perf", "a slowdown against the stored baseline", child=CHILD_ONCE),
    CheckKind("perf:stage_sweep", "perf", "a stage count slower than the best one", child=CHILD_SKIP),
    CheckKind("inspect", "inspect", "compiled code without the async copies, overlap or MMA it should have"),
    CheckKind("fault", None, "a kernel fault that left the CUDA context unusable", child=CHILD_NONE,
              records=RECORDS_PIPECHECK),
    CheckKind("crash", None, "a test that killed its process (a segmentation fault in a kernel or an extension)",
              child=CHILD_NONE, records=RECORDS_PIPECHECK),
    # not a check of the kernel: generated shapes left out (over the memory budget), recorded as skips
    CheckKind("shapes", None, "generated shapes dropped for exceeding the shape memory budget", child=CHILD_NONE),
    # not a check of the kernel: a config of an autotuned kernel that Triton never runs at a shape, recorded as a skip
    CheckKind("autotune", None, "configs that early_config_prune removes at a shape (Triton never runs them there)",
              child=CHILD_NONE),
)
_BY_NAME: dict[str, CheckKind] = {k.name: k for k in REGISTRY}
#: the entries of ``--pipecheck-checks`` (and ``checks=``), in the order of the registry
SELECTIONS: tuple[str, ...] = tuple(dict.fromkeys(k.selection for k in REGISTRY if k.selection is not None))


def kind_of(check: str) -> CheckKind:
    """The registered check named ``check``; KeyError for a name that is not registered."""
    return _BY_NAME[check]


def is_registered(check: str) -> bool:
    """Whether ``check`` names a registered check, or a selection group of them (``sanitizer``)."""
    return check in _BY_NAME or any(k.selection == check for k in REGISTRY)


def selection_of(check: str) -> str | None:
    """The ``--pipecheck-checks`` entry that selects results named ``check`` (None: always on)."""
    kind = _BY_NAME.get(check)
    if kind is not None:
        return kind.selection
    # an unregistered name of the form "group:part" belongs to its group
    return check.split(":", 1)[0]


def _selection_source(config: Any) -> str:
    where = getattr(config, "sources", {}).get("checks")
    return {"marker": "the pipecheck marker", "ini": "the ini file", "command line": "the command line"}.get(
        where or "", "the configuration")


def deselection(check: str, config: Any, kind: CheckKind | None = None) -> str | None:
    """Why ``check`` does not run under ``config`` (it is not selected), or None when it runs. ``kind``: the
    row of a check that is not pipecheck's own (its selection entry is its author's)."""
    group = kind.selection if kind is not None else selection_of(check)
    if group is None or config.wants(group):
        return None
    return (f"not selected: checks={','.join(config.checks)} from {_selection_source(config)} "
            f"does not include {group}")


def finalize(result: CheckResult, *, nodeid: str, kernel: str | None, expecting: bool,
             gpu: str | None) -> CheckResult:
    """``result`` as it is recorded: with its test, kernel name, GPU and expected-failure status."""
    changes: dict[str, Any] = {}
    if not result.nodeid:
        changes["nodeid"] = nodeid
    if result.kernel is None and kernel:
        changes["kernel"] = kernel
    if expecting and result.verdict == Verdict.FAIL and not result.expected:
        changes["expected"] = True
    elif result.expected and not (expecting and result.verdict == Verdict.FAIL):
        # only the test's expectation makes a failure "caught": a result that arrives marked expected (built by
        # hand, or an ERROR or a pass marked so) would otherwise be a failure no report counts
        changes["expected"] = False
    if gpu is not None and "gpu" not in result.details:
        changes["details"] = {**result.details, "gpu": gpu}
    return dataclasses.replace(result, **changes) if changes else result


def expected_checks(expect: Any) -> tuple[str, ...]:
    """The checks an ``expect_failures`` value names (empty for plain True/False)."""
    return tuple(expect) if isinstance(expect, tuple) else ()


def expects_a_judged_failure(expect: Any) -> bool:
    """Whether an ``expect_failures`` value waits for a failure that a check must judge: True (any check may
    catch it), or names that include a check other than the sanitizer tools."""
    if not expect:
        return False
    names = expected_checks(expect)
    return not names or any(selection_of(n) != "sanitizer" for n in names)


def _caught_by(results: Iterable[CheckResult], name: str) -> bool:
    return any(r.expected and r.verdict == Verdict.FAIL
               and (r.check == name or selection_of(r.check) == name) for r in results)


def unmet_expectation(results: Iterable[CheckResult], expect: Any, source: str) -> str | None:
    """Why a test that expected failures did not get them, or None when it did.

    ``expect`` is the test's ``expect_failures``: True (at least one check must catch the bug) or the
    names of the checks that each must. ``source`` names where the expectation came from.
    """
    if not expect:
        return None
    results = list(results)
    names = expected_checks(expect)
    if names:
        missing = [n for n in names if not _caught_by(results, n)]
    else:
        missing = [] if any(r.expected and r.verdict == Verdict.FAIL for r in results) else ["any check"]
    if not missing:
        return None
    seen = _verdict_list(results)
    if names:
        what = f"expected {', '.join(names)} to catch a bug, but {', '.join(missing)} did not"
    else:
        what = "expected at least one check to catch a bug, but none did"
    return f"pipecheck: expect_failures from {source} {what} (the mutant was missed). Verdicts: {seen}"


def caught_names(results: Iterable[CheckResult], expect: Any) -> list[str]:
    """Which of the expectation's checks caught the bug in ``results`` (``["any check"]`` for a plain True
    that some check met; empty where none did)."""
    results = list(results)
    names = expected_checks(expect)
    if names:
        return [n for n in names if _caught_by(results, n)]
    return ["any check"] if any(r.expected and r.verdict == Verdict.FAIL for r in results) else []


def unmet_across_cases(cases: Mapping[str, Sequence[str]], expect: Any) -> list[str]:
    """The expectation's checks that caught the bug at no case of a parametrized mutant test (``cases``: each
    case's node id and the names :func:`caught_names` gave it); empty when each caught it at some case."""
    names = list(expected_checks(expect)) or ["any check"]
    return [n for n in names if not any(n in got for got in cases.values())]


def _verdict_list(results: list[CheckResult]) -> str:
    if not results:
        return "no check ran"
    parts = []
    for r in results:
        state = "caught" if r.expected and r.verdict == Verdict.FAIL else r.verdict.value
        parts.append(f"{r.check} {state} ({r.summary})" if r.summary else f"{r.check} {state}")
    return "; ".join(parts)

