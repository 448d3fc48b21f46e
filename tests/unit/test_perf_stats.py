"""The perf gate's statistics on synthetic, seeded samples: the decision, and its error rates."""

from __future__ import annotations

import gzip
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from _perf_rates import NoiseModel, resample_rates, simulate_rates

from pytest_pipecheck.perf.stats import (
    DEFAULT_CLOCK_TOLERANCE,
    DEFAULT_THRESHOLD,
    Samples,
    StatsError,
    clock_moved,
    compare,
    min_samples_for,
    per_kind_anchored,
)


def _run(seed: int, n: int = 100, median: float = 60.0, slowdown: float = 0.0, model: NoiseModel | None = None):
    m = model or NoiseModel(median_us=median)
    return m.sample_runs(np.random.default_rng(seed), 1, n, slowdown=slowdown)[0]


def test_samples_summary_and_roundtrip() -> None:
    s = Samples.of([1.0, 2.0, 3.0, 4.0, 100.0], mode="cold")
    assert s.n == 5
    assert s.median == 3.0
    assert s.q1 == 2.0 and s.q3 == 4.0 and s.iqr == 2.0
    back = Samples.from_json(s.to_json())
    assert back.times_us == s.times_us and back.meta == {"mode": "cold"}


@pytest.mark.parametrize("bad", [[], [1.0, 0.0], [1.0, float("nan")], [1.0, -2.0], ["x"]])
def test_samples_reject_bad_times(bad: list) -> None:
    with pytest.raises(StatsError, match=r"sample|no samples"):
        Samples.of(bad)


def test_from_json_names_the_source() -> None:
    with pytest.raises(StatsError, match=r"baseline x.json"):
        Samples.from_json({"samples_us": "nope"}, what="baseline x.json")


def test_clear_slowdown_is_a_regression() -> None:
    c = compare(_run(1), _run(2, slowdown=0.10), threshold=0.03, alpha=0.001, ci=True)
    assert c.regressed and c.significant
    assert 1.07 < c.ratio < 1.13
    assert c.ci_low is not None and c.ci_high is not None and c.ci_low < c.ratio < c.ci_high
    assert "+" in c.describe() and "baseline" in c.describe()


def test_same_distribution_is_not_a_regression() -> None:
    c = compare(_run(1), _run(2), threshold=0.03, alpha=0.001)
    assert not c.regressed
    assert abs(c.change) < 0.03


def test_speedup_is_never_a_regression() -> None:
    c = compare(_run(1), _run(2, slowdown=-0.2))
    assert not c.regressed and c.p_value > 0.5


def test_significant_but_below_threshold_passes() -> None:
    # no noise at all: a 1% shift is as significant as can be, but below the practical threshold
    base = [60.0 + 0.001 * i for i in range(100)]
    cand = [t * 1.01 for t in base]
    c = compare(base, cand, threshold=0.03, alpha=0.001)
    assert c.significant and not c.regressed
    assert compare(base, cand, threshold=0.005, alpha=0.001).regressed


def test_large_but_insignificant_change_passes() -> None:
    # 10 samples each of very noisy data: a 10% median shift that the rank test cannot confirm
    rng = np.random.default_rng(3)
    base = 60 * np.exp(rng.normal(0, 0.5, 10))
    cand = base[::-1] * 1.1
    c = compare(base, cand, threshold=0.03, alpha=0.001)
    assert not c.significant and not c.regressed


def test_too_few_samples_for_alpha_is_an_error() -> None:
    assert min_samples_for(0.001) == 7  # 1/C(14,7) = 1/3432 < 0.001 <= 1/C(12,6) = 1/924
    assert 1 / math.comb(14, 7) < 0.001 <= 1 / math.comb(12, 6)
    with pytest.raises(StatsError, match=r"cannot reach alpha=0.001.*at least 7"):
        compare([1.0] * 6, [2.0] * 6, alpha=0.001)
    # at the minimum n a total separation does reach alpha
    assert compare([1.0 + i * 1e-3 for i in range(7)], [2.0 + i * 1e-3 for i in range(7)], alpha=0.001).regressed


