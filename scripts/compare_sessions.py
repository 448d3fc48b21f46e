"""What the compare-mode scripts of scripts/gpu share (compare_gate_rates.py, compare_submodule_bump.py): git in
the throwaway repositories they build, one pytest session cut short at its deadline, and the check that those
sessions load this checkout's pytest_pipecheck."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def git(repo: Path, *args: str, who: str) -> str:
    """``git ARGS`` in ``repo``, authored and committed by ``who`` (``who@localhost``); its output, stripped."""
    env = {**os.environ, "GIT_AUTHOR_NAME": who, "GIT_AUTHOR_EMAIL": f"{who}@localhost", "GIT_COMMITTER_NAME": who,
           "GIT_COMMITTER_EMAIL": f"{who}@localhost"}
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True, env=env).stdout.strip()


def run_session(cmd: list[str], repo: Path, env: dict[str, str], timeout: float, keep: int) -> tuple[int | str, str]:
    """Run ``cmd`` in ``repo``: its exit status (``"timeout"`` when it ran past ``timeout`` seconds) and the last
    ``keep`` characters of its output."""
    try:
        proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)
        return proc.returncode, (proc.stdout + proc.stderr)[-keep:]
    except subprocess.TimeoutExpired as exc:
        return "timeout", str(exc.stdout or "")[-keep:]


def plugin_elsewhere(script: str) -> bool:
    """Whether the pytest_pipecheck this process imports is not this checkout's (the sessions would load another
    plugin); says so on stderr, as ``script``."""
    import pytest_pipecheck

    if Path(pytest_pipecheck.__file__).resolve().is_relative_to(ROOT):
        return False
    print(f"{script}: the installed pytest_pipecheck ({pytest_pipecheck.__file__}) is not this "
          f"checkout's ({ROOT}); install it with `python3 -m pip install -e .` (scripts/gpu-check.sh does)",
          file=sys.stderr)
    return True
