"""How a kernel author tests the Hopper GEMM with pipecheck: one spec, generated ragged shapes.

    pytest reference_kernels/hopper/test_reference_hopper.py --pipecheck -v

Before any in-process launch, a module fixture runs the kernel once in a child process with a
timeout (``run_case``): a broken mbarrier handshake hangs a GPU kernel forever, and it must cost a
skip with the child's report, not a stuck pytest. Without an sm_90 GPU the tests skip with the reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_pipecheck.model import shapes as _shapes
from reference_kernels.hopper.spec import spec

SPEC = spec()  # bf16, 128x128x64 tiles, 4 stages, 2 consumer warpgroups
ROOT = Path(__file__).resolve().parents[2]

# Sanitizer tools for these tests: synccheck only. Reviewed exclusion: in the batched run the Hopper
# tests under racecheck (compute-sanitizer 2025.3.1) outrun the 120 s per-test watchdog and force the
# whole racecheck batch to restart. Racecheck on this kernel is run directly, with its own timeout, by
# tests/gpu/test_hopper_gpu.py (0 hazards on the reference at 128x128x1024;
# docs/validation/2026-11-22-h200-0223.md).
pytestmark = pytest.mark.pipecheck(sanitizer="synccheck")


@pytest.fixture(scope="module")
def hopper_smoke() -> None:
    """Skip unless an sm_90 GPU, cuda-python and a child-process run of the kernel all work."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU (H100/H200)")
    pytest.importorskip("cuda.bindings.driver", reason="cuda-python is needed for cuTensorMapEncodeTiled")
    if os.environ.get("PIPECHECK_CHILD"):
        return  # inside a sanitizer child, whose own watchdog turns a hang into a verdict
    cmd = [sys.executable, "-m", "reference_kernels.hopper.run_case", "--shapes", "129x257x72"]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=90,
                              env=dict(os.environ, PYTHONUNBUFFERED="1"))
    except subprocess.TimeoutExpired:
        pytest.fail(f"the Hopper GEMM hung in a child process (90 s): {' '.join(cmd)}")
    if proc.returncode != 0:
        pytest.fail(f"the Hopper GEMM failed in a child process (exit {proc.returncode}):\n"
                    f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


@pytest.mark.gpu
@pytest.mark.parametrize("shape", _shapes.generate(SPEC, level="small"), ids=str)
def test_hopper_gemm(pipecheck: Any, hopper_smoke: None, shape: Any) -> None:
    pipecheck.check_kernel(SPEC, shape)
