"""How a kernel author tests the Hopper GEMM with pipecheck: one spec, generated ragged shapes.

    pytest reference_kernels/hopper/test_reference_hopper.py --pipecheck -v

Before any in-process launch, a module fixture waits for the kernel's run in a child process with a
timeout (``run_case``, started by this directory's conftest when the collection ended): a broken mbarrier
handshake hangs a GPU kernel forever, and it must cost a failure with the child's report, not a stuck
pytest. Without an sm_90 GPU the tests skip with the reason.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from pytest_pipecheck.model import shapes as _shapes
from reference_kernels.hopper import smoke
from reference_kernels.hopper.spec import spec

SPEC = spec()  # bf16, 128x128x64 tiles, 4 stages, 2 consumer warpgroups

# Sanitizer tools for these tests: synccheck only. Reviewed exclusion: in the batched run the Hopper
# tests under racecheck (compute-sanitizer 2025.3.1) outrun the 120 s per-test watchdog and force the
# whole racecheck batch to restart. Racecheck on this kernel is run directly, with its own timeout, by
# tests/gpu/test_hopper_gpu.py (0 hazards on the reference at 128x128x1024;
# docs/validation/2026-11-22-h200-0223.md).
pytestmark = pytest.mark.pipecheck(sanitizer="synccheck")


@pytest.fixture(scope="module")
def hopper_smoke() -> None:
    """Skip unless an sm_90 GPU, cuda-python and a child-process run of the kernel all work. The run
    (:mod:`reference_kernels.hopper.smoke`) started when the collection ended, if this directory's conftest
    started it; else it starts here."""
    problem = smoke.device_problem()  # no torch, no sm_90 GPU, no cuda-python (in that order)
    if problem is not None:
        pytest.skip(problem)
    if os.environ.get("PIPECHECK_CHILD"):
        return  # inside a sanitizer child, whose own watchdog turns a hang into a verdict
    run = smoke.take_early_run() or smoke.SmokeRun()
    failure = run.failure()
    if failure is not None:
        pytest.fail(failure)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", _shapes.generate(SPEC, level="small"), ids=str)
def test_hopper_gemm(pipecheck: Any, hopper_smoke: None, shape: Any) -> None:
    pipecheck.check_kernel(SPEC, shape)
