"""sanitizer_scope: what a sanitizer child runs of each test (issue: the sanitizer tier at CI speed).

With the default scope ``launch`` a child launches the kernel once per shape and judges nothing, so
compute-sanitizer instruments one launch instead of the reference, every tile-probe launch and every
determinism repeat. These runs use the fake compute-sanitizer and a torch kernel on the CPU (the
fixture's device is pinned to "cpu"); each launch appends a line to a log, so the tests count what
each process launched.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ._sanitizer_fake import _fake, _results, _setup

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

pytest.importorskip("torch")

CPU_DEVICE = '''
from pytest_pipecheck.fixture import Pipecheck
Pipecheck.device = property(lambda self: "cpu")  # a fake GPU tier whose kernels run on the CPU


def pytest_configure(config):
    # what the child was told to run of each test, for the launcher's log
    if config.getoption("pipecheck_child", default=None):
        import os
        os.environ["LOGGED_SCOPE"] = config.getoption("pipecheck_child_scope")
'''

SUITE = '''
import os
import pytest
from pytest_pipecheck import KernelSpec, Tensor

HERE = os.path.dirname(os.path.abspath(__file__))


def _launch(arrays, dims):
    with open(os.path.join(HERE, "launches.log"), "a") as fh:
        fh.write(f"{os.environ.get('PIPECHECK_CHILD', 'parent')} {os.environ.get('LOGGED_SCOPE', '-')}\\n")
    arrays["y"].copy_(arrays["x"] * 2)


SPEC = KernelSpec("double", _launch, lambda a, d: {"y": a["x"].double() * 2},
                  [Tensor("x", "MK", "float32"), Tensor("y", "MK", "float32", role="output")],
                  tiles={"M": 4, "K": 4}, loop_dim="K")


def test_checks(pipecheck):
    pipecheck.check_kernel(SPEC, {"M": 5, "K": 12})


def test_reads_numbers(pipecheck):
    # a body that needs what the launch scope skips: fails there, so it is sanitized whole
    result = pipecheck.check_coverage(SPEC, {"M": 5, "K": 12})
    assert result.verdict.value == "pass", result.summary


def test_racy(pipecheck):
    pipecheck.check_tile_probe(SPEC, {"M": 5, "K": 12})


def _wrong(arrays, dims):
    _launch(arrays, dims)
    arrays["y"][-1, -1] += 1  # the last element of the output is wrong


MUTANT = KernelSpec("double_mutant", _wrong, SPEC.reference, SPEC.tensors, tiles={"M": 4, "K": 4}, loop_dim="K")


@pytest.mark.pipecheck(expect_failures=True)
def test_mutant_caught(pipecheck):
    from pytest_pipecheck.results import PipecheckFailure

    with pytest.raises(PipecheckFailure):
        pipecheck.check_coverage(MUTANT, {"M": 5, "K": 12})


def test_mutant_in_a_block(pipecheck):
    from pytest_pipecheck.results import PipecheckFailure

    with pipecheck.expecting_failures(), pytest.raises(PipecheckFailure):
        pipecheck.check_coverage(MUTANT, {"M": 5, "K": 12})
'''


def _launches(path: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in (path / "launches.log").read_text().splitlines():
        counts[line] = counts.get(line, 0) + 1
    return counts


def _run_suite(pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
               plan: dict[str, object], *args: str) -> tuple[pytest.RunResult, str]:
    """SUITE on the CPU device under the fake racecheck (``plan``), run with ``args``: the run and its output."""
    _fake(tmp_path, monkeypatch, plan)
    _setup(pytester)
    pytester.makeconftest(pytester.path.joinpath("conftest.py").read_text() + CPU_DEVICE)
    pytester.makepyfile(test_k=SUITE)
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=racecheck", "-p", "no:cacheprovider",
                                           *args)
    return result, result.stdout.str()


def test_a_launch_child_launches_once_per_shape_and_verdicts_do_not_change(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, out = _run_suite(pytester, tmp_path, monkeypatch,
                        {"racecheck": {"inject": {"test_racy": "racecheck_race_analysis.txt"}}},
                        "-k", "test_checks or test_racy")
    res = _results(out)
    assert res[("test_checks", "sanitizer:racecheck")] == ("pass", "0 hazards"), out
    # a finding in a test that only asked for the tile probe: the child still launched the kernel
    assert res[("test_racy", "sanitizer:racecheck")][0] == "fail", out
    counts = _launches(pytester.path)
    # the child: one launch per test (each at one shape); the parent: coverage, 2 tile probes...
    assert counts.get("racecheck launch") == 2, counts
    assert counts.get("parent -", 0) > 4, counts


def test_a_body_that_fails_in_a_launch_child_is_sanitized_whole(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, out = _run_suite(pytester, tmp_path, monkeypatch, {}, "-k", "test_reads_numbers")
    assert _results(out)[("test_reads_numbers", "sanitizer:racecheck")] == ("pass", "0 hazards"), out
    assert "sanitizing them whole" in out
    counts = _launches(pytester.path)
    assert counts.get("racecheck launch") == 1 and counts.get("racecheck test") == 1, counts
    result.assert_outcomes(passed=1)


def test_a_test_waiting_for_a_check_to_catch_a_mutant_gets_it_judged_in_its_launch_child(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A check that judges nothing never gives the failure a mutant test waits for: such a test's checks judge in
    the launch child (as in scope test), so its body passes there and it is not sanitized again after its part."""
    result, out = _run_suite(pytester, tmp_path, monkeypatch, {}, "-k", "test_mutant")
    res = _results(out)
    for name in ("test_mutant_caught", "test_mutant_in_a_block"):
        assert res[(name, "sanitizer:racecheck")] == ("pass", "0 hazards"), out
    assert "sanitizing them whole" not in out and "failed on their own" not in out, out
    counts = _launches(pytester.path)
    assert set(counts) == {"racecheck launch", "parent -"}, counts  # one launch child, no child of scope test
    assert counts["racecheck launch"] == counts["parent -"], counts  # launched there as in the normal run
    result.assert_outcomes(passed=2)


