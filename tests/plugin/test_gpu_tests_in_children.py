"""Helpers of the GPU test modules that act differently inside a sanitizer child, run in a real child: the fake
compute-sanitizer (tests/data/sanitizer/fake_compute_sanitizer.py) starts the real ``pytest --pipecheck-child``,
and each process says which it was by the role pipecheck decoded from its command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ._sanitizer_fake import _fake, _setup

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out (stand-ins)

ROOT = Path(__file__).resolve().parents[2]


def test_a_hopper_gpu_test_makes_the_reference_run_in_the_parent_only(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """tests/gpu/test_hopper_gpu.py: a test that needs the reference's child run makes it where its process has
    not (xdist sent the reference test to another worker), but not in a sanitizer child, where the tool would
    follow that run (a 4096^3 GEMM under racecheck ran past the watchdog on an H100)."""
    _fake(tmp_path, monkeypatch, {})
    _setup(pytester)
    seen = tmp_path / "seen"
    seen.mkdir()
    pytester.makepyfile(test_needs_reference=f'''
import json
import sys

sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / "tests" / "gpu")!r}]
import test_hopper_gpu as hopper

from pytest_pipecheck import state


def test_needs_reference(pipecheck, request):
    made = []

    def reference_run(variant):  # stands in for the GPU run of run_case
        made.append(variant)
        hopper._REFERENCE_OK[variant] = True
        return {{}}

    hopper._reference_run = reference_run
    passed = hopper._reference_passed("s4_c2_n128")
    who = "child" if state.role(request.config).sanitizer else "parent"
    with open({str(seen)!r} + "/" + who, "w") as fh:
        json.dump({{"made": made, "passed": passed}}, fh)
''')
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=racecheck", "-p", "no:cacheprovider",
                                           timeout=600)
    result.assert_outcomes(passed=1)
    assert json.loads((seen / "parent").read_text()) == {"made": ["s4_c2_n128"], "passed": True}
    assert json.loads((seen / "child").read_text()) == {"made": [], "passed": False}
