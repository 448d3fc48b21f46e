"""A kernel fault must not take the session down (containment.py), through real pytest runs.

No GPU here, so a fake stands in for the CUDA context: a test "faults" by creating a flag file named
after its process, after which every "CUDA call" in that process raises as a sticky error does, and the
context probe reports the process's context as dead. A fresh process has a live context again, which
is what the relay children rely on. On a GPU: docs/validation/2026-11-24-h100.md.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from ._sanitizer_fake import WAIT_FOR
from .test_sanitizer_runner import GPU_CONFTEST, _fake, _results

FAKEBIN = Path(__file__).resolve().parents[1] / "data" / "fakebin"  # a fake nvidia-smi
pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

FAKE_CUDA = '''
import os
import pytest
import pytest_pipecheck.cuda_probe as _cuda_probe

HERE = os.path.dirname(os.path.abspath(__file__))
FLAG = os.path.join(HERE, f"dead-context-{os.getpid()}")
STICKY = "CUDA error: misaligned address"


def _probe():
    return f"torch: RuntimeError: {STICKY}" if os.path.exists(FLAG) else None


_cuda_probe.probe_context = _probe


def pytest_configure(config):
    with open(os.path.join(HERE, "processes.log"), "a") as fh:
        fh.write(f"{os.getpid()} {bool(config.getoption('pipecheck_relay', default=None))}\\n")


@pytest.fixture
def gpu():
    """A stand-in for a CUDA device: calls fail once the context of this process is dead."""
    class Gpu:
        def run(self):
            if os.path.exists(FLAG):
                raise RuntimeError(STICKY)

        def fault(self, raise_now=True):
            open(FLAG, "w").close()
            if raise_now:
                raise RuntimeError(STICKY)
    return Gpu()
'''

SUITE = '''
import pytest
from pytest_pipecheck.results import CheckResult, Verdict


def test_before(pipecheck, gpu):
    gpu.run()


def test_faults(pipecheck, gpu):
    gpu.fault()


def test_after_one(pipecheck, gpu):
    gpu.run()
    pipecheck.record(CheckResult("coverage", Verdict.PASS, "max rel err 1.0e-04"))


def test_after_own_failure(pipecheck, gpu):
    gpu.run()
    assert False, "fails for a reason of its own"


@pytest.mark.skip(reason="skipped on purpose")
def test_after_skipped(pipecheck, gpu):
    gpu.run()


def test_after_two(pipecheck, gpu):
    gpu.run()
'''


def _outcomes(stdout: str) -> dict[str, str]:
    out = {}
    for line in stdout.splitlines():
        m = re.match(r"^(PASSED|FAILED|SKIPPED|ERROR) (?:\[\d+\] )?\S*?::(\w+)", line)
        if m:
            out[m.group(2)] = m.group(1)
    return out


def _run_on_fake_cuda(pytester: pytest.Pytester, *args: str, **modules: str) -> pytest.RunResult:
    """One pytest subprocess over the test modules ``modules`` ({name: source}), with the fake CUDA context as
    its conftest: pipecheck on, no sanitizer, ``-rA``, then ``args``."""
    pytester.makeconftest(FAKE_CUDA)
    pytester.makepyfile(**modules)
    return pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=none", "-p", "no:cacheprovider",
                                         "-rA", *args)


def test_fault_fails_its_test_and_later_tests_get_their_own_verdicts(pytester: pytest.Pytester,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # the fault is a stand-in: on a machine with a GPU the triage would re-run it on the real device
    monkeypatch.setenv("PIPECHECK_NO_GPU", "1")
    result = _run_on_fake_cuda(pytester, "--pipecheck-json=r.json", test_suite=SUITE)
    out = result.stdout.str()
    assert _outcomes(out) == {"test_before": "PASSED", "test_faults": "FAILED", "test_after_one": "PASSED",
                              "test_after_own_failure": "FAILED", "test_after_two": "PASSED"}, out
    result.assert_outcomes(passed=3, failed=2, skipped=1)
    assert "SKIPPED [1] test_suite.py:23: skipped on purpose" in out
    # the faulting test says that it faulted, and why the later tests moved to a fresh process
    assert "the CUDA context of this process is unusable after the call of this test" in out
    assert "torch: RuntimeError: CUDA error: misaligned address" in out
    assert "triage: not run: no GPU" in out
    # the later failure is its own, not the sticky error
    assert "fails for a reason of its own" in out
    assert "FAILED test_suite.py::test_after_own_failure - AssertionError: fails for a re" in out
    processes = (pytester.path / "processes.log").read_text().split("\n")
    assert [p.split()[1] for p in processes if p] == ["False", "True"], "one parent, one relay child"
    doc = json.loads((pytester.path / "r.json").read_text())
    by = {(r["nodeid"].rsplit("::", 1)[1], r["check"]): r for r in doc["results"]}
    assert by[("test_faults", "fault")]["verdict"] == "fail"
    assert by[("test_after_one", "coverage")]["verdict"] == "pass", "results of relayed tests reach the reports"


def test_a_relay_child_that_faults_hands_the_rest_to_the_next(pytester: pytest.Pytester) -> None:
    result = _run_on_fake_cuda(pytester, test_chain='''
        def test_a(pipecheck, gpu):
            gpu.fault()

        def test_b(pipecheck, gpu):
            gpu.run()

        def test_c(pipecheck, gpu):
            gpu.fault(raise_now=False)   # passes, but leaves the context dead

        def test_d(pipecheck, gpu):
            gpu.run()

        def test_e(pipecheck, gpu):
            gpu.run()
    ''')
    out = result.stdout.str()
    assert _outcomes(out) == {"test_a": "FAILED", "test_b": "PASSED", "test_c": "FAILED", "test_d": "PASSED",
                              "test_e": "PASSED"}, out
    # a test whose body passed but left the context dead fails, saying so
    assert "unusable after the call of this test" in out
    relays = [p for p in (pytester.path / "processes.log").read_text().splitlines() if p.endswith("True")]
    assert len(relays) == 2


def test_a_relay_child_that_dies_fails_the_test_it_was_running(pytester: pytest.Pytester) -> None:
    result = _run_on_fake_cuda(pytester, test_die='''
        import os

        def test_a(pipecheck, gpu):
            gpu.fault()

        def test_b(pipecheck, gpu):
            os._exit(3)          # the child dies here

        def test_c(pipecheck, gpu):
            gpu.run()
    ''')
    out = result.stdout.str()
    assert _outcomes(out) == {"test_a": "FAILED", "test_b": "FAILED", "test_c": "PASSED"}, out
    assert "died while running this test (exit status 3)" in out


def test_triage_names_the_faulting_line(pytester: pytest.Pytester, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """On the GPU tier the faulting test is re-run alone under memcheck and memcheck's finding is attached."""
    _fake(tmp_path, monkeypatch, {"memcheck": {"inject": {"test_faults": "memcheck_oob_x.txt"}}})
    pytester.makeconftest(GPU_CONFTEST.format(fake_gpu=True) + FAKE_CUDA)
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=none", "-p", "no:cacheprovider",
                                           "-rA", "--pipecheck-json=r.json")
    out = result.stdout.str()
    assert _outcomes(out)["test_faults"] == "FAILED" and _outcomes(out)["test_after_two"] == "PASSED", out
    assert "triage (this test alone under memcheck):" in out
    assert re.search(r"invalid __global__ read \(error\) in tail_oob at \S+\.cu:21", out), out
    doc = json.loads((pytester.path / "r.json").read_text())
    fault = next(r for r in doc["results"] if r["check"] == "fault")
    assert "memcheck:" in fault["summary"] and fault["details"]["triage"]["findings"]


