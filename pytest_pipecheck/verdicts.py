"""How check results reach pytest: the one place where a test's reports are made to agree with what it
recorded, for every check and for the sanitizer's verdicts alike.

* every report carries the results recorded since the last one (``pipecheck_results``, and JUnit
  properties), so xdist, the JUnit XML and pipecheck's reports see them;
* a sanitizer finding (a ``sanitizer:<tool>`` result that failed and was not expected) fails the test's
  call whatever its body did: passed, skipped, xfailed or raised (then the finding is added to its
  failure);
* an inconclusive sanitizer verdict errors the test's teardown, unless the call failed already;
* any other check that did not pass fails a test whose body passed, and so does a failure the test
  expected (``expect_failures``) that did not happen;
* such a check also fails a test whose body skipped, xfailed or xpassed after it (a failing check and then
  ``pytest.skip``), and a test whose fixture recorded it in its setup before a skip, or in its teardown (the
  teardown errors): a test that recorded a failing or inconclusive check never ends as passed or skipped, so
  pytest's exit status and the JUnit XML agree with pipecheck's reports;
* a test that expects failures (``expect_failures`` in its marker) whose body ended on a check failure
  it expected (the check raised it and recorded it as caught) passes, unless something else did not:
  see :func:`caught_ending`.

:func:`apply` is called from ``pytest_runtest_makereport`` for the tests this process runs (for a test whose
reports wait for its sanitizer verdicts, when they are logged: :func:`finish`), and by the containment relay
for the reports it replays from a fresh process (:mod:`.containment`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator
from typing import Any

import pytest

from .results import CheckResult, PipecheckFailure, Verdict
from .state import ATTACHED, HELD, RUN_SEED, WAITED, item_config, item_nodeid, item_results, role

__all__ = ["apply", "caught_ending", "finish", "pytest_runtest_makereport", "uses_pipecheck"]

#: the item's call report failed (its own failure, or one of pipecheck's)
CALL_FAILED = pytest.StashKey[bool]()
#: the item's setup report failed (set at every setup report: a test run again starts from its own)
SETUP_FAILED = pytest.StashKey[bool]()


def uses_pipecheck(item: pytest.Item) -> bool:
    """The test asks for the ``pipecheck`` fixture or carries a ``pipecheck`` marker."""
    return "pipecheck" in getattr(item, "fixturenames", ()) or item.get_closest_marker("pipecheck") is not None


def _message(r: CheckResult) -> str:
    return str(r.details.get("message") or f"{r.check}: {r.summary}")


def _findings(results: list[CheckResult]) -> list[CheckResult]:
    return [r for r in results if r.check.startswith("sanitizer:") and r.verdict == Verdict.FAIL and not r.expected]


def _inconclusive(results: list[CheckResult]) -> list[CheckResult]:
    return [r for r in results if r.check.startswith("sanitizer:") and r.verdict == Verdict.ERROR and not r.xfailed]


def _what_the_body_did(report: pytest.TestReport) -> str:
    if hasattr(report, "wasxfail") and report.passed:
        return f"the body passed, although marked xfail: {report.wasxfail or 'xfail'}"
    if hasattr(report, "wasxfail"):
        return f"the body xfailed: {report.wasxfail or 'xfail'}"
    if report.skipped:
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        return f"the body skipped: {reason.removeprefix('Skipped: ')}"
    return "the body passed"


def _checks_not_passed(results: list[CheckResult], but: str) -> str | None:
    """The message for the checks other than the sanitizer's that failed (not expected) or errored, saying
    ``but`` what the test did; None when there are none."""
    from .report.terminal import status

    bad = [r for r in results if status(r) in ("fail", "error") and not r.check.startswith("sanitizer:")]
    if not bad:
        return None
    lines = [f"pipecheck: {len(bad)} check result(s) did not pass, {but}:"]
    lines += [f"  {r.verdict.value.upper()} {r.check}: {r.summary}" for r in bad]
    lines.append("(a failing check fails its test; a test that provokes failures on purpose declares "
                 "expect_failures in its pipecheck marker)")
    return "\n".join(lines)


def _checks_that_fail_a_passing_test(item: pytest.Item, results: list[CheckResult]) -> str | None:
    """Why a test whose body passed must still fail: a check it recorded did not pass, or the failures it
    declared (``expect_failures``) did not happen. None when its verdict stands."""
    from .contract import unmet_expectation

    why = _checks_not_passed(results, "but the test body did not fail")
    if why:
        return why
    cfg = item_config(item)
    # a child pipecheck started has only some of the verdicts (a sanitizer child none of the checks', a
    # relay child none of the sanitizer's): whether the mutant was caught is decided in the parent
    if cfg.expect_failures and not role(item.config).child:
        if mutant_function(item) is not None:
            return None  # one case of a parametrized mutant test: its cases decide together (expect_at_cases)
        where = "the pipecheck marker" if cfg.sources.get("expect_failures") == "marker" else "the configuration"
        return unmet_expectation(results, cfg.expect_failures, f"{where} on {item_nodeid(item)}")
    return None


def mutant_function(item: pytest.Item) -> str | None:
    """For one case of a parametrized test that expects failures (``expect_failures``): the test function's
    node id without the case (``test_mutants.py::test_k_tail``), which its cases share; else None.

    A planted bug need not show at every case (a K-tail bug at a K that is a multiple of the tile): the
    expectation is met when the checks it names caught the bug at some case of the parametrization. Each
    case's report says what it caught (``pipecheck_expect``); the reporter decides for the function once every
    case has run and fails the run where no case caught it (:mod:`.report.reporter`)."""
    if getattr(item, "callspec", None) is None or not item_config(item).expect_failures:
        return None
    nodeid = item_nodeid(item)
    return nodeid[:nodeid.index("[")] if "[" in nodeid else None


def _note_expectation(item: pytest.Item, report: pytest.TestReport, results: list[CheckResult]) -> None:
    """On the call report of a case of a parametrized mutant test: what the case caught, for the reporter."""
    from .contract import caught_names

    function = mutant_function(item)
    if function is None or role(item.config).child or report.skipped:
        return  # a case that did not run (skipped on this tier, xfailed) neither caught nor missed the bug
    expect = item_config(item).expect_failures
    caught = caught_names(results, expect)
    report.pipecheck_expect = {  # type: ignore[attr-defined]
        "function": function, "case": item_nodeid(item), "caught": caught,
        "expect": list(expect) if isinstance(expect, tuple) else True}
    if report.passed and not caught:
        report.sections.append(("pipecheck: expect_failures", "the planted bug did not show at this case; the "
                                f"other cases of {function} decide whether it was caught"))


def caught_ending(item: pytest.Item, results: list[CheckResult], raised: BaseException | None) -> CheckResult | None:
    """The caught result whose failure ended the test's body, when that is all that went wrong; else None.

    A check raises :class:`~pytest_pipecheck.results.PipecheckFailure` on a defect, also in a test that
    provokes one on purpose (``expect_failures`` in its marker), where it records the result as caught.
    Such a test need not catch the exception: its body ends there, and the test's verdict is the
    expectation's. Only that exception qualifies, never a lookalike: ``raised`` must be the
    PipecheckFailure of a result this test recorded, expected and failed; every other result the test
    recorded must have passed, been skipped or been caught (an ERROR, an unexpected failure, a sanitizer
    finding keep the test failed); whether the expected checks caught it is decided after, as for a
    body that passed. Any other exception (a bug in the test, a TypeError, a PipecheckError for a bad
    spec, a PipecheckFailure the test raised itself or from an ``expecting_failures()`` block in a test
    without the marker) fails the test as before.
    """
    from .report.terminal import status

    if not isinstance(raised, PipecheckFailure) or not item_config(item).expect_failures:
        return None
    caught = raised.result
    if caught is None or not caught.expected or caught.verdict != Verdict.FAIL:
        return None
    if not any(r is caught for r in results):  # recorded by this test, not built by hand
        return None
    if any(status(r) in ("fail", "error") for r in results):
        return None
    return caught


def _declared_xfail(item: pytest.Item, raised: BaseException | None) -> Any:
    """The xfail marker that declares this test's failure expected, as pytest evaluates it; None where none
    does: no marker applies, ``--runxfail``, the body called ``pytest.xfail`` itself (after a failing check
    that would hide it), or it raised an exception the marker's ``raises`` does not name."""
    if item.config.getoption("runxfail", False) or isinstance(raised, pytest.xfail.Exception):
        return None
    try:
        from _pytest.skipping import evaluate_xfail_marks, xfailed_key
    except ImportError:  # pragma: no cover - pytest moved it: no marker is trusted to hide a failing check
        return None
    declared = item.stash.get(xfailed_key, None)
    if declared is None and item.get_closest_marker("xfail") is not None:
        declared = evaluate_xfail_marks(item)
    if declared is None or not declared.run:
        return None
    if raised is not None and declared.raises is not None and not _raised_as(raised, declared.raises):
        return None
    return declared


