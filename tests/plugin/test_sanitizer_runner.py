"""The sanitizer batch runner end to end, through real pytest runs, with a fake compute-sanitizer.

The fake (tests/data/sanitizer/fake_compute_sanitizer.py) runs the child pytest it is given and
injects recorded hazard output, hangs, crashes or drops the summary line as each test's plan says.
A conftest in each pytester directory makes the run look like the GPU tier.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ._sanitizer_fake import DATA, GPU_CONFTEST, _fake, _results, _setup, noop_tests

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

__all__ = ["DATA", "GPU_CONFTEST", "_fake", "_results", "_setup"]  # imported by test_contract, test_containment


def test_attribution_child_failure_and_suppressions(pytester: pytest.Pytester, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    log = _fake(tmp_path, monkeypatch, {"racecheck": {"inject": {"test_racy": "racecheck_race_analysis.txt"}}})
    _setup(pytester)
    supp = pytester.path / "known.supp"
    supp.write_text(
        "<?xml version='1.0'?>\n<ComputeSanitizerOutput>\n"
        "  <!-- Triton shuffle reported as a race (a known racecheck false positive) -->\n"
        "  <record><kind>Analysis</kind><what><text>Race condition</text></what></record>\n"
        "</ComputeSanitizerOutput>\n")
    pytester.makepyfile(test_k="""
        import os
        import pytest

        def test_clean_a(pipecheck):
            pass

        def test_racy(pipecheck):
            pass

        @pytest.mark.pipecheck(sanitizer="racecheck")
        def test_clean_b():
            pass

        def test_fails_in_child(pipecheck):
            assert os.environ.get("PIPECHECK_CHILD") is None, "only fails under the sanitizer"

        def test_not_selected():
            pass
    """)
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=racecheck",
                                           f"--pipecheck-suppressions={supp}", "-p", "no:cacheprovider")
    text = result.stdout.str()
    res = _results(text)
    assert res[("test_clean_a", "sanitizer:racecheck")] == ("pass", "0 hazards")
    assert res[("test_clean_b", "sanitizer:racecheck")] == ("pass", "0 hazards")
    verdict, summary = res[("test_racy", "sanitizer:racecheck")]
    assert verdict == "fail" and "RAW race" in summary and "racy_tile" in summary and ":5/" in summary
    assert res[("test_fails_in_child", "sanitizer:racecheck")][0] == "error"
    assert not any(k[0] == "test_not_selected" for k in res)
    result.assert_outcomes(passed=4, failed=1, errors=1)
    # the failure message: grouped, with line pair and hazard count, ending with the reproducer
    result.stdout.fnmatch_lines([
        "*1 x RAW race (error) in racy_tile at *cubin.cu:5 / *cubin.cu:6, 1024 hazards*",
        "*reproduce: (cd * && *compute-sanitizer --tool racecheck*--pipecheck-child=racecheck*test_racy*",
    ])
    assert "failed on its own in the child" in text and "only fails under the sanitizer" in text
    assert "Triton shuffle reported as a race" in text  # the suppression's reason is shown
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    # one child for the whole batch; the test that failed on its own there is sanitized whole again
    # (sanitizer_scope=launch), in a second child of its own
    assert len(calls) == 2, calls
    assert [a.rsplit("::", 1)[-1] for a in calls[1] if "::" in a] == ["test_fails_in_child"]
    assert "sanitizing them whole" in text
    argv = calls[0]
    assert argv[argv.index("--suppressions") + 1] == str(supp)
    # the child runs the test under the run's own options, with its role
    assert "--pipecheck" in argv and "--pipecheck-child=racecheck" in argv
    assert sum(a.endswith("::test_not_selected") for a in argv) == 0
    assert "racecheck: test 4 of 4" in text


def test_hang_then_crash_continue_in_new_children(pytester: pytest.Pytester, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    log = _fake(tmp_path, monkeypatch, {"racecheck": {"hang": "test_hang", "crash": "test_crash"}})
    _setup(pytester)
    pytester.makepyfile(test_h=noop_tests("test_before", "test_hang", "test_after", "test_crash", "test_last",
                                          timeouts={"test_hang": 1.5}))
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=racecheck",
                                           "-p", "no:cacheprovider")
    text = result.stdout.str()
    res = _results(text)
    assert res[("test_hang", "sanitizer:racecheck")][0] == "fail"
    assert "hang" in res[("test_hang", "sanitizer:racecheck")][1]
    assert "no PIPECHECK-END within 1.5 s" in text
    crash = res[("test_crash", "sanitizer:racecheck")]
    assert crash[0] == "error" and "died during this test" in crash[1]
    assert "partial output before the crash" in text
    for name in ("test_before", "test_after", "test_last"):
        assert res[(name, "sanitizer:racecheck")] == ("pass", "0 hazards"), name
    result.assert_outcomes(passed=4, failed=1, errors=1)
    assert len(log.read_text().splitlines()) == 3  # hang, crash, then the rest


def test_canary_missed_and_missing_summary_are_errors(pytester: pytest.Pytester, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(tmp_path, monkeypatch, {"racecheck": {"canary": "blind"}, "synccheck": {"no_summary": True}})
    _setup(pytester)
    pytester.makepyfile(test_c=noop_tests("test_one", "test_two"))
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=racecheck,synccheck",
                                           "-p", "no:cacheprovider")
    text = result.stdout.str()
    res = _results(text)
    for name in ("test_one", "test_two"):
        assert res[(name, "sanitizer:racecheck")][0] == "error"
        assert res[(name, "sanitizer:synccheck")][0] == "error"
    assert "NOT caught by compute-sanitizer racecheck" in text
    assert "no compute-sanitizer summary line" in text
    result.assert_outcomes(passed=2, errors=2)


def test_finding_outside_any_test_is_bisected(pytester: pytest.Pytester, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # the fake prints the recorded memcheck error before the first test of every child: pipecheck
    # splits the batch down to single tests and reports it on each (it is in every child's output)
    log = _fake(tmp_path, monkeypatch, {"memcheck": {"outside": "memcheck_oob_x.txt"}})
    _setup(pytester)
    pytester.makepyfile(test_o=noop_tests("test_one", "test_two"))
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=memcheck",
                                           "-p", "no:cacheprovider")
    res = _results(result.stdout.str())
    for name in ("test_one", "test_two"):
        verdict, summary = res[(name, "sanitizer:memcheck")]
        assert verdict == "fail" and "invalid __global__ read" in summary and "tail_oob" in summary
    assert "reported outside the test body" in result.stdout.str()
    assert len(log.read_text().splitlines()) == 3  # the batch, then each half


def test_a_child_that_dies_after_a_finding_gives_the_other_tests_their_own_verdicts(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """synccheck reports a test's barrier errors and the process then fails at exit (its CUDA context is
    dead, so the canary's bug after it was not reported): the finding is that test's; the clean tests of the
    same child are run again without it and pass, rather than all reading "inconclusive". (Where the canary
    was reported after every test, the context was live to the end and their verdicts stand:
    test_a_test_that_failed_on_its_own_does_not_cost_its_neighbours_a_second_child.)"""
    log = _fake(tmp_path, monkeypatch, {"synccheck": {"inject": {"test_bad": "synccheck_divergent_hostbt.txt"},
                                                      "dies_after": "test_bad", "canary": "blind_in_batch"}})
    _setup(pytester)
    pytester.makepyfile(test_d=noop_tests("test_before", "test_bad", "test_after"))
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=synccheck", "-p", "no:cacheprovider")
    res = _results(result.stdout.str())
    assert res[("test_bad", "sanitizer:synccheck")][0] == "fail"
    for name in ("test_before", "test_after"):
        assert res[(name, "sanitizer:synccheck")] == ("pass", "0 hazards"), res
    assert "re-running 2 test(s) without the tests it decided" in result.stdout.str()
    calls = [[a.rsplit("::", 1)[-1] for a in json.loads(line) if "::test_" in a] for line in log.read_text().splitlines()]
    # the batch, then the two clean tests again (and the canary alone: no child of theirs reported it)
    assert calls[:2] == [["test_before", "test_bad", "test_after"], ["test_before", "test_after"]], calls
    result.assert_outcomes(passed=2, failed=1)


def test_the_second_tools_parts_run_their_tests_from_the_end_and_keep_their_own_verdicts(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """racecheck and synccheck cut the same tests into the same parts, run side by side: synccheck's children
    take each part from its end, so that the two children of a part compile different kernels first. The
    order changes who compiles, not a verdict: a synccheck finding still poisons the tests that run after it in
    its child (here the ones collected before it), which run again without it."""
    log = _fake(tmp_path, monkeypatch, {"synccheck": {"inject": {"test_c": "synccheck_divergent_hostbt.txt"},
                                                      "dies_after": "test_c", "canary": "blind_in_batch"},
                                        "racecheck": {"inject": {"test_e": "racecheck_race_analysis.txt"}}})
    _setup(pytester)
    names = ("test_a", "test_b", "test_c", "test_d", "test_e", "test_f")
    pytester.makepyfile(test_order=noop_tests(*names))
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=racecheck,synccheck",
                                           "--pipecheck-sanitizer-jobs=4", "-p", "no:cacheprovider")
    res = _results(result.stdout.str())
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    parts: dict[str, list[list[str]]] = {}
    for argv in calls:
        tool = argv[argv.index("--tool") + 1]
        parts.setdefault(tool, []).append([a.rsplit("::", 1)[-1] for a in argv if "::test_" in a])
    racecheck = sorted(parts["racecheck"])
    assert racecheck == [["test_a", "test_b", "test_c"], ["test_d", "test_e", "test_f"]], parts
    first_children = [p for p in parts["synccheck"] if len(p) == 3]
    assert sorted(first_children) == [["test_c", "test_b", "test_a"], ["test_f", "test_e", "test_d"]], parts
    # test_c's finding killed its child's context (its canary went unreported): test_b and test_a, which ran
    # after it, run again
    assert ["test_b", "test_a"] in parts["synccheck"], parts
    assert res[("test_c", "sanitizer:synccheck")][0] == "fail"
    assert res[("test_e", "sanitizer:racecheck")][0] == "fail"
    for name in names:
        for tool in ("racecheck", "synccheck"):
            if (name, tool) not in {("test_c", "synccheck"), ("test_e", "racecheck")}:
                assert res[(name, f"sanitizer:{tool}")] == ("pass", "0 hazards"), (name, tool, res)
    result.assert_outcomes(passed=4, failed=2)


@pytest.mark.parametrize("again", ["dies_once", "dies_after"])
def test_a_child_that_fails_only_after_every_test_ended_is_run_once_more(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, again: str) -> None:
    """No finding, every test ended, and only then the process failed, in a child whose canary was not
    reported: the tests run once more in a fresh child, whose clean verdicts stand; a child that fails the
    same way again leaves them inconclusive (errors, never passes), and there is no third child for them (the
    third is the canary's own, run alone because the batch did not report it)."""
    log = _fake(tmp_path, monkeypatch, {"synccheck": {again: "test_last", "canary": "blind_in_batch"}})
    _setup(pytester)
    pytester.makepyfile(test_d=noop_tests("test_first", "test_last"))
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=synccheck", "-p", "no:cacheprovider")
    res = _results(result.stdout.str())
    assert "re-running 2 test(s) once in a fresh child" in result.stdout.str()
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    # the batch, the same two tests once more, then (where a test passed) the canary alone
    assert [sum("::test_" in a for a in argv) for argv in calls[:2]] == [2, 2], calls
    assert [("--deselect" in argv) for argv in calls[2:]] == ([True] if again == "dies_once" else []), calls
    for name in ("test_first", "test_last"):
        verdict, summary = res[(name, "sanitizer:synccheck")]
        if again == "dies_once":
            assert (verdict, summary) == ("pass", "0 hazards"), res
        else:
            assert verdict == "error" and summary == "inconclusive", res
    if again == "dies_once":
        result.assert_outcomes(passed=2)
    else:
        result.assert_outcomes(passed=2, errors=2)
        assert "the first child ran every test, then: tool error: Error: process didn't terminate" in result.stdout.str()


@pytest.mark.parametrize("canary", ["catch", "blind_in_batch"])
def test_a_child_that_fails_at_exit_after_its_canary_keeps_its_verdicts(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, canary: str) -> None:
    """Every test ended, the canary ran after them and its bug was reported, the tool's count reconciles, and
    only then did the process fail at exit: the tool was live to the end and accounted for every error, so
    the verdicts stand with no second child (examples/ on an H200: the re-run of 96 tests was its suite's
    longest part). A canary that was not reported there leaves the crash unexplained: the tests run again."""
    log = _fake(tmp_path, monkeypatch, {"synccheck": {"dies_after": "test_last", "canary": canary}})
    _setup(pytester)
    pytester.makepyfile(test_d=noop_tests("test_first", "test_last"))
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=synccheck", "-p", "no:cacheprovider",
                                           "--pipecheck-json=report.json")
    res = _results(result.stdout.str())
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    if canary == "catch":
        assert len(calls) == 1, calls
        assert "after every test and the canary had ended; the tool's count reconciles" in result.stdout.str()
        for name in ("test_first", "test_last"):
            assert res[(name, "sanitizer:synccheck")] == ("pass", "0 hazards"), res
        report = json.loads((pytester.path / "report.json").read_text())
        mine = [json.dumps(r) for r in report["results"] if r["check"] == "sanitizer:synccheck"]
        assert len(mine) == 2 and all("the child did not exit cleanly (tool error: Error: process didn't terminate"
                                      in r for r in mine), mine
        result.assert_outcomes(passed=2)
    else:
        assert "re-running 2 test(s) once in a fresh child (their verdicts would stand without it, but the canary's " \
            "bug was not reported in this child)" in result.stdout.str()
        assert [sum("::test_" in a for a in argv) for argv in calls] == [2, 2], calls  # no pass: no canary alone
        for name in ("test_first", "test_last"):
            assert res[(name, "sanitizer:synccheck")][0] == "error", res
        result.assert_outcomes(passed=2, errors=2)


