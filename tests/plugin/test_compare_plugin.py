"""``--pipecheck-compare=REV`` through real pytest runs in a temporary git repository.

Each test commits a test file at REV, changes it in the working tree, and runs pytest in a subprocess
with compare mode on. Timing needs a GPU, so the test seam ``PIPECHECK_TEST_FAKE_TIMER=return`` makes
both processes (the head and REV's) take the number the timed callable returns as its time in us: the
protocol, the pairing and the gate run as on a GPU, and no outcome depends on the wall clock.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.skipif(shutil.which("git") is None, reason="needs git"),
              pytest.mark.cpu_only]  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

#: a fake kernel whose "time" is FACTOR * 100 us with 1% lognormal noise (seeded by FACTOR, so the two sides
#: of a changed kernel draw different noise and the confidence interval is a real one)
KERNEL = """
import os
import signal
import time

import numpy as np

FACTOR = {factor}
MODE = {mode!r}


def make(case=""):
    rng = np.random.default_rng(int(FACTOR * 1000) + len(case))

    def kernel():
        if MODE == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        if MODE == "hang":
            time.sleep(600)
        return float(100.0 * FACTOR * np.exp(rng.normal(0.0, 0.01)))

    return kernel
"""

TESTS = """
from kernel import make


def test_gemm(pipecheck):
    pipecheck.check_perf(make("a"), case="a", n_samples=40)
"""


def _git(path: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    subprocess.run(["git", *args], cwd=path, check=True, capture_output=True, env=env)


@pytest.fixture
def repo(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A git repository in pytester's directory; ``commit(**files)`` writes and commits files, ``write(**files)``
    only writes them (the working tree's change)."""
    monkeypatch.setenv("PIPECHECK_TEST_FAKE_TIMER", "return")
    _git(pytester.path, "init", "-q")

    def write(**files: str) -> None:
        for name, text in files.items():
            (pytester.path / f"{name}.py").write_text(text)

    def commit(tag: str | None = None, **files: str) -> None:
        write(**files)
        _git(pytester.path, "add", "-A")
        _git(pytester.path, "commit", "-q", "-m", "change")
        if tag:
            _git(pytester.path, "tag", tag)

    return write, commit


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("--pipecheck-tier=cpu", "-p", "no:cacheprovider", "-rA",
                                         "--pipecheck-json=out.json", *args, timeout=240)


def _perf(pytester: pytest.Pytester) -> dict[str, dict[str, Any]]:
    doc = json.loads((pytester.path / "out.json").read_text())
    return {f"{r['nodeid']}[{r['details'].get('case')}]": r for r in doc["results"] if r["check"] == "perf"}


def test_slower_head_fails_with_the_paired_ratio_and_its_interval(pytester: pytest.Pytester, repo: Any) -> None:
    write, commit = repo
    commit(tag="base", kernel=KERNEL.format(factor=1.00, mode="ok"), test_k=TESTS)
    write(kernel=KERNEL.format(factor=1.05, mode="ok"))
    result = _run(pytester, "--pipecheck-compare=base")
    result.assert_outcomes(failed=1)
    result.stdout.re_match_lines([
        r".*perf regression against base \(\w{10}\) in test_k.py::test_gemm \[case a\]: \S+ us vs \S+ us at base "
        r"\(\w{10}\) \(\+\d\.\d% paired, 95% CI \+\d\.\d%\.\.\+\d\.\d%, p=\S+, 40 pairs\)",
        r".*gate \(--pipecheck-compare\): the median of the per-pair ratios head/REV, .* slower by more than 1.5%.*",
    ])
    # what the run does while REV's process starts is said, not silent (it can take a minute)
    result.stdout.re_match_lines([
        r"pipecheck compare: starting the process that times base \(\w{10}\) in its own tree \(1 test file\(s\) "
        r"to collect, up to \d+ s\); the head's timings wait for it",
        r"pipecheck compare: base \(\w{10}\)'s process is ready after \d+\.\d s \(\d+ tests collected there\)",
    ])
    perf = _perf(pytester)["test_k.py::test_gemm[a]"]
    assert perf["verdict"] == "fail" and perf["details"]["decided_by"] == "compare"
    cmp = perf["details"]["compare"]
    assert cmp["status"] == "compared" and cmp["decision"] == "fail" and cmp["rev"] == "base" and len(cmp["sha"]) == 40
    assert cmp["ci_low"] < cmp["ratio"] < cmp["ci_high"] and 1.03 < cmp["ratio"] < 1.07 and cmp["n_pairs"] == 40
    assert perf["details"]["baseline_median_us"] == cmp["base_median_us"] and perf["details"]["change"] == cmp["change"]
    assert perf["details"]["stored"]["status"] == "none"  # no stored baseline: reported as such, not an error
    # the repository is as it was: no worktree registered, the working tree's change still there
    out = subprocess.run(["git", "worktree", "list"], cwd=pytester.path, capture_output=True, text=True).stdout
    assert len(out.strip().splitlines()) == 1
    status = subprocess.run(["git", "status", "--porcelain"], cwd=pytester.path, capture_output=True, text=True)
    assert " M kernel.py" in status.stdout.splitlines() and "test_k.py" not in status.stdout


