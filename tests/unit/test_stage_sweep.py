"""check_stage_sweep's logic with a fake timer: pass, fail, does-not-fit rows, prediction, occupancy, bad input."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from pytest_pipecheck import children
from pytest_pipecheck.checks.stage_sweep import CHECK, check_stage_sweep, does_not_fit
from pytest_pipecheck.children import Role
from pytest_pipecheck.config import PipecheckConfig
from pytest_pipecheck.device import DeviceInfo, TierInfo
from pytest_pipecheck.fixture import Pipecheck
from pytest_pipecheck.perf.cost_model import predict_from_variants
from pytest_pipecheck.perf.stats import Samples
from pytest_pipecheck.report import json_report, plots
from pytest_pipecheck.report.html import render
from pytest_pipecheck.results import CheckResult, PipecheckError, PipecheckFailure, Verdict

CPU = TierInfo("cpu", None, "no NVIDIA driver found (nvidia-smi is not on PATH)", {"torch": "2.11.0"})
GPU = TierInfo("gpu", DeviceInfo(0, "NVIDIA H100 80GB HBM3", "9.0", 132, 81559, "580.65"), "",
               {"torch": "2.11.0", "triton": "3.6.0", "cupy": None})
NODE = "tests/test_gemm.py::test_gemm_stages"
# medians per stage count (us), shaped like the 4096^3 fp16 Triton GEMM on an H100
TIMES = {1: 383.0, 2: 300.0, 3: 222.0, 4: 262.0, 5: 280.0}
FLOPS = 2.0 * 4096**3


def _pc(tier: TierInfo = CPU, role: Role = children.NONE, **cfg: Any) -> Pipecheck:
    return Pipecheck(NODE, PipecheckConfig(**cfg), tier, run_seed=1, role=role)


class OutOfResources(Exception):
    """Triton's exception, as far as the check can tell (name, module, attributes)."""

    def __init__(self, required: int, limit: int, name: str) -> None:
        super().__init__(f"out of resource: {name}, Required: {required}, Hardware limit: {limit}. "
                         "Reducing block sizes or `num_stages` may help.")
        self.required, self.limit, self.name = required, limit, name


OutOfResources.__module__ = "triton.runtime.errors"


class Kernel:
    """A fake kernel: ``run(s)`` notes the stage count, or raises what ``fails[s]`` holds."""

    def __init__(self, times: dict[int, float] | None = None, fails: dict[int, BaseException] | None = None):
        self.times = dict(TIMES if times is None else times)
        self.fails = fails or {}
        self.last: int | None = None
        self.launched: list[int] = []

    def run(self, stages: int) -> None:
        if stages in self.fails:
            raise self.fails[stages]
        self.last = stages
        self.launched.append(stages)

    def timer(self, fn: Callable[[], Any], **kw: Any) -> list[float]:
        """Like perf.timing.measure: calls fn (the warm-up compiles there), returns times in us."""
        fn()
        assert self.last is not None
        median = self.times[self.last]
        return [median * (1.0 + 0.002 * i) for i in range(-10, 11)]


def _sweep(pc: Pipecheck | None = None, kernel: Kernel | None = None, stages: Sequence[int] = (1, 2, 3, 4, 5),
           **kw: Any) -> CheckResult:
    k = kernel or Kernel()
    kw.setdefault("kernel", "triton_gemm")
    return check_stage_sweep(pc or _pc(), k.run, stages, timer=k.timer, **kw)


# ----------------------------------------------------------------------------- verdicts


