"""An empty value is a usage error, never "off" or "the default", in every layer a run is configured by on the
command line: ``--pipecheck-compare=`` (an unset ``$BASE_SHA`` in CI) used to turn compare mode off, and with
no stored baselines the perf gate measured nothing and the run was green; an empty ``--pipecheck-json=``,
``--pipecheck-markdown=`` or ``--pipecheck-baseline-dir=`` wrote no report, or read the default directory. The
same for an ini key present with no value and for ``-o KEY=`` (pytest's ``getini`` reads both as absent;
pipecheck reads the ini table itself). A value that turns a setting off on purpose (``none``) still does."""

from __future__ import annotations

import pytest

from pytest_pipecheck.config import SETTINGS, Setting

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

WITH_VALUES = [s for s in SETTINGS if s.cli and not s.flag]
IN_INI = [s for s in SETTINGS if s.ini]


def _usage_error(result: pytest.RunResult, line: str) -> None:
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines([f"ERROR: pipecheck: {line}"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


def test_an_empty_compare_revision_is_a_usage_error_not_compare_mode_off(pytester: pytest.Pytester) -> None:
    """The issue's run: nothing is collected or timed, and the message says what to do."""
    pytester.makepyfile("def test_x(pipecheck):\n    raise AssertionError('must not run')\n")
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-compare=", "-p", "no:cacheprovider")
    _usage_error(result, "--pipecheck-compare= is empty (an unset variable?): give a git revision, or leave the "
                         "option out")
    assert "must not run" not in result.stdout.str()


@pytest.mark.parametrize("setting", WITH_VALUES, ids=lambda s: s.option)
def test_every_option_given_an_empty_value_is_a_usage_error(pytester: pytest.Pytester, setting: Setting) -> None:
    option = setting.option
    for args in ([f"{option}="], [option, ""], [f"{option}=  "]):
        result = pytester.runpytest_inprocess("--pipecheck", *args, "-p", "no:cacheprovider")
        _usage_error(result, f"{option}= is empty (an unset variable?): give *, or leave the option out")


@pytest.mark.parametrize("setting", IN_INI, ids=lambda s: s.ini_name)
def test_every_ini_key_with_no_value_is_a_usage_error(pytester: pytest.Pytester, setting: Setting) -> None:
    key = setting.ini_name
    pytester.makeini(f"[pytest]\n{key} =\n")
    _usage_error(pytester.runpytest_inprocess("-p", "no:cacheprovider"),
                 f"`{key} =` in the ini file (tox.ini) is empty: give *, or remove the key to keep the default*")
    (pytester.path / "tox.ini").unlink()
    _usage_error(pytester.runpytest_inprocess("-p", "no:cacheprovider", "-o", f"{key}="),
                 f"-o {key}= is empty (an unset variable?): give *, or leave the override out")


def test_an_empty_string_in_pyproject_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\npipecheck_markdown = ""\n')
    _usage_error(pytester.runpytest_inprocess("-p", "no:cacheprovider"),
                 "`pipecheck_markdown =` in the ini file (pyproject.toml) is empty: give a path*")


def test_a_bad_value_from_o_names_o(pytester: pytest.Pytester) -> None:
    _usage_error(pytester.runpytest_inprocess("-p", "no:cacheprovider", "-o", "pipecheck_tier=tpu"),
                 "`-o pipecheck_tier=tpu` from the command line must be one of auto, cpu, gpu")


def test_none_still_turns_a_report_off_and_unset_keeps_the_default(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(pipecheck):\n    print('BASELINES', pipecheck.config.baseline_dir)\n")
    result = pytester.runpytest_inprocess("--pipecheck", "--pipecheck-json=none", "--pipecheck-sanitizer=none",
                                          "-p", "no:cacheprovider", "-s")
    result.assert_outcomes(passed=1)
    assert "BASELINES pipecheck-baselines" in result.stdout.str()
    assert not list(pytester.path.glob("*.json"))
