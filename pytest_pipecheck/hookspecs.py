"""The hooks pipecheck adds to pytest's, for plugins and ``conftest.py`` files.

A team's own check is one function and one registration, as pytest-xdist's and pytest-benchmark's hooks
are: no method is added to the fixture and no signature repeated::

    # conftest.py
    from pytest_pipecheck import CheckResult, OutsideCheck, Verdict

    def no_nan(ctx, out):
        bad = int(out.isnan().sum())
        return CheckResult("no_nan", Verdict.FAIL if bad else Verdict.PASS, f"{bad} NaN in the output")

    def pytest_pipecheck_checks():
        return [OutsideCheck("no_nan", no_nan, catches="NaN in an output", selection="coverage")]

    # test_kernel.py
    def test_kernel(pipecheck):
        pipecheck.check("no_nan", run_my_kernel())

The check then runs under the rules every check shares (selection, a sanitizer child's policy, an exception
recorded as an ERROR) and its results reach every report (:mod:`pytest_pipecheck.outside`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # pragma: no cover
    from .outside import OutsideCheck


@pytest.hookspec
def pytest_pipecheck_checks() -> Sequence[OutsideCheck]:
    """The checks this plugin or ``conftest.py`` adds to pipecheck: a sequence of
    :class:`~pytest_pipecheck.outside.OutsideCheck`. A ``conftest.py``'s checks are known to the tests
    under its directory; a plugin's to every test."""
    return ()
