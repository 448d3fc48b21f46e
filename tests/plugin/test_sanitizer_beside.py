"""The sanitizer children beside the tests (pytest_pipecheck/sanitizer/beside.py), through real pytest runs with
the fake compute-sanitizer: a test runs while the children that judge it still run, its reports held until its
verdicts are in and logged in collection order; a test that asks for the GPU alone runs again after the
others; each test is reported with its own verdicts, the verdicts and outcomes of a run whose children all
end before the first test (``PIPECHECK_SANITIZER_OVERLAP=0``). An xdist worker holds its reports in the same way,
and one that dies with reports held leaves those tests errors.

Where a test needs one thing to happen before another, one process waits for a file the other writes; no
assertion depends on how fast the machine is (but one: without the behaviour it tests, it fails only as
long as its child sleeps).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from ._sanitizer_fake import GPU_CONFTEST, WAIT_FOR, _fake, _results, _setup, noop_tests

FAKEBIN = Path(__file__).resolve().parents[1] / "data" / "fakebin"  # a fake nvidia-smi

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out


@pytest.fixture(autouse=True)
def _overlap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIPECHECK_SANITIZER_OVERLAP", "1")  # the default (with xdist too)


def _first_ran(mark: Path) -> str:
    """``test_first``, which, in the parent only, leaves ``mark`` behind it."""
    return f'''

def test_first(pipecheck):
    if not os.environ.get("PIPECHECK_CHILD"):
        open({str(mark)!r}, "w").close()
'''


def _judged_while_running(first_ran: Path, who: str) -> str:
    """A module whose one child holds ``test_later`` until ``who`` (the process that runs the tests) has run
    ``test_first``; ``test_racy`` carries an injected race."""
    return WAIT_FOR + _first_ran(first_ran) + f'''

def test_racy(pipecheck):
    pass

def test_later(pipecheck):
    if os.environ.get("PIPECHECK_CHILD"):
        assert wait_for({str(first_ran)!r}, 60), "the {who} ran no test while the child that judges it ran"
'''


def _with_and_without_overlap(pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                              plan: dict[str, object], source: str, *args: str
                              ) -> Iterator[tuple[str, pytest.RunResult]]:
    """The run of module ``test_v`` (``source``) with the fake tool's ``plan``, beside the tests ("1") and with
    every child first ("0")."""
    for overlap in ("1", "0"):
        (tmp_path / overlap).mkdir()
        _fake(tmp_path / overlap, monkeypatch, plan)
        monkeypatch.setenv("PIPECHECK_SANITIZER_OVERLAP", overlap)
        _setup(pytester)
        pytester.makepyfile(test_v=source)
        yield overlap, pytester.runpytest_subprocess("--pipecheck", "-p", "no:cacheprovider", *args, timeout=600)


def _run(pytester: pytest.Pytester, *args: str, jobs: int = 2) -> pytest.RunResult:
    return pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=racecheck",
                                         f"--pipecheck-sanitizer-jobs={jobs}", "-p", "no:cacheprovider", *args,
                                         timeout=600)


def test_the_first_tests_run_while_a_later_part_is_sanitized_and_each_gets_its_own_verdict(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two parts run side by side. The child of the second part holds ``test_late`` until the parent has run
    ``test_first`` (a test of the first part): with every child ending before the first test, it never
    could. The second part's finding and crash still fail and error their own tests."""
    log = _fake(tmp_path, monkeypatch, {"racecheck": {"inject": {"test_racy": "racecheck_race_analysis.txt"},
                                                      "crash": "test_crash"}})
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    _setup(pytester)
    first_ran = tmp_path / "first-ran"
    caches = tmp_path / "caches"
    caches.mkdir()
    pytester.makepyfile(test_b=WAIT_FOR + _first_ran(first_ran) + f'''

def test_clean(pipecheck):
    pass

def test_cache(pipecheck):
    where = os.environ.get("PIPECHECK_CHILD") or "parent"
    with open(os.path.join({str(caches)!r}, where), "w") as fh:
        fh.write(os.environ.get("TRITON_CACHE_DIR", "unset"))

def test_late(pipecheck):
    if os.environ.get("PIPECHECK_CHILD"):
        assert wait_for({str(first_ran)!r}, 120), "the parent ran no test while this child ran"

def test_racy(pipecheck):
    pass

def test_crash(pipecheck):
    pass
''')
    result = _run(pytester)
    res = _results(result.stdout.str())
    for name in ("test_first", "test_clean", "test_cache", "test_late"):
        assert res[(name, "sanitizer:racecheck")] == ("pass", "0 hazards"), (name, res)
    verdict, summary = res[("test_racy", "sanitizer:racecheck")]
    assert verdict == "fail" and "RAW race" in summary, res
    verdict, summary = res[("test_crash", "sanitizer:racecheck")]
    assert verdict == "error" and "died during this test" in summary, res
    result.assert_outcomes(passed=5, failed=1, errors=1)  # test_crash: its body passed, its verdict errs
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    # the two parts side by side, then test_late again (the crash ended its child before the tool's summary)
    assert len(calls) == 3, calls
    assert [a.rsplit("::", 1)[-1] for a in calls[2] if "::" in a] == ["test_late"], calls
    # the parent and its children compile into one Triton cache: the children inherit the parent's
    assert (caches / "racecheck").read_text() == (caches / "parent").read_text() == str(tmp_path / "triton-cache")