@pytest.mark.parametrize("canary", ["catch", "blind_in_batch"])
def test_a_test_that_failed_on_its_own_does_not_cost_its_neighbours_a_second_child(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, canary: str) -> None:
    """A test fails on its own in a launch-scope child (it is sanitized again whole, in a child of its own),
    and the child fails at exit after its canary was reported: its neighbours' verdicts stand, as they do
    where no test was decided. On the GPU tier a strict xfail's extent case did this in every synccheck
    and memcheck share of a third library's suite, and each re-ran all its neighbours (the suite's longest
    part). A canary that was not reported leaves the crash unexplained there too: the neighbours run again."""
    log = _fake(tmp_path, monkeypatch, {"synccheck": {"dies_after": "test_last", "canary": canary}})
    _setup(pytester)
    pytester.makepyfile(test_d="""
        import os

        def test_first(pipecheck):
            pass

        def test_fails_in_child(pipecheck):
            assert os.environ.get("PIPECHECK_CHILD") is None, "only fails under the sanitizer"

        def test_last(pipecheck):
            pass
    """)
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=synccheck", "-p", "no:cacheprovider")
    text = result.stdout.str()
    res = _results(text)
    calls = [[a.rsplit("::", 1)[-1] for a in argv if "::test_" in a]
             for argv in (json.loads(line) for line in log.read_text().splitlines())]
    assert res[("test_fails_in_child", "sanitizer:synccheck")][0] == "error", res
    assert "sanitizing them whole" in text
    if canary == "catch":
        # the batch, then the test that failed on its own, whole: no second child for its neighbours
        assert calls == [["test_first", "test_fails_in_child", "test_last"], ["test_fails_in_child"]], calls
        assert "the verdicts stand" in text
        for name in ("test_first", "test_last"):
            assert res[(name, "sanitizer:synccheck")] == ("pass", "0 hazards"), res
        result.assert_outcomes(passed=3, errors=1)
    else:
        assert "the verdicts stand" not in text
        assert "re-running 2 test(s) without the tests it decided (the canary's bug was not reported in this " \
            "child)" in text
        assert ["test_first", "test_last"] in calls, calls