def _raised_as(raised: BaseException, raises: Any) -> bool:
    """Whether ``raised`` is one of ``raises``, or a check's failure caused by one: a check that launches a
    kernel whose entry point raises (an upstream TypeError) records it and raises ``PipecheckFailure`` from it,
    and a marker's ``raises=TypeError`` names that TypeError."""
    seen: set[int] = set()
    current: BaseException | None = raised
    while current is not None and id(current) not in seen:
        if isinstance(current, raises):
            return True
        if current is not raised and not isinstance(raised, PipecheckFailure):
            return False
        seen.add(id(current))
        current = current.__cause__  # "raise ... from exc": not an exception that was only being handled
    return False


def _expected_by_marker(item: pytest.Item, report: pytest.TestReport, results: list[CheckResult],
                        raised: BaseException | None) -> bool:
    """A test its xfail marker expects to fail, whose checks did not all pass: their failures are the declared
    one (an upstream bug the test names), so the test is xfailed as pytest counts it and its failing and
    inconclusive checks read "xfailed", not as failures (a strict xfail whose only failure is a check is
    xfailed too). A sanitizer finding is never hidden this way: it fails the test before this is asked.
    True when the report was made to say so."""
    from .report.terminal import status

    declared = _declared_xfail(item, raised)
    if declared is None:
        return False
    bad = [r for r in results if status(r) in ("fail", "error") and (
        not r.check.startswith("sanitizer:")
        or (r.verdict == Verdict.ERROR and r.details.get("child_outcome") == "failed"))]  # failed in the child too
    if not bad:
        return False
    if declared.raises is not None:
        # raises= declares one failure: the entry point raising it. A check that failed otherwise (a mismatch
        # before the upstream bug's exception) is not declared, and fails the test
        names = {c.__name__ for c in (declared.raises if isinstance(declared.raises, tuple) else (declared.raises,))}
        undeclared = [r for r in bad if not r.check.startswith("sanitizer:")
                      and not names & set(r.details.get("raised") or [])]
        if undeclared:
            return False
    strict_xpass = (report.failed and isinstance(report.longrepr, str)
                    and report.longrepr.startswith("[XPASS(strict)]"))
    xfailed = hasattr(report, "wasxfail") and not report.passed
    xpassed = hasattr(report, "wasxfail") and report.passed
    if not (xfailed or xpassed or strict_xpass or (report.failed and raised is not None)):
        return False
    marked = {id(r): dataclasses.replace(r, xfailed=True) for r in bad}
    recorded = item_results(item)
    recorded[:] = [marked.get(id(r), r) for r in recorded]
    results[:] = [marked.get(id(r), r) for r in results]
    if not xfailed:
        # the body did not raise (or raised what the marker accepts): the checks' failure is the test's
        report.outcome = "skipped"
        report.wasxfail = declared.reason
        report.longrepr = "\n".join(f"{r.verdict.value.upper()} {r.check}: {r.summary}" for r in bad)
    return True


