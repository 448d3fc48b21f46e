"""check_perf's logic with injected samples: skip, pass, fail, save, bad input (no GPU needed)."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

from pytest_pipecheck.config import PipecheckConfig
from pytest_pipecheck.device import DeviceInfo, TierInfo
from pytest_pipecheck.fixture import Pipecheck
from pytest_pipecheck.perf.baseline import BaselineStore
from pytest_pipecheck.perf.gate import check_perf, environment_key
from pytest_pipecheck.perf.stats import NoiseModel
from pytest_pipecheck.perf.timing import Ceilings, roofline
from pytest_pipecheck.results import PipecheckError, PipecheckFailure, Verdict

CPU = TierInfo("cpu", None, "no NVIDIA driver found (nvidia-smi is not on PATH)", {"torch": "2.13.0"})
GPU = TierInfo("gpu", DeviceInfo(0, "NVIDIA H100 80GB HBM3", "9.0", 132, 81559, "580.65"), "",
               {"torch": "2.11.0", "triton": "3.6.0", "cupy": None})
NODE = "tests/test_k.py::test_k[64]"
ENV = {"gpu": "NVIDIA H100 80GB HBM3", "sm_count": 132, "compute_capability": "9.0", "driver": "580.65",
       "cuda": "13.0", "torch": "2.11.0", "triton": "3.6.0"}


def _pc(tmp_path, tier: TierInfo = CPU, **cfg: object) -> Pipecheck:
    config = PipecheckConfig(baseline_dir=str(tmp_path / "baselines"), **cfg)  # type: ignore[arg-type]
    return Pipecheck(NODE, config, tier, run_seed=1)


def _run(seed: int, slowdown: float = 0.0) -> list[float]:
    return list(NoiseModel().sample_runs(np.random.default_rng(seed), 1, 100, slowdown)[0])


def test_cpu_tier_skips_with_reason(tmp_path) -> None:
    pc = _pc(tmp_path)
    r = check_perf(pc, lambda: None, flops=1e9)
    assert r.verdict is Verdict.SKIP
    assert r.summary == "perf needs a CUDA GPU: no NVIDIA driver found (nvidia-smi is not on PATH)"
    assert pc.results == [r]


def test_not_selected_skips(tmp_path) -> None:
    r = check_perf(_pc(tmp_path, checks=("coverage",)), samples=_run(1), env=ENV)
    assert r.verdict is Verdict.SKIP and "not among the selected checks" in r.summary


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
    assert check_perf(_pc(tmp_path), samples=_run(3, slowdown=0.2), env=ENV).verdict is Verdict.PASS


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
