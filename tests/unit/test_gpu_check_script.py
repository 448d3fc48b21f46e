"""scripts/gpu-check.sh, run without a GPU: every script gets the arguments it expects.

The GPU tools and the interpreter are stand-ins on PATH that record how they were called, so the test
checks the script's dispatch only: each evidence script of scripts/gpu/ gets its output folder first,
and ladder_profile.py (which measures nothing and takes the builds to launch) runs under ncu with
build names, or is skipped with a line in steps.txt when ncu is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu-check.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                                reason="needs bash and coreutils' timeout")


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
    for script in sorted((ROOT / "scripts" / "gpu").glob("*.py")):
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
