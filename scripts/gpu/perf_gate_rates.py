"""Measure the perf gate's false-alarm and detection rates on a real GPU, and the serialized pipeline.

Usage::

    python3 scripts/gpu/perf_gate_rates.py OUTDIR [--budget SECONDS]

Writes OUTDIR/perf_gate_rates.json (everything) and OUTDIR/perf_gate_rates.md (the tables for
docs/perf-gate.md), and prints a short table. Bounded to --budget seconds (default 200) of work
so it finishes in under 4 minutes on an H100; each phase is guarded, so one failure leaves the others.

Method (docs/perf-gate.md):

* two kernels calibrated at run time to about 70 us: a memory-bound fp32 add (bytes scale exactly
  with the element count) and a compute-bound bf16 matmul (time scales with K);
* 20 rounds of runs of 100 cold-L2 samples each (pytest_pipecheck.perf.timing.measure, as check_perf takes
  them), interleaved round-robin: A twice (baseline size), then the +3%, +5%, +10% work variants, so
  slow drift of the GPU hits every variant alike;
* A/A: disjoint pairs of A runs (each run used once), all ordered pairs of A runs, and pairs of
  runs taken in different processes (fresh CUDA context, a few seconds apart);
* detection: each slowed run against a different A run; also every A pair with the candidate
  multiplied by exactly 1.03 / 1.05 / 1.10 (a pure slowdown with the real drift);
* the serialized pipeline: a Triton GEMM 4096^3 fp16 with num_stages=3 saved as the baseline
  through check_perf, then num_stages=1 checked against it (must fail), and stages=3 again (must pass).
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
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.abspath(os.path.join(HERE, "..", "..")))

SLOWDOWNS = (0.03, 0.05, 0.10)
TARGET_US = 70.0
N_SAMPLES = 100


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


FAMILIES = {
    # name: (factory, initial size, rounding granularity)
    "add_fp32": (make_add, 16 * 2**20, 4096),
    "matmul_bf16": (make_matmul, 4096, 64),
}


def calibrate(torch: Any, name: str) -> dict[str, Any]:
    """Pick the size whose median is about TARGET_US, and the sizes of the slowed variants."""
    from pytest_pipecheck.perf.timing import measure

    factory, size, gran = FAMILIES[name]
    for _ in range(3):
        med = measure(factory(torch, size), n_samples=20, warmup_s=0.05).median
        size = max(gran, round(size * TARGET_US / med / gran) * gran)
    torch.cuda.empty_cache()
    sizes = {"0": size}
    for s in SLOWDOWNS:
        sizes[str(s)] = round(size * (1 + s) / gran) * gran
    return {"sizes": sizes, "nominal": {k: v / size - 1 for k, v in sizes.items()}}


def take_runs(torch: Any, name: str, sizes: dict[str, int], rounds: int, deadline: float) -> dict[str, list[list[float]]]:
    """Round-robin runs: per round one A run and one run of each slowed variant."""
    from pytest_pipecheck.perf.timing import measure

    factory = FAMILIES[name][0]
    fns = {k: factory(torch, v) for k, v in sizes.items()}
    runs: dict[str, list[list[float]]] = {k: [] for k in sizes}
    order = ["0", *[str(s) for s in SLOWDOWNS]]
    for _r in range(rounds):
        if time.monotonic() > deadline:
            break
        for k in order:
            runs[k].append(list(measure(fns[k], n_samples=N_SAMPLES, warmup_s=0.05).times_us))
            if k == "0":
                # two A runs per round: 2 x rounds A runs give `rounds` disjoint A/A pairs
                runs[k].append(list(measure(fns[k], n_samples=N_SAMPLES, warmup_s=0.05).times_us))
    del fns
    torch.cuda.empty_cache()
    return runs


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


def serialized_pipeline(torch: Any, outdir: str) -> dict[str, Any]:
    """num_stages=3 saved as the baseline through check_perf; stages=1 must fail, stages=3 must pass."""
    from pytest_pipecheck.config import PipecheckConfig
    from pytest_pipecheck.device import detect_tier
    from pytest_pipecheck.fixture import Pipecheck
    from pytest_pipecheck.results import PipecheckFailure

    tier = detect_tier("auto")
    size = 4096
    flops = 2.0 * size**3
    bdir = tempfile.mkdtemp(prefix="pipecheck-baselines-", dir=outdir)
    node = "scripts/gpu/perf_gate_rates.py::triton_gemm_4096"
    out: dict[str, Any] = {"baseline_dir": bdir, "size": size}

    def pc(save: bool) -> Pipecheck:
        cfg = dataclasses.replace(PipecheckConfig(), baseline_dir=bdir, baseline_save=save)
        return Pipecheck(node, cfg, tier, run_seed=0)

    r3 = pc(True).check_perf(triton_gemm(torch, 3, size), flops=flops, n_samples=50)
    out["baseline_stages3"] = {"verdict": r3.verdict.value, "summary": r3.summary}
    try:
        r1 = pc(False).check_perf(triton_gemm(torch, 1, size), flops=flops, n_samples=50)
        out["candidate_stages1"] = {"verdict": r1.verdict.value, "summary": r1.summary, "caught": False}
    except PipecheckFailure as exc:
        out["candidate_stages1"] = {"verdict": "fail", "summary": str(exc).splitlines()[0], "caught": True,
                                    "message": str(exc)}
    try:
        again = pc(False).check_perf(triton_gemm(torch, 3, size), flops=flops, n_samples=50)
        out["rerun_stages3"] = {"verdict": again.verdict.value, "summary": again.summary}
    except PipecheckFailure as exc:
        out["rerun_stages3"] = {"verdict": "fail", "summary": str(exc).splitlines()[0]}
    return out


# --------------------------------------------------------------------------- analysis


def rates(runs: dict[str, list[list[float]]], child_runs: list[list[list[float]]]) -> dict[str, Any]:
    import numpy as np

    from pytest_pipecheck.perf.stats import compare, resample_rates

    a_runs = runs["0"]
    out: dict[str, Any] = {"a_runs": len(a_runs), "slowed_runs": {k: len(v) for k, v in runs.items() if k != "0"}}
    a_med = float(np.median([np.median(r) for r in a_runs]))
    out["a_median_us"] = a_med
    out["run_median_spread"] = {
        "sd_of_log_run_medians": float(np.std(np.log([np.median(r) for r in a_runs]), ddof=1)),
        "min_over_max": float(min(np.median(r) for r in a_runs) / max(np.median(r) for r in a_runs)),
    }
    # A/A on disjoint pairs: each run used once, so the comparisons are independent
    disjoint = [compare(a_runs[i], a_runs[i + 1]) for i in range(0, len(a_runs) - 1, 2)]
    out["aa_disjoint"] = {"comparisons": len(disjoint), "failures": sum(c.regressed for c in disjoint),
                          "changes": [round(c.change, 5) for c in disjoint]}
    allpairs = resample_rates(a_runs, slowdowns=(0.0, *SLOWDOWNS))
    out["aa_all_pairs"] = allpairs[0.0].to_json()
    out["scaled_all_pairs"] = {str(s): allpairs[s].to_json() for s in SLOWDOWNS}
    if len(child_runs) >= 2:
        cross = []
        for i, ri in enumerate(child_runs):
            for j, rj in enumerate(child_runs):
                if i != j:
                    cross.extend(compare(x, y) for x in ri for y in rj)
        out["aa_cross_process"] = {"processes": len(child_runs), "comparisons": len(cross),
                                   "failures": sum(c.regressed for c in cross),
                                   "max_change": max(abs(c.change) for c in cross)}
    detection = {}
    for s in SLOWDOWNS:
        slowed = runs[str(s)]
        comps = [compare(a_runs[(i + 1) % len(a_runs)], r) for i, r in enumerate(slowed)]
        true = float(np.median([np.median(r) for r in slowed]) / a_med - 1)
        detection[str(s)] = {"comparisons": len(comps), "caught": sum(c.regressed for c in comps),
                             "rate": sum(c.regressed for c in comps) / max(1, len(comps)),
                             "true_slowdown": true, "changes": [round(c.change, 5) for c in comps]}
    out["detection_real_work"] = detection
    return out


# --------------------------------------------------------------------------- driver


def child_main(family: str, size: int, count: int, out_path: str) -> None:
    import torch

    from pytest_pipecheck.perf.timing import measure

    fn = FAMILIES[family][0](torch, size)
    runs = [list(measure(fn, n_samples=N_SAMPLES, warmup_s=0.05).times_us) for _ in range(count)]
    with open(out_path, "w") as fh:
        json.dump(runs, fh)


def cross_process(family: str, size: int, outdir: str, deadline: float, procs: int = 3) -> list[list[list[float]]]:
    out = []
    for p in range(procs):
        remaining = deadline - time.monotonic()
        if remaining < 20:
            break
        path = os.path.join(outdir, f"child-{family}-{p}.json")
        cmd = [sys.executable, os.path.abspath(__file__), outdir, "--child", family, str(size), "3", path]
        try:
            subprocess.run(cmd, timeout=min(60.0, remaining), check=True, capture_output=True)
            with open(path) as fh:
                out.append(json.load(fh))
            os.unlink(path)
        except Exception as exc:  # a child failure loses only the cross-process rate
            print(f"  child {p} for {family} failed: {exc}", file=sys.stderr)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--budget", type=float, default=200.0, help="seconds of work before phases are cut short")
    ap.add_argument("--child", nargs=4, metavar=("FAMILY", "SIZE", "COUNT", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child_main(args.child[0], int(args.child[1]), int(args.child[2]), args.child[3])
        return 0

    t0 = time.monotonic()
    deadline = t0 + args.budget
    os.makedirs(args.outdir, exist_ok=True)
    import torch

    from pytest_pipecheck.perf.timing import measure, measure_ceilings

    result: dict[str, Any] = {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "gpu": torch.cuda.get_device_name(0),
        "sm_count": torch.cuda.get_device_properties(0).multi_processor_count,
        "l2_bytes": getattr(torch.cuda.get_device_properties(0), "L2_cache_size", None),
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "gate": {"threshold": 0.03, "alpha": 0.001, "samples_per_run": N_SAMPLES},
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
    share = {"add_fp32": 0.35, "matmul_bf16": 0.30}  # of the budget, the rest for GEMM and children
    for fam in FAMILIES:
        fam_deadline = min(deadline, time.monotonic() + share[fam] * args.budget)
        cal = phase(f"{fam}:calibrate", lambda fam=fam: calibrate(torch, fam))
        if cal is None:
            continue
        runs = phase(f"{fam}:runs", lambda fam=fam, cal=cal, d=fam_deadline: take_runs(torch, fam, cal["sizes"], 20, d))
        if not runs:
            continue
        children = []
        if fam == "add_fp32":
            children = phase(f"{fam}:cross_process",
                             lambda fam=fam, cal=cal: cross_process(fam, cal["sizes"]["0"], args.outdir,
                                                                    min(deadline, time.monotonic() + 50))) or []
        analysed = phase(f"{fam}:analysis", lambda runs=runs, children=children: rates(runs, children))
        result["families"][fam] = {"calibration": cal, "rates": analysed,
                                   "raw_runs_us": {k: [[round(t, 3) for t in r] for r in v] for k, v in runs.items()}}

    if time.monotonic() < deadline + 30:  # the GEMM check matters most; allow it a little overrun
        result["serialized_pipeline"] = phase("serialized_pipeline", lambda: serialized_pipeline(torch, args.outdir))
    result["total_seconds"] = round(time.monotonic() - t0, 1)

    with open(os.path.join(args.outdir, "perf_gate_rates.json"), "w") as fh:
        json.dump(result, fh, indent=2, sort_keys=True)
    md = render_markdown(result)
    with open(os.path.join(args.outdir, "perf_gate_rates.md"), "w") as fh:
        fh.write(md)
    print(md)
    return 0 if not result["errors"] else 1


def render_markdown(r: dict[str, Any]) -> str:
    lines = [
        "# perf gate rates",
        "",
        f"- GPU: {r['gpu']} ({r['sm_count']} SMs, L2 {r.get('l2_bytes')} B); torch {r['torch']}, "
        f"CUDA {r['cuda']}, Triton {r.get('triton')}",
        f"- date: {r['date']}; command: `{r['command']}`; total {r.get('total_seconds')} s",
        f"- gate: threshold {r['gate']['threshold']:.0%}, alpha {r['gate']['alpha']}, "
        f"{r['gate']['samples_per_run']} cold-L2 samples per run",
    ]
    if "ceilings" in r:
        c = r["ceilings"]
        lines.append(f"- measured ceilings: fp16 {c['matmul_tflops'].get('fp16', 0):.0f} TFLOP/s, "
                     f"bf16 {c['matmul_tflops'].get('bf16', 0):.0f} TFLOP/s, copy {c['copy_gbps']:.0f} GB/s")
    if r.get("modes"):
        lines.append("- modes (median us): " + ", ".join(f"{k} {v:.2f}" for k, v in r["modes"].items()))
    lines += ["", "| kernel | A median us | run drift (sd log) | A/A disjoint fails | A/A all pairs | "
              "A/A cross-process | +3% | +5% | +10% | scaled +3/+5/+10% (all pairs) |", "|" + "---|" * 10]
    for fam, data in r.get("families", {}).items():
        rt = data.get("rates")
        if not rt:
            lines.append(f"| {fam} | failed: see errors | | | | | | | | |")
            continue
        d = rt["aa_disjoint"]
        ap = rt["aa_all_pairs"]
        cp = rt.get("aa_cross_process")
        cps = f"{cp['failures']}/{cp['comparisons']} (max {cp['max_change']:+.1%})" if cp else "-"
        det = [f"{v['caught']}/{v['comparisons']} (true {v['true_slowdown']:+.1%})"
               for v in rt["detection_real_work"].values()]
        sc = "/".join(f"{v['rate']:.0%}" for v in rt["scaled_all_pairs"].values())
        lines.append(f"| {fam} | {rt['a_median_us']:.1f} | {rt['run_median_spread']['sd_of_log_run_medians']:.4f} | "
                     f"{d['failures']}/{d['comparisons']} | {ap['failures']}/{ap['trials']} | {cps} | "
                     + " | ".join(det) + f" | {sc} |")
    sp = r.get("serialized_pipeline")
    if sp:
        lines += ["", "Serialized pipeline (Triton GEMM 4096^3 fp16, BM=BN=128, BK=64, 4 warps):", "",
                  f"- baseline num_stages=3: {sp['baseline_stages3']['summary']}",
                  f"- candidate num_stages=1: {'CAUGHT' if sp['candidate_stages1'].get('caught') else 'NOT CAUGHT'}: "
                  f"{sp['candidate_stages1']['summary']}",
                  f"- rerun num_stages=3: {sp['rerun_stages3']['verdict']}: {sp['rerun_stages3']['summary']}"]
    if r["errors"]:
        lines += ["", "Errors:", ""] + [f"- {k}: {v.splitlines()[0]}" for k, v in r["errors"].items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