@pytest.mark.parametrize(("threshold", "alpha"), [(-0.1, 0.001), (0.03, 0.0), (0.03, 1.0), (float("nan"), 0.01)])
def test_bad_threshold_or_alpha(threshold: float, alpha: float) -> None:
    with pytest.raises(StatsError):
        compare([1.0] * 20, [1.0] * 20, threshold=threshold, alpha=alpha)


def test_outliers_do_not_trigger_the_gate() -> None:
    base = _run(5)
    cand = _run(6).copy()
    cand[::10] *= 3.0  # 10% of launches preempted, 3x slower
    assert not compare(base, cand).regressed


def test_simulated_rates_meet_the_design_targets() -> None:
    # The default model: 2% lognormal within-run noise, 0.7% run-to-run drift, 2% outliers up to +30%.
    rates = simulate_rates(NoiseModel(), trials=400, n=100, threshold=0.03, alpha=0.001, seed=11)
    assert rates[0.0].rate <= 0.01  # same-code reruns fail at most 1%
    assert rates[0.05].rate >= 0.95  # a 5% slowdown is caught at least 95% of the time
    assert rates[0.10].rate == 1.0
    assert 0.2 < rates[0.03].rate < 0.8  # at the threshold itself it is a coin toss, as designed
    assert rates[0.0].trials == 400 and rates[0.0].low <= rates[0.0].rate <= rates[0.0].high


def test_simulation_is_deterministic() -> None:
    a = simulate_rates(NoiseModel(), slowdowns=(0.04,), trials=200, seed=7)
    b = simulate_rates(NoiseModel(), slowdowns=(0.04,), trials=200, seed=7)
    assert a[0.04].failures == b[0.04].failures


def test_simulation_detects_a_gate_that_cries_wolf() -> None:
    # Without a practical threshold, drift alone fails same-code runs most of the time: the rate
    # estimator must show this (it is the reason the threshold exists).
    rates = simulate_rates(NoiseModel(drift=0.01), slowdowns=(0.0,), trials=300, threshold=0.0, seed=2)
    assert rates[0.0].rate > 0.2


def test_heavy_drift_breaks_the_targets() -> None:
    # With 2.5% run-to-run drift no (3%, 0.001) gate can meet both targets; the simulation says so.
    rates = simulate_rates(NoiseModel(drift=0.025), slowdowns=(0.0, 0.05), trials=300, seed=4)
    assert rates[0.0].rate > 0.01 or rates[0.05].rate < 0.95


def test_resample_rates_from_runs() -> None:
    model = NoiseModel()
    runs = list(model.sample_runs(np.random.default_rng(9), 10, 100))
    rates = resample_rates(runs, slowdowns=(0.0, 0.05, 0.10), seed=1)
    assert rates[0.0].trials == 90  # every ordered pair of distinct runs
    assert rates[0.0].rate <= 0.03
    assert rates[0.10].rate == 1.0
    boot = resample_rates(runs, slowdowns=(0.0,), bootstrap=3, seed=1)
    assert boot[0.0].trials == 270


def test_resample_rates_sees_real_drift() -> None:
    # Runs whose medians wander by +-4%: resampling between runs must expose false alarms that a
    # comparison within one run could never show.
    rng = np.random.default_rng(0)
    runs = [60 * f * np.exp(rng.normal(0, 0.01, 100)) for f in (0.96, 1.0, 1.04, 0.98, 1.02)]
    assert resample_rates(runs, slowdowns=(0.0,))[0.0].rate > 0.1


def test_resample_rates_needs_two_runs() -> None:
    with pytest.raises(StatsError, match=r"at least 2 runs"):
        resample_rates([[1.0] * 20])


# --------------------------------------------------------------------------- clock-drift anchoring

# A compute-bound kernel as measured on an H200 (recording s1, docs/validation/2026-11-22-h200-0223/
# perf_gate_rates-0232.md): run-to-run drift of the log median 0.0138, nearly all of it the SM clock,
# which a same-kind anchor shares; the memory-bound add drifts 0.0009, which stands in for what the
# clock does not explain.
COMPUTE = NoiseModel(drift=0.0009, clock_drift=0.0138, clock_jitter=0.003)