def _fail(report: pytest.TestReport, text: str) -> None:
    report.outcome = "failed"
    report.longrepr = text
    if hasattr(report, "wasxfail"):
        del report.wasxfail  # an xfail that a finding overrides is a failure, not an expected one


def apply(item: pytest.Item, report: pytest.TestReport, carried: list[CheckResult] | None = None,
          raised: BaseException | None = None) -> None:
    """Make ``report`` agree with what ``item`` recorded (see the module's docstring). ``carried``: the
    results a replayed report brought from the relay child that ran the test (the checks of its body);
    ``raised``: the exception that ended the phase, if any (a relay child's report comes decided)."""
    recorded = item_results(item)
    results = [*(carried or []), *recorded]
    if report.when == "call":
        findings = _findings(results)
        if findings:
            text = "\n\n".join(_message(r) for r in findings)
            if report.failed:
                report.sections.append(("pipecheck: sanitizer", text))
            else:
                _fail(report, f"{text}\n\n(pipecheck: a sanitizer finding fails the test; {_what_the_body_did(report)})")
        elif uses_pipecheck(item) and _expected_by_marker(item, report, results, raised):
            pass
        else:
            caught = (caught_ending(item, results, raised)
                      if report.failed and uses_pipecheck(item) and not hasattr(report, "wasxfail") else None)
            if caught is not None:
                report.outcome = "passed"
                report.longrepr = None
                report.sections.append(("pipecheck: caught", f"{caught.check} caught the bug, ending the test body:\n"
                                                              f"{raised}"))
            if report.passed and uses_pipecheck(item) and not hasattr(report, "wasxfail"):
                why = _checks_that_fail_a_passing_test(item, results)
                if why and caught is not None:
                    why += (f"\n(the test body ended at the failure {caught.check} caught, so the checks it would "
                            "have called after it did not run: call check_kernel, which runs coverage, the tile "
                            "probe and determinism before it raises, or catch the first failure)\n\n"
                            f"{raised}")
                if why:
                    _fail(report, why)
            elif not report.failed:
                # skipped, xfailed, or an xpass that is not strict, after a check that did not pass: the check's
                # verdict stands, or pytest's exit status and the JUnit XML would say pass where the reports do not
                why = _checks_not_passed(results, f"and then {_what_the_body_did(report)}")
                if why:
                    _fail(report, why)
        if report.failed:
            item.stash[CALL_FAILED] = True
        _note_expectation(item, report, results)
    elif report.when == "setup":
        if report.skipped:  # a fixture recorded a check that did not pass, then skipped the test
            why = _checks_not_passed(results, "and then the setup skipped the test: "
                                     + _what_the_body_did(report).removeprefix("the body skipped: "))
            if why:
                _fail(report, why)
        item.stash[SETUP_FAILED] = report.failed
    elif report.when == "teardown" and report.passed and not item.stash.get(CALL_FAILED, False):
        errors = _inconclusive(results)
        if errors:
            _fail(report, "pipecheck sanitizer inconclusive (an error, not a pass):\n"
                  + "\n\n".join(_message(r) for r in errors))
        elif not item.stash.get(SETUP_FAILED, False):
            # recorded after the call's report (a fixture's teardown, or a failure it caught there): no earlier
            # report of the test failed for it, so its teardown does
            why = _checks_not_passed(results, "recorded after the test's call (in a fixture's teardown)")
            if why:
                _fail(report, why)
    _attach(item, report, recorded)


