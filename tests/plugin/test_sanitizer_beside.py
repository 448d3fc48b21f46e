"""The sanitizer children beside the tests (pytest_pipecheck/sanitizer/beside.py), through real pytest runs with
the fake compute-sanitizer: the first tests run while a later part of the children is still sanitizing, each
test is reported with its own verdicts, a timing waits for every child, and the verdicts are those of a run
whose children all end before the first test (the default; ``PIPECHECK_SANITIZER_OVERLAP=1`` turns the overlap
on, and every test here does, but the one that compares the two).

Where a test needs one thing to happen before another, one process waits for a file the other writes; no
assertion depends on how fast the machine is.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ._sanitizer_fake import _fake, _results, _setup

FAKEBIN = Path(__file__).resolve().parents[1] / "data" / "fakebin"  # a fake nvidia-smi

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out


@pytest.fixture(autouse=True)
def _overlap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIPECHECK_SANITIZER_OVERLAP", "1")  # the behaviour these tests are about

WAIT_FOR = '''
import os
import time

def wait_for(path, seconds):
    """Until ``path`` exists, at most ``seconds``; whether it exists."""
    end = time.monotonic() + seconds
    while not os.path.exists(path) and time.monotonic() < end:
        time.sleep(0.05)
    return os.path.exists(path)
'''


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
    pytester.makepyfile(test_b=WAIT_FOR + f'''

def test_first(pipecheck):
    if not os.environ.get("PIPECHECK_CHILD"):
        open({str(first_ran)!r}, "w").close()

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
    for overlap in ("1", "0"):
        (tmp_path / overlap).mkdir()
        _fake(tmp_path / overlap, monkeypatch, plan)
        monkeypatch.setenv("PIPECHECK_SANITIZER_OVERLAP", overlap)
        _setup(pytester)
        pytester.makepyfile(test_v=source)
        result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=racecheck,synccheck",
                                               "--pipecheck-sanitizer-jobs=3", "-p", "no:cacheprovider",
                                               timeout=600)
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
