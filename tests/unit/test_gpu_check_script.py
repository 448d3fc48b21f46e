"""scripts/gpu-check.sh, run without a GPU: every script gets the arguments it expects.

The GPU tools and the interpreter are stand-ins on PATH that record how they were called, so the test
checks the script's dispatch only: each evidence script of scripts/gpu/ gets its output folder first,
and ladder_profile.py (which measures nothing and takes the builds to launch) runs under ncu with
build names, or is skipped with a line in steps.txt when ncu is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu-check.sh"

pytestmark = [pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                                 reason="needs bash and coreutils' timeout"),
              pytest.mark.cpu_only]  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out


def _stub(bindir: Path, name: str, body: str) -> None:
    path = bindir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def _run(tmp_path: Path, *parts: str, with_ncu: bool) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    # python3 -m pip install ... succeeds; every other call prints its arguments
    _stub(bindir, "python3", 'if [ "$1" = -m ] && [ "$2" = pip ]; then exit 0; fi\necho "python3 $*"')
    _stub(bindir, "nvidia-smi", "echo stub GPU")
    if with_ncu:
        _stub(bindir, "ncu", 'echo "ncu $*"')
    # only the stand-ins and the basic tools (no real ncu or nvidia-smi from the host)
    tools = tmp_path / "tools"
    tools.mkdir()
    for tool in ("bash", "sh", "date", "mkdir", "tee", "tail", "timeout", "tar", "gzip", "basename", "dirname",
                 "git", "sort", "xargs", "sha256sum", "cut", "find", "wc", "cat", "env"):
        found = shutil.which(tool)
        if found and not (bindir / tool).exists():
            (tools / tool).symlink_to(found)
    env = {**os.environ, "PATH": f"{bindir}:{tools}", "STEP_TIMEOUT": "20"}
    out = tmp_path / "out"
    proc = subprocess.run(["bash", str(SCRIPT), str(out), *parts], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def test_ladder_profile_gets_build_names_under_ncu(tmp_path: Path) -> None:
    out = _run(tmp_path, "ladder_profile", "ladder_profile=k1_sync_tiled:2", "stage_sweep=--quick", with_ncu=True)
    calls = (out / "ladder_profile.log").read_text()  # the second call's log (the step log is per name)
    assert "scripts/gpu/ladder_profile.py k1_sync_tiled:2" in calls
    assert f"--log-file {out}/ladder_profile/ncu.csv" in calls
    assert str(out / "ladder_profile") + " " not in calls.split("ladder_profile.py", 1)[1]
    assert (out / "stage_sweep.log").read_text().strip() == f"python3 scripts/gpu/stage_sweep.py {out}/stage_sweep --quick"


def test_scripts_part_passes_each_script_its_folder_and_profiles_the_default_builds(tmp_path: Path) -> None:
    out = _run(tmp_path, "scripts", with_ncu=True)
    helpers = {"_gemm_bench", "cpu_use", "sync_probe"}  # used by the other scripts, not run on their own
    for script in sorted((ROOT / "scripts" / "gpu").glob("*.py")):
        if script.stem in helpers:
            assert not (out / f"{script.stem}.log").exists()
            continue
        log = (out / f"{script.stem}.log").read_text()
        if script.stem == "ladder_profile":
            args = log.split("ladder_profile.py", 1)[1].split()
            assert args and all(":" in a and not a.startswith("/") for a in args), log
        else:
            assert log.strip() == f"python3 scripts/gpu/{script.name} {out}/{script.stem}", log


def test_ladder_profile_without_ncu_is_a_recorded_skip(tmp_path: Path) -> None:
    out = _run(tmp_path, "ladder_profile", with_ncu=False)
    assert "ladder_profile skipped: ncu (Nsight Compute) not found" in (out / "steps.txt").read_text()
    assert not (out / "ladder_profile.log").exists()


# A stand-in for python3 in tier-profile: pip succeeds; any other call but `-m pytest` (`python3 -`, `-c`)
# is the real interpreter, with pipecheck importable; `-m pytest` records its arguments and writes the JSON
# report the real first session would: one test passed, two whose timings the shared GPU skipped.
_PYTEST_STANDIN = '''
import json, os, sys
from pytest_pipecheck.device import TIMING_ALONE
args = sys.argv[1:]
if args[:2] == ["-m", "pip"]:
    sys.exit(0)
if args[:2] != ["-m", "pytest"]:  # the script's own Python (python3 -, -c, --version): the real one
    os.execv(sys.executable, [sys.executable, *args])
with open(sys.argv[0] + ".calls", "a") as log:
    log.write(json.dumps(args) + "\\n")
report = next((a.split("=", 1)[1] for a in args if a.startswith("--pipecheck-json=")), None)
skip = f"perf not timed: {TIMING_ALONE}, and 12 pytest-xdist workers share GPU 0 (gw0, gw1)"
untimed = os.environ.get("STANDIN_UNTIMED") != "0"
results = [] if "no:xdist" in args else [
    {"nodeid": "t.py::test_ok", "check": "coverage", "verdict": "pass", "summary": "ok"}] + ([] if not untimed else [
    {"nodeid": "t.py::test_sweep[a b]", "check": "perf:stage_sweep", "verdict": "skip", "summary": skip},
    {"nodeid": "t.py::test_gate", "check": "perf", "verdict": "skip", "summary": skip},
    {"nodeid": "t.py::test_gate", "check": "perf", "verdict": "skip", "summary": skip}])
if report:
    with open(report, "w") as f:
        json.dump({"results": results}, f)
print("session", " ".join(args))
'''


def _tier_profile(tmp_path: Path, **env: str) -> tuple[Path, list[list[str]]]:
    """Run the tier-profile part with the pytest stand-in; returns its output folder and each pytest call's
    arguments."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    standin = tmp_path / "standin.py"
    standin.write_text(_PYTEST_STANDIN)
    _stub(bindir, "python3", f'exec {sys.executable} {standin} "$@"')
    _stub(bindir, "nvidia-smi", "echo stub GPU")
    out = tmp_path / "out"
    proc = subprocess.run(["bash", str(SCRIPT), str(out), "tier-profile"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}",
                                            "STEP_TIMEOUT": "60", **env})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out, [json.loads(line) for line in Path(f"{standin}.calls").read_text().splitlines()]


