"""``pytest --pipecheck examples`` without the libraries installed: each example skips with its reason.

The example folders are named like the libraries (``examples/liger_kernel``, ``examples/fla``,
``examples/flag_gems``); under pytest's rootdir imports such a folder is a namespace package of that
name, so ``importorskip("liger_kernel")`` found the folder, passed, and the next import failed
collection with ModuleNotFoundError. The examples ask for a module only the real package has."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_examples_skip_with_their_reasons_where_the_libraries_are_missing() -> None:
    proc = subprocess.run([sys.executable, "-m", "pytest", "--pipecheck", "-p", "no:cacheprovider", "-q", "-rs",
                           "examples"], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    out = proc.stdout + proc.stderr
    # a missing library is a skip with its reason (or, installed, its tests run): never a collection error
    assert proc.returncode == 0 and "ModuleNotFoundError" not in out, out[-3000:]
