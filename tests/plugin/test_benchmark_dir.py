"""A run leaves no empty ``.benchmarks/`` behind (pytest-benchmark creates it in every run), but keeps one it
found, one given with ``--benchmark-storage`` and one a saved benchmark wrote into."""

from __future__ import annotations

import pytest


def _suite(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_one="def test_one():\n    pass\n")


def test_a_run_leaves_no_empty_benchmarks_folder(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    result = pytester.runpytest_subprocess("--pipecheck", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert not (pytester.path / ".benchmarks").exists()
    # without pipecheck's plugin, pytest-benchmark's folder is there: what the test above would otherwise see
    result = pytester.runpytest_subprocess("-p", "no:pipecheck", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert (pytester.path / ".benchmarks").is_dir()


def test_a_folder_that_was_there_or_was_asked_for_or_holds_a_benchmark_is_kept(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    (pytester.path / ".benchmarks").mkdir()
    pytester.runpytest_subprocess("--pipecheck", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert (pytester.path / ".benchmarks").is_dir()
    pytester.runpytest_subprocess("--pipecheck", "-p", "no:cacheprovider",
                                  "--benchmark-storage=file://./mine").assert_outcomes(passed=1)
    assert (pytester.path / "mine").is_dir()
    (pytester.path / ".benchmarks").rmdir()
    pytester.makepyfile(test_bench="def test_bench(benchmark):\n    benchmark(sum, [1, 2])\n")
    pytester.runpytest_subprocess("--pipecheck", "-p", "no:cacheprovider",
                                  "--benchmark-autosave").assert_outcomes(passed=2)
    assert any((pytester.path / ".benchmarks").rglob("*.json"))
