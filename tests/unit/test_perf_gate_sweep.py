"""scripts/perf_gate_sweep.py: the recomputation reproduces a recorded GPU session; thresholds act as they must."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from _perf_rates import NoiseModel

from pytest_pipecheck.perf.stats import Samples

# tests/conftest.py: the CPU job runs it, the GPU tier leaves it out (recorded GPU sessions recomputed, no device)
pytestmark = pytest.mark.cpu_only

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "perf_gate_sweep.py"
RECORDING_S4 = ROOT / "tests" / "data" / "perf_recordings" / "s4-2026-11-22-h200-0754-perf_gate_rates.json.gz"


@pytest.fixture(scope="module")
def sweep() -> ModuleType:
    spec = importlib.util.spec_from_file_location("perf_gate_sweep", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(spec.name, None)
    return module


@pytest.fixture(scope="module")
def s4_recording(sweep: ModuleType) -> Any:
    if not RECORDING_S4.exists():
        pytest.skip(f"{RECORDING_S4.name} is not in this checkout")
    return sweep.load_session("s4", str(RECORDING_S4))


@pytest.mark.parametrize("gate", ["raw", "anchored"])
def test_recomputation_reproduces_s4_matmul(sweep: ModuleType, s4_recording: Any, gate: str) -> None:
    # The compute-bound kernel: raw has real A/A failures there, anchored the +5% power shortfall.
    s = s4_recording
    rates = sweep.Rates([s])
    stored = s.stored["matmul_bf16"][gate]
    got = rates.all_pairs("s4", "matmul_bf16", gate, s.threshold, s.alpha, None, (0.0, 0.05))
    runs = len(s.a_runs["matmul_bf16"][sweep.run_kind(gate)])
    assert got[0.0].trials == got[0.05].trials == runs * (runs - 1) == stored["aa_all_pairs"]["trials"]
    assert got[0.0].failures == stored["aa_all_pairs"]["failures"]
    assert got[0.0].rate == stored["aa_all_pairs"]["rate"]
    assert got[0.05].failures == stored["scaled_all_pairs"]["0.05"]["failures"]
    assert got[0.05].rate == stored["scaled_all_pairs"]["0.05"]["rate"]
    # the settings reach the statistics: a lower threshold catches more of the +5% pairs
    lower = rates.all_pairs("s4", "matmul_bf16", gate, s.threshold - 0.01, s.alpha, None, (0.05,))
    assert lower[0.05].failures > got[0.05].failures


def test_validation_of_s4_is_exact(sweep: ModuleType, s4_recording: Any) -> None:
    checks = sweep.validate(sweep.Rates([s4_recording]))
    assert len(checks) == 2 * 3 * 5  # 2 kernels x (raw, anchored, adaptive) x (A/A, +3/+5/+10%, cross-process)
    assert [c for c in checks if c.status != "exact"] == []


def test_validation_names_a_changed_count(sweep: ModuleType, s4_recording: Any) -> None:
    s = s4_recording
    rt = s.stored["matmul_bf16"]["anchored"]
    original = dict(rt["scaled_all_pairs"]["0.05"])
    rt["scaled_all_pairs"]["0.05"]["failures"] += 1
    try:
        bad = [c for c in sweep.validate(sweep.Rates([s])) if c.status != "exact"]
    finally:
        rt["scaled_all_pairs"]["0.05"] = original
    assert [(c.fam, c.gate, c.what, c.status) for c in bad] == [
        ("matmul_bf16", "anchored", "scaled +5% all pairs", "MISMATCH")]


def _synthetic_session(sweep: ModuleType, seed: int) -> Any:
    """12 anchored runs whose kernel drifts run to run, with a shared clock and the anchor's own drift."""
    model = NoiseModel(drift=0.012, clock_drift=0.01, anchor_drift=0.008, sigma=0.02)
    kernel, anchor = model.sample_paired_runs(np.random.default_rng(seed), 12, 100)
    anchored = [Samples.of(k, anchor_us=a, anchor={"kind": "matmul"}) for k, a in zip(kernel, anchor)]
    raw = [Samples.of(k) for k in kernel]
    s = sweep.Session("syn", "synthetic", {"gate": {"threshold": 0.03, "alpha": 0.001}})
    s.a_runs["k"] = {"raw": raw, "anchored": anchored}
    return s


