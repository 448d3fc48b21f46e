"""Each test's sanitizer verdicts, on the parent's side: which tests the check selects and which tools'
verdicts each must carry, the stash keys that hold them, and their recording as the test's results.

A test's verdicts reach its stash (``OUTCOMES``) from the children that judged it (:mod:`.batches`), and are
recorded once (``RECORDED``) through the one result contract (:func:`record_outcomes`): when the test runs, or
when its held reports are logged (:mod:`.held_reports`).
"""

from __future__ import annotations

import pytest

from .. import state
from ..results import CheckResult, Verdict
from .tool_outcomes import TestOutcome, format_failure

__all__ = ["OUTCOMES", "POSTPONED", "RECORDED", "expected_tools", "record_outcomes"]

OUTCOMES = pytest.StashKey[dict[str, TestOutcome]]()
RECORDED = pytest.StashKey[bool]()  # the test's sanitizer verdicts are among its results
POSTPONED = pytest.StashKey[bool]()  # the held run of the test asked for the GPU alone: it runs again at the end


def _selected(item: pytest.Item) -> bool:
    return "pipecheck" in getattr(item, "fixturenames", ()) or item.get_closest_marker("pipecheck") is not None


def _times_with_benchmark(item: pytest.Item) -> bool:
    """The test times kernels with pytest-benchmark's ``benchmark`` fixture, which asks pipecheck nothing: it
    must have the GPU to itself from its setup on."""
    return "benchmark" in getattr(item, "fixturenames", ())


def expected_tools(item: pytest.Item) -> tuple[str, ...]:
    """The sanitizer tools whose verdict ``item`` must carry when it runs (none for a test pipecheck does
    not select, one whose settings are in error, or one that does not want the sanitizer check)."""
    if not _selected(item) or state.ITEM_CONFIG_ERROR in item.stash:
        return ()
    cfg = state.item_config(item)
    if not cfg.wants("sanitizer") or not cfg.sanitizer:
        return ()
    return tuple(cfg.sanitizer)


def record_outcomes(config: pytest.Config, item: pytest.Item, outcomes: dict[str, TestOutcome]) -> list[CheckResult]:
    """Record each tool's verdict on ``item`` through the one result contract (contract.finalize):
    the marker's kernel name and ``expect_failures`` apply to sanitizer verdicts as to every check.
    Returns the recorded results, in the order of ``outcomes``."""
    from ..contract import finalize

    cfg = state.item_config(item)
    dev = config.stash[state.TIER].device  # the child ran on this process's GPU (under xdist: the worker's)
    gpu = f"{dev.name} (index {dev.index}, {dev.uuid})" if dev is not None else None
    results = state.item_results(item)
    recorded = []
    for tool, out in outcomes.items():
        details = out.details()
        if out.verdict in (Verdict.FAIL, Verdict.ERROR):
            details["message"] = format_failure(out)  # what the test's failure says (verdicts.py)
        found_kernel = next((f.kernel for f in out.findings if f.kernel), None)
        if found_kernel is not None:
            details["finding_kernel"] = found_kernel
        result = finalize(CheckResult(f"sanitizer:{tool}", out.verdict, out.summary, details=details),
                          nodeid=state.item_nodeid(item), kernel=cfg.kernel or found_kernel,
                          expecting=bool(cfg.expect_failures), gpu=gpu)
        results.append(result)
        recorded.append(result)
    return recorded
