"""Shared by the GPU tests that run pipecheck on target files in a pytester subprocess: a conftest that
prints every check result of the inner run as one line, and the reader of those lines (the plugin tests'
own, from tests/plugin/_sanitizer_fake.py); the skip without compute-sanitizer, and the inner run's output,
kept as GPU evidence where PIPECHECK_EVIDENCE_DIR is set."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from plugin._sanitizer_fake import RESULT_PRINTER
from plugin._sanitizer_fake import _results as results

__all__ = ["DUMPER", "keep_output", "needs_compute_sanitizer", "results"]

DUMPER = "\nimport pytest\n" + RESULT_PRINTER


def needs_compute_sanitizer(*modules: str) -> None:
    """Skips the calling test where one of ``modules`` cannot be imported (pytest.importorskip, in order) or
    compute-sanitizer is not found."""
    for module in modules:
        pytest.importorskip(module)
    from pytest_pipecheck.sanitizer.locate import find_compute_sanitizer

    if find_compute_sanitizer() is None:
        pytest.skip("compute-sanitizer not found")


def keep_output(result: pytest.RunResult, evidence: str, copies: dict[str, Path] | None = None) -> str:
    """The inner run's stdout and stderr as one text, kept as GPU evidence where PIPECHECK_EVIDENCE_DIR is set:
    written there as the file ``evidence``, with each file of ``copies`` ({name there: file}) copied beside it."""
    text = result.stdout.str() + "\n" + result.stderr.str()
    folder = os.environ.get("PIPECHECK_EVIDENCE_DIR")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / evidence).write_text(text)
        for name, path in (copies or {}).items():
            shutil.copy(path, Path(folder) / name)
    return text