@pytest.mark.parametrize("seed", [0, 1])
def test_larger_threshold_never_raises_the_false_alarm_rate(sweep: ModuleType, seed: int) -> None:
    rates = sweep.Rates([_synthetic_session(sweep, seed)])
    thresholds = [0.0, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05]
    for mode in ("raw", "anchored", "adaptive"):
        for alpha in (1e-3, 1e-4):
            aa = [rates.all_pairs("syn", "k", mode, t, alpha, None, (0.0,))[0.0].failures for t in thresholds]
            assert all(a >= b for a, b in itertools.pairwise(aa)), (mode, alpha, aa)
            assert aa[0] > aa[-1], (mode, alpha, aa)  # the drift makes the sweep non-trivial


# --------------------------------------------------------------------------- pooled runs


@pytest.mark.parametrize("gate", ["raw", "anchored"])
def test_pooled_single_runs_reproduce_all_pairs_on_s4(sweep: ModuleType, s4_recording: Any, gate: str) -> None:
    # kb = kc = 1: the pooled path must give the validated single-run all-pairs counts exactly.
    s = s4_recording
    runs = s.a_runs["matmul_bf16"][sweep.run_kind(gate)]
    n = len(runs)
    assert sweep.window_pairs(n, 1, 1) == [(i, j) for i in range(n) for j in range(n) if i != j]
    thresholds = (0.025, 0.0275, 0.03)
    pooled = sweep.pooled_rates(runs, 1, 1, gate, thresholds, s.alpha, (0.0, 0.05))
    rates = sweep.Rates([s])
    for t in thresholds:
        ref = rates.all_pairs("s4", "matmul_bf16", gate, t, s.alpha, None, (0.0, 0.05))
        for sl in (0.0, 0.05):
            got = pooled[(t, sl)]
            assert (got.failures, got.trials) == (ref[sl].failures, ref[sl].trials) == (got.failures, n * (n - 1))
    # and at the recording's own threshold, the stored counts (anchored +5%: 1387/1560, short of 95%)
    stored = s.stored["matmul_bf16"][gate]
    assert pooled[(s.threshold, 0.0)].failures == stored["aa_all_pairs"]["failures"]
    assert pooled[(s.threshold, 0.05)].failures == stored["scaled_all_pairs"]["0.05"]["failures"]


