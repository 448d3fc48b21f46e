"""pytest-xdist: results reach the controller's summary; one GPU per worker."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

pytest.importorskip("xdist")

FAKEBIN = Path(__file__).resolve().parents[1] / "data" / "fakebin"

TESTS = """
import os
import pytest
from pytest_pipecheck.results import CheckResult, Verdict

@pytest.mark.parametrize("i", range(4))
def test_k(pipecheck, i):
    pipecheck.record(CheckResult("coverage", Verdict.PASS, f"case {i} on {os.environ.get('CUDA_VISIBLE_DEVICES')}"))
    with open(f"seen-{os.environ.get('PYTEST_XDIST_WORKER')}-{i}", "w") as fh:
        fh.write(os.environ.get("CUDA_VISIBLE_DEVICES", "unset") + " " + str(pipecheck.seed))
"""


def test_two_workers_one_summary(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TESTS)
    result = pytester.runpytest_subprocess("-n", "2", "--pipecheck", "--pipecheck-sanitizer=none",
                                           "--pipecheck-json=r.json", "--pipecheck-seed=11", "-p", "xdist")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["pipecheck checks: 4 pass, 0 fail, 0 skip, 0 error"])
    doc = json.loads((pytester.path / "r.json").read_text())
    assert len(doc["results"]) == 4
    # the seed of a test is the same with and without xdist
    serial = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=none", "--pipecheck-seed=11", "-p", "xdist")
    serial.assert_outcomes(passed=4)


def test_one_gpu_per_worker(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{FAKEBIN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("PIPECHECK_NO_GPU", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("FAKE_NVIDIA_SMI_GPUS", "NVIDIA H200,9.0;NVIDIA H200,9.0")
    pytester.makepyfile(TESTS)
    # xdist loaded by its entry point, as in a plain run (not "-p xdist", which changes the hook order)
    result = pytester.runpytest_subprocess("-n", "auto", "--pipecheck-sanitizer=none")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*2 workers*"])  # -n auto: one worker per visible GPU
    seen: dict[str, set[str]] = {}
    for f in pytester.path.glob("seen-gw*"):
        worker = f.name.split("-")[1]
        seen.setdefault(worker, set()).add(f.read_text().split()[0])
    # each worker saw exactly one GPU, and the two workers saw different ones
    assert all(len(v) == 1 for v in seen.values()), seen
    assert len({next(iter(v)) for v in seen.values()}) == len(seen) == 2, seen


def test_a_worker_that_dies_is_reported_and_its_test_not_passed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import os
        from pytest_pipecheck.results import CheckResult, Verdict

        def test_fine(pipecheck):
            pipecheck.record(CheckResult("coverage", Verdict.PASS, "ok"))

        def test_dies(pipecheck):
            os._exit(3)  # a GPU fault or a killed process takes the whole worker down

        def test_after(pipecheck):
            pipecheck.record(CheckResult("coverage", Verdict.PASS, "ok"))
        """
    )
    result = pytester.runpytest_subprocess("-n", "2", "--pipecheck", "--pipecheck-sanitizer=none",
                                           "--pipecheck-json=r.json", "-p", "xdist")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == 1 and outcomes.get("passed") == 2, outcomes
    result.stdout.fnmatch_lines(["*worker*crashed while running*test_dies*"])
    doc = json.loads((pytester.path / "r.json").read_text())
    assert {r["nodeid"].split("::")[1] for r in doc["results"]} == {"test_fine", "test_after"}
    assert doc["totals"]["pass"] == 2


def test_auto_worker_count_is_asked_of_pipecheck_before_xdist() -> None:
    """xdist's own pytest_xdist_auto_num_workers (the CPU count) is a plain hookimpl; pipecheck's must
    run first whatever order the entry points load in (loaded the other way, ``-n auto`` starts one
    worker per CPU core, 32 on a 32-core machine with 2 GPUs, instead of one per GPU)."""
    from pytest_pipecheck import plugin

    opts = getattr(plugin.pytest_xdist_auto_num_workers, "pytest_impl", {})
    assert opts.get("tryfirst") is True and opts.get("optionalhook") is True