def test_a_finding_before_the_exit_failure_is_never_washed_out_by_the_canary(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An error the tool counted but printed no record of, then a failed exit, with the canary reported: the
    count does not reconcile, so the canary rule does not apply and the test that holds it is not passed."""
    _fake(tmp_path, monkeypatch, {"synccheck": {"hidden": "test_last", "dies_after": "test_last"}})
    _setup(pytester)
    pytester.makepyfile(test_d=noop_tests("test_first", "test_last"))
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=synccheck", "-p", "no:cacheprovider")
    res = _results(result.stdout.str())
    assert "the verdicts stand" not in result.stdout.str()
    assert res[("test_last", "sanitizer:synccheck")][0] == "error", res


def test_a_retried_child_does_not_wash_out_an_error_the_tool_counted(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first child counts an error it prints no record of, then fails at exit: the fresh child runs the
    tests again and counts it again, so the test that holds it is not passed; its neighbour is."""
    _fake(tmp_path, monkeypatch, {"synccheck": {"hidden": "test_last", "dies_once": "test_last"}})
    _setup(pytester)
    pytester.makepyfile(test_d=noop_tests("test_first", "test_last"))
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=synccheck", "-p", "no:cacheprovider")
    res = _results(result.stdout.str())
    assert "re-running 2 test(s) once in a fresh child" in result.stdout.str()
    assert res[("test_last", "sanitizer:synccheck")][0] == "error", res
    assert res[("test_first", "sanitizer:synccheck")] == ("pass", "0 hazards"), res


@pytest.mark.parametrize("fake_gpu", [False, True])
def test_skips_without_gpu_or_tool(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                   tmp_path: Path, fake_gpu: bool) -> None:
    monkeypatch.setenv("PIPECHECK_COMPUTE_SANITIZER", str(tmp_path / "missing"))
    monkeypatch.setenv("PATH", os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                                               if not (Path(p) / "compute-sanitizer").exists()))
    for var in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"):
        monkeypatch.delenv(var, raising=False)
    if not fake_gpu:
        monkeypatch.setenv("PIPECHECK_NO_GPU", "1")
    _setup(pytester, fake_gpu=fake_gpu)
    pytester.makepyfile(test_s=noop_tests("test_one"))
    result = pytester.runpytest_subprocess("--pipecheck", "-p", "no:cacheprovider")
    res = _results(result.stdout.str())
    result.assert_outcomes(passed=1)
    for tool in ("racecheck", "synccheck"):
        verdict, summary = res[("test_one", f"sanitizer:{tool}")]
        assert verdict == "skip"
        if fake_gpu:
            assert "compute-sanitizer not found" in summary
        else:
            assert "needs a CUDA GPU" in summary and "PIPECHECK_NO_GPU" in summary


