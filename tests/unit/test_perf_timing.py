"""timing.measure with anchors, on a simulated device (no GPU): interleaving, settle, and the clock.

The fake torch below keeps one device timeline in microseconds. Every launch advances it by its
cost divided by the current clock speed; events read it. The clock speed is a function of how much
work the device has done, so a run can start boosted and slow down part-way, as a GPU under a power
limit does. Only what measure() touches is faked.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np
import pytest

from pytest_pipecheck.perf import timing
from pytest_pipecheck.perf.stats import compare
from pytest_pipecheck.perf.timing import Anchor, Ceilings

CEIL = Ceilings({"fp16": 749e12, "bf16": 775e12}, 4123e9, "fake")


class FakeDevice:
    def __init__(self, clock: Any) -> None:
        self.now = 0.0
        self.work = 0.0
        self.clock = clock  # kernel and anchor work done (us at speed 1) -> speed
        self.log: list[str] = []

    def run(self, what: str, cost_us: float) -> None:
        speed = self.clock(self.work)
        self.now += cost_us / speed
        if what in ("kernel", "anchor"):
            self.work += cost_us
        self.log.append(what)


def fake_torch(dev: FakeDevice, kernel_cost: float = 70.0) -> Any:
    torch: Any = types.ModuleType("torch")
    torch.int32, torch.uint8, torch.bfloat16, torch.float16 = "int32", "uint8", "bf16", "fp16"

    class Event:
        def __init__(self, enable_timing: bool = False) -> None:
            self.t = 0.0

        def record(self) -> None:
            self.t = dev.now

        def synchronize(self) -> None:
            pass

        def elapsed_time(self, other: Event) -> float:
            return (other.t - self.t) / 1000.0  # ms

    class Tensor:
        def __init__(self, nbytes: int) -> None:
            self.nbytes = nbytes

        def zero_(self) -> None:
            dev.run("flush", 30.0)

        def numel(self) -> int:
            return self.nbytes // 4

        def copy_(self, src: Tensor) -> None:
            dev.run("anchor", 2.0 * src.nbytes / CEIL.copy_bytes_per_s * 1e6)

    class Generator:
        def __init__(self, device: str = "") -> None:
            pass

        def manual_seed(self, seed: int) -> Generator:
            return self

    def matmul(a: Any, b: Any, out: Any = None) -> None:
        m, k = a
        _, n = b
        dev.run("anchor", 2.0 * m * n * k / 600e12 * 1e6)

    props = types.SimpleNamespace(L2_cache_size=50 * 2**20, name="fake", multi_processor_count=132)
    torch.cuda = types.SimpleNamespace(
        is_available=lambda: True, current_device=lambda: 0, get_device_properties=lambda d: props,
        current_stream=lambda: None, Event=Event, synchronize=lambda: None,
        _sleep=lambda cycles: dev.run("sleep", cycles / 1000.0),
    )
    torch.empty = lambda *shape, dtype=None, device=None: Tensor(shape[0] * 4 if dtype == "int32" else shape[0])
    torch.ones = lambda n, dtype=None, device=None: Tensor(n)
    torch.empty_like = lambda t: Tensor(t.nbytes)
    torch.randn = lambda *shape, **kw: shape
    torch.Generator = Generator
    torch.Tensor = Tensor  # scipy checks isinstance(x, torch.Tensor) when torch is imported
    torch.matmul = matmul
    torch.kernel = lambda: dev.run("kernel", kernel_cost)
    return torch


@pytest.fixture
def device(monkeypatch):
    def make(clock: Any = lambda work: 1.0, kernel_cost: float = 70.0) -> tuple[FakeDevice, Any]:
        dev = FakeDevice(clock)
        torch = fake_torch(dev, kernel_cost)
        monkeypatch.setitem(sys.modules, "torch", torch)
        timing._sleep_cycles_per_us.cache_clear()
        return dev, torch

    yield make
    timing._sleep_cycles_per_us.cache_clear()


def test_anchor_is_interleaved_sample_by_sample(device) -> None:
    dev, torch = device()
    s = timing.measure(torch.kernel, n_samples=20, warmup_s=0.0, anchor="matmul", ceilings=CEIL)
    assert s.anchored and s.n == 20 and s.anchor_us is not None and len(s.anchor_us) == 20
    assert s.anchor is not None and s.anchor["kind"] == "matmul" and s.anchor["k"] == 4096
    timed = [x for x in dev.log if x in ("kernel", "anchor")][-40:]
    assert timed == ["kernel", "anchor"] * 20
    # in the timed loop every launch has its own sleep and flush (cold L2 for both)
    loop = dev.log[dev.log.index("flush"):]
    assert loop[:6] == ["flush", "kernel", "sleep", "flush", "anchor", "sleep"]
    assert s.median == pytest.approx(70.0) and s.meta["anchor"] == "bf16 matmul 2048x2048x4096"


def test_anchor_cancels_a_clock_that_drops_mid_run(device) -> None:
    # boosted for the first half of the work, 20% slower after: the 221.5 vs 265.7 us Triton GEMM case
    def clock(work: float) -> float:
        return 1.2 if work < 3000 else 1.0

    _, torch = device(clock)
    base = timing.measure(torch.kernel, n_samples=20, warmup_s=0.0, anchor=Anchor("matmul", "bf16", 2048, 2048, 4096))
    cand = timing.measure(torch.kernel, n_samples=20, warmup_s=0.0, anchor=Anchor("matmul", "bf16", 2048, 2048, 4096))
    assert base.median < cand.median * 0.9  # raw: the baseline ran boosted
    c = compare(base, cand, alpha=0.01)
    assert c.anchored and abs(c.change) < 1e-6 and not c.regressed
    assert compare(base, cand, alpha=0.01, anchored=False).regressed
    assert np.median(base.ratios()) == pytest.approx(np.median(cand.ratios()))


def test_settle_runs_the_anchor_before_the_first_sample(device, monkeypatch) -> None:
    dev, torch = device()
    ticks = iter(np.arange(0.0, 1e6, 0.01))  # each host clock read advances 10 ms
    monkeypatch.setattr(timing.time, "perf_counter", lambda: float(next(ticks)))
    s = timing.measure(torch.kernel, n_samples=10, warmup_s=0.0, anchor=Anchor("copy", nbytes=2**27),
                       settle_s=0.2)
    assert s.meta["settle_calls"] >= 10 and s.meta["settle_s"] == 0.2
    first_sample = dev.log.index("flush")
    assert dev.log[:first_sample].count("anchor") >= s.meta["settle_calls"]
    no_anchor = timing.measure(torch.kernel, n_samples=10, warmup_s=0.0, settle_s=0.2)
    assert not no_anchor.anchored and no_anchor.meta["settle_calls"] > 0 and "anchor" not in no_anchor.meta


def test_bad_settle_and_unsized_anchor(device) -> None:
    _, torch = device()
    with pytest.raises(timing.PipecheckError, match=r"settle_s=-1"):
        timing.measure(torch.kernel, settle_s=-1)
    with pytest.raises(timing.PipecheckError, match=r"needs the measured ceilings"):
        timing.measure(torch.kernel, anchor="copy")


def test_check_perf_end_to_end_on_a_simulated_gpu(device, monkeypatch, tmp_path) -> None:
    # the tests/gpu GEMM scenario: baseline boosted (after idle), rerun 20% slower clock, then a
    # serialized pipeline (+40% work) under the slower clock
    import dataclasses

    from pytest_pipecheck.config import PipecheckConfig
    from pytest_pipecheck.device import DeviceInfo, TierInfo
    from pytest_pipecheck.fixture import Pipecheck
    from pytest_pipecheck.results import PipecheckFailure, Verdict

    speed = {"value": 1.2}
    dev, torch = device(lambda work: speed["value"], kernel_cost=265.0)
    monkeypatch.setattr(timing, "current_ceilings", lambda: CEIL)
    gpu = TierInfo("gpu", DeviceInfo(0, "NVIDIA H200", "9.0", 132, 143771, "580.65"), "", {"torch": "2.11.0"})
    cfg = PipecheckConfig(baseline_dir=str(tmp_path), checks=("perf",))

    def pc(save: bool) -> Pipecheck:
        return Pipecheck("tests/gpu/test_perf_gpu.py::gemm", dataclasses.replace(cfg, baseline_save=save), gpu, 0)

    kw: dict[str, Any] = {"flops": 2.0 * 4096**3, "n_samples": 30, "warmup_s": 0.0, "settle_s": 0.0}
    saved = pc(True).check_perf(torch.kernel, **kw)
    assert saved.verdict is Verdict.PASS and "anchor fp16 matmul 2048x2048x16384" in saved.summary
    speed["value"] = 1.0
    again = pc(False).check_perf(torch.kernel, **kw)
    assert again.verdict is Verdict.PASS and again.details["anchored"] and again.details["raw_change"] > 0.15
    with pytest.raises(PipecheckFailure):
        pc(False).check_perf(torch.kernel, anchor=None, **kw)  # raw times: the clock's false alarm
    serialized = fake_torch(dev, kernel_cost=265.0 * 1.4).kernel
    with pytest.raises(PipecheckFailure, match=r"baseline of 2 runs \(\+40\.0% anchored to fp16 matmul"):
        pc(False).check_perf(serialized, **kw)