def test_chosen_is_the_best_passes_with_the_key_number() -> None:
    pc = _pc()
    r = _sweep(pc, chosen=3, flops=FLOPS)
    assert r.verdict is Verdict.PASS and r.check == CHECK == "perf:stage_sweep"
    assert r.summary == "best 3 stages (0.222 ms, 619 TFLOP/s), chosen 3"
    assert pc.results == [r] and r.kernel == "triton_gemm"
    d = r.details
    assert (d["best_stages"], d["chosen"], d["loss"], d["max_loss"]) == (3, 3, 0.0, 0.05)
    rows = d["stage_sweep"]
    assert [row["stages"] for row in rows] == [1, 2, 3, 4, 5]
    for row in rows:
        assert {"stages", "measured_us", "q1_us", "q3_us", "predicted_us", "blocks_per_sm", "tflops",
                "note"} <= set(row)
        assert row["q1_us"] < row["measured_us"] < row["q3_us"] and row["n"] == 21
        assert row["predicted_us"] is None and row["blocks_per_sm"] is None and row["note"] == ""
        assert row["tflops"] == pytest.approx(FLOPS / (TIMES[row["stages"]] * 1e-6) / 1e12)
    assert rows[2]["measured_us"] == pytest.approx(222.0)


def test_small_loss_within_max_loss_passes_and_says_so() -> None:
    r = _sweep(kernel=Kernel({**TIMES, 4: 225.0}), chosen=4)
    assert r.verdict is Verdict.PASS
    assert r.summary == "best 3 stages (0.222 ms), chosen 4 (+1.4%, max 5.0%)"
    assert r.details["loss"] == pytest.approx(225.0 / 222.0 - 1)


def test_chosen_too_slow_fails_with_kernel_and_numbers() -> None:
    pc = _pc()
    with pytest.raises(PipecheckFailure) as info:
        _sweep(pc, chosen=4, flops=FLOPS)
    msg = str(info.value)
    first = msg.splitlines()[0]
    assert first == ("pipecheck stage sweep of kernel 'triton_gemm': stages=4 is 18% slower than stages=3 "
                     "(the best): 0.262 ms vs 0.222 ms; allowed 5.0% (max_loss)")
    # the table below: every stage count, the best and the chosen marked
    assert re.search(r"^\s+3\s+0\.222 ms .* best$", msg, re.M)
    assert re.search(r"^\s+4\s+0\.262 ms .* chosen$", msg, re.M)
    r = pc.results[-1]
    assert info.value.result is r and r.verdict is Verdict.FAIL
    assert r.summary == "chosen 4 stages 18% slower than best 3 (0.262 ms vs 0.222 ms)"
    assert r.details["loss"] == pytest.approx(262.0 / 222.0 - 1)


def test_a_larger_max_loss_accepts_the_same_sweep() -> None:
    r = _sweep(chosen=4, max_loss=0.2)
    assert r.verdict is Verdict.PASS and "chosen 4 (+18%, max 20%)" in r.summary


def test_without_chosen_it_passes_and_records() -> None:
    r = _sweep(kernel=Kernel({**TIMES, 1: 52.5}))
    assert r.verdict is Verdict.PASS and r.summary == "best 1 stages (52.50 us)"
    assert r.details["chosen"] is None and r.details["loss"] is None and r.details["best_stages"] == 1


def test_kernel_name_defaults_to_the_marker_and_the_message_names_the_test_without_one() -> None:
    k = Kernel()
    r = check_stage_sweep(_pc(kernel="gemm_from_marker"), k.run, [3, 4], timer=k.timer)
    assert r.kernel == "gemm_from_marker"
    with pytest.raises(PipecheckFailure, match=re.escape(f"stage sweep of the kernel in {NODE}: stages=4 is")):
        check_stage_sweep(_pc(), k.run, [3, 4], chosen=4, timer=k.timer)


def test_expected_failures_are_marked_caught() -> None:
    pc = _pc()
    with pc.expecting_failures(), pytest.raises(PipecheckFailure):
        _sweep(pc, chosen=1)
    assert pc.results[-1].expected


# ----------------------------------------------------------------------------- does not fit