def test_a_timing_waits_until_every_child_has_ended(pytester: pytest.Pytester, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``test_timing`` (first part) asks for the GPU alone while the second part's child still runs (that
    child waits for the sign ``test_timing`` gives just before it asks): the answer comes only once that child
    has ended. A test that only waits for its own verdicts would time beside it."""
    log = _fake(tmp_path, monkeypatch, {})
    _setup(pytester)
    asking = tmp_path / "asking"
    pytester.makepyfile(test_t=WAIT_FOR + f'''

def children():
    with open({str(log)!r}) as fh:
        started = len(fh.read().splitlines())
    ended = 0
    if os.path.exists({str(log) + ".ended"!r}):
        with open({str(log) + ".ended"!r}) as fh:
            ended = len(fh.read().splitlines())
    return started, ended

def test_timing(pipecheck):
    if os.environ.get("PIPECHECK_CHILD"):
        return
    open({str(asking)!r}, "w").close()
    pipecheck.require_gpu("perf", alone=True)
    started, ended = children()
    assert started == ended == 2, f"timed while {{started - ended}} sanitizer children ran"

def test_b(pipecheck):
    pass

def test_late(pipecheck):
    if os.environ.get("PIPECHECK_CHILD"):
        wait_for({str(asking)!r}, 60)
        time.sleep(2)  # the parent, not held back, would now be timing

def test_c(pipecheck):
    pass
''')
    result = _run(pytester)
    res = _results(result.stdout.str())
    assert all(res[(n, "sanitizer:racecheck")] == ("pass", "0 hazards") for n in ("test_timing", "test_late")), res
    result.assert_outcomes(passed=4)


def test_the_overlap_gives_the_verdicts_of_children_that_end_before_the_first_test(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = {"racecheck": {"inject": {"test_racy": "racecheck_race_analysis.txt"}, "crash": "test_crash",
                          "hang": "test_hang"},
            "synccheck": {"inject": {"test_sync": "synccheck_divergent_hostbt.txt"}, "dies_after": "test_sync"}}
    names = ("test_a", "test_racy", "test_b", "test_hang", "test_c", "test_crash", "test_sync", "test_d")
    source = "import pytest\n\n" + "\n".join(
        (("@pytest.mark.pipecheck(sanitizer_timeout=1.5)\n" if n == "test_hang" else "")
         + f"def {n}(pipecheck):\n    pass\n") for n in names)
    seen = {}
    for overlap, result in _with_and_without_overlap(pytester, tmp_path, monkeypatch, plan, source,
                                                     "--pipecheck-sanitizer=racecheck,synccheck",
                                                     "--pipecheck-sanitizer-jobs=3"):
        seen[overlap] = _results(result.stdout.str())
        assert len(seen[overlap]) == 2 * len(names), seen[overlap]
    assert seen["1"] == seen["0"]
    assert seen["1"][("test_hang", "sanitizer:racecheck")][1] == "hang: killed by the watchdog"
    assert seen["1"][("test_crash", "sanitizer:racecheck")][0] == "error"
    assert seen["1"][("test_sync", "sanitizer:synccheck")][0] == "fail"
    assert seen["1"][("test_d", "sanitizer:synccheck")] == ("pass", "0 hazards")


def test_no_deadlock_under_xdist(pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two workers, each sanitizing its shares beside its tests (two parts a share): every test gets its own
    verdict, and the run ends."""
    _fake(tmp_path, monkeypatch, {"racecheck": {"inject": {"test_racy": "racecheck_race_analysis.txt"},
                                                "crash": "test_crash"}})
    monkeypatch.setenv("PATH", f"{FAKEBIN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NVIDIA_SMI_GPUS", "NVIDIA H200,9.0;NVIDIA H200,9.0")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    pytester.makepyfile(**{f"test_m{m}": "\n".join(f"def test_{n}(pipecheck):\n    pass\n" for n in names)
                           for m, names in enumerate([("a", "racy", "b", "c"), ("d", "crash", "e", "f")])})
    result = pytester.runpytest_subprocess("-n", "2", "-p", "xdist", "--pipecheck", "--pipecheck-sanitizer=racecheck",
                                           "--pipecheck-sanitizer-jobs=4", "--pipecheck-json=r.json",
                                           "-p", "no:cacheprovider", timeout=600)
    result.assert_outcomes(passed=7, failed=1, errors=1)  # test_crash: its body passed, its verdict errs
    doc = json.loads((pytester.path / "r.json").read_text())
    verdicts = {r["nodeid"].rsplit("::", 1)[-1]: r["verdict"] for r in doc["results"]
                if r["check"] == "sanitizer:racecheck"}
    assert verdicts == {"test_a": "pass", "test_racy": "fail", "test_b": "pass", "test_c": "pass",
                        "test_d": "pass", "test_crash": "error", "test_e": "pass", "test_f": "pass"}, verdicts


