"""The paired gate of ``--pipecheck-compare``: the head against REV, timed in lockstep.

In compare mode the kernel as of REV (the base) and as of the working tree (the head) are timed in the
same job on the same GPU, one sample each in turn, so sample i of both runs under the same clock, power
and thermal state. The base is then the head's anchor in the sense of :mod:`.stats` (a workload timed
interleaved with it, sample by sample): the gate works on the per-pair ratios ``head_i / base_i``, and
whatever the two share (the clock, a thermal step in mid-run) cancels in each of them. What is left is
each sample's own noise and each process's own level (where its buffers landed, its context): the
recorded H200 runs put the latter at a few tenths of a percent (docs/perf-gate.md, "Compare mode").

**One law for the test, the interval and the verdict.** Everything the gate says of ``d_i = log(head_i /
base_i)`` comes from the median of the d_i and the binomial law of how many of them lie above a value:

* the point: the median per-pair ratio ``m`` (what the gate decides on and reports as the change);
* the 95% interval of the median: order statistics k and n - 1 - k of the sorted d_i, k the largest with
  ``P(Binomial(n, 1/2) <= k) <= 2.5%`` (distribution-free: no resampling, no seed, valid with ties);
* the p-value: the exact one-sided **sign test**, ``p = P(Binomial(n, 1/2) >= n_slower)`` with n_slower the
  pairs where the head took longer. A tie (``head_i == base_i``, common at the timer's resolution) is kept
  among the n pairs and counted as not slower, the conservative side for a claim of "slower". This is the
  test the interval inverts: the interval lies above no change exactly when ``p <= P(Binomial(n, 1/2) <=
  k)`` (at most 2.5%), so the p-value and the interval cannot contradict each other. (A signed-rank test
  weighs pairs by the size of their difference and tests the centre of symmetry, not the median: on a
  skewed sample it can say p = 0.12 while the median's interval lies wholly above the threshold:
  ``tests/unit/test_perf_paired.py`` keeps such a sample.)

The verdict, with ``t = 1 + threshold`` (the practical threshold that absorbs the processes' own levels,
:data:`DEFAULT_PAIRED_THRESHOLD`):

1. **fail** when ``m > t`` and either ``p < alpha`` or the interval lies wholly above ``t``;
2. **inconclusive** (an error, never a pass) when ``m > t`` and so many pairs tie that no values of the
   others could have failed the gate: the pair-count minimum applies to what the ties leave
   (:func:`min_pairs_for` bounds the pairs before any tie);
3. **pass** otherwise; in particular whenever the interval lies wholly below ``t`` (then ``m`` does too).

So the verdict never reads "pass" beside an interval wholly above the threshold, nor "fail" beside one
wholly below it. The significance at ``alpha`` with a point above the threshold is the stored gate's
pairing of a test with a practical threshold (:func:`.stats.compare`); an interval wholly above the
threshold fails even where ``p`` is above ``alpha``, since then the slowdown beyond the threshold is itself
significant at 2.5%.

:func:`paired_compare` decides one check; :func:`paired_decide` is its vectorised rule, used by the rate
estimators (``scripts/perf_rates.py``) so that the simulated rates are those of the rule the gate
applies. numpy and scipy are imported inside the functions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from .stats import Samples, StatsError, _fmt_p

__all__ = ["DEFAULT_PAIRED_THRESHOLD", "PairedComparison", "PairedRule", "min_pairs_for", "paired_compare",
           "paired_decide"]

#: The paired gate's practical threshold. Under the noise model of docs/perf-gate.md ("Compare mode":
#: the recorded clock drift shared by both sides, each process's own level 0.3%) 1.5% kept A/A under 1%
#: and caught a 3% slowdown in more than 99% of trials; ``scripts/compare_gate_model.py`` prints both.
DEFAULT_PAIRED_THRESHOLD = 0.015


def min_pairs_for(alpha: float) -> int:
    """Smallest number of pairs at which the one-sided sign test can reach ``alpha``.

    With n pairs all slower the smallest possible p is ``1 / 2**n``; below this n no data could fail
    the gate, which would make it silently toothless. Ties do not shrink n (the test keeps them); how
    many of the n may tie before no data could fail is what the verdict's "inconclusive" answers.
    """
    return max(1, math.ceil(math.log2(1.0 / alpha) + 1e-12))


#: the two-sided level of the reported interval of the median ratio
_CI_LEVEL = 0.95


@dataclass(frozen=True)
class PairedComparison:
    """The paired gate's view of head against base; :attr:`decision` is the verdict.

    ``ratio`` is the median of the per-pair ratios ``head_i / base_i`` (what the gate decides on);
    ``ci_low`` / ``ci_high`` its distribution-free 95% interval; ``raw_ratio`` the ratio of the two
    sides' median times (reported, not gated). ``p_value`` is the exact one-sided sign test (head slower)
    on the pairs, ties counted as not slower; ``n_slower`` and ``n_tied`` count the pairs where the head
    took longer and where both took the same time. ``inconclusive`` says why the gate could not decide
    (empty when it did): then ``regressed`` is False and the verdict is an error, never a pass.
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
    n_slower: int = 0
    n_tied: int = 0
    inconclusive: str = ""

    @property
    def change(self) -> float:
        """Relative change the gate decided on: +0.03 is 3% slower."""
        return self.ratio - 1.0

    @property
    def decision(self) -> str:
        """``"fail"``, ``"pass"`` or ``"inconclusive"``."""
        return "fail" if self.regressed else "inconclusive" if self.inconclusive else "pass"

    def describe(self, rev: str = "REV") -> str:
        """``812.3 us vs 790.1 us at HEAD~1 (+2.8% paired, 95% CI +2.5%..+3.1%, p=2e-09, 100 pairs)``;
        ``, 38 tied`` after the pairs when some tie."""
        tied = f", {self.n_tied} tied" if self.n_tied else ""
        return (f"{self.head_median_us:.1f} us vs {self.base_median_us:.1f} us at {rev} ({self.change:+.1%} paired, "
                f"95% CI {self.ci_low - 1:+.1%}..{self.ci_high - 1:+.1%}, p={_fmt_p(self.p_value)}, "
                f"{self.n_pairs} pairs{tied})")

    def to_json(self) -> dict[str, Any]:
        return {
            "base_median_us": self.base_median_us,
            "head_median_us": self.head_median_us,
            "ratio": self.ratio,
            "change": self.change,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "p_value": self.p_value,
            "test": "sign",
            "threshold": self.threshold,
            "alpha": self.alpha,
            "n_pairs": self.n_pairs,
            "n_slower": self.n_slower,
            "n_tied": self.n_tied,
            "regressed": self.regressed,
            "significant": self.significant,
            "inconclusive": self.inconclusive,
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


class PairedRule(NamedTuple):
    """:func:`paired_decide`'s arrays, one entry per row: the verdict's parts and the numbers behind them."""

    regressed: Any
    significant: Any
    ratio: Any
    p: Any
    ci_low: Any
    ci_high: Any
    inconclusive: Any
    n_slower: Any
    n_tied: Any


def _interval_rank(n: int) -> int:
    """k of the median's distribution-free interval (order statistics k and n - 1 - k, from 0): the largest k
    with ``P(Binomial(n, 1/2) <= k) <= (1 - 95%) / 2``, so that each side misses the median at most that often."""
    from scipy import stats as sps

    tail = (1.0 - _CI_LEVEL) / 2.0
    k = int(sps.binom.ppf(tail, n, 0.5))
    while k >= 0 and sps.binom.cdf(k, n, 0.5) > tail:
        k -= 1  # the ppf lands on the first k whose cdf reaches the tail; the interval needs it not exceeded
    return max(k, 0)


def paired_decide(base: Any, head: Any, threshold: float, alpha: float) -> PairedRule:
    """Vectorised rule: rows of ``base`` (T, n) against the rows of ``head`` (T, n), pair by pair.

    Returns a :class:`PairedRule` of arrays of length T (indexable as before: ``[0]`` is ``regressed``): the
    module's rule, ties kept among the n pairs of the sign test and counted as not slower.
    """
    import numpy as np
    from scipy import stats as sps

    d = np.log(np.asarray(head, dtype=float)) - np.log(np.asarray(base, dtype=float))
    d = np.atleast_2d(d)
    n = d.shape[1]
    s = np.sort(d, axis=1)
    k = _interval_rank(n)
    lo, hi = s[:, k], s[:, n - 1 - k]
    median = np.median(d, axis=1)
    n_slower = np.count_nonzero(d > 0.0, axis=1)
    n_tied = np.count_nonzero(d == 0.0, axis=1)
    p = sps.binom.sf(n_slower - 1, n, 0.5)  # P(Binomial(n, 1/2) >= n_slower)
    t = math.log1p(threshold)
    significant = p < alpha
    above = median > t
    regressed = above & (significant | (lo > t))
    # The most the ties leave: every untied pair slower. Where even that could neither reach alpha nor lift the
    # interval's lower end (order statistic k, which a tie at 0 holds down once more than k pairs tie) above the
    # threshold, no data could have failed the gate: a median above the threshold then decides nothing.
    toothless = (n_tied > k) & (sps.binom.sf(n - n_tied - 1, n, 0.5) >= alpha)
    inconclusive = above & ~regressed & toothless
    return PairedRule(regressed, significant, np.exp(median), p, np.exp(lo), np.exp(hi), inconclusive, n_slower,
                      n_tied)


def paired_compare(base: Samples | Sequence[float], head: Samples | Sequence[float], *,
                   threshold: float = DEFAULT_PAIRED_THRESHOLD, alpha: float = 0.001) -> PairedComparison:
    """Decide whether ``head`` is slower than ``base``, sample i of each having been timed together.

    The module's rule: a regression is a median ratio ``> 1 + threshold`` with the sign test's ``p < alpha``
    or the 95% interval wholly above ``1 + threshold``; a median above it that the ties left no way to
    confirm is inconclusive (:attr:`PairedComparison.inconclusive`). Raises :class:`StatsError` for invalid
    times, series of different lengths (each head sample needs the base sample timed with it), a threshold or
    alpha out of range, or fewer pairs than ``alpha`` can be reached with (:func:`min_pairs_for`).
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
    rule = paired_decide(ba[None, :], ha[None, :], threshold, alpha)
    n, tied, ratio = len(b), int(rule.n_tied[0]), float(rule.ratio[0])
    why = ""
    if bool(rule.inconclusive[0]):
        why = (f"{tied} of {n} pairs tie (the same time at REV and at the head: the timer's resolution), so even "
               f"with every other pair slower neither the sign test could reach alpha={alpha:g} nor the 95% "
               f"interval clear the threshold: the median's {ratio - 1:+.1%} decides nothing; time more pairs "
               "(n_samples) or longer samples (reps)")
    base_median = float(np.median(ba))
    head_median = float(np.median(ha))
    return PairedComparison(
        base_median_us=base_median,
        head_median_us=head_median,
        ratio=ratio,
        ci_low=float(rule.ci_low[0]),
        ci_high=float(rule.ci_high[0]),
        p_value=float(rule.p[0]),
        threshold=float(threshold),
        alpha=float(alpha),
        n_pairs=n,
        regressed=bool(rule.regressed[0]),
        significant=bool(rule.significant[0]),
        raw_ratio=head_median / base_median,
        n_slower=int(rule.n_slower[0]),
        n_tied=tied,
        inconclusive=why,
    )