def test_unchanged_head_passes_also_under_crash_isolation(pytester: pytest.Pytester, repo: Any) -> None:
    write, commit = repo
    commit(kernel=KERNEL.format(factor=1.00, mode="ok"), test_k=TESTS)
    write(kernel=KERNEL.format(factor=1.00, mode="ok") + "\n# a comment: the kernel is the same\n")
    # --pipecheck on the CPU tier runs the tests in a relay child (crash isolation), which gets the run's tree
    result = _run(pytester, "--pipecheck", "--pipecheck-compare=HEAD")
    result.assert_outcomes(passed=1)
    perf = _perf(pytester)["test_k.py::test_gemm[a]"]
    assert perf["verdict"] == "pass", perf
    assert perf["details"]["compare"]["decision"] == "pass" and abs(perf["details"]["compare"]["change"]) < 0.015
    assert "paired, 95% CI" in perf["summary"] and "at HEAD" in perf["summary"]


def test_what_is_new_at_rev_is_reported_new_never_failed(pytester: pytest.Pytester, repo: Any) -> None:
    write, commit = repo
    commit(kernel=KERNEL.format(factor=1.00, mode="ok"), test_k=TESTS)
    tests = TESTS + (
        "\n\ndef test_new(pipecheck):\n    pipecheck.check_perf(make('n'), n_samples=40)\n"
        "\n\ndef test_cases(pipecheck):\n    pipecheck.check_perf(make('z'), case='z', n_samples=40)\n")
    # much slower everywhere: a comparison would fail, so a pass shows nothing was compared
    write(kernel=KERNEL.format(factor=1.5, mode="ok"), test_k=tests, test_added=TESTS)
    # at REV test_k.py has neither test_new nor test_cases, and test_added.py does not exist
    result = _run(pytester, "--pipecheck-compare=HEAD")
    result.assert_outcomes(passed=3, failed=1)  # test_gemm is slower: the one comparison made
    perf = _perf(pytester)
    assert perf["test_k.py::test_gemm[a]"]["verdict"] == "fail"
    new = perf["test_k.py::test_new[default]"]
    assert new["verdict"] == "skip" and new["details"]["compare"]["status"] == "new"
    assert "new at HEAD" in new["summary"] and "no test test_k.py::test_new there" in new["summary"]
    assert "new at HEAD" in perf["test_added.py::test_gemm[a]"]["summary"]
    assert "test_added.py does not exist there" in perf["test_added.py::test_gemm[a]"]["summary"]
    assert perf["test_k.py::test_cases[z]"]["details"]["compare"]["status"] == "new"


def test_a_renamed_case_is_new_and_a_file_that_fails_to_collect_at_rev_is_an_error(pytester: pytest.Pytester,
                                                                                    repo: Any) -> None:
    write, commit = repo
    commit(kernel=KERNEL.format(factor=1.00, mode="ok"), test_k=TESTS.replace('case="a"', 'case="old"'),
           test_b="import no_such_module\n" + TESTS)
    write(kernel=KERNEL.format(factor=1.5, mode="ok"), test_k=TESTS, test_b=TESTS)
    result = _run(pytester, "--pipecheck-compare=HEAD")
    result.assert_outcomes(passed=1, failed=1)
    perf = _perf(pytester)
    renamed = perf["test_k.py::test_gemm[a]"]  # REV's test passed without calling case 'a': genuinely new
    assert renamed["verdict"] == "skip" and renamed["details"]["compare"]["status"] == "new"
    assert "does not call check_perf(case='a') there" in renamed["summary"] and "'old'" in renamed["summary"]
    # REV cannot import what its test needs: its kernel was never timed, so nothing was compared (not "new")
    broken = perf["test_b.py::test_gemm[a]"]
    assert broken["verdict"] == "error" and broken["details"]["compare"]["status"] == "error"
    assert "collecting test_b.py failed at HEAD" in broken["summary"] and "no_such_module" in broken["summary"]