def test_out_of_resources_rows_say_does_not_fit() -> None:
    fails: dict[int, BaseException] = {
        6: OutOfResources(262144, 232448, "shared memory"),
        7: RuntimeError("CUDA error: too many resources requested for launch\nCUDA kernel errors might be ..."),
    }
    k = Kernel({**TIMES}, fails)
    r = _sweep(kernel=k, stages=(3, 4, 6, 7), chosen=3)
    assert r.verdict is Verdict.PASS
    assert r.summary == "best 3 stages (0.222 ms), chosen 3; stages 6, 7 do not fit"
    rows = {row["stages"]: row for row in r.details["stage_sweep"]}
    assert rows[6]["note"] == "does not fit: out of shared memory, needs 256 KB, the limit is 227 KB"
    assert rows[7]["note"] == "does not fit: RuntimeError: CUDA error: too many resources requested for launch"
    for s in (6, 7):
        assert rows[s]["measured_us"] is None and rows[s]["tflops"] is None and rows[s]["n"] == 0
    assert r.details["does_not_fit"] == [6, 7]
    assert k.launched == [3, 4]


def test_chosen_that_does_not_fit_fails() -> None:
    k = Kernel(fails={5: OutOfResources(262144, 232448, "shared memory")})
    pc = _pc()
    with pytest.raises(PipecheckFailure) as info:
        _sweep(pc, kernel=k, stages=(3, 5), chosen=5)
    assert str(info.value).splitlines()[0] == (
        "pipecheck stage sweep of kernel 'triton_gemm': stages=5 (the chosen) does not fit: out of shared memory, "
        "needs 256 KB, the limit is 227 KB; the fastest that fits is stages=3 (0.222 ms)")
    assert pc.results[-1].summary == "chosen 5 stages does not fit; best 3 stages (0.222 ms)"


def test_nothing_fits_fails_even_without_chosen() -> None:
    k = Kernel(fails={s: OutOfResources(300000, 232448, "shared memory") for s in (4, 5)})
    with pytest.raises(PipecheckFailure, match=r"no stage count of 4, 5 fits on this GPU"):
        _sweep(kernel=k, stages=(4, 5))


def test_any_other_launch_error_is_recorded_as_error_and_propagates() -> None:
    k = Kernel(fails={4: ValueError("pointer argument cannot be accessed from Triton")})
    pc = _pc()
    with pytest.raises(ValueError, match="cannot be accessed"):
        _sweep(pc, kernel=k, stages=(3, 4, 5), chosen=3)
    r = pc.results[-1]
    assert r.verdict is Verdict.ERROR
    assert r.summary == "stages=4: ValueError: pointer argument cannot be accessed from Triton"
    assert [row["stages"] for row in r.details["stage_sweep"]] == [3]


@pytest.mark.parametrize("exc, expected", [
    (OutOfResources(200000, 101376, "shared memory"), "out of shared memory, needs 195 KB + 320 B, the limit is 99 KB"),
    (RuntimeError("CUDA error: too many resources requested for launch"), "RuntimeError: CUDA error: too many"),
    (RuntimeError("CUDA_ERROR_OUT_OF_RESOURCES: too many resources requested for launch"), "RuntimeError: CUDA_"),
    (RuntimeError("cudaErrorLaunchOutOfResources"), "RuntimeError: cudaErrorLaunchOutOfResources"),
    (RuntimeError("requested shared memory (300000 bytes) exceeds the device limit"), "RuntimeError: requested"),
    (RuntimeError("CUDA error: an illegal memory access was encountered"), None),
    (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), None),
    (ValueError("shared memory layout is swizzled"), None),
])
def test_does_not_fit_recognises_resource_errors_only(exc: BaseException, expected: str | None) -> None:
    got = does_not_fit(exc)
    if expected is None:
        assert got is None
    else:
        assert got is not None and got.startswith(expected)


def test_an_out_of_resources_class_outside_triton_is_not_trusted() -> None:
    class OutOfResourcesElsewhere(Exception):
        pass

    OutOfResourcesElsewhere.__name__ = "OutOfResources"
    assert does_not_fit(OutOfResourcesElsewhere("lost")) is None


