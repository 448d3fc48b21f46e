"""What the GPU tier leaves to the CPU job: pipecheck's own tests marked ``cpu_only`` (tests/conftest.py) are
deselected under ``--pipecheck-tier=gpu`` with the reason in the header, and kept everywhere else. Collected
from this repository's own tests, on a fake GPU (tests/data/fakebin/nvidia-smi)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

ROOT = Path(__file__).resolve().parents[2]
CPU_ONLY_MODULE = "tests/plugin/test_seed.py"  # nested sessions: the same with or without a GPU
GPU_SIDE_MODULE = "tests/plugin/test_coverage_plugin.py"  # its nested sessions run on the device where there is one
HOPPER_MODULE = "tests/gpu/test_hopper_gpu.py"  # its evidence tests and cases are marked gpu_evidence
PATHS = (CPU_ONLY_MODULE, GPU_SIDE_MODULE, HOPPER_MODULE)


@pytest.fixture(scope="module")
def collect() -> Callable[..., tuple[set[str], str]]:
    """``collect(tier, **env)``: the node ids one ``--co`` session collects from :data:`PATHS` on the fake GPU,
    and its output. A session costs seconds (it imports torch and Triton); each (tier, env) runs once for
    the tests of this module that ask for it."""
    sessions: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[set[str], str]] = {}

    def run(tier: str, **env: str) -> tuple[set[str], str]:
        key = (tier, tuple(sorted(env.items())))
        if key not in sessions:
            sessions[key] = _collect(tier, **env)
        return sessions[key]

    return run


def _collect(tier: str, **env: str) -> tuple[set[str], str]:
    run_env = dict(os.environ, PATH=f"{ROOT / 'tests' / 'data' / 'fakebin'}{os.pathsep}{os.environ['PATH']}",
                   FAKE_NVIDIA_SMI_GPUS="NVIDIA H100 80GB HBM3,9.0", **env)
    for name in ("PIPECHECK_NO_GPU", "CUDA_VISIBLE_DEVICES", "PIPECHECK_GPU_TIER_ALL", "PIPECHECK_GPU_EVIDENCE"):
        if name not in env:
            run_env.pop(name, None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", "--pipecheck",
                           f"--pipecheck-tier={tier}", "--pipecheck-sanitizer=none", *PATHS],
                          cwd=ROOT, env=run_env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {line.strip() for line in proc.stdout.splitlines() if "::" in line}, proc.stdout


def _modules(ids: set[str]) -> set[str]:
    """Which of the two modules whose selection the first tests check have a test collected."""
    return {i.split("::", 1)[0] for i in ids} & {CPU_ONLY_MODULE, GPU_SIDE_MODULE}


def test_the_gpu_tier_leaves_the_cpu_only_tests_out_and_says_why(collect: Callable[..., Any]) -> None:
    ids, out = collect("gpu")
    assert _modules(ids) == {GPU_SIDE_MODULE}, out[-3000:]
    assert "cpu_only test(s) deselected under --pipecheck-tier=gpu: each tests pipecheck's own machinery" in out


@pytest.mark.parametrize(("tier", "env"), [("cpu", {}), ("gpu", {"PIPECHECK_GPU_TIER_ALL": "1"})])
def test_every_other_run_keeps_them(collect: Callable[..., Any], tier: str, env: dict[str, str]) -> None:
    ids, out = collect(tier, **env)
    assert _modules(ids) == {CPU_ONLY_MODULE, GPU_SIDE_MODULE}, out[-3000:]
    assert "deselected" not in out


EVIDENCE = "tests/gpu/test_hopper_gpu.py::test_racecheck_on_the_early_release_mutant"
KEPT = "tests/gpu/test_hopper_gpu.py::test_mutant_is_caught_by_its_check[hopper_full_wait_wrong_parity]"
EVIDENCE_CASE = "tests/gpu/test_hopper_gpu.py::test_mutant_is_caught_by_its_check[hopper_expect_tx_bytes_mismatch]"


@pytest.mark.parametrize(("tier", "env", "kept"), [
    ("gpu", {}, False),
    ("gpu", {"PIPECHECK_GPU_EVIDENCE": "1"}, True),
    ("gpu", {"PIPECHECK_GPU_TIER_ALL": "1"}, True),
    ("cpu", {}, True),
])
def test_the_per_merge_gpu_tier_leaves_the_evidence_tests_out_and_says_why(collect: Callable[..., Any], tier: str,
                                                                            env: dict[str, str], kept: bool) -> None:
    """A test (or one case of a parametrized test) marked ``gpu_evidence`` is deselected from the GPU tier,
    with the reason at the end, unless asked for; the other cases of the same test stay."""
    ids, out = collect(tier, **env)
    assert KEPT in ids, out[-3000:]
    assert (EVIDENCE in ids) is kept and (EVIDENCE_CASE in ids) is kept, out[-3000:]
    said = "2 gpu_evidence test(s) deselected under --pipecheck-tier=gpu: each proves one GPU-side claim"
    assert (said in out) is not kept, out[-3000:]