def _attach(item: pytest.Item, report: pytest.TestReport, results: list[CheckResult]) -> None:
    if report.when == "setup" and report.passed:
        return
    # each result travels once, on the first report after it was recorded (a kernel fault found at
    # teardown adds one after the call's report went out)
    attached = item.stash.get(ATTACHED, 0)
    if len(results) > attached:
        fresh = results[attached:]
        report.pipecheck_results = [*getattr(report, "pipecheck_results", []),  # type: ignore[attr-defined]
                                    *(r.to_json() for r in fresh)]
        for r in fresh:
            # junitxml writes the properties of the teardown report, which copies the item's
            prop = (f"pipecheck.{r.check}", f"{'xfailed ' if r.xfailed else ''}{r.verdict.value}: {r.summary}")
            report.user_properties.append(prop)
            item.user_properties.append(prop)
        item.stash[ATTACHED] = len(results)


def finish(item: pytest.Item, report: pytest.TestReport, raised: BaseException | None) -> None:
    """Make ``report`` of a test this process ran agree with what it recorded (:func:`apply`), and say how to
    reproduce a failure: when the report is made, or, for a test whose reports were held until its
    sanitizer verdicts came in (``state.HELD``), just before it is logged."""
    apply(item, report, raised=raised)
    if report.failed and "pipecheck" in getattr(item, "fixturenames", ()):
        from .children import reproduce_line

        report.sections.append(("pipecheck: reproduce",
                                reproduce_line(item.config, item_nodeid(item), item.config.stash[RUN_SEED])))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    waited = item.stash.get(WAITED, {}).get(report.when, 0.0)
    if waited > 0:  # the test waited for the GPU to be left to its timing: not the test's time
        report.duration = max(0.0, report.duration - waited)
    raised = call.excinfo.value if call.excinfo is not None else None
    held = item.stash.get(HELD, None)
    if held is not None:  # decided when its sanitizer verdicts are in (sanitizer.held_reports)
        held[report.when] = raised
        return report
    finish(item, report, raised)
    return report
