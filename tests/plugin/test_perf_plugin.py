"""check_perf through real pytest runs: the CPU-tier skip, the gate across runs, pytest-benchmark."""

from __future__ import annotations

import json

import numpy  # noqa: F401 - imported before pytester's in-process runs, which cannot re-import it
import pytest
import scipy.stats  # noqa: F401 - same reason: the gate imports it inside the in-process runs

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

TEST_FILE = """
import os
import numpy as np
import pytest

def samples(seed, slow):
    rng = np.random.default_rng(seed)
    return list(60.0 * (1 + slow) * np.exp(rng.normal(0, 0.02, 100)))

def test_kernel(pipecheck):
    slow = float(os.environ.get("SLOW", "0"))
    seed = int(os.environ.get("SEED", "0"))
    pipecheck.check_perf(samples=samples(seed, slow), flops=1e9)

@pytest.mark.pipecheck(perf_threshold=0.5)
def test_lenient(pipecheck):
    slow = float(os.environ.get("SLOW", "0"))
    seed = int(os.environ.get("SEED", "0"))
    pipecheck.check_perf(samples=samples(seed + 100, slow))
"""


def test_cpu_tier_skips_perf_with_reason(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_k(pipecheck):
            r = pipecheck.check_perf(lambda: None, flops=1e9)
            assert r.verdict.value == "skip"
        """
    )
    result = pytester.runpytest("--pipecheck", "--pipecheck-tier=cpu", "-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*perf*skip*perf needs a CUDA GPU: --pipecheck-tier=cpu was requested*"])


def test_flops_zero_is_a_clear_failure(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_k(pipecheck):
            pipecheck.check_perf(lambda: None, flops=0)
        """
    )
    result = pytester.runpytest("--pipecheck-tier=cpu", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*PipecheckError: check_perf(flops=0) in test_flops_zero_is_a_clear_failure.py::test_k:"
                                 " a declared FLOP count must be > 0*"])
    # the plugin's own frames are hidden: the user's line is what pytest shows
    assert "gate.py" not in result.stdout.str()


def test_gate_across_runs(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(TEST_FILE)
    base = ["--pipecheck-tier=cpu", "--pipecheck-baseline-dir=bl", "-p", "no:cacheprovider", "-v"]

    first = pytester.runpytest(*base)
    first.assert_outcomes(passed=2)
    first.stdout.fnmatch_lines(["*perf*skip*no baseline: directory * does not exist*"])
    assert not (pytester.path / "bl").exists()  # nothing is written without --...-save

    saved = pytester.runpytest(*base, "--pipecheck-baseline-save")
    saved.assert_outcomes(passed=2)
    files = list((pytester.path / "bl").iterdir())
    assert len(files) == 1
    data = json.loads(files[0].read_text())
    assert set(data["tests"]) == {"test_gate_across_runs.py::test_kernel", "test_gate_across_runs.py::test_lenient"}

    monkeypatch.setenv("SEED", "1")
    rerun = pytester.runpytest(*base)
    rerun.assert_outcomes(passed=2)

    monkeypatch.setenv("SLOW", "0.10")
    slow = pytester.runpytest(*base)
    slow.assert_outcomes(passed=1, failed=1)  # test_lenient's marker threshold of 50% lets it pass
    slow.stdout.fnmatch_lines([
        "*perf regression in test_gate_across_runs.py::test_kernel [[]case default[]]: * us vs * us baseline (+*%, p=*",
        "*test_gate_across_runs.py::test_kernel*perf*fail*regression: * us vs * us baseline*",
    ])
    assert files[0].read_text() == json.dumps(data, indent=2, sort_keys=True) + "\n"  # untouched


def test_benchmark_fixture_carries_device_samples(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_k(pipecheck, benchmark):
            times = [50.0 + i * 0.1 for i in range(40)]
            pipecheck.check_perf(samples=times, benchmark=benchmark, flops=1e9)
        """
    )
    result = pytester.runpytest_subprocess("--pipecheck-tier=cpu", "--benchmark-json=bench.json", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    bench = json.loads((pytester.path / "bench.json").read_text())["benchmarks"][0]
    assert bench["stats"]["rounds"] == 40
    assert bench["stats"]["median"] == pytest.approx(51.95e-6, rel=1e-6)  # the samples, in seconds
    assert bench["options"]["timer"] == "pipecheck.cuda_events"
    assert bench["extra_info"]["pipecheck_case"] == "default"
    assert bench["extra_info"]["tflops"] == pytest.approx(1e9 / 51.95e-6 / 1e12, rel=1e-3)


def test_benchmark_fixture_unused_on_cpu_does_not_warn(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_k(pipecheck, benchmark):
            pipecheck.check_perf(lambda: None, benchmark=benchmark)
        """
    )
    # in a subprocess: with -W error, an object another in-process run leaked (an unclosed file)
    # would otherwise turn its ResourceWarning into an error here
    result = pytester.runpytest_subprocess("--pipecheck-tier=cpu", "-p", "no:cacheprovider", "-W", "error")
    result.assert_outcomes(passed=1)
    assert "was not used at all" not in result.stdout.str()


ANCHORED_FILE = """
import os
import numpy as np
from pytest_pipecheck.perf.stats import Samples

def test_kernel(pipecheck):
    clock = float(os.environ.get("CLOCK", "1"))
    slow = float(os.environ.get("SLOW", "0"))
    rng = np.random.default_rng(int(os.environ.get("SEED", "0")))
    kernel = 60.0 * clock * (1 + slow) * np.exp(rng.normal(0, 0.02, 100))
    anchor = 50.0 * clock * np.exp(rng.normal(0, 0.01, 100))
    pipecheck.check_perf(samples=Samples.of(kernel, anchor_us=anchor, anchor={"kind": "matmul", "dtype": "bf16",
                         "m": 2048, "n": 2048, "k": 4096, "label": "bf16 matmul 2048x2048x4096"}), flops=1e9)
"""


def test_anchored_gate_across_runs(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(ANCHORED_FILE)
    base = ["--pipecheck-tier=cpu", "--pipecheck-baseline-dir=bl", "-p", "no:cacheprovider", "-v"]
    pytester.runpytest(*base, "--pipecheck-baseline-save").assert_outcomes(passed=1)
    data = json.loads(next((pytester.path / "bl").iterdir()).read_text())
    assert data["version"] == 2
    assert data["tests"]["test_anchored_gate_across_runs.py::test_kernel"]["default"]["anchor"]["definition"]["k"] == 4096

    monkeypatch.setenv("SEED", "1")
    monkeypatch.setenv("CLOCK", "1.2")  # the same code at a 20% slower clock (the Triton GEMM's false alarm)
    rerun = pytester.runpytest(*base)
    rerun.assert_outcomes(passed=1)
    rerun.stdout.fnmatch_lines(["*perf*pass*anchored to bf16 matmul 2048x2048x4096*raw +19.9%*"])

    monkeypatch.setenv("CLOCK", "0.97")
    monkeypatch.setenv("SLOW", "0.06")  # a real 6% slowdown, half hidden by a faster clock
    slow = pytester.runpytest(*base)
    slow.assert_outcomes(failed=1)
    slow.stdout.fnmatch_lines(["*perf regression in test_anchored_gate_across_runs.py::test_kernel*(+*% anchored to*"])
