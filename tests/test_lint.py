"""The package is lint-clean (ruff) and type-clean (mypy); run as part of the test command."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str) -> list[str]:
    """``python -m NAME`` of the interpreter running the tests: found as a module of that interpreter, not on
    PATH, so a virtual environment that is not activated still runs it (where PATH had no ``ruff``, the test
    used to skip although the environment had it)."""
    if importlib.util.find_spec(name) is None:
        pytest.skip(f"{name} is not installed in {sys.executable} (pip install -e '.[dev]' installs it)")
    return [sys.executable, "-m", name]


def test_ruff() -> None:
    proc = subprocess.run([*_tool("ruff"), "check", "."], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy() -> None:
    proc = subprocess.run([*_tool("mypy")], cwd=ROOT, capture_output=True, text=True, check=False, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