# ----------------------------------------------------------------------------- prediction and occupancy


def test_prediction_from_measured_variant_times() -> None:
    r = _sweep(chosen=3, load_only=150.0, compute_only={1: 200.0, 2: 200.0, 3: 180.0, 4: 180.0}, tiles=64)
    rows = {row["stages"]: row for row in r.details["stage_sweep"]}
    for s in (1, 2, 3, 4):
        co = 200.0 if s < 3 else 180.0
        expected = predict_from_variants(150.0, co, 64, s)
        assert rows[s]["predicted_us"] == pytest.approx(expected.pipelined)
        assert rows[s]["bound"] == expected.bound and rows[s]["load_only_us"] == 150.0
    # stages=1 is the serialized time; deeper stage counts overlap
    assert rows[1]["predicted_us"] == pytest.approx(350.0)
    assert rows[2]["predicted_us"] < rows[1]["predicted_us"]
    assert rows[5]["predicted_us"] is None and rows[5]["note"] == "no prediction: no variant time for this stage count"
    assert r.details["tiles"] == 64


def test_prediction_from_timed_variant_callables() -> None:
    k = Kernel({**TIMES})
    variant_times = {("load", s): 100.0 + s for s in TIMES} | {("compute", s): 150.0 for s in TIMES}
    current: list[tuple[str, int]] = []

    def timer(fn: Callable[[], Any], **kw: Any) -> Samples:
        current.clear()
        k.last = None
        fn()
        us = TIMES[k.last] if k.last is not None else variant_times[current[0]]
        return Samples.of([us] * 5)

    def load_only(s: int) -> None:
        current.append(("load", s))

    def compute_only(s: int) -> None:
        current.append(("compute", s))

    r = check_stage_sweep(_pc(), k.run, [2, 3], timer=timer, load_only=load_only, compute_only=compute_only,
                          tiles=32, kernel="g")
    rows = {row["stages"]: row for row in r.details["stage_sweep"]}
    for s in (2, 3):
        assert rows[s]["load_only_us"] == 100.0 + s and rows[s]["compute_only_us"] == 150.0
        assert rows[s]["predicted_us"] == pytest.approx(predict_from_variants(100.0 + s, 150.0, 32, s).pipelined)


def test_a_variant_that_does_not_fit_leaves_the_prediction_empty() -> None:
    k = Kernel()

    def load_only(s: int) -> None:
        raise OutOfResources(300000, 232448, "shared memory")

    r = check_stage_sweep(_pc(), k.run, [3], timer=k.timer, load_only=load_only, compute_only=100.0, tiles=8)
    row = r.details["stage_sweep"][0]
    assert row["measured_us"] == pytest.approx(222.0) and row["predicted_us"] is None
    assert row["note"].startswith("load_only variant does not fit: out of shared memory")


def test_blocks_per_sm_from_resources_per_stage_count() -> None:
    from pytest_pipecheck.resources.cubin import KernelResources

    # Triton fp16 GEMM 128x128x64, 4 warps, on sm_90 (docs/validation/2026-11-22-h200-0223/stage_sweep.md)
    regs = {1: 242, 2: 196, 3: 196, 4: 211, 5: 205}
    res: dict[int, Any] = {s: {"threads": 128, "registers": regs[s], "shared": 32768 * s} for s in (1, 2, 3, 4)}
    res[5] = KernelResources("gemm_kernel", "gemm_kernel", "sm_90", registers=205, dynamic_smem=163840, num_warps=4)
    r = _sweep(chosen=3, resources=res, arch="sm_90")
    rows = {row["stages"]: row for row in r.details["stage_sweep"]}
    assert [rows[s]["blocks_per_sm"] for s in (1, 2, 3, 4, 5)] == [2, 2, 2, 1, 1]
    assert rows[4]["limiter"] == "shared_memory" and rows[4]["smem_bytes"] == 131072
    assert r.details["arch"] == "sm_90"