def _xdist_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{FAKEBIN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NVIDIA_SMI_GPUS", "NVIDIA H200,9.0;NVIDIA H200,9.0")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_an_xdist_worker_runs_a_test_while_the_child_that_judges_it_still_runs(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's one child judges every test of its share and holds ``test_later`` until the worker has run
    ``test_first``: a worker that ran its children first, or waited before each test for its verdicts, never
    could. The reports still reach the controller, each with its own verdict."""
    _fake(tmp_path, monkeypatch, {"racecheck": {"inject": {"test_racy": "racecheck_race_analysis.txt"}}})
    _xdist_gpus(monkeypatch)
    first_ran = tmp_path / "first-ran"
    pytester.makepyfile(test_w=_judged_while_running(first_ran, "worker"))
    result = pytester.runpytest_subprocess("-n", "1", "-p", "xdist", "--pipecheck", "--pipecheck-sanitizer=racecheck",
                                           "--pipecheck-json=r.json", "-p", "no:cacheprovider", timeout=600)
    result.assert_outcomes(passed=2, failed=1)
    doc = json.loads((pytester.path / "r.json").read_text())
    verdicts = {r["nodeid"].rsplit("::", 1)[-1]: r["verdict"] for r in doc["results"]
                if r["check"] == "sanitizer:racecheck"}
    assert verdicts == {"test_first": "pass", "test_racy": "fail", "test_later": "pass"}, verdicts


@pytest.mark.parametrize("restarts", [True, False], ids=["next-worker", "no-worker-left"])
def test_a_test_whose_reports_died_with_its_worker_runs_again_or_is_an_error_never_a_pass(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restarts: bool) -> None:
    """``test_a`` has run and its reports are held (its child holds it until ``test_dies`` began) when
    ``test_dies`` takes the worker down. xdist's controller counted ``test_a`` as run, but its reports died with
    the worker: it is sent again with the rest of the share, and passes on the next worker; with no worker
    left, it is an error that says no worker ran it to its report. The crash is charged to ``test_dies``
    alone."""
    _fake(tmp_path, monkeypatch, {})
    _xdist_gpus(monkeypatch)
    began = tmp_path / "dies-began"
    pytester.makepyfile(test_m=WAIT_FOR + f'''

def test_a(pipecheck):
    if os.environ.get("PIPECHECK_CHILD"):
        wait_for({str(began)!r}, 60)

def test_dies(pipecheck):
    if not os.environ.get("PIPECHECK_CHILD") and not os.path.exists({str(began)!r}):
        open({str(began)!r}, "w").close()
        os._exit(3)  # a GPU fault or a killed process takes the whole worker down

def test_after(pipecheck):
    pass
''')
    result = pytester.runpytest_subprocess("-n", "1", "-p", "xdist", "--pipecheck", "--pipecheck-sanitizer=racecheck",
                                           "-rA", "-p", "no:cacheprovider",
                                           *([] if restarts else ["--max-worker-restart=0"]), timeout=600)
    result.stdout.fnmatch_lines(["*worker*crashed while running*test_dies*"])
    assert result.stdout.str().count("FAILED test_m.py::test_dies") == 1
    if restarts:
        result.assert_outcomes(passed=2, failed=1)
        result.stdout.fnmatch_lines(["*PASSED test_m.py::test_a*"])
    else:
        result.assert_outcomes(failed=1, errors=2)
        result.stdout.fnmatch_lines(["*ERROR at setup of test_m.py::test_a*",
                                     "pipecheck: never ran: no worker ran test_m.py::test_a to its report*"])


# ----------------------------------------------------------------------------- held reports (no xdist)


def _order(result: pytest.RunResult, module: str) -> list[str]:
    """The tests of ``module`` in the order ``-v`` logged them."""
    logged = re.compile(rf"^{module}\.py::(\w+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)")
    return [m.group(1) for m in map(logged.match, result.stdout.lines) if m]


def test_a_test_runs_while_the_child_that_judges_it_still_runs(pytester: pytest.Pytester, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """One child judges every test. It holds ``test_later`` until the parent has run ``test_first``: a parent
    that waits for a test's verdicts before running it never could, since the child that judges
    ``test_first`` is that child. The reports still come out in order, each with its own verdicts."""
    log = _fake(tmp_path, monkeypatch, {"racecheck": {"inject": {"test_racy": "racecheck_race_analysis.txt"}}})
    _setup(pytester)
    first_ran = tmp_path / "first-ran"
    pytester.makepyfile(test_h=_judged_while_running(first_ran, "parent"))
    result = _run(pytester, "-v", jobs=1)
    res = _results(result.stdout.str())
    assert res[("test_first", "sanitizer:racecheck")] == ("pass", "0 hazards"), res
    assert res[("test_later", "sanitizer:racecheck")] == ("pass", "0 hazards"), res
    assert res[("test_racy", "sanitizer:racecheck")][0] == "fail", res
    result.assert_outcomes(passed=2, failed=1)
    order = _order(result, "test_h")
    assert order == ["test_first", "test_racy", "test_later"], result.stdout.str()
    assert len(log.read_text().splitlines()) == 1  # one child, never re-run


HELD_BODIES = '''
import pytest
from pytest_pipecheck.results import CheckResult, PipecheckFailure, Verdict

def test_passes(pipecheck):
    pass

def test_raises(pipecheck):
    raise ValueError("the body's own failure")

def test_skips(pipecheck):
    pytest.skip("the body skipped")

@pytest.mark.xfail(reason="known", strict=True)
def test_xfails(pipecheck):
    raise ValueError("expected")

def test_racy_passes(pipecheck):
    pass

def test_racy_skips(pipecheck):
    pytest.skip("the body skipped")

def test_racy_raises(pipecheck):
    raise ValueError("the body's own failure")

@pytest.mark.pipecheck(expect_failures=True)
def test_expects_a_finding_racy(pipecheck):
    pass

@pytest.mark.pipecheck(expect_failures=["coverage"])
def test_caught_by_its_check(pipecheck):
    # what a check does on a defect the test expects: records it (as caught) and raises it
    caught = pipecheck.record(CheckResult("coverage", Verdict.FAIL, "a wrong tile", kernel="k"))
    raise PipecheckFailure("coverage failed: a wrong tile", caught)

@pytest.mark.pipecheck(expect_failures=["coverage"])
def test_caught_and_racy(pipecheck):
    caught = pipecheck.record(CheckResult("coverage", Verdict.FAIL, "a wrong tile", kernel="k"))
    raise PipecheckFailure("coverage failed: a wrong tile", caught)

def test_check_failed_body_passed(pipecheck):
    pipecheck.record(CheckResult("coverage", Verdict.FAIL, "a wrong tile", kernel="k"))

def test_crash(pipecheck):
    pass

@pytest.fixture
def broken():
    raise RuntimeError("fixture failed")

def test_setup_errors(pipecheck, broken):
    pass
'''


def test_held_reports_give_the_outcomes_and_verdicts_of_a_run_that_waits(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bodies that pass, raise, skip, xfail, record a failure, or end on a failure they expect; findings on
    some of them; a child that dies: with the reports held until the verdicts are in, every test ends as it
    does when the children end before the first test, with the same report sections and verdicts."""
    plan = {"racecheck": {"inject": {n: "racecheck_race_analysis.txt" for n in
                                     ("test_racy_passes", "test_racy_skips", "test_racy_raises",
                                      "test_expects_a_finding_racy", "test_caught_and_racy")},
                          "crash": "test_crash"}}
    seen: dict[str, tuple[object, ...]] = {}
    for overlap, result in _with_and_without_overlap(pytester, tmp_path, monkeypatch, plan, HELD_BODIES,
                                                     "--pipecheck-sanitizer=racecheck", "-rA", "-v",
                                                     "--pipecheck-sanitizer-jobs=2", "--pipecheck-json=r.json"):
        out = result.stdout.str()
        summary = sorted(line for line in result.stdout.lines
                         if line.startswith(("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS")))
        order = _order(result, "test_v")
        doc = json.loads((pytester.path / "r.json").read_text())
        results = sorted((r["nodeid"], r["check"], r["verdict"], r["expected"]) for r in doc["results"])
        sections = sorted(s for s in ("pipecheck: sanitizer", "pipecheck: caught", "pipecheck: reproduce",
                                      "a sanitizer finding fails the test; the body skipped",
                                      "pipecheck sanitizer inconclusive") if s in out)
        seen[overlap] = (summary, order, results, sections, out.count("pipecheck: reproduce"))
    assert seen["1"] == seen["0"], (seen["1"], seen["0"])
    summary = "\n".join(seen["1"][0])
    for name in ("test_racy_passes", "test_racy_skips", "test_racy_raises", "test_raises",
                 "test_check_failed_body_passed"):
        assert f"FAILED test_v.py::{name}" in summary, summary
    for name in ("test_crash", "test_setup_errors"):
        assert f"ERROR test_v.py::{name}" in summary, summary
    # a finding of a test that expects failures counts as caught (docs/verdicts.md)
    for name in ("test_passes", "test_expects_a_finding_racy", "test_caught_by_its_check", "test_caught_and_racy"):
        assert f"PASSED test_v.py::{name}" in summary, summary
    assert seen["1"][1][:3] == ["test_passes", "test_raises", "test_skips"]


@pytest.mark.parametrize("xdist", [False, True], ids=["serial", "xdist-worker"])
def test_a_held_test_that_asks_for_the_gpu_alone_runs_again_after_the_others(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, xdist: bool) -> None:
    """``test_timing`` asks for the GPU alone while the child that judges the tests still runs (the child waits
    for the tests after it): it stops there, the tests after it run, and it runs again from its start once
    the child has ended; its report is logged once, last, and holds only what its second run recorded. Its
    second run is still inside what other plugins wrap around the test loop (coverage, live logging). The
    same in an xdist worker that has its GPU to itself (one worker), whose second run's reports must reach
    the controller as that test's."""
    log = _fake(tmp_path, monkeypatch, {})
    pytester.makeconftest(GPU_CONFTEST.format(fake_gpu=True) + """

import os

@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session):
    os.environ["LOOP_WRAPPED"] = "1"
    try:
        return (yield)
    finally:
        del os.environ["LOOP_WRAPPED"]
""")
    starts = tmp_path / "starts"
    last_ran = tmp_path / "last-ran"
    pytester.makepyfile(test_t=WAIT_FOR + f'''
from pytest_pipecheck.results import CheckResult, Verdict

def ended():
    if not os.path.exists({str(log) + ".ended"!r}):
        return 0
    with open({str(log) + ".ended"!r}) as fh:
        return len(fh.read().splitlines())

def test_a(pipecheck):
    pass

def test_timing(pipecheck):
    if os.environ.get("PIPECHECK_CHILD"):
        return
    with open({str(starts)!r}, "a") as fh:
        fh.write("start\\n")
    pipecheck.record(CheckResult("perf", Verdict.SKIP, f"recorded with {{ended()}} child(ren) ended"))
    pipecheck.require_gpu("perf", alone=True)
    assert ended() == 1, "timed while the child ran"
    assert os.environ.get("LOOP_WRAPPED") == "1", "ran outside the wrappers of the test loop"

def test_b(pipecheck):
    if not os.environ.get("PIPECHECK_CHILD"):
        open({str(last_ran)!r}, "w").close()

def test_c(pipecheck):
    if os.environ.get("PIPECHECK_CHILD"):
        assert wait_for({str(last_ran)!r}, 60), "the parent ran no test after test_timing while this child ran"
''')
    result = _run(pytester, "-v", "--pipecheck-json=r.json", *(["-n", "1", "-p", "xdist"] if xdist else []), jobs=1)
    result.assert_outcomes(passed=4)
    if xdist:
        logged = re.compile(r"^\[gw0\] .*(PASSED|FAILED|ERROR|SKIPPED) test_t\.py::(\w+)")
        order = [m.group(2) for m in map(logged.match, result.stdout.lines) if m]
    else:
        order = _order(result, "test_t")
    assert order == ["test_a", "test_b", "test_c", "test_timing"], result.stdout.str()
    assert starts.read_text() == "start\nstart\n"
    if not xdist:  # a worker's own lines stay on the worker
        result.stdout.fnmatch_lines(["*1 test(s) that time kernels run now, the sanitizer children done*"])
    doc = json.loads((pytester.path / "r.json").read_text())
    perf = [r["summary"] for r in doc["results"] if r["check"] == "perf"]
    assert perf == ["recorded with 1 child(ren) ended"], perf
    racecheck = {r["nodeid"].rsplit("::", 1)[-1]: r["verdict"] for r in doc["results"]
                 if r["check"] == "sanitizer:racecheck"}
    assert racecheck == dict.fromkeys(("test_a", "test_timing", "test_b", "test_c"), "pass"), racecheck


def test_a_run_stopped_by_a_failure_says_which_held_tests_it_did_not_report(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``-x``: the first failure is logged once its verdicts are in, and the run stops there. The tests whose
    bodies ran meanwhile are named as not reported; none of them reads as passed."""
    _fake(tmp_path, monkeypatch, {"racecheck": {"inject": {"test_b": "racecheck_race_analysis.txt"}}})
    _setup(pytester)
    pytester.makepyfile(test_x=noop_tests("test_a", "test_b", "test_c", "test_d"))
    result = _run(pytester, "-x", jobs=1)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*the run stopped early: 2 test(s) not reported*test_x.py::test_c, "
                                 "test_x.py::test_d*"])


def test_benchmark_tests_run_after_the_others_while_children_run_beside(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test that times with pytest-benchmark waits for every child: it goes after the tests that run beside
    them, and its verdicts are its own."""
    _fake(tmp_path, monkeypatch, {})
    _setup(pytester)
    pytester.makepyfile(test_bm='''
def test_timed(pipecheck, benchmark):
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)

def test_a(pipecheck):
    pass

def test_b(pipecheck):
    pass
''')
    result = _run(pytester, "-v", "--benchmark-disable", jobs=1)
    result.assert_outcomes(passed=3)
    order = _order(result, "test_bm")
    assert order == ["test_a", "test_b", "test_timed"], result.stdout.str()
    assert _results(result.stdout.str())[("test_timed", "sanitizer:racecheck")] == ("pass", "0 hazards")


def test_with_trail_a_held_test_runs_once_a_child_has_ended_it(pytester: pytest.Pytester, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """``PIPECHECK_SANITIZER_OVERLAP=trail``: the parent runs a test only after a child has ended it (so that
    the child, one of several at once, compiled its kernels, not the parent): ``test_x`` finds what the
    child's ``test_x`` wrote. The child's ``test_a`` holds it back until the parent has begun ``test_x``
    (giving up after a while, which only a parent that waits lets happen), so a parent that does not wait
    always looks before the child could have written."""
    _fake(tmp_path, monkeypatch, {})
    monkeypatch.setenv("PIPECHECK_SANITIZER_OVERLAP", "trail")
    _setup(pytester)
    wrote = tmp_path / "child-wrote-x"
    began = tmp_path / "parent-began-x"
    pytester.makepyfile(test_r=WAIT_FOR + f'''

def test_a(pipecheck):
    if os.environ.get("PIPECHECK_CHILD"):
        wait_for({str(began)!r}, 5)  # no verdict hangs on it: with trail, the parent begins test_x later

def test_x(pipecheck):
    if os.environ.get("PIPECHECK_CHILD"):
        open({str(wrote)!r}, "w").close()
    else:
        found = os.path.exists({str(wrote)!r})
        open({str(began)!r}, "w").close()
        assert found, "ran before the child ended it"
''')
    result = _run(pytester, jobs=1)
    result.assert_outcomes(passed=2)
    res = _results(result.stdout.str())
    assert res[("test_x", "sanitizer:racecheck")] == ("pass", "0 hazards"), res
    # without the wait (the default) the parent runs test_x at once
    wrote.unlink()
    began.unlink()
    monkeypatch.setenv("PIPECHECK_SANITIZER_OVERLAP", "1")
    result = _run(pytester, jobs=1)
    result.assert_outcomes(passed=1, failed=1)


def test_a_plugin_that_runs_tests_its_own_way_is_not_stood_in_for(pytester: pytest.Pytester, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A conftest (or plugin, pytest-rerunfailures say) with its own ``pytest_runtest_protocol`` keeps running
    every test: the parent does not hold reports then, but waits before each test for its verdicts, and
    says so. Here that protocol counts the tests it ran."""
    _fake(tmp_path, monkeypatch, {"racecheck": {"inject": {"test_racy": "racecheck_race_analysis.txt"}}})
    _setup(pytester)
    ran = tmp_path / "ran"
    pytester.makeconftest(GPU_CONFTEST.format(fake_gpu=True) + f'''

from _pytest.runner import runtestprotocol

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    import os
    if not os.environ.get("PIPECHECK_CHILD"):
        with open({str(ran)!r}, "a") as fh:
            fh.write(item.name + "\\n")
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    runtestprotocol(item, nextitem=nextitem)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True
''')
    pytester.makepyfile(test_p=noop_tests("test_a", "test_racy", "test_b"))
    result = _run(pytester, jobs=1)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*conftest.py run(s) tests its own way (pytest_runtest_protocol): each test waits "
                                 "for its sanitizer verdicts before it runs*"])
    assert ran.read_text().split() == ["test_a", "test_racy", "test_b"]
    assert _results(result.stdout.str())[("test_racy", "sanitizer:racecheck")][0] == "fail"


@pytest.mark.parametrize("scope", ["function", "module"])
def test_a_fixture_that_asks_for_the_gpu_alone(pytester: pytest.Pytester, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch, scope: str) -> None:
    """A fixture that asks for the GPU alone while the children run. Through the test's (function-scoped)
    ``pipecheck``, its test stops and runs again after the others, as a test that asks in its body: what a
    function-scoped fixture raises is not kept for another test. A fixture of a wider scope (which asks the run's
    tier, having no ``pipecheck``) waits for the children instead, and its test keeps its place: stopped there,
    it would be kept as failed by pytest for every test of its scope."""
    log = _fake(tmp_path, monkeypatch, {})
    _setup(pytester)
    if scope == "function":
        fixture = 'def alone(pipecheck):\n    pipecheck.require_gpu("perf", alone=True)\n'
    else:
        fixture = ("def alone(request):\n    from pytest_pipecheck import state\n"
                   "    assert request.config.stash[state.TIER].timing_blocked is None\n")
    ended = str(log) + ".ended"
    pytester.makepyfile(test_f=f"""
import os
import pytest

def ended():
    if not os.path.exists({ended!r}):
        return 0
    with open({ended!r}) as fh:
        return len(fh.read().splitlines())

@pytest.fixture(scope="{scope}")
{fixture}    return ended()

def test_a(pipecheck):
    pass

def test_b(pipecheck, alone):
    if not os.environ.get("PIPECHECK_CHILD"):
        assert alone == 1, "the fixture went on while the child ran"

def test_c(pipecheck):
    pass
""")
    result = _run(pytester, "-v", jobs=1)
    result.assert_outcomes(passed=3)
    out = result.stdout.str()
    if scope == "function":
        assert _order(result, "test_f") == ["test_a", "test_c", "test_b"], out
        assert "1 test(s) that time kernels run now" in out
    else:
        assert _order(result, "test_f") == ["test_a", "test_b", "test_c"], out
        assert "time kernels run now" not in out
