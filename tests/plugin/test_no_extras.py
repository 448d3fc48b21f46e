"""`pytest --help` and collection work with none of the optional extras importable."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

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
    """pytest with the extras blocked and only pipecheck and its core dependency loaded: other plugins
    of the machine (jaxtyping, for one, imports NumPy when it loads) are not what is tested."""
    runner = tmp_path / "run_blocked.py"
    runner.write_text(BLOCKER)
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    plugins = ["-p", "pytest_benchmark.plugin", "-p", "pytest_pipecheck.plugin"]
    return subprocess.run([sys.executable, str(runner), *plugins, *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, check=False, env=env)


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