def test_resources_callable_is_called_after_timing_and_defaults_to_the_gpu_arch() -> None:
    k = Kernel()
    seen: list[tuple[int, int | None]] = []

    def resources(s: int) -> dict[str, int]:
        seen.append((s, k.last))
        if s == 5:
            raise PipecheckError("compiled Triton kernel has no n_regs (not loaded on a GPU)")
        return {"num_warps": 4, "registers": 168, "shared": 32768 * s}

    r = check_stage_sweep(_pc(GPU), k.run, [3, 4, 5], timer=k.timer, resources=resources)
    assert seen == [(3, 3), (4, 4), (5, 5)]
    rows = {row["stages"]: row for row in r.details["stage_sweep"]}
    assert r.details["arch"] == "sm_90" and rows[3]["blocks_per_sm"] == 2 and rows[4]["blocks_per_sm"] == 1
    assert rows[5]["blocks_per_sm"] is None
    assert rows[5]["note"] == "blocks/SM unknown: compiled Triton kernel has no n_regs (not loaded on a GPU)"


def test_bad_resources_name_the_stage_count() -> None:
    with pytest.raises(PipecheckError, match=r"resources\[3\]=\.\.\.\) in .*: needs threads \(or num_warps\)"):
        _sweep(stages=(3,), resources={3: {"registers": 96}}, arch="sm_90")
    with pytest.raises(PipecheckError, match=r"resources\[3\]=\.\.\.\) in .*: unknown key 'smem_kb'"):
        _sweep(stages=(3,), resources={3: {"threads": 128, "registers": 96, "smem_kb": 9}}, arch="sm_90")
    with pytest.raises(PipecheckError, match=r"resources=\.\.\.\) in .*: stage count 9 is not in stages"):
        _sweep(stages=(3,), resources={9: {"threads": 128, "registers": 96}}, arch="sm_90")
    with pytest.raises(PipecheckError, match=r"check_stage_sweep\(arch='sm_99x'\)"):
        _sweep(stages=(3,), resources={3: {"threads": 128, "registers": 96}}, arch="sm_99x")


# ----------------------------------------------------------------------------- tiers and timing


def test_cpu_tier_skips_with_the_reason() -> None:
    pc = _pc()
    r = check_stage_sweep(pc, lambda s: None, [2, 3], chosen=3)
    assert r.verdict is Verdict.SKIP
    assert r.summary == "stage sweep needs a CUDA GPU: no NVIDIA driver found (nvidia-smi is not on PATH)"
    assert r.details["reason"] == r.summary and pc.results == [r]


def test_not_selected_skips() -> None:
    k = Kernel()
    r = _pc(checks=("coverage",)).check_stage_sweep(k.run, (1, 2, 3, 4, 5), timer=k.timer, kernel="triton_gemm",
                                                    chosen=3)
    assert r.verdict is Verdict.SKIP and r.summary == "not selected: checks=coverage from the configuration does not include perf"


