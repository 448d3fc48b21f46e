"""Every "reproduce:" line pipecheck prints gives back, through a shell, exactly the arguments that rerun what
failed (pytest_pipecheck/reproduce.py): the line of a test (the fixture's, the report section's, the Markdown
and HTML reports') and the lines of a sanitizer child (compute-sanitizer's runner, ConSan's). Node ids carry
quotes, command substitutions, spaces and semicolons; a line that quoted them by hand (``pytest '{id}'``)
broke on the first and ran the second."""

from __future__ import annotations

import html
import re
import shlex

import pytest

from pytest_pipecheck.reproduce import rerun_argv, shell_line
from pytest_pipecheck.results import CheckResult, Verdict

#: node ids a parametrized test really gets: pytest keeps these characters in ids
CRAFTED = [
    "tests/test_k.py::test_a[it's]",
    "tests/test_k.py::test_a[$(touch pwned)]",
    "tests/test_k.py::test_a[`id`]",
    "tests/test_k.py::test_a[a b;c]",
    "tests/test_k.py::test_a[x && y | z > w]",
    'tests/test_k.py::test_a["q"\\n]',
]


def _tokens(line: str) -> list[str]:
    """``line`` as a POSIX shell splits it, with ``(``, ``)`` and ``&&`` as tokens of their own."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


@pytest.mark.parametrize("nodeid", CRAFTED)
def test_a_tests_line_splits_back_into_its_arguments(nodeid: str) -> None:
    argv = rerun_argv(nodeid, 42, ["--pipecheck-tier=cpu", "-o", "x=it's a;b"])
    assert argv == ["pytest", nodeid, "--pipecheck", "--pipecheck-seed=42", "--pipecheck-tier=cpu", "-o", "x=it's a;b"]
    assert shlex.split(shell_line(argv)) == argv


@pytest.mark.parametrize("nodeid", CRAFTED)
def test_a_line_with_a_directory_and_variables_splits_into_the_subshell_and_the_arguments(nodeid: str) -> None:
    argv = ["compute-sanitizer", "--tool", "racecheck", "python", "-m", "pytest", nodeid]
    line = shell_line(argv, cwd="/the repo's dir", env={"K": "v w"}, fresh_dirs=("TRITON_CACHE_DIR",))
    assert _tokens(line) == ["(", "cd", "/the repo's dir", "&&", "env", "K=v w", 'TRITON_CACHE_DIR=$(mktemp -d)',
                             *argv, ")"]
    # the one expansion is the fresh directory's, outside any quotes
    assert 'TRITON_CACHE_DIR="$(mktemp -d)"' in line


@pytest.mark.parametrize("nodeid", CRAFTED)
def test_the_sanitizer_runners_line_is_its_childs_command(nodeid: str) -> None:
    from pytest_pipecheck.sanitizer.child_command import BatchSpec, build_command
    from pytest_pipecheck.sanitizer.runner import SanitizerRunner

    child_args = ["python", "-m", "pytest", "-p", "no:cacheprovider", "--pipecheck", "--pipecheck-seed=7"]
    runner = SanitizerRunner("/opt/cs dir/compute-sanitizer", cwd="/root dir", child_args=child_args, env={},
                             timeouts={})
    spec = BatchSpec("racecheck", (nodeid,))
    tokens = _tokens(runner.reproduce_command(spec, nodeid))
    assert tokens == ["(", "cd", "/root dir", "&&",
                      *build_command("/opt/cs dir/compute-sanitizer", spec, child_args, [nodeid]), ")"]
    assert tokens[-2] == nodeid and "--pipecheck-child=racecheck" in tokens


@pytest.mark.parametrize("nodeid", CRAFTED)
def test_consans_line_is_its_childs_command_with_the_knob_and_a_fresh_cache(nodeid: str) -> None:
    from pytest_pipecheck.sanitizer.child_command import BatchSpec
    from pytest_pipecheck.sanitizer.consan import ConsanRunner

    runner = ConsanRunner(cwd="/root dir", child_args=["python", "-m", "pytest", "--pipecheck"], env={},
                          timeouts={})
    tokens = _tokens(runner.reproduce_command(BatchSpec("consan", (nodeid,), scope="test"), nodeid))
    assert tokens == ["(", "cd", "/root dir", "&&", "env", "TRITON_INSTRUMENTATION_MODE=consan",
                      "TRITON_CACHE_DIR=$(mktemp -d)", *runner.command([nodeid], "test"), ")"]


@pytest.mark.parametrize("nodeid", CRAFTED)
def test_the_fixtures_fallback_line_quotes_the_id_and_names_pipecheck(nodeid: str) -> None:
    """A context built without the run's line (a unit test's, a script's) still prints one that parses."""
    from pytest_pipecheck.checks.context import CheckContext
    from pytest_pipecheck.config import PipecheckConfig
    from pytest_pipecheck.device import TierInfo

    ctx = CheckContext(nodeid, PipecheckConfig(), TierInfo("cpu", None, "no GPU in this test"), 5)
    assert shlex.split(ctx.reproduce) == ["pytest", nodeid, "--pipecheck", "--pipecheck-seed=5"]


@pytest.mark.parametrize("nodeid", CRAFTED)
def test_the_markdown_and_html_reports_lines_split_back(nodeid: str) -> None:
    from pytest_pipecheck.device import TierInfo
    from pytest_pipecheck.report import html as html_report
    from pytest_pipecheck.report import markdown

    results = [CheckResult("coverage", Verdict.FAIL, "dropped tile", nodeid=nodeid)]
    tier = TierInfo("cpu", None, "no GPU in this test")
    want = ["pytest", nodeid, "--pipecheck", "--pipecheck-seed=9"]
    text = markdown.render(results, tier, 9)
    found = re.search(r"^reproduce: (`+) ?(.*?) ?\1$", text, re.M)
    assert found is not None, text
    assert shlex.split(found.group(2)) == want
    page = html_report.render(results, tier, 9)
    code = re.search(r"reproduce: <code>(.*?)</code>", page)
    assert code is not None
    assert shlex.split(html.unescape(code.group(1))) == want