TIMED = """
import pytest
from pytest_pipecheck.results import Verdict

def test_gate(pipecheck):
    r = pipecheck.check_perf(lambda: None, flops=1e9)  # never timed while the GPU is shared
    assert r.verdict is Verdict.SKIP, r.summary

def test_sweep(pipecheck):
    r = pipecheck.check_stage_sweep(lambda s: None, (1, 2), kernel="k")
    assert r.verdict is Verdict.SKIP, r.summary

def test_times_itself(pipecheck):
    pipecheck.require_gpu("perf", alone=True)
    raise AssertionError("timed while other workers shared the GPU")

def test_no_timing(pipecheck):
    pipecheck.require_gpu("coverage")  # needs the GPU, not alone: runs
"""


NO_LEASE = """
import pytest

@pytest.hookimpl(trylast=True, optionalhook=True)
def pytest_configure_node(node):
    node.workerinput.pop("pipecheck_gpu_lease", None)  # a controller that names no folder for the GPU's lease
"""


@pytest.mark.parametrize(("gpus", "lease"), [(1, True), (1, False), (2, True)], ids=["shared", "shared-no-lease", "own"])
def test_timing_where_workers_share_a_gpu(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                          gpus: int, lease: bool) -> None:
    """Two workers on one GPU would time each other's kernels: each timing takes the GPU alone first
    (gpu_lease.py; tests/plugin/test_gpu_lease.py has the order it takes), and the tests that time reach the
    timer as with a GPU each (which the fake GPU cannot run: they fail there). Where no lease can be had, every
    timing check and every test that times kernels itself skips with the reason, and the summary says how to time
    them alone."""
    monkeypatch.setenv("PATH", f"{FAKEBIN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("PIPECHECK_NO_GPU", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("FAKE_NVIDIA_SMI_GPUS", ";".join(["NVIDIA H100 80GB HBM3,9.0"] * gpus))
    pytester.makepyfile(TIMED)
    if not lease:
        pytester.makeconftest(NO_LEASE)
    result = pytester.runpytest_subprocess("-n", "2", "--pipecheck", "--pipecheck-sanitizer=none",
                                           "--pipecheck-json=r.json", "-p", "xdist", "-rs")
    out = result.stdout.str()
    if not lease:
        result.assert_outcomes(passed=3, skipped=1)
        reason = "timing needs the GPU alone, and 2 pytest-xdist workers share GPU 0 (gw0, gw1)"
        assert f"perf not timed: {reason}" in out and f"stage_sweep x1: stage sweep not timed: {reason}" in out, out
        result.stdout.fnmatch_lines(["*3 test(s) ran without their timings (xdist workers shared a GPU); time them "
                                     "alone with: pytest --pipecheck -n 0 test_timing_where_workers_share_a_gpu*::test_gate "
                                     "*::test_sweep *::test_times_itself"])
        doc = json.loads((pytester.path / "r.json").read_text())
        skipped = {r["nodeid"].split("::")[1]: r["summary"] for r in doc["results"] if r["verdict"] == "skip"}
        assert set(skipped) == {"test_gate", "test_sweep", "test_times_itself"} and all(
            reason in s for s in skipped.values()), skipped
    else:
        # each worker goes on to time, alone on its GPU or once it has it alone: the fake GPU has no CUDA, so the
        # timer fails
        outcomes = result.parseoutcomes()
        assert outcomes.get("failed") == 3 and outcomes.get("passed") == 1, out
        assert "timing needs the GPU alone" not in out and "ran without their timings" not in out, out


def test_who_shares_a_gpu_follows_the_round_robin_pinning(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_pipecheck.xdist_hooks import workers_on_my_gpu as _workers_on_my_gpu

    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "5")
    assert _workers_on_my_gpu({"workerid": "gw3", "pipecheck_gpu_count": 2}) == ("gw1", "gw3")
    assert _workers_on_my_gpu({"workerid": "gw4", "pipecheck_gpu_count": 2}) == ("gw0", "gw2", "gw4")
    assert _workers_on_my_gpu({"workerid": "gw0", "pipecheck_gpu_count": 8}) == ("gw0",)
    # no GPU pinned by the controller (CPU tier, an older controller), or a worker id it does not know
    assert _workers_on_my_gpu({"workerid": "gw1"}) == ()
    assert _workers_on_my_gpu({"workerid": "master", "pipecheck_gpu_count": 1}) == ()