def _paired(seed: int, clock: float = 1.0, slowdown: float = 0.0, model: NoiseModel | None = None) -> Samples:
    """One anchored run; ``clock`` multiplies kernel and anchor alike (a slower or faster SM clock)."""
    m = model or NoiseModel(drift=0.002)
    kernel, anchor = m.sample_paired_runs(np.random.default_rng(seed), 1, 100, slowdown=slowdown)
    return Samples.of(kernel[0] * clock, anchor_us=anchor[0] * clock,
                      anchor={"kind": "matmul", "dtype": "bf16", "m": 2048, "n": 2048, "k": 4096})


def test_anchored_samples_roundtrip_and_validation() -> None:
    s = _paired(1)
    assert s.anchored and s.anchor_median is not None and len(s.ratios()) == s.n
    back = Samples.from_json(s.to_json())
    assert back.anchored and back.anchor == s.anchor and back.anchor_us == pytest.approx(s.anchor_us, abs=1e-4)
    assert s.to_json()["anchor"]["definition"]["kind"] == "matmul"
    with pytest.raises(StatsError, match=r"3 anchor times for 2 kernel times"):
        Samples((1.0, 2.0), {}, (1.0, 1.0, 1.0), {"kind": "copy"})
    with pytest.raises(StatsError, match=r"anchor.*must be finite"):
        Samples.of([1.0, 2.0], anchor_us=[1.0, 0.0])
    with pytest.raises(StatsError, match=r"no kernel/anchor ratios"):
        Samples.of([1.0]).ratios()
    with pytest.raises(StatsError, match=r"'anchor' must be an object"):
        Samples.from_json({"samples_us": [1.0], "anchor": [1.0]})
    with pytest.raises(StatsError, match=r"2 anchor samples for 1 kernel samples"):
        Samples.from_json({"samples_us": [1.0], "anchor": {"definition": {}, "samples_us": [1.0, 2.0]}})


def test_shared_clock_drift_is_a_false_alarm_raw_but_not_anchored() -> None:
    base = _paired(1)
    cand = _paired(2, clock=1.08)  # the same code under an 8% slower clock: kernel and anchor alike
    raw = compare(base, cand, anchored=False)
    assert raw.regressed and not raw.anchored  # the false alarm anchoring exists to remove
    anchored = compare(base, cand)  # the default anchors by itself when both runs share an anchor
    assert anchored.anchored and not anchored.regressed
    assert abs(anchored.change) < 0.01 and anchored.raw_change > 0.06
    text = anchored.describe()
    assert "anchored to" in text and "raw +" in text and "anchor " in text


def test_real_slowdown_is_caught_through_a_clock_change() -> None:
    base = _paired(1)
    # +5% in the kernel, hidden in raw times by a 4% faster clock (boost right after idle)
    cand = _paired(3, clock=0.96, slowdown=0.05)
    assert not compare(base, cand, anchored=False).regressed  # raw: missed
    c = compare(base, cand, ci=True)
    assert c.anchored and c.regressed and 1.03 < c.ratio < 1.07
    assert c.ci_low is not None and c.ci_low < c.ratio < (c.ci_high or 0)
    assert c.describe().split("(")[1].startswith("+")  # the gated (anchored) change comes first


def test_anchor_mismatch_falls_back_to_raw_and_says_why() -> None:
    base = _paired(1)
    other = Samples(base.times_us, base.meta, base.anchor_us, {"kind": "copy", "nbytes": 2**27})
    c = compare(base, other)
    assert not c.anchored and "anchors differ" in c.note and "raw times: the anchors differ" in c.describe()
    plain = Samples.of(base.times_us)
    c = compare(plain, base)
    assert not c.anchored and "baseline has no anchor" in c.note
    assert compare(plain, plain).note == "no anchor was timed" and "raw times" not in compare(plain, plain).describe()
    with pytest.raises(StatsError, match=r"anchored comparison impossible: the baseline has no anchor"):
        compare(plain, base, anchored=True)


