"""The perf gate's statistics: samples, the regression decision, and its error rates.

A kernel's time in one run is a set of per-launch samples (microseconds). Comparing a candidate
run with a stored baseline run has two sources of noise:

* within a run, samples scatter (launch jitter, clock steps, the odd preempted launch). With a
  hundred samples per side a rank test sees through this easily;
* between runs, the whole distribution moves (a new process, another clock bin, the GPU warmer or
  cooler). A rank test on within-run samples cannot see this drift as noise: given enough samples it
  calls a 0.5% drift "significant".

So the gate needs both parts (as asv does: a 1.1x change and a Mann-Whitney p < 0.002): a regression is
declared only when

1. a one-sided Mann-Whitney U test says the candidate is slower with ``p < alpha``, *and*
2. the ratio of medians exceeds ``1 + threshold``, the practical threshold that absorbs drift.

Clock-drift anchoring. The between-run drift of a compute-bound kernel is mostly the SM clock (boost
after idle, lower under sustained power draw), and it moves every compute-bound workload alike. So a
run may carry a second set of samples, an *anchor* (a fixed matmul or copy of the same kind as the
kernel) timed interleaved with the kernel, sample by sample, under the same clock. The gate then
compares the per-sample ratios kernel/anchor (the rank test on log ratios, the threshold on the ratio
of their medians): a clock shared by both cancels, a slowdown of the kernel alone does not.

The ratio also carries the anchor's own run-to-run noise, which costs power when the clock held, and
a memory-bound kernel's time barely follows the clock at all. So :func:`compare` has three modes:
``"per-kind"`` (the default, here and in the plugin's ``perf_anchor_mode``) gates on the ratios when
the anchor is a matmul (a compute-bound kernel) and on raw times when it is a copy (a memory-bound
one); ``"always"`` always on the ratios; ``"adaptive"`` treats the anchor as a clock probe, the ratios
deciding only when the anchor itself moved by more than a clock tolerance, significantly. Where the
clock drifted 3.4% between runs, adaptive gating let 1.5% of A/A pairs fail and caught +5% in only 87%
of pairs, while the ratios gave 0% and 95%; the copy anchor added up to 0.8% A/A to a memory-bound
kernel that had 0% on raw times (docs/perf-gate.md).

Pooling. One baseline run against one candidate run carries two run levels' drift. A baseline saved
from :data:`DEFAULT_BASELINE_RUNS` runs (:meth:`Samples.pooled`) halves the baseline's share; with
per-kind gating and a threshold of :data:`DEFAULT_THRESHOLD` that met both targets in every
recorded H200 run, where no single-run setting did.

Whether a (threshold, alpha) pair meets the target (a 5% slowdown caught >= 95% of the time, same
code failing <= 1% of the time) depends on the drift, which only repeated runs on the GPU can show;
``scripts/perf_rates.py`` measures both rates from such runs and from a noise model (the evidence
scripts and the tests use it; the plugin does not). numpy and scipy are imported inside the functions
so importing this module stays cheap.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..results import PipecheckError

__all__ = [
    "ANCHOR_MODES",
    "ANCHOR_NOTE_NONE",
    "DEFAULT_BASELINE_RUNS",
    "DEFAULT_CLOCK_TOLERANCE",
    "DEFAULT_THRESHOLD",
    "Comparison",
    "Samples",
    "StatsError",
    "anchor_label",
    "anchoring",
    "clock_moved",
    "compare",
    "min_samples_for",
    "per_kind_anchored",
]


ANCHOR_NOTE_NONE = "no anchor was timed"

#: How a comparison with a common anchor is gated: "per-kind" (on the kernel/anchor ratios when the anchor
#: is a matmul, i.e. the kernel is compute-bound; on raw times when it is a copy, i.e. memory-bound),
#: "always" (always on the ratios) or "adaptive" (on the ratios only when the anchor shows that the
#: clock moved, on raw times otherwise). The first is the default (docs/perf-gate.md).
ANCHOR_MODES = ("per-kind", "always", "adaptive")

#: The practical threshold of the gate: a slowdown below this fraction never fails. With a baseline
#: pooled from :data:`DEFAULT_BASELINE_RUNS` runs and per-kind anchoring, 2.75% met both targets in every
#: recorded H200 run (chosen on two, held out on two more; docs/perf-gate.md).
DEFAULT_THRESHOLD = 0.0275

#: How many runs a saved baseline pools (their samples concatenated): one run's level carries the
#: run-to-run drift; a candidate of one run against a baseline of two halves that share of it.
DEFAULT_BASELINE_RUNS = 2

#: The adaptive gate's clock tolerance: an anchor change within it means the clock did not move.
#: Chosen from the recorded H200 samples and a synthetic model of their drift (docs/perf-gate.md).
DEFAULT_CLOCK_TOLERANCE = 0.015


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
    bytes, input sets) so a baseline says what it measured. ``anchor_us``, when present, holds one
    anchor time per kernel sample (timed right after it, under the same clock) and ``anchor`` the
    anchor's definition (a JSON object: kind, shape, dtype...). Construction validates the times and
    raises :class:`StatsError` for an empty set, a non-positive or non-finite time, or anchor times
    that do not pair up one to one with the kernel's.
    """

    times_us: tuple[float, ...]
    meta: Mapping[str, Any] = field(default_factory=dict)
    anchor_us: tuple[float, ...] | None = None
    anchor: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "times_us", _validate_times(self.times_us, "samples"))
        object.__setattr__(self, "meta", dict(self.meta))
        if self.anchor_us is not None:
            anchor_us = _validate_times(self.anchor_us, "anchor samples")
            if len(anchor_us) != len(self.times_us):
                raise StatsError(
                    f"anchor samples: {len(anchor_us)} anchor times for {len(self.times_us)} kernel times; "
                    "each kernel sample needs the anchor sample taken with it"
                )
            object.__setattr__(self, "anchor_us", anchor_us)
            object.__setattr__(self, "anchor", dict(self.anchor or {}))
        elif self.anchor is not None:
            raise StatsError("anchor samples: an anchor definition without anchor times")

    @classmethod
    def of(cls, times_us: Iterable[Any], what: str = "samples", *, anchor_us: Iterable[Any] | None = None,
           anchor: Mapping[str, Any] | None = None, **meta: Any) -> Samples:
        """Build from any iterable of numbers; ``what`` names the source in error messages.

        ``anchor_us`` (one per kernel sample) and ``anchor`` (its definition) make anchored samples.
        """
        kernel = _validate_times(times_us, what)
        anchors = None if anchor_us is None else _validate_times(anchor_us, f"{what} (anchor)")
        if anchors is not None and anchor is None:
            anchor = {"kind": "unspecified"}
        return cls(kernel, meta, anchors, anchor)

    @property
    def n(self) -> int:
        return len(self.times_us)

    @property
    def anchored(self) -> bool:
        return self.anchor_us is not None

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

    @property
    def anchor_median(self) -> float | None:
        import numpy as np

        return None if self.anchor_us is None else float(np.median(np.asarray(self.anchor_us)))

    def ratios(self) -> tuple[float, ...]:
        """Per-sample kernel/anchor ratios; raises :class:`StatsError` without anchor samples."""
        if self.anchor_us is None:
            raise StatsError("samples have no anchor: no kernel/anchor ratios")
        return tuple(k / a for k, a in zip(self.times_us, self.anchor_us))

    def scaled(self, factor: float) -> Samples:
        """The same samples, each kernel time multiplied by ``factor`` (an injected slowdown)."""
        return Samples(tuple(t * factor for t in self.times_us), self.meta, self.anchor_us, self.anchor)

    def drifted(self, factor: float) -> Samples:
        """Kernel *and* anchor times multiplied by ``factor``: a clock change that hits both alike."""
        anchor_us = None if self.anchor_us is None else tuple(t * factor for t in self.anchor_us)
        return Samples(tuple(t * factor for t in self.times_us), self.meta, anchor_us, self.anchor)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "n": self.n,
            "median_us": self.median,
            "q1_us": self.q1,
            "q3_us": self.q3,
            "min_us": self.min,
            "samples_us": list(self.times_us),  # full precision: json writes repr(float)
            "meta": dict(self.meta),
        }
        if self.anchor_us is not None:
            out["anchor"] = {
                "definition": dict(self.anchor or {}),
                "median_us": self.anchor_median,
                "samples_us": list(self.anchor_us),
            }
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any], what: str = "samples") -> Samples:
        """Inverse of :meth:`to_json`; raises :class:`StatsError` naming ``what`` on bad data.

        An entry without ``anchor`` (written before anchoring existed, or with ``anchor=None``) gives
        samples without an anchor.
        """
        if not isinstance(data, Mapping) or not isinstance(data.get("samples_us"), list):
            raise StatsError(f"{what}: expected an object with a 'samples_us' list")
        meta = data.get("meta") or {}
        if not isinstance(meta, Mapping):
            raise StatsError(f"{what}: 'meta' must be an object")
        times = _validate_times(data["samples_us"], what)
        anchor = data.get("anchor")
        if anchor is None:
            return cls(times, meta)
        if (not isinstance(anchor, Mapping) or not isinstance(anchor.get("samples_us"), list)
                or not isinstance(anchor.get("definition", {}), Mapping)):
            raise StatsError(f"{what}: 'anchor' must be an object with a 'definition' object and a 'samples_us' list")
        anchor_us = _validate_times(anchor["samples_us"], f"{what} (anchor)")
        if len(anchor_us) != len(times):
            raise StatsError(f"{what}: {len(anchor_us)} anchor samples for {len(times)} kernel samples")
        return cls(times, meta, anchor_us, dict(anchor.get("definition") or {}))

    @classmethod
    def pooled(cls, runs: Sequence[Samples]) -> Samples:
        """Several runs of the same kernel as one: their samples concatenated in order.

        Anchored runs concatenate their anchor samples alike, so every kernel sample keeps the anchor
        sample taken with it; all runs must then carry the same anchor. ``meta`` is the first run's,
        plus ``runs`` (how many were pooled) and ``run_medians_us`` (each run's median, so the stored
        baseline shows how far its runs lay apart). One run is returned unchanged. Raises
        :class:`StatsError` for no runs, a mix of anchored and unanchored runs, or different anchors.
        """
        runs = list(runs)
        if not runs:
            raise StatsError("pooled(): no runs to pool")
        if len(runs) == 1:
            return runs[0]
        anchored = {r.anchored for r in runs}
        if len(anchored) > 1:
            raise StatsError("pooled(): some runs carry an anchor and some do not")
        if True in anchored and any(not _same_anchor(runs[0].anchor, r.anchor) for r in runs[1:]):
            raise StatsError(f"pooled(): the runs carry different anchors ({anchor_label(runs[0].anchor)}, ...)")
        times = tuple(t for r in runs for t in r.times_us)
        anchor_us = tuple(t for r in runs for t in (r.anchor_us or ())) if True in anchored else None
        meta = {**runs[0].meta, "runs": len(runs), "run_medians_us": [r.median for r in runs]}
        return cls(times, meta, anchor_us, runs[0].anchor if anchor_us is not None else None)

    @property
    def runs(self) -> int:
        """How many runs these samples pool (1 unless built by :meth:`pooled`)."""
        value = self.meta.get("runs", 1)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else 1