def test_a_sanitizer_child_whose_context_dies_hands_the_rest_to_a_fresh_child(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The child stops after the faulting test (exit 2, POISONED line): the tests it finished keep their
    verdicts, the tests it never began run in a fresh child, and a race there is still caught."""
    log = _fake(tmp_path, monkeypatch, {"racecheck": {"inject": {"test_after_two": "racecheck_race_analysis.txt"}}})
    pytester.makeconftest(GPU_CONFTEST.format(fake_gpu=True) + FAKE_CUDA)
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=racecheck", "-p", "no:cacheprovider",
                                           "-rA")
    out = result.stdout.str()
    verdicts = _results(out)
    assert verdicts[("test_before", "sanitizer:racecheck")][0] == "pass", out
    assert verdicts[("test_after_one", "sanitizer:racecheck")] == ("pass", "0 hazards"), out
    assert verdicts[("test_after_two", "sanitizer:racecheck")][0] == "fail", out
    assert "did not run in the child" not in out and "unexpected exit status" not in out, out
    racecheck_children = [json.loads(line) for line in log.read_text().splitlines()
                          if "racecheck" in line and "memcheck" not in line]
    assert len(racecheck_children) >= 2  # the first stopped at the fault, a fresh one ran the rest


def test_children_get_the_runs_own_options(pytester: pytest.Pytester) -> None:
    """Every child's command carries what changes how a test runs (pipecheck's settings, -p, -o, -W,
    --runxfail, options a conftest added, with their values) and nothing the parent keeps doing itself
    (reports, selection, stopping, worker processes, the seed and role it gives the child)."""
    from pytest_pipecheck import children

    pytester.makeconftest("def pytest_addoption(parser):\n"
                          "    parser.addoption('--run-slow', action='store_true')\n"
                          "    parser.addoption('--gpu-arch', action='store')\n")
    args = ["--pipecheck", "tests/x.py", "--pipecheck-json", "r.json", "--pipecheck-html=r.html",
            "--pipecheck-arch", "sm_90", "-p", "no:randomly", "-o", "k=v", "-Werror", "-x", "-rA",
            "--pipecheck-sanitizer=memcheck", "tests/y.py::t", "--import-mode=importlib", "-k", "expr",
            "--runxfail", "--run-slow", "--gpu-arch", "sm_90a", "--junitxml", "j.xml", "-vx",
            "--pipecheck-seed", "7", "--pipecheck-child=racecheck", "--maxfail=2", "--basetemp", "bt"]
    config = pytester.parseconfig(*args)
    assert children.own_options(config, args) == [
        "--pipecheck", "--pipecheck-arch", "sm_90", "-p", "no:randomly", "-o", "k=v", "-Werror",
        "--pipecheck-sanitizer=memcheck", "--import-mode=importlib", "--runxfail", "--run-slow",
        "--gpu-arch", "sm_90a"]


def test_probe_never_creates_a_context() -> None:
    """The probe asks only frameworks already imported, and only when they hold a context. In a fresh
    interpreter: in this one an earlier test may have made a context already (on the GPU tier)."""
    import subprocess

    code = ("import torch\n"
            "from pytest_pipecheck.cuda_probe import probe_context\n"
            "assert not torch.cuda.is_initialized()\n"
            "assert probe_context() is None\n"
            "print('initialized after the probe:', torch.cuda.is_initialized())\n")
    pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "initialized after the probe: False" in proc.stdout


def test_probe_ignores_stand_ins_and_errors_cuda_did_not_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    """A test that swaps ``torch`` for a fake (perf timing tests do) has not faulted; an error CUDA
    raised from a real module has."""
    import types

    from pytest_pipecheck import cuda_probe as containment

    fake = types.ModuleType("torch")  # no __file__: not an installed framework
    fake.cuda = types.SimpleNamespace()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    assert containment.probe_context() is None

    def dead() -> None:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    def broken() -> bool:
        raise AttributeError("'SimpleNamespace' object has no attribute 'is_initialized'")

    real = types.ModuleType("torch")
    real.__file__ = "/site-packages/torch/__init__.py"
    real.cuda = types.SimpleNamespace(is_initialized=lambda: True, synchronize=dead)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", real)
    assert containment.probe_context() == "torch: RuntimeError: CUDA error: an illegal memory access was encountered"
    real.cuda = types.SimpleNamespace(is_initialized=broken)  # type: ignore[attr-defined]
    assert containment.probe_context() is None


def test_cupy_imported_but_cuda_never_initialized_is_no_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sanitizer child imports CuPy itself; in a test that never touched the GPU, asking for the current
    context raises CUDA_ERROR_NOT_INITIALIZED. That is no context, not a dead one (read as "CUDA context
    unusable", it would make a test that launched nothing inconclusive)."""
    import types

    from pytest_pipecheck import cuda_probe as containment

    class CUDADriverError(RuntimeError):
        pass

    def raising(message: str):  # type: ignore[no-untyped-def]
        def ctx_get_current() -> int:
            raise CUDADriverError(message)
        return types.SimpleNamespace(driver=types.SimpleNamespace(ctxGetCurrent=ctx_get_current))

    cupy = types.ModuleType("cupy")
    cupy.__file__ = "/site-packages/cupy/__init__.py"
    # the stand-in leaves sys.modules before the test ends: pipecheck probes the context after each call
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "cupy", cupy)
        m.delitem(sys.modules, "torch", raising=False)
        cupy.cuda = raising("CUDA_ERROR_NOT_INITIALIZED: initialization error")  # type: ignore[attr-defined]
        assert containment.probe_context() is None
        cupy.cuda = raising("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access")  # type: ignore[attr-defined]
        dead = containment.probe_context()
    assert dead == "cupy: CUDADriverError: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access"