def test_a_rev_that_does_not_resolve_is_a_usage_error(pytester: pytest.Pytester, repo: Any) -> None:
    _, commit = repo
    commit(kernel=KERNEL.format(factor=1.00, mode="ok"), test_k=TESTS)
    result = _run(pytester, "--pipecheck-compare=no-such-rev")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*pipecheck: `--pipecheck-compare=no-such-rev` from the command line: 'no-such-rev' "
                                 "does not name a commit in *--pipecheck-compare / pipecheck_compare*"])
    pytester.makeini("[pytest]\npipecheck_compare = v9\n")
    result = _run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*`pipecheck_compare = v9` from the tox.ini: 'v9' does not name a commit*"])


def test_outside_a_git_repository_and_with_baseline_save_are_usage_errors(pytester: pytest.Pytester,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIPECHECK_TEST_FAKE_TIMER", "return")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(pytester.path.parent))  # no repository above either
    pytester.makepyfile(test_k=TESTS)
    result = _run(pytester, "--pipecheck-compare=HEAD")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*`--pipecheck-compare=HEAD` from the command line: the rootdir * is not inside a "
                                 "git repository*"])
    result = _run(pytester, "--pipecheck-compare=HEAD", "--pipecheck-baseline-save")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--pipecheck-baseline-save and compare mode*run them separately*"])


