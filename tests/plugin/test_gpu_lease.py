"""pytest-xdist workers that share one GPU: a timing takes the GPU alone (pytest_pipecheck/gpu_lease.py), after the
other workers on it have ended their tests, in the same session, where it used to be skipped.

Real pytest runs with two workers on one fake GPU (a fake nvidia-smi). Where one thing must happen before another,
a process waits for a file another writes: ``test_slow`` (on one worker) ends only once the other worker's timing
test has asked for the GPU alone, and the timing test checks that ``test_slow`` had ended by the time it got it.
Without the lease the timing test is skipped, or it times while ``test_slow`` still runs: either fails these
tests.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from ._sanitizer_fake import WAIT_FOR, _fake

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

pytest.importorskip("xdist")

FAKEBIN = Path(__file__).resolve().parents[1] / "data" / "fakebin"  # a fake nvidia-smi


def _one_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{FAKEBIN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NVIDIA_SMI_GPUS", "NVIDIA H100 80GB HBM3,9.0")
    monkeypatch.delenv("PIPECHECK_NO_GPU", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def _modules(tmp_path: Path, timed_in_fixture: bool, benchmark: bool = False) -> dict[str, str]:
    asked, slow_ended, starts = (str(tmp_path / n) for n in ("asked", "slow-ended", "starts"))
    ask = f'''
    if os.environ.get("PIPECHECK_CHILD"):
        return  # a sanitizer child runs the body too: it times nothing
    with open({starts!r}, "a") as fh:
        fh.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
    open({asked!r}, "w").close()
    pipecheck.require_gpu("perf", alone=True)
    assert os.path.exists({slow_ended!r}), "timed while the other worker still ran a test on the GPU"
'''
    if timed_in_fixture:
        timed = WAIT_FOR + f'''
import pytest

@pytest.fixture
def alone(pipecheck):{ask}

def test_times(pipecheck, alone{", benchmark" if benchmark else ""}):
    pass

def test_after(pipecheck):
    pass
'''
    else:
        timed = WAIT_FOR + f'''
def test_times(pipecheck):{ask}

def test_after(pipecheck):
    pass
'''
    slow = WAIT_FOR + f'''
def test_slow(pipecheck):
    if os.environ.get("PIPECHECK_CHILD"):
        return
    wait_for({asked!r})  # the other worker asks, lease or not; a run where it never does ends at its time limit
    open({slow_ended!r}, "w").close()
'''
    return {"test_a": timed, "test_b": slow}


def _workers_logged(result: pytest.RunResult) -> dict[str, list[str]]:
    """Each worker's tests, in the order the controller logged them (-v)."""
    logged = re.compile(r"^\[(gw\d)\] .*(PASSED|FAILED|ERROR|SKIPPED) test_\w\.py::(\w+)")
    out: dict[str, list[str]] = {}
    for m in map(logged.match, result.stdout.lines):
        if m:
            out.setdefault(m.group(1), []).append(m.group(3))
    return out


@pytest.mark.parametrize("where", ["fixture", "body"])
def test_a_timing_waits_for_the_other_worker_on_its_gpu_with_the_sanitizer_off(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """Nothing is held with the sanitizer off: the timing test waits where it asks, until the other worker on
    its GPU has ended its tests; then it times, in the same session, not skipped."""
    _one_gpu(monkeypatch)
    pytester.makepyfile(**_modules(tmp_path, timed_in_fixture=where == "fixture"))
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadfile", "-p", "xdist", "-v", "-rs", "--pipecheck",
                                           "--pipecheck-sanitizer=none", "--pipecheck-json=r.json",
                                           "-p", "no:cacheprovider", timeout=300)
    result.assert_outcomes(passed=3)
    out = result.stdout.str()
    assert "timing needs the GPU alone" not in out and "ran without their timings" not in out, out
    assert len((tmp_path / "starts").read_text().split()) == 1  # asked once: it waited, it did not run again


@pytest.mark.parametrize("where", ["fixture", "body", "benchmark"])
def test_a_held_timing_runs_again_after_its_workers_other_tests_with_the_gpu_alone(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """With the sanitizer on, a worker holds its reports: the timing test stops where it asks (its body, or a
    function-scoped fixture through the test's ``pipecheck``, in a test that takes pytest-benchmark's
    ``benchmark`` too), the worker's other tests run, and it runs again from its start at the end of the worker's
    tests, once the other worker on the GPU has ended its tests; every test has its own verdicts. (Waiting where
    it asked instead, its worker would wait for every other one, and the tests sent to it meanwhile with it.)"""
    _fake(tmp_path, monkeypatch, {})
    _one_gpu(monkeypatch)
    pytester.makepyfile(**_modules(tmp_path, timed_in_fixture=where != "body", benchmark=where == "benchmark"))
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadfile", "-p", "xdist", "-v", "-rs", "--pipecheck",
                                           "--pipecheck-sanitizer=racecheck", "--pipecheck-json=r.json",
                                           "-p", "no:cacheprovider", timeout=300)
    result.assert_outcomes(passed=3)
    starts = (tmp_path / "starts").read_text().split()
    assert len(starts) == 2 and len(set(starts)) == 1, starts  # its first run stopped, its second timed
    worker = _workers_logged(result)[starts[0]]
    assert worker == ["test_after", "test_times"], worker
    doc = json.loads((pytester.path / "r.json").read_text())
    racecheck = {r["nodeid"].rsplit("::", 1)[-1]: r["verdict"] for r in doc["results"]
                 if r["check"] == "sanitizer:racecheck"}
    assert racecheck == {"test_times": "pass", "test_after": "pass", "test_slow": "pass"}, racecheck


