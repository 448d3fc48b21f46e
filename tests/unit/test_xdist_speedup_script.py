"""scripts/gpu/xdist_speedup.py without a GPU: the plugin side that records, per process that ran tests, how
many tests it ran on which GPU and how long it was busy, and the table the report makes of it."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from types import ModuleType

import pytest
from _load import load_file

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

pytest.importorskip("xdist")

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts" / "gpu"
FAKEBIN = ROOT / "tests" / "data" / "fakebin"


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return load_file("xdist_speedup", SCRIPTS / "xdist_speedup.py")


def test_the_balance_of_a_run_per_worker_and_per_gpu(script: ModuleType) -> None:
    records = [{"worker": "gw1", "gpu": "GPU-b", "tests": 16, "busy_s": 40.0, "after_collection_s": 41.5},
               {"worker": "gw0", "gpu": "GPU-a", "tests": 87, "busy_s": 95.25, "after_collection_s": 96.0}]
    balance = script.worker_balance(records)
    assert [w["worker"] for w in balance["workers"]] == ["gw0", "gw1"]
    assert balance["tests_per_gpu"] == {"GPU-a": 87, "GPU-b": 16}
    assert balance["busy_s_per_gpu"] == {"GPU-a": 95.25, "GPU-b": 40.0}
    assert balance["busy_spread_s"] == 55.25
    lines = script.balance_lines([{"xdist": "auto", "balance": balance},
                                  {"xdist": "0", "balance": script.worker_balance([])}])
    assert "| -n auto | gw0 | GPU-a | 87 | 95.25 | 96.0 |" in lines
    assert "- -n auto: GPU-a: 87 tests, 95.25 s busy; GPU-b: 16 tests, 40.0 s busy; busiest minus idlest worker 55.25 s" \
        in lines
    assert "- -n 0: no worker recorded" in lines


def test_each_worker_writes_its_tests_and_gpu(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path, script: ModuleType) -> None:
    """Loaded with ``-p xdist_speedup``, as the script runs pytest: one file per worker, none for the controller."""
    workers = tmp_path / "workers"
    monkeypatch.setenv("XDIST_SPEEDUP_WORKERS_DIR", str(workers))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(SCRIPTS), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("PATH", f"{FAKEBIN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NVIDIA_SMI_GPUS", "NVIDIA H200,9.0;NVIDIA H200,9.0")
    monkeypatch.delenv("PIPECHECK_NO_GPU", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    pytester.makepyfile("""
        import pytest

        @pytest.mark.parametrize("i", range(6))
        def test_k(i):
            pass
        """)
    result = pytester.runpytest_subprocess("-n", "2", "-p", "xdist", "-p", "xdist_speedup", "--pipecheck-sanitizer=none",
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(passed=6)
    records = [json.loads(f.read_text()) for f in sorted(workers.glob("*.json"))]
    assert [r["worker"] for r in records] == ["gw0", "gw1"], records
    assert sum(r["tests"] for r in records) == 6
    assert len({r["gpu"] for r in records}) == 2  # one GPU each, as pipecheck pinned them
    assert all(r["busy_s"] >= 0 and r["after_collection_s"] >= 0 for r in records)
    # and a timeline of every process that ran tests (the controller ran none, but ends as a process too)
    timeline = [json.loads(f.read_text()) for f in sorted((workers / "timeline").glob("*.json"))]
    by_role = {t["role"]: t for t in timeline}
    assert set(by_role) == {"gw0", "gw1", "main"}, by_role
    assert sum(len(by_role[w]["tests"]) for w in ("gw0", "gw1")) == 6
    rows = {row["role"]: row for row in script.timeline_rows(timeline, min(t["started"] for t in timeline))}
    for w in ("gw0", "gw1"):
        assert 0 <= rows[w]["start"] <= rows[w]["configure"] <= rows[w]["collected"] <= rows[w]["first_test"] \
            <= rows[w]["last_test_end"] <= rows[w]["end"]


def test_each_run_compiles_from_empty_caches_of_its_own(script: ModuleType, tmp_path: Path) -> None:
    """A run after another must not find the kernels the first compiled (it would measure the compiles it
    skipped, not the GPU it added): each run's Triton, CuPy and pipecheck caches are folders of its own, emptied
    before it starts; ``shared`` leaves the environment's."""
    out = tmp_path / "speedup"
    stale = tmp_path / "speedup-nauto-caches" / "triton" / "kernel.cubin"
    stale.parent.mkdir(parents=True)
    stale.write_text("compiled by an earlier run")
    first, second = script.compile_cache_env("n0", out, "cold"), script.compile_cache_env("nauto", out, "cold")
    assert set(first) == set(second) == {"TRITON_CACHE_DIR", "CUPY_CACHE_DIR", "PIPECHECK_CACHE_DIR"}
    assert not set(first.values()) & set(second.values())
    assert not stale.exists()
    assert script.compile_cache_env("nauto", out, "shared") == {}


