"""Seeds: printed in the header, replayable with --pipecheck-seed, derived per test from the node id."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

TEST = """
import pytest

@pytest.mark.parametrize("i", [0, 1])
def test_seeded(pipecheck, i):
    print(f"SEED {pipecheck.nodeid} {pipecheck.seed} {pipecheck.random.random()!r}")
"""


def _seeds(result: pytest.RunResult) -> dict[str, str]:
    return dict(re.findall(r"SEED (\S+) (\d+ \S+)", result.stdout.str()))


def test_seed_is_printed_and_replays(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TEST)
    first = pytester.runpytest("-s")
    m = re.search(r"pipecheck: .*seed (\d+)", first.stdout.str())
    assert m, first.stdout.str()
    replay = pytester.runpytest("-s", f"--pipecheck-seed={m.group(1)}")
    assert _seeds(first) == _seeds(replay)
    assert len(set(_seeds(first).values())) == 2  # two tests, two different seeds


def test_seed_independent_of_order_and_selection(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TEST)
    both = _seeds(pytester.runpytest("-s", "--pipecheck-seed=7"))
    only_second = _seeds(pytester.runpytest("-s", "--pipecheck-seed=7", "-k", "1"))
    key = next(k for k in both if k.endswith("[1]"))
    assert only_second[key] == both[key]
    other = _seeds(pytester.runpytest("-s", "--pipecheck-seed=8"))
    assert other[key] != both[key]


def test_failure_ends_with_reproduce_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_fails(pipecheck):
            assert False
        """
    )
    result = pytester.runpytest("--pipecheck-seed=42")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*pipecheck: reproduce*",
                                 "pytest test_failure_ends_with_reproduce_line.py::test_fails --pipecheck --pipecheck-seed=42"])
