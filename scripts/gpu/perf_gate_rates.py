"""Measure the perf gate's false-alarm and detection rates on a real GPU: raw, clock-anchored, adaptive.

Usage::

    python3 scripts/gpu/perf_gate_rates.py OUTDIR [--budget SECONDS]
    python3 scripts/gpu/perf_gate_rates.py OUTDIR --offline RECORDED.json[.gz] ... [--tolerances 0.01,0.015]

Writes OUTDIR/perf_gate_rates.json (everything, raw samples included) and OUTDIR/perf_gate_rates.md
(the tables for docs/perf-gate.md), and prints them. Bounded to --budget seconds (default 150) of
work: about two minutes on an H200; each phase is guarded, so one failure leaves the others.

``--offline`` measures nothing: it re-analyses recorded files on the CPU (raw, always-anchored and
adaptive gates, the adaptive one at each clock tolerance, and the synthetic noise models of the drift
in recording s1, docs/validation/2026-11-22-h200-0223/perf_gate_rates-0232.md) into
OUTDIR/perf_gate_offline.{md,json}.

Method (docs/perf-gate.md):

* two kernels calibrated at run time to about 70 us: a memory-bound fp32 add (bytes scale exactly
  with the element count) and a compute-bound bf16 matmul (time scales with K). Each gets the anchor
  check_perf would choose for it from its declared FLOPs and bytes (arithmetic intensity against the
  ridge point of the measured ceilings: a copy for the add, a bf16 matmul for the matmul), sized from
  the ladder to about the kernel's duration;
* 20 rounds; each round takes, for each variant (A twice, then +3%, +5%, +10% more work), one raw run
  (the kernel alone, as the gate timed before anchoring) and one anchored run (kernel and anchor
  interleaved sample by sample), 100 cold-L2 samples each (pytest_pipecheck.perf.timing.measure),
  so slow drift of the GPU hits every variant and both gates alike;
* gates: raw (the raw runs), anchored (the anchored runs, always on kernel/anchor ratios) and
  adaptive (the default: the anchored runs, on the ratios only when the anchor moved beyond the
  clock tolerance, significantly; raw times otherwise). Adaptive needs no runs of its own, so it
  costs no GPU time; its scaled all-pairs rates are also given for each of TOLERANCES;
* A/A per gate: disjoint pairs of A runs (each run used once), all ordered pairs of A runs, and pairs
  of runs taken in 3 different processes (fresh CUDA context, a few seconds apart);
* detection per gate: each slowed run against a different A run; also every A pair with the
  candidate multiplied by exactly 1.03 / 1.05 / 1.10 (a pure slowdown with the real drift);
* settle: the GPU left idle for IDLE_S, then one run with settle_s in SETTLE_VALUES, repeated; each
  run's raw and anchored change against the steady-state A runs, and the gate's verdict on it;
* the serialized pipeline: a Triton GEMM 4096^3 fp16 with num_stages=3 saved as the baseline through
  check_perf after IDLE_S of idle (as in a pytest run, where the first kernel is timed after its
  compile), then num_stages=1 checked against it (must fail) and num_stages=3 again (must pass);
  once with the old gate (anchor=None, settle_s=0) and once with the default (anchor="auto",
  adaptive anchor mode).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.abspath(os.path.join(HERE, "..", "..")))
sys.path.insert(0, os.path.abspath(os.path.join(HERE, "..")))  # perf_rates

SLOWDOWNS = (0.03, 0.05, 0.10)
#: The single-run gate the rate tables are computed at, passed explicitly everywhere (compare's own
#: defaults are the plugin's, which pool baselines and moved to 2.75%; the sweep, scripts/perf_gate_sweep.py,
#: evaluates those from the recorded runs). 3% keeps every recording comparable.
THRESHOLD = 0.03
ALPHA = 0.001
TARGET_US = 70.0
N_SAMPLES = 100
ROUNDS = 20
IDLE_S = 2.0  # host-side idle before an "after idle" run: long enough for the clocks to boost again
SETTLE_VALUES = (0.0, 0.25, 1.0)
SETTLE_REPS = 3
GATES = ("raw", "anchored")  # how runs are taken: the kernel alone, or interleaved with its anchor
# how runs are gated: "adaptive" (the default gate) is computed from the anchored runs, no extra GPU time
ANALYSES = ("raw", "anchored", "adaptive")
TOLERANCES = (0.01, 0.015, 0.02)  # clock tolerances of the adaptive gate's sweep (scaled all pairs)


# --------------------------------------------------------------------------- kernels


def make_add(torch: Any, n: int) -> Any:
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    z = torch.empty(n, device="cuda")
    return lambda: torch.add(x, y, out=z)


def make_matmul(torch: Any, k: int, mn: int = 2048) -> Any:
    a = torch.randn(mn, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, mn, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(mn, mn, device="cuda", dtype=torch.bfloat16)
    return lambda: torch.matmul(a, b, out=c)


FAMILIES: dict[str, tuple[Callable[..., Any], int, int]] = {
    # name: (factory, initial size, rounding granularity)
    "add_fp32": (make_add, 16 * 2**20, 4096),
    "matmul_bf16": (make_matmul, 4096, 64),
}


def declared(name: str, size: int) -> tuple[float, float, str]:
    """(flops, bytes, dtype) a test would declare for the kernel: what the automatic anchor choice sees."""
    if name == "add_fp32":
        return float(size), 12.0 * size, "fp16"
    mn = 2048
    return 2.0 * mn * mn * size, 2.0 * (2 * mn * size + mn * mn), "bf16"


def pick_anchor(name: str, size: int, median_us: float, ceilings: Any) -> tuple[Any, str]:
    from pytest_pipecheck.perf.timing import choose_anchor, size_anchor

    flops, nbytes, dtype = declared(name, size)
    kind, why = choose_anchor(flops, nbytes, ceilings, dtype)
    assert kind is not None
    return size_anchor(kind, median_us, ceilings, dtype), why


def calibrate(torch: Any, name: str) -> dict[str, Any]:
    """Pick the size whose median is about TARGET_US, and the sizes of the slowed variants."""
    from pytest_pipecheck.perf.timing import measure

    factory, size, gran = FAMILIES[name]
    med = TARGET_US
    for _ in range(3):
        med = measure(factory(torch, size), n_samples=20, warmup_s=0.05).median
        size = max(gran, round(size * TARGET_US / med / gran) * gran)
    torch.cuda.empty_cache()
    sizes = {"0": size}
    for s in SLOWDOWNS:
        sizes[str(s)] = round(size * (1 + s) / gran) * gran
    return {"sizes": sizes, "nominal": {k: v / size - 1 for k, v in sizes.items()}, "median_us": med}


def one_run(fn: Any, gate: str, anchor: Any, settle_s: float = 0.0) -> Any:
    """One run of N_SAMPLES as check_perf takes them: raw (no anchor) or anchored."""
    from pytest_pipecheck.perf.timing import measure

    return measure(fn, n_samples=N_SAMPLES, warmup_s=0.05, anchor=anchor if gate == "anchored" else None,
                   settle_s=settle_s)


def encode(s: Any) -> Any:
    """A run as JSON: a list of kernel times, or {"kernel": [...], "anchor": [...]}."""
    kernel = [round(t, 3) for t in s.times_us]
    if s.anchor_us is None:
        return kernel
    return {"kernel": kernel, "anchor": [round(t, 3) for t in s.anchor_us]}


def decode(run: Any) -> Any:
    from pytest_pipecheck.perf.stats import Samples

    if isinstance(run, dict):
        return Samples.of(run["kernel"], anchor_us=run["anchor"], anchor={"kind": "run"})
    return Samples.of(run)


def take_runs(torch: Any, name: str, sizes: dict[str, int], anchor: Any, rounds: int,
              deadline: float) -> dict[str, dict[str, list[Any]]]:
    """Round-robin runs: per round, per variant, one raw run then one anchored run (A twice)."""
    factory = FAMILIES[name][0]
    fns = {k: factory(torch, v) for k, v in sizes.items()}
    runs: dict[str, dict[str, list[Any]]] = {g: {k: [] for k in sizes} for g in GATES}
    order = ["0", "0", *[str(s) for s in SLOWDOWNS]]  # two A runs per round: `rounds` disjoint A/A pairs
    for _r in range(rounds):
        if time.monotonic() > deadline:
            break
        for k in order:
            for gate in GATES:
                runs[gate][k].append(encode(one_run(fns[k], gate, anchor)))
    del fns
    torch.cuda.empty_cache()
    return runs


def settle_runs(torch: Any, name: str, size: int, anchor: Any, deadline: float) -> list[dict[str, Any]]:
    """After IDLE_S of idle, one anchored run per settle_s value (raw times come with it), repeated."""
    fn = FAMILIES[name][0](torch, size)
    out: list[dict[str, Any]] = []
    for rep in range(SETTLE_REPS):
        for settle in SETTLE_VALUES:
            if time.monotonic() + IDLE_S + settle + 1 > deadline:
                return out
            torch.cuda.synchronize()
            time.sleep(IDLE_S)
            out.append({"settle_s": settle, "rep": rep, "run": encode(one_run(fn, "anchored", anchor, settle))})
    return out


# --------------------------------------------------------------------------- Triton GEMM


def triton_gemm(torch: Any, stages: int, size: int = 4096) -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def gemm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
        pid = tl.program_id(0)
        pid_ms = tl.cdiv(M, BM)
        pid_ns = tl.cdiv(N, BN)
        per_group = GROUP * pid_ns
        first_m = (pid // per_group) * GROUP
        group_m = tl.minimum(pid_ms - first_m, GROUP)
        pid_m = first_m + ((pid % per_group) % group_m)
        pid_n = (pid % per_group) // group_m
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        a = a_ptr + rm[:, None] * sam + rk[None, :] * sak
        b = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):  # the pipelined loop: num_stages tiles in flight
            x = tl.load(a, mask=rk[None, :] < K - k * BK, other=0.0)
            y = tl.load(b, mask=rk[:, None] < K - k * BK, other=0.0)
            acc = tl.dot(x, y, acc)
            a += BK * sak
            b += BK * sbk
        mask = (rm[:, None] < M) & (rn[None, :] < N)
        tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(tl.float16), mask=mask)

    a = torch.randn(size, size, device="cuda", dtype=torch.float16)
    b = torch.randn(size, size, device="cuda", dtype=torch.float16)
    c = torch.empty(size, size, device="cuda", dtype=torch.float16)
    bm = bn = 128
    grid = (triton.cdiv(size, bm) * triton.cdiv(size, bn),)

    def run() -> None:
        gemm_kernel[grid](a, b, c, size, size, size, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                          c.stride(0), c.stride(1), BM=bm, BN=bn, BK=64, GROUP=8, num_warps=4, num_stages=stages)

    run()
    torch.cuda.synchronize()
    ref = a.float() @ b.float()
    err = (c.float() - ref).abs().max().item() / ref.abs().max().item()
    if err > 1e-2:
        raise RuntimeError(f"triton gemm stages={stages} is wrong: max rel err {err:.3g}")
    return run


def serialized_pipeline(torch: Any, outdir: str, gate: str) -> dict[str, Any]:
    """num_stages=3 saved as the baseline through check_perf after IDLE_S of idle; stages=1 must fail,
    stages=3 must pass. ``gate="raw"``: anchor=None, settle_s=0 (the gate before anchoring);
    ``"anchored"``: the defaults (anchor="auto" picks an fp16 matmul, settle_s=DEFAULT_SETTLE_S, the
    per-kind anchor mode gates a matmul-anchored kernel on its kernel/anchor ratios, and the saved
    baseline pools perf_baseline_runs runs)."""
    from pytest_pipecheck.config import PipecheckConfig
    from pytest_pipecheck.device import detect_tier
    from pytest_pipecheck.fixture import Pipecheck
    from pytest_pipecheck.results import PipecheckFailure

    tier = detect_tier("auto")
    size = 4096
    flops = 2.0 * size**3
    bdir = tempfile.mkdtemp(prefix=f"pipecheck-baselines-{gate}-", dir=outdir)
    node = "scripts/gpu/perf_gate_rates.py::triton_gemm_4096"
    out: dict[str, Any] = {"baseline_dir": bdir, "size": size, "gate": gate}
    kw: dict[str, Any] = {"anchor": None, "settle_s": 0.0} if gate == "raw" else {}

    def pc(save: bool) -> Pipecheck:
        cfg = dataclasses.replace(PipecheckConfig(), baseline_dir=bdir, baseline_save=save)
        return Pipecheck(node, cfg, tier, run_seed=0)

    def check(label: str, stages: int, save: bool) -> None:
        fn = triton_gemm(torch, stages, size)
        torch.cuda.synchronize()
        time.sleep(IDLE_S if label == "baseline_stages3" else 0.0)
        try:
            r = pc(save).check_perf(fn, flops=flops, n_samples=50, **kw)
            out[label] = {"verdict": r.verdict.value, "summary": r.summary, "caught": False,
                          "details": {k: r.details.get(k) for k in ("median_us", "change", "raw_change", "anchored",
                                                                     "anchored_change", "anchor_change", "decision",
                                                                     "p_value", "anchor")}}
        except PipecheckFailure as exc:
            out[label] = {"verdict": "fail", "summary": str(exc).splitlines()[0], "caught": True,
                          "message": str(exc)}

    check("baseline_stages3", 3, True)
    check("candidate_stages1", 1, False)
    check("rerun_stages3", 3, False)
    return out


# --------------------------------------------------------------------------- analysis


def plugin_defaults() -> dict[str, Any]:
    """The gate check_perf applies by default (the serialized-pipeline check runs through it)."""
    from pytest_pipecheck.config import PipecheckConfig

    cfg = PipecheckConfig()
    return {"anchor_mode": cfg.perf_anchor_mode, "threshold": cfg.perf_threshold, "alpha": cfg.perf_alpha,
            "baseline_runs": cfg.perf_baseline_runs}


def _compare(mode: str, base: Any, cand: Any, tolerance: float | None = None) -> Any:
    """compare() under the gate ``mode``: raw times, always anchored, or adaptive, at THRESHOLD and ALPHA."""
    from pytest_pipecheck.perf.stats import DEFAULT_CLOCK_TOLERANCE, compare

    if mode == "raw":
        return compare(base, cand, anchored=False, threshold=THRESHOLD, alpha=ALPHA)
    if mode == "anchored":
        return compare(base, cand, anchor_mode="always", threshold=THRESHOLD, alpha=ALPHA)
    return compare(base, cand, anchor_mode="adaptive", threshold=THRESHOLD, alpha=ALPHA,
                   clock_tolerance=DEFAULT_CLOCK_TOLERANCE if tolerance is None else tolerance)


def rates(runs: dict[str, list[Any]], child_runs: list[list[Any]], mode: str = "",
          tolerances: tuple[float, ...] = TOLERANCES) -> dict[str, Any]:
    """The rates of one gate from one set of runs (raw kernel times, or kernel+anchor pairs).

    ``mode``: "raw", "anchored" (always on kernel/anchor ratios) or "adaptive" (on the ratios only
    when the anchor shows the clock moved; computed from the anchored runs, so it costs no GPU time);
    empty: "anchored" for anchored runs, else "raw". For "adaptive", ``tolerances`` adds the scaled
    all-pairs rates at each clock tolerance.
    """
    import numpy as np
    from perf_rates import resample_rates

    from pytest_pipecheck.perf.stats import DEFAULT_CLOCK_TOLERANCE

    a_runs = [decode(r) for r in runs["0"]]
    anchored = a_runs[0].anchored
    mode = mode or ("anchored" if anchored else "raw")
    if mode != "raw" and not anchored:
        raise ValueError(f"the {mode} gate needs anchored runs")

    def level(s: Any) -> float:  # what the gate compares: the median time, or the median ratio
        return float(np.median(s.ratios())) if mode == "anchored" else s.median

    out: dict[str, Any] = {"a_runs": len(a_runs), "anchored": anchored, "mode": mode,
                           "slowed_runs": {k: len(v) for k, v in runs.items() if k != "0"}}
    out["a_median_us"] = float(np.median([s.median for s in a_runs]))
    if anchored:
        out["anchor_median_us"] = float(np.median([s.anchor_median for s in a_runs]))
    levels = [level(s) for s in a_runs]
    out["run_median_spread"] = {
        "sd_of_log_run_medians": float(np.std(np.log(levels), ddof=1)),
        "sd_of_log_raw_run_medians": float(np.std(np.log([s.median for s in a_runs]), ddof=1)),
        "min_over_max": float(min(levels) / max(levels)),
    }
    if anchored:
        out["run_median_spread"]["sd_of_log_anchor_run_medians"] = float(
            np.std(np.log([s.anchor_median for s in a_runs]), ddof=1))
    # A/A on disjoint pairs: each run used once, so the comparisons are independent
    disjoint = [_compare(mode, a_runs[i], a_runs[i + 1]) for i in range(0, len(a_runs) - 1, 2)]
    out["aa_disjoint"] = {"comparisons": len(disjoint), "failures": sum(c.regressed for c in disjoint),
                          "changes": [round(c.change, 5) for c in disjoint]}
    allpairs = resample_rates(a_runs, slowdowns=(0.0, *SLOWDOWNS), mode=mode, threshold=THRESHOLD, alpha=ALPHA)
    out["aa_all_pairs"] = allpairs[0.0].to_json()
    out["scaled_all_pairs"] = {str(s): allpairs[s].to_json() for s in SLOWDOWNS}
    if mode == "adaptive":
        out["clock_tolerance"] = DEFAULT_CLOCK_TOLERANCE
        out["tolerance_sweep"] = {
            str(t): {str(s): e.to_json() for s, e in resample_rates(
                a_runs, slowdowns=(0.0, *SLOWDOWNS), mode=mode, clock_tolerance=t, threshold=THRESHOLD,
                alpha=ALPHA).items()}
            for t in tolerances}
    if len(child_runs) >= 2:
        kids = [[decode(x) for x in runs_of_one] for runs_of_one in child_runs]

        def cross_pairs(tolerance: float | None = None) -> list[Any]:
            return [_compare(mode, x, y, tolerance) for i, ri in enumerate(kids) for j, rj in enumerate(kids)
                    if i != j for x in ri for y in rj]

        cross = cross_pairs()
        out["aa_cross_process"] = {"processes": len(child_runs), "comparisons": len(cross),
                                   "failures": sum(c.regressed for c in cross),
                                   "max_change": max(abs(c.change) for c in cross)}
        if mode == "adaptive":
            for t in tolerances:
                out["tolerance_sweep"][str(t)]["cross_process"] = {
                    "comparisons": len(cross), "failures": sum(c.regressed for c in cross_pairs(t))}
    a_level = float(np.median(levels))
    detection = {}
    for s in SLOWDOWNS:
        slowed = [decode(r) for r in runs.get(str(s), [])]
        comps = [_compare(mode, a_runs[(i + 1) % len(a_runs)], r) for i, r in enumerate(slowed)]
        true = float(np.median([level(r) for r in slowed]) / a_level - 1) if slowed else float("nan")
        detection[str(s)] = {"comparisons": len(comps), "caught": sum(c.regressed for c in comps),
                             "rate": sum(c.regressed for c in comps) / max(1, len(comps)),
                             "true_slowdown": true, "changes": [round(c.change, 5) for c in comps],
                             "gated_anchored": sum(c.anchored for c in comps)}
    out["detection_real_work"] = detection
    return out


def settle_analysis(settle: list[dict[str, Any]], a_runs: list[Any]) -> dict[str, Any]:
    """Each after-idle run against the steady A runs, raw and anchored, per settle_s value."""
    import numpy as np

    steady = [decode(r) for r in a_runs]
    raw_ref = float(np.median([s.median for s in steady]))
    ratio_ref = float(np.median([np.median(s.ratios()) for s in steady]))
    out: dict[str, Any] = {}
    for value in SETTLE_VALUES:
        rows = [decode(x["run"]) for x in settle if x["settle_s"] == value]
        if not rows:
            continue
        raw = [r.median / raw_ref - 1 for r in rows]
        anch = [float(np.median(r.ratios())) / ratio_ref - 1 for r in rows]

        # the gate with the after-idle run as the baseline and a steady run as the candidate (the pytest
        # case: baseline right after a compile), and the other way round
        def fails(mode: str, rows: list[Any] = rows) -> int:
            return sum(_compare(mode, r, steady[i % len(steady)]).regressed
                       or _compare(mode, steady[i % len(steady)], r).regressed for i, r in enumerate(rows))

        out[str(value)] = {"runs": len(rows), "raw_changes": [round(x, 5) for x in raw],
                           "anchored_changes": [round(x, 5) for x in anch],
                           "gate_fails_raw": fails("raw"), "gate_fails_anchored": fails("anchored"),
                           "gate_fails_adaptive": fails("adaptive")}
    return out


# --------------------------------------------------------------------------- driver


def child_main(spec_path: str, out_path: str) -> None:
    """A fresh process: per family, 3 raw and 3 anchored runs of the A variant."""
    import torch

    from pytest_pipecheck.perf.timing import Anchor

    with open(spec_path) as fh:
        spec = json.load(fh)
    out: dict[str, dict[str, list[Any]]] = {}
    for fam, item in spec.items():
        fn = FAMILIES[fam][0](torch, item["size"])
        anchor = Anchor.from_definition(item["anchor"])
        out[fam] = {g: [encode(one_run(fn, g, anchor)) for _ in range(3)] for g in GATES}
        del fn
        torch.cuda.empty_cache()
    with open(out_path, "w") as fh:
        json.dump(out, fh)


def cross_process(spec: dict[str, Any], outdir: str, deadline: float, procs: int = 3) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    spec_path = os.path.join(outdir, "child-spec.json")
    with open(spec_path, "w") as fh:
        json.dump(spec, fh)
    for p in range(procs):
        remaining = deadline - time.monotonic()
        if remaining < 15:
            break
        path = os.path.join(outdir, f"child-{p}.json")
        cmd = [sys.executable, os.path.abspath(__file__), outdir, "--child", spec_path, path]
        try:
            subprocess.run(cmd, timeout=min(60.0, remaining), check=True, capture_output=True)
            with open(path) as fh:
                out.append(json.load(fh))
            os.unlink(path)
        except Exception as exc:  # a child failure loses only the cross-process rate
            print(f"  child {p} failed: {exc}", file=sys.stderr)
    os.unlink(spec_path)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--budget", type=float, default=150.0, help="seconds of work before phases are cut short")
    ap.add_argument("--child", nargs=2, metavar=("SPEC", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--offline", nargs="+", metavar="JSON",
                    help="re-analyse recorded perf_gate_rates.json[.gz] files instead of measuring (no GPU): "
                         "raw, anchored and adaptive gates, and the synthetic models of the 02:32 drift")
    ap.add_argument("--tolerances", default=",".join(str(t) for t in (0.005, *TOLERANCES, 0.025, 0.03)),
                    help="clock tolerances of the adaptive gate for --offline (comma-separated fractions)")
    args = ap.parse_args()
    if args.child:
        child_main(args.child[0], args.child[1])
        return 0
    if args.offline:
        return offline_main(args.outdir, args.offline, tuple(float(t) for t in args.tolerances.split(",")))

    t0 = time.monotonic()
    deadline = t0 + args.budget
    os.makedirs(args.outdir, exist_ok=True)
    import torch

    from pytest_pipecheck.perf.stats import DEFAULT_CLOCK_TOLERANCE
    from pytest_pipecheck.perf.timing import DEFAULT_SETTLE_S, measure, measure_ceilings

    result: dict[str, Any] = {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "gpu": torch.cuda.get_device_name(0),
        "sm_count": torch.cuda.get_device_properties(0).multi_processor_count,
        "l2_bytes": getattr(torch.cuda.get_device_properties(0), "L2_cache_size", None),
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "gate": {"threshold": THRESHOLD, "alpha": ALPHA, "samples_per_run": N_SAMPLES, "rounds": ROUNDS,
                 "idle_s": IDLE_S, "settle_values": list(SETTLE_VALUES), "default_settle_s": DEFAULT_SETTLE_S,
                 "clock_tolerance": DEFAULT_CLOCK_TOLERANCE, "anchor_mode": "adaptive",
                 "plugin_defaults": plugin_defaults()},
        "errors": {},
    }
    try:
        import triton

        result["triton"] = triton.__version__
    except Exception:
        result["triton"] = None

    def phase(name: str, fn: Any) -> Any:
        t = time.monotonic()
        try:
            value = fn()
            result.setdefault("phase_seconds", {})[name] = round(time.monotonic() - t, 1)
            return value
        except Exception as exc:
            result["errors"][name] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"
            print(f"phase {name} failed: {exc}", file=sys.stderr)
            return None

    ceil = phase("ceilings", lambda: measure_ceilings(0))
    if ceil is not None:
        result["ceilings"] = ceil.to_json()

    def modes() -> dict[str, Any]:
        # hot vs cold and graph vs eager, on a small add (fits in L2) and a tiny one
        small = make_add(torch, 2 * 2**20)
        tiny = make_add(torch, 64 * 1024)
        return {
            "add_8MB_cold_us": measure(small, n_samples=50).median,
            "add_8MB_hot_us": measure(small, n_samples=50, hot_cache=True).median,
            "add_256KB_cold_eager_us": measure(tiny, n_samples=50).median,
            "add_256KB_cold_graph_us": measure(tiny, n_samples=50, graph=True).median,
            "add_256KB_hot_graph_us": measure(tiny, n_samples=50, graph=True, hot_cache=True).median,
        }

    result["modes"] = phase("modes", modes)

    result["families"] = {}
    share = {"add_fp32": 0.17, "matmul_bf16": 0.17}  # of the budget for the rounds; the rest below
    child_spec: dict[str, Any] = {}
    anchors: dict[str, Any] = {}
    for fam in FAMILIES:
        if ceil is None:
            break
        fam_deadline = min(deadline, time.monotonic() + share[fam] * args.budget)
        cal = phase(f"{fam}:calibrate", lambda fam=fam: calibrate(torch, fam))
        if cal is None:
            continue
        picked = phase(f"{fam}:anchor", lambda fam=fam, cal=cal: pick_anchor(fam, cal["sizes"]["0"],
                                                                             cal["median_us"], ceil))
        if picked is None:
            continue
        anchor, why = picked
        anchors[fam] = anchor
        child_spec[fam] = {"size": cal["sizes"]["0"], "anchor": anchor.definition()}
        runs = phase(f"{fam}:runs", lambda fam=fam, cal=cal, a=anchor, d=fam_deadline:
                     take_runs(torch, fam, cal["sizes"], a, ROUNDS, d))
        result["families"][fam] = {"calibration": cal, "anchor": anchor.definition(), "anchor_choice": why,
                                   "raw_runs_us": runs}

    children: list[dict[str, Any]] = phase("cross_process", lambda: cross_process(child_spec, args.outdir,
                                                            min(deadline, time.monotonic() + 35))) or []

    for fam, data in result["families"].items():
        runs = data.get("raw_runs_us")
        if not runs:
            continue
        data["rates"] = {}
        for mode in ANALYSES:
            gate = "raw" if mode == "raw" else "anchored"  # adaptive: decided from the anchored runs
            kids = [c[fam][gate] for c in children if fam in c]
            data["rates"][mode] = phase(f"{fam}:{mode}:analysis",
                                        lambda r=runs[gate], k=kids, m=mode: rates(r, k, m))
        data["children_runs_us"] = [c.get(fam) for c in children]

    # settle after idle: the compute-bound family, where the clock moves
    fam = "matmul_bf16"
    if fam in anchors and result["families"][fam].get("raw_runs_us"):
        size = result["families"][fam]["calibration"]["sizes"]["0"]
        settle = phase("settle_runs", lambda: settle_runs(torch, fam, size, anchors[fam],
                                                          min(deadline - 25, time.monotonic() + 30)))
        if settle:
            result["settle"] = {"family": fam, "runs_us": settle, "analysis": phase(
                "settle_analysis", lambda: settle_analysis(settle, result["families"][fam]["raw_runs_us"]["anchored"]["0"]))}

    if time.monotonic() < deadline + 30:  # the GEMM check matters most; allow it a little overrun
        result["serialized_pipeline"] = {
            gate: phase(f"serialized_pipeline:{gate}", lambda gate=gate: serialized_pipeline(torch, args.outdir, gate))
            for gate in GATES}
    result["total_seconds"] = round(time.monotonic() - t0, 1)

    with open(os.path.join(args.outdir, "perf_gate_rates.json"), "w") as fh:
        json.dump(result, fh, indent=2, sort_keys=True)
    md = render_markdown(result)
    with open(os.path.join(args.outdir, "perf_gate_rates.md"), "w") as fh:
        fh.write(md)
    print(md)
    return 0 if not result["errors"] else 1


def rates_table(families: dict[str, Any]) -> list[str]:
    """The rates table: one row per kernel and gate (raw, anchored, adaptive)."""
    lines = ["| kernel | gate | A median us | run drift (sd log) | A/A disjoint fails | A/A all pairs | "
             "A/A cross-process | +3% | +5% | +10% | scaled +3/+5/+10% (all pairs) |", "|" + "---|" * 11]
    for fam, data in families.items():
        for gate, rt in (data.get("rates") or {}).items():
            if not rt:
                lines.append(f"| {fam} | {gate} | failed: see errors | | | | | | | | |")
                continue
            d = rt["aa_disjoint"]
            ap = rt["aa_all_pairs"]
            cp = rt.get("aa_cross_process")
            cps = f"{cp['failures']}/{cp['comparisons']} (max {cp['max_change']:+.1%})" if cp else "-"
            det = [f"{v['caught']}/{v['comparisons']} (true {v['true_slowdown']:+.1%})" if v["comparisons"] else "-"
                   for v in rt["detection_real_work"].values()]
            sc = "/".join(f"{v['rate']:.0%}" for v in rt["scaled_all_pairs"].values())
            med = f"{rt['a_median_us']:.1f}"
            if rt.get("anchor_median_us"):
                med += f" (anchor {rt['anchor_median_us']:.1f})"
            spread = rt["run_median_spread"]
            drift = f"{spread['sd_of_log_run_medians']:.4f}"
            label = gate
            if gate == "adaptive":
                drift = f"raw {spread['sd_of_log_raw_run_medians']:.4f}, anchor {spread['sd_of_log_anchor_run_medians']:.4f}"
                label = (f"adaptive (tolerance {rt['clock_tolerance']:.1%}; ratios in "
                         f"{ap.get('anchored_share', 0):.0%} of A/A pairs)")
            lines.append(f"| {fam} | {label} | {med} | {drift} | {d['failures']}/{d['comparisons']} | "
                         f"{ap['failures']}/{ap['trials']} | {cps} | " + " | ".join(det) + f" | {sc} |")
    return lines


def sweep_table(families: dict[str, Any]) -> list[str]:
    """The adaptive gate at several clock tolerances (all ordered pairs of A runs, scaled slowdowns)."""
    rows = []
    for fam, data in families.items():
        rt = (data.get("rates") or {}).get("adaptive")
        if not rt or not rt.get("tolerance_sweep"):
            continue
        for tol, by in rt["tolerance_sweep"].items():
            cells = [f"{v['failures']}/{v['trials']} ({v['rate']:.1%})" for k, v in by.items() if k != "cross_process"]
            share = by["0.0"].get("anchored_share", 0.0)
            cp = by.get("cross_process")
            cps = f"{cp['failures']}/{cp['comparisons']}" if cp else "-"
            rows.append(f"| {fam} | {float(tol):.1%} | {share:.0%} | {cps} | " + " | ".join(cells) + " |")
    if not rows:
        return []
    return ["| kernel | clock tolerance | gated on ratios (A/A) | A/A cross-process | A/A all pairs | +3% | +5% | "
            "+10% |", "|---|---|---|---|---|---|---|---|", *rows]


def render_markdown(r: dict[str, Any]) -> str:
    g = r["gate"]
    lines = [
        "# perf gate rates: raw vs clock-anchored vs adaptive",
        "",
        f"- GPU: {r['gpu']} ({r['sm_count']} SMs, L2 {r.get('l2_bytes')} B); torch {r['torch']}, "
        f"CUDA {r['cuda']}, Triton {r.get('triton')}",
        f"- date: {r['date']}; command: `{r['command']}`; total {r.get('total_seconds')} s",
        f"- gate: threshold {g['threshold']:.0%}, alpha {g['alpha']}, {g['samples_per_run']} cold-L2 samples per "
        f"run, {g['rounds']} rounds; raw = kernel medians, anchored = median kernel/anchor ratio per sample, "
        f"adaptive = anchored only when the anchor moved by more than {g.get('clock_tolerance', 0):.1%} "
        "(two-sided p < alpha), raw otherwise (computed from the anchored runs)",
    ]
    if "ceilings" in r:
        c = r["ceilings"]
        lines.append(f"- measured ceilings: fp16 {c['matmul_tflops'].get('fp16', 0):.0f} TFLOP/s, "
                     f"bf16 {c['matmul_tflops'].get('bf16', 0):.0f} TFLOP/s, copy {c['copy_gbps']:.0f} GB/s")
    if r.get("modes"):
        lines.append("- modes (median us): " + ", ".join(f"{k} {v:.2f}" for k, v in r["modes"].items()))
    for fam, data in r.get("families", {}).items():
        anchor = data.get("anchor", {})
        lines.append(f"- {fam}: anchor {anchor.get('label')} ({data.get('anchor_choice')})")
    lines += ["", *rates_table(r.get("families", {}))]
    sweep = sweep_table(r.get("families", {}))
    if sweep:
        lines += ["", "Adaptive gate by clock tolerance (all ordered pairs of A runs; +x% = candidate kernel "
                  "times scaled by 1+x, anchor untouched):", "", *sweep]
    st = r.get("settle")
    if st and st.get("analysis"):
        lines += ["", f"Settle ({st['family']}; after {g['idle_s']:.0f} s idle, one run per settle_s, change of its "
                  "median against the steady A runs; gate fails = either direction against a steady run):", "",
                  "| settle_s | runs | raw change | anchored change | gate fails raw | gate fails anchored | "
                  "gate fails adaptive |", "|---|---|---|---|---|---|---|"]
        for value, a in st["analysis"].items():
            adaptive = a.get("gate_fails_adaptive")
            lines.append(f"| {value} | {a['runs']} | " + ", ".join(f"{x:+.1%}" for x in a["raw_changes"]) + " | "
                         + ", ".join(f"{x:+.1%}" for x in a["anchored_changes"])
                         + f" | {a['gate_fails_raw']}/{a['runs']} | {a['gate_fails_anchored']}/{a['runs']} | "
                         + (f"{adaptive}/{a['runs']} |" if adaptive is not None else "- |"))
    for gate, sp in (r.get("serialized_pipeline") or {}).items():
        if not sp:
            continue
        pd = g.get("plugin_defaults")
        mode_text = (f"{pd['anchor_mode']} anchor mode, threshold {pd['threshold'] * 100:g}%, baselines pooled from "
                     f"{pd['baseline_runs']} runs" if pd else "adaptive anchor mode")
        how = ("anchor=None, settle_s=0: the gate before anchoring" if gate == "raw"
               else f"defaults: anchor='auto', {mode_text}, settle_s={g.get('default_settle_s')}")
        lines += ["", f"Serialized pipeline, {'raw' if gate == 'raw' else 'default'} gate ({how}; Triton GEMM 4096^3 fp16, BM=BN=128, BK=64, "
                  f"4 warps; baseline taken after {g['idle_s']:.0f} s idle):", ""]
        for label, title in (("baseline_stages3", "baseline num_stages=3"), ("candidate_stages1", "candidate num_stages=1"),
                             ("rerun_stages3", "rerun num_stages=3")):
            item = sp.get(label)
            if not item:
                lines.append(f"- {title}: not run")
                continue
            tag = item["verdict"]
            if label == "candidate_stages1":
                tag = "CAUGHT" if item.get("caught") else "NOT CAUGHT"
            lines.append(f"- {title}: {tag}: {item['summary']}")
    if r["errors"]:
        lines += ["", "Errors:", ""] + [f"- {k}: {v.splitlines()[0]}" for k, v in r["errors"].items()]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- offline re-analysis

# The synthetic model of the compute-bound drift of recording s1 (perf_gate_rates-0232 in
# docs/validation/2026-11-22-h200-0223/; tests/unit/test_perf_stats.py: COMPUTE): a shared clock factor
# of sd 0.0138 per run, 0.3% per sample, 0.0009 of the kernel's own. The second variant adds the
# anchor's own run-to-run drift of recording s2 (perf_gate_rates-0318; sd of the log anchor run medians
# of the bf16 matmul anchor while the clock held: 0.0056).
DRIFT_0232_MODELS = {
    "02:32 drift (clock sd 0.0138)": {"drift": 0.0009, "clock_drift": 0.0138, "clock_jitter": 0.003},
    "02:32 drift + anchor's own drift 0.0056": {"drift": 0.0009, "clock_drift": 0.0138, "clock_jitter": 0.003,
                                                    "anchor_drift": 0.0056},
}
SYNTH_TRIALS = 2000
SYNTH_SEED = 5


def load_recording(path: str) -> dict[str, Any]:
    """A perf_gate_rates.json (or .json.gz) as recorded on the GPU."""
    import gzip

    opener: Any = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def offline_families(recording: dict[str, Any], tolerances: tuple[float, ...]) -> dict[str, Any]:
    """Recompute every gate's rates from a recording's raw samples (no GPU).

    A recording with raw runs only (no anchors, as at 02:32) gives the raw gate only.
    """
    out: dict[str, Any] = {}
    for fam, data in recording.get("families", {}).items():
        runs = data.get("raw_runs_us") or {}
        if "0" in runs:  # the first recording: raw runs only, not split by gate
            runs = {"raw": runs}
        children = [c for c in data.get("children_runs_us") or [] if c]
        fam_out: dict[str, Any] = {"anchor": data.get("anchor"), "rates": {}}
        for mode in ANALYSES:
            gate = "raw" if mode == "raw" else "anchored"
            if not runs.get(gate):
                continue
            kids = [c[gate] for c in children if gate in c]
            fam_out["rates"][mode] = rates(runs[gate], kids, mode, tolerances)
        out[fam] = fam_out
    return out


def synthetic(tolerances: tuple[float, ...]) -> dict[str, Any]:
    """Raw, anchored and adaptive (at each tolerance) rates under the noise models of the 02:32 drift."""
    from perf_rates import NoiseModel, simulate_rates

    out: dict[str, Any] = {}
    slowdowns = (0.0, *SLOWDOWNS)
    for name, params in DRIFT_0232_MODELS.items():
        model = NoiseModel(**params)
        rows: dict[str, Any] = {}
        for mode in ("raw", "anchored"):
            rows[mode] = {str(s): e.to_json() for s, e in simulate_rates(
                model, slowdowns=slowdowns, trials=SYNTH_TRIALS, seed=SYNTH_SEED, mode=mode).items()}
        for t in tolerances:
            rows[f"adaptive {t:.1%}"] = {str(s): e.to_json() for s, e in simulate_rates(
                model, slowdowns=slowdowns, trials=SYNTH_TRIALS, seed=SYNTH_SEED, mode="adaptive",
                clock_tolerance=t).items()}
        out[name] = {"params": params, "trials": SYNTH_TRIALS, "seed": SYNTH_SEED, "gates": rows}
    return out


def offline_main(outdir: str, paths: list[str], tolerances: tuple[float, ...]) -> int:
    """Re-analyse recorded samples under the raw, anchored and adaptive gates; no GPU, no new timing."""
    result: dict[str, Any] = {"command": " ".join([os.path.basename(sys.executable), *sys.argv]),
                              "tolerances": list(tolerances), "recordings": {}}
    lines = ["# perf gate rates, re-analysed offline from recorded samples (no new GPU measurement)", "",
             f"command: `{result['command']}`"]
    for path in paths:
        rec = load_recording(path)
        fams = offline_families(rec, tolerances)
        name = os.path.basename(path)
        result["recordings"][name] = {"gpu": rec.get("gpu"), "date": rec.get("date"), "families": fams}
        lines += ["", f"## {name} ({rec.get('gpu')}, recorded {rec.get('date')})", "", *rates_table(fams)]
        sweep = sweep_table(fams)
        if sweep:
            lines += ["", "Adaptive gate by clock tolerance (all ordered pairs of A runs):", "", *sweep]
    result["synthetic"] = synthetic(tolerances)
    lines += ["", f"## Synthetic models of the 02:32 drift ({SYNTH_TRIALS} trials of 100 vs 100 samples, seed {SYNTH_SEED})", "",
              "| model | gate | A/A | +3% | +5% | +10% |", "|---|---|---|---|---|---|"]
    for name, item in result["synthetic"].items():
        for gate, by in item["gates"].items():
            cells = [f"{v['failures']}/{v['trials']} ({v['rate']:.1%})" for v in by.values()]
            lines.append(f"| {name} | {gate} | " + " | ".join(cells) + " |")
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "perf_gate_offline.json"), "w") as fh:
        json.dump(result, fh, indent=2, sort_keys=True)
    md = "\n".join(lines) + "\n"
    with open(os.path.join(outdir, "perf_gate_offline.md"), "w") as fh:
        fh.write(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
