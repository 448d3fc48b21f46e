"""``python -m pytest_pipecheck occupancy|resources`` run as a user would, through a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_pipecheck import toolkit
from pytest_pipecheck.occupancy import occupancy

KERNELS = Path(__file__).parent.parent / "data" / "ptxas" / "kernels.cu"


def pipecheck(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest_pipecheck", *args], capture_output=True, text=True,
                          timeout=300)


def test_occupancy_json_matches_the_library() -> None:
    proc = pipecheck("occupancy", "--arch", "sm_86,9.0", "--threads", "256", "--regs", "64", "--smem", "51200",
                     "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    by_arch = {r["arch"]: r for r in doc["results"]}
    assert set(by_arch) == {"sm_86", "sm_90"}
    for arch, row in by_arch.items():
        expected = occupancy(arch, 256, 64, 0, 51200)
        assert row["blocks_per_sm"] == expected.blocks_per_sm
        assert row["limiters"] == sorted(expected.limiters, key=["warps", "registers", "shared_memory",
                                                                 "blocks", "barriers"].index)
    assert by_arch["sm_86"]["blocks_per_sm"] == 1 and by_arch["sm_86"]["limiters"] == ["shared_memory"]


def test_occupancy_no_opt_in_and_floor_exit_status() -> None:
    proc = pipecheck("occupancy", "--arch", "sm_86", "--threads", "256", "--regs", "64", "--smem", "51200",
                     "--no-opt-in", "--json")
    assert json.loads(proc.stdout)["results"][0]["blocks_per_sm"] == 0
    proc = pipecheck("occupancy", "--arch", "sm_90", "--threads", "128", "--regs", "196", "--smem", "131072",
                     "--min-blocks", "2")
    assert proc.returncode == 1
    assert "needs <= 113 KB for 2 blocks/SM on sm_90; uses 128 KB" in proc.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--arch", "sm_91", "--threads", "256", "--regs", "64"], "'sm_91' is not a known architecture"),
        (["--arch", "sm_90", "--threads", "1025", "--regs", "64"], "--threads=1025 must be <= 1024"),
        (["--arch", "sm_90", "--threads", "256", "--regs", "64", "--smem", "-1"], "--smem=-1 must be >= 0"),
        (["--arch", "sm_90", "--threads", "256", "--regs", "300"], "--regs=300 must be <= 255"),
        (["--arch", "sm_90", "--threads", "many", "--regs", "64"], "invalid int value"),
    ],
)
def test_occupancy_bad_input_is_one_line(args: list[str], needle: str) -> None:
    proc = pipecheck("occupancy", *args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pipecheck: error:") and needle in lines[0]


def test_unknown_and_missing_subcommands() -> None:
    proc = pipecheck("frobnicate")
    assert proc.returncode == 2 and "unknown subcommand 'frobnicate'" in proc.stderr
    proc = pipecheck("baseline", "list")
    # pre-registered for another module; until it exists the dispatcher says so plainly
    if "is not available" in proc.stderr:
        assert proc.returncode == 2 and "pytest_pipecheck.cli.baseline" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_main_callable_for_console_script(capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_pipecheck.__main__ import main

    assert main(["occupancy", "--arch", "8.0", "--threads", "128", "--regs", "32", "--smem", "82945",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["results"][0]["blocks_per_sm"] == 1


needs_nvcc = pytest.mark.skipif(toolkit.find_tool("nvcc") is None, reason="nvcc (CUDA toolkit) not found")


@needs_nvcc
def test_resources_json() -> None:
    proc = pipecheck("resources", str(KERNELS), "--arch", "sm_80,sm_90", "--threads", "256", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    rows = {(r["kernel"], r["arch"]): r for r in doc["kernels"]}
    sc = rows[("stage_copy", "sm_90")]
    assert sc["static_smem"] == 8192 and sc["barriers"] == 1
    assert sc["blocks_per_sm"] == occupancy("sm_90", 256, sc["registers"], 8192).blocks_per_sm
    assert rows[("spill::heavy", "sm_80")]["spill_stores"] > 0


@needs_nvcc
def test_resources_bad_source_shows_compiler_message(tmp_path: Path) -> None:
    bad = tmp_path / "bad.cu"
    bad.write_text("__global__ void k(float* x) { x[0] = not_declared_anywhere; }\n")
    proc = pipecheck("resources", str(bad), "--arch", "sm_80")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    first = proc.stderr.splitlines()[0]
    assert first.startswith("pipecheck: error: nvcc failed to compile") and "sm_80" in first
    assert "not_declared_anywhere" in first


def test_resources_missing_file_and_bad_arch() -> None:
    proc = pipecheck("resources", "/no/such.cu", "--arch", "sm_80")
    assert proc.returncode == 2 and proc.stderr.strip() == "pipecheck: error: source '/no/such.cu' does not exist"
    proc = pipecheck("resources", str(KERNELS), "--arch", "sm_80,hopper")
    assert proc.returncode == 2 and "'hopper'" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
