"""Run state: what pipecheck keeps on pytest's config and items, in ``pytest.StashKey``s.

The entry module (:mod:`pytest_pipecheck.plugin`) fills these; the feature plugins (sanitizer, containment,
watchdog) read them from here, so none of them imports the entry module back.
"""

from __future__ import annotations

import os

import pytest

from .children import Role
from .config import PipecheckConfig
from .device import TierInfo
from .report.outcomes import TestOutcomes
from .results import CheckResult

__all__ = [
    "ATTACHED",
    "HELD",
    "ITEM_CONFIG",
    "ITEM_CONFIG_ERROR",
    "ITEM_NODEID",
    "ITEM_RESULTS",
    "ROLE",
    "RUN_CONFIG",
    "RUN_SEED",
    "SESSION_OUTCOMES",
    "SESSION_RESULTS",
    "SHARE",
    "TIER",
    "item_config",
    "item_nodeid",
    "item_results",
    "restore_session_env",
    "set_session_env",
]

ROLE = pytest.StashKey[Role]()  # what this process is for (children.decode, once, at the top of configure)
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
SHARE = pytest.StashKey[int]()  # the sanitizer share a test belongs to (sanitizer.shares)
# The test ran while its sanitizer children still ran, and its reports are held until their verdicts are in
# (sanitizer.held_reports): what ended each phase of its run, by ``report.when`` (None: nothing raised).
HELD = pytest.StashKey[dict[str, BaseException | None]]()
# Per phase (``report.when``), the seconds a test waited for the GPU to be left to its timing (this process's
# sanitizer children, other xdist workers on its GPU): not the test's own, left out of its reports' durations
WAITED = pytest.StashKey[dict[str, float]]()


def item_nodeid(item: pytest.Item) -> str:
    """The test's node id as collected (without a pytest-xdist group suffix)."""
    return item.stash.get(ITEM_NODEID, item.nodeid)


def role(config: pytest.Config) -> Role:
    """This process's role; a process that never ran pipecheck's configure (none) has none."""
    from .children import NONE

    return config.stash.get(ROLE, NONE)


def note_wait(item: pytest.Item, when: str, seconds: float) -> None:
    """``item`` waited ``seconds`` in its ``when`` phase for the GPU (:data:`WAITED`)."""
    waited = item.stash.setdefault(WAITED, {})
    waited[when] = waited.get(when, 0.0) + max(0.0, seconds)


def item_config(item: pytest.Item) -> PipecheckConfig:
    return item.stash.get(ITEM_CONFIG, item.config.stash[RUN_CONFIG])


def item_results(item: pytest.Item) -> list[CheckResult]:
    if ITEM_RESULTS not in item.stash:
        item.stash[ITEM_RESULTS] = []
    return item.stash[ITEM_RESULTS]


# What this session put into os.environ for its own duration, with what was there before (None: unset)
_ENV_SET = pytest.StashKey[dict[str, str | None]]()


def set_session_env(config: pytest.Config, name: str, value: str) -> None:
    """``os.environ[name] = value`` until the session ends (:func:`restore_session_env` takes it back)."""
    if _ENV_SET not in config.stash:
        config.stash[_ENV_SET] = {}
    config.stash[_ENV_SET].setdefault(name, os.environ.get(name))
    os.environ[name] = value


def restore_session_env(config: pytest.Config) -> None:
    """Put back what :func:`set_session_env` changed. A session run inside another process (pytester's
    in-process runs, a tool calling pytest.main twice) otherwise left TRITON_INTERPRET=1 behind on a GPU
    machine: the host's later Triton launches skipped set-up meant for compiled kernels ("Kernel requires a
    runtime memory allocation"), and its sanitizer children, which inherit the environment, collected
    the CPU tier's tests instead of the ones they were sent (docs/validation/2026-11-26-h100.md)."""
    for name, before in config.stash.get(_ENV_SET, {}).items():
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before

