"""The perf gate in named steps, each on its own: its arguments checked, the baseline looked up, the
stored-baseline gate. The whole check is tested in test_perf_gate.py."""

from __future__ import annotations

import pytest

from pytest_pipecheck.config import PipecheckConfig
from pytest_pipecheck.device import DeviceInfo, TierInfo
from pytest_pipecheck.fixture import Pipecheck
from pytest_pipecheck.perf import gate
from pytest_pipecheck.perf.baseline import BaselineStore, EnvKey
from pytest_pipecheck.perf.stats import Samples
from pytest_pipecheck.results import PipecheckError, PipecheckFailure, Verdict

GPU = TierInfo("gpu", DeviceInfo(0, "NVIDIA H100 80GB HBM3", "9.0", 132, 81559, "580.65"), "",
               {"torch": "2.11.0", "triton": "3.6.0", "cupy": None})
NODE = "tests/test_k.py::test_k"
KEY = EnvKey({"gpu": "NVIDIA H100 80GB HBM3", "sm_count": 132})


def _pc(tmp_path, **cfg: object) -> Pipecheck:  # type: ignore[no-untyped-def]
    return Pipecheck(NODE, PipecheckConfig(baseline_dir=str(tmp_path / "baselines"), **cfg), GPU, 1)  # type: ignore[arg-type]


def test_the_arguments_are_checked_first(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pc = _pc(tmp_path)
    assert gate._checked_args(pc, lambda: None, 1e9, None, None, None, "auto", {}) == (1e9, None, "default")
    with pytest.raises(PipecheckError, match=r"check_perf\(case=3\) in tests/test_k.py::test_k: case must be a string"):
        gate._checked_args(pc, lambda: None, None, None, 3, None, "auto", {})
    with pytest.raises(PipecheckError, match=r"unknown keyword 'repz'"):
        gate._checked_args(pc, lambda: None, None, None, None, None, "auto", {"repz": 3})


def test_a_missing_baseline_directory_on_the_gpu_tier_is_an_error_unless_compare_mode_decides(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pc = _pc(tmp_path)
    with pytest.raises(PipecheckError, match=r"perf gate cannot run"):
        gate._lookup(pc, KEY, "default", "k", compare_mode_on=False)
    assert pc.results[-1].verdict is Verdict.ERROR
    store, found = gate._lookup(_pc(tmp_path), KEY, "default", "k", compare_mode_on=True)
    assert store is not None and found is not None and found.samples is None
    assert gate._lookup(Pipecheck(NODE, PipecheckConfig(baseline_dir=None), GPU, 1), KEY, "default", "k",
                        compare_mode_on=False) == (None, None)


def test_the_stored_gate_on_its_own(tmp_path) -> None:  # type: ignore[no-untyped-def]
    base = Samples.of([100.0 + 0.1 * (i % 7) for i in range(60)], "baseline")
    BaselineStore(str(tmp_path / "baselines"), "here").save(KEY, NODE, "default", base.to_json())
    pc = _pc(tmp_path)
    _, found = gate._lookup(pc, KEY, "default", "k", compare_mode_on=False)
    assert found is not None and found.samples is not None
    details = {"anchor": {"requested": None}}
    same = Samples.of([100.0 + 0.1 * (i % 5) for i in range(60)], "run")
    ok = gate._gate(pc, found, same, dict(details), kernel="k", case_id="default", roof="", saved="", new_at_rev=None)
    assert ok.verdict is Verdict.PASS
    slower = Samples.of([110.0 + 0.1 * (i % 5) for i in range(60)], "run")
    with pytest.raises(PipecheckFailure, match=r"perf regression in tests/test_k.py::test_k \[case default\]"):
        gate._gate(_pc(tmp_path), found, slower, dict(details), kernel="k", case_id="default", roof="", saved="",
                   new_at_rev=None)
