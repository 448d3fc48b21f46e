"""scripts/gpu/suite_speed.py and sanitizer_compile_profile.py without a GPU: what they read from pipecheck's JSON
report and what they write, including the comparison of verdicts between runs that their notes rest on."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / "gpu" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _report(path: Path, verdicts: dict[tuple[str, str], str], seconds: float = 2.0) -> Path:
    path.write_text(json.dumps({"ok": True, "tests": [{"nodeid": n} for n, _ in verdicts],
                                "results": [{"nodeid": n, "check": c, "verdict": v,
                                             "details": {"test_seconds": seconds, "compile_seconds": seconds / 2,
                                                         "child_wall_s": 9.5}}
                                            for (n, c), v in verdicts.items()]}))
    return path


def test_suite_speed_says_whether_the_runs_of_a_suite_reached_the_same_verdicts(tmp_path: Path) -> None:
    script = _load("suite_speed")
    same = {("t.py::a", "sanitizer:racecheck"): "pass", ("t.py::b", "coverage"): "fail"}
    changed = dict(same)
    changed[("t.py::b", "coverage")] = "pass"  # a verdict that moved must be named, never averaged away
    runs = []
    for jobs, verdicts in (("4", same), ("auto", same), ("8", changed)):
        got, ok = script._verdicts(_report(tmp_path / f"r{jobs}.json", verdicts))
        runs.append({"suite": "reference_kernels", "jobs": jobs, "overlap": "0", "wall_s": 1.0, "rc": 0,
                     "children_done_s": [0.5], "pytest": "2 passed", "verdicts": got, "ok": ok})
    runs.append({"suite": "examples", "jobs": "auto", "overlap": "0", "left_out": "over the budget"})
    out = tmp_path / "out"
    out.mkdir()
    script._write(out, "GPU", runs, ["log"])
    doc = json.loads((out / "suite_speed.json").read_text())
    assert doc["same_verdicts"]["reference_kernels"].startswith("1 differences"), doc["same_verdicts"]
    assert "t.py::b|coverage" in doc["same_verdicts"]["reference_kernels"]
    table = (out / "suite_speed.md").read_text()
    assert "| reference_kernels | default | auto | 0 | 1.0 |" in table and "left out: over the budget" in table
    assert gzip.open(out / "logs.txt.gz", "rt").read() == "log"
    script._write(out, "GPU", runs[:2], [])
    assert json.loads((out / "suite_speed.json").read_text())["same_verdicts"] == {
        "reference_kernels": "2 shared (test, check) verdicts, identical in all 2 runs"}
    # a run with one more tool: its extra verdicts are counted apart, the shared ones compared
    more = {**same, ("t.py::a", "sanitizer:memcheck"): "pass"}
    got, ok = script._verdicts(_report(tmp_path / "more.json", more))
    script._write(out, "GPU", [runs[0], {**runs[0], "tools": "racecheck,synccheck,memcheck", "verdicts": got}], [])
    assert json.loads((out / "suite_speed.json").read_text())["same_verdicts"] == {
        "reference_kernels": "2 shared (test, check) verdicts, identical in all 2 runs; verdicts in one run only: "
                             "{'4:0:racecheck,synccheck,memcheck': 1}"}


def test_suite_speed_reads_a_missing_or_broken_report_as_no_verdicts(tmp_path: Path) -> None:
    script = _load("suite_speed")
    (tmp_path / "broken.json").write_text("{")
    assert script._verdicts(tmp_path / "broken.json") == ({}, None)
    assert script._verdicts(tmp_path / "absent.json") == ({}, None)


def test_compile_profile_sums_the_sanitizer_seconds_of_the_report(tmp_path: Path) -> None:
    script = _load("sanitizer_compile_profile")
    report = _report(tmp_path / "r.json", {("t.py::a", "sanitizer:racecheck"): "pass",
                                           ("t.py::b", "sanitizer:racecheck"): "pass",
                                           ("t.py::b", "coverage"): "pass"}, seconds=3.0)
    row = script._summary(report)
    # the coverage result's seconds are not a sanitizer child's
    assert row["sanitizer_test_s"] == 6.0 and row["sanitizer_compile_s"] == 3.0 and row["child_wall_s"] == [9.5]
    assert row["tests"] == 3 and row["ok"] is True
    assert "error" in script._summary(tmp_path / "absent.json")


@pytest.mark.parametrize("name", ["suite_speed", "sanitizer_compile_profile"])
def test_the_scripts_say_how_to_call_them(name: str) -> None:
    assert f"python3 scripts/gpu/{name}.py OUTDIR" in (_load(name).__doc__ or "")
