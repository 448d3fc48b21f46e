"""Starts the Hopper module's smoke run (:mod:`reference_kernels.hopper.smoke`) once the collection is known,
so that it runs while the tests collected before the Hopper module do; the module fixture waits for it."""

from __future__ import annotations

import os

import pytest

from reference_kernels.hopper import smoke


def _wants_early_run(session: pytest.Session) -> bool:
    """Whether this process will run a test that waits for the smoke run: not a collect-only run, not a
    sanitizer child (whose own watchdog turns a hang into a verdict), not a pytest-xdist worker (which may
    never be sent a Hopper test: its fixture starts the run when it needs it), and a device that can run
    the kernel."""
    config = session.config
    if config.option.collectonly or os.environ.get("PIPECHECK_CHILD") or hasattr(config, "workerinput"):
        return False
    if not any("hopper_smoke" in getattr(item, "fixturenames", ()) for item in session.items):
        return False
    return smoke.device_problem() is None


def pytest_collection_finish(session: pytest.Session) -> None:
    if _wants_early_run(session):
        smoke.start_early_run()


def pytest_sessionfinish(session: pytest.Session) -> None:
    smoke.stop_early_run()
