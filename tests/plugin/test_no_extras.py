"""`pytest --help` and collection work with none of the optional extras importable."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

BLOCKER = textwrap.dedent(
    """
    import importlib.abc, sys

    class _Block(importlib.abc.MetaPathFinder):
        BLOCKED = ("torch", "triton", "cupy", "cuda", "numpy", "scipy", "matplotlib")
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in self.BLOCKED:
                raise ImportError(f"{name} is blocked for this test")
            return None

    sys.meta_path.insert(0, _Block())
    import pytest
    raise SystemExit(pytest.main(sys.argv[1:]))
    """
)


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    runner = tmp_path / "run_blocked.py"
    runner.write_text(BLOCKER)
    return subprocess.run([sys.executable, str(runner), *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, check=False)


def test_help_without_extras(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "--pipecheck-sanitizer" in proc.stdout


def test_collect_and_run_without_extras(tmp_path: Path) -> None:
    (tmp_path / "test_plain.py").write_text("def test_p(pipecheck):\n    assert pipecheck.seed >= 0\n")
    proc = _run(tmp_path, "--pipecheck", "-p", "no:cacheprovider", "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout
    assert "pipecheck summary" in proc.stdout