def test_scope_test_runs_the_whole_test_in_the_child(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, out = _run_suite(pytester, tmp_path, monkeypatch, {}, "--pipecheck-sanitizer-scope=test", "-k", "test_checks")
    assert _results(out)[("test_checks", "sanitizer:racecheck")] == ("pass", "0 hazards"), out
    counts = _launches(pytester.path)
    assert counts.get("racecheck test") == counts.get("parent -") > 4, counts


@pytest.mark.parametrize("jobs, per_tool", [(4, 2), (3, 2), (1, 1)])
def test_parallel_children_cover_every_test_once_and_keep_their_verdicts(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int, per_tool: int) -> None:
    """--pipecheck-sanitizer-jobs=N: N children in all, so each of the two tools' tests are cut into N / 2
    parts (rounded up) run side by side, never N parts a tool (a second wave of children, each starting
    and compiling again); every test still gets exactly one verdict per tool, a finding in one part fails
    only its test."""
    import json

    log = _fake(tmp_path, monkeypatch, {"racecheck": {"inject": {"test_k[3]": "racecheck_race_analysis.txt"}}})
    _setup(pytester)
    pytester.makepyfile(test_k='''
        import pytest

        @pytest.mark.parametrize("i", range(6))
        def test_k(pipecheck, i):
            pass
    ''')
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=racecheck,synccheck",
                                           f"--pipecheck-sanitizer-jobs={jobs}", "-p", "no:cacheprovider")
    out = result.stdout.str()
    res = _results(out)
    for i in range(6):
        for tool in ("racecheck", "synccheck"):
            want = "fail" if (i, tool) == (3, "racecheck") else "pass"
            assert res[(f"test_k[{i}]", f"sanitizer:{tool}")][0] == want, out
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    parts = [sorted(a for a in argv if "::test_k" in a) for argv in calls]
    for tool in ("racecheck", "synccheck"):
        tool_parts = [p for argv, p in zip(calls, parts) if argv[argv.index("--tool") + 1] == tool and p]
        covered = [n for p in tool_parts for n in p]
        assert len(tool_parts) == per_tool and sorted(covered) == sorted(set(covered)) and len(covered) == 6, tool_parts
    if jobs > 1:
        assert f"up to {jobs} children at once" in out and f"racecheck [{per_tool}/{per_tool}]" in out, out
        assert f"racecheck [{per_tool + 1}/" not in out, out
    result.assert_outcomes(passed=5, failed=1)


