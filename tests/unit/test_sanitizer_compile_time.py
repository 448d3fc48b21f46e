"""A Triton compile in a sanitizer child is not the test's time: the runner end to end, with the fake
compute-sanitizer (tests/data/sanitizer/fake_compute_sanitizer.py) and an injected clock.

The child is a stand-in for a sanitizer child pytest: it prints the marker lines ChildPlugin prints (a test's
BEGIN and END, and COMPILE_BEGIN/COMPILE_END around what Triton compiles) as each test's plan says, and the
canary's when asked. The clock moves only when the runner takes a compile line, by the seconds the plan gives
the compile and the test's own code after it, so no verdict depends on how fast the machine is.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from pytest_pipecheck.results import Verdict
from pytest_pipecheck.sanitizer.child_command import BatchSpec, canary_nodeid
from pytest_pipecheck.sanitizer.parse import BEGIN, COMPILE_BEGIN, COMPILE_END, END
from pytest_pipecheck.sanitizer.runner import SanitizerRunner

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

FAKE = Path(__file__).resolve().parents[1] / "data" / "sanitizer" / "fake_compute_sanitizer.py"

STANDIN = f'''
import json, os, sys, time

plan = json.loads(os.environ["STANDIN_PLAN"])

def say(line):
    print(line, flush=True)

for nodeid in [a for a in sys.argv[1:] if not a.startswith("-")]:
    say({BEGIN!r} + nodeid)
    steps = plan.get(nodeid, {{}}).get("steps", [])
    for step in steps:
        if step == "compile":
            say({COMPILE_BEGIN!r} + json.dumps({{"test": nodeid, "kernel": "scale_rows", "step": "compile"}}))
        elif step == "compiled":
            say({COMPILE_END!r} + json.dumps({{"test": nodeid}}))
        elif step == "hang":
            time.sleep(3600)
    say({END!r} + nodeid + " passed")
if "--pipecheck-child-canary" in sys.argv:
    canary = {canary_nodeid("racecheck")!r}
    say({BEGIN!r} + canary)
    say({END!r} + canary + " passed")
'''

# per test: what its child does, the seconds its compile takes and its own seconds after the compile
PLAN = {
    "t::autotuned": {"steps": ["compile", "compiled"], "compile": 60.0, "own": 1.5},
    "t::hangs": {"steps": ["compile", "compiled", "hang"], "compile": 60.0, "own": 2.5},
    "t::compiler_hangs": {"steps": ["compile", "hang"], "compile": 300.5, "own": 0.0},
    "t::after": {"steps": [], "compile": 0.0, "own": 0.0},
}


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_compiles_are_not_the_tests_time_but_a_compiler_that_hangs_is_caught(tmp_path: Path) -> None:
    wrapper = tmp_path / "compute-sanitizer"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE} \"$@\"\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    standin = tmp_path / "standin.py"
    standin.write_text(STANDIN)
    clock = FakeClock()

    def on_line(line: str) -> None:  # the seconds the child spends until its next line
        for marker, key in ((COMPILE_BEGIN, "compile"), (COMPILE_END, "own")):
            at = line.find(marker)
            if at >= 0:
                clock.now += PLAN[json.loads(line[at + len(marker):])["test"]][key]

    env = dict(os.environ, STANDIN_PLAN=json.dumps(PLAN))
    env.pop("FAKE_SANITIZER_PLAN", None)
    env.pop("FAKE_SANITIZER_LOG", None)
    runner = SanitizerRunner(str(wrapper), cwd=str(tmp_path), child_args=[sys.executable, str(standin)], env=env,
                             timeouts=dict.fromkeys(PLAN, 2.0), default_timeout=2.0, use_xml=False, clock=clock,
                             compile_cap=300.0, on_line=on_line)
    out = runner.run(BatchSpec("racecheck", tuple(PLAN)))
    got = {n: (o.verdict, o.summary) for n, o in out.items()}
    assert got == {
        "t::autotuned": (Verdict.PASS, "0 hazards"),  # 60 s compiling, 1.5 s of its own: within its 2 s
        "t::hangs": (Verdict.FAIL, "hang: killed by the watchdog"),  # 2.5 s of its own after compiling
        "t::compiler_hangs": (Verdict.FAIL, "compile hang: killed by the watchdog"),
        "t::after": (Verdict.PASS, "0 hazards"),
    }, {n: (o.verdict, o.summary, o.reason) for n, o in out.items()}
    assert out["t::autotuned"].compile_seconds == pytest.approx(60.0)
    assert out["t::autotuned"].seconds == pytest.approx(61.5)
    assert "of the test's own time (its 60.0 s of Triton compiles not counted)" in out["t::hangs"].reason
    assert out["t::compiler_hangs"].reason.startswith("Triton's compile of scale_rows did not end within 300 s")
    assert out["t::autotuned"].details()["compile_seconds"] == 60.0


def test_the_runner_tells_each_test_a_child_ended(tmp_path: Path) -> None:
    """``on_ended`` hears of each test once its child began the next one (or the canary, or exited): what the
    parent waits for before it runs that test beside the children (sanitizer/held_reports.py)."""
    wrapper = tmp_path / "compute-sanitizer"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE} \"$@\"\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    standin = tmp_path / "standin.py"
    standin.write_text(STANDIN)
    plan = {"t::a": {}, "t::b": {}, "t::c": {}}
    env = dict(os.environ, STANDIN_PLAN=json.dumps(plan))
    env.pop("FAKE_SANITIZER_PLAN", None)
    env.pop("FAKE_SANITIZER_LOG", None)
    runner = SanitizerRunner(str(wrapper), cwd=str(tmp_path), child_args=[sys.executable, str(standin)], env=env,
                             timeouts=dict.fromkeys(plan, 60.0), default_timeout=60.0, use_xml=False)
    ended: list[str] = []
    runner.on_ended = ended.append
    out = runner.run(BatchSpec("racecheck", tuple(plan)))
    assert {n: o.verdict for n, o in out.items()} == dict.fromkeys(plan, Verdict.PASS)
    assert ended == ["t::a", "t::b", "t::c"]
