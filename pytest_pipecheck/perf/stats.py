"""The perf gate's statistics: samples, the regression decision, and its error rates.

A kernel's time in one run is a set of per-launch samples (microseconds). Comparing a candidate
run with a stored baseline run has two sources of noise:

* within a run, samples scatter (launch jitter, clock steps, the odd preempted launch). With a
  hundred samples per side a rank test sees through this easily;
* between runs, the whole distribution moves (a new process, another clock bin, the GPU warmer or
  cooler). A rank test on within-run samples cannot see this drift as noise: given enough samples it
  calls a 0.5% drift "significant".

So the gate needs both parts (as asv does, FACTS.md section 6): a regression is declared only when

1. a one-sided Mann-Whitney U test says the candidate is slower with ``p < alpha``, *and*
2. the ratio of medians exceeds ``1 + threshold``, the practical threshold that absorbs drift.

Whether a (threshold, alpha) pair meets the target (a 5% slowdown caught >= 95% of the time, same
code failing <= 1% of the time) depends on the drift, which only repeated runs on the GPU can show;
:func:`resample_rates` measures both rates from such runs and :func:`simulate_rates` from a noise
model. numpy and scipy are imported inside the functions so importing this module stays cheap.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..results import PipecheckError

__all__ = [
    "Comparison",
    "NoiseModel",
    "RateEstimate",
    "Samples",
    "StatsError",
    "compare",
    "min_samples_for",
    "resample_rates",
    "simulate_rates",
]


class StatsError(PipecheckError):
    """Samples that cannot support a verdict (too few, not finite, not positive)."""


# --------------------------------------------------------------------------- samples


def _validate_times(times: Iterable[Any], what: str) -> tuple[float, ...]:
    out: list[float] = []
    for i, t in enumerate(times):
        try:
            value = float(t)
        except (TypeError, ValueError):
            raise StatsError(f"{what}: sample {i} is {t!r}, not a number") from None
        if not math.isfinite(value) or value <= 0.0:
            raise StatsError(f"{what}: sample {i} is {value!r}; times must be finite and > 0")
        out.append(value)
    if not out:
        raise StatsError(f"{what}: no samples")
    return tuple(out)


@dataclass(frozen=True)
class Samples:
    """Per-launch device times of one kernel in one run, in microseconds.

    ``meta`` records how they were taken (cold or hot L2, CUDA graph, launches per sample, flush
    bytes, input sets) so a baseline says what it measured. Construction validates the times and
    raises :class:`StatsError` for an empty set or a non-positive or non-finite time.
    """

    times_us: tuple[float, ...]
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "times_us", _validate_times(self.times_us, "samples"))
        object.__setattr__(self, "meta", dict(self.meta))

    @classmethod
    def of(cls, times_us: Iterable[Any], what: str = "samples", **meta: Any) -> Samples:
        """Build from any iterable of numbers; ``what`` names the source in error messages."""
        return cls(_validate_times(times_us, what), meta)

    @property
    def n(self) -> int:
        return len(self.times_us)

    def quantile(self, q: float | Sequence[float]) -> Any:
        """Quantile(s) of the times (numpy's default linear interpolation)."""
        import numpy as np

        result = np.quantile(np.asarray(self.times_us), q)
        return float(result) if np.ndim(result) == 0 else [float(x) for x in result]

    @property
    def median(self) -> float:
        return float(self.quantile(0.5))

    @property
    def q1(self) -> float:
        return float(self.quantile(0.25))

    @property
    def q3(self) -> float:
        return float(self.quantile(0.75))

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @property
    def min(self) -> float:
        return min(self.times_us)

    def scaled(self, factor: float) -> Samples:
        """The same samples, each multiplied by ``factor`` (an injected slowdown)."""
        return Samples(tuple(t * factor for t in self.times_us), self.meta)

    def to_json(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "median_us": self.median,
            "q1_us": self.q1,
            "q3_us": self.q3,
            "min_us": self.min,
            "samples_us": [round(t, 4) for t in self.times_us],
            "meta": dict(self.meta),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], what: str = "samples") -> Samples:
        """Inverse of :meth:`to_json`; raises :class:`StatsError` naming ``what`` on bad data."""
        if not isinstance(data, Mapping) or not isinstance(data.get("samples_us"), list):
            raise StatsError(f"{what}: expected an object with a 'samples_us' list")
        meta = data.get("meta") or {}
        if not isinstance(meta, Mapping):
            raise StatsError(f"{what}: 'meta' must be an object")
        return cls(_validate_times(data["samples_us"], what), meta)


