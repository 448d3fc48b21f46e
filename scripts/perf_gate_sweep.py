"""Sweep the perf gate's threshold and alpha over recorded GPU runs: A/A false alarms vs +5% power.

CPU only; no GPU, no new timing. Reads recordings written by ``scripts/gpu/perf_gate_rates.py``
(``perf_gate_rates.json[.gz]``: the per-run samples under ``families.<kernel>.raw_runs_us``, the rates
the GPU run computed under ``families.<kernel>.rates``, its settings under ``gate``) and:

1. recomputes, from the stored samples and with the plugin's own statistics
   (:func:`perf_rates.resample_rates`, called as ``perf_gate_rates.rates`` calls
   it, on runs decoded by ``perf_gate_rates.decode``), the all-pairs A/A false-alarm rate and the
   all-pairs scaled +3/+5/+10% detection rates of every gate the recording has rates for (raw,
   anchored, adaptive), plus the cross-process A/A counts where child runs were recorded;
2. validates: at each recording's stored settings the recomputed counts must equal the stored ones,
   else it names every difference and exits with status 2 before sweeping anything. Two kinds of
   difference are reported but tolerated unless ``--strict``: "knife-edge" (a scaled +x% count at
   threshold x that differs only through the pairs whose run levels are equal, so that their ratio
   sits exactly on 1 + threshold and floating-point rounding decides the verdict; s1's +3%)
   and "not recomputable" (a stored count whose runs were not recorded: s1's cross-process);
3. sweeps the practical threshold, alpha and (adaptive gate) clock tolerance, for the raw, anchored
   and adaptive gates and for "per-kind" gating (raw times for kernels whose automatic anchor is a
   copy, i.e. memory-bound, as with ``anchor=None``; kernel/anchor ratios for matmul-anchored,
   compute-bound ones), and writes a markdown report: per gate and setting, the all-pairs A/A rate
   and the scaled +5% power of every session and kernel with the worst case over sessions; which
   settings meet both targets (A/A <= 1%, +5% >= 95%) in every session for every kernel; and a
   selection / hold-out check: the setting is picked on the selection sessions only and then
   reported on the held-out session;
4. "Pooled runs": a baseline of kb runs against a candidate of kc runs (kb, kc in 1..3), a pooled run
   being the runs' samples concatenated (kernel and anchor alike, so the ratios stay paired) and
   decided by the same rule as one run. Comparisons are all ordered pairs of disjoint windows of
   consecutive A runs (recording order = time order); kb = kc = 1 is the all-pairs set of 1. and is
   checked against it, and a seeded sample of pooled comparisons is re-decided by ``compare`` one at
   a time. Reports A/A and scaled power per session, kernel, gate (raw, anchored, per-kind), kb x kc
   and threshold, the rms drift of pooled levels, the settings meeting both targets everywhere, and
   the cheapest setting feasible on the selection sessions, checked on the held-out one.

Usage::

    python3 scripts/perf_gate_sweep.py [--out REPORT.md] [[LABEL=]RECORDING.json[.gz] ...]
        [--thresholds 0.015,0.02,0.025,0.0275,0.03] [--alphas 1e-3,1e-4] [--tolerances 0.015]
        [--select s2,s3] [--holdout s4] [--pool-sizes 1,2,3] [--pool-thresholds 0.025,0.0275,0.03]
        [--pool-gap 0]

Without recordings it reads the H200 recordings s1..s4 (in time order; docs/validation/README.md names
each; s1 has raw runs only, so it informs the raw gate only). Without ``--out`` the report goes to
stdout. About 40 s on one core
(the pooled section about 25 s of it); exit status 2 if validation fails or the pooled path
disagrees with its checks.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "scripts"):  # the package, and perf_rates next to this script
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import numpy as np  # noqa: E402
from perf_rates import (  # noqa: E402
    RateEstimate,
    estimate,  # the Wilson interval resample_rates attaches to its counts
    gate_rows,  # the vectorised gate resample_rates applies; used for the cross-process and pooled pairs
    resample_rates,
)
from scipy import stats as sps  # noqa: E402

from pytest_pipecheck.config import PipecheckConfig  # noqa: E402
from pytest_pipecheck.perf.stats import DEFAULT_CLOCK_TOLERANCE, Samples, compare  # noqa: E402

RESULTS = ROOT / "tests" / "data" / "perf_recordings"  # the recordings, kept as the tests' data
#: The H200 recordings labelled s1..s4, in time order (docs/validation/README.md names each);
#: s5 (2026-11-23-h200-1121/perf_gate_rates) is read where it is passed.
DEFAULT_RECORDINGS = (
    f"s1={RESULTS / 's1-2026-11-22-h200-0223-perf_gate_rates-0232.json.gz'}",
    f"s2={RESULTS / 's2-2026-11-22-h200-0223-perf_gate_rates-0318.json.gz'}",
    f"s3={RESULTS / 's3-2026-11-22-h200-0453-perf_gate_rates.json.gz'}",
    f"s4={RESULTS / 's4-2026-11-22-h200-0754-perf_gate_rates.json.gz'}",
)
DEFAULT_THRESHOLDS = (0.015, 0.02, 0.025, 0.0275, 0.03)
DEFAULT_ALPHAS = (1e-3, 1e-4)
DEFAULT_TOLERANCES = (DEFAULT_CLOCK_TOLERANCE,)
MAX_FALSE_ALARM = 0.01  # A/A: same code failing at most 1% of the time
MIN_POWER = 0.95  # a real slowdown of SLOWDOWN caught at least 95% of the time
SLOWDOWN = 0.05

#: The gates swept. "per-kind" is not a mode of compare(): it is the anchor choice per kernel
#: (anchor=None for a kernel whose automatic anchor is a copy, the ratios for a matmul anchor).
GATES = ("raw", "anchored", "adaptive", "per-kind")
GATE_HELP = {
    "raw": "kernel medians and samples (compare(anchored=False))",
    "anchored": "always the per-sample kernel/anchor ratios (compare(anchor_mode='always'))",
    "adaptive": "the ratios only when the anchor moved beyond the clock tolerance, significantly at alpha; "
                "raw otherwise (compare(anchor_mode='adaptive'))",
    "per-kind": "raw for kernels whose automatic anchor is a copy (memory-bound: anchor=None), anchored for "
                "matmul-anchored (compute-bound) kernels",
}


def load_rates_script() -> ModuleType:
    """``scripts/gpu/perf_gate_rates.py`` as a module: its ``decode``, ``load_recording``, ``SLOWDOWNS``."""
    path = ROOT / "scripts" / "gpu" / "perf_gate_rates.py"
    spec = importlib.util.spec_from_file_location("perf_gate_rates", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PGR = load_rates_script()


# --------------------------------------------------------------------------- recordings


@dataclass
class Session:
    """One recording: its A runs per family and run kind ("raw", "anchored"), decoded."""

    label: str
    path: str
    recording: dict[str, Any]
    a_runs: dict[str, dict[str, list[Samples]]] = field(default_factory=dict)  # family -> kind -> runs
    children: dict[str, dict[str, list[list[Samples]]]] = field(default_factory=dict)  # per process
    stored: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # family -> gate -> rates
    anchor_kind: dict[str, str] = field(default_factory=dict)

    @property
    def threshold(self) -> float:
        return float(self.recording["gate"]["threshold"])

    @property
    def alpha(self) -> float:
        return float(self.recording["gate"]["alpha"])

    @property
    def families(self) -> list[str]:
        return list(self.a_runs)


def load_session(label: str, path: str) -> Session:
    """Decode a recording the way ``perf_gate_rates.offline_families`` reads it (s1: raw only)."""
    rec = PGR.load_recording(path)
    s = Session(label, path, rec)
    for fam, data in rec.get("families", {}).items():
        runs = data.get("raw_runs_us") or {}
        if "0" in runs:  # the first recording: raw runs only, not split by run kind
            runs = {"raw": runs}
        s.a_runs[fam] = {kind: [PGR.decode(r) for r in by["0"]] for kind, by in runs.items() if by.get("0")}
        kids = [c for c in data.get("children_runs_us") or [] if c]
        s.children[fam] = {kind: [[PGR.decode(r) for r in c[kind]] for c in kids if kind in c]
                           for kind in s.a_runs[fam]}
        stored = data.get("rates") or {}
        if "aa_all_pairs" in stored:  # the first recording: one flat set of raw rates
            stored = {"raw": stored}
        s.stored[fam] = {g: r for g, r in stored.items() if r}
        kind = (data.get("anchor") or {}).get("kind")
        if kind:
            s.anchor_kind[fam] = str(kind)
    return s


def parse_recording(arg: str, index: int) -> tuple[str, str]:
    """``LABEL=PATH`` or ``PATH`` (labelled r1, r2, ...)."""
    if "=" in arg and not Path(arg).exists():
        label, path = arg.split("=", 1)
        return label, path
    return f"r{index + 1}", arg


# --------------------------------------------------------------------------- the rates


@dataclass(frozen=True)
class Setting:
    gate: str
    threshold: float
    alpha: float
    tolerance: float | None = None  # the adaptive gate's clock tolerance

    @property
    def label(self) -> str:
        tol = f", tol {self.tolerance:.2%}" if self.gate == "adaptive" and self.tolerance is not None else ""
        return f"{self.gate} t={self.threshold:.2%} a={self.alpha:g}{tol}"


@dataclass(frozen=True)
class Cell:
    """One setting on one session's kernel: all-pairs A/A, scaled +SLOWDOWN power, cross-process A/A."""

    mode: str  # the compare() gate underneath ("per-kind" resolves to raw or anchored)
    aa: RateEstimate
    power: RateEstimate
    cross: tuple[int, int] | None  # (failures, comparisons)

    def meets(self, max_false_alarm: float, min_power: float) -> bool:
        return self.aa.rate <= max_false_alarm and self.power.rate >= min_power


