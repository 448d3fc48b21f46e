"""Helpers for the pytester runs against the fake compute-sanitizer
(tests/data/sanitizer/fake_compute_sanitizer.py): install it, make the run look like the GPU tier,
read each check's verdict back from the output."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "sanitizer"

#: for a test module of a pytester run: ``wait_for(path, seconds=None)``, the handshake by which one process waits
#: for a file another writes. Without ``seconds`` it waits until the file exists (a run where it never does is ended
#: by its own time limit); with it, at most that long, for the tests that must go on when it never comes (a
#: bound that only a missing behaviour reaches, never a speed the assertion depends on)
WAIT_FOR = '''
import os
import time

def wait_for(path, seconds=None):
    """Until ``path`` exists, or at most ``seconds``; whether it exists."""
    end = None if seconds is None else time.monotonic() + seconds
    while not os.path.exists(path) and (end is None or time.monotonic() < end):
        time.sleep(0.05)
    return os.path.exists(path)
'''

#: for a conftest of a pytester run (which imports pytest): a hook that prints every check result of the inner run
#: as one line, ``RESULT nodeid check verdict summary``, for :func:`_results` to read back
RESULT_PRINTER = '''
@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report):
    # print every check result so the test can assert on it
    if report.when == "teardown" or not getattr(report, "pipecheck_results", None):
        return
    for r in report.pipecheck_results:
        print(f"\\nRESULT {report.nodeid} {r['check']} {r['verdict']} {r['summary']}")
'''

#: a str.format template (``fake_gpu``): a conftest that makes the run look like the GPU tier (with a fake H100
#: where ``fake_gpu``) and prints the check results (RESULT_PRINTER, its braces doubled for the template)
GPU_CONFTEST = '''
import pytest
import pytest_pipecheck.device as _device
from pytest_pipecheck.device import DeviceInfo

if {fake_gpu}:
    def _fake_device():
        return DeviceInfo(0, "Fake H100", "9.0", 132, 81559, "580.00", "GPU-fake-0000"), ""
    _device.detect_device = _fake_device

try:
    import pytest_pipecheck.report.terminal  # noqa: F401
except ImportError:  # the summary module is not there yet: a stub keeps the run going
    import sys, types
    stub = types.ModuleType("pytest_pipecheck.report.terminal")
    stub.write_summary = lambda *a, **k: None
    sys.modules["pytest_pipecheck.report.terminal"] = stub
''' + RESULT_PRINTER.replace("{", "{{").replace("}", "}}")


def _fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plan: dict[str, object]) -> Path:
    """Install the fake sanitizer behind a wrapper and return the log file of its invocations."""
    wrapper = tmp_path / "bin" / "compute-sanitizer"
    wrapper.parent.mkdir()
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {DATA / 'fake_compute_sanitizer.py'} \"$@\"\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "fake.log"
    monkeypatch.setenv("PIPECHECK_COMPUTE_SANITIZER", str(wrapper))
    monkeypatch.setenv("FAKE_SANITIZER_PLAN", json.dumps(plan))
    monkeypatch.setenv("FAKE_SANITIZER_LOG", str(log))
    monkeypatch.delenv("PIPECHECK_NO_GPU", raising=False)
    # one child per tool unless a test asks for more: these tests count and inspect the children
    monkeypatch.setenv("PYTEST_ADDOPTS", f"{os.environ.get('PYTEST_ADDOPTS', '')} --pipecheck-sanitizer-jobs=1".strip())
    return log


def _results(stdout: str) -> dict[tuple[str, str], tuple[str, str]]:
    """{(test name, check): (verdict, summary)} from the RESULT lines (RESULT_PRINTER's) of the inner run's output."""
    out: dict[tuple[str, str], tuple[str, str]] = {}
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            _, nodeid, check, verdict, summary = line.split(" ", 4)
            out[(nodeid.rsplit("::", 1)[-1], check)] = (verdict, summary)
    return out


def _setup(pytester: pytest.Pytester, fake_gpu: bool = True) -> None:
    pytester.makeconftest(GPU_CONFTEST.format(fake_gpu=fake_gpu))


def noop_tests(*names: str, timeouts: dict[str, float] | None = None) -> str:
    """A test module for pytester: one empty test per name (each asks for the pipecheck fixture), in
    order; a name in ``timeouts`` carries ``@pytest.mark.pipecheck(sanitizer_timeout=...)``."""
    timeouts = timeouts or {}
    blocks = []
    for name in names:
        mark = f"@pytest.mark.pipecheck(sanitizer_timeout={timeouts[name]})\n" if name in timeouts else ""
        blocks.append(f"{mark}def {name}(pipecheck):\n    pass\n")
    return "import pytest\n\n\n" + "\n\n".join(blocks)