def test_simulated_clock_drift_rates_raw_vs_anchored() -> None:
    # The H200 compute-bound drift: raw, same-code reruns fail several percent of the time (7.4% of all
    # pairs in recording s1); anchored, the shared clock cancels and both design targets hold.
    raw = simulate_rates(COMPUTE, slowdowns=(0.0, 0.05), trials=400, seed=5)
    anchored = simulate_rates(COMPUTE, slowdowns=(0.0, 0.03, 0.05, 0.10), trials=400, seed=5, anchored=True)
    assert raw[0.0].rate > 0.02
    assert raw[0.05].rate < 0.95
    assert anchored[0.0].rate <= 0.01
    assert anchored[0.05].rate >= 0.95
    assert anchored[0.10].rate == 1.0


def test_simulation_without_clock_is_unchanged() -> None:
    # clock_drift = clock_jitter = 0 draws exactly what the model drew before anchoring existed
    a = NoiseModel().sample_runs(np.random.default_rng(3), 2, 10)
    b = NoiseModel(anchor_sigma=0.5).sample_runs(np.random.default_rng(3), 2, 10)
    assert np.array_equal(a, b)


def test_resample_rates_anchored() -> None:
    kernel, anchor = COMPUTE.sample_paired_runs(np.random.default_rng(4), 12, 100)
    raw = resample_rates(list(kernel), slowdowns=(0.0,))
    with_anchor = resample_rates(list(kernel), slowdowns=(0.0, 0.05), anchors=list(anchor))
    assert with_anchor[0.0].rate <= raw[0.0].rate and with_anchor[0.0].rate <= 0.01
    assert with_anchor[0.05].rate >= 0.95
    runs = [Samples.of(k, anchor_us=a) for k, a in zip(kernel, anchor)]
    assert resample_rates(runs, slowdowns=(0.0,))[0.0].failures == with_anchor[0.0].failures
    with pytest.raises(StatsError, match=r"11 anchor runs for 12 runs"):
        resample_rates(list(kernel), anchors=list(anchor)[:11])


def test_drifted_and_scaled() -> None:
    s = _paired(1)
    d = s.drifted(1.1)
    assert d.ratios() == pytest.approx(s.ratios())
    assert s.scaled(1.1).ratios() == pytest.approx([r * 1.1 for r in s.ratios()])


# --------------------------------------------------------------------------- adaptive anchoring: the clock probe


def test_adaptive_steady_clock_gates_on_raw_times() -> None:
    c = compare(_paired(1), _paired(2), anchor_mode="adaptive")
    assert c.anchor_compared and not c.anchored and c.gated_on == "raw"
    assert c.anchor_change is not None and abs(c.anchor_change) <= DEFAULT_CLOCK_TOLERANCE
    assert c.anchored_change is not None and c.ratio == pytest.approx(1 + c.raw_change)
    assert c.decision == (f"gated on raw: the anchor moved {c.anchor_change:+.1%} "
                          f"(within the {DEFAULT_CLOCK_TOLERANCE:.1%} clock tolerance)")


def test_adaptive_moved_clock_gates_on_ratios() -> None:
    c = compare(_paired(1), _paired(2, clock=1.04), anchor_mode="adaptive")
    assert c.anchored and c.gated_on == "anchored" and c.anchor_p_value is not None and c.anchor_p_value < 1e-6
    assert c.decision.startswith(f"gated on anchored ratios: the anchor moved {c.anchor_change:+.1%}, p=")
    assert c.decision.endswith(": the clock changed")


def test_adaptive_catches_a_real_slowdown_under_a_steady_clock() -> None:
    c = compare(_paired(1), _paired(3, slowdown=0.05), anchor_mode="adaptive")
    assert c.regressed and c.gated_on == "raw" and 1.03 < c.ratio < 1.07


def test_adaptive_ignores_an_8_percent_shared_clock_change() -> None:
    c = compare(_paired(1), _paired(2, clock=1.08))
    assert c.anchored and not c.regressed and c.raw_change > 0.06 and abs(c.change) < 0.01


def test_adaptive_catches_a_slowdown_hidden_by_a_faster_clock() -> None:
    c = compare(_paired(1), _paired(3, clock=0.96, slowdown=0.05))
    assert c.anchored and c.regressed and c.raw_change < 0.03 and 1.03 < c.ratio < 1.07
    assert c.anchor_change is not None and c.anchor_change < -0.03