def test_pytest_split_durations_include_the_sanitizer_seconds(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With pytest-split's --store-durations a test's stored duration includes the seconds its sanitizer
    children spent on it, so --splits/--group balance CI machines by the whole cost; a group then
    sanitizes only its own tests. The assertions compare numbers of one run with each other, never
    with a clock."""
    import json

    pytest.importorskip("pytest_split")
    log = _fake(tmp_path, monkeypatch, {})
    _setup(pytester)
    pytester.makepyfile(test_k='''
        import pytest

        @pytest.mark.parametrize("i", range(4))
        def test_k(pipecheck, i):
            pass
    ''')
    durations = pytester.path / "durations.json"
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=racecheck", "-p", "no:cacheprovider",
                                           "--store-durations", f"--durations-path={durations}",
                                           "--pipecheck-json=r.json")
    result.assert_outcomes(passed=4)
    stored = json.loads(durations.read_text())
    doc = json.loads((pytester.path / "r.json").read_text())
    spent = {r["nodeid"]: r["details"]["test_seconds"] for r in doc["results"] if r["check"] == "sanitizer:racecheck"}
    assert len(spent) == 4 and all(s is not None for s in spent.values())
    for nodeid, seconds in spent.items():
        assert stored[nodeid] >= seconds - 1e-3, (nodeid, stored[nodeid], seconds)
    # The group's split: from equal costs, so that it does not hang on how one busy machine timed the four
    # (a last test stored several times longer than the others would put all four in group 1).
    durations.write_text(json.dumps(dict.fromkeys(stored, 1.0)))
    log.write_text("")
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=racecheck", "-p", "no:cacheprovider",
                                           "--splits=2", "--group=1", f"--durations-path={durations}")
    ran = result.parseoutcomes()["passed"]
    assert ran == 2
    children = [json.loads(line) for line in log.read_text().splitlines()]
    sanitized = {a for argv in children for a in argv if "::test_k" in a}
    assert len(sanitized) == ran  # the group's tests only


def test_under_xdist_a_shares_children_are_not_charged_to_its_first_test(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under xdist a worker sanitizes a share when its first test arrives. The children's wall time (each
    test sleeps half a second in the child only) must not be that test's stored duration: every test
    stores its own time plus its own sanitizer seconds, less than the child's wall time. (Numbers of one
    run against each other. Charged the whole share, a compile test first in its share would be stored
    at minutes instead of seconds.)"""
    import json

    pytest.importorskip("pytest_split")
    pytest.importorskip("xdist")
    _fake(tmp_path, monkeypatch, {})
    _setup(pytester)
    pytester.makepyfile(test_k='''
        import os
        import time

        import pytest

        @pytest.mark.parametrize("i", range(6))
        def test_k(pipecheck, i):
            if os.environ.get("PIPECHECK_CHILD"):
                time.sleep(0.5)
    ''')
    durations = pytester.path / "durations.json"
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=racecheck", "-p", "no:cacheprovider",
                                           "-n", "2", "-p", "xdist", "--store-durations",
                                           f"--durations-path={durations}", "--pipecheck-json=r.json")
    result.assert_outcomes(passed=6)
    stored = json.loads(durations.read_text())
    doc = json.loads((pytester.path / "r.json").read_text())
    san = {r["nodeid"]: r["details"] for r in doc["results"] if r["check"] == "sanitizer:racecheck"}
    assert len(san) == 6
    for nodeid, d in san.items():
        # test_seconds is read off the child's BEGIN/END lines as they arrive (0.499 s for a 0.5 s sleep was
        # seen under load): the comparison that matters is with the child's whole wall time
        assert d["test_seconds"] > 0 and d["child_wall_s"] >= 3 * 0.5, d  # three tests per share
        assert d["test_seconds"] - 1e-3 <= stored[nodeid] < d["child_wall_s"], (nodeid, stored[nodeid], d)


@pytest.mark.parametrize("scope", ["launch", "test"])
def test_checks_sanitizer_alone_still_launches_each_kernel_in_the_child(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scope: str) -> None:
    """checks=sanitizer (here from the ini file, which the children read too) deselects coverage, the
    tile probe and determinism; a test whose kernels launch only through them must still launch them
    under the tool, or its "0 hazards" would be about nothing."""
    _fake(tmp_path, monkeypatch, {"racecheck": {"inject": {"test_racy": "racecheck_race_analysis.txt"}}})
    _setup(pytester)
    pytester.makeconftest(pytester.path.joinpath("conftest.py").read_text() + CPU_DEVICE)
    pytester.makepyfile(test_k=SUITE)
    pytester.makeini("[pytest]\npipecheck_checks = sanitizer\n")
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=racecheck", "-p", "no:cacheprovider",
                                           f"--pipecheck-sanitizer-scope={scope}", "-k", "test_checks or test_racy")
    out = result.stdout.str()
    res = _results(out)
    assert res[("test_checks", "sanitizer:racecheck")] == ("pass", "0 hazards"), out
    assert res[("test_racy", "sanitizer:racecheck")][0] == "fail", out
    counts = _launches(pytester.path)
    assert sum(n for k, n in counts.items() if k.startswith("racecheck ")) == 2, counts  # once per test, in the child
    assert "parent -" not in counts, counts  # the normal run judges no deselected check