# --------------------------------------------------------------------------- the decision


@dataclass(frozen=True)
class Comparison:
    """The gate's view of candidate vs baseline; ``regressed`` is the verdict."""

    baseline_median_us: float
    candidate_median_us: float
    ratio: float  # candidate median / baseline median
    p_value: float  # one-sided Mann-Whitney U: candidate slower
    threshold: float
    alpha: float
    n_baseline: int
    n_candidate: int
    regressed: bool
    significant: bool
    ci_low: float | None = None  # bootstrap CI of the median ratio, when asked for
    ci_high: float | None = None

    @property
    def change(self) -> float:
        """Relative change of the median: +0.05 is 5% slower."""
        return self.ratio - 1.0

    def describe(self) -> str:
        """``812.3 us vs 790.1 us baseline (+2.8%, p=0.04)``"""
        ci = ""
        if self.ci_low is not None and self.ci_high is not None:
            ci = f", 95% CI {self.ci_low - 1:+.1%}..{self.ci_high - 1:+.1%}"
        return (
            f"{self.candidate_median_us:.1f} us vs {self.baseline_median_us:.1f} us baseline "
            f"({self.change:+.1%}, p={_fmt_p(self.p_value)}{ci})"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "baseline_median_us": self.baseline_median_us,
            "candidate_median_us": self.candidate_median_us,
            "ratio": self.ratio,
            "change": self.change,
            "p_value": self.p_value,
            "threshold": self.threshold,
            "alpha": self.alpha,
            "n_baseline": self.n_baseline,
            "n_candidate": self.n_candidate,
            "regressed": self.regressed,
            "significant": self.significant,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
        }


def _fmt_p(p: float) -> str:
    return f"{p:.2g}" if p >= 1e-4 else f"{p:.1e}"


def min_samples_for(alpha: float) -> int:
    """Smallest n (per side, equal sizes) at which the exact one-sided U test can reach ``alpha``.

    With n samples on each side the smallest possible p is 1 / C(2n, n); below this n no data, however
    slow, could fail the gate, which would make it silently toothless.
    """
    n = 1
    while 1.0 / math.comb(2 * n, n) >= alpha:
        n += 1
    return n


def _check_power(n_base: int, n_cand: int, alpha: float) -> None:
    smallest_p = 1.0 / math.comb(n_base + n_cand, n_base)
    if smallest_p >= alpha:
        raise StatsError(
            f"{n_base} baseline and {n_cand} candidate samples cannot reach alpha={alpha:g} (the "
            f"smallest possible p is {smallest_p:.2g}); take at least {min_samples_for(alpha)} samples on each side"
        )


def _decide(base: Any, cand: Any, threshold: float, alpha: float) -> tuple[Any, Any, Any, Any]:
    """Vectorised core: rows of ``base`` (T, n) vs rows of ``cand`` (T, m).

    Returns (regressed, significant, ratio, p) arrays of length T. Used by :func:`compare` and by the
    rate estimators, so the simulated rates are those of the rule the gate applies.
    """
    import numpy as np
    from scipy import stats as sps

    ratio = np.median(cand, axis=1) / np.median(base, axis=1)
    # The exact distribution is only worth its cost for tiny samples; with ties scipy falls back to
    # the normal approximation on its own.
    method = "exact" if min(base.shape[1], cand.shape[1]) <= 8 else "asymptotic"
    p = sps.mannwhitneyu(cand, base, alternative="greater", axis=1, method=method).pvalue
    p = np.atleast_1d(np.asarray(p, dtype=float))
    significant = p < alpha
    regressed = significant & (ratio > 1.0 + threshold)
    return regressed, significant, ratio, p


