"""scripts/gpu/xdist_speedup.py without a GPU: the plugin side that records, per process that ran tests, how
many tests it ran on which GPU and how long it was busy, and the table the report makes of it."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

pytest.importorskip("xdist")

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts" / "gpu"
FAKEBIN = ROOT / "tests" / "data" / "fakebin"


@pytest.fixture(scope="module")
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("xdist_speedup", SCRIPTS / "xdist_speedup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
