"""How check results reach pytest: every test's reports carry the results it recorded, and a test whose
body passed still fails when a check it recorded did not pass or a failure it expected did not happen.

Registered by the entry module for every process; the sanitizer's own verdicts are recorded through the
same result contract (:func:`pytest_pipecheck.contract.finalize`) by :mod:`.sanitizer.pytest_hooks`.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from .results import CheckResult
from .state import ATTACHED, RUN_SEED, item_config, item_nodeid, item_results, role

__all__ = ["pytest_runtest_makereport", "uses_pipecheck"]


def uses_pipecheck(item: pytest.Item) -> bool:
    """The test asks for the ``pipecheck`` fixture or carries a ``pipecheck`` marker."""
    return "pipecheck" in getattr(item, "fixturenames", ()) or item.get_closest_marker("pipecheck") is not None


def _verdicts_that_fail_a_passing_test(item: pytest.Item, results: list[CheckResult]) -> str | None:
    """Why a test whose body passed must still fail: a check it recorded did not pass, or the
    failures it declared (``expect_failures``) did not happen. None when its verdict stands."""
    from .contract import unmet_expectation
    from .report.terminal import status

    # sanitizer verdicts are enforced by the sanitizer plugin itself: a finding fails the call, an
    # inconclusive run errors the teardown
    bad = [r for r in results if status(r) in ("fail", "error") and not r.check.startswith("sanitizer:")]
    if bad:
        lines = [f"pipecheck: {len(bad)} check result(s) did not pass, but the test body did not fail:"]
        lines += [f"  {r.verdict.value.upper()} {r.check}: {r.summary}" for r in bad]
        lines.append("(a failing check fails its test; a test that provokes failures on purpose declares "
                     "expect_failures in its pipecheck marker)")
        return "\n".join(lines)
    cfg = item_config(item)
    # a sanitizer child only runs the test for the tool; whether the mutant was caught is decided in
    # the parent, where the tool's verdicts are
    if cfg.expect_failures and not role(item.config).sanitizer:
        where = "the pipecheck marker" if cfg.sources.get("expect_failures") == "marker" else "the configuration"
        return unmet_expectation(results, cfg.expect_failures, f"{where} on {item_nodeid(item)}")
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    results = item_results(item)
    if report.when == "call" and report.passed and uses_pipecheck(item) and not hasattr(report, "wasxfail"):
        why = _verdicts_that_fail_a_passing_test(item, results)
        if why:
            report.outcome = "failed"
            report.longrepr = why
    if not (report.when == "setup" and report.passed):
        # each result travels once, on the first report after it was recorded (a kernel fault found
        # at teardown adds one after the call's report went out)
        attached = item.stash.get(ATTACHED, 0)
        if len(results) > attached:
            fresh = results[attached:]
            report.pipecheck_results = [r.to_json() for r in fresh]
            for r in fresh:
                # junitxml writes the properties of the teardown report, which copies the item's
                prop = (f"pipecheck.{r.check}", f"{r.verdict.value}: {r.summary}")
                report.user_properties.append(prop)
                item.user_properties.append(prop)
            item.stash[ATTACHED] = len(results)
    if report.failed and "pipecheck" in getattr(item, "fixturenames", ()):
        seed = item.config.stash[RUN_SEED]
        report.sections.append(("pipecheck: reproduce", f"pytest '{item_nodeid(item)}' --pipecheck-seed={seed}"))
    return report