def compare(
    baseline: Samples | Sequence[float],
    candidate: Samples | Sequence[float],
    *,
    threshold: float = 0.03,
    alpha: float = 0.001,
    ci: bool = False,
    seed: int = 0,
    resamples: int = 2000,
) -> Comparison:
    """Decide whether ``candidate`` is slower than ``baseline``.

    A regression is ``p < alpha`` (one-sided Mann-Whitney U, candidate greater) *and* median ratio
    ``> 1 + threshold``. With ``ci=True`` a percentile bootstrap 95% interval of the median ratio is
    added for the report (it does not enter the verdict). Raises :class:`StatsError` for invalid
    samples, invalid threshold or alpha, or sample counts too small to ever reach ``alpha``.
    """
    import numpy as np

    if not (threshold >= 0.0 and math.isfinite(threshold)):
        raise StatsError(f"threshold={threshold!r} must be a finite number >= 0")
    if not 0.0 < alpha < 1.0:
        raise StatsError(f"alpha={alpha!r} must be in (0, 1)")
    b = baseline if isinstance(baseline, Samples) else Samples.of(baseline, "baseline samples")
    c = candidate if isinstance(candidate, Samples) else Samples.of(candidate, "candidate samples")
    _check_power(b.n, c.n, alpha)
    base = np.asarray(b.times_us, dtype=float)[None, :]
    cand = np.asarray(c.times_us, dtype=float)[None, :]
    regressed, significant, ratio, p = _decide(base, cand, threshold, alpha)
    lo = hi = None
    if ci:
        rng = np.random.default_rng(seed)
        bi = rng.integers(0, b.n, size=(resamples, b.n))
        ci_ = rng.integers(0, c.n, size=(resamples, c.n))
        ratios = np.median(cand[0][ci_], axis=1) / np.median(base[0][bi], axis=1)
        lo, hi = (float(x) for x in np.quantile(ratios, [0.025, 0.975]))
    return Comparison(
        baseline_median_us=b.median,
        candidate_median_us=c.median,
        ratio=float(ratio[0]),
        p_value=float(p[0]),
        threshold=threshold,
        alpha=alpha,
        n_baseline=b.n,
        n_candidate=c.n,
        regressed=bool(regressed[0]),
        significant=bool(significant[0]),
        ci_low=lo,
        ci_high=hi,
    )


# --------------------------------------------------------------------------- error rates


@dataclass(frozen=True)
class RateEstimate:
    """How often the gate failed in ``trials`` comparisons, with a 95% Wilson interval."""

    slowdown: float
    failures: int
    trials: int
    low: float
    high: float

    @property
    def rate(self) -> float:
        return self.failures / self.trials if self.trials else float("nan")

    def to_json(self) -> dict[str, Any]:
        return {"slowdown": self.slowdown, "failures": self.failures, "trials": self.trials,
                "rate": self.rate, "ci95": [self.low, self.high]}


def _estimate(slowdown: float, failures: int, trials: int) -> RateEstimate:
    from scipy import stats as sps

    ci = sps.binomtest(failures, trials).proportion_ci(confidence_level=0.95, method="wilson")
    return RateEstimate(slowdown, failures, trials, float(ci.low), float(ci.high))


@dataclass(frozen=True)
class NoiseModel:
    """A synthetic GPU timing model for checking the gate on the CPU.

    Each run draws a run-level factor ``exp(N(0, drift))`` (run-to-run drift); each sample is the run
    median times ``exp(N(0, sigma))`` (lognormal within-run noise); a fraction ``outlier_rate`` of
    samples is slowed by a uniform factor in ``(0, outlier_scale)`` (preempted or clock-stepped launches).
    """

    median_us: float = 60.0
    sigma: float = 0.02
    drift: float = 0.007
    outlier_rate: float = 0.02
    outlier_scale: float = 0.3

    def sample_runs(self, rng: Any, runs: int, n: int, slowdown: float = 0.0) -> Any:
        """An array (runs, n) of sample times in microseconds, slowed by ``slowdown`` (0.05 = 5%)."""
        import numpy as np

        run_factor = np.exp(rng.normal(0.0, self.drift, size=(runs, 1)))
        noise = np.exp(rng.normal(0.0, self.sigma, size=(runs, n)))
        outliers = (rng.random((runs, n)) < self.outlier_rate) * rng.uniform(0.0, self.outlier_scale, (runs, n))
        return self.median_us * (1.0 + slowdown) * run_factor * noise * (1.0 + outliers)


