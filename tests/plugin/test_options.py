"""Options: registered in the pipecheck group, validated, errors name the command line."""

from __future__ import annotations

import pytest

from pytest_pipecheck.config import SETTINGS

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out


def test_help_shows_group_and_every_option(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["*pipecheck: checks for pipelined GPU kernels*", "*--pipecheck *"])
    out = result.stdout.str()
    for s in SETTINGS:
        if s.cli:
            assert s.option in out, s.option
        if s.ini:
            assert s.ini_name in out, s.ini_name


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pipecheck-seed=abc"], "`--pipecheck-seed=abc` from the command line must be an integer"),
        (["--pipecheck-min-blocks=0"], "`--pipecheck-min-blocks=0` from the command line must be >= 1"),
        (["--pipecheck-arch=sm_99"], "`--pipecheck-arch=sm_99` from the command line is invalid: 'sm_99' is not a known architecture"),
        (["--pipecheck-sanitizer=racechek"], "*names unknown 'racechek' (did you mean 'racecheck'?)*"),
        (["--pipecheck-sanitizer-timeout=0"], "`--pipecheck-sanitizer-timeout=0` from the command line must be > 0"),
        (["--pipecheck-tier=tpu"], "*must be one of auto, cpu, gpu"),
        (["--pipecheck-sanitizer-jobs=0"],
         "`--pipecheck-sanitizer-jobs=0` from the command line must be auto or a whole number (must be >= 1)"),
        (["--pipecheck-sanitizer-jobs=many"], "*--pipecheck-sanitizer-jobs=many* must be auto or a whole number*"),
        (["--pipecheck-suppressions=nope.supp"], "*`--pipecheck-suppressions=nope.supp` from the command line names a file that does not exist"),
    ],
)
def test_bad_cli_value_is_one_line_usage_error(pytester: pytest.Pytester, args: list[str], message: str) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*pipecheck: {message}*" if not message.startswith("*") else message])
    assert "Traceback" not in result.stderr.str()


def test_valid_options_reach_the_fixture(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_cfg(pipecheck):
            c = pipecheck.config
            assert c.arch == ("sm_86", "sm_90a")
            assert c.min_blocks == 2
            assert c.sanitizer == ("racecheck", "memcheck")
            assert c.shape_level == "medium"
            assert c.sources["min_blocks"] == "command line"
        """
    )
    result = pytester.runpytest(
        "--pipecheck-arch=8.6,sm_90a", "--pipecheck-min-blocks=2",
        "--pipecheck-sanitizer=memcheck,racecheck", "--pipecheck-shape-level=medium",
    )
    result.assert_outcomes(passed=1)


def test_sanitizer_extension_on_the_command_line_names_the_option(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--pipecheck-sanitizer=+memchek")
    result.stderr.fnmatch_lines(["*`--pipecheck-sanitizer=+memchek` from the command line names unknown '+memchek' "
                                 "(did you mean '+memcheck'?)*"])
