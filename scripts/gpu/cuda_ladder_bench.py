"""Benchmark the CUDA pipelining ladder at 4096^3 fp16 (fp32 accumulate) against torch.matmul.

    python scripts/gpu/cuda_ladder_bench.py OUT_DIR [--n 4096] [--repeats 20]

Prints a table and writes OUT_DIR/cuda_ladder_bench.{json,md}: GPU, date, command, per rung TFLOP/s
and fraction of cuBLAS measured in the same run (every kernel of KERNELS: k1..k6 and k3's wide
128 x 256 build); a stage sweep of k3 (1..4) and of k3_cp_async_wide (2..4); k3's load-only and
compute-only variants with the cost model's prediction next to the measurement (at 2..4 stages, and
for the wide build at its default stage count); and a variant table
(compile-time macros of the kernels, e.g. fragment prefetch off, k5's occupancy target, k4's stage
count) so one GPU run picks the best build of each rung (`--no-variants` skips it). Every case runs in
its own try/except; a failure is recorded, never fatal. (No mutant that can hang is run here.)
"""

from __future__ import annotations

import datetime
import json
import sys
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def _time_ms(fn: Any, repeats: int) -> float:
    """Median milliseconds per launch, from pipecheck's own device timing (hot L2).

    Not one launch between two events: the launcher's host work before the launch would then be
    timed too, while the GPU idles (tens of microseconds: 10% of a 0.4 ms kernel). measure() keeps the
    GPU busy with a calibrated sleep while the host enqueues, and times several launches per sample.
    """
    from pytest_pipecheck.perf.timing import measure

    samples = measure(fn, n_samples=max(repeats, 2), hot_cache=True, warmup_s=0.1, max_time_s=10.0)
    return float(samples.median) / 1000.0


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--no-variants", action="store_true", help="skip the compile-time variant table")
    ap.add_argument("--quick", action="store_true",
                    help="rungs and variants only: skip the stage sweep and the cost-model rows")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import cupy

    from pytest_pipecheck.perf.cost_model import predict_from_variants
    from reference_kernels.cuda.launch import KERNELS, gemm

    n = args.n
    flops = 2.0 * n**3
    rng = cupy.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=cupy.float32).astype(cupy.float16)
    b = rng.standard_normal((n, n), dtype=cupy.float32).astype(cupy.float16)
    c = cupy.empty((n, n), dtype=cupy.float32)
    want = a.astype(cupy.float32) @ b.astype(cupy.float32)
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    result: dict[str, Any] = {
        "gpu": props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"]),
        "sm_count": props["multiProcessorCount"],
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([sys.executable, *sys.argv]),
        "n": n, "repeats": args.repeats, "timing": "pipecheck.perf.timing.measure: CUDA events, median, hot L2, host enqueue hidden",
        "rungs": [], "stage_sweep": [], "cost_model": [], "variants": [], "errors": [],
    }

    def tflops(ms: float) -> float:
        return flops / (ms * 1e-3) / 1e12

    cublas_ms = None
    try:
        import torch

        ta = torch.as_tensor(a, device="cuda")
        tb = torch.as_tensor(b, device="cuda")
        cublas_ms = _time_ms(lambda: torch.matmul(ta, tb), args.repeats)
        result["cublas"] = {"what": "torch.matmul fp16 -> fp16", "ms": cublas_ms, "tflops": tflops(cublas_ms)}
    except Exception as exc:
        result["errors"].append(f"torch.matmul: {exc!r}")

    def run(name: str, stages: int | None = None, defines: dict[str, Any] | None = None) -> dict[str, Any]:
        row: dict[str, Any] = {"kernel": name, "stages": stages, "defines": defines or {}}
        try:
            ms = _time_ms(lambda: gemm(name, a, b, c, stages=stages, defines=defines), args.repeats)
            row.update(ms=ms, tflops=tflops(ms))
            if cublas_ms:
                row["frac_cublas"] = cublas_ms / ms
            if not defines or not any(k in defines for k in ("PIPECHECK_LOAD_ONLY", "PIPECHECK_COMPUTE_ONLY")):
                err = float(cupy.max(cupy.abs(c - want)) / cupy.max(cupy.abs(want)))
                row["max_rel_err"] = err
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            result["errors"].append(f"{name} stages={stages}: {traceback.format_exc(limit=2)}")
        return row

    for name in KERNELS:
        result["rungs"].append(run(name))
    sweeps = [] if args.quick else [("k3_cp_async", (1, 2, 3, 4)), ("k3_cp_async_wide", (2, 3, 4))]
    for name, stage_counts in sweeps:
        for s in stage_counts:
            result["stage_sweep"].append(run(name, stages=s))
    wide_default = KERNELS["k3_cp_async_wide"].default_stages or 4
    model_cases = [] if args.quick else [("k3_cp_async", 2), ("k3_cp_async", 3), ("k3_cp_async", 4),
                                         ("k3_cp_async_wide", wide_default)]
    for name, s in model_cases:
        full: dict[str, Any] = next(
            (r for r in result["stage_sweep"] if r["kernel"] == name and r["stages"] == s), {})
        lo = run(name, stages=s, defines={"PIPECHECK_LOAD_ONLY": 1})
        co = run(name, stages=s, defines={"PIPECHECK_COMPUTE_ONLY": 1})
        row = {"kernel": name, "stages": s, "load_only_ms": lo.get("ms"), "compute_only_ms": co.get("ms"),
               "measured_ms": full.get("ms")}
        if lo.get("ms") and co.get("ms"):
            p = predict_from_variants(lo["ms"], co["ms"], tiles=-(-n // 32), stages=s)
            row.update(serialized_ms=p.serialized, predicted_ms=p.pipelined, bound=p.bound)
        result["cost_model"].append(row)

    # Compile-time variants: same kernels, other builds. The default build of each rung is the row
    # with no defines in the rung table above; a variant that wins here is a candidate new default.
    variants: list[tuple[str, int | None, dict[str, Any]]] = [
        ("k1_sync_tiled", None, {"PIPECHECK_NO_FRAG_PREFETCH": 1}),
        ("k3_cp_async", 3, {"PIPECHECK_NO_FRAG_PREFETCH": 1}),
        ("k3_cp_async_wide", None, {"PIPECHECK_NO_FRAG_PREFETCH": 1}),
        # two BK-deep K tiles per stage: half the barriers per FLOP
        ("k3_cp_async", 2, {"PIPECHECK_SUBTILES": 2}),
        ("k3_cp_async", 3, {"PIPECHECK_SUBTILES": 2}),
        ("k3_cp_async_wide", 2, {"PIPECHECK_SUBTILES": 2}),
        ("k3_cp_async_wide", 3, {"PIPECHECK_SUBTILES": 2}),
        ("k3_cp_async_wide", 4, {"PIPECHECK_SUBTILES": 2}),
        # cross-tile fragment pipeline: the barrier of tile k+1 inside tile k (k3's PIPECHECK_XTILE)
        ("k3_cp_async", 3, {"PIPECHECK_XTILE": 1}),
        ("k3_cp_async", 4, {"PIPECHECK_XTILE": 1}),
        ("k3_cp_async", 2, {"PIPECHECK_XTILE": 1, "PIPECHECK_SUBTILES": 2}),
        ("k3_cp_async", 4, {"PIPECHECK_XTILE": 1, "PIPECHECK_XTILE_SPLIT": 1}),
        # the wide build runs the cross-tile loop by default; PIPECHECK_XTILE=0 is its classic loop
        ("k3_cp_async_wide", 4, {"PIPECHECK_XTILE": 0}),
        ("k3_cp_async_wide", 3, {"PIPECHECK_XTILE": 1}),
        ("k3_cp_async_wide", 5, {"PIPECHECK_XTILE": 1}),
        ("k3_cp_async_wide", 6, {"PIPECHECK_XTILE": 1}),
        ("k3_cp_async_wide", 4, {"PIPECHECK_XTILE": 1, "PIPECHECK_XTILE_SPLIT": 1}),
        ("k3_cp_async_wide", 5, {"PIPECHECK_XTILE": 1, "PIPECHECK_XTILE_SPLIT": 1}),
        ("k3_cp_async_wide", 6, {"PIPECHECK_XTILE": 1, "PIPECHECK_XTILE_SPLIT": 1}),
        ("k3_cp_async_wide", 3, {"PIPECHECK_XTILE": 1, "PIPECHECK_SUBTILES": 2}),
        ("k4_cuda_pipeline", 2, {}),
        ("k4_cuda_pipeline", 4, {}),
        ("k5_warp_specialized", 4, {}),
        ("k5_warp_specialized", None, {"PIPECHECK_K5_BLOCKS_PER_SM": 1}),
        ("k5_warp_specialized", None, {"PIPECHECK_NO_FRAG_PREFETCH": 1}),
        ("k6_loader_compute_storer", 2, {}),
        ("k6_loader_compute_storer", 4, {}),
        ("k6_loader_compute_storer", None, {"PIPECHECK_NO_FRAG_PREFETCH": 1}),
    ]
    if args.quick:  # the k3 builds only (two K tiles per barrier, the cross-tile pipeline)
        variants = [v for v in variants if v[0].startswith("k3") and "PIPECHECK_XTILE" in v[2]]
    if not args.no_variants:
        for name, stages, defines in variants:
            result["variants"].append(run(name, stages=stages, defines=defines))

    def fmt(v: Any, f: str = ".3f") -> str:
        return format(v, f) if isinstance(v, (int, float)) else "-"

    lines = [f"# CUDA ladder at {n}^3 fp16 -> fp32", "",
             f"GPU: {result['gpu']} ({result['sm_count']} SMs); date {result['date']}",
             f"command: `{result['command']}`; {result['timing']}, {args.repeats} repeats", ""]
    if cublas_ms:
        lines.append(f"torch.matmul (cuBLAS): {cublas_ms:.3f} ms, {tflops(cublas_ms):.1f} TFLOP/s\n")
    lines += ["| kernel | stages | ms | TFLOP/s | of cuBLAS | max rel err |", "|---|---|---|---|---|---|"]
    for r in result["rungs"] + result["stage_sweep"]:
        lines.append(f"| {r['kernel']} | {r['stages'] or 'default'} | {fmt(r.get('ms'))} | {fmt(r.get('tflops'), '.1f')} "
                     f"| {fmt(r.get('frac_cublas'), '.2f')} | {fmt(r.get('max_rel_err'), '.1e')} {r.get('error', '')} |")
    if result["variants"]:
        lines += ["", "Variants (compile-time builds; pick the fastest correct one per rung)", "",
                  "| kernel | stages | defines | ms | TFLOP/s | of cuBLAS | max rel err |", "|---|---|---|---|---|---|---|"]
        for r in result["variants"]:
            d = " ".join(f"{k}={v}" for k, v in r["defines"].items()) or "-"
            lines.append(f"| {r['kernel']} | {r['stages'] or 'default'} | {d} | {fmt(r.get('ms'))} | "
                         f"{fmt(r.get('tflops'), '.1f')} | {fmt(r.get('frac_cublas'), '.2f')} | "
                         f"{fmt(r.get('max_rel_err'), '.1e')} {r.get('error', '')} |")
    lines += ["", "Cost model (k3; the wide build's rows say so): per-tile serialized = load + compute, "
              "pipelined = max(load, compute) + fill/drain",
              "", "| stages | load-only ms | compute-only ms | serialized ms | predicted ms | measured ms | bound |",
              "|---|---|---|---|---|---|---|"]
    for r in result["cost_model"]:
        st = r["stages"] if r.get("kernel", "k3_cp_async") == "k3_cp_async" else f"{r['stages']} ({r['kernel']})"
        lines.append(f"| {st} | {fmt(r.get('load_only_ms'))} | {fmt(r.get('compute_only_ms'))} | "
                     f"{fmt(r.get('serialized_ms'))} | {fmt(r.get('predicted_ms'))} | {fmt(r.get('measured_ms'))} | "
                     f"{r.get('bound', '-')} |")
    if result["errors"]:
        lines += ["", "Errors:", *[f"- {e.splitlines()[0]}" for e in result["errors"]]]
    text = "\n".join(lines) + "\n"
    (out / "cuda_ladder_bench.md").write_text(text)
    (out / "cuda_ladder_bench.json").write_text(json.dumps(result, indent=2))
    print(text)
    return 0 if not result["errors"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