def test_adaptive_insignificant_anchor_change_gates_on_raw() -> None:
    # a very noisy anchor whose median moved 3%: beyond the tolerance but not significant, so the clock
    # did not measurably move
    rng = np.random.default_rng(8)
    kernel = 60.0 * np.exp(rng.normal(0, 0.01, (2, 12)))
    anchor = 50.0 * np.exp(rng.normal(0, 0.4, 12))
    definition = {"kind": "matmul", "dtype": "bf16", "m": 2048, "n": 2048, "k": 4096}
    base = Samples.of(kernel[0], anchor_us=anchor, anchor=definition)
    cand = Samples.of(kernel[1], anchor_us=anchor[::-1] * 1.03, anchor=definition)
    c = compare(base, cand, anchor_mode="adaptive")
    assert c.anchor_change == pytest.approx(0.03) and c.anchor_p_value is not None and c.anchor_p_value > 0.001
    assert c.gated_on == "raw" and "not significant" in c.decision and "did not measurably move" in c.decision


def test_clock_tolerance_boundary_and_modes() -> None:
    base, cand = _paired(1), _paired(2, clock=1.02)
    shift = compare(base, cand, anchor_mode="adaptive").anchor_change
    assert shift is not None and 0.015 < shift < 0.03
    assert compare(base, cand, clock_tolerance=0.03, anchor_mode="adaptive").gated_on == "raw"
    assert compare(base, cand, clock_tolerance=0.01, anchor_mode="adaptive").gated_on == "anchored"
    assert np.array_equal(clock_moved(np.array([0.01, 0.02, 0.02]), np.array([1e-9, 1e-9, 0.5]), 0.015, 0.001),
                          [False, True, False])
    # "always": the ratios whatever the clock did (the behaviour before adaptive anchoring)
    always = compare(_paired(1), _paired(2), anchor_mode="always")
    assert always.anchored and "anchor mode 'always'" in always.decision
    forced = compare(_paired(1), _paired(2, clock=1.08), anchored=False, anchor_mode="adaptive")
    assert forced.gated_on == "raw" and forced.regressed and forced.decision == "gated on raw: anchored=False was asked for"
    with pytest.raises(StatsError, match=r"anchor_mode='sometimes' must be one of per-kind, always, adaptive"):
        compare(base, cand, anchor_mode="sometimes")
    with pytest.raises(StatsError, match=r"clock_tolerance=-0.1 must be a finite number >= 0"):
        compare(base, cand, clock_tolerance=-0.1, anchor_mode="adaptive")


def test_adaptive_summary_wording() -> None:
    definition = {"kind": "matmul", "dtype": "bf16", "m": 2048, "n": 2048, "k": 4096,
                  "label": "bf16 matmul 2048x2048x4096"}

    def run(seed: int, clock: float = 1.0, slowdown: float = 0.0) -> Samples:
        s = _paired(seed, clock, slowdown)
        return Samples(s.times_us, s.meta, s.anchor_us, definition)

    raw = compare(run(1), run(2), ci=True, anchor_mode="adaptive").describe()
    assert re.fullmatch(r"\S+ us vs \S+ us baseline \([+-]\d\.\d%, p=\S+, 95% CI \S+; anchored [+-]\d\.\d%; anchor "
                        r"bf16 matmul 2048x2048x4096 \S+ us vs \S+ us, [+-]\d\.\d%; gated on raw: the anchor moved "
                        r"[+-]\d\.\d% \(within the 1\.5% clock tolerance\)\)", raw), raw
    moved = compare(run(1), run(2, clock=1.2), anchor_mode="adaptive").describe()
    assert re.fullmatch(r"\S+ us vs \S+ us baseline \([+-]\d\.\d% anchored to bf16 matmul 2048x2048x4096, p=\S+; "
                        r"raw \+\d+\.\d%; anchor \S+ us vs \S+ us, \+\d+\.\d%; gated on anchored ratios: the anchor "
                        r"moved \+\d+\.\d%, p=\S+: the clock changed\)", moved), moved
    data = compare(run(1), run(2), anchor_mode="adaptive").to_json()
    assert data["gated_on"] == "raw" and data["anchor_compared"] and data["decision"].startswith("gated on raw")
    assert data["anchor_change"] is not None and data["anchored_change"] is not None and data["clock_tolerance"] == 0.015
    plain = compare(Samples.of(run(1).times_us), Samples.of(run(2).times_us))
    assert plain.decision == "" and plain.anchor_change is None and "gated" not in plain.describe()