def run_kind(mode: str) -> str:
    """Which recorded runs a gate reads: the raw runs, or the anchored runs (adaptive needs no runs of its own)."""
    return "raw" if mode == "raw" else "anchored"


class Rates:
    """All-pairs and cross-process rates per session, family, gate and setting, cached."""

    def __init__(self, sessions: Sequence[Session]) -> None:
        self.sessions = {s.label: s for s in sessions}
        self._pairs: dict[tuple[Any, ...], RateEstimate] = {}
        self._cross: dict[tuple[Any, ...], tuple[int, int] | None] = {}
        kinds: dict[str, str] = {}
        for s in sessions:
            for fam, kind in s.anchor_kind.items():
                kinds.setdefault(fam, kind)
        self.anchor_kind = kinds  # family -> anchor kind, from any recording that names it

    def available(self, label: str, fam: str, mode: str) -> bool:
        runs = self.sessions[label].a_runs.get(fam, {})
        return len(runs.get(run_kind(mode), [])) >= 2

    def all_pairs(self, label: str, fam: str, mode: str, threshold: float, alpha: float,
                  tolerance: float | None, slowdowns: Iterable[float]) -> dict[float, RateEstimate]:
        """``resample_rates`` over all ordered pairs of A runs, as ``perf_gate_rates.rates`` calls it."""
        tol = (DEFAULT_CLOCK_TOLERANCE if tolerance is None else tolerance) if mode == "adaptive" else None
        key = (label, fam, mode, threshold, alpha, tol)
        wanted = tuple(slowdowns)
        keys = {s: (*key, s) for s in wanted}
        missing = tuple(s for s in wanted if keys[s] not in self._pairs)
        if missing:
            runs = self.sessions[label].a_runs[fam][run_kind(mode)]
            kw: dict[str, Any] = {} if tol is None else {"clock_tolerance": tol}
            got = resample_rates(runs, slowdowns=missing, mode=mode, threshold=threshold, alpha=alpha, **kw)
            for s in missing:
                self._pairs[keys[s]] = got[s]
        return {s: self._pairs[keys[s]] for s in wanted}

    def cross_process(self, label: str, fam: str, mode: str, threshold: float, alpha: float,
                      tolerance: float | None) -> tuple[int, int] | None:
        """A/A over runs of different processes: (failures, comparisons); None without 2 processes.

        The pairs are those of ``perf_gate_rates.rates`` (every run of process i as the baseline,
        every run of another process j as the candidate), gated by the same vectorised rule that
        ``resample_rates`` applies and ``compare`` decides by; the validation checks the counts
        against the ones the GPU session got from ``compare`` one pair at a time.
        """
        tol = (DEFAULT_CLOCK_TOLERANCE if tolerance is None else tolerance) if mode == "adaptive" else None
        key = (label, fam, mode, threshold, alpha, tol)
        if key not in self._cross:
            kids = self.sessions[label].children.get(fam, {}).get(run_kind(mode), [])
            pairs = [(x, y) for i, ri in enumerate(kids) for j, rj in enumerate(kids) if i != j
                     for x in ri for y in rj]
            if len(kids) < 2 or not pairs:
                self._cross[key] = None
            elif len({len(r.times_us) for p in pairs for r in p}) != 1:
                raise ValueError(f"{label} {fam}: child runs of different lengths")
            else:
                base = np.array([p[0].times_us for p in pairs])
                cand = np.array([p[1].times_us for p in pairs])
                base_a = cand_a = None
                if mode != "raw":
                    base_a = np.array([p[0].anchor_us for p in pairs])
                    cand_a = np.array([p[1].anchor_us for p in pairs])
                regressed, _ = gate_rows(mode, base, cand, base_a, cand_a, threshold=threshold, alpha=alpha,
                                          clock_tolerance=DEFAULT_CLOCK_TOLERANCE if tol is None else tol)
                self._cross[key] = (int(np.sum(regressed)), len(pairs))
        return self._cross[key]

    def resolve(self, fam: str, gate: str) -> str:
        """The compare() gate a swept gate uses for ``fam`` ("per-kind": by the family's anchor kind)."""
        if gate != "per-kind":
            return gate
        return "raw" if self.anchor_kind.get(fam) == "copy" else "anchored"

    def cell(self, label: str, fam: str, setting: Setting, slowdown: float) -> Cell | None:
        mode = self.resolve(fam, setting.gate)
        if not self.available(label, fam, mode):
            return None
        got = self.all_pairs(label, fam, mode, setting.threshold, setting.alpha, setting.tolerance,
                             (0.0, slowdown))
        cross = self.cross_process(label, fam, mode, setting.threshold, setting.alpha, setting.tolerance)
        return Cell(mode, got[0.0], got[slowdown], cross)


# --------------------------------------------------------------------------- validation


@dataclass
class Check:
    """One stored count against its recomputation.

    ``status``: "exact" (equal), "knife-edge" (a scaled count at a slowdown equal to the threshold
    that differs only through the ``tied`` pairs whose run levels are equal, so that their ratio sits
    exactly on ``1 + threshold`` and floating-point rounding, not the data, decides their verdict:
    the stored count lies between the recomputed count without the tied pairs that regressed here
    and with all tied pairs regressed), "not recomputable" (the recording lacks the runs, e.g. no
    child runs for the cross-process count) or "MISMATCH".
    """

    label: str
    fam: str
    gate: str
    what: str
    stored: tuple[int, int]
    recomputed: tuple[int, int] | None
    stored_rate: float | None = None
    recomputed_rate: float | None = None
    tied: int = 0  # pairs tied on the threshold (only looked for when the counts differ)
    tied_regressed: int = 0  # of which the recomputation counted as regressed

    @property
    def status(self) -> str:
        if self.recomputed is None:
            return "not recomputable"
        rates_equal = self.stored_rate is None or self.stored_rate == self.recomputed_rate
        if self.stored == self.recomputed and rates_equal:
            return "exact"
        low = self.recomputed[0] - self.tied_regressed
        high = low + self.tied
        if self.tied and self.stored[1] == self.recomputed[1] and low <= self.stored[0] <= high:
            return "knife-edge"
        return "MISMATCH"

    def ok(self, strict: bool) -> bool:
        return self.status == "exact" or (not strict and self.status != "MISMATCH")

    @staticmethod
    def fmt(count: tuple[int, int] | None) -> str:
        return "-" if count is None else f"{count[0]}/{count[1]}"

    def describe(self) -> str:
        if self.status != "knife-edge" or self.recomputed is None:
            return self.status
        return (f"knife-edge: {self.tied} pairs tie on the threshold, {self.tied_regressed} of them regressed "
                f"here; without those {self.recomputed[0] - self.tied_regressed}")


def tied_pairs(runs: Sequence[Samples], mode: str, slowdown: float, threshold: float) -> list[tuple[int, int]]:
    """Ordered pairs (baseline i, candidate j) whose scaled ratio lies exactly on ``1 + threshold``.

    Only when ``slowdown == threshold``: then a pair of equal run levels (median times, or median
    kernel/anchor ratios; equal up to float noise) has ratio ``1 + threshold`` in exact arithmetic,
    and its verdict ("ratio > 1 + threshold") turns on the last bit of a floating-point product.
    """
    if not math.isclose(slowdown, threshold, rel_tol=0.0, abs_tol=1e-12):
        return []
    series = ("raw",) if mode == "raw" else ("raw", "anchored") if mode == "adaptive" else ("anchored",)
    tied: set[tuple[int, int]] = set()
    for sr in series:
        levels = [float(np.median(r.ratios())) if sr == "anchored" else r.median for r in runs]
        tied |= {(i, j) for i, a in enumerate(levels) for j, b in enumerate(levels)
                 if i != j and math.isclose(a, b, rel_tol=1e-9)}
    return sorted(tied)


def pair_regressed(base: Samples, cand: Samples, mode: str, threshold: float, alpha: float,
                   tolerance: float | None) -> bool:
    """compare() on one pair under the gate ``mode``, as ``perf_gate_rates._compare`` calls it."""
    if mode == "raw":
        return compare(base, cand, anchored=False, threshold=threshold, alpha=alpha).regressed
    if mode == "anchored":
        return compare(base, cand, anchor_mode="always", threshold=threshold, alpha=alpha).regressed
    return compare(base, cand, anchor_mode="adaptive", threshold=threshold, alpha=alpha,
                   clock_tolerance=DEFAULT_CLOCK_TOLERANCE if tolerance is None else tolerance).regressed