@pytest.mark.parametrize("rerun", ["1", "0"])
def test_tier_profile_times_alone_the_tests_the_shared_gpu_left_untimed(tmp_path: Path, rerun: str) -> None:
    out, calls = _tier_profile(tmp_path, TIMING_RERUN=rerun, PYTEST_ARGS="-n 12 --pipecheck-xdist-order=cost")
    assert "-n" in calls[0] and f"--pipecheck-json={out}/tier.json" in calls[0]
    # each untimed test once, in report order, node ids with spaces intact
    assert (out / "untimed.txt").read_text().splitlines() == ["t.py::test_sweep[a b]", "t.py::test_gate"]
    steps = (out / "steps.txt").read_text()
    if rerun == "1":
        assert len(calls) == 2 and "tier-profile-timing rc=0" in steps, steps
        second = calls[1]
        assert "-n" not in second and "-p" in second and "no:xdist" in second
        assert second[-2:] == ["t.py::test_sweep[a b]", "t.py::test_gate"], second
    else:
        assert len(calls) == 1 and "tier-profile-timing not run (TIMING_RERUN=0): 2 tests untimed" in steps, steps


def test_tier_profile_runs_no_second_session_when_every_timing_ran(tmp_path: Path) -> None:
    """The workers took the GPU alone for their timings (gpu_lease.py): nothing to time again, and no second
    session (an empty list once ran the whole tier a second time: pytest with no paths)."""
    out, calls = _tier_profile(tmp_path, STANDIN_UNTIMED="0", PYTEST_ARGS="-n 8 --pipecheck-xdist-order=cost")
    assert len(calls) == 1, calls
    assert (out / "untimed.txt").read_text() == ""
    assert "tier-profile-timing" not in (out / "steps.txt").read_text()


def test_compare_gate_part_runs_its_script_with_its_budget(tmp_path: Path) -> None:
    out = _run(tmp_path, "compare-gate", with_ncu=False)
    log = (out / "compare_gate_rates.log").read_text().strip()
    assert log == f"python3 scripts/gpu/compare_gate_rates.py {out}/compare_gate_rates --budget 330"
    assert "compare_gate_rates rc=0" in (out / "steps.txt").read_text()


def test_speed_runs_the_bundled_suite_from_cold_caches_with_and_without_the_overlap(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _stub(bindir, "python3", 'if [ "$1" = -m ] && [ "$2" = pip ]; then exit 0; fi\n'
                             'echo "python3 $* overlap=${PIPECHECK_SANITIZER_OVERLAP:-unset} cache=${TRITON_CACHE_DIR:-unset}"')
    _stub(bindir, "nvidia-smi", "echo stub GPU")
    tools = tmp_path / "tools"
    tools.mkdir()
    for tool in ("bash", "sh", "date", "mkdir", "tee", "tail", "timeout", "tar", "gzip", "basename", "dirname",
                 "git", "sort", "xargs", "sha256sum", "cut", "find", "wc", "cat", "env", "rm"):
        found = shutil.which(tool)
        if found and not (bindir / tool).exists():
            (tools / tool).symlink_to(found)
    out = tmp_path / "out"
    proc = subprocess.run(["bash", str(SCRIPT), str(out), "speed"], cwd=ROOT, timeout=60, capture_output=True,
                          text=True, env={**os.environ, "PATH": f"{bindir}:{tools}", "STEP_TIMEOUT": "20"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for ov in ("1", "0"):
        log = (out / f"reference-overlap{ov}.log").read_text()
        assert "-m pytest --pipecheck --pipecheck-tier=gpu" in log and log.split()[-3] == "reference_kernels", log
        assert f"overlap={ov} cache={out}/caches-overlap{ov}/triton" in log, log
    examples = (out / "examples-speed.log").read_text()
    assert " examples overlap=unset " in examples, examples
    steps = (out / "steps.txt").read_text()
    assert all(f"{name} rc=0" in steps for name in ("reference-overlap1", "reference-overlap0", "examples-speed"))