def test_pooled_rows_are_compare_on_concatenated_runs(sweep: ModuleType, s4_recording: Any) -> None:
    # A pooled comparison is compare() on the runs' samples concatenated, kernel and anchor alike.
    runs = s4_recording.a_runs["matmul_bf16"]["anchored"]
    v = sweep.pooled_verdicts(runs, 2, 3, "anchored", (0.0275,), 1e-3, (0.0, 0.05))
    assert len(v.pairs) == len(sweep.window_pairs(len(runs), 2, 3))
    assert all(j >= i + 2 or j + 3 <= i for i, j in v.pairs)  # the windows share no run
    base = sweep.pooled(runs, 4, 2)
    assert base.n == 200 and base.ratios() == runs[4].ratios() + runs[5].ratios()  # pairs kept
    for k in (0, 7, len(v.pairs) // 2, len(v.pairs) - 1):
        i, j = v.pairs[k]
        for sl in (0.0, 0.05):
            cand = sweep.pooled(runs, j, 3).scaled(1.0 + sl)
            want = sweep.compare(sweep.pooled(runs, i, 2), cand, anchor_mode="always", threshold=0.0275,
                                 alpha=1e-3).regressed
            assert bool(v.regressed[(0.0275, sl)][k]) == want


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pooling_more_runs_never_raises_the_false_alarm_rate(sweep: ModuleType, seed: int) -> None:
    # Pure run-level drift (each run's level drawn independently, sd 1.2%): adding a run to either
    # side averages the drift down, so along each chain the A/A rate may only fall.
    kernel = NoiseModel(drift=0.012, sigma=0.02).sample_runs(np.random.default_rng(seed), 48, 100)
    runs = [Samples.of(k) for k in kernel]
    chains = ([(1, 1), (1, 2), (2, 2), (2, 3), (3, 3)], [(1, 1), (2, 1), (2, 2), (3, 2), (3, 3)])
    for chain in chains:
        aa = [sweep.pooled_rates(runs, kb, kc, "raw", (0.02,), 1e-3, (0.0,))[(0.02, 0.0)].rate for kb, kc in chain]
        assert all(a >= b for a, b in itertools.pairwise(aa)), (chain, aa)
        assert aa[0] > 2 * aa[-1] > 0.0 or aa[-1] == 0.0 < aa[0], (chain, aa)  # pooling matters here


RECORDED = {
    "s2": ROOT / "tests" / "data" / "perf_recordings" / "s2-2026-11-22-h200-0223-perf_gate_rates-0318.json.gz",
    "s3": ROOT / "tests" / "data" / "perf_recordings" / "s3-2026-11-22-h200-0453-perf_gate_rates.json.gz",
    "s4": RECORDING_S4,
    "s5": ROOT / "tests" / "data" / "perf_recordings" / "s5-2026-11-23-h200-1121-perf_gate_rates.json.gz",
}


@pytest.mark.parametrize("label", sorted(RECORDED))
def test_plugin_defaults_meet_both_targets_on_recorded_sessions(sweep: ModuleType, label: str) -> None:
    # What check_perf does by default, replayed on the anchored runs of each H200 recording: a
    # baseline pooled from DEFAULT_BASELINE_RUNS consecutive runs against a candidate of one run, the
    # series chosen per anchor kind (ratios for the matmul anchor, raw times for the copy anchor),
    # DEFAULT_THRESHOLD. Both targets must hold for both kernels: A/A <= 1%, scaled +5% caught >= 95%.
    from pytest_pipecheck.perf.stats import (
        DEFAULT_BASELINE_RUNS,
        DEFAULT_THRESHOLD,
        compare,
        per_kind_anchored,
    )

    path = RECORDED[label]
    if not path.exists():
        pytest.skip(f"{path.name} is not in this checkout")
    s = sweep.load_session(label, str(path))
    for fam in ("add_fp32", "matmul_bf16"):
        # the recording keeps the anchor's definition per kernel, not per run: give each run its kind
        runs = [Samples(r.times_us, r.meta, r.anchor_us, {"kind": s.anchor_kind[fam]}) for r in s.a_runs[fam]["anchored"]]
        mode = "anchored" if per_kind_anchored(runs[0].anchor) else "raw"
        assert mode == ("raw" if fam == "add_fp32" else "anchored")  # copy anchor vs matmul anchor
        v = sweep.pooled_verdicts(runs, DEFAULT_BASELINE_RUNS, 1, mode, (DEFAULT_THRESHOLD,), 1e-3, (0.0, 0.05))
        aa = float(np.mean(v.regressed[(DEFAULT_THRESHOLD, 0.0)]))
        power = float(np.mean(v.regressed[(DEFAULT_THRESHOLD, 0.05)]))
        assert aa <= 0.01 and power >= 0.95, (label, fam, aa, power)
        # and the vectorised rows are what compare() decides with its defaults on Samples.pooled
        for k in (0, len(v.pairs) // 3, len(v.pairs) - 1):
            i, j = v.pairs[k]
            base = Samples.pooled(runs[i:i + DEFAULT_BASELINE_RUNS])
            for sl in (0.0, 0.05):
                got = compare(base, runs[j].scaled(1.0 + sl)).regressed
                assert got == bool(v.regressed[(DEFAULT_THRESHOLD, sl)][k]), (label, fam, k, sl)