def anchor_label(definition: Mapping[str, Any] | None) -> str:
    """A short human name of an anchor definition (``bf16 matmul 2048x2048x4096``, ``copy 128 MiB``)."""
    if not definition:
        return "no anchor"
    if definition.get("label"):
        return str(definition["label"])
    return ", ".join(f"{k}={v}" for k, v in sorted(definition.items()))


def _same_anchor(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Whether two anchor definitions name the same workload (the label is presentation only)."""
    if a is None or b is None:
        return False
    strip = ("label",)
    return {k: v for k, v in a.items() if k not in strip} == {k: v for k, v in b.items() if k not in strip}


# --------------------------------------------------------------------------- the decision


@dataclass(frozen=True)
class Comparison:
    """The gate's view of candidate vs baseline; ``regressed`` is the verdict.

    ``ratio`` is the ratio the gate decided on: with ``anchored`` the ratio of the median per-sample
    kernel/anchor ratios, otherwise the ratio of the raw medians. ``raw_ratio`` is always the ratio
    of the raw medians. When both runs carry the same anchor, ``anchored_ratio`` is the ratio of
    their median kernel/anchor ratios, ``anchor_change`` and ``anchor_p_value`` the anchor's own
    change and its two-sided significance (the clock probe), and ``decision`` says which series the
    gate decided on and why; ``note`` says why an anchor was not used when there was none to use.
    """

    baseline_median_us: float
    candidate_median_us: float
    ratio: float  # the gated ratio: anchored when ``anchored``, else raw medians
    p_value: float  # one-sided Mann-Whitney U: candidate slower (on log ratios when anchored)
    threshold: float
    alpha: float
    n_baseline: int
    n_candidate: int
    regressed: bool
    significant: bool
    ci_low: float | None = None  # bootstrap CI of the gated ratio, when asked for
    ci_high: float | None = None
    anchored: bool = False  # the gate decided on the kernel/anchor ratios
    raw_ratio: float | None = None  # candidate median / baseline median (raw times); None: same as ratio
    baseline_anchor_us: float | None = None
    candidate_anchor_us: float | None = None
    anchor: Mapping[str, Any] | None = None
    note: str = ""  # why the comparison is not anchored, when no common anchor exists
    anchored_ratio: float | None = None  # ratio of the median kernel/anchor ratios, with a common anchor
    anchor_p_value: float | None = None  # two-sided Mann-Whitney U on the anchor samples
    anchor_mode: str | None = None  # "per-kind", "always" or "adaptive", with a common anchor
    clock_tolerance: float | None = None
    decision: str = ""  # "gated on raw: ..." / "gated on anchored ratios: ...", with a common anchor
    baseline_runs: int = 1  # runs pooled into the baseline's samples (Samples.pooled)

    @property
    def change(self) -> float:
        """Relative change the gate decided on: +0.05 is 5% slower."""
        return self.ratio - 1.0

    @property
    def raw_change(self) -> float:
        """Relative change of the raw median times."""
        return (self.ratio if self.raw_ratio is None else self.raw_ratio) - 1.0

    @property
    def anchor_compared(self) -> bool:
        """Whether both runs carried the same anchor (whichever series the gate then decided on)."""
        return self.anchored_ratio is not None

    @property
    def anchored_change(self) -> float | None:
        """Relative change of the median kernel/anchor ratios; None without a common anchor."""
        return None if self.anchored_ratio is None else self.anchored_ratio - 1.0

    @property
    def anchor_change(self) -> float | None:
        """The anchor's own relative change (median times): what the clock did; None without one."""
        if self.baseline_anchor_us is None or self.candidate_anchor_us is None:
            return None
        return self.candidate_anchor_us / self.baseline_anchor_us - 1.0

    @property
    def gated_on(self) -> str:
        """``"anchored"`` or ``"raw"``: the series the verdict was decided on."""
        return "anchored" if self.anchored else "raw"

    def describe(self) -> str:
        """The change the gate decided on first, then the other one, the anchor's own change and why.

        ``812.3 us vs 790.1 us baseline (+2.8%, p=0.04)`` without an anchor;
        ``... (+2.8%, p=0.04; anchored +3.1%; anchor bf16 matmul ... 611.0 us vs 612.3 us, -0.2%; gated
        on raw: the anchor moved -0.2% (within the 1.5% clock tolerance))`` when the clock held;
        ``... (+0.4% anchored to bf16 matmul ..., p=0.3; raw +20.0%; anchor 57.0 us vs 47.5 us, +20.0%;
        gated on anchored ratios: the anchor moved +20.0%, p=1e-30: the clock changed)`` when it moved.
        """
        ci = ""
        if self.ci_low is not None and self.ci_high is not None:
            ci = f", 95% CI {self.ci_low - 1:+.1%}..{self.ci_high - 1:+.1%}"
        pooled = f" of {self.baseline_runs} runs" if self.baseline_runs > 1 else ""
        head = f"{self.candidate_median_us:.1f} us vs {self.baseline_median_us:.1f} us baseline{pooled}"
        anchor_times = ""
        if self.baseline_anchor_us is not None and self.candidate_anchor_us is not None:
            anchor_times = (f"{self.candidate_anchor_us:.1f} us vs {self.baseline_anchor_us:.1f} us, "
                            f"{self.candidate_anchor_us / self.baseline_anchor_us - 1:+.1%}")
        why = f"; {self.decision}" if self.decision else ""
        if self.anchored:
            anchor = f"; anchor {anchor_times}" if anchor_times else ""
            return (f"{head} ({self.change:+.1%} anchored to {anchor_label(self.anchor)}, "
                    f"p={_fmt_p(self.p_value)}{ci}; raw {self.raw_change:+.1%}{anchor}{why})")
        if self.anchored_change is not None:
            anchor = f"; anchor {anchor_label(self.anchor)} {anchor_times}" if anchor_times else ""
            return (f"{head} ({self.change:+.1%}, p={_fmt_p(self.p_value)}{ci}; anchored {self.anchored_change:+.1%}"
                    f"{anchor}{why})")
        note = f"; raw times: {self.note}" if self.note and self.note != ANCHOR_NOTE_NONE else ""
        return f"{head} ({self.change:+.1%}, p={_fmt_p(self.p_value)}{ci}{note})"

    def to_json(self) -> dict[str, Any]:
        return {
            "baseline_median_us": self.baseline_median_us,
            "candidate_median_us": self.candidate_median_us,
            "ratio": self.ratio,
            "change": self.change,
            "raw_ratio": self.ratio if self.raw_ratio is None else self.raw_ratio,
            "raw_change": self.raw_change,
            "p_value": self.p_value,
            "threshold": self.threshold,
            "alpha": self.alpha,
            "n_baseline": self.n_baseline,
            "n_candidate": self.n_candidate,
            "baseline_runs": self.baseline_runs,
            "regressed": self.regressed,
            "significant": self.significant,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "anchored": self.anchored,
            "gated_on": self.gated_on,
            "anchor_compared": self.anchor_compared,
            "anchored_ratio": self.anchored_ratio,
            "anchored_change": self.anchored_change,
            "anchor_definition": None if self.anchor is None else dict(self.anchor),
            "baseline_anchor_us": self.baseline_anchor_us,
            "candidate_anchor_us": self.candidate_anchor_us,
            "anchor_change": self.anchor_change,
            "anchor_p_value": self.anchor_p_value,
            "anchor_mode": self.anchor_mode,
            "clock_tolerance": self.clock_tolerance,
            "decision": self.decision,
            "anchor_note": self.note,
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


def _anchor_shift(base_anchor: Any, cand_anchor: Any) -> tuple[Any, Any]:
    """Vectorised clock probe: rows of anchor samples (T, n) vs (T, m).

    Returns (change, p): the anchor's relative change of medians and the two-sided Mann-Whitney U
    p-value of its samples, arrays of length T.
    """
    import numpy as np
    from scipy import stats as sps

    change = np.median(cand_anchor, axis=1) / np.median(base_anchor, axis=1) - 1.0
    method = "exact" if min(base_anchor.shape[1], cand_anchor.shape[1]) <= 8 else "asymptotic"
    p = sps.mannwhitneyu(cand_anchor, base_anchor, alternative="two-sided", axis=1, method=method).pvalue
    return np.atleast_1d(change), np.atleast_1d(np.asarray(p, dtype=float))


def clock_moved(anchor_change: Any, anchor_p: Any, tolerance: float, alpha: float) -> Any:
    """The adaptive rule: the clock moved when the anchor changed by more than ``tolerance`` *and*
    that change is significant (two-sided ``p < alpha``). Works on numbers and on numpy arrays."""
    import numpy as np

    return (np.abs(anchor_change) > tolerance) & (np.asarray(anchor_p) < alpha)


def per_kind_anchored(anchor: Mapping[str, Any] | None) -> bool:
    """The per-kind rule: gate on the kernel/anchor ratios unless the anchor is a copy.

    A matmul anchor means a compute-bound kernel, whose time follows the SM clock, which drifts
    (run-to-run sd of log medians 0.3% to 3.4% on the H200): the ratios cancel it. A copy anchor means
    a memory-bound kernel, whose time barely drifts (0.09% to 0.23%), while the copy anchor moves on
    its own (0.4% to 0.8%): the ratios would add noise and false alarms, so raw times decide.
    """
    return (anchor or {}).get("kind") != "copy"


def _decision(moved: bool, anchor_change: float, anchor_p: float, tolerance: float, alpha: float,
              mode: str, forced: bool | None, anchor: Mapping[str, Any] | None = None) -> str:
    """The sentence that says which series the gate decided on and why."""
    if forced is True:
        return "gated on anchored ratios: anchored=True was asked for"
    if forced is False:
        return "gated on raw: anchored=False was asked for"
    if mode == "per-kind":
        if per_kind_anchored(anchor):
            return (f"gated on anchored ratios: a {(anchor or {}).get('kind', 'unspecified')} anchor, so a "
                    "compute-bound kernel, whose time follows the drifting clock (per-kind)")
        return ("gated on raw: a copy anchor, so a memory-bound kernel, whose raw times barely drift "
                "(per-kind)")
    if mode == "always":
        return f"gated on anchored ratios: anchor mode 'always' (the anchor moved {anchor_change:+.1%})"
    if moved:
        return (f"gated on anchored ratios: the anchor moved {anchor_change:+.1%}, p={_fmt_p(anchor_p)}: "
                "the clock changed")
    if abs(anchor_change) <= tolerance:
        return f"gated on raw: the anchor moved {anchor_change:+.1%} (within the {tolerance:.1%} clock tolerance)"
    return (f"gated on raw: the anchor moved {anchor_change:+.1%}, not significant (p={_fmt_p(anchor_p)}, "
            f"alpha {alpha:g}): the clock did not measurably move")


def anchoring(baseline: Samples, candidate: Samples) -> tuple[bool, str]:
    """Whether two runs can be compared anchored, and if not, why (a sentence for the report)."""
    if baseline.anchored and candidate.anchored:
        if _same_anchor(baseline.anchor, candidate.anchor):
            return True, ""
        return False, (f"the anchors differ (baseline {anchor_label(baseline.anchor)}, candidate "
                       f"{anchor_label(candidate.anchor)}); save a new baseline to anchor again")
    if candidate.anchored:
        return False, ("the baseline has no anchor (saved by an older pytest-pipecheck or with anchor=None); "
                       "save a new baseline to anchor")
    if baseline.anchored:
        return False, "the candidate was timed without an anchor (anchor=None)"
    return False, ANCHOR_NOTE_NONE


def _check_mode(anchor_mode: str, clock_tolerance: float) -> None:
    if anchor_mode not in ANCHOR_MODES:
        raise StatsError(f"anchor_mode={anchor_mode!r} must be one of {', '.join(ANCHOR_MODES)}")
    if isinstance(clock_tolerance, bool) or not (
            isinstance(clock_tolerance, (int, float)) and math.isfinite(clock_tolerance) and clock_tolerance >= 0.0):
        raise StatsError(f"clock_tolerance={clock_tolerance!r} must be a finite number >= 0")


def compare(
    baseline: Samples | Sequence[float],
    candidate: Samples | Sequence[float],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = 0.001,
    ci: bool = False,
    seed: int = 0,
    resamples: int = 2000,
    anchored: bool | None = None,
    anchor_mode: str = "per-kind",
    clock_tolerance: float = DEFAULT_CLOCK_TOLERANCE,
) -> Comparison:
    """Decide whether ``candidate`` is slower than ``baseline``.

    A regression is ``p < alpha`` (one-sided Mann-Whitney U, candidate greater) *and* median ratio
    ``> 1 + threshold``, on one of two series:

    * the raw times, when the runs share no anchor;
    * with a common anchor (both runs carry samples of the same anchor) and ``anchor_mode="per-kind"``
      (the default), the per-sample kernel/anchor ratios when the anchor is a matmul (or of an
      unspecified kind), the raw times when it is a copy (:func:`per_kind_anchored`);
    * with a common anchor and ``anchor_mode="adaptive"``, the anchor is a clock probe: if its own change (ratio of its medians) exceeds
      ``clock_tolerance`` and a two-sided Mann-Whitney test on its samples gives ``p < alpha``, the
      clock moved and the gate decides on the per-sample kernel/anchor ratios (a clock shared by
      kernel and anchor cancels there); otherwise the clock did not measurably move and the gate
      decides on the raw times, which do not carry the anchor's own noise;
    * with a common anchor and ``anchor_mode="always"``, always on the ratios.

    ``anchored=True`` forces the ratios (and requires a common anchor), ``False`` the raw times;
    ``None`` (the default) lets the rule above decide. Both changes, the anchor's own change and the
    reason (:attr:`Comparison.decision`) are reported either way. With ``ci=True`` a percentile
    bootstrap 95% interval of the gated ratio is added for the report (it does not enter the
    verdict). Raises :class:`StatsError` for invalid samples, threshold, alpha, anchor mode or clock
    tolerance, sample counts too small to ever reach ``alpha``, or ``anchored=True`` without a
    common anchor.
    """
    import numpy as np

    if not (threshold >= 0.0 and math.isfinite(threshold)):
        raise StatsError(f"threshold={threshold!r} must be a finite number >= 0")
    if not 0.0 < alpha < 1.0:
        raise StatsError(f"alpha={alpha!r} must be in (0, 1)")
    _check_mode(anchor_mode, clock_tolerance)
    b = baseline if isinstance(baseline, Samples) else Samples.of(baseline, "baseline samples")
    c = candidate if isinstance(candidate, Samples) else Samples.of(candidate, "candidate samples")
    _check_power(b.n, c.n, alpha)
    can_anchor, note = anchoring(b, c)
    if anchored and not can_anchor:
        raise StatsError(f"anchored comparison impossible: {note}")
    raw_b = np.asarray(b.times_us, dtype=float)
    raw_c = np.asarray(c.times_us, dtype=float)
    raw = (raw_b[None, :], raw_c[None, :])
    extra: dict[str, Any] = {}
    use_anchor = False
    if can_anchor:
        anchor_b = np.asarray(b.anchor_us, dtype=float)[None, :]
        anchor_c = np.asarray(c.anchor_us, dtype=float)[None, :]
        ratios = (raw[0] / anchor_b, raw[1] / anchor_c)
        shift, shift_p = _anchor_shift(anchor_b, anchor_c)
        moved = bool(clock_moved(shift, shift_p, clock_tolerance, alpha)[0])
        if anchored is None:
            if anchor_mode == "per-kind":
                use_anchor = per_kind_anchored(c.anchor)
            else:
                use_anchor = anchor_mode == "always" or moved
        else:
            use_anchor = bool(anchored)
        note = ""
        extra = {
            "anchored_ratio": float(np.median(ratios[1]) / np.median(ratios[0])),
            "anchor_p_value": float(shift_p[0]),
            "anchor_mode": anchor_mode,
            "clock_tolerance": float(clock_tolerance),
            "decision": _decision(moved, float(shift[0]), float(shift_p[0]), clock_tolerance, alpha,
                                  anchor_mode, anchored, c.anchor),
            "baseline_anchor_us": b.anchor_median,
            "candidate_anchor_us": c.anchor_median,
            "anchor": dict(c.anchor or {}),
        }
    base, cand = ratios if use_anchor else raw
    regressed, significant, ratio, p = _decide(base, cand, threshold, alpha)
    lo = hi = None
    if ci:
        rng = np.random.default_rng(seed)
        bi = rng.integers(0, b.n, size=(resamples, b.n))
        ci_ = rng.integers(0, c.n, size=(resamples, c.n))
        boot = np.median(cand[0][ci_], axis=1) / np.median(base[0][bi], axis=1)
        lo, hi = (float(x) for x in np.quantile(boot, [0.025, 0.975]))
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
        anchored=use_anchor,
        raw_ratio=c.median / b.median,
        baseline_runs=b.runs,
        note=note,
        **extra,
    )
