"""The perf gate's error rates, measured: how often the gate of :mod:`pytest_pipecheck.perf.stats` fails.

Whether a (threshold, alpha) pair meets the target (a 5% slowdown caught >= 95% of the time, same code
failing <= 1% of the time) depends on the run-to-run drift, which only repeated runs on the GPU can show.
:func:`resample_rates` measures both rates from such runs (``scripts/gpu/perf_gate_rates.py``,
``scripts/perf_gate_sweep.py``) and :func:`simulate_rates` from a synthetic :class:`NoiseModel`, for
the raw, always-anchored and adaptive gates, deciding by the same rule as
:func:`pytest_pipecheck.perf.stats.compare` (its vectorised form). The plugin does not use this module;
the evidence scripts import it from this directory, the tests load it by path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# the gate's own rule, vectorised: the rates measured here are those of the plugin's decision
from pytest_pipecheck.perf.stats import (
    DEFAULT_CLOCK_TOLERANCE,
    Samples,
    StatsError,
    _anchor_shift,
    _check_mode,
    _check_power,
    _decide,
    _validate_times,
    clock_moved,
)

__all__ = ["LOCKSTEP_MODEL", "RATE_MODES", "NoiseModel", "RateEstimate", "estimate", "gate_rows", "resample_rates",
           "simulate_paired_rates", "simulate_rates", "simulate_stored_rates"]


#: The gates the rate estimators can evaluate: raw times, kernel/anchor ratios always, or adaptive
#: (ratios only when the anchor shows that the clock moved, as :func:`compare` does by default).
RATE_MODES = ("raw", "anchored", "adaptive")


@dataclass(frozen=True)
class RateEstimate:
    """How often the gate failed in ``trials`` comparisons, with a 95% Wilson interval.

    ``anchored_share``: for the adaptive gate, the fraction of comparisons it decided on the
    kernel/anchor ratios (the clock moved); None for the other gates.
    """

    slowdown: float
    failures: int
    trials: int
    low: float
    high: float
    anchored_share: float | None = None

    @property
    def rate(self) -> float:
        return self.failures / self.trials if self.trials else float("nan")

    def to_json(self) -> dict[str, Any]:
        out = {"slowdown": self.slowdown, "failures": self.failures, "trials": self.trials,
               "rate": self.rate, "ci95": [self.low, self.high]}
        if self.anchored_share is not None:
            out["anchored_share"] = self.anchored_share
        return out


def estimate(slowdown: float, failures: int, trials: int, anchored_share: float | None = None) -> RateEstimate:
    from scipy import stats as sps

    ci = sps.binomtest(failures, trials).proportion_ci(confidence_level=0.95, method="wilson")
    return RateEstimate(slowdown, failures, trials, float(ci.low), float(ci.high), anchored_share)


def gate_rows(mode: str, base: Any, cand: Any, base_anchor: Any, cand_anchor: Any, *, threshold: float,
               alpha: float, clock_tolerance: float) -> tuple[Any, Any]:
    """The gate of ``mode`` on rows of kernel times (and anchor times): (regressed, gated anchored)."""
    import numpy as np

    if mode == "raw":
        regressed = _decide(base, cand, threshold, alpha)[0]
        return regressed, np.zeros(len(regressed), dtype=bool)
    anchored = _decide(base / base_anchor, cand / cand_anchor, threshold, alpha)[0]
    if mode == "anchored":
        return anchored, np.ones(len(anchored), dtype=bool)
    moved = clock_moved(*_anchor_shift(base_anchor, cand_anchor), clock_tolerance, alpha)
    raw = _decide(base, cand, threshold, alpha)[0]
    return np.where(moved, anchored, raw), moved


def _check_rate_mode(mode: str, clock_tolerance: float) -> None:
    if mode not in RATE_MODES:
        raise StatsError(f"mode={mode!r} must be one of {', '.join(RATE_MODES)}")
    _check_mode("adaptive", clock_tolerance)


@dataclass(frozen=True)
class NoiseModel:
    """A synthetic GPU timing model for checking the gate on the CPU.

    Each run draws a run-level factor ``exp(N(0, drift))`` (run-to-run drift of the kernel alone);
    each sample is the run median times ``exp(N(0, sigma))`` (lognormal within-run noise); a fraction
    ``outlier_rate`` of samples is slowed by a uniform factor in ``(0, outlier_scale)`` (preempted or
    clock-stepped launches).

    The clock: ``clock_drift`` is the sd of a log run-level factor and ``clock_jitter`` of a log
    per-sample factor that hit the kernel *and* its anchor alike (the SM clock under a different
    power or thermal state). The anchor's own noise is lognormal ``anchor_sigma`` per sample around
    ``anchor_median_us`` and, with ``anchor_drift`` > 0, a log run-level factor of that sd that the
    kernel does not share (on an H200 the anchor's run medians move about 0.55% run to run while the
    clock holds: recording s2, docs/validation/2026-11-22-h200-0223/perf_gate_rates-0318.md).
    """

    median_us: float = 60.0
    sigma: float = 0.02
    drift: float = 0.007
    outlier_rate: float = 0.02
    outlier_scale: float = 0.3
    clock_drift: float = 0.0
    clock_jitter: float = 0.0
    anchor_median_us: float = 60.0
    anchor_sigma: float = 0.01
    anchor_drift: float = 0.0

    def _kernel(self, rng: Any, runs: int, n: int, slowdown: float) -> Any:
        import numpy as np

        run_factor = np.exp(rng.normal(0.0, self.drift, size=(runs, 1)))
        noise = np.exp(rng.normal(0.0, self.sigma, size=(runs, n)))
        outliers = (rng.random((runs, n)) < self.outlier_rate) * rng.uniform(0.0, self.outlier_scale, (runs, n))
        return self.median_us * (1.0 + slowdown) * run_factor * noise * (1.0 + outliers)

    def _clock(self, rng: Any, runs: int, n: int) -> Any:
        import numpy as np

        return (np.exp(rng.normal(0.0, self.clock_drift, size=(runs, 1)))
                * np.exp(rng.normal(0.0, self.clock_jitter, size=(runs, n))))

    def sample_runs(self, rng: Any, runs: int, n: int, slowdown: float = 0.0) -> Any:
        """An array (runs, n) of sample times in microseconds, slowed by ``slowdown`` (0.05 = 5%)."""
        kernel = self._kernel(rng, runs, n, slowdown)
        if self.clock_drift > 0.0 or self.clock_jitter > 0.0:
            kernel = kernel * self._clock(rng, runs, n)
        return kernel

    def sample_paired_runs(self, rng: Any, runs: int, n: int, slowdown: float = 0.0) -> tuple[Any, Any]:
        """Kernel and anchor arrays (runs, n), sample i of both under the same clock factor.

        ``slowdown`` slows the kernel only (a regression of the code under test).
        """
        import numpy as np

        kernel = self._kernel(rng, runs, n, slowdown)
        clock = self._clock(rng, runs, n)
        anchor = self.anchor_median_us * np.exp(rng.normal(0.0, self.anchor_sigma, size=(runs, n)))
        if self.anchor_drift > 0.0:  # drawn only when asked, so older seeds draw what they drew
            anchor = anchor * np.exp(rng.normal(0.0, self.anchor_drift, size=(runs, 1)))
        return kernel * clock, anchor * clock

    def sample_lockstep_runs(self, rng: Any, runs: int, n: int, slowdown: float = 0.0) -> tuple[Any, Any]:
        """Base and head arrays (runs, n) as ``--pipecheck-compare`` times them: two processes in turns, so
        sample i of both under the same clock factor (run level and per sample), each process with its own
        kernel level (``drift``), within-run noise and outliers. ``slowdown`` slows the head only."""
        clock = self._clock(rng, runs, n)
        base = self._kernel(rng, runs, n, 0.0)
        head = self._kernel(rng, runs, n, slowdown)
        return base * clock, head * clock


def simulate_rates(
    model: NoiseModel,
    *,
    slowdowns: Sequence[float] = (0.0, 0.03, 0.05, 0.10),
    trials: int = 400,
    n: int = 100,
    threshold: float = 0.03,
    alpha: float = 0.001,
    seed: int = 0,
    anchored: bool = False,
    mode: str | None = None,
    clock_tolerance: float = DEFAULT_CLOCK_TOLERANCE,
) -> dict[float, RateEstimate]:
    """Failure rate of the gate per injected slowdown under ``model`` (slowdown 0 is the false-alarm rate).

    Each trial draws an independent baseline run and candidate run of ``n`` samples. ``mode`` picks
    the gate: ``"raw"`` (kernel times only), ``"anchored"`` (each run also has its anchor samples,
    :meth:`NoiseModel.sample_paired_runs`, and the gate always decides on the kernel/anchor ratios)
    or ``"adaptive"`` (the ratios only when the anchor moved by more than ``clock_tolerance``,
    significantly; raw times otherwise: :func:`compare`'s default). ``mode=None`` is ``"anchored"``
    with ``anchored=True``, else ``"raw"``. Deterministic for a given ``seed``. Raises
    :class:`StatsError` for ``trials < 1``, an ``n`` too small for ``alpha`` or an unknown mode.
    """
    import numpy as np

    mode = mode or ("anchored" if anchored else "raw")
    _check_rate_mode(mode, clock_tolerance)
    if trials < 1:
        raise StatsError(f"trials={trials} must be >= 1")
    _check_power(n, n, alpha)
    rng = np.random.default_rng(seed)
    out: dict[float, RateEstimate] = {}
    for s in slowdowns:
        if mode == "raw":
            base = model.sample_runs(rng, trials, n)
            cand = model.sample_runs(rng, trials, n, slowdown=s)
            regressed, gated = gate_rows("raw", base, cand, None, None, threshold=threshold, alpha=alpha,
                                          clock_tolerance=clock_tolerance)
        else:
            bk, ba = model.sample_paired_runs(rng, trials, n)
            ck, ca = model.sample_paired_runs(rng, trials, n, slowdown=s)
            regressed, gated = gate_rows(mode, bk, ck, ba, ca, threshold=threshold, alpha=alpha,
                                          clock_tolerance=clock_tolerance)
        share = float(gated.mean()) if mode == "adaptive" else None
        out[s] = estimate(s, int(regressed.sum()), trials, share)
    return out


def resample_rates(
    runs: Sequence[Samples | Sequence[float]],
    *,
    slowdowns: Sequence[float] = (0.0, 0.03, 0.05, 0.10),
    threshold: float = 0.03,
    alpha: float = 0.001,
    bootstrap: int = 0,
    seed: int = 0,
    anchors: Sequence[Sequence[float]] | None = None,
    mode: str | None = None,
    clock_tolerance: float = DEFAULT_CLOCK_TOLERANCE,
) -> dict[float, RateEstimate]:
    """Failure rates of the gate estimated from repeated real runs of the *same* code.

    Every ordered pair of distinct runs (i, j) is one comparison: run i is the baseline and run j,
    each kernel sample multiplied by ``1 + slowdown`` (the anchor's left as they are), the candidate.
    Pairs of different runs carry the real run-to-run drift, which a split of one run would hide.
    ``bootstrap > 0`` adds that many resampled comparisons per pair (kernel and anchor samples drawn
    with replacement as pairs), for smoother rates from few runs.

    ``anchors`` gives each run's anchor samples (one per kernel sample); runs that are all anchored
    :class:`Samples` carry them without it. ``mode`` picks the gate: ``"raw"`` (kernel times),
    ``"anchored"`` (always the kernel/anchor ratios) or ``"adaptive"`` (the ratios only for pairs
    whose anchor moved by more than ``clock_tolerance``, significantly at ``alpha``; raw times for
    the others: :func:`compare`'s default); ``None`` is ``"anchored"`` when anchors are available,
    else ``"raw"``. This is the offline evaluation that re-analyses recorded GPU samples under any
    gate (``scripts/gpu/perf_gate_rates.py --offline``). Raises :class:`StatsError` with fewer than
    2 runs, runs too short for ``alpha``, anchors that do not pair up with the runs, an unknown mode
    or a mode that needs anchors without them.
    """
    import numpy as np

    arrays = [
        np.asarray(r.times_us if isinstance(r, Samples) else _validate_times(r, f"run {k}"), dtype=float)
        for k, r in enumerate(runs)
    ]
    if len(arrays) < 2:
        raise StatsError(f"resample_rates needs at least 2 runs of the same code, got {len(arrays)}")
    if anchors is None and all(isinstance(r, Samples) and r.anchored for r in runs):
        anchors = [r.anchor_us for r in runs if isinstance(r, Samples) and r.anchor_us is not None]
    mode = mode or ("anchored" if anchors is not None else "raw")
    _check_rate_mode(mode, clock_tolerance)
    anchor_arrays: list[Any] | None = None
    if anchors is not None:
        if len(anchors) != len(arrays):
            raise StatsError(f"resample_rates: {len(anchors)} anchor runs for {len(arrays)} runs")
        anchor_arrays = [np.asarray(_validate_times(a, f"anchor run {k}"), dtype=float) for k, a in enumerate(anchors)]
        if any(len(a) != len(k) for a, k in zip(anchor_arrays, arrays)):
            raise StatsError("resample_rates: each run needs one anchor sample per kernel sample")
    elif mode != "raw":
        raise StatsError(f"resample_rates(mode={mode!r}) needs the runs' anchor samples")
    n_min = min(len(a) for a in arrays)
    _check_power(n_min, n_min, alpha)
    # Runs may differ in length: compare on the first n_min samples of each so rows stack.
    kern = np.stack([a[:n_min] for a in arrays])
    anch = np.stack([a[:n_min] for a in anchor_arrays]) if anchor_arrays is not None else np.ones_like(kern)
    pairs = [(i, j) for i in range(len(kern)) for j in range(len(kern)) if i != j]
    bi = np.array([p[0] for p in pairs])
    ci = np.array([p[1] for p in pairs])
    rng = np.random.default_rng(seed)
    out: dict[float, RateEstimate] = {}
    for s in slowdowns:
        base, cand = kern[bi], kern[ci] * (1.0 + s)
        base_a, cand_a = anch[bi], anch[ci]
        if bootstrap > 0:
            idx_b = rng.integers(0, n_min, size=(bootstrap, *base.shape))
            idx_c = rng.integers(0, n_min, size=(bootstrap, *cand.shape))

            def draw(x: Any, idx: Any) -> Any:
                return np.take_along_axis(np.broadcast_to(x, idx.shape), idx, axis=2).reshape(-1, n_min)

            base, base_a = draw(base, idx_b), draw(base_a, idx_b)
            cand, cand_a = draw(cand, idx_c), draw(cand_a, idx_c)
        regressed, gated = gate_rows(mode, base, cand, base_a, cand_a, threshold=threshold, alpha=alpha,
                                      clock_tolerance=clock_tolerance)
        share = float(gated.mean()) if mode == "adaptive" else None
        out[s] = estimate(s, int(regressed.sum()), len(regressed), share)
    return out


#: The noise model both gates are compared under (scripts/compare_gate_model.py, tests/unit/test_perf_paired.py,
#: docs/perf-gate.md "Compare mode"): a compute-bound kernel of 70 us with 2% lognormal noise per sample and
#: 2% of samples slowed by up to 30%; the clock of recording s1 (run-level sd 0.0138, 0.3% per sample),
#: shared by whatever is timed at the same moment; the anchor's own run drift of recording s2 (0.0056); and
#: each run's (each process's) own kernel level, sd 0.003: the level offsets of three fresh processes in
#: recordings s2 to s5 lay within +-0.0056 (a memory-bound add's raw times, a matmul's anchored ratios).
LOCKSTEP_MODEL = NoiseModel(median_us=70.0, sigma=0.02, drift=0.003, outlier_rate=0.02, outlier_scale=0.3,
                            clock_drift=0.0138, clock_jitter=0.003, anchor_drift=0.0056)


def simulate_paired_rates(
    model: NoiseModel,
    *,
    slowdowns: Sequence[float] = (0.0, 0.03, 0.05, 0.10),
    trials: int = 400,
    n: int = 100,
    threshold: float | None = None,
    alpha: float = 0.001,
    seed: int = 0,
) -> dict[float, RateEstimate]:
    """Failure rate of compare mode's paired gate per injected slowdown (0: the A/A rate) under ``model``.

    Each trial times ``n`` pairs in lockstep (:meth:`NoiseModel.sample_lockstep_runs`) and decides with
    :func:`pytest_pipecheck.perf.paired.paired_decide`, the rule ``--pipecheck-compare`` applies;
    ``threshold`` None is the plugin's default. Deterministic for a given ``seed``.
    """
    import numpy as np

    from pytest_pipecheck.perf.paired import DEFAULT_PAIRED_THRESHOLD, min_pairs_for, paired_decide

    thr = DEFAULT_PAIRED_THRESHOLD if threshold is None else threshold
    if trials < 1:
        raise StatsError(f"trials={trials} must be >= 1")
    if n < min_pairs_for(alpha):
        raise StatsError(f"n={n} pairs cannot reach alpha={alpha:g}")
    rng = np.random.default_rng(seed)
    out: dict[float, RateEstimate] = {}
    for s in slowdowns:
        base, head = model.sample_lockstep_runs(rng, trials, n, slowdown=s)
        regressed = paired_decide(base, head, thr, alpha)[0]
        out[s] = estimate(s, int(regressed.sum()), trials)
    return out


def simulate_stored_rates(
    model: NoiseModel,
    *,
    slowdowns: Sequence[float] = (0.0, 0.03, 0.05, 0.10),
    trials: int = 400,
    n: int = 100,
    threshold: float | None = None,
    alpha: float = 0.001,
    seed: int = 0,
    baseline_runs: int | None = None,
    mode: str = "anchored",
) -> dict[float, RateEstimate]:
    """Failure rate of the stored-baseline gate as the plugin runs it by default, under ``model``.

    The baseline pools ``baseline_runs`` runs (default: the plugin's), each with its own clock and kernel
    level, timed interleaved with the anchor; the candidate is one more run. ``mode`` ``"anchored"``
    gates on the kernel/anchor ratios (per-kind, a compute-bound kernel), ``"raw"`` on raw times (a
    memory-bound one); ``threshold`` None is the plugin's default. Deterministic for a given ``seed``.
    """
    import numpy as np

    from pytest_pipecheck.perf.stats import DEFAULT_BASELINE_RUNS, DEFAULT_THRESHOLD

    if mode not in ("anchored", "raw"):
        raise StatsError(f"mode={mode!r} must be 'anchored' or 'raw'")
    thr = DEFAULT_THRESHOLD if threshold is None else threshold
    kb = DEFAULT_BASELINE_RUNS if baseline_runs is None else baseline_runs
    if trials < 1 or kb < 1:
        raise StatsError(f"trials={trials} and baseline_runs={kb} must be >= 1")
    _check_power(kb * n, n, alpha)
    rng = np.random.default_rng(seed)
    out: dict[float, RateEstimate] = {}
    for s in slowdowns:
        runs = [model.sample_paired_runs(rng, trials, n) for _ in range(kb)]
        bk = np.concatenate([r[0] for r in runs], axis=1)
        ba = np.concatenate([r[1] for r in runs], axis=1)
        ck, ca = model.sample_paired_runs(rng, trials, n, slowdown=s)
        regressed, _ = gate_rows(mode, bk, ck, ba, ca, threshold=thr, alpha=alpha,
                                 clock_tolerance=DEFAULT_CLOCK_TOLERANCE)
        out[s] = estimate(s, int(regressed.sum()), trials)
    return out