# The s1 drift model with the anchor's own run-to-run drift of recording s2 (sd of the log anchor run
# medians of the bf16 matmul anchor while the clock held: 0.0056): the harder case for the probe.
COMPUTE_NOISY_ANCHOR = NoiseModel(drift=0.0009, clock_drift=0.0138, clock_jitter=0.003, anchor_drift=0.0056)


@pytest.mark.parametrize("model", [COMPUTE, COMPUTE_NOISY_ANCHOR], ids=["drift-0232", "drift-0232-noisy-anchor"])
def test_simulated_adaptive_rates_meet_the_targets_under_the_0232_drift(model: NoiseModel) -> None:
    rates = simulate_rates(model, slowdowns=(0.0, 0.05, 0.10), trials=1000, seed=5, mode="adaptive")
    assert rates[0.0].rate <= 0.01
    assert rates[0.05].rate >= 0.95
    assert rates[0.10].rate == 1.0
    share = rates[0.0].anchored_share
    assert share is not None and 0.2 < share < 0.8  # the clock moved in some pairs, not all
    assert "anchored_share" in rates[0.0].to_json()


def test_simulation_modes() -> None:
    a = simulate_rates(COMPUTE, slowdowns=(0.0,), trials=100, seed=3, anchored=True)
    b = simulate_rates(COMPUTE, slowdowns=(0.0,), trials=100, seed=3, mode="anchored")
    assert a[0.0].failures == b[0.0].failures and a[0.0].anchored_share is None
    with pytest.raises(StatsError, match=r"mode='ratio' must be one of raw, anchored, adaptive"):
        simulate_rates(COMPUTE, mode="ratio")
    # anchor_drift = 0 draws what the model drew before it existed
    k1, a1 = NoiseModel().sample_paired_runs(np.random.default_rng(3), 2, 10)
    k2, a2 = NoiseModel(anchor_drift=0.0).sample_paired_runs(np.random.default_rng(3), 2, 10)
    assert np.array_equal(k1, k2) and np.array_equal(a1, a2)


def test_resample_rates_adaptive() -> None:
    kernel, anchor = COMPUTE.sample_paired_runs(np.random.default_rng(4), 12, 100)
    adaptive = resample_rates(list(kernel), slowdowns=(0.0, 0.05), anchors=list(anchor), mode="adaptive")
    assert adaptive[0.0].rate <= 0.01 and adaptive[0.05].rate >= 0.95
    assert adaptive[0.0].anchored_share is not None and adaptive[0.0].trials == 132
    raw = resample_rates(list(kernel), slowdowns=(0.0,), anchors=list(anchor), mode="raw")
    assert raw[0.0].failures == resample_rates(list(kernel), slowdowns=(0.0,))[0.0].failures
    # a tolerance no clock change reaches: adaptive is the raw gate
    huge = resample_rates(list(kernel), slowdowns=(0.0,), anchors=list(anchor), mode="adaptive", clock_tolerance=0.5)
    assert huge[0.0].failures == raw[0.0].failures and huge[0.0].anchored_share == 0.0
    with pytest.raises(StatsError, match=r"mode='adaptive'\) needs the runs' anchor samples"):
        resample_rates(list(kernel), mode="adaptive")


RECORDED = Path(__file__).resolve().parents[2] / "tests" / "data" / "perf_recordings" / "s2-2026-11-22-h200-0223-perf_gate_rates-0318.json.gz"


