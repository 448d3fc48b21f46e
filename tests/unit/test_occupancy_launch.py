"""docs/verdicts.md item 9: a kernel that cannot launch (0 blocks/SM) never passes, and a floor is at least 1.

Before, ``min_blocks=0`` (marker, ini, option, ``check_occupancy`` or the CLI's ``--min-blocks``) passed
a configuration with 0 blocks/SM on every architecture: a kernel that cannot launch anywhere.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pytest_pipecheck.checks import occupancy_check
from pytest_pipecheck.checks.occupancy_check import _verdict
from pytest_pipecheck.config import ConfigError, PipecheckConfig, apply_marker, resolve
from pytest_pipecheck.device import TierInfo
from pytest_pipecheck.fixture import Pipecheck
from pytest_pipecheck.occupancy import occupancy
from pytest_pipecheck.results import PipecheckError, PipecheckFailure, Verdict

# 256 threads x 64 registers with 50 KB of dynamic shared memory and no opt-in cannot launch on sm_86
# (over the 48 KB per-block limit): 0 blocks/SM, as cuda_occupancy.h computes
DEAD = {"threads": 256, "registers": 64, "dynamic_smem": 51200, "opt_in": False}


@pytest.fixture
def pc() -> Pipecheck:
    return Pipecheck("tests/unit/test_occupancy_launch.py::t", PipecheckConfig(), TierInfo("cpu", None, "unit test"), 1)


def test_the_configuration_cannot_launch():
    assert occupancy("sm_86", 256, 64, 0, 51200, opt_in=False).blocks_per_sm == 0


@pytest.mark.parametrize("floor", [0, -1])
def test_check_occupancy_rejects_a_floor_below_one(pc, floor):
    with pytest.raises(PipecheckError, match=rf"check_occupancy\(min_blocks={floor}\) must be >= 1 .*cannot launch"):
        occupancy_check.check_occupancy(pc, arch="sm_86", min_blocks=floor, **DEAD)
    assert pc.results == []


@pytest.mark.parametrize("floor", [True, 1.5, "2"])
def test_check_occupancy_rejects_a_non_integer_floor(pc, floor):
    with pytest.raises(PipecheckError, match="must be an integer >= 1"):
        occupancy_check.check_occupancy(pc, arch="sm_86", min_blocks=floor, **DEAD)


def test_a_kernel_that_cannot_launch_fails_at_the_default_floor(pc):
    with pytest.raises(PipecheckFailure) as info:
        occupancy_check.check_occupancy(pc, arch="sm_86", kernel="too_big", **DEAD)
    msg = str(info.value)
    assert "kernel 'too_big' is below the floor of 1 blocks/SM on sm_86 (cannot launch at all on sm_86" in msg
    assert "<-- cannot launch" in msg
    assert pc.results[-1].verdict is Verdict.FAIL


def test_zero_blocks_fails_even_if_a_floor_of_zero_slipped_through(pc):
    # the verdict itself does not trust the floor: 0 blocks/SM is a launch failure
    rows = [occupancy("sm_86", 256, 64, 0, 51200, opt_in=False), occupancy("sm_90", 256, 64, 0, 51200)]
    with pytest.raises(PipecheckFailure, match="cannot launch at all on sm_86"):
        _verdict(pc, rows, 0, "k", {})
    assert pc.results[-1].details["below_floor"] == ["sm_86"]


@pytest.mark.parametrize("source", ["marker", "ini", "command line"])
def test_a_configured_floor_of_zero_is_rejected_naming_its_source(source):
    if source == "marker":
        with pytest.raises(ConfigError, match=r"`min_blocks=0` from the pipecheck marker on t\.py::t must be >= 1"):
            apply_marker(PipecheckConfig(), {"min_blocks": 0}, "t.py::t")
    elif source == "ini":
        with pytest.raises(ConfigError, match=r"`pipecheck_min_blocks = 0` from the ini file \(tox.ini\) must be >= 1"):
            resolve({"min_blocks": "0"}, {}, ini_file="tox.ini")
    else:
        with pytest.raises(ConfigError, match="`--pipecheck-min-blocks=0` from the command line must be >= 1"):
            resolve({}, {"min_blocks": "0"})


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest_pipecheck", "occupancy", *args], capture_output=True,
                          text=True, timeout=120)


DEAD_ARGS = ("--arch", "sm_86", "--threads", "256", "--regs", "64", "--smem", "51200", "--no-opt-in")


def test_cli_rejects_min_blocks_zero():
    proc = _cli(*DEAD_ARGS, "--min-blocks", "0")
    assert proc.returncode == 2 and "--min-blocks=0 must be >= 1" in proc.stderr


def test_cli_fails_a_configuration_that_cannot_launch_without_a_floor():
    proc = _cli(*DEAD_ARGS, "--json")
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["cannot_launch"] == ["sm_86"] and doc["failed"] == ["sm_86"]
    proc = _cli(*DEAD_ARGS)
    assert proc.returncode == 1 and "cannot launch (0 blocks/SM) on sm_86" in proc.stdout


def test_cli_launchable_configuration_without_floor_still_exits_zero():
    proc = _cli("--arch", "sm_90", "--threads", "256", "--regs", "64", "--smem", "51200")
    assert proc.returncode == 0, proc.stderr