def simulate_rates(
    model: NoiseModel,
    *,
    slowdowns: Sequence[float] = (0.0, 0.03, 0.05, 0.10),
    trials: int = 400,
    n: int = 100,
    threshold: float = 0.03,
    alpha: float = 0.001,
    seed: int = 0,
) -> dict[float, RateEstimate]:
    """Failure rate of the gate per injected slowdown under ``model`` (slowdown 0 is the false-alarm rate).

    Each trial draws an independent baseline run and candidate run of ``n`` samples. Deterministic for a
    given ``seed``. Raises :class:`StatsError` for ``trials < 1`` or an ``n`` too small for ``alpha``.
    """
    import numpy as np

    if trials < 1:
        raise StatsError(f"trials={trials} must be >= 1")
    _check_power(n, n, alpha)
    rng = np.random.default_rng(seed)
    out: dict[float, RateEstimate] = {}
    for s in slowdowns:
        base = model.sample_runs(rng, trials, n)
        cand = model.sample_runs(rng, trials, n, slowdown=s)
        regressed = _decide(base, cand, threshold, alpha)[0]
        out[s] = _estimate(s, int(regressed.sum()), trials)
    return out


def resample_rates(
    runs: Sequence[Samples | Sequence[float]],
    *,
    slowdowns: Sequence[float] = (0.0, 0.03, 0.05, 0.10),
    threshold: float = 0.03,
    alpha: float = 0.001,
    bootstrap: int = 0,
    seed: int = 0,
) -> dict[float, RateEstimate]:
    """Failure rates of the gate estimated from repeated real runs of the *same* code.

    Every ordered pair of distinct runs (i, j) is one comparison: run i is the baseline and run j,
    each sample multiplied by ``1 + slowdown``, the candidate. Pairs of different runs carry the real
    run-to-run drift, which a split of one run would hide. ``bootstrap > 0`` adds that many resampled
    comparisons per pair (samples drawn with replacement), for smoother rates from few runs. Raises
    :class:`StatsError` with fewer than 2 runs or runs too short for ``alpha``.
    """
    import numpy as np

    arrays = [
        np.asarray(r.times_us if isinstance(r, Samples) else _validate_times(r, f"run {k}"), dtype=float)
        for k, r in enumerate(runs)
    ]
    if len(arrays) < 2:
        raise StatsError(f"resample_rates needs at least 2 runs of the same code, got {len(arrays)}")
    n_min = min(len(a) for a in arrays)
    _check_power(n_min, n_min, alpha)
    # Runs may differ in length: compare on the first n_min samples of each so rows stack.
    arr = np.stack([a[:n_min] for a in arrays])
    pairs = [(i, j) for i in range(len(arr)) for j in range(len(arr)) if i != j]
    bi = np.array([p[0] for p in pairs])
    ci = np.array([p[1] for p in pairs])
    rng = np.random.default_rng(seed)
    out: dict[float, RateEstimate] = {}
    for s in slowdowns:
        base, cand = arr[bi], arr[ci] * (1.0 + s)
        if bootstrap > 0:
            idx_b = rng.integers(0, n_min, size=(bootstrap, *base.shape))
            idx_c = rng.integers(0, n_min, size=(bootstrap, *cand.shape))
            base = np.take_along_axis(np.broadcast_to(base, idx_b.shape), idx_b, axis=2).reshape(-1, n_min)
            cand = np.take_along_axis(np.broadcast_to(cand, idx_c.shape), idx_c, axis=2).reshape(-1, n_min)
        regressed = _decide(base, cand, threshold, alpha)[0]
        out[s] = _estimate(s, int(regressed.sum()), len(regressed))
    return out
