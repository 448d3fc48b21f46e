"""check_perf's logic with injected samples: skip, pass, fail, save, bad input (no GPU needed)."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest
from _perf_rates import NoiseModel

from pytest_pipecheck import children
from pytest_pipecheck.children import Role
from pytest_pipecheck.config import PipecheckConfig
from pytest_pipecheck.device import DeviceInfo, TierInfo
from pytest_pipecheck.fixture import Pipecheck
from pytest_pipecheck.perf import timing
from pytest_pipecheck.perf.baseline import BaselineStore, EnvKey
from pytest_pipecheck.perf.gate import check_perf, environment_key
from pytest_pipecheck.perf.stats import Samples
from pytest_pipecheck.perf.timing import Anchor, Ceilings, choose_anchor, roofline, size_anchor
from pytest_pipecheck.results import PipecheckError, PipecheckFailure, Verdict

CPU = TierInfo("cpu", None, "no NVIDIA driver found (nvidia-smi is not on PATH)", {"torch": "2.13.0"})
GPU = TierInfo("gpu", DeviceInfo(0, "NVIDIA H100 80GB HBM3", "9.0", 132, 81559, "580.65"), "",
               {"torch": "2.11.0", "triton": "3.6.0", "cupy": None})
NODE = "tests/test_k.py::test_k[64]"
ENV = {"gpu": "NVIDIA H100 80GB HBM3", "sm_count": 132, "compute_capability": "9.0", "driver": "580.65",
       "cuda": "13.0", "torch": "2.11.0", "triton": "3.6.0"}


def _pc(tmp_path, tier: TierInfo = CPU, role: Role = children.NONE, **cfg: object) -> Pipecheck:
    config = PipecheckConfig(baseline_dir=str(tmp_path / "baselines"), **cfg)  # type: ignore[arg-type]
    return Pipecheck(NODE, config, tier, run_seed=1, role=role)


def _run(seed: int, slowdown: float = 0.0) -> list[float]:
    return list(NoiseModel().sample_runs(np.random.default_rng(seed), 1, 100, slowdown)[0])


def test_cpu_tier_skips_with_reason(tmp_path) -> None:
    pc = _pc(tmp_path)
    r = check_perf(pc, lambda: None, flops=1e9)
    assert r.verdict is Verdict.SKIP
    assert r.summary == "perf needs a CUDA GPU: no NVIDIA driver found (nvidia-smi is not on PATH)"
    assert pc.results == [r]


def test_a_gpu_shared_by_xdist_workers_is_not_timed_but_given_samples_are_gated(tmp_path, monkeypatch) -> None:
    import dataclasses

    shared = dataclasses.replace(GPU, gpu_shared_by=("gw0", "gw1", "gw2"))
    monkeypatch.setattr(timing, "measure", lambda *a, **k: pytest.fail("timed on a shared GPU"))
    r = check_perf(_pc(tmp_path, shared), lambda: None, flops=1e9)
    assert r.verdict is Verdict.SKIP and r.summary == (
        "perf not timed: timing needs the GPU alone, and 3 pytest-xdist workers share GPU 0 (gw0, gw1, gw2): "
        "time it in a run without -n, or with at most one worker per GPU (-n auto)")
    # samples measured elsewhere are not this process's timing: they are gated as usual
    (tmp_path / "baselines").mkdir()
    given = check_perf(_pc(tmp_path, shared), samples=_run(1), env=ENV)
    assert given.verdict is Verdict.SKIP and "no baseline" in given.summary
    # alone on its GPU (one worker per GPU) a worker times
    assert dataclasses.replace(GPU, gpu_shared_by=("gw1",)).timing_blocked is None
    assert CPU.timing_blocked is None


def test_not_selected_skips(tmp_path) -> None:
    r = _pc(tmp_path, checks=("coverage",)).check_perf(samples=_run(1), env=ENV)
    assert r.verdict is Verdict.SKIP and r.summary == ("not selected: checks=coverage from the configuration does "
                                                       "not include perf")


@pytest.mark.parametrize("flops", [0, -1, float("nan"), float("inf"), "many", True])
def test_bad_flops_is_a_clear_error(tmp_path, flops: object) -> None:
    with pytest.raises(PipecheckError, match=r"check_perf\(flops=.*\) in " + re.escape(NODE)):
        check_perf(_pc(tmp_path), lambda: None, flops=flops)


def test_zero_bytes_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(PipecheckError, match=r"byte count must be > 0"):
        check_perf(_pc(tmp_path), lambda: None, bytes=0)


def test_unknown_keyword_is_named(tmp_path) -> None:
    with pytest.raises(PipecheckError, match=r"unknown keyword 'nsamples'"):
        check_perf(_pc(tmp_path), lambda: None, nsamples=10)


def test_bad_injected_samples(tmp_path) -> None:
    with pytest.raises(PipecheckError, match=r"check_perf\(samples=: sample 1 is -1.0; times must be finite and > 0\) in " + re.escape(NODE)):
        check_perf(_pc(tmp_path), samples=[1.0, -1.0], env=ENV)


def test_no_baseline_is_a_skip_with_the_measurement(tmp_path) -> None:
    r = check_perf(_pc(tmp_path), samples=_run(1), env=ENV)
    assert r.verdict is Verdict.SKIP
    assert r.summary.startswith("60.") and "no baseline" in r.summary and "does not exist" in r.summary


def test_save_then_pass_then_fail(tmp_path) -> None:
    saved = check_perf(_pc(tmp_path, baseline_save=True), samples=_run(1), env=ENV)
    assert saved.verdict is Verdict.PASS and "saved as the new baseline" in saved.summary
    assert len(os.listdir(tmp_path / "baselines")) == 1

    same = check_perf(_pc(tmp_path), samples=_run(2), env=ENV)
    assert same.verdict is Verdict.PASS
    assert "baseline (" in same.summary and "p=" in same.summary
    assert same.details["regressed"] is False

    pc = _pc(tmp_path)
    with pytest.raises(PipecheckFailure) as info:
        check_perf(pc, samples=_run(3, slowdown=0.10), env=ENV)
    msg = str(info.value)
    assert msg.startswith(f"perf regression in {NODE} [case default]: ")
    assert "+9." in msg or "+10." in msg or "+11." in msg
    assert "--pipecheck-baseline-save" in msg and "baseline: " in msg
    assert pc.results[-1].verdict is Verdict.FAIL and pc.results[-1].summary.startswith("regression: ")
    assert info.value.result is pc.results[-1]


def test_save_accepts_a_slowdown(tmp_path) -> None:
    check_perf(_pc(tmp_path, baseline_save=True), samples=_run(1), env=ENV)
    r = check_perf(_pc(tmp_path, baseline_save=True), samples=_run(2, slowdown=0.2), env=ENV)
    assert r.verdict is Verdict.PASS and "saved as the new baseline" in r.summary and r.details["regressed"]
    # and the new baseline is the slower one
    later = check_perf(_pc(tmp_path), samples=_run(3, slowdown=0.2), env=ENV)
    assert later.verdict is Verdict.PASS
    # the history the HTML report plots: the replaced baseline, the current one, then this run
    history = later.details["history"]
    assert [h["label"] for h in history][-1] == "this run" and len(history) == 3
    medians = [h["median_us"] for h in history]
    assert medians[1] > medians[0] * 1.1 and abs(medians[2] / medians[1] - 1) < 0.05


def test_marker_threshold_is_used(tmp_path) -> None:
    check_perf(_pc(tmp_path, baseline_save=True), samples=_run(1), env=ENV)
    # a 10% slowdown passes under a 20% practical threshold
    r = check_perf(_pc(tmp_path, perf_threshold=0.2), samples=_run(2, slowdown=0.1), env=ENV)
    assert r.verdict is Verdict.PASS and r.details["threshold"] == 0.2


def test_other_gpu_baseline_is_not_compared(tmp_path) -> None:
    check_perf(_pc(tmp_path, baseline_save=True), samples=_run(1), env={**ENV, "gpu": "NVIDIA H200"})
    r = check_perf(_pc(tmp_path), samples=_run(2, slowdown=0.5), env=ENV)
    assert r.verdict is Verdict.SKIP
    assert "not compared" in r.summary and "gpu NVIDIA H200!=NVIDIA H100 80GB HBM3" in r.summary


def test_corrupt_baseline_is_an_error_result(tmp_path) -> None:
    pc = _pc(tmp_path, baseline_save=True)
    check_perf(pc, samples=_run(1), env=ENV)
    (path,) = (tmp_path / "baselines").iterdir()
    path.write_text("{ truncated")
    pc2 = _pc(tmp_path, baseline_save=True)
    with pytest.raises(PipecheckError, match=f"{path}.*corrupt"):
        check_perf(pc2, samples=_run(2), env=ENV)
    assert pc2.results[-1].verdict is Verdict.ERROR
    assert path.read_text() == "{ truncated"


def test_cases_are_separate_and_duplicates_refused(tmp_path) -> None:
    pc = _pc(tmp_path, baseline_save=True)
    check_perf(pc, samples=_run(1), env=ENV, case="small")
    check_perf(pc, samples=[t * 10 for t in _run(2)], env=ENV, case="large")
    with pytest.raises(PipecheckError, match=r"called twice with case='large'"):
        check_perf(pc, samples=_run(3), env=ENV, case="large")
    data = json.loads(next((tmp_path / "baselines").iterdir()).read_text())
    assert set(data["tests"][NODE]) == {"small", "large"}


def test_too_few_samples_for_alpha(tmp_path) -> None:
    check_perf(_pc(tmp_path, baseline_save=True), samples=[60.0] * 5, env=ENV)
    with pytest.raises(PipecheckError, match=r"cannot reach alpha"):
        check_perf(_pc(tmp_path), samples=[70.0] * 5, env=ENV)


def test_baseline_dir_none_skips(tmp_path) -> None:
    pc = Pipecheck(NODE, PipecheckConfig(baseline_dir=None), CPU, 1)
    r = check_perf(pc, samples=_run(1), env=ENV)
    assert r.verdict is Verdict.SKIP and "baselines are off" in r.summary


def test_relative_baseline_dir_uses_rootdir(tmp_path) -> None:
    pc = Pipecheck(NODE, PipecheckConfig(baseline_dir="pb", baseline_save=True), CPU, 1)
    pc.rootdir = str(tmp_path)  # type: ignore[attr-defined]
    check_perf(pc, samples=_run(1), env=ENV)
    assert len(os.listdir(tmp_path / "pb")) == 1


def test_environment_key_from_tier_without_torch_cuda(tmp_path) -> None:
    key = environment_key(_pc(tmp_path, tier=GPU)).values
    assert key["gpu"] == "NVIDIA H100 80GB HBM3" and key["compute_capability"] == "9.0"
    assert key["driver"] == "580.65" and key["triton"] == "3.6.0" and key["cupy"] is None


def test_roofline_fraction() -> None:
    c = Ceilings({"fp16": 700e12}, 3.0e12)
    frac, limit = roofline(c, 100.0, flops=35e9, nbytes=None)  # 35 GFLOP in 100 us at 700 TF/s peak
    assert frac == pytest.approx(0.5) and "fp16 matmul peak" in limit
    frac, limit = roofline(c, 100.0, flops=1e6, nbytes=150e6)  # 150 MB at 3 TB/s = 50 us
    assert frac == pytest.approx(0.5) and "copy bandwidth" in limit
    assert roofline(c, 100.0, flops=None, nbytes=None) is None
    with pytest.raises(PipecheckError, match=r"dtype='fp8'"):
        roofline(c, 100.0, flops=1.0, nbytes=None, dtype="fp8")


def test_store_sees_what_the_gate_saved(tmp_path) -> None:
    pc = _pc(tmp_path, baseline_save=True)
    check_perf(pc, samples=_run(1), env=ENV, flops=2e9, bytes=1e6)
    store = BaselineStore(str(tmp_path / "baselines"))
    (_path, bf), = store.files()
    entry = bf.entry(NODE, "default")
    assert entry is not None and entry["flops"] == 2e9 and entry["bytes"] == 1e6 and entry["n"] == 100


# --------------------------------------------------------------------------- clock-drift anchoring

H200_CEILINGS = Ceilings({"fp16": 749e12, "bf16": 775e12}, 4123e9, "NVIDIA H200")  # as measured on an H200
MATMUL = Anchor("matmul", dtype="bf16", m=2048, n=2048, k=4096)


def _anchored(seed: int, clock: float = 1.0, slowdown: float = 0.0, anchor: Anchor = MATMUL) -> Samples:
    model = NoiseModel(drift=0.002)
    kernel, anc = model.sample_paired_runs(np.random.default_rng(seed), 1, 100, slowdown=slowdown)
    return Samples.of(kernel[0] * clock, anchor_us=anc[0] * clock, anchor=anchor.definition())


def test_anchored_gate_ignores_a_shared_clock_change_and_catches_a_slowdown(tmp_path) -> None:
    saved = check_perf(_pc(tmp_path, baseline_save=True), samples=_anchored(1), env=ENV)
    assert saved.verdict is Verdict.PASS and "anchor bf16 matmul 2048x2048x4096" in saved.summary
    # same code, GPU 12% slower clock (power-capped after the baseline's boost): passes, anchored
    same = check_perf(_pc(tmp_path), samples=_anchored(2, clock=1.12), env=ENV)
    assert same.verdict is Verdict.PASS and same.details["anchored"] is True
    assert "anchored to bf16 matmul 2048x2048x4096" in same.summary and "raw +1" in same.summary
    assert same.details["raw_change"] > 0.1 and abs(same.details["change"]) < 0.01
    # the same samples gated on raw times are the false alarm
    with pytest.raises(PipecheckFailure):
        check_perf(_pc(tmp_path), samples=Samples.of(_anchored(2, clock=1.12).times_us), env=ENV)
    # a real 6% slowdown under a 3% faster clock: raw +3%, anchored +6%: caught
    pc = _pc(tmp_path)
    with pytest.raises(PipecheckFailure) as info:
        check_perf(pc, samples=_anchored(3, clock=0.97, slowdown=0.06), env=ENV)
    msg = str(info.value)
    assert "anchored to bf16 matmul" in msg and "kernel/anchor ratios" in msg
    assert pc.results[-1].details["anchored"] is True and pc.results[-1].details["change"] > 0.04


def test_old_baseline_without_anchor_compares_raw_and_says_so(tmp_path) -> None:
    store = BaselineStore(str(tmp_path / "baselines"))
    path = store.path_for(environment_key_of(ENV))
    os.makedirs(os.path.dirname(path))
    entry = Samples.of(_run(1)).to_json()
    with open(path, "w") as fh:
        json.dump({"schema": "pytest-pipecheck-baseline", "version": 1, "env": environment_key_of(ENV).values,
                   "tests": {NODE: {"default": entry}}}, fh)
    r = check_perf(_pc(tmp_path), samples=_anchored(2), env=ENV)
    assert r.verdict is Verdict.PASS and r.details["anchored"] is False
    assert "raw times: the baseline has no anchor" in r.summary and r.details["baseline_schema_version"] == 1


def environment_key_of(values: dict) -> EnvKey:
    return EnvKey(dict(values))


@pytest.mark.parametrize("bad", ["auto-ish", "MATMUL", 1, True])
def test_bad_anchor_is_a_clear_error(tmp_path, bad: object) -> None:
    with pytest.raises(PipecheckError, match=r"anchor=.* must be 'auto', 'matmul', 'copy' or None"):
        check_perf(_pc(tmp_path), samples=_run(1), env=ENV, anchor=bad)


def test_choose_anchor_from_intensity_and_ridge_point() -> None:
    # ridge point of the H200's measured ceilings: 749 TFLOP/s / 4123 GB/s = 182 FLOP/B (fp16)
    n = 16 * 2**20
    kind, why = choose_anchor(n, 12 * n, H200_CEILINGS)  # fp32 add: 1 FLOP per 12 B
    assert kind == "copy" and "< ridge point 182" in why
    kind, why = choose_anchor(2 * 4096**3, 3 * 2 * 4096**2, H200_CEILINGS)  # 4096^3 fp16 GEMM: 1365 FLOP/B
    assert kind == "matmul" and ">= ridge point" in why
    assert choose_anchor(1e9, None, None)[0] == "matmul"
    assert choose_anchor(None, 1e9, None)[0] == "copy"
    kind, why = choose_anchor(None, None, None)
    assert kind is None and "declare flops" in why
    with pytest.raises(PipecheckError, match=r"measured ceilings"):
        choose_anchor(1.0, 1.0, None)


def test_size_anchor_ladder() -> None:
    a = size_anchor("matmul", 70.0, H200_CEILINGS, "bf16")
    assert (a.m, a.n, a.k, a.dtype) == (2048, 2048, 4096, "bf16")
    assert size_anchor("matmul", 265.0, H200_CEILINGS, "fp16").k == 16384  # the 4096^3 Triton GEMM
    assert size_anchor("matmul", 1e6, H200_CEILINGS).k == 32768  # capped
    assert size_anchor("copy", 70.0, H200_CEILINGS).nbytes == 128 * 2**20
    assert size_anchor("matmul", 70.0, H200_CEILINGS, "fp8").dtype == "bf16"
    with pytest.raises(PipecheckError, match=r"anchor='dram'"):
        size_anchor("dram", 70.0, H200_CEILINGS)


def test_anchor_definition_roundtrip() -> None:
    assert Anchor.from_definition(MATMUL.definition()) == MATMUL
    copy = Anchor("copy", nbytes=2**27)
    assert Anchor.from_definition(copy.definition()) == copy and copy.label == "copy 128 MiB"
    with pytest.raises(PipecheckError, match=r"unknown anchor definition"):
        Anchor.from_definition({"kind": "dram"})
    with pytest.raises(PipecheckError, match=r"incomplete"):
        Anchor.from_definition({"kind": "matmul", "dtype": "bf16"})
    with pytest.raises(PipecheckError, match=r"dtype bf16/fp16"):
        Anchor("matmul", dtype="fp32", m=1, n=1, k=1)


class _FakeTiming:
    """Stands in for the device: records what check_perf asked measure() for."""

    def __init__(self, monkeypatch, clock: float = 1.0) -> None:
        self.calls: list[dict] = []
        self.clock = clock
        monkeypatch.setattr(timing, "current_ceilings", lambda: H200_CEILINGS)
        monkeypatch.setattr(timing, "measure", self.measure)

    def measure(self, fn, **kw):
        self.calls.append(kw)
        anchor = kw.get("anchor")
        seed = len(self.calls)
        if anchor is None:
            return Samples.of(_run(seed))
        if isinstance(anchor, str):
            anchor = size_anchor(anchor, 60.0, kw["ceilings"], kw["anchor_dtype"])
        return _anchored(seed, clock=self.clock, anchor=anchor)


def test_gpu_path_chooses_reuses_and_respects_old_baselines(tmp_path, monkeypatch) -> None:
    fake = _FakeTiming(monkeypatch)
    # auto, GEMM-like counts: a matmul anchor sized to the kernel, after the default settle
    r = check_perf(_pc(tmp_path, tier=GPU, baseline_save=True), lambda: None, flops=2 * 4096**3,
                   bytes=6 * 4096**2, env=ENV)
    assert fake.calls[0]["anchor"] == "matmul" and fake.calls[0]["settle_s"] == timing.DEFAULT_SETTLE_S
    assert r.details["anchor"]["kind"] == "matmul" and "compute-bound" in r.details["anchor"]["reason"]
    # saving pools perf_baseline_runs = 2 runs, the second against the anchor the first one got
    assert len(fake.calls) == 2 and fake.calls[1]["anchor"] == Anchor.from_definition(r.details["anchor"]["definition"])
    assert r.details["saved_runs"] == 2 and "saved as the new baseline pooled from 2 runs" in r.summary
    # the rerun reuses the baseline's anchor definition
    fake.clock = 1.1
    r = check_perf(_pc(tmp_path, tier=GPU), lambda: None, flops=2 * 4096**3, bytes=6 * 4096**2, env=ENV)
    assert isinstance(fake.calls[-1]["anchor"], Anchor) and fake.calls[-1]["anchor"].k == 4096
    assert r.verdict is Verdict.PASS and r.details["anchored"] and "the baseline's anchor" in r.details["anchor"]["reason"]
    # a memory-bound kernel gets a copy anchor; anchor=None and neither count: no anchor
    check_perf(_pc(tmp_path, tier=GPU), lambda: None, bytes=1e8, env=ENV, case="add")
    assert fake.calls[-1]["anchor"] == "copy"
    r = check_perf(_pc(tmp_path, tier=GPU), lambda: None, env=ENV, case="plain")
    assert fake.calls[-1]["anchor"] is None and "declare flops" in r.details["anchor"]["reason"]
    check_perf(_pc(tmp_path, tier=GPU), lambda: None, flops=1e9, env=ENV, case="off", anchor=None, settle_s=0)
    assert fake.calls[-1]["anchor"] is None and fake.calls[-1]["settle_s"] == 0


def test_gpu_path_times_raw_against_an_unanchored_baseline(tmp_path, monkeypatch) -> None:
    fake = _FakeTiming(monkeypatch)
    check_perf(_pc(tmp_path, tier=GPU, baseline_save=True), lambda: None, flops=1e9, env=ENV, anchor=None)
    assert [c["anchor"] for c in fake.calls] == [None, None]  # two runs pooled, both unanchored
    r = check_perf(_pc(tmp_path, tier=GPU), lambda: None, flops=1e9, env=ENV)
    assert fake.calls[-1]["anchor"] is None  # timed as the baseline was: like for like
    assert r.details["anchored"] is False and "not anchored: the baseline (schema version 2) has no anchor" in r.summary
    # saving re-anchors it
    check_perf(_pc(tmp_path, tier=GPU, baseline_save=True), lambda: None, flops=1e9, env=ENV)
    assert fake.calls[-2]["anchor"] == "matmul" and isinstance(fake.calls[-1]["anchor"], Anchor)
    r = check_perf(_pc(tmp_path, tier=GPU), lambda: None, flops=1e9, env=ENV)
    # both anchored now: the default gates on the kernel/anchor ratios
    assert r.details["anchor_compared"] is True and r.details["gated_on"] == "anchored"
    assert "not anchored" not in r.summary
    # adaptive: the clock held (the fake's clock did not change), so raw times decide
    r = check_perf(_pc(tmp_path, tier=GPU, perf_anchor_mode="adaptive"), lambda: None, flops=1e9, env=ENV)
    assert r.details["anchor_compared"] is True and r.details["gated_on"] == "raw"
    assert "gated on raw: the anchor moved" in r.summary and "not anchored" not in r.summary


# --------------------------------------------------------------------------- adaptive anchoring


def test_adaptive_gate_through_check_perf(tmp_path) -> None:
    check_perf(_pc(tmp_path, baseline_save=True), samples=_anchored(1), env=ENV)
    # clock steady: raw times decide, and the summary says so with the tolerance
    steady = check_perf(_pc(tmp_path, perf_anchor_mode="adaptive"), samples=_anchored(2), env=ENV)
    assert steady.verdict is Verdict.PASS and steady.details["gated_on"] == "raw"
    assert steady.details["anchor_mode"] == "adaptive" and steady.details["clock_tolerance"] == 0.015
    assert "gated on raw: the anchor moved" in steady.summary and "within the 1.5% clock tolerance" in steady.summary
    assert "; anchored " in steady.summary and "anchor bf16 matmul 2048x2048x4096" in steady.summary
    # a real +5% under a steady clock: caught on raw times, the failure says which series decided
    pc = _pc(tmp_path, perf_anchor_mode="adaptive")
    with pytest.raises(PipecheckFailure) as info:
        check_perf(pc, samples=_anchored(3, slowdown=0.05), env=ENV)
    assert "gate: median of the raw times slower" in str(info.value) and "gated on raw" in str(info.value)
    assert pc.results[-1].details["gated_on"] == "raw" and pc.results[-1].details["anchored_change"] > 0.03
    # the clock moved: ratios decide, and the summary gives the anchor's change and p
    moved = check_perf(_pc(tmp_path, perf_anchor_mode="adaptive"), samples=_anchored(4, clock=1.08), env=ENV)
    assert moved.verdict is Verdict.PASS and moved.details["gated_on"] == "anchored"
    assert re.search(r"gated on anchored ratios: the anchor moved \+\d\.\d%, p=\S+: the clock changed", moved.summary)


def test_anchor_mode_always_and_tolerance_from_the_config(tmp_path) -> None:
    check_perf(_pc(tmp_path, baseline_save=True), samples=_anchored(1), env=ENV)
    always = check_perf(_pc(tmp_path, perf_anchor_mode="always"), samples=_anchored(2), env=ENV)
    assert always.details["gated_on"] == "anchored" and "anchor mode 'always'" in always.summary
    # a tolerance of 0: any significant anchor change counts as a clock change
    strict = check_perf(_pc(tmp_path, perf_anchor_mode="adaptive", perf_clock_tolerance=0.0), samples=_anchored(2, clock=1.01), env=ENV)
    assert strict.details["gated_on"] == "anchored" and strict.details["clock_tolerance"] == 0.0
    loose = check_perf(_pc(tmp_path, perf_anchor_mode="adaptive", perf_clock_tolerance=0.05), samples=_anchored(2, clock=1.02), env=ENV)
    assert loose.details["gated_on"] == "raw" and "within the 5.0% clock tolerance" in loose.summary


def test_new_settings_defaults_and_validation() -> None:
    from pytest_pipecheck.config import SETTINGS_BY_NAME, ConfigError, apply_marker, resolve
    from pytest_pipecheck.perf.stats import (
        ANCHOR_MODES,
        DEFAULT_BASELINE_RUNS,
        DEFAULT_CLOCK_TOLERANCE,
        DEFAULT_THRESHOLD,
    )

    cfg = PipecheckConfig()
    assert cfg.perf_anchor_mode == "per-kind" and cfg.perf_clock_tolerance == DEFAULT_CLOCK_TOLERANCE
    assert cfg.perf_threshold == DEFAULT_THRESHOLD == 0.0275 and cfg.perf_baseline_runs == DEFAULT_BASELINE_RUNS == 2
    assert SETTINGS_BY_NAME["perf_clock_tolerance"].default == DEFAULT_CLOCK_TOLERANCE
    assert SETTINGS_BY_NAME["perf_anchor_mode"].default == ANCHOR_MODES[0] == "per-kind"
    assert SETTINGS_BY_NAME["perf_threshold"].default == DEFAULT_THRESHOLD
    assert SETTINGS_BY_NAME["perf_baseline_runs"].default == DEFAULT_BASELINE_RUNS
    run = resolve({"perf_clock_tolerance": "0.02"}, {"perf_anchor_mode": "Always"})
    assert run.perf_clock_tolerance == 0.02 and run.perf_anchor_mode == "always"
    assert run.sources["perf_anchor_mode"] == "command line"
    marked = apply_marker(run, {"perf_clock_tolerance": 0.01, "perf_anchor_mode": "adaptive"}, NODE)
    assert marked.perf_clock_tolerance == 0.01 and marked.perf_anchor_mode == "adaptive"
    with pytest.raises(ConfigError, match=r"^`--pipecheck-perf-anchor-mode=sometimes` from the command line must be "
                                          r"one of per-kind, always, adaptive$"):
        resolve({}, {"perf_anchor_mode": "sometimes"})
    with pytest.raises(ConfigError, match=r"^`pipecheck_perf_clock_tolerance = -0.01` from the ini file \(tox.ini\) "
                                          r"must be >= 0$"):
        resolve({"perf_clock_tolerance": "-0.01"}, {}, ini_file="tox.ini")
    with pytest.raises(ConfigError, match=r"`perf_clock_tolerance='two'` from the pipecheck marker on "
                                          + re.escape(NODE) + r" must be a number"):
        apply_marker(run, {"perf_clock_tolerance": "two"}, NODE)
    with pytest.raises(ConfigError, match=r"`perf_clock_tolerance=0.9` .* must be <= 0.5"):
        apply_marker(run, {"perf_clock_tolerance": 0.9}, NODE)



# --------------------------------------------------------------------------- pooled baselines, per-kind


def test_saved_baseline_pools_runs_and_the_marker_can_change_how_many(tmp_path, monkeypatch) -> None:
    fake = _FakeTiming(monkeypatch)
    r = check_perf(_pc(tmp_path, tier=GPU, baseline_save=True, perf_baseline_runs=3), lambda: None, flops=1e9,
                   env=ENV)
    assert len(fake.calls) == 3 and r.details["saved_runs"] == 3 and len(r.details["saved_run_medians_us"]) == 3
    stored = BaselineStore(str(tmp_path / "baselines")).lookup(environment_key_of(ENV), NODE, "default")
    assert stored.samples is not None and stored.samples.n == 300 and stored.samples.runs == 3
    anchors = [c["anchor"] for c in fake.calls]
    assert anchors[0] == "matmul" and anchors[1] == anchors[2] == Anchor.from_definition(dict(stored.samples.anchor))
    # a check times one run, and its summary names the pooled baseline
    r = check_perf(_pc(tmp_path, tier=GPU), lambda: None, flops=1e9, env=ENV)
    assert len(fake.calls) == 4 and r.verdict is Verdict.PASS and "baseline of 3 runs (" in r.summary
    assert r.details["baseline_runs"] == 3 and "re-save" not in r.summary
    # perf_baseline_runs=1: one run saved, and a check against a baseline of fewer runs than asked says so
    check_perf(_pc(tmp_path, tier=GPU, baseline_save=True, perf_baseline_runs=1), lambda: None, flops=1e9,
               env=ENV, case="one")
    assert len(fake.calls) == 5
    r = check_perf(_pc(tmp_path, tier=GPU), lambda: None, flops=1e9, env=ENV, case="one")
    assert "the baseline pools 1 run(s), fewer than perf_baseline_runs=2: re-save it" in r.summary


def test_per_kind_default_gates_a_copy_anchored_kernel_on_raw_times(tmp_path) -> None:
    copy = Anchor("copy", nbytes=2**27)
    check_perf(_pc(tmp_path, baseline_save=True), samples=_anchored(1, anchor=copy), env=ENV)
    r = check_perf(_pc(tmp_path), samples=_anchored(2, anchor=copy), env=ENV)
    assert r.verdict is Verdict.PASS and r.details["gated_on"] == "raw" and r.details["anchor_mode"] == "per-kind"
    assert "gated on raw: a copy anchor, so a memory-bound kernel" in r.summary
    # a real +5% of a memory-bound kernel: caught on raw times, with the threshold in the message
    pc = _pc(tmp_path)
    with pytest.raises(PipecheckFailure) as info:
        check_perf(pc, samples=_anchored(3, anchor=copy, slowdown=0.05), env=ENV)
    assert "gate: median of the raw times slower by more than 2.75% and" in str(info.value)


def test_baseline_runs_setting_is_validated() -> None:
    from pytest_pipecheck.config import ConfigError, apply_marker, resolve

    assert resolve({"perf_baseline_runs": "3"}, {}).perf_baseline_runs == 3
    assert apply_marker(PipecheckConfig(), {"perf_baseline_runs": 1}, NODE).perf_baseline_runs == 1
    with pytest.raises(ConfigError, match=r"`--pipecheck-perf-baseline-runs=0` from the command line must be >= 1"):
        resolve({}, {"perf_baseline_runs": "0"})
    with pytest.raises(ConfigError, match=r"`perf_baseline_runs=21` from the pipecheck marker on .* must be <= 20"):
        apply_marker(PipecheckConfig(), {"perf_baseline_runs": 21}, NODE)


def test_sanitizer_child_runs_the_kernel_once_and_does_not_time(tmp_path, monkeypatch) -> None:
    fake = _FakeTiming(monkeypatch)
    child = children.sanitizer("racecheck")
    calls: list[object] = []
    pc = _pc(tmp_path, tier=GPU, role=child, baseline_save=True)
    r = pc.check_perf(lambda: calls.append(None), flops=1e9, env=ENV)
    assert fake.calls == [] and len(calls) == 1  # launched once for the sanitizer, never timed
    assert r.verdict is Verdict.SKIP and r.summary.startswith("not timed under compute-sanitizer racecheck")
    assert not os.path.exists(tmp_path / "baselines")  # nothing saved from a child
    # a callable that takes an input index gets index 0
    _pc(tmp_path, tier=GPU, role=child).check_perf(lambda i: calls.append(i), flops=1e9, env=ENV, case="rotated",
                                                   n_inputs=4)
    assert calls[-1] == 0 and fake.calls == []


# docs/verdicts.md item 15: on the GPU tier a missing baseline directory is an error, never a skip
@pytest.mark.parametrize("kind", ["missing", "file"])
def test_gpu_tier_missing_baseline_dir_is_an_error_naming_it(tmp_path, kind: str) -> None:
    where = tmp_path / "baselines"
    if kind == "file":
        where.write_text("not a directory")
    config = PipecheckConfig(baseline_dir=str(where), sources={"baseline_dir": "command line"})
    pc = Pipecheck(NODE, config, GPU, run_seed=1)
    what = "does not exist" if kind == "missing" else "is not a directory"
    with pytest.raises(PipecheckError, match=rf"directory {re.escape(str(where))} \(baseline_dir from the "
                                             rf"command line\) {what}.*GPU tier.*error, not a skip"):
        check_perf(pc, samples=_run(1), env=ENV)
    assert [r.verdict for r in pc.results] == [Verdict.ERROR]
    assert pc.results[0].details["baseline_dir"] == str(where)


def test_gpu_tier_save_creates_a_missing_baseline_dir(tmp_path) -> None:
    pc = _pc(tmp_path, tier=GPU, baseline_save=True)
    assert check_perf(pc, samples=_run(1), env=ENV).verdict is Verdict.PASS
    assert len(os.listdir(tmp_path / "baselines")) == 1


def test_cpu_tier_missing_baseline_dir_stays_a_skip_with_the_reason(tmp_path) -> None:
    r = check_perf(_pc(tmp_path), samples=_run(1), env=ENV)
    assert r.verdict is Verdict.SKIP and "does not exist" in r.summary