def test_cpu_tier_without_the_seam_skips_with_the_reason(pytester: pytest.Pytester, repo: Any,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    write, commit = repo
    commit(kernel=KERNEL.format(factor=1.00, mode="ok"), test_k=TESTS)
    write(kernel=KERNEL.format(factor=1.5, mode="ok"))
    monkeypatch.delenv("PIPECHECK_TEST_FAKE_TIMER")
    result = _run(pytester, "--pipecheck-compare=HEAD")
    result.assert_outcomes(passed=1)
    perf = _perf(pytester)["test_k.py::test_gemm[a]"]
    assert perf["verdict"] == "skip" and perf["details"]["compare"]["status"] == "skipped"
    assert perf["summary"].startswith("perf not compared with HEAD (")
    assert "(--pipecheck-compare): timing needs a CUDA GPU: --pipecheck-tier=cpu was requested" in perf["summary"]


def test_rev_process_crashing_is_an_error_and_the_next_check_gets_a_fresh_one(pytester: pytest.Pytester,
                                                                                repo: Any) -> None:
    write, commit = repo
    crash = KERNEL.format(factor=1.00, mode="ok").replace(
        'if MODE == "crash":', 'if MODE == "crash" or (case == "boom" and FACTOR == 1.0):')
    # at REV, test_late kills its process after its perf check: that check's pairs stand
    late = ("\n\ndef test_late(pipecheck):\n    import kernel\n    pipecheck.check_perf(make('l'), case='l', n_samples=40)\n"
            "    if kernel.FACTOR == 1.0:\n        os.kill(os.getpid(), signal.SIGKILL)\n")
    two = ("import os\nimport signal\n" + TESTS + late
           + "\n\ndef test_boom(pipecheck):\n    pipecheck.check_perf(make('boom'), case='boom', n_samples=40)\n")
    order = "\n\ndef test_then(pipecheck):\n    pipecheck.check_perf(make('t'), case='t', n_samples=40)\n"
    commit(kernel=crash, test_k=two + order)
    # the head's kernel is the same except that it does not crash (FACTOR 1.0001 < threshold)
    write(kernel=crash.replace("FACTOR = 1.0", "FACTOR = 1.0001"))
    result = _run(pytester, "--pipecheck-compare=HEAD")
    result.assert_outcomes(passed=3, failed=1)
    perf = _perf(pytester)
    assert perf["test_k.py::test_late[l]"]["verdict"] == "pass"
    boom = perf["test_k.py::test_boom[boom]"]
    assert boom["verdict"] == "error" and boom["details"]["compare"]["status"] == "error"
    assert "REV's process failed while timing sample 0 of REV's kernel of test_k.py::test_boom [case boom]: it " \
           "ended (signal 9, SIGKILL)" in boom["summary"]
    result.stdout.fnmatch_lines(["*PipecheckError: check_perf in test_k.py::test_boom [[]case boom[]]: perf not "
                                 "compared with HEAD*", "*REV's output ends:*"])
    assert perf["test_k.py::test_then[t]"]["verdict"] == "pass"  # a fresh REV process for the next check
    assert perf["test_k.py::test_gemm[a]"]["verdict"] == "pass"


def test_rev_process_hanging_is_an_error_after_compare_timeout(pytester: pytest.Pytester, repo: Any) -> None:
    write, commit = repo
    commit(kernel=KERNEL.format(factor=1.00, mode="hang"), test_k=TESTS)
    write(kernel=KERNEL.format(factor=1.00, mode="ok"))
    # REV's kernel never returns: the parent waits compare_timeout for the sample (every other step takes
    # milliseconds), then stops REV's process
    result = _run(pytester, "--pipecheck-compare=HEAD", "--pipecheck-compare-timeout=5")
    result.assert_outcomes(failed=1)
    perf = _perf(pytester)["test_k.py::test_gemm[a]"]
    assert perf["verdict"] == "error"
    assert "timing sample 0 of REV's kernel of test_k.py::test_gemm [case a] (5 s allowed, compare_timeout): it " \
           "did not answer and was stopped" in perf["summary"]


def test_calls_in_another_order_are_an_error_not_a_pass(pytester: pytest.Pytester, repo: Any) -> None:
    write, commit = repo
    two = ("from kernel import make\n\n\ndef test_two(pipecheck):\n"
           "    pipecheck.check_perf(make('a'), case='a', n_samples=40)\n"
           "    pipecheck.check_perf(make('b'), case='b', n_samples=40)\n")
    commit(kernel=KERNEL.format(factor=1.00, mode="ok"), test_k=two)
    write(test_k=two.replace("'a'", "'x'").replace("'b'", "'a'").replace("'x'", "'b'"))
    result = _run(pytester, "--pipecheck-compare=HEAD")
    result.assert_outcomes(failed=1)
    perf = _perf(pytester)
    assert perf["test_k.py::test_two[b]"]["verdict"] == "pass"  # REV's 'a' went by; then 'b' was paired
    wrong = perf["test_k.py::test_two[a]"]
    assert wrong["verdict"] == "error" and "the calls cannot be paired" in wrong["summary"]


def test_compare_decides_and_the_stored_baseline_is_reported_alongside(pytester: pytest.Pytester, repo: Any,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    write, commit = repo
    tests = """
import os
from kernel import make


def test_gemm(pipecheck):
    if os.environ.get("SAVE"):
        pipecheck.check_perf(samples=[50.0 + i * 0.01 for i in range(40)], case="a")
    else:
        pipecheck.check_perf(make("a"), case="a", n_samples=40)
"""
    commit(kernel=KERNEL.format(factor=1.00, mode="ok"), test_k=tests)
    monkeypatch.setenv("SAVE", "1")
    saved = pytester.runpytest_subprocess("--pipecheck-tier=cpu", "-p", "no:cacheprovider",
                                          "--pipecheck-baseline-dir=bl", "--pipecheck-baseline-save")
    monkeypatch.delenv("SAVE")
    saved.assert_outcomes(passed=1)
    _git(pytester.path, "add", "-A")
    _git(pytester.path, "commit", "-q", "-m", "baselines")
    # the stored baseline says 50 us; the kernel takes 100 us at REV and at the head: the stored gate alone
    # would fail it, compare mode passes it and reports the baseline's view
    write(kernel=KERNEL.format(factor=1.00, mode="ok") + "\n")
    result = _run(pytester, "--pipecheck-compare=HEAD", "--pipecheck-baseline-dir=bl")
    result.assert_outcomes(passed=1)
    perf = _perf(pytester)["test_k.py::test_gemm[a]"]
    assert perf["verdict"] == "pass" and perf["details"]["decided_by"] == "compare"
    stored = perf["details"]["stored"]
    assert stored["status"] == "compared" and stored["verdict"] == "fail" and stored["regressed"]
    assert "stored baseline (fail, not gated)" in perf["summary"]


def test_pairs_the_ties_leave_undecided_are_an_error_never_a_pass(pytester: pytest.Pytester, repo: Any) -> None:
    # a kernel timed at the timer's resolution: REV's always takes 100 us; the head's ties with it twice, then
    # takes 120 us. With 2 of 10 pairs tied no data could have failed the check, so its +20% decides nothing
    write, commit = repo
    tied = ("import itertools\n\n\ndef make(case=''):\n    times = itertools.chain([100.0, 100.0], "
            "itertools.repeat({slow}))\n    return lambda: next(times)\n")
    tests = "from kernel import make\n\n\ndef test_gemm(pipecheck):\n    pipecheck.check_perf(make(), n_samples=10)\n"
    commit(kernel=tied.format(slow=100.0), test_k=tests)
    write(kernel=tied.format(slow=120.0))
    result = _run(pytester, "--pipecheck-compare=HEAD")
    result.assert_outcomes(failed=1)
    perf = _perf(pytester)["test_k.py::test_gemm[default]"]
    assert perf["verdict"] == "error", perf["summary"]
    cmp = perf["details"]["compare"]
    assert cmp["decision"] == "inconclusive" and cmp["n_tied"] == 2 and cmp["ratio"] == pytest.approx(1.2)
    assert "perf not decided against HEAD" in perf["summary"] and "2 of 10 pairs tie" in perf["summary"]