def test_canary_hidden_in_a_busy_batch_is_proven_alone(pytester: pytest.Pytester, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # compute-sanitizer's --print-limit is per process: findings of earlier tests can use it up so
    # the canary's report never prints. The runner then proves the tool with the canary alone.
    log = _fake(tmp_path, monkeypatch, {"racecheck": {"canary": "blind_in_batch",
                                                      "inject": {"test_racy": "racecheck_race_analysis.txt"}}})
    _setup(pytester)
    pytester.makepyfile(test_c=noop_tests("test_racy", "test_clean"))
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=racecheck", "-p", "no:cacheprovider")
    text = result.stdout.str()
    res = _results(text)
    assert res[("test_clean", "sanitizer:racecheck")] == ("pass", "0 hazards")
    assert res[("test_racy", "sanitizer:racecheck")][0] == "fail"
    assert "canary not reported in the batch" in text and "running it alone" in text
    assert len(log.read_text().splitlines()) == 2  # the batch, then the canary alone
    result.assert_outcomes(passed=1, failed=1)


def test_the_child_says_when_triton_compiles_and_the_verdict_keeps_its_seconds(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In the child, ChildPlugin brackets Triton's compiles (here a stand-in compiler: there is no GPU to
    compile for) with COMPILE_BEGIN/COMPILE_END through the tool's output; the parent takes them out of the
    test's output, keeps the seconds they took in the verdict's details, and the verdict is the same."""
    _fake(tmp_path, monkeypatch, {})
    _setup(pytester)
    pytester.makeconftest(GPU_CONFTEST.format(fake_gpu=True) + '''
import os

@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    if os.environ.get("PIPECHECK_CHILD"):  # set by pipecheck's configure in a sanitizer child
        import triton.compiler
        triton.compiler.compile = lambda src, *args, **kwargs: "kernel"  # no GPU to compile for
''')
    pytester.makepyfile(test_c='''
        import os

        class Source:
            name = "scale_rows"

        def test_compiles(pipecheck):
            if os.environ.get("PIPECHECK_CHILD"):
                import triton.compiler
                assert triton.compiler.compile(Source()) == "kernel"

        def test_plain(pipecheck):
            pass
    ''')
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=racecheck", "-p", "no:cacheprovider",
                                           "--pipecheck-json=r.json", "-v")
    result.assert_outcomes(passed=2)
    doc = json.loads((pytester.path / "r.json").read_text())
    details = {r["nodeid"].rsplit("::", 1)[-1]: r["details"] for r in doc["results"]
               if r["check"] == "sanitizer:racecheck"}
    assert isinstance(details["test_compiles"]["compile_seconds"], float), details["test_compiles"]
    assert details["test_plain"]["compile_seconds"] is None
    assert "PIPECHECK-COMPILE" not in result.stdout.str()