def test_under_xdist_a_faulting_worker_relays_the_rest(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    result = _run_on_fake_cuda(pytester, "-n", "2", "--dist", "loadfile", test_suite=SUITE)
    out = result.stdout.str()
    assert _outcomes(out) == {"test_before": "PASSED", "test_faults": "FAILED", "test_after_one": "PASSED",
                              "test_after_own_failure": "FAILED", "test_after_two": "PASSED"}, out
    result.assert_outcomes(passed=3, failed=2, skipped=1)
    assert "unusable after the call of this test" in out


# --------------------------------------------------------------------------- a relay child's timings

def _relay_timing_suite(tmp_path: Path, other_runs: str) -> str:
    """test_faults kills this process's context, so test_times runs in a relay child. test_times says it is
    about to time (``asked``), asks for the GPU alone and checks that ``other_runs`` (the parent's sanitizer
    child, or the other xdist worker) had ended by then; test_other (run by that other process) ends only
    once test_times has asked, and a second later."""
    asked, ended = str(tmp_path / "asked"), str(tmp_path / "other-ended")
    return WAIT_FOR + f'''
import os
import sys
import time


def test_faults(pipecheck, gpu):
    if os.environ.get("PIPECHECK_CHILD"):
        return  # the sanitizer child does not fault
    gpu.fault()


def test_times(pipecheck, gpu):
    if os.environ.get("PIPECHECK_CHILD"):
        return
    with open({str(tmp_path / "timed-in")!r}, "a") as fh:
        fh.write(f"{{any(a.startswith('--pipecheck-relay') for a in sys.argv)}}\\n")
    open({asked!r}, "w").close()
    pipecheck.require_gpu("perf", alone=True)
    assert os.path.exists({ended!r}), "timed while {other_runs} still ran on the GPU"


def test_other(pipecheck):
    if {other_runs == "the sanitizer child"!r} != bool(os.environ.get("PIPECHECK_CHILD")):
        return
    wait_for({asked!r})  # a run where it never comes ends at its time limit
    # A relay child that waits for the grant passes whenever this test ends; one that does not wait times at
    # once, and this delay only keeps this test running while it does (so that such a child fails)
    time.sleep(1.0)
    open({ended!r}, "w").close()
'''


def test_a_relay_child_times_only_once_the_parents_sanitizer_children_have_ended(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a fault the later tests run in a relay child, while the parent's sanitizer children may still run on
    the GPU beside it. A timing there asks the parent for the GPU alone: it comes once those children have
    ended (without it, the relay child timed at once, with the sanitizer's kernels on the GPU)."""
    _fake(tmp_path, monkeypatch, {})
    pytester.makeconftest(GPU_CONFTEST.format(fake_gpu=True) + FAKE_CUDA)
    pytester.makepyfile(test_suite=_relay_timing_suite(tmp_path, "the sanitizer child"))
    # two children: the verdicts of test_faults (which the parent awaits before it relays) come from the first,
    # while the second, with test_other, still runs
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=racecheck", "-p", "no:cacheprovider",
                                           "--pipecheck-sanitizer-jobs=2", "-rA", timeout=300)
    out = result.stdout.str()
    assert _outcomes(out) == {"test_faults": "FAILED", "test_times": "PASSED", "test_other": "PASSED"}, out
    assert (tmp_path / "timed-in").read_text().split() == ["True"]  # once, in the relay child
    assert "the CUDA context of this process is unusable" in out and "relay 1" in out


def test_a_relay_child_of_an_xdist_worker_times_only_with_the_gpu_alone(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two xdist workers share one GPU; one faults and relays its later tests. The relay child's timing asks its
    parent, which takes the GPU's lease alone for it: the other worker's test has ended by then."""
    pytest.importorskip("xdist")
    monkeypatch.setenv("PATH", f"{FAKEBIN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NVIDIA_SMI_GPUS", "NVIDIA H100 80GB HBM3,9.0")
    monkeypatch.delenv("PIPECHECK_NO_GPU", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    pytester.makeconftest(FAKE_CUDA)
    suite = _relay_timing_suite(tmp_path, "the other worker")
    head, _, other = suite.partition("\n\ndef test_other")
    pytester.makepyfile(test_a=head, test_b=WAIT_FOR + "\nimport os\nimport time\n\n\ndef test_other" + other)
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadfile", "-p", "xdist", "-rA", "--pipecheck",
                                           "--pipecheck-sanitizer=none", "-p", "no:cacheprovider", timeout=300)
    out = result.stdout.str()
    assert _outcomes(out) == {"test_faults": "FAILED", "test_times": "PASSED", "test_other": "PASSED"}, out
    assert (tmp_path / "timed-in").read_text().split() == ["True"]  # once, in the relay child
    assert "timing needs the GPU alone" not in out


def test_a_relay_childs_gpu_gate_and_sharers_travel_on_its_command_line(pytester: pytest.Pytester) -> None:
    from pytest_pipecheck import children

    role = children.relay("/x/events.jsonl", "crash", "/x/gpu-alone", ("gw0", "gw3"))
    assert children.decode(pytester.parseconfig(*role.args())) == role
    plain = children.relay("/x/events.jsonl")
    assert plain.args() == ["--pipecheck-relay=/x/events.jsonl", "--pipecheck-relay-after=fault"]
    assert children.decode(pytester.parseconfig(*plain.args())) == plain
