"""The paired gate of ``--pipecheck-compare`` (perf/paired.py): the decision, its interval, its error rates
under the noise model next to the stored-baseline gate's, and the pairing on a simulated device."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from _perf_rates import perf_rates

from pytest_pipecheck.perf.paired import (
    DEFAULT_PAIRED_THRESHOLD,
    min_pairs_for,
    paired_compare,
    paired_decide,
)
from pytest_pipecheck.perf.stats import Samples, StatsError

LOCKSTEP_MODEL = perf_rates.LOCKSTEP_MODEL


def _pairs(seed: int, slowdown: float, n: int = 100, sigma: float = 0.02) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    clock = np.exp(rng.normal(0.0, 0.02, n))  # shared by the two samples of a pair
    base = 70.0 * clock * np.exp(rng.normal(0.0, sigma, n))
    head = 70.0 * (1 + slowdown) * clock * np.exp(rng.normal(0.0, sigma, n))
    return base, head


def test_a_slowdown_is_caught_with_its_interval() -> None:
    base, head = _pairs(1, 0.03)
    c = paired_compare(base, head)
    assert c.regressed and c.significant and c.p_value < 1e-6
    assert c.ci_low < c.ratio < c.ci_high and c.ci_low > 1.015 and abs(c.ratio - 1.03) < 0.01
    assert c.n_pairs == 100 and c.threshold == DEFAULT_PAIRED_THRESHOLD
    text = c.describe("HEAD~1")
    assert text.startswith(f"{c.head_median_us:.1f} us vs {c.base_median_us:.1f} us at HEAD~1 (+")
    assert "% paired, 95% CI +" in text and text.endswith(", 100 pairs)")
    data = c.to_json()
    assert data["regressed"] and data["change"] == pytest.approx(c.ratio - 1) and data["n_pairs"] == 100


def test_same_code_passes_and_a_speedup_never_fails() -> None:
    base, head = _pairs(2, 0.0)
    assert not paired_compare(base, head).regressed
    fast = paired_compare(base, head * 0.8)
    assert not fast.regressed and fast.change < -0.15 and fast.p_value > 0.5


def test_significant_below_the_threshold_passes() -> None:
    base, head = _pairs(3, 0.01, n=400, sigma=0.005)
    c = paired_compare(base, head)
    assert c.significant and not c.regressed  # 1% is real but below the 1.5% practical threshold
    assert paired_compare(base, head, threshold=0.005).regressed


def test_a_shared_clock_cancels_in_the_pairs() -> None:
    # the clock falls by 20% half-way through, for both sides alike: the medians move, the pairs do not
    base, head = _pairs(4, 0.0)
    clock = np.where(np.arange(100) < 50, 1.0, 1.2)
    c = paired_compare(base * clock, head * clock)
    assert not c.regressed and abs(c.change) < 0.01
    # while a stored-style comparison of a boosted base against a slowed head would see +20%
    assert paired_compare(base, head * clock).ratio > 1.05


#: the timer's resolution in the tied samples below (us): times are whole ticks, so pairs tie
TICK = 0.5


def _h200_shape(hiccups: int = 21, ties: int = 14) -> tuple[list[float], list[float]]:
    """100 pairs of a memory-bound kernel of about 20 us, made 2.4% slower, at a timer of 0.5 us (one tick is
    2.2-2.7% of it): the head takes one tick more than REV in most pairs, ``ties`` pairs tie (the slowdown fell
    below a tick), and in ``hiccups`` pairs REV's sample caught a 3-tick hiccup, so the head reads faster
    there by more than it is slower elsewhere: a shape on which a signed-rank test (p = 0.12) passed a change
    whose interval lies wholly above the 1.5% threshold."""
    base: list[float] = []
    head: list[float] = []
    for i in range(100):
        level = 37 + i % 9  # ticks, shared by the two samples of pair i
        if i % 4 == 1 and hiccups > 0:
            hiccups -= 1
            base.append((level + 3) * TICK)
            head.append((level + 1) * TICK)
        elif i % 4 == 3 and ties > 0:
            ties -= 1
            base.append(level * TICK)
            head.append(level * TICK)
        else:
            base.append(level * TICK)
            head.append((level + 1) * TICK)
    return base, head


def test_the_h200_case_fails_where_its_interval_lies_above_the_threshold() -> None:
    base, head = _h200_shape()
    c = paired_compare(base, head)
    # a signed-rank test on these pairs says p = 0.12 (the hiccups outweigh the one-tick slowdowns); the
    # sign test counts 65 of 100 pairs slower, the interval lies wholly above 1.5%: a regression
    assert c.describe() == "21.0 us vs 20.8 us at REV (+2.3% paired, 95% CI +2.2%..+2.4%, p=0.0018, 100 pairs, 14 tied)"
    assert c.ci_low > 1 + DEFAULT_PAIRED_THRESHOLD and c.n_slower == 65 and c.n_tied == 14
    assert c.p_value >= 0.001 and not c.significant  # not significant at alpha on its own ...
    assert c.regressed and c.decision == "fail" and c.to_json()["test"] == "sign"  # ... the interval fails it
    # the same shape with a few hiccups fewer: significant at alpha as well
    more = paired_compare(*_h200_shape(hiccups=12, ties=14))
    assert more.significant and more.regressed


def test_all_tied_pairs_pass_with_a_point_interval() -> None:
    c = paired_compare([100.0] * 20, [100.0] * 20)
    assert c.p_value == 1.0 and not c.regressed and c.ratio == 1.0 and c.ci_low == c.ci_high == 1.0
    assert c.decision == "pass" and c.n_tied == 20 and c.n_slower == 0 and c.describe().endswith("20 pairs, 20 tied)")
    # timed at a timer's resolution, each pair at its own level: still every pair tied, a pass
    levels = [TICK * (40 + i % 3) for i in range(30)]
    assert paired_compare(levels, levels).decision == "pass"


def test_a_tie_at_the_fewest_pairs_no_longer_lets_a_slowdown_pass() -> None:
    # 10 pairs is the fewest at alpha = 0.001; one tie left 9 untied pairs, which cannot reach it, so +20% passed
    c = paired_compare([100.0] * 10, [100.0] + [120.0] * 9)
    assert c.n_pairs == 10 and c.n_tied == 1 and c.regressed and c.decision == "fail"
    assert c.ci_low == pytest.approx(1.2) and c.p_value == pytest.approx(11 / 1024)


def test_ties_that_leave_no_way_to_fail_are_inconclusive_never_a_pass() -> None:
    # two ties of 10: with the other 8 slower the sign test's best p is 56/1024 and the interval's lower end is a
    # tie, so no data could have failed the check: a +20% median decides nothing
    c = paired_compare([100.0] * 10, [100.0] * 2 + [120.0] * 8)
    assert not c.regressed and c.decision == "inconclusive" and c.ratio == pytest.approx(1.2)
    assert c.inconclusive.startswith("2 of 10 pairs tie") and "n_samples" in c.inconclusive
    half = paired_compare([100.0] * 20, [100.0] * 10 + [110.0] * 10)
    assert half.decision == "inconclusive" and half.ratio == pytest.approx(math.sqrt(1.1))
    # ties that still leave the gate its teeth: a median below the threshold passes as usual
    assert paired_compare([100.0] * 20, [100.0] * 12 + [110.0] * 8).decision == "pass"


def test_the_verdict_never_contradicts_the_interval() -> None:
    rng = np.random.default_rng(43)
    seen = {"fail": 0, "pass": 0, "above": 0, "below": 0}
    for trial in range(600):
        n = int(rng.choice([10, 12, 20, 40, 100]))
        slowdown = float(rng.choice([0.0, 0.01, 0.015, 0.02, 0.03, 0.1]))
        level = 20.0 * np.exp(rng.normal(0.0, 0.05, n))
        base = level * np.exp(rng.normal(0.0, 0.01, n))
        head = level * (1 + slowdown) * np.exp(rng.normal(0.0, 0.01, n))
        skew = rng.random(n) < rng.choice([0.0, 0.25])  # REV's samples that caught a hiccup
        base = base * np.where(skew, 1.0 + rng.uniform(0.05, 0.2, n), 1.0)
        if trial % 2:  # half of them at the timer's resolution: many pairs tie
            base, head = np.maximum(1, np.round(base / TICK)) * TICK, np.maximum(1, np.round(head / TICK)) * TICK
        c = paired_compare(base, head)
        t = 1 + DEFAULT_PAIRED_THRESHOLD
        if c.ci_low > t:
            assert c.decision == "fail", c.describe()
            seen["above"] += 1
        if c.ci_high < t:
            assert c.decision == "pass", c.describe()
            seen["below"] += 1
        # the p-value and the interval are one law: the interval clears no change exactly when p <= 2.5%
        assert (c.ci_low > 1.0) == (c.p_value <= 0.025), c.describe()
        assert c.ci_low <= c.ratio <= c.ci_high
        seen[c.decision] = seen.get(c.decision, 0) + 1
    assert min(seen[k] for k in ("fail", "pass", "above", "below")) > 10, seen  # every region was reached


def test_invalid_series_are_errors() -> None:
    with pytest.raises(StatsError, match=r"10 head times for 12 base times"):
        paired_compare([1.0] * 12, [1.0] * 10)
    with pytest.raises(StatsError, match=r"9 pairs cannot reach alpha=0.001 .* at least 10 pairs"):
        paired_compare([1.0] * 9, [1.0] * 9)
    with pytest.raises(StatsError, match=r"threshold=-0.1"):
        paired_compare([1.0] * 20, [1.0] * 20, threshold=-0.1)
    with pytest.raises(StatsError, match=r"alpha=1.5"):
        paired_compare([1.0] * 20, [1.0] * 20, alpha=1.5)
    with pytest.raises(StatsError, match=r"times must be finite and > 0"):
        paired_compare([1.0] * 19 + [0.0], [1.0] * 20)
    assert min_pairs_for(0.001) == 10 and min_pairs_for(0.01) == 7 and min_pairs_for(0.5) == 2
    assert paired_compare(Samples.of([2.0] * 12), Samples.of([2.0] * 12)).n_pairs == 12


def test_vectorised_rule_is_the_gates_rule() -> None:
    rows = [_pairs(10 + i, s) for i, s in enumerate((0.0, 0.012, 0.02, 0.03, -0.03, 0.05))]
    base = np.stack([r[0] for r in rows])
    head = np.stack([r[1] for r in rows])
    rule = paired_decide(base, head, DEFAULT_PAIRED_THRESHOLD, 0.001)
    assert rule[0] is rule.regressed  # the rate estimators read the verdicts as the first entry
    for i, (b, h) in enumerate(rows):
        c = paired_compare(b, h)
        assert (c.regressed, c.significant) == (bool(rule.regressed[i]), bool(rule.significant[i]))
        assert c.ratio == pytest.approx(rule.ratio[i]) and c.p_value == pytest.approx(rule.p[i])
        assert (c.ci_low, c.ci_high) == (pytest.approx(rule.ci_low[i]), pytest.approx(rule.ci_high[i]))


def test_the_interval_covers_the_true_ratio() -> None:
    covered = 0
    for seed in range(300):
        base, head = _pairs(1000 + seed, 0.02, n=60)
        c = paired_compare(base, head)
        covered += c.ci_low <= 1.02 <= c.ci_high
    assert covered >= 0.93 * 300  # a 95% interval (order statistics: at least 95% by construction)


def test_rates_meet_the_targets_where_the_stored_gate_cannot() -> None:
    # The noise model of docs/perf-gate.md ("Compare mode"): the s1 clock shared by whatever runs at the same
    # moment, 0.3% per process of the kernel's own level, 2% per sample, 2% outliers up to +30%.
    paired = perf_rates.simulate_paired_rates(LOCKSTEP_MODEL, trials=1000, seed=3)
    stored = perf_rates.simulate_stored_rates(LOCKSTEP_MODEL, trials=1000, seed=3)
    assert paired[0.0].rate <= 0.01  # same code against itself fails at most 1% of the time
    assert paired[0.03].rate >= 0.95  # a 3% slowdown is caught at least 95% of the time
    assert paired[0.05].rate == 1.0
    # the stored gate under the same model: A/A as low, 5% caught, 3% only about half the time
    assert stored[0.0].rate <= 0.01 and stored[0.05].rate >= 0.95
    assert 0.3 < stored[0.03].rate < 0.9


def test_a_process_level_beyond_the_model_breaks_the_targets() -> None:
    # 0.5% of each process's own level (past anything recorded) and the 1.5% threshold no longer holds A/A
    wide = dataclasses.replace(LOCKSTEP_MODEL, drift=0.005)
    rates = perf_rates.simulate_paired_rates(wide, slowdowns=(0.0,), trials=1000, seed=3)
    assert rates[0.0].rate > 0.01


def test_rate_estimators_are_deterministic_and_validate() -> None:
    a = perf_rates.simulate_paired_rates(LOCKSTEP_MODEL, slowdowns=(0.02,), trials=200, seed=9)
    b = perf_rates.simulate_paired_rates(LOCKSTEP_MODEL, slowdowns=(0.02,), trials=200, seed=9)
    assert a[0.02].failures == b[0.02].failures
    with pytest.raises(StatsError, match="pairs cannot reach"):
        perf_rates.simulate_paired_rates(LOCKSTEP_MODEL, n=5)
    with pytest.raises(StatsError, match="mode="):
        perf_rates.simulate_stored_rates(LOCKSTEP_MODEL, mode="adaptive")


def test_lockstep_samplers_share_one_device_in_turns(monkeypatch: pytest.MonkeyPatch) -> None:
    # two Samplers on one simulated device (tests/unit/test_perf_timing.py), timed one sample each in turn
    # (A B B A ...) as --pipecheck-compare times REV and the head; the clock drops 20% part-way
    import sys

    from test_perf_timing import FakeDevice, fake_torch

    from pytest_pipecheck.perf import timing

    dev = FakeDevice(lambda work: 1.2 if work < 4000 else 1.0)
    torch = fake_torch(dev, kernel_cost=70.0)
    monkeypatch.setitem(sys.modules, "torch", torch)
    timing._sleep_cycles_per_us.cache_clear()
    slower = fake_torch(dev, kernel_cost=70.0 * 1.03).kernel
    base_sampler = timing.Sampler(torch.kernel, warmup_s=0.0)
    head_sampler = timing.Sampler(slower, warmup_s=0.0)
    for s in (base_sampler, head_sampler):
        s.arm()
    base: list[float] = []
    head: list[float] = []
    start = len(dev.log)
    for i in range(40):
        for side in (("base", "head") if i % 2 == 0 else ("head", "base")):
            (base if side == "base" else head).append((base_sampler if side == "base" else head_sampler).one()[0])
    timing._sleep_cycles_per_us.cache_clear()
    kernels = [x for x in dev.log[start:] if x == "kernel"]
    assert len(kernels) == 80  # one launch per sample, nothing else timed
    assert max(base) / min(base) > 1.15  # the clock moved under both
    c = paired_compare(base, head)
    assert c.ratio == pytest.approx(1.03, rel=1e-9) and c.regressed
    assert math.isclose(c.ci_low, 1.03, rel_tol=1e-9) and math.isclose(c.ci_high, 1.03, rel_tol=1e-9)