def test_gpu_tier_times_with_perf_timing_measure(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_pipecheck.perf import timing

    k = Kernel()
    calls: list[dict[str, Any]] = []

    def measure(fn: Callable[[], Any], **kw: Any) -> Samples:
        calls.append(kw)
        fn()
        assert k.last is not None
        return Samples.of([TIMES[k.last]] * 10, mode="cold")

    monkeypatch.setattr(timing, "measure", measure)
    pc = _pc(GPU)
    r = pc.check_stage_sweep(k.run, [2, 3], chosen=3, kernel="g", n_samples=40, warmup_s=0.1)
    assert r.verdict is Verdict.PASS and r.summary == "best 3 stages (0.222 ms), chosen 3"
    assert calls == [{"n_samples": 40, "warmup_s": 0.1, "settle_s": timing.DEFAULT_SETTLE_S}] * 2
    assert r.details["timing"] == {"mode": "cold"}
    assert "gpu" in r.details  # pc.record names the GPU that ran it


def test_timer_output_is_validated() -> None:
    k = Kernel()
    with pytest.raises(PipecheckError, match=r"check_stage_sweep in .*: timer for stages=3: sample 0 is -1.0"):
        check_stage_sweep(_pc(), k.run, [3], timer=lambda fn, **kw: (fn(), [-1.0, 2.0])[1])


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("kwargs, message", [
    ({"stages": []}, r"check_stage_sweep\(stages=\[\]\) in .*: give at least one stage count"),
    ({"stages": 3}, r"check_stage_sweep\(stages=3\) in .*: give a list of stage counts"),
    ({"stages": "345"}, r"check_stage_sweep\(stages='345'\) in .*: give a list of stage counts"),
    ({"stages": [2, 3.0]}, r"check_stage_sweep\(stages=\.\.\.\) in .*: stage count 3.0 is not an integer"),
    ({"stages": [2, True]}, r"stage count True is not an integer"),
    ({"stages": [0, 1]}, r"stage count 0 must be >= 1"),
    ({"stages": [2, 2]}, r"stage count 2 is given twice"),
    ({"max_loss": -0.01}, r"check_stage_sweep\(max_loss=-0.01\) in .*: must be >= 0"),
    ({"max_loss": float("nan")}, r"check_stage_sweep\(max_loss=nan\) in .*: must be a finite number"),
    ({"max_loss": "5%"}, r"check_stage_sweep\(max_loss='5%'\) in .*: must be a finite number"),
    ({"chosen": 6}, r"check_stage_sweep\(chosen=6\) in .*: not among stages 1, 2, 3, 4, 5"),
    ({"chosen": "3"}, r"check_stage_sweep\(chosen='3'\) in .*: must be a stage count \(an integer\)"),
    ({"flops": 0}, r"check_stage_sweep\(flops=0\) in .*: must be > 0"),
    ({"load_only": 1.0, "tiles": 4}, r"needs load_only, compute_only and tiles together; compute_only missing"),
    ({"load_only": 1.0, "compute_only": 1.0, "tiles": 0}, r"check_stage_sweep\(tiles=0\) in .*: must be an integer"),
    ({"load_only": -1.0, "compute_only": 1.0, "tiles": 4}, r"check_stage_sweep\(load_only=-1.0\) .*: must be > 0"),
    ({"load_only": {9: 1.0}, "compute_only": 1.0, "tiles": 4}, r"load_only=\.\.\.\) .*: stage count 9 is not in"),
    ({"resources": 5}, r"check_stage_sweep\(resources=5\) in .*: give a mapping"),
    ({"nsamples": 10}, r"unknown keyword 'nsamples' \(timing keywords: n_samples, "),
    ({"n_inputs": 4}, r"unknown keyword 'n_inputs'"),
    ({"kernel": 3}, r"check_stage_sweep\(kernel=3\) in .*: must be a string"),
])
def test_bad_input_is_a_one_line_error_naming_the_argument(kwargs: dict[str, Any], message: str) -> None:
    stages = kwargs.pop("stages", (1, 2, 3, 4, 5))
    k = Kernel()
    pc = _pc()
    with pytest.raises(PipecheckError, match=message) as info:
        check_stage_sweep(pc, k.run, stages, timer=k.timer, **kwargs)
    assert "\n" not in str(info.value) and NODE in str(info.value)
    assert pc.results == [] and k.launched == []  # nothing ran, nothing recorded


def test_run_must_be_callable() -> None:
    with pytest.raises(PipecheckError, match=r"check_stage_sweep\(run=3\) in .*: run must be a callable"):
        check_stage_sweep(_pc(), 3, [1])  # type: ignore[arg-type]


def test_bad_input_is_an_error_on_the_cpu_tier_too() -> None:
    with pytest.raises(PipecheckError, match=r"chosen=4"):
        check_stage_sweep(_pc(), lambda s: None, [2, 3], chosen=4)


# ----------------------------------------------------------------------------- reports


def _failed_sweep() -> CheckResult:
    pc = _pc()
    k = Kernel(fails={6: OutOfResources(262144, 232448, "shared memory")})
    res = {s: {"threads": 128, "registers": 196, "shared": 32768 * s} for s in (1, 2, 3, 4, 5)}
    with pytest.raises(PipecheckFailure):
        _sweep(pc, kernel=k, stages=(1, 2, 3, 4, 5, 6), chosen=4, flops=FLOPS, resources=res, arch="sm_90",
               load_only=150.0, compute_only=200.0, tiles=64)
    return pc.results[-1]


def test_html_report_shows_the_sweep_table_with_the_extra_columns() -> None:
    r = _failed_sweep()
    page = render([r], GPU, 1, PipecheckConfig(), created="2026-11-22T00:00:00+00:00")
    sweep = page[page.index('class="stage-sweep"'):]
    assert "<h4>tests/test_gemm.py::test_gemm_stages (best 3 stages, chosen 4: +18.0%)</h4>" in sweep
    assert ("<tr><th>stages</th><th>measured (µs)</th><th>predicted (µs)</th><th>q1 – q3 (µs)</th>"
            "<th>blocks/SM</th><th>TFLOP/s</th><th>note</th></tr>") in sweep
    assert ('<tr><td class="num">3</td><td class="num">222.00</td><td class="num">202.34</td>'
            '<td class="num">219.78 – 224.22</td><td class="num">2</td><td class="num">619.1</td>'
            "<td>best</td></tr>") in sweep
    assert '<td class="num">1</td><td class="num">524.6</td><td class="v-fail">chosen</td>' in sweep
    assert ("<td>does not fit: out of shared memory, needs 256 KB, the limit is 227 KB</td>") in sweep
    if plots.available():
        assert "data:image/png;base64," in sweep and "bars: blocks per SM" in sweep
        assert "plot not drawn" not in sweep


@pytest.mark.skipif(not plots.available(), reason="matplotlib is not installed")
def test_stage_sweep_plot_draws_blocks_chosen_and_no_fit() -> None:
    png = plots.stage_sweep_plot([(1, 383.0, 350.0), (3, 222.0, 202.0), (6, None, None)],
                                 blocks_per_sm={1: 2, 3: 2}, chosen=3, no_fit=[6])
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    # the old call (rows only) still works
    assert plots.stage_sweep_plot([(2, 60.0, None)]).startswith(b"\x89PNG")


def test_json_report_carries_the_rows() -> None:
    r = _failed_sweep()
    doc = json.loads(json.dumps(json_report.build([r], GPU, 1), sort_keys=True, default=str))
    (got,) = doc["results"]
    assert got["check"] == "perf:stage_sweep" and got["verdict"] == "fail"
    rows = got["details"]["stage_sweep"]
    assert [row["stages"] for row in rows] == [1, 2, 3, 4, 5, 6]
    assert rows[2]["measured_us"] == pytest.approx(222.0) and rows[2]["blocks_per_sm"] == 2
    assert rows[5]["measured_us"] is None and rows[5]["note"].startswith("does not fit")
    assert got["details"]["best_stages"] == 3 and got["details"]["chosen"] == 4
    # nothing that strict JSON cannot hold
    text = json.dumps(r.to_json(), allow_nan=False)
    assert CheckResult.from_json(json.loads(text)).details == json.loads(json.dumps(r.details))
    assert all(not isinstance(v, float) or math.isfinite(v) for row in rows for v in row.values())


def test_not_timed_in_a_sanitizer_child() -> None:
    # a sanitizer child re-runs the test for hazards only: the sweep must not time (or launch) there,
    # even with a timer of its own
    launched: list[int] = []
    pc = _pc(GPU, role=children.sanitizer("racecheck"))
    r = pc.check_stage_sweep(launched.append, (1, 2, 3), kernel="k3", chosen=2, timer=lambda fn, **_: fn())
    assert r.verdict is Verdict.SKIP and launched == []
    assert r.summary == ("not run under compute-sanitizer racecheck: perf:stage_sweep is judged in the normal run")
    assert r.details["stages"] == [1, 2, 3] and r.details["chosen"] == 2


def test_sweep_table_shows_each_optional_column_that_has_a_value() -> None:
    from pytest_pipecheck.checks.stage_sweep import sweep_table

    rows = [
        dict(stages=1, measured_us=350.25, q1_us=349.0, q3_us=351.5, predicted_us=352.0, blocks_per_sm=3,
             tflops=392.44, note=""),
        dict(stages=2, measured_us=None, q1_us=None, q3_us=None, predicted_us=None, blocks_per_sm=None,
             tflops=None, note="does not fit: out of shared memory"),
        dict(stages=3, measured_us=222.0, q1_us=221.0, q3_us=223.0, predicted_us=None, blocks_per_sm=2,
             tflops=None, note=""),
    ]
    assert sweep_table(rows, 3, 3).splitlines() == [
        "stages     median      q1 - q3 (us)  predicted blocks/SM  TFLOP/s  note",
        "     1   0.350 ms     349.0 - 351.5   0.352 ms         3    392.4",
        "     2          -                 -          -         -        -  does not fit: out of shared memory",
        "     3   0.222 ms     221.0 - 223.0          -         2        -  best, chosen",
    ]
    # a column no row has a value for is left out
    bare = [dict(r, predicted_us=None, tflops=None) for r in rows]
    assert sweep_table(bare, 3, 1).splitlines()[0] == "stages     median      q1 - q3 (us) blocks/SM  note"
    assert sweep_table(bare, 3, 1).splitlines()[1] == "     1   0.350 ms     349.0 - 351.5         3  best"


def _steps_sweep(pc: Pipecheck, k: Kernel, **kw: Any) -> Any:
    from pytest_pipecheck.checks import stage_sweep as sw

    args: dict[str, Any] = dict(kernel="k", flops=None, chosen=None, max_loss=0.05, load_only=None,
                                compute_only=None, tiles=None, resources=None, arch=None, timer=k.timer, timing_kw={})
    args.update(kw)
    return sw._checked(pc, k.run, (1, 2, 3), **args)


def test_the_sweeps_steps_one_by_one() -> None:
    """The sweep's named steps: its arguments checked, the timer chosen, one row per stage count."""
    from pytest_pipecheck.checks import stage_sweep as sw

    k = Kernel(fails={3: RuntimeError("out of resource: shared memory, Required: 262144, Hardware limit: 232448")})
    pc = _pc(GPU)
    with pytest.raises(PipecheckError, match=r"check_stage_sweep\(chosen=7\).*not among stages 1, 2, 3"):
        _steps_sweep(pc, k, chosen=7)
    sweep = _steps_sweep(pc, k, chosen=2, flops=FLOPS)
    assert sweep.stages == [1, 2, 3] and sweep.base == {"max_loss": 0.05, "chosen": 2, "arch": None, "tiles": None}
    # the timer: the one given; without one, the device's, or why not (no GPU here)
    assert sw._timer(pc, sweep, k.timer) == k.timer  # a bound method: equal, not the same object
    assert sw._timer(_pc(CPU), sweep, None).startswith("stage sweep needs a CUDA GPU")
    meta: dict[str, Any] = {}
    fits = sw._row(pc, sweep, k.timer, [], 2, meta)
    assert fits["measured_us"] == pytest.approx(TIMES[2], rel=0.01) and fits["tflops"] > 0 and fits["note"] == ""
    too_big = sw._row(pc, sweep, k.timer, [], 3, meta)
    assert too_big["measured_us"] is None and too_big["note"].startswith("does not fit:"), too_big