def test_a_variant_of_the_second_run_alone_claims_no_speed_up(script: ModuleType, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """``--nauto-only`` runs no -n 0: the report says the speed-up was not measured, never compares the run with
    itself; ``--tag`` keeps the variant's files apart; ``--workers`` and ``--nauto-args`` reach the second run."""
    calls = []

    def fake_run(label: str, xdist: str, out: Path, tools: str, paths: list[str], timeout: float, caches: str,
                 extra: list[str], extra_env: dict[str, str]) -> dict[str, object]:
        calls.append((label, xdist, extra, extra_env))
        return {"label": label, "xdist": xdist, "wall_s": 50.0, "exit": 0, "outcome": "1 passed", "verdicts": {"t": "pass"},
                "results_per_gpu": {}, "tests_per_gpu": {}, "sanitizer_child_s_per_gpu": {},
                "balance": script.worker_balance([]), "cpu": {}, "timeline": [], "sanitizer_lines": []}

    monkeypatch.setattr(script, "_run", fake_run)
    monkeypatch.setattr(script, "_gpus", lambda: ["0, NVIDIA H200, GPU-a", "1, NVIDIA H200, GPU-b"])
    assert script.main([str(tmp_path / "s"), "--nauto-only", "--workers", "4", "--tag", "n4",
                        "--nauto-args=--pipecheck-sanitizer-jobs=2", "--env", "A=b=c"]) == 0
    assert calls == [("n4", "4", ["--pipecheck-sanitizer-jobs=2"], {"A": "b=c"})]
    report = (tmp_path / "s-n4.md").read_text()
    assert "speed-up: not measured" in report and "same verdicts" not in report
    assert not (tmp_path / "s.md").exists()
    calls.clear()
    assert script.main([str(tmp_path / "s")]) == 0
    assert [c[:2] for c in calls] == [("n0", "0"), ("nauto", "auto")]
    assert "speed-up: 1.00x" in (tmp_path / "s.md").read_text()


# ------------------------------------------------------------------ the serial parts and the Amdahl bound

def _process(role: str, started: float | None, tests: list[tuple[float, float]], end: float | None,
             ) -> dict[str, object]:
    """A timeline record as the plugin side writes it, its tests named after their start."""
    events: list[list[object]] = [["configure", started + 1.0]] if started is not None else []
    return {"role": role, "pid": 1, "gpu": "GPU-a", "started": started,
            "events": [*events, *([["end", end]] if end is not None else [])],
            "tests": [[f"t{start}", start, stop] for start, stop in tests]}


def _n0_run(wall_s: float | None = 50.0) -> dict[str, object]:
    """-n 0: the main process runs the tests from 3.5 s to 48.5 s; its children run tests before its first test
    starts (3.2 s) and after its last ends (49.5 s), which must not count; they start up in 0.2, 3.0 and 5.0 s."""
    return {"xdist": "0", "wall_s": wall_s, "timeline": [
        _process("main", 1000.0, [(1003.5, 1020.0), (1020.0, 1048.5)], 1049.0),
        _process("child-racecheck", 1003.0, [(1003.2, 1004.0)], 1004.1),
        _process("child-synccheck", 1003.0, [(1006.0, 1030.0)], 1030.2),
        _process("child-racecheck", 1003.0, [(1008.0, 1049.5)], 1049.6)]}


def _nauto_run() -> dict[str, object]:
    """-n auto: the controller runs no test; the workers' tests run from 8.0 s to 55.0 s of a 60 s run; its one
    sanitizer child starts up in 2.5 s and ends after the last worker's test."""
    return {"xdist": "auto", "wall_s": 60.0, "timeline": [
        _process("main", 2000.0, [], 2058.0),
        _process("gw0", 2001.5, [(2008.0, 2030.0), (2030.0, 2055.0)], 2055.1),
        _process("gw1", 2001.6, [(2008.5, 2050.0)], 2050.1),
        _process("child-racecheck", 2008.0, [(2010.5, 2059.0)], 2059.1)]}


def test_the_serial_parts_of_a_run_without_xdist(script: ModuleType) -> None:
    assert script.serial_parts(_n0_run()) == {"wall_s": 50.0, "head_s": 3.5, "middle_s": 45.0, "tail_s": 1.5,
                                              "children_startup_s": 3.0}
    # no wall measured: the run ends where its main process ends
    assert script.serial_parts(_n0_run(wall_s=None)) == {"wall_s": 49.0, "head_s": 3.5, "middle_s": 45.0,
                                                         "tail_s": 0.5, "children_startup_s": 3.0}


def test_the_serial_parts_of_a_run_under_xdist(script: ModuleType) -> None:
    assert script.serial_parts(_nauto_run()) == {"wall_s": 60.0, "head_s": 8.0, "middle_s": 47.0, "tail_s": 5.0,
                                                 "children_startup_s": 2.5}


def test_a_process_that_holds_its_tests_back_for_its_children_starts_at_its_collections_end(
        script: ModuleType) -> None:
    """A main process that collects by 4.0 s and waits for its sanitizer children before its first test (20.0 s):
    the wait is work beside the children, not a serial part; the head ends where the collection does."""
    run = _n0_run()
    main = run["timeline"][0]  # type: ignore[index]
    main["events"].insert(1, ["collected", 1004.0])
    main["tests"] = [["t", 1020.0, 1048.5]]
    assert script.serial_parts(run)["head_s"] == 4.0
    rows = script.timeline_rows(run["timeline"], 1000.0)
    assert script.serial_parts({"wall_s": 50.0, "timeline": rows})["head_s"] == 4.0
    # a process that collected but ran no test does not start the middle
    run["timeline"].append(_process("gw9", 1000.0, [], 1001.0))  # type: ignore[attr-defined]
    run["timeline"][-1]["events"].append(["collected", 1000.5])  # type: ignore[index]
    assert script.serial_parts(run)["head_s"] == 4.0


def test_the_serial_parts_from_the_rows_a_saved_report_holds(script: ModuleType) -> None:
    """A saved report keeps ``timeline_rows`` (seconds from the run's start), not the records: the same parts."""
    run = _nauto_run()
    rows = script.timeline_rows(run["timeline"], 1999.9)
    assert script.serial_parts({"wall_s": 60.0, "timeline": rows}) == script.serial_parts(run)


def test_the_amdahl_bound_on_numbers_checked_by_hand(script: ModuleType) -> None:
    # T = 48: 48 / (10 + (48 - 4) / 2) = 48 / 32 = 1.5
    assert script.wall_needed(10.0, 4.0, 2, 1.5) == pytest.approx(48.0)
    # a serial part below S0 / g: any suite reaches it, down to one that is all serial part
    assert script.wall_needed(1.0, 4.0, 2, 1.5) == 4.0
    assert script.wall_needed(10.0, 4.0, 2, 2.0) is None
    assert script.wall_needed(10.0, 4.0, 2, 2.5) is None
    bound = script.speedup_bound(_n0_run(), _nauto_run(), 2)
    # T0 = 50, S0 = 3.5 + 1.5 = 5, M0 = 45, S = 8 + 5 = 13: 13 + 45 / 2 = 35.5 s, 50 / 35.5 = 1.41;
    # 5 + 22.5 = 27.5 s, 50 / 27.5 = 1.82; 1.8 needs T >= 1.8 * (13 - 5 / 2) / (1 - 1.8 / 2) = 189
    assert {k: v for k, v in bound.items() if k not in ("n0", "nauto")} == {
        "gpus": 2, "target": 1.8, "nauto_xdist": "auto", "n0_wall_s": 50.0, "n0_serial_s": 5.0,
        "n0_middle_s": 45.0, "nauto_serial_s": 13.0, "measured_ratio": 0.83, "best_nauto_s": 35.5,
        "best_ratio": 1.41, "best_nauto_s_n0_serial": 27.5, "best_ratio_n0_serial": 1.82,
        "n0_wall_needed_s": 189.0}
    lines = script.bound_lines(bound)
    assert "| -n 0 | 50.0 | 3.5 | 45.0 | 1.5 | 3.0 |" in lines
    assert "| -n auto | 60.0 | 8.0 | 47.0 | 5.0 | 2.5 |" in lines
    assert lines[-1] == ("Amdahl bound on 2 GPUs: with the 13.0 s serial part of -n auto and the 45.0 s middle of "
                         "-n 0 split evenly, -n auto takes at least 35.5 s, 1.41x the -n 0 wall of 50.0 s (measured: "
                         "0.83x; 1.82x if its serial part were the 5.0 s of -n 0); 1.8x needs a -n 0 wall of at "
                         "least 189.0 s with these serial parts.")
    assert script.bound_lines(script.speedup_bound(_n0_run(), _nauto_run(), 2, target=2.0))[-1].endswith(
        "; 2.0x is out of reach on 2 GPUs.")


def test_missing_timeline_data_gives_none(script: ModuleType) -> None:
    nothing = {"wall_s": None, "head_s": None, "middle_s": None, "tail_s": None, "children_startup_s": None}
    assert script.serial_parts({}) == nothing
    assert script.serial_parts({"wall_s": 50.0, "timeline": None}) == dict(nothing, wall_s=50.0)
    no_start = {"wall_s": 50.0, "timeline": [_process("main", None, [(3.0, 4.0)], 49.0)]}
    assert script.serial_parts(no_start) == dict(nothing, wall_s=50.0)
    no_tests = {"wall_s": None, "timeline": [_process("main", 1000.0, [], 1049.0)]}
    assert script.serial_parts(no_tests) == dict(nothing, wall_s=49.0)
    garbage = {"wall_s": "?", "timeline": ["main", {"role": "main", "started": 1000.0, "events": [["end"], 7],
                                                    "tests": [["t"], None, ["t", "a", 2.0]]},
                                           {"role": "gw0", "started": 1.0, "events": 7, "tests": 7},
                                           {"role": "gw1", "events": [[["end"], 5.0]], "tests": [["t", 1.0, None]]},
                                           {"role": "child-x", "started": None, "tests": [["t", 1.0, 2.0]]}]}
    assert script.serial_parts(garbage) == nothing
    bound = script.speedup_bound({}, _nauto_run(), 2)
    assert (bound["best_ratio"], bound["best_nauto_s"], bound["n0_wall_needed_s"], bound["measured_ratio"]) == \
        (None, None, None, None)
    assert bound["nauto_serial_s"] == 13.0
    assert script.speedup_bound(_n0_run(), _nauto_run(), 0)["best_ratio"] is None
    assert script.bound_lines(bound)[-1].startswith("Amdahl bound: not computable")
    assert "| -n 0 | n/a | n/a | n/a | n/a | n/a |" in script.bound_lines(bound)


def test_the_bound_from_a_saved_report(script: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    n0, nauto = _n0_run(), _nauto_run()
    runs = [dict(n0, timeline=script.timeline_rows(n0["timeline"], 1000.0)),
            dict(nauto, timeline=script.timeline_rows(nauto["timeline"], 2000.0))]
    report = tmp_path / "speedup.json.gz"
    report.write_bytes(gzip.compress(json.dumps({"gpus": ["0, H200, GPU-a", "1, H200, GPU-b"],
                                                 "runs": runs}).encode()))
    assert script.main(["--bound-from", str(report)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "| -n auto | 60.0 | 8.0 | 47.0 | 5.0 | 2.5 |" in out
    assert "1.41x the -n 0 wall of 50.0 s" in out[-1] and "at least 189.0 s" in out[-1]
    assert script.main(["--bound-from", str(report), "--gpus", "3", "--target", "2"]) == 0
    # 13 + 45 / 3 = 28 s, 50 / 28 = 1.79; T >= 2 * (13 - 5 / 3) / (1 - 2 / 3) = 68
    last = capsys.readouterr().out.splitlines()[-1]
    assert "at least 28.0 s, 1.79x" in last and "at least 68.0 s" in last
    plain = tmp_path / "speedup.json"
    plain.write_text(json.dumps({"gpus": ["0, H200, GPU-a", "1, H200, GPU-b"], "runs": runs}))
    assert script.main(["--bound-from", str(plain)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == out[-1]


def test_the_bound_from_a_report_without_both_runs_is_an_error(script: ModuleType, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "nauto-only.json.gz"
    report.write_bytes(gzip.compress(json.dumps({"gpus": ["0", "1"], "runs": [_nauto_run()]}).encode()))
    assert script.main(["--bound-from", str(report)]) == 2
    err = capsys.readouterr()
    assert err.out == "" and err.err == f"xdist_speedup.py: {report} lacks a -n 0 run and an xdist run to compare\n"
    broken = tmp_path / "broken.json.gz"
    broken.write_bytes(gzip.compress(b"{}")[:-6])
    for path in (broken, tmp_path / "missing.json"):
        assert script.main(["--bound-from", str(path)]) == 2
        err = capsys.readouterr()
        assert err.err.startswith(f"xdist_speedup.py: cannot read {path}: ") and err.err.count("\n") == 1


def test_the_report_states_the_bound_where_both_runs_ran(script: ModuleType, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_run(label: str, xdist: str, *args: object) -> dict[str, object]:
        run, t0 = (_n0_run(), 1000.0) if xdist == "0" else (_nauto_run(), 2000.0)
        return dict(run, timeline=script.timeline_rows(run["timeline"], t0), label=label, exit=0, outcome="1 passed", verdicts={}, results_per_gpu={}, tests_per_gpu={},
                    sanitizer_child_s_per_gpu={}, balance=script.worker_balance([]), cpu={}, sanitizer_lines=[])

    monkeypatch.setattr(script, "_run", fake_run)
    monkeypatch.setattr(script, "_gpus", lambda: ["0, NVIDIA H200, GPU-a", "1, NVIDIA H200, GPU-b"])
    assert script.main([str(tmp_path / "s")]) == 0
    assert "| -n auto | 60.0 | 8.0 | 47.0 | 5.0 | 2.5 |" in (tmp_path / "s.md").read_text().splitlines()
    saved = json.loads((tmp_path / "s.json").read_text())
    assert (saved["serial_bound"]["best_ratio"], saved["serial_bound"]["n0_wall_needed_s"]) == (1.41, 189.0)
    assert script.main([str(tmp_path / "s"), "--nauto-only"]) == 0
    assert "Amdahl" not in (tmp_path / "s.md").read_text()
    assert json.loads((tmp_path / "s.json").read_text())["serial_bound"] is None
