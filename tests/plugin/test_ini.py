"""ini twins: every option can be set from the ini file; the command line overrides it."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out


def test_ini_sets_values(pytester: pytest.Pytester) -> None:
    pytester.makeini(
        """
        [pytest]
        pipecheck_min_blocks = 3
        pipecheck_arch = sm_80, 90
        pipecheck_sanitizer = none
        """
    )
    pytester.makepyfile(
        """
        def test_cfg(pipecheck):
            assert pipecheck.config.min_blocks == 3
            assert pipecheck.config.arch == ("sm_80", "sm_90")
            assert pipecheck.config.sanitizer == ()
            assert pipecheck.config.sources["min_blocks"] == "ini"
        """
    )
    pytester.runpytest().assert_outcomes(passed=1)


def test_cli_overrides_ini(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\npipecheck_min_blocks = 3\n")
    pytester.makepyfile(
        """
        def test_cfg(pipecheck):
            assert pipecheck.config.min_blocks == 1
            assert pipecheck.config.sources["min_blocks"] == "command line"
        """
    )
    pytester.runpytest("--pipecheck-min-blocks=1").assert_outcomes(passed=1)


def test_pyproject_ini_error_names_the_file(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(
        """
        [tool.pytest.ini_options]
        pipecheck_determinism_runs = "1"
        """
    )
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*pipecheck: `pipecheck_determinism_runs = 1` from the ini file (pyproject.toml) must be >= 2*"]
    )


def test_ini_enables_pipecheck(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\npipecheck = true\npipecheck_sanitizer = none\n")
    pytester.makepyfile("def test_cfg(pipecheck):\n    assert pipecheck.config.enabled\n")
    pytester.runpytest().assert_outcomes(passed=1)