def validate(rates: Rates) -> list[Check]:
    """Recompute every stored all-pairs (and cross-process) rate at its recording's settings."""
    checks: list[Check] = []
    for label, s in rates.sessions.items():
        for fam, by_gate in s.stored.items():
            for gate, rt in by_gate.items():
                mode = rt.get("mode") or gate
                tol = rt.get("clock_tolerance", s.recording["gate"].get("clock_tolerance")) if mode == "adaptive" else None
                scaled = rt.get("scaled_all_pairs") or {}
                slowdowns = (0.0, *(float(k) for k in scaled))
                got = rates.all_pairs(label, fam, mode, s.threshold, s.alpha, tol, slowdowns)
                runs = s.a_runs[fam][run_kind(mode)]
                items = [("A/A all pairs", 0.0, rt["aa_all_pairs"])]
                items += [(f"scaled +{float(k):.0%} all pairs", float(k), v) for k, v in scaled.items()]
                for what, sl, stored in items:
                    new = got[sl]
                    check = Check(label, fam, gate, what, (int(stored["failures"]), int(stored["trials"])),
                                  (new.failures, new.trials), float(stored["rate"]), new.rate)
                    if check.status != "exact":
                        tied = tied_pairs(runs, mode, sl, s.threshold)
                        check.tied = len(tied)
                        check.tied_regressed = sum(
                            pair_regressed(runs[i], runs[j].scaled(1.0 + sl), mode, s.threshold, s.alpha, tol)
                            for i, j in tied)
                    checks.append(check)
                cp = rt.get("aa_cross_process")
                if cp:
                    new_cp = rates.cross_process(label, fam, mode, s.threshold, s.alpha, tol)
                    checks.append(Check(label, fam, gate, "A/A cross-process",
                                        (int(cp["failures"]), int(cp["comparisons"])), new_cp))
    return checks


# --------------------------------------------------------------------------- pooled runs

#: Runs pooled per side (a baseline of kb runs against a candidate of kc runs), and the thresholds.
POOL_SIZES = (1, 2, 3)
POOL_THRESHOLDS = (0.025, 0.0275, 0.03)
#: The gates of the pooled section: "per-kind" resolves per kernel as in the sweep; adaptive is left out.
POOL_GATES = ("raw", "anchored", "per-kind")


def window_pairs(n_runs: int, kb: int, kc: int, gap: int = 0) -> list[tuple[int, int]]:
    """Every (i, j) with baseline runs i..i+kb-1 and candidate runs j..j+kc-1: two windows of
    consecutive runs (in recording order, i.e. in time) that share no run and have at least ``gap``
    runs between them. With kb = kc = 1 and gap = 0 these are all ordered pairs of distinct runs, in
    the order ``resample_rates`` takes them."""
    if min(kb, kc) < 1 or gap < 0:
        raise ValueError(f"kb={kb}, kc={kc} must be >= 1 and gap={gap} >= 0")
    return [(i, j) for i in range(n_runs - kb + 1) for j in range(n_runs - kc + 1)
            if j >= i + kb + gap or j + kc + gap <= i]


def pooled(runs: Sequence[Samples], first: int, k: int, n: int | None = None) -> Samples:
    """Runs ``first .. first+k-1`` as one run: their kernel samples concatenated and, for anchored runs,
    their anchor samples concatenated alike, so that sample i's kernel/anchor ratio stays paired.
    ``n``: keep the first n samples of each run (as ``resample_rates`` does for runs of unequal length)."""
    group = runs[first:first + k]
    kernel = [t for r in group for t in r.times_us[:n]]
    if all(r.anchor_us is not None for r in group):
        anchor = [t for r in group if r.anchor_us is not None for t in r.anchor_us[:n]]
        return Samples.of(kernel, anchor_us=anchor, anchor=group[0].anchor)
    return Samples.of(kernel)


@dataclass
class PooledVerdicts:
    """The gate's verdict on every window pair of one run set: ``regressed[(threshold, slowdown)]``
    (a bool per pair, in the order of ``pairs``) and the rms of the log A/A ratio of pooled levels."""

    kb: int
    kc: int
    pairs: list[tuple[int, int]]
    regressed: dict[tuple[float, float], Any]
    rms_log: float
    n: int  # samples kept per run


def pooled_verdicts(runs: Sequence[Samples], kb: int, kc: int, mode: str, thresholds: Iterable[float],
                    alpha: float, slowdowns: Iterable[float], gap: int = 0,
                    clock_tolerance: float = DEFAULT_CLOCK_TOLERANCE) -> PooledVerdicts:
    """The gate ``mode`` on a baseline of kb pooled runs against a candidate of kc pooled runs, for every
    window pair (:func:`window_pairs`); for power the candidate's kernel samples are multiplied by
    ``1 + slowdown``, its anchor samples left as they are (as ``resample_rates`` does). Decided by the
    vectorised rule ``resample_rates`` and ``compare`` apply (``gate_rows``), on rows of pooled samples:
    row t is exactly ``compare(pooled(runs, i, kb), pooled(runs, j, kc))`` for pair t = (i, j)."""
    pairs = window_pairs(len(runs), kb, kc, gap)
    if not pairs:
        raise ValueError(f"{len(runs)} runs give no disjoint windows of {kb} and {kc} runs (gap {gap})")
    n = min(r.n for r in runs)
    kern = np.stack([np.asarray(r.times_us[:n], dtype=float) for r in runs])
    if mode == "raw":
        anch = np.ones_like(kern)
    else:
        if any(r.anchor_us is None for r in runs):
            raise ValueError(f"the {mode} gate needs anchored runs")
        anch = np.stack([np.asarray(r.anchor_us[:n], dtype=float) for r in runs if r.anchor_us is not None])
    bi = np.array([p[0] for p in pairs])[:, None] + np.arange(kb)
    ci = np.array([p[1] for p in pairs])[:, None] + np.arange(kc)
    base, base_a = kern[bi].reshape(len(pairs), kb * n), anch[bi].reshape(len(pairs), kb * n)
    cand, cand_a = kern[ci].reshape(len(pairs), kc * n), anch[ci].reshape(len(pairs), kc * n)
    regressed: dict[tuple[float, float], Any] = {}
    for s in slowdowns:
        for t in thresholds:
            regressed[(t, s)] = gate_rows(mode, base, cand * (1.0 + s), base_a, cand_a, threshold=t, alpha=alpha,
                                           clock_tolerance=clock_tolerance)[0]
    lb, lc = (base, cand) if mode == "raw" else (base / base_a, cand / cand_a)
    log_ratio = np.log(np.median(lc, axis=1) / np.median(lb, axis=1))
    return PooledVerdicts(kb, kc, pairs, regressed, float(np.sqrt(np.mean(log_ratio ** 2))), n)


def pooled_rates(runs: Sequence[Samples], kb: int, kc: int, mode: str, thresholds: Iterable[float], alpha: float,
                 slowdowns: Iterable[float], gap: int = 0) -> dict[tuple[float, float], RateEstimate]:
    """Failure counts of :func:`pooled_verdicts` per (threshold, slowdown)."""
    v = pooled_verdicts(runs, kb, kc, mode, thresholds, alpha, slowdowns, gap)
    return {key: estimate(key[1], int(np.sum(reg)), len(reg)) for key, reg in v.regressed.items()}


@dataclass(frozen=True)
class PoolSetting:
    gate: str
    kb: int
    kc: int
    threshold: float

    @property
    def label(self) -> str:
        return f"{self.gate} kb={self.kb} kc={self.kc} t={self.threshold:.2%}"


@dataclass(frozen=True)
class PoolCell:
    """One pooled setting on one session's kernel."""

    mode: str
    aa: RateEstimate
    power: RateEstimate
    runs: int  # A runs of the session
    independent: int  # comparisons that use each run at most once: runs // (kb + kc)
    rms_log: float  # rms of log(pooled A/A level ratio): the pair drift the threshold has to absorb

    def meets(self, max_false_alarm: float, min_power: float) -> bool:
        return self.aa.rate <= max_false_alarm and self.power.rate >= min_power