def test_two_workers_that_both_time_take_the_gpu_in_turn(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each worker has a timing test held to its end: each gives up its shared hold as it asks for the GPU
    alone, so neither waits for the other; both time, one after the other, never at once."""
    _fake(tmp_path, monkeypatch, {})
    _one_gpu(monkeypatch)
    inside = str(tmp_path / "inside")
    body = WAIT_FOR + f'''
def test_times_{{name}}(pipecheck):
    if os.environ.get("PIPECHECK_CHILD"):
        return
    pipecheck.require_gpu("perf", alone=True)
    fd = os.open({inside!r}, os.O_CREAT | os.O_EXCL | os.O_WRONLY)  # fails while the other one times
    os.close(fd)
    with open({str(tmp_path / "timed")!r}, "a") as fh:
        fh.write("{{name}}\\n")
    os.unlink({inside!r})

def test_other_{{name}}(pipecheck):
    pass
'''
    pytester.makepyfile(test_a=body.format(name="a"), test_b=body.format(name="b"))
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadfile", "-p", "xdist", "-v", "--pipecheck",
                                           "--pipecheck-sanitizer=racecheck", "-p", "no:cacheprovider", timeout=300)
    result.assert_outcomes(passed=4)
    assert sorted((tmp_path / "timed").read_text().split()) == ["a", "b"]
    assert all(tests[-1].startswith("test_times_") for tests in _workers_logged(result).values()), result.stdout.str()


def test_the_lease_is_taken_only_where_workers_share_a_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A worker alone on its GPU, a run without the controller's folder, or a CPU tier: no lease, timings
    there are what they were (timed where alone, skipped with the reason where not)."""
    from pytest_pipecheck import state
    from pytest_pipecheck.device import DeviceInfo, TierInfo
    from pytest_pipecheck.gpu_lease import LEASE_KEY, worker_lease

    class Config:
        def __init__(self, workerinput: dict[str, object], tier: TierInfo) -> None:
            self.workerinput = workerinput
            self.stash = pytest.Stash()
            self.stash[state.TIER] = tier
            self.pluginmanager = pytest.PytestPluginManager()

    device = DeviceInfo(0, "Fake H100", "9.0", 132, 81559, "580.00", "GPU-fake")
    shared = TierInfo("gpu", device, "", gpu_shared_by=("gw0", "gw1"))
    alone = TierInfo("gpu", device, "", gpu_shared_by=("gw0",))
    cpu = TierInfo("cpu", None, "no GPU")
    given = {LEASE_KEY: str(tmp_path), "pipecheck_gpu": "GPU-fake"}
    assert worker_lease(Config(given, alone)) is None  # type: ignore[arg-type]
    assert worker_lease(Config(given, cpu)) is None  # type: ignore[arg-type]
    assert worker_lease(Config({"pipecheck_gpu": "GPU-fake"}, shared)) is None  # type: ignore[arg-type]
    # a folder whose lock file cannot be opened (gone, or not a folder): no lease, so its timings skip with the
    # reason rather than time beside the other workers
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    for bad in (tmp_path / "gone", not_a_folder):
        broken = Config({LEASE_KEY: str(bad), "pipecheck_gpu": "GPU-fake"}, shared)
        assert worker_lease(broken) is None  # type: ignore[arg-type]
        assert broken.stash[state.TIER] is shared and shared.timing_blocked is not None
    config = Config(given, shared)
    plugin = worker_lease(config)  # type: ignore[arg-type]
    assert plugin is not None and plugin.lease.state == "shared"
    # outside a test nothing is taken: the tier answers as it would (blocked, with the reason)
    assert config.stash[state.TIER].timing_blocked is not None
    assert plugin.lease.state == "shared"
    plugin.end()
    assert plugin.lease.state == "none" and config.stash[state.TIER] is shared


def test_a_worker_that_dies_holding_the_gpu_alone_leaves_it_to_the_others(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker dies while it has the GPU alone (its lock goes with its process): its test is reported as the
    one it crashed in, never passed, and the other worker's timing still gets the GPU and runs; nothing hangs.
    (Which of the two gets the GPU first is not forced: a worker that waited for the other to take it alone
    would hold it shared, and neither could.)"""
    _one_gpu(monkeypatch)
    pytester.makepyfile(test_a='''
import os

def test_dies_timing(pipecheck):
    pipecheck.require_gpu("perf", alone=True)
    os._exit(3)  # a fault that takes the worker down while it times
''', test_b='''
def test_times(pipecheck):
    pipecheck.require_gpu("perf", alone=True)
''')
    # xdist's own load scheduling (loadfile would send the test a worker died in to the next worker, and so on)
    result = pytester.runpytest_subprocess("-n", "2", "-p", "xdist", "-v", "--pipecheck",
                                           "--pipecheck-sanitizer=none", "-p", "no:cacheprovider", timeout=300)
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == 1 and outcomes.get("passed") == 1, result.stdout.str()
    result.stdout.fnmatch_lines(["*worker*crashed while running*test_dies_timing*"])
