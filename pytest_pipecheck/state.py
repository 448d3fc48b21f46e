"""Run state: what pipecheck keeps on pytest's config and items, in ``pytest.StashKey``s.

The entry module (:mod:`pytest_pipecheck.plugin`) fills these; the feature plugins (sanitizer, containment,
watchdog) read them from here, so none of them imports the entry module back.
"""

from __future__ import annotations

import pytest

from .config import PipecheckConfig
from .device import TierInfo
from .report.outcomes import TestOutcomes
from .results import CheckResult

__all__ = [
    "ATTACHED",
    "ITEM_CONFIG",
    "ITEM_CONFIG_ERROR",
    "ITEM_NODEID",
    "ITEM_RESULTS",
    "RUN_CONFIG",
    "RUN_SEED",
    "SESSION_OUTCOMES",
    "SESSION_RESULTS",
    "TIER",
    "item_config",
    "item_nodeid",
    "item_results",
]

RUN_CONFIG = pytest.StashKey[PipecheckConfig]()  # the run's configuration (defaults < ini < command line)
RUN_SEED = pytest.StashKey[int]()
TIER = pytest.StashKey[TierInfo]()
SESSION_RESULTS = pytest.StashKey[list[CheckResult]]()
SESSION_OUTCOMES = pytest.StashKey[TestOutcomes]()  # the tests' own outcomes, for the reports
ITEM_CONFIG = pytest.StashKey[PipecheckConfig]()  # the run's configuration with the test's marker applied
ITEM_CONFIG_ERROR = pytest.StashKey[str]()  # why the test's marker is invalid
ITEM_RESULTS = pytest.StashKey[list[CheckResult]]()
ITEM_NODEID = pytest.StashKey[str]()
ATTACHED = pytest.StashKey[int]()  # how many of the item's results went out on its reports


def item_nodeid(item: pytest.Item) -> str:
    """The test's node id as collected (without a pytest-xdist group suffix)."""
    return item.stash.get(ITEM_NODEID, item.nodeid)


def item_config(item: pytest.Item) -> PipecheckConfig:
    return item.stash.get(ITEM_CONFIG, item.config.stash[RUN_CONFIG])


def item_results(item: pytest.Item) -> list[CheckResult]:
    if ITEM_RESULTS not in item.stash:
        item.stash[ITEM_RESULTS] = []
    return item.stash[ITEM_RESULTS]
