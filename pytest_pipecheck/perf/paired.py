"""The paired gate of ``--pipecheck-compare``: the head against REV, timed in lockstep.

In compare mode the kernel as of REV (the base) and as of the working tree (the head) are timed in the
same job on the same GPU, one sample each in turn, so sample i of both runs under the same clock, power
and thermal state. The base is then the head's anchor in the sense of :mod:`.stats` (a workload timed
interleaved with it, sample by sample): the gate works on the per-pair ratios ``head_i / base_i``, and
whatever the two share (the clock, a thermal step in mid-run) cancels in each of them. What is left is
each sample's own noise and each process's own level (where its buffers landed, its context): the
recorded H200 runs put the latter at a few tenths of a percent (docs/perf-gate.md, "Compare mode").

A regression is declared when **both**

1. a one-sided Wilcoxon signed-rank test on the log ratios ``log(head_i / base_i)`` says the head is
   slower with ``p < alpha``, and
2. the median per-pair ratio exceeds ``1 + threshold``, the practical threshold that absorbs the
   processes' own levels (:data:`DEFAULT_PAIRED_THRESHOLD`),

as the stored gate of :func:`.stats.compare` pairs a rank test with a practical threshold. The 95%
interval of the median ratio is distribution-free (order statistics of the log ratios, from the
binomial distribution), so it needs no resampling and no seed.

:func:`paired_compare` decides one check; :func:`paired_decide` is its vectorised rule, used by the rate
estimators (``scripts/perf_rates.py``) so that the simulated rates are those of the rule the gate
applies. numpy and scipy are imported inside the functions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .stats import Samples, StatsError, _fmt_p

__all__ = ["DEFAULT_PAIRED_THRESHOLD", "PairedComparison", "min_pairs_for", "paired_compare", "paired_decide"]

#: The paired gate's practical threshold. Under the noise model of docs/perf-gate.md ("Compare mode":
#: the recorded clock drift shared by both sides, each process's own level 0.3%) 1.5% kept A/A under 1%
#: and caught a 3% slowdown in more than 99% of trials; ``scripts/compare_gate_model.py`` prints both.
DEFAULT_PAIRED_THRESHOLD = 0.015


def min_pairs_for(alpha: float) -> int:
    """Smallest number of pairs at which the one-sided signed-rank test can reach ``alpha``.

    With n pairs all slower the smallest possible p is ``1 / 2**n``; below this n no data could fail
    the gate, which would make it silently toothless.
    """
    return max(1, math.ceil(math.log2(1.0 / alpha) + 1e-12))


@dataclass(frozen=True)
class PairedComparison:
    """The paired gate's view of head against base; ``regressed`` is the verdict.

    ``ratio`` is the median of the per-pair ratios ``head_i / base_i`` (what the gate decides on);
    ``ci_low`` / ``ci_high`` its distribution-free 95% interval; ``raw_ratio`` the ratio of the two
    sides' median times (reported, not gated). ``p_value`` is the one-sided Wilcoxon signed-rank test
    on the log ratios (head slower).
    """

    base_median_us: float
    head_median_us: float
    ratio: float
    ci_low: float
    ci_high: float
    p_value: float
    threshold: float
    alpha: float
    n_pairs: int
    regressed: bool
    significant: bool
    raw_ratio: float

    @property
    def change(self) -> float:
        """Relative change the gate decided on: +0.03 is 3% slower."""
        return self.ratio - 1.0

    def describe(self, rev: str = "REV") -> str:
        """``812.3 us vs 790.1 us at HEAD~1 (+2.8% paired, 95% CI +2.5%..+3.1%, p=2e-09, 100 pairs)``."""
        return (f"{self.head_median_us:.1f} us vs {self.base_median_us:.1f} us at {rev} ({self.change:+.1%} paired, "
                f"95% CI {self.ci_low - 1:+.1%}..{self.ci_high - 1:+.1%}, p={_fmt_p(self.p_value)}, "
                f"{self.n_pairs} pairs)")

    def to_json(self) -> dict[str, Any]:
        return {
            "base_median_us": self.base_median_us,
            "head_median_us": self.head_median_us,
            "ratio": self.ratio,
            "change": self.change,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "p_value": self.p_value,
            "threshold": self.threshold,
            "alpha": self.alpha,
            "n_pairs": self.n_pairs,
            "regressed": self.regressed,
            "significant": self.significant,
            "raw_ratio": self.raw_ratio,
        }


def _times(series: Samples | Sequence[float], what: str) -> tuple[float, ...]:
    return series.times_us if isinstance(series, Samples) else Samples.of(series, what).times_us


def _check_args(threshold: float, alpha: float, n: int) -> None:
    if isinstance(threshold, bool) or not (isinstance(threshold, (int, float)) and math.isfinite(threshold)
                                           and threshold >= 0.0):
        raise StatsError(f"threshold={threshold!r} must be a finite number >= 0")
    if isinstance(alpha, bool) or not (isinstance(alpha, (int, float)) and 0.0 < alpha < 1.0):
        raise StatsError(f"alpha={alpha!r} must be in (0, 1)")
    need = min_pairs_for(alpha)
    if n < need:
        raise StatsError(f"{n} pairs cannot reach alpha={alpha:g} (the smallest possible p is {0.5 ** n:.2g}); "
                         f"take at least {need} pairs")


def paired_decide(base: Any, head: Any, threshold: float, alpha: float) -> tuple[Any, Any, Any, Any]:
    """Vectorised rule: rows of ``base`` (T, n) against the rows of ``head`` (T, n), pair by pair.

    Returns (regressed, significant, ratio, p) arrays of length T. Pairs whose two times are equal carry
    no sign and are left out of the rank test (a row of such pairs only has p = 1).
    """
    import numpy as np
    from scipy import stats as sps

    d = np.log(np.asarray(head, dtype=float)) - np.log(np.asarray(base, dtype=float))
    d = np.atleast_2d(d)
    ratio = np.exp(np.median(d, axis=1))
    p = np.ones(d.shape[0])
    nonzero = np.any(d != 0.0, axis=1)
    if nonzero.any():
        rows = d[nonzero]
        if np.all(rows != 0.0):
            p[nonzero] = sps.wilcoxon(rows, alternative="greater", axis=1).pvalue
        else:
            # rows with ties at zero: scipy's zero handling per row
            p[nonzero] = [sps.wilcoxon(r[r != 0.0], alternative="greater").pvalue
                          if np.count_nonzero(r) > 0 else 1.0 for r in rows]
    significant = p < alpha
    regressed = significant & (ratio > 1.0 + threshold)
    return regressed, significant, ratio, p


def _median_interval(d: Any) -> tuple[float, float]:
    """Distribution-free 95% interval of the median of ``d``: order statistics k and n + 1 - k, with k the
    largest such that P(Binomial(n, 1/2) < k) <= 2.5%."""
    import numpy as np
    from scipy import stats as sps

    s = np.sort(d)
    n = len(s)
    k = int(sps.binom.ppf(0.025, n, 0.5))
    if sps.binom.cdf(k, n, 0.5) > 0.025:
        k -= 1  # the ppf lands on the first k whose cdf reaches 2.5%; the interval needs P(below) <= 2.5%
    k = max(k, 0)
    return float(s[k]), float(s[n - 1 - k])


def paired_compare(base: Samples | Sequence[float], head: Samples | Sequence[float], *,
                   threshold: float = DEFAULT_PAIRED_THRESHOLD, alpha: float = 0.001) -> PairedComparison:
    """Decide whether ``head`` is slower than ``base``, sample i of each having been timed together.

    A regression is one-sided Wilcoxon signed-rank ``p < alpha`` on ``log(head_i / base_i)`` *and* a
    median ratio ``> 1 + threshold``. Raises :class:`StatsError` for invalid times, series of different
    lengths (each head sample needs the base sample timed with it), a threshold or alpha out of range, or
    fewer pairs than ``alpha`` can be reached with (:func:`min_pairs_for`).
    """
    import numpy as np

    b = _times(base, "base samples")
    h = _times(head, "head samples")
    if len(b) != len(h):
        raise StatsError(f"paired samples: {len(h)} head times for {len(b)} base times; each head sample needs the "
                         "base sample timed with it")
    _check_args(threshold, alpha, len(b))
    ba = np.asarray(b, dtype=float)
    ha = np.asarray(h, dtype=float)
    regressed, significant, ratio, p = paired_decide(ba[None, :], ha[None, :], threshold, alpha)
    lo, hi = _median_interval(np.log(ha) - np.log(ba))
    base_median = float(np.median(ba))
    head_median = float(np.median(ha))
    return PairedComparison(
        base_median_us=base_median,
        head_median_us=head_median,
        ratio=float(ratio[0]),
        ci_low=math.exp(lo),
        ci_high=math.exp(hi),
        p_value=float(p[0]),
        threshold=float(threshold),
        alpha=float(alpha),
        n_pairs=len(b),
        regressed=bool(regressed[0]),
        significant=bool(significant[0]),
        raw_ratio=head_median / base_median,
    )