def test_adaptive_rates_on_the_recorded_h200_samples() -> None:
    # The offline re-analysis of H200 recording s2 (RECORDED; docs/perf-gate.md): the anchored gate catches
    # a +5% slowdown of the bf16 matmul in 88% of pairs; adaptive keeps the raw gate's power there.
    if not RECORDED.exists():
        pytest.skip(f"{RECORDED.name} is not in this checkout")
    with gzip.open(RECORDED, "rt") as fh:
        families = json.load(fh)["families"]
    runs = families["matmul_bf16"]["raw_runs_us"]["anchored"]["0"]
    kernel, anchor = [r["kernel"] for r in runs], [r["anchor"] for r in runs]
    anchored = resample_rates(kernel, slowdowns=(0.05,), anchors=anchor, mode="anchored")
    adaptive = resample_rates(kernel, slowdowns=(0.0, 0.05, 0.10), anchors=anchor, mode="adaptive")
    assert anchored[0.05].rate < 0.95  # the power loss the adaptive gate exists to remove
    assert adaptive[0.0].rate <= 0.01
    assert adaptive[0.05].rate >= 0.95
    assert adaptive[0.10].rate == 1.0


# --------------------------------------------------------------------------- per-kind gating, pooled baselines

COPY = {"kind": "copy", "nbytes": 2**27, "op": "copy_"}


def _with_anchor(s: Samples, definition: dict) -> Samples:
    return Samples(s.times_us, s.meta, s.anchor_us, definition)


def test_per_kind_gates_matmul_anchors_on_ratios_and_copy_anchors_on_raw() -> None:
    # A clock 8% slower hits kernel and anchor alike. With a matmul anchor (compute-bound kernel) the
    # ratios decide and the same code passes; with a copy anchor (memory-bound) raw times decide.
    base, slow_clock = _paired(1), _paired(2, clock=1.08)
    c = compare(base, slow_clock)
    assert c.anchor_mode == "per-kind" and c.gated_on == "anchored" and not c.regressed
    assert c.decision.startswith("gated on anchored ratios: a matmul anchor, so a compute-bound kernel")
    c = compare(_with_anchor(base, COPY), _with_anchor(slow_clock, COPY))
    assert c.gated_on == "raw" and c.regressed and c.anchored_change is not None
    assert c.decision.startswith("gated on raw: a copy anchor, so a memory-bound kernel")
    # an anchor of unspecified kind (injected samples) is treated as the ratios' case, like "always"
    plain = compare(Samples.of(base.times_us, anchor_us=base.anchor_us),
                    Samples.of(slow_clock.times_us, anchor_us=slow_clock.anchor_us))
    assert plain.gated_on == "anchored" and per_kind_anchored(None) and not per_kind_anchored(COPY)
    # the defaults are the plugin's
    assert c.threshold == DEFAULT_THRESHOLD == 0.0275


def test_pooled_concatenates_runs_and_keeps_pairs() -> None:
    runs = [_paired(seed) for seed in (1, 2, 3)]
    pooled = Samples.pooled(runs)
    assert pooled.n == 300 and pooled.runs == 3 and pooled.anchor == runs[0].anchor
    assert pooled.ratios() == runs[0].ratios() + runs[1].ratios() + runs[2].ratios()
    assert pooled.meta["run_medians_us"] == [r.median for r in runs]
    assert Samples.pooled(runs[:1]) is runs[0] and runs[0].runs == 1
    back = Samples.from_json(pooled.to_json())  # a stored baseline remembers how many runs it pools
    assert back.runs == 3 and back.n == 300
    raw = Samples.pooled([Samples.of(r.times_us) for r in runs[:2]])
    assert not raw.anchored and raw.runs == 2
    with pytest.raises(StatsError, match=r"no runs to pool"):
        Samples.pooled([])
    with pytest.raises(StatsError, match=r"some runs carry an anchor and some do not"):
        Samples.pooled([runs[0], Samples.of(runs[1].times_us)])
    with pytest.raises(StatsError, match=r"different anchors"):
        Samples.pooled([runs[0], _with_anchor(runs[1], COPY)])
    c = compare(pooled, _paired(4))
    assert c.baseline_runs == 3 and "baseline of 3 runs (" in c.describe() and c.to_json()["baseline_runs"] == 3
    assert " of 1 run" not in compare(runs[0], _paired(4)).describe() and " runs (" not in compare(runs[0], _paired(4)).describe()
