"""Sweep the perf gate's threshold and alpha over recorded GPU runs: A/A false alarms vs +5% power.

CPU only; no GPU, no new timing. Reads recordings written by ``scripts/gpu/perf_gate_rates.py``
(``perf_gate_rates.json[.gz]``: the per-run samples under ``families.<kernel>.raw_runs_us``, the rates
the GPU session computed under ``families.<kernel>.rates``, its settings under ``gate``) and:

1. recomputes, from the stored samples and with the plugin's own statistics
   (:func:`pytest_pipecheck.perf.stats.resample_rates`, called as ``perf_gate_rates.rates`` calls
   it, on runs decoded by ``perf_gate_rates.decode``), the all-pairs A/A false-alarm rate and the
   all-pairs scaled +3/+5/+10% detection rates of every gate the recording has rates for (raw,
   anchored, adaptive), plus the cross-process A/A counts where child runs were recorded;
2. validates: at each recording's stored settings the recomputed counts must equal the stored ones,
   else it names every difference and exits with status 2 before sweeping anything. Two kinds of
   difference are reported but tolerated unless ``--strict``: "knife-edge" (a scaled +x% count at
   threshold x that differs only through the pairs whose run levels are equal, so that their ratio
   sits exactly on 1 + threshold and floating-point rounding decides the verdict; session 1's +3%)
   and "not recomputable" (a stored count whose runs were not recorded: session 1's cross-process);
3. sweeps the practical threshold, alpha and (adaptive gate) clock tolerance, for the raw, anchored
   and adaptive gates and for "per-kind" gating (raw times for kernels whose automatic anchor is a
   copy, i.e. memory-bound, as with ``anchor=None``; kernel/anchor ratios for matmul-anchored,
   compute-bound ones), and writes a markdown report: per gate and setting, the all-pairs A/A rate
   and the scaled +5% power of every session and kernel with the worst case over sessions; which
   settings meet both targets (A/A <= 1%, +5% >= 95%) in every session for every kernel; and a
   selection / hold-out check: the setting is picked on the selection sessions only and then
   reported on the held-out session.

Usage::

    python3 scripts/perf_gate_sweep.py [--out REPORT.md] [[LABEL=]RECORDING.json[.gz] ...]
        [--thresholds 0.015,0.02,0.025,0.0275,0.03] [--alphas 1e-3,1e-4] [--tolerances 0.015]
        [--select s2,s3] [--holdout s4]

Without recordings it reads the four H200 sessions of 2026-11-22 (s1..s4; s1 has raw runs only, so
it informs the raw gate only). Without ``--out`` the report goes to stdout. About 10 s on one core.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from scipy import stats as sps  # noqa: E402

from pytest_pipecheck.config import PipecheckConfig  # noqa: E402
from pytest_pipecheck.perf.stats import (  # noqa: E402
    DEFAULT_CLOCK_TOLERANCE,
    RateEstimate,
    Samples,
    _gate_rows,  # the vectorised gate resample_rates applies; used for the cross-process pairs
    compare,
    resample_rates,
)

RESULTS = ROOT / "benchmarks" / "results"
DEFAULT_RECORDINGS = (
    f"s1={RESULTS / '2026-11-22-h200' / 'perf_gate_rates.json'}",
    f"s2={RESULTS / '2026-11-22-h200' / 'perf_gate_rates-run2.json.gz'}",
    f"s3={RESULTS / '2026-11-22-h200-session3' / 'perf_gate_rates.json.gz'}",
    f"s4={RESULTS / '2026-11-22-h200-session4' / 'perf_gate_rates.json.gz'}",
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
    """Decode a recording the way ``perf_gate_rates.offline_families`` reads it (session 1: raw only)."""
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
                regressed, _ = _gate_rows(mode, base, cand, base_a, cand_a, threshold=threshold, alpha=alpha,
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


# --------------------------------------------------------------------------- sweep and report


@dataclass
class Row:
    setting: Setting
    fam: str
    cells: dict[str, Cell | None]  # session label -> cell


def sweep(rates: Rates, settings: Sequence[Setting], families: Sequence[str], slowdown: float) -> list[Row]:
    return [Row(st, fam, {label: rates.cell(label, fam, st, slowdown) for label in rates.sessions})
            for st in settings for fam in families]


def shipped_default() -> Setting:
    """The plugin's default gate (``PipecheckConfig``: perf_anchor_mode, perf_threshold, perf_alpha)."""
    cfg = PipecheckConfig()
    gate = "anchored" if cfg.perf_anchor_mode == "always" else "adaptive"
    return Setting(gate, float(cfg.perf_threshold), float(cfg.perf_alpha),
                   DEFAULT_CLOCK_TOLERANCE if gate == "adaptive" else None)


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


def slack(cell: Cell, max_false_alarm: float, min_power: float) -> float:
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


def drift_sd(runs: Sequence[Samples], mode: str) -> float:
    """sd of the log run levels the gate compares (as ``perf_gate_rates.rates`` reports it)."""
    levels = [float(np.median(r.ratios())) if mode == "anchored" else r.median for r in runs]
    return float(np.std(np.log(levels), ddof=1))


def render(rates: Rates, checks: Sequence[Check], rows: Sequence[Row], settings: Sequence[Setting],
           families: Sequence[str], select: Sequence[str], holdout: Sequence[str], args: argparse.Namespace) -> str:
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
    lines.append(f"- Shipped default ({default.label}): "
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
        for lb in labels:
            role = "selection" if lb in select else ("held-out" if lb in holdout else "other")
            for fam in families:
                c = cell_of(chosen, fam, lb)
                if c is None:
                    continue
                cp = "-" if c.cross is None else f"{c.cross[0]}/{c.cross[1]}"
                lines.append(f"| {lb} | {role} | {fam} | {c.mode} | {c.aa.failures}/{c.aa.trials} ({pct(c.aa.rate, 2)}) | "
                             f"{c.power.failures}/{c.power.trials} ({pct(c.power.rate)}) | {cp} | "
                             f"{'yes' if c.meets(maxfa, minp) else '**no**'} |")

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
    return "\n".join(lines) + "\n"


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
    md = render(rates, checks, rows, settings, families, select, holdout, args)
    if args.out:
        Path(args.out).write_text(md)
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