class PooledRates:
    """Pooled-run rates per session, kernel, gate, (kb, kc) and threshold, cached per run set."""

    def __init__(self, rates: Rates, thresholds: Sequence[float], alpha: float, slowdown: float,
                 sizes: Sequence[int] = POOL_SIZES, gap: int = 0) -> None:
        self.rates = rates
        self.thresholds = tuple(thresholds)
        self.alpha = alpha
        self.slowdown = slowdown
        self.sizes = tuple(sizes)
        self.gap = gap
        self._verdicts: dict[tuple[str, str, str, int, int], PooledVerdicts | None] = {}

    def settings(self) -> list[PoolSetting]:
        return [PoolSetting(g, kb, kc, t) for g in POOL_GATES for kb in self.sizes for kc in self.sizes
                for t in self.thresholds]

    def runs(self, label: str, fam: str, mode: str) -> list[Samples]:
        return self.rates.sessions[label].a_runs.get(fam, {}).get(run_kind(mode), [])

    def verdicts(self, label: str, fam: str, mode: str, kb: int, kc: int) -> PooledVerdicts | None:
        key = (label, fam, mode, kb, kc)
        if key not in self._verdicts:
            runs = self.runs(label, fam, mode)
            ok = self.rates.available(label, fam, mode) and window_pairs(len(runs), kb, kc, self.gap)
            self._verdicts[key] = pooled_verdicts(runs, kb, kc, mode, self.thresholds, self.alpha,
                                                  (0.0, self.slowdown), self.gap) if ok else None
        return self._verdicts[key]

    def cell(self, label: str, fam: str, ps: PoolSetting) -> PoolCell | None:
        mode = self.rates.resolve(fam, ps.gate)
        v = self.verdicts(label, fam, mode, ps.kb, ps.kc)
        if v is None:
            return None
        aa, pw = v.regressed[(ps.threshold, 0.0)], v.regressed[(ps.threshold, self.slowdown)]
        runs = len(self.runs(label, fam, mode))
        return PoolCell(mode, estimate(0.0, int(np.sum(aa)), len(aa)),
                        estimate(self.slowdown, int(np.sum(pw)), len(pw)), runs, runs // (ps.kb + ps.kc), v.rms_log)

    def spot_check(self, per_class: int = 1, seed: int = 0) -> tuple[int, list[str]]:
        """Re-decide some pooled comparisons one at a time with ``compare`` on :func:`pooled` samples.

        For every session, kernel, run kind, (kb, kc) other than (1, 1) (validated against the stored
        rates already), slowdown and threshold: ``per_class`` regressed and ``per_class`` passing pairs,
        drawn with a fixed seed. Returns (comparisons checked, disagreements)."""
        rng = np.random.default_rng(seed)
        checked, bad = 0, []
        for label, s in self.rates.sessions.items():
            for fam in s.families:
                for mode in ("raw", "anchored"):
                    for kb in self.sizes:
                        for kc in self.sizes:
                            v = self.verdicts(label, fam, mode, kb, kc) if (kb, kc) != (1, 1) else None
                            if v is None:
                                continue
                            runs = self.runs(label, fam, mode)
                            for (t, sl), reg in v.regressed.items():
                                for want in (True, False):
                                    idx = np.flatnonzero(reg == want)
                                    for k in rng.choice(idx, size=min(per_class, len(idx)), replace=False):
                                        i, j = v.pairs[int(k)]
                                        got = pair_regressed(pooled(runs, i, kb, v.n),
                                                             pooled(runs, j, kc, v.n).scaled(1.0 + sl),
                                                             mode, t, self.alpha, None)
                                        checked += 1
                                        if got != want:
                                            bad.append(f"{label} {fam} {mode} kb={kb} kc={kc} t={t:g} +{sl:g} "
                                                       f"pair {(i, j)}: vectorised {want}, compare {got}")
        return checked, bad


def pool_single_run_check(pr: PooledRates) -> tuple[int, list[str]]:
    """kb = kc = 1 against the validated all-pairs path (``Rates.all_pairs``, i.e. ``resample_rates``):
    every session, kernel, run kind and pooled threshold, A/A and scaled power. Returns (counts
    compared, differences)."""
    checked, bad = 0, []
    for label, s in pr.rates.sessions.items():
        for fam in s.families:
            for mode in ("raw", "anchored"):
                v = pr.verdicts(label, fam, mode, 1, 1)
                if v is None:
                    continue
                for t in pr.thresholds:
                    ref = pr.rates.all_pairs(label, fam, mode, t, pr.alpha, None, (0.0, pr.slowdown))
                    for sl in (0.0, pr.slowdown):
                        got = (int(np.sum(v.regressed[(t, sl)])), len(v.regressed[(t, sl)]))
                        want = (ref[sl].failures, ref[sl].trials)
                        checked += 1
                        if got != want:
                            bad.append(f"{label} {fam} {mode} 1x1 t={t:g} +{sl:g}: pooled {got}, all pairs {want}")
    return checked, bad


def pool_judge(pr: PooledRates, ps: PoolSetting, families: Sequence[str], labels: Sequence[str],
               max_false_alarm: float, min_power: float) -> tuple[bool, float, float, int]:
    """As :func:`judge`, over the cells of a pooled setting."""
    cells = [c for lb in labels for fam in families if (c := pr.cell(lb, fam, ps)) is not None]
    if not cells:
        return False, -math.inf, -math.inf, 0
    slacks = [slack(c, max_false_alarm, min_power) for c in cells]
    return (all(c.meets(max_false_alarm, min_power) for c in cells), min(slacks), sum(slacks) / len(slacks),
            len(cells))


def pool_ranking(pr: PooledRates, families: Sequence[str], select: Sequence[str], max_false_alarm: float,
                 min_power: float) -> list[tuple[bool, float, PoolSetting]]:
    """Pooled settings, the cheapest feasible on ``select`` first: feasible before infeasible, then the
    fewest candidate runs kc (paid on every check), then the fewest baseline runs kb (paid when a
    baseline is saved), then the largest minimum slack; infeasible ones by minimum slack."""
    out = []
    for ps in pr.settings():
        ok, margin, _, n = pool_judge(pr, ps, families, select, max_false_alarm, min_power)
        if n:
            out.append((ok, margin, ps))
    out.sort(key=lambda x: (not x[0], x[2].kc if x[0] else 0, x[2].kb if x[0] else 0, -x[1]))
    return out


# --------------------------------------------------------------------------- sweep and report


@dataclass
class Row:
    setting: Setting
    fam: str
    cells: dict[str, Cell | None]  # session label -> cell


def sweep(rates: Rates, settings: Sequence[Setting], families: Sequence[str], slowdown: float) -> list[Row]:
    return [Row(st, fam, {label: rates.cell(label, fam, st, slowdown) for label in rates.sessions})
            for st in settings for fam in families]


def _shipped_gate(cfg: PipecheckConfig) -> str:
    """The swept gate that the plugin's ``perf_anchor_mode`` amounts to."""
    return {"always": "anchored", "per-kind": "per-kind"}.get(cfg.perf_anchor_mode, "adaptive")


def shipped_default() -> Setting:
    """The plugin's default gate (``PipecheckConfig``: perf_anchor_mode, perf_threshold, perf_alpha)."""
    cfg = PipecheckConfig()
    gate = _shipped_gate(cfg)
    return Setting(gate, float(cfg.perf_threshold), float(cfg.perf_alpha),
                   DEFAULT_CLOCK_TOLERANCE if gate == "adaptive" else None)


def shipped_pool_default() -> PoolSetting:
    """The plugin's default as a pooled setting: a baseline of ``perf_baseline_runs`` runs, a check of one."""
    cfg = PipecheckConfig()
    return PoolSetting(_shipped_gate(cfg), int(cfg.perf_baseline_runs), 1, float(cfg.perf_threshold))


def settings_grid(thresholds: Sequence[float], alphas: Sequence[float], tolerances: Sequence[float]) -> list[Setting]:
    out: list[Setting] = []
    for gate in GATES:
        for t in thresholds:
            for a in alphas:
                if gate == "adaptive":
                    out += [Setting(gate, t, a, tol) for tol in tolerances]
                else:
                    out.append(Setting(gate, t, a))
    return out


def slack(cell: Cell | PoolCell, max_false_alarm: float, min_power: float) -> float:
    """The smaller of the two targets' normalised margins: > 0 meets both, the larger the safer."""
    aa = (max_false_alarm - cell.aa.rate) / max_false_alarm
    power = (cell.power.rate - min_power) / (1.0 - min_power)
    return min(aa, power)


def judge(rows: Sequence[Row], setting: Setting, labels: Sequence[str], max_false_alarm: float,
          min_power: float) -> tuple[bool, float, float, int]:
    """Over the cells of ``setting`` in sessions ``labels``: (meets both everywhere, min slack, mean
    slack, number of cells)."""
    cells = [c for r in rows if r.setting == setting for lb, c in r.cells.items() if lb in labels and c is not None]
    if not cells:
        return False, -math.inf, -math.inf, 0
    slacks = [slack(c, max_false_alarm, min_power) for c in cells]
    return (all(c.meets(max_false_alarm, min_power) for c in cells), min(slacks), sum(slacks) / len(slacks),
            len(cells))


def pct(x: float, digits: int = 1) -> str:
    return f"{x:.{digits}%}"


def _cell_rows(labels: Sequence[str], select: Sequence[str], holdout: Sequence[str], families: Sequence[str],
               cell: Callable[[str, str], Any], columns: Callable[[Any], str], max_false_alarm: float,
               min_power: float) -> list[str]:
    """The chosen setting's table rows: one per session (with its role) and kernel that has a cell;
    ``cell(label, family)`` finds it (None: none), ``columns(cell)`` renders the counts between the run
    kind and the verdict."""
    out: list[str] = []
    for lb in labels:
        role = "selection" if lb in select else ("held-out" if lb in holdout else "other")
        for fam in families:
            c = cell(lb, fam)
            if c is not None:
                out.append(f"| {lb} | {role} | {fam} | {c.mode} | {columns(c)} | "
                           f"{'yes' if c.meets(max_false_alarm, min_power) else '**no**'} |")
    return out


def drift_sd(runs: Sequence[Samples], mode: str) -> float:
    """sd of the log run levels the gate compares (as ``perf_gate_rates.rates`` reports it)."""
    levels = [float(np.median(r.ratios())) if mode == "anchored" else r.median for r in runs]
    return float(np.std(np.log(levels), ddof=1))


def render(rates: Rates, checks: Sequence[Check], rows: Sequence[Row], settings: Sequence[Setting],
           families: Sequence[str], select: Sequence[str], holdout: Sequence[str], args: argparse.Namespace,
           pool_summary: Sequence[str] = (), pool_lines: Sequence[str] = ()) -> str:
    labels = list(rates.sessions)
    maxfa, minp, slow = args.max_false_alarm, args.min_power, args.slowdown
    everywhere = []
    for st in settings:
        ok, margin, _, n = judge(rows, st, labels, maxfa, minp)
        if ok:
            everywhere.append((st, margin, n))
    ranked = []
    for st in settings:
        ok, margin, mean, n = judge(rows, st, select, maxfa, minp)
        if n:
            ranked.append((ok, margin, mean, st.threshold, -st.alpha, st))
    ranked.sort(key=lambda x: (x[0], x[1], x[2], x[3], x[4]), reverse=True)
    feasible = [x for x in ranked if x[0]]

    def cell_of(st: Setting, fam: str, lb: str) -> Cell | None:
        return next((r.cells[lb] for r in rows if r.setting == st and r.fam == fam), None)

    def failing(st: Setting, within: Sequence[str]) -> list[str]:
        out = []
        for lb in within:
            for fam in families:
                c = cell_of(st, fam, lb)
                if c is not None and not c.meets(maxfa, minp):
                    out.append(f"{lb} {fam} (A/A {pct(c.aa.rate, 2)}, +{slow:.0%} {pct(c.power.rate)})")
        return out

    lines = [
        "# Perf gate sweep: threshold x alpha on recorded runs (A/A false alarms vs scaled slowdown power)",
        "",
        f"Generated by `python3 scripts/perf_gate_sweep.py{''.join(' ' + a for a in args.command_args)}` "
        "(CPU only; no new GPU timing).",
        "",
        f"Targets: same-code reruns fail <= {pct(maxfa)} (A/A), a real {slow:+.0%} slowdown is caught >= "
        f"{pct(minp, 0)} of the time. Both rates are over all ordered pairs (i, j) of distinct A runs of one "
        f"session: run i is the baseline and run j the candidate, for power with each kernel sample multiplied by "
        f"{1 + slow:g} (the anchor samples left as they are): `resample_rates`, exactly as "
        "`scripts/gpu/perf_gate_rates.py` computes its 'A/A all pairs' and 'scaled +x% (all pairs)' columns. "
        "Cross-process A/A (every run of one fresh process against every run of another; 3 processes x 3 runs, "
        "54 comparisons) is shown as supplementary evidence: it is the closest to a baseline saved in one pytest "
        "run and checked in a later one, but it is few, correlated comparisons.",
        "",
        "Gates:",
        "",
        *[f"- **{g}**: {GATE_HELP[g]}" for g in GATES],
        "",
        "## Summary",
        "",
    ]
    statuses = ("exact", "knife-edge", "not recomputable", "MISMATCH")
    counts = {st: sum(1 for chk in checks if chk.status == st) for st in statuses}
    lines.append(f"- Validation: {len(checks)} stored counts, " + ", ".join(f"{n} {st}" for st, n in counts.items())
                 + " (details below).")
    default = shipped_default()
    fails = failing(default, labels)
    lines.append(f"- Shipped default's gate on single runs, one baseline run against one candidate run ({default.label}): "
                 + ("meets both targets in every cell." if not fails else "misses in " + "; ".join(fails) + "."))
    lines.append(f"- Settings meeting both targets in every session for every kernel ({len(settings)} tried): "
                 + (", ".join(st.label for st, _, _ in everywhere) if everywhere else "none") + ".")
    none_cells = []
    for gate in GATES:
        for fam in families:
            for lb in labels:
                cs = [r.cells[lb] for r in rows if r.setting.gate == gate and r.fam == fam and r.cells[lb] is not None]
                if cs and not any(c is not None and c.meets(maxfa, minp) for c in cs):
                    none_cells.append(f"{gate}/{fam}/{lb}")
    if none_cells:
        lines.append("- (gate, kernel, session) where no grid setting meets both: " + ", ".join(none_cells) + ".")
    if ranked:
        chosen = ranked[0][-1]
        hok, hmargin, _, hn = judge(rows, chosen, holdout, maxfa, minp)
        head = (f"selected **{chosen.label}**" if ranked[0][0] else
                f"no setting meets both on the selection sessions; the least-bad compromise is **{chosen.label}**")
        hfails = failing(chosen, holdout)
        lines.append(f"- Selection on {', '.join(select)}: {len(feasible)} feasible; {head} (min slack "
                     f"{ranked[0][1]:+.2f}: misses in " + ("; ".join(failing(chosen, select)) or "none") + "). On held-out "
                     f"{', '.join(holdout)}: " + ("-" if hn == 0 else ("meets both" if hok else "misses in "
                                                                      + "; ".join(hfails)))
                     + f" (min slack {hmargin:+.2f}).")
    lines += list(pool_summary)
    lines += [
        "",
        "## Sessions",
        "",
        "| session | file | recorded | stored gate | kernel | A runs (raw / anchored) | A median us | anchor |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, s in rates.sessions.items():
        for fam in s.families:
            by_kind = s.a_runs[fam]
            med = float(np.median([r.median for r in by_kind.get("raw") or by_kind["anchored"]]))
            n_runs = " / ".join(str(len(by_kind[k])) if k in by_kind else "-" for k in ("raw", "anchored"))
            anchor = ((s.recording["families"][fam].get("anchor") or {}).get("label")) or "none recorded"
            lines.append(f"| {label} | {Path(s.path).name} | {s.recording.get('date', '?')} | threshold "
                         f"{pct(s.threshold)}, alpha {s.alpha:g} | {fam} | {n_runs} | {med:.1f} | {anchor} |")
    no_anchor = [lb for lb, s in rates.sessions.items() if all("anchored" not in r for r in s.a_runs.values())]
    if no_anchor:
        lines += ["", f"{', '.join(no_anchor)}: raw runs only (recorded before anchoring), so only the raw gate "
                  "(and per-kind gating's raw part) can be evaluated there; other gates show '-'."]

    # validation
    lines += ["", "## Validation: recomputed at each session's stored settings vs the stored rates", "",
              f"{len(checks)} stored counts: " + ", ".join(f"{n} {st}" for st, n in counts.items()) + ". "
              "'knife-edge': a scaled count at a slowdown equal to the threshold that differs only through the pairs "
              "whose run levels are equal, so that their ratio lies exactly on the threshold and floating-point "
              "rounding decides their verdict (the stored count is the recomputed one with some of those pairs "
              "counted the other way); 'not recomputable': the recording lacks the runs "
              "(no child runs were stored).", "",
              "| session | kernel | gate | quantity | stored | recomputed | status |", "|---|---|---|---|---|---|---|"]
    for chk in checks:
        status = chk.describe()
        if chk.status == "MISMATCH":
            status = "**MISMATCH**"
        lines.append(f"| {chk.label} | {chk.fam} | {chk.gate} | {chk.what} | {Check.fmt(chk.stored)} | "
                     f"{Check.fmt(chk.recomputed)} | {status} |")

    # the sweep tables
    lines += ["", f"## Sweep: all-pairs A/A and scaled {slow:+.0%} power per session", "",
              f"Bold: misses its target (A/A > {pct(maxfa)}, power < {pct(minp, 0)}). 'worst': the highest A/A and "
              "the lowest power over the sessions with data. 'XP A/A': cross-process A/A failures over all sessions "
              f"with child runs. 'meets': both targets in every kernel of the selection sessions ({', '.join(select)}), "
              f"of the held-out ({', '.join(holdout)}), and of all sessions with data."]

    def aa_cell(c: Cell | None) -> str:
        if c is None:
            return "-"
        text = pct(c.aa.rate, 2)
        return f"**{text}**" if c.aa.rate > maxfa else text

    def pw_cell(c: Cell | None) -> str:
        if c is None:
            return "-"
        text = pct(c.power.rate)
        return f"**{text}**" if c.power.rate < minp else text

    def yn(ok: bool, n: int) -> str:
        return "-" if n == 0 else ("yes" if ok else "no")

    for gate in GATES:
        g_settings = [st for st in settings if st.gate == gate]
        if not g_settings:
            continue
        head = ("| setting | kernel | " + " | ".join(f"A/A {lb}" for lb in labels) + " | A/A worst | "
                + " | ".join(f"+{slow:.0%} {lb}" for lb in labels) + f" | +{slow:.0%} worst | XP A/A | meets sel / held-out / all |")
        lines += ["", f"### {gate}", "", head, "|" + "---|" * (2 + 2 * len(labels) + 4)]
        for st in g_settings:
            for r in (r for r in rows if r.setting == st):
                cells = [c for c in r.cells.values() if c is not None]
                worst_aa = max(c.aa.rate for c in cells) if cells else math.nan
                worst_pw = min(c.power.rate for c in cells) if cells else math.nan
                xp = [c.cross for c in cells if c.cross is not None]
                xps = f"{sum(x[0] for x in xp)}/{sum(x[1] for x in xp)}" if xp else "-"
                meet = []
                for group in (select, holdout, labels):
                    group_cells = [c for lb, c in r.cells.items() if lb in group and c is not None]
                    meet.append(yn(all(c.meets(maxfa, minp) for c in group_cells), len(group_cells)))
                mode = f" ({cells[0].mode})" if gate == "per-kind" and cells else ""
                name = f"t={pct(st.threshold, 2)}, a={st.alpha:g}" + (
                    f", tol {pct(st.tolerance, 1)}" if gate == "adaptive" and st.tolerance is not None else "")
                wa = "-" if not cells else (f"**{pct(worst_aa, 2)}**" if worst_aa > maxfa else pct(worst_aa, 2))
                wp = "-" if not cells else (f"**{pct(worst_pw)}**" if worst_pw < minp else pct(worst_pw))
                lines.append(f"| {name} | {r.fam}{mode} | " + " | ".join(aa_cell(r.cells[lb]) for lb in labels)
                             + f" | {wa} | " + " | ".join(pw_cell(r.cells[lb]) for lb in labels)
                             + f" | {wp} | {xps} | {' / '.join(meet)} |")

    # alpha's effect
    by_key: dict[tuple[Any, ...], list[Cell]] = {}
    for r in rows:
        for lb, c in r.cells.items():
            if c is not None:
                by_key.setdefault((r.setting.gate, r.setting.threshold, r.setting.tolerance, r.fam, lb), []).append(c)
    varied = [(k, v) for k, v in by_key.items() if len({(c.aa.failures, c.power.failures) for c in v}) > 1]
    if len(args.alphas) > 1:
        biggest = max((max(abs(a.power.rate - b.power.rate), abs(a.aa.rate - b.aa.rate)) for _, v in varied
                       for a in v for b in v), default=0.0)
        per_gate = {g: sum(1 for k, _ in varied if k[0] == g) for g in GATES}
        lines += ["", f"Alpha ({', '.join(f'{a:g}' for a in args.alphas)}) changed the A/A or +{slow:.0%} count in "
                  f"{len(varied)} of {len(by_key)} (gate, threshold, kernel, session) cells "
                  f"({', '.join(f'{g}: {n}' for g, n in per_gate.items())}); the largest change of a rate was "
                  f"{pct(biggest)}. Where it changes nothing, the median threshold decides, not the rank test."]

    # settings that meet both targets everywhere
    lines += ["", "## Settings meeting both targets in every session, for every kernel", ""]
    if everywhere:
        lines += [f"- {st.label}: min slack {m:+.2f} over {n} (session, kernel) cells" for st, m, n in everywhere]
    else:
        lines.append(f"None of the {len(settings)} settings meets A/A <= {pct(maxfa)} and +{slow:.0%} >= "
                     f"{pct(minp, 0)} in every session for every kernel.")
    # per gate and kernel: the sessions no grid setting can satisfy
    lines += ["", "Per gate and kernel, the grid settings meeting both targets in each session "
              "(thresholds; '(a=...)' when only some alphas do):", "",
              "| gate | kernel | " + " | ".join(labels) + " |", "|---|---|" + "---|" * len(labels)]
    for gate in GATES:
        for fam in families:
            cells_txt = []
            for lb in labels:
                rs = [r for r in rows if r.setting.gate == gate and r.fam == fam and r.cells[lb] is not None]
                if not rs:
                    cells_txt.append("-")
                    continue
                by_t: dict[tuple[float, float | None], list[str]] = {}
                total: dict[tuple[float, float | None], int] = {}
                for r in rs:
                    key = (r.setting.threshold, r.setting.tolerance)
                    total[key] = total.get(key, 0) + 1
                    c = r.cells[lb]
                    if c is not None and c.meets(maxfa, minp):
                        by_t.setdefault(key, []).append(f"{r.setting.alpha:g}")
                parts = []
                for (thr, tol), alphas in sorted(by_t.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0.0)):
                    txt = pct(thr, 2) + (f" tol {pct(tol, 1)}" if gate == "adaptive" and len(args.tolerances) > 1
                                         and tol is not None else "")
                    parts.append(txt if len(alphas) == total[(thr, tol)] else f"{txt} (a={','.join(alphas)})")
                cells_txt.append(", ".join(parts) if parts else "**none**")
            lines.append(f"| {gate} | {fam} | " + " | ".join(cells_txt) + " |")

    # selection / hold-out
    lines += ["", f"## Selection on {', '.join(select)}, checked on held-out {', '.join(holdout)}", "",
              "Rule: among the settings that meet both targets for every kernel in every selection session, pick the "
              "one with the largest minimum slack, where a cell's slack is the smaller of (max A/A - A/A) / max A/A "
              "and (power - min power) / (1 - min power) (> 0: meets both); ties go to the larger mean slack, then "
              "the larger threshold, then the smaller alpha. "
              "If none meets both, the largest minimum slack still names the least-bad compromise.", ""]
    lines.append(f"{len(feasible)} of {len(ranked)} settings meet both targets on {', '.join(select)}"
                 + (": " + "; ".join(x[-1].label for x in feasible) + "." if feasible else "."))
    lines += ["", "Top settings by selection slack, and the held-out result:", "",
              "| rank | setting | meets on selection | min slack (selection) | meets on held-out | min slack (held-out) |",
              "|---|---|---|---|---|---|"]
    for i, (ok, margin, *_, st) in enumerate(ranked[:8], 1):
        hok, hmargin, _, hn = judge(rows, st, holdout, maxfa, minp)
        lines.append(f"| {i} | {st.label} | {'yes' if ok else 'no'} | {margin:+.2f} | "
                     f"{yn(hok, hn)} | {hmargin:+.2f} |")
    if ranked:
        chosen = ranked[0][-1]
        verb = "Selected" if ranked[0][0] else "No setting is feasible on the selection sessions; least-bad compromise"
        lines += ["", f"{verb}: **{chosen.label}**. Its cells:", "",
                  "| session | role | kernel | gated on | A/A all pairs | +5% all pairs | A/A cross-process | meets |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += _cell_rows(labels, select, holdout, families, lambda lb, fam: cell_of(chosen, fam, lb),
                            lambda c: f"{c.aa.failures}/{c.aa.trials} ({pct(c.aa.rate, 2)}) | "
                                      f"{c.power.failures}/{c.power.trials} ({pct(c.power.rate)}) | "
                                      + ("-" if c.cross is None else f"{c.cross[0]}/{c.cross[1]}"),
                            maxfa, minp)

    # why: the drift floor
    z_fa = float(sps.norm.ppf(1.0 - maxfa))
    z_p = float(sps.norm.ppf(minp))
    sd_max = math.log1p(slow) / (math.sqrt(2.0) * (z_fa + z_p))
    lines += ["", "## Why: run-to-run drift of the gated series", "",
              "With 100 samples a side the rank test is rarely what fails; the threshold on the ratio of medians "
              "is. If a series' log run level drifts as N(0, sd^2) from run to run, a pair differs by N(0, 2 sd^2), "
              f"so A/A <= {pct(maxfa)} needs threshold >= exp({z_fa:.2f} sqrt(2) sd) - 1 and {slow:+.0%} >= "
              f"{pct(minp, 0)} needs threshold <= {1 + slow:g} exp(-{z_p:.2f} sqrt(2) sd) - 1: both at once only "
              f"for sd <= {sd_max:.4f}. A normal approximation for orientation (real drift has heavier tails and "
              "session-long trends); the measured rates above decide.", "",
              "| session | kernel | gate | sd of log run levels | approx. feasible thresholds |", "|---|---|---|---|---|"]
    for lb, s in rates.sessions.items():
        for fam in s.families:
            for mode in ("raw", "anchored"):
                runs = s.a_runs[fam].get(run_kind(mode))
                if not runs or len(runs) < 2:
                    continue
                sd = drift_sd(runs, mode)
                lo = math.exp(z_fa * math.sqrt(2.0) * sd) - 1.0
                hi = (1.0 + slow) * math.exp(-z_p * math.sqrt(2.0) * sd) - 1.0
                window = f"{pct(lo, 2)} .. {pct(hi, 2)}" if lo <= hi else f"none ({pct(lo, 2)} > {pct(hi, 2)})"
                lines.append(f"| {lb} | {fam} | {mode} | {sd:.4f} | {window} |")

    lines += ["", "## Caveats", "",
              "- The all-pairs comparisons are not independent: 40 runs give 1560 ordered pairs, and one odd run "
              "takes part in 78 of them. Rates near a target (within a few tenths of a percent of 1% A/A, or a "
              "few percent of 95% power) are not distinguishable from it with these data.",
              "- Scaled power multiplies the candidate's kernel samples by exactly 1 + x and leaves the anchor as it "
              "was: a pure slowdown carrying the real run-to-run drift. It does not model a slowdown that also "
              "changes the kernel's noise.",
              "- The selection sessions and the held-out one are sessions of one GPU model on one day; a held-out "
              "pass is evidence for that machine, not for another GPU or driver.",
              ]
    lines += list(pool_lines)
    return "\n".join(lines) + "\n"


def run_timing(s: Session, fam: str) -> tuple[int, float | None]:
    """(rounds, mean seconds per run) of one kernel's round-robin runs, from the recording's phase time.

    Each round of ``perf_gate_rates.take_runs`` is A, A, +3%, +5%, +10%, each as a raw run then an
    anchored run (s1: raw runs only), so a round is 5 runs per recorded run kind."""
    kinds = s.a_runs[fam]
    rounds = max(len(v) for v in kinds.values()) // 2
    secs = (s.recording.get("phase_seconds") or {}).get(f"{fam}:runs")
    if not secs or not rounds:
        return rounds, None
    return rounds, float(secs) / (rounds * 5 * len(kinds))


def render_pooled(pr: PooledRates, families: Sequence[str], select: Sequence[str], holdout: Sequence[str],
                  args: argparse.Namespace, single: int, checked: int, mismatches: Sequence[str]) -> list[str]:
    """The "Pooled runs" section of the report."""
    rates = pr.rates
    labels = list(rates.sessions)
    maxfa, minp, slow = args.max_false_alarm, args.min_power, args.slowdown
    sizes = pr.sizes
    combos = [(kb, kc) for kb in sizes for kc in sizes]
    z_fa = float(sps.norm.ppf(1.0 - maxfa))
    z_p = float(sps.norm.ppf(minp))
    rms_max = math.log1p(slow) / (z_fa + z_p)
    n_per_run = min((r.n for s in rates.sessions.values() for by in s.a_runs.values() for runs in by.values()
                     for r in runs), default=0)
    gap = f", with at least {pr.gap} runs between the two windows" if pr.gap else ""
    lines = ["", "## Pooled runs: a baseline of kb runs against a candidate of kc runs", "",
             "Question: one baseline run against one candidate run carries the drift of two run levels (pair sd = "
             "sd x sqrt(2)); does pooling several runs per side bring the gate within both targets? "
             f"A pooled run is the runs' samples concatenated (kb x {n_per_run} samples; for the anchored "
             "gate the kernel and the anchor samples concatenated alike, so each kernel/anchor ratio stays paired), "
             "and the plugin's own rule decides exactly as for one run (`compare`'s vectorised form `gate_rows`, "
             f"as `resample_rates` calls it; alpha {pr.alpha:g}). Power: the candidate's kernel samples x "
             f"{1 + slow:g}, its anchor samples untouched.", "",
             "Enumeration: **windows of consecutive runs**, not random draws. A/A runs are taken in recording order "
             "(= time order); the baseline is runs i..i+kb-1, the candidate runs j..j+kc-1, and every ordered pair of "
             f"windows that share no run is one comparison{gap}. With kb = kc = 1 this is exactly the all-pairs set "
             "above (checked: the counts equal `resample_rates`'). Random groups would mix runs from the start and "
             "the end of a session into one pooled run, averaging out slow drift that a baseline taken in one "
             "sitting would not average out; consecutive windows keep each pooled run compact in time, as "
             "`kb` back-to-back runs in one pytest session would be.", "",
             "How the runs lie in time (`scripts/gpu/perf_gate_rates.py`, `take_runs`): 20 rounds (fewer if the "
             "budget ran out); each round takes the variants A, A, +3%, +5%, +10% in turn, each as one raw run "
             "(kernel alone) followed by one anchored run (kernel and anchor interleaved sample by sample). So the "
             "raw and the anchored A runs are two separate, interleaved series: A runs 2r and 2r+1 of one kind are "
             "from round r, one run of the other kind apart; A run 2r+1 and 2r+2 are 7 runs apart (the other "
             "kind's second A run and the three slowed variants of both kinds). s1 (raw only) recorded "
             "A, A, +3%, +5%, +10% per round without anchored runs (40 A and 20 runs per slowed variant match "
             "that). All of a kernel's runs of a session lie within one phase of about 7-26 s:", "",
             "| session | kernel | rounds | A runs per kind | run kinds | phase s | s per run (mean) |",
             "|---|---|---|---|---|---|---|"]
    for lb, s in rates.sessions.items():
        for fam in s.families:
            rounds, per_run = run_timing(s, fam)
            secs = (s.recording.get("phase_seconds") or {}).get(f"{fam}:runs")
            lines.append(f"| {lb} | {fam} | {rounds} | {max(len(v) for v in s.a_runs[fam].values())} | "
                         f"{', '.join(s.a_runs[fam])} | {secs if secs is not None else '-'} | "
                         f"{'-' if per_run is None else f'{per_run:.3f}'} |")
    counts = sorted({len(r) for s in rates.sessions.values() for by in s.a_runs.values() for r in by.values()},
                    reverse=True)
    lines += ["", "Comparisons per session (window pairs) and, in brackets, the comparisons that use each run at "
              "most once (A runs // (kb + kc)): the number of independent comparisons. The window pairs share "
              "runs heavily, so a count of 0 A/A failures in ~1300 pairs rests on about as many independent "
              "draws as the bracket says, plus the run levels of the session; a 1% rate cannot be resolved "
              "from one session. The rms of the log pooled A/A ratio (further below) is the better-resolved measure.",
              "", "| A runs | " + " | ".join(f"{kb}x{kc}" for kb, kc in combos) + " |", "|---|" + "---|" * len(combos)]
    for n in counts:
        lines.append(f"| {n} | " + " | ".join(f"{len(window_pairs(n, kb, kc, pr.gap))} ({n // (kb + kc)})"
                                              for kb, kc in combos) + " |")

    def aa_txt(c: PoolCell | None) -> str:
        if c is None:
            return "-"
        text = f"{c.aa.failures}/{c.aa.trials} ({pct(c.aa.rate, 2)})"
        return f"**{text}**" if c.aa.rate > maxfa else text

    def pw_txt(c: PoolCell | None) -> str:
        if c is None:
            return "-"
        text = f"{c.power.failures}/{c.power.trials} ({pct(c.power.rate)})"
        return f"**{text}**" if c.power.rate < minp else text

    lines += ["", f"Per gate, kernel, kb x kc (baseline runs x candidate runs) and threshold: A/A failures and "
              f"scaled {slow:+.0%} detections over the window pairs. Bold: misses its target (A/A > {pct(maxfa)}, "
              f"power < {pct(minp, 0)}). Per-kind gating is the add_fp32 rows of the raw table with the "
              "matmul_bf16 rows of the anchored table; s1 has raw runs only."]
    for gate in ("raw", "anchored"):
        lines += ["", f"### Pooled, {gate}", "",
                  "| kernel | kb x kc | threshold | " + " | ".join(f"A/A {lb}" for lb in labels) + " | "
                  + " | ".join(f"+{slow:.0%} {lb}" for lb in labels) + " |",
                  "|---|---|---|" + "---|" * (2 * len(labels))]
        for fam in families:
            for kb, kc in combos:
                for t in pr.thresholds:
                    ps = PoolSetting(gate, kb, kc, t)
                    cells = [pr.cell(lb, fam, ps) for lb in labels]
                    lines.append(f"| {fam} | {kb}x{kc} | {pct(t, 2)} | " + " | ".join(aa_txt(c) for c in cells)
                                 + " | " + " | ".join(pw_txt(c) for c in cells) + " |")

    lines += ["", "### Drift of pooled levels", "",
              "rms over the A/A window pairs of log(candidate level / baseline level), the level being the median "
              "time (raw) or the median kernel/anchor ratio (anchored) of the pooled samples. Under a normal "
              f"approximation both targets can hold only for rms <= log({1 + slow:g}) / (z(1-{pct(maxfa)}) + "
              f"z({pct(minp, 0)})) = {rms_max:.4f}; then A/A needs threshold >= exp({z_fa:.2f} rms) - 1 and "
              f"{slow:+.0%} needs threshold <= {1 + slow:g} exp(-{z_p:.2f} rms) - 1. Bold: above {rms_max:.4f}. "
              "With independent run levels of sd s, rms = s sqrt(1/kb + 1/kc); slow drift within a session "
              "makes pooling consecutive runs gain less than that. In that model, with a single candidate run (kc = 1) rms "
              "stays above s however many baseline runs are pooled.", "",
              "| session | kernel | gate | " + " | ".join(f"{kb}x{kc}" for kb, kc in combos) + " |",
              "|---|---|---|" + "---|" * len(combos)]
    for lb, s in rates.sessions.items():
        for fam in s.families:
            for mode in ("raw", "anchored"):
                vs = [pr.verdicts(lb, fam, mode, kb, kc) for kb, kc in combos]
                if all(v is None for v in vs):
                    continue
                txt = ["-" if v is None else (f"**{v.rms_log:.4f}**" if v.rms_log > rms_max else f"{v.rms_log:.4f}")
                       for v in vs]
                lines.append(f"| {lb} | {fam} | {mode} | " + " | ".join(txt) + " |")

    # which pooled settings meet both targets
    lines += ["", "### Pooled settings meeting both targets", "",
              f"Per gate and kb x kc, per threshold: meets both targets for every kernel in the selection sessions "
              f"({', '.join(select)}) / the held-out ({', '.join(holdout)}) / all sessions with data; then the "
              f"worst A/A and the worst {slow:+.0%} power over all sessions and kernels.", "",
              "| gate | kb x kc | " + " | ".join(f"t={pct(t, 2)}" for t in pr.thresholds) + " |",
              "|---|---|" + "---|" * len(pr.thresholds)]

    def yn(ok: bool, n: int) -> str:
        return "-" if n == 0 else ("yes" if ok else "no")

    everywhere = []
    for gate in POOL_GATES:
        for kb, kc in combos:
            parts = []
            for t in pr.thresholds:
                ps = PoolSetting(gate, kb, kc, t)
                res = [pool_judge(pr, ps, families, group, maxfa, minp) for group in (select, holdout, labels)]
                cells = [c for lb in labels for fam in families if (c := pr.cell(lb, fam, ps)) is not None]
                worst = (f"{pct(max(c.aa.rate for c in cells), 2)}, {pct(min(c.power.rate for c in cells))}"
                         if cells else "-")
                if res[2][0]:
                    everywhere.append((ps, res[2][1]))
                meet = " / ".join(yn(ok, n) for ok, _, _, n in res)
                parts.append(f"**{meet}** ({worst})" if res[2][0] else f"{meet} ({worst})")
            lines.append(f"| {gate} | {kb}x{kc} | " + " | ".join(parts) + " |")
    lines += ["", f"{len(everywhere)} of {len(pr.settings())} pooled settings meet both targets in every session "
              "for every kernel" + (": " + "; ".join(ps.label for ps, _ in everywhere) + "." if everywhere else ".")]

    # selection / hold-out
    ranked = pool_ranking(pr, families, select, maxfa, minp)
    feasible = [x for x in ranked if x[0]]
    lines += ["", f"### Pooled: selection on {', '.join(select)}, checked on held-out {', '.join(holdout)}", "",
              "Rule: among the pooled settings that meet both targets for every kernel in every selection session, "
              "pick the cheapest: the fewest candidate runs kc (paid on every check), then the fewest baseline runs "
              "kb (paid when a baseline is saved), then the largest minimum slack (as in the sweep). "
              f"{len(feasible)} of {len(ranked)} pooled settings are feasible on {', '.join(select)}.", "",
              "| rank | setting | runs per check (kc) / per baseline (kb) | min slack (selection) | "
              "meets on held-out | min slack (held-out) | meets in all sessions |", "|---|---|---|---|---|---|---|"]
    for i, (ok, margin, ps) in enumerate(ranked[:10], 1):
        hok, hmargin, _, hn = pool_judge(pr, ps, families, holdout, maxfa, minp)
        aok, _, _, an = pool_judge(pr, ps, families, labels, maxfa, minp)
        lines.append(f"| {i} | {ps.label}{'' if ok else ' (not feasible)'} | {ps.kc} / {ps.kb} | {margin:+.2f} | "
                     f"{yn(hok, hn)} | {hmargin:+.2f} | {yn(aok, an)} |")
    if ranked:
        chosen = ranked[0][2]
        verb = "Selected" if ranked[0][0] else "No pooled setting is feasible on the selection sessions; least-bad"
        lines += ["", f"{verb}: **{chosen.label}**. Its cells:", "",
                  "| session | role | kernel | gated on | A/A | +5% | rms log A/A ratio | independent comparisons | meets |",
                  "|---|---|---|---|---|---|---|---|---|"]
        lines += _cell_rows(labels, select, holdout, families, lambda lb, fam: pr.cell(lb, fam, chosen),
                            lambda c: f"{aa_txt(c)} | {pw_txt(c)} | {c.rms_log:.4f} | {c.independent}", maxfa, minp)
    lines += ["", f"Check of the pooled path: with kb = kc = 1 its counts are compared with the all-pairs counts "
              f"(`resample_rates`) of every session, kernel, run kind, threshold and slowdown ({single} counts); "
              f"{checked} pooled comparisons (kb or kc > 1; a regressed and a passing pair "
              "per session, kernel, run kind, kb x kc, threshold and slowdown, seeded) re-decided one at a time by "
              "`compare` on the concatenated `Samples`. Result: "
              + ("all agree." if not mismatches else f"**{len(mismatches)} differ**: " + "; ".join(mismatches[:5]))]
    lines += ["", "Caveats of the pooled section:", "",
              "- All runs of a kernel in a session lie within one phase of 7-26 s, and every window pair compares runs at most one phase "
              "apart, so the drift seen here is short-term. A baseline saved on another day, in another process, "
              "sees more (the cross-process A/A above is the only evidence of that, for single runs).",
              "- Consecutive A runs of one kind are separated by other runs (1 or 7), so a window of kb runs spans "
              "about kb/2 rounds (a round is 5 runs per run kind: 0.4-1.6 s, see the table); back-to-back runs in a real check would "
              "be closer in time and, under slow drift, slightly more alike.",
              "- Few independent comparisons (brackets above): a feasible pooled setting here shows that the pooled "
              "levels stay well inside the threshold in these sessions, not that its A/A rate is below 1% to any "
              "precision.",
              ]
    return lines


def pool_summary(pr: PooledRates, families: Sequence[str], select: Sequence[str], holdout: Sequence[str],
                 max_false_alarm: float, min_power: float) -> list[str]:
    """The summary bullet of the pooled section."""
    labels = list(pr.rates.sessions)
    ranked = pool_ranking(pr, families, select, max_false_alarm, min_power)
    feasible = [x for x in ranked if x[0]]
    every = [ps for ps in pr.settings() if pool_judge(pr, ps, families, labels, max_false_alarm, min_power)[0]]
    every.sort(key=lambda ps: (ps.kc, ps.kb, POOL_GATES.index(ps.gate), ps.threshold))
    text = (f"- Pooled runs (a baseline of kb consecutive runs against a candidate of kc, kb, kc in "
            f"{{{', '.join(map(str, pr.sizes))}}}; details in 'Pooled runs'): {len(every)} of {len(pr.settings())} "
            "settings meet both targets in every session for every kernel")
    text += (" (fewest runs per check first: " + "; ".join(ps.label for ps in every[:4])
             + ("; ..." if len(every) > 4 else "") + ")." if every else ".")
    if ranked:
        ok, margin, ps = ranked[0]
        hok, hmargin, _, hn = pool_judge(pr, ps, families, holdout, max_false_alarm, min_power)
        held = "-" if hn == 0 else ("meets both" if hok else "misses")
        text += (f" Selection on {', '.join(select)}: {len(feasible)} feasible; the cheapest is **{ps.label}** "
                 f"(min slack {margin:+.2f}); on held-out {', '.join(holdout)}: {held} (min slack {hmargin:+.2f})."
                 if ok else f" Selection on {', '.join(select)}: none feasible.")
    shipped = shipped_pool_default()
    if shipped.gate in POOL_GATES and shipped.kb in pr.sizes and shipped.threshold in pr.thresholds:
        sok, smargin, _, sn = pool_judge(pr, shipped, families, labels, max_false_alarm, min_power)
        text += (f" Shipped default ({shipped.label}): "
                 + ("no data." if sn == 0 else "meets both targets in every session." if sok
                    else f"misses in some session (min slack {smargin:+.2f})."))
    return [text]


def floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("recordings", nargs="*", default=list(DEFAULT_RECORDINGS),
                    help="[LABEL=]perf_gate_rates.json[.gz] (default: the four H200 sessions s1..s4)")
    ap.add_argument("--out", help="write the markdown report here (default: stdout)")
    ap.add_argument("--thresholds", type=floats, default=DEFAULT_THRESHOLDS, help="practical thresholds (fractions)")
    ap.add_argument("--alphas", type=floats, default=DEFAULT_ALPHAS, help="significance levels")
    ap.add_argument("--tolerances", type=floats, default=DEFAULT_TOLERANCES,
                    help="clock tolerances of the adaptive gate (fractions)")
    ap.add_argument("--select", default="s2,s3", help="labels of the sessions the setting is picked on")
    ap.add_argument("--holdout", default="s4", help="labels of the held-out sessions")
    ap.add_argument("--max-false-alarm", type=float, default=MAX_FALSE_ALARM)
    ap.add_argument("--min-power", type=float, default=MIN_POWER)
    ap.add_argument("--slowdown", type=float, default=SLOWDOWN)
    ap.add_argument("--pool-sizes", type=lambda t: tuple(int(x) for x in t.split(",") if x.strip()),
                    default=POOL_SIZES, help="runs pooled per side in the 'Pooled runs' section (kb and kc)")
    ap.add_argument("--pool-thresholds", type=floats, default=POOL_THRESHOLDS,
                    help="practical thresholds of the 'Pooled runs' section (fractions)")
    ap.add_argument("--pool-alpha", type=float, default=PipecheckConfig().perf_alpha,
                    help="alpha of the 'Pooled runs' section (default: the plugin's perf_alpha)")
    ap.add_argument("--pool-gap", type=int, default=0,
                    help="least number of runs between a pooled baseline window and its candidate window")
    ap.add_argument("--strict", action="store_true",
                    help="fail validation on knife-edge and not-recomputable counts too, not only on mismatches")
    args = ap.parse_args(argv)
    args.command_args = list(sys.argv[1:] if argv is None else argv)

    sessions = [load_session(*parse_recording(a, i)) for i, a in enumerate(args.recordings)]
    labels = [s.label for s in sessions]
    select = [x for x in args.select.split(",") if x]
    holdout = [x for x in args.holdout.split(",") if x]
    unknown = [x for x in (*select, *holdout) if x not in labels]
    if unknown:
        ap.error(f"--select/--holdout name unknown sessions {unknown}; loaded: {labels}")
    rates = Rates(sessions)

    checks = validate(rates)
    exact = sum(1 for c in checks if c.status == "exact")
    print(f"validation: {exact}/{len(checks)} stored counts reproduced exactly", file=sys.stderr)
    for c in checks:
        if c.status != "exact":
            print(f"  {c.label} {c.fam} {c.gate} {c.what}: stored {Check.fmt(c.stored)}, recomputed "
                  f"{Check.fmt(c.recomputed)}: {c.describe()}", file=sys.stderr)
    if not all(c.ok(args.strict) for c in checks):
        print("validation failed: the recomputation does not reproduce the stored rates; no sweep", file=sys.stderr)
        return 2

    families = list(dict.fromkeys(f for s in sessions for f in s.families))
    settings = settings_grid(args.thresholds, args.alphas, args.tolerances)
    if shipped_default() not in settings:  # the summary reports it whatever the grid
        settings.append(shipped_default())
    rows = sweep(rates, settings, families, args.slowdown)
    pr = PooledRates(rates, args.pool_thresholds, args.pool_alpha, args.slowdown, args.pool_sizes, args.pool_gap)
    single, mismatches = pool_single_run_check(pr)
    checked, spot_bad = pr.spot_check()
    mismatches += spot_bad
    print(f"pooled runs: {single} kb=kc=1 counts against all pairs, {checked} pooled comparisons re-decided by "
          f"compare(); {len(mismatches)} differ", file=sys.stderr)
    for line in mismatches:
        print(f"  {line}", file=sys.stderr)
    md = render(rates, checks, rows, settings, families, select, holdout, args,
                pool_summary(pr, families, select, holdout, args.max_false_alarm, args.min_power),
                render_pooled(pr, families, select, holdout, args, single, checked, mismatches))
    if args.out:
        Path(args.out).write_text(md)
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(md)
    return 2 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
