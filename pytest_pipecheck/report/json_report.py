"""Machine-readable results: ``--pipecheck-json PATH``.

Schema (version 2)::

    {
      "schema": "pytest-pipecheck/results", "version": 2,
      "created": "2026-11-22T02:00:00+00:00", "seed": 1234,
      "ok": false, "exitstatus": 1, "reason": "1 failing check", "nothing_checked": false,
      "state": "finished", "finished": true, "interrupted": null,
      "tier": {"tier": "gpu", "reason": "", "device": {...} | null, "backends": {...}},
      "test_totals": {"passed": 9, "failed": 1, "error": 0, "crashed": 0, "not run": 0,
                      "skipped": 2, "xfailed": 0, "xpassed": 0},
      "tests": [{"nodeid": ..., "outcome": "failed", "when": "call", "message": "AssertionError: ..."}],
      "totals": {"pass": 10, "fail": 1, "caught": 2, "skip": 3, "error": 0, "xfailed": 0},
      "results": [{"nodeid": ..., "kernel": ..., "check": ..., "verdict": ..., "expected": false,
                   "summary": ..., "details": {...}}],
      "not_written": []
    }

``ok`` is the run's verdict: true only when the run finished, the exit status is 0, at least one
test ran, no test failed, errored, crashed its worker or was left unrun, no check result is a
fail or an error, and something was checked: at least one test passed or one check passed (or
caught its mutant). It is null only for a finished run whose tests' outcomes were not given
(:func:`build` called as a library). ``reason`` says why ``ok`` is false, in the words of the
Markdown verdict after "do not merge —" (null when ``ok`` is not false).

``nothing_checked`` is true for a finished run in which no test passed and no check passed: every
test skipped or xfailed (a runner without an optional kernel library, a GPU tier run on a machine
without a GPU), or none ran. A gate that checked nothing is not a pass: ``ok`` is false, and under
``--pipecheck`` or with a report requested the run ends with a failure of its own (see
docs/verdicts.md, "A run that checked nothing"). A run in which tests passed is not such a run, even
when every pipecheck check in it was skipped (the CPU tier without a GPU).

``state`` says whether the run reached its end (:mod:`.interrupt`): ``"running"`` is what the
report writer puts at the path when the session starts (``ok`` false, ``exitstatus`` null, no
tests yet), so a run that dies without writing its report (killed, out of memory, a crash) leaves
that behind, never the previous run's verdict; ``"interrupted"``: the session was ended early (on
SIGTERM or SIGINT, a ``KeyboardInterrupt``, ``pytest.exit``, a stop pytest-xdist or ``--stepwise``
asked for), ``ok`` is false and ``tests`` hold the verdicts of the tests that finished, the others
``not run``; ``"finished"``: the session ran to its end. ``finished`` is true only for the last.
``interrupted`` is null unless the state is ``"interrupted"``; then ``{"signal": "SIGTERM" |
"SIGINT" | null, "reason": ...}``, the signal being null when none was received (the reason is
then what pytest ended the session with, such as ``KeyboardInterrupt``).
``tests`` and ``test_totals`` are the tests' own outcomes (:mod:`.outcomes`): a test can pass all
its checks and still fail. ``totals`` and ``results`` are the check results. "caught" counts
failures the test provoked on purpose (``expected`` true: a mutant caught by its check); "xfailed"
the failing and inconclusive results of tests that pytest counts as xfailed by their xfail marker (the
result's ``xfailed`` true: the failure the marker declares, such as an upstream bug); "fail" counts
only the others.

Version 1 had no ``ok``, ``exitstatus``, ``tests`` or ``test_totals``: a reader of version 1 that
looked only at ``totals`` saw ``fail: 0`` for a run whose tests failed after their checks.
``state``, ``finished`` and ``interrupted`` were added within version 2 (nothing else changed: a
reader that ignores them still finds ``ok`` false for a run that did not finish), and so were
``reason``, ``nothing_checked`` (``ok`` is false for a run that checked nothing) and ``not_written``
(the other requested reports that could not be written at the end; ``ok`` is then false and the
exit status 4), and ``totals``' "xfailed" with the results' ``xfailed``.

The file is strict JSON (RFC 8259): a non-finite number in a result's details (a NaN tolerance,
an infinite error) is written as the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``, never as
the bare tokens Python's json module would emit and strict parsers reject.

The file is written atomically (temporary file in the same directory, then renamed), so a crash
never leaves a half-written report where a previous one was, and only as a regular file: a
symlink, FIFO or device at the path is an error, never replaced.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .._atomic import atomic_write_text
from ..device import TierInfo
from ..results import CheckResult
from .interrupt import FINISHED, STATES, Interruption
from .merge_verdict import not_ok_reason  # the Markdown verdict's own words: the two cannot disagree
from .outcomes import TestOutcomes

SCHEMA = "pytest-pipecheck/results"
VERSION = 2

__all__ = ["SCHEMA", "VERSION", "build", "dumps", "nothing_checked", "strict", "write", "write_atomic"]


def build(results: Iterable[CheckResult], tier: TierInfo, seed: int, outcomes: TestOutcomes | None = None,
          exitstatus: int | None = None, *, state: str = FINISHED,
          interrupted: Interruption | None = None, not_written: Sequence[str] = ()) -> dict[str, Any]:
    """The JSON document for ``results`` and the tests' ``outcomes`` (see the module's schema).

    ``state`` is the run's (:data:`.interrupt.STATES`); ``interrupted`` says why it ended early;
    ``not_written``: the lines saying which other requested reports could not be written (``ok`` false).
    """
    if state not in STATES:
        raise ValueError(f"unknown run state {state!r}: expected one of {', '.join(STATES)}")
    results = list(results)
    from .terminal import STATUSES, status

    totals = dict.fromkeys(STATUSES, 0)
    for r in results:
        totals[status(r)] += 1
    checks_ok = totals["fail"] == 0 and totals["error"] == 0
    nothing = None if outcomes is None else (state == FINISHED and nothing_checked(results, outcomes))
    ok = None if outcomes is None else (checks_ok and outcomes.ok(exitstatus) and not nothing)
    if state != FINISHED or not_written:
        # a run that did not reach its end never reads as a pass, whatever finished in it; nor one whose other
        # reports are missing (its exit status is 4, though this report was written before it was decided)
        ok = False
    doc = {
        "schema": SCHEMA,
        "version": VERSION,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "seed": seed,
        "ok": ok,
        "exitstatus": exitstatus,
        "state": state,
        "finished": state == FINISHED,
        "interrupted": interrupted.to_json() if interrupted is not None and state != FINISHED else None,
        "tier": {
            "tier": tier.tier,
            "reason": tier.reason,
            "device": dataclasses.asdict(tier.device) if tier.device else None,
            "backends": dict(tier.backends),
        },
        "test_totals": outcomes.totals() if outcomes is not None else None,
        "tests": outcomes.to_json() if outcomes is not None else [],
        "totals": totals,
        "results": [r.to_json() for r in results],
        "nothing_checked": nothing,
        "reason": None,
        "not_written": list(not_written),
    }
    if ok is False:
        doc["reason"] = not_ok_reason(doc)
    return doc


def nothing_checked(results: Iterable[CheckResult], outcomes: TestOutcomes) -> bool:
    """No test passed and no check passed or caught its mutant: every test skipped, xfailed, did not pass,
    or there was none. An xpass that is not strict verifies nothing either: its test was declared broken."""
    from .terminal import status

    if any(t.outcome == "passed" for t in outcomes.tests()):
        return False
    return not any(status(r) in ("pass", "caught") for r in results)


def strict(value: Any) -> Any:
    """``value`` with every non-finite float replaced by ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``,
    mappings as dicts and sequences as lists, so ``json.dumps(..., allow_nan=False)`` accepts it."""
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, Mapping):
        return {(k if isinstance(k, str) else str(strict(k))): strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(v) for v in value]
    return value


def dumps(document: Any) -> str:
    """Strict JSON text of ``document`` (see :func:`strict`); objects json cannot encode become strings."""
    return json.dumps(strict(document), indent=2, sort_keys=True, default=lambda o: strict(_plain(o)),
                      allow_nan=False) + "\n"


def _plain(obj: Any) -> Any:
    # numpy scalars and arrays (a check's details may carry them) as numbers and lists; the rest as text
    for attr in ("tolist", "item"):
        fn = getattr(obj, attr, None)
        if callable(fn):
            try:
                out = fn()
            except Exception:  # a foreign object: fall back to its text
                break
            if isinstance(out, (int, float, str, bool, list, tuple, type(None))):
                return out
    return str(obj)


def write_atomic(path: str, text: str, what: str = "report") -> None:
    """Write ``text`` to ``path`` atomically, as a regular file; raises OSError naming the path.

    A symlink, FIFO, device node or directory at ``path`` is an error
    (:class:`~pytest_pipecheck._atomic.UnsafePathError`), never replaced or written through.
    """
    atomic_write_text(path, text, what)


def write(path: str, results: Iterable[CheckResult], tier: TierInfo, seed: int,
          outcomes: TestOutcomes | None = None, exitstatus: int | None = None, *, state: str = FINISHED,
          interrupted: Interruption | None = None, not_written: Sequence[str] = ()) -> None:
    """Write the JSON report to ``path`` (strict JSON, atomically, as a regular file)."""
    write_atomic(path, dumps(build(results, tier, seed, outcomes, exitstatus, state=state,
                                   interrupted=interrupted, not_written=not_written)), "JSON report")
