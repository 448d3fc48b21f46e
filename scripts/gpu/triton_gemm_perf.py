"""The reference Triton GEMM against torch.matmul at 4096^3 fp16 (goal: >= 95% of torch.matmul).

Usage (on the GPU machine, from the repository root):

    python3 scripts/gpu/triton_gemm_perf.py OUT_DIR [--size 4096] [--dtype float16]

Times each config (num_stages 3/4, BLOCK_M/BLOCK_N 128/256, BLOCK_K 64, warps 4/8) and the persistent
warp-specialized GEMM (where available) with triton.testing.do_bench (median, L2 flushed between
repetitions by do_bench), checks each result against torch.matmul first, prints a short table and
writes OUT_DIR/triton_gemm_perf.json and .md with the GPU name, date, command and numbers. Each
case is guarded: a config that fails to compile, runs out of shared memory or gives a wrong result
is recorded with its error and the sweep goes on.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import traceback

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    parser.add_argument("--rep", type=int, default=200, help="do_bench rep (ms)")
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)

    import torch
    import triton
    import triton.testing

    from reference_kernels.triton import persistent_ws_gemm as ws
    from reference_kernels.triton.gemm import gemm_kernel, launch_gemm

    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to measure")
        return 2
    n = args.size
    dtype = getattr(torch, args.dtype)
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn((n, n), device="cuda", dtype=dtype, generator=gen)
    b = torch.randn((n, n), device="cuda", dtype=dtype, generator=gen)
    flops = 2.0 * n * n * n
    props = torch.cuda.get_device_properties(0)
    expected = torch.matmul(a, b)

    def tflops(ms: float) -> float:
        return flops / (ms * 1e-3) / 1e12

    rows: list[dict] = []
    torch_ms = triton.testing.do_bench(lambda: torch.matmul(a, b), rep=args.rep)
    rows.append({"name": "torch.matmul", "config": {}, "ms": torch_ms, "tflops": tflops(torch_ms), "error": None})

    configs = []
    for stages in (3, 4):
        for bm, bn in ((128, 128), (128, 256), (256, 128)):
            for warps in (4, 8):
                configs.append({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 64, "stages": stages, "warps": warps,
                                "GROUP_M": 8})
    for cfg in configs:
        row = {"name": "triton_gemm", "config": cfg, "ms": None, "tflops": None, "error": None}
        try:
            c = torch.empty((n, n), device="cuda", dtype=dtype)
            launch_gemm(gemm_kernel, a, b, c, **cfg)
            torch.cuda.synchronize()
            err = (c.float() - expected.float()).abs().max().item()
            if not err <= 1e-2 * expected.float().abs().max().item():
                raise AssertionError(f"wrong result: max abs err {err:.3g}")
            ms = triton.testing.do_bench(lambda c=c, cfg=cfg: launch_gemm(gemm_kernel, a, b, c, **cfg), rep=args.rep)
            row.update(ms=ms, tflops=tflops(ms))
        except Exception as exc:  # record and go on: one bad config must not end the sweep
            row["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            row["traceback"] = traceback.format_exc(limit=3)
        rows.append(row)

    reason = ws.unavailable_reason("cuda")
    for warps in (4, 8):
        cfg = {**ws.GPU_CONFIG, "warps": warps}
        row = {"name": "triton_persistent_ws_gemm", "config": cfg, "ms": None, "tflops": None, "error": reason}
        if reason is None:
            try:
                c = torch.empty((n, n), device="cuda", dtype=dtype)
                arrays = {"a": a, "b": b, "c": c}
                ws.launch(arrays, cfg, props.multi_processor_count)
                torch.cuda.synchronize()
                err = (c.float() - expected.float()).abs().max().item()
                if not err <= 1e-2 * expected.float().abs().max().item():
                    raise AssertionError(f"wrong result: max abs err {err:.3g}")
                ms = triton.testing.do_bench(lambda arrays=arrays, cfg=cfg: ws.launch(arrays, cfg, props.multi_processor_count),
                                             rep=args.rep)
                row.update(ms=ms, tflops=tflops(ms))
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
                row["traceback"] = traceback.format_exc(limit=3)
        rows.append(row)

    for row in rows:
        row["vs_torch"] = row["tflops"] / rows[0]["tflops"] if row["tflops"] else None
    best = max((r for r in rows[1:] if r["tflops"]), key=lambda r: r["tflops"], default=None)
    meta = {
        "gpu": props.name, "sm_count": props.multi_processor_count,
        "capability": f"{props.major}.{props.minor}",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([sys.executable, *sys.argv]),
        "torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
        "python": platform.python_version(), "size": n, "dtype": args.dtype,
        "timing": f"triton.testing.do_bench median, rep={args.rep} ms",
        "goal": "best triton_gemm >= 0.95 x torch.matmul",
        "best": best and {"config": best["config"], "tflops": best["tflops"], "vs_torch": best["vs_torch"]},
        "goal_met": bool(best and best["vs_torch"] >= 0.95),
    }
    with open(os.path.join(args.out_dir, "triton_gemm_perf.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=2)

    lines = [f"# Triton reference GEMM vs torch.matmul, {n}^3 {args.dtype}", "",
             f"GPU {meta['gpu']} ({meta['sm_count']} SMs, sm_{props.major}{props.minor}), {meta['date']}, "
             f"torch {meta['torch']}, triton {meta['triton']}, CUDA {meta['cuda']}", "",
             f"Command: `{meta['command']}`; timing: {meta['timing']}", "",
             "| kernel | BM | BN | BK | stages | warps | ms | TFLOP/s | vs torch | error |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r["config"]
        ms = f"{r['ms']:.3f}" if r["ms"] else "-"
        tf = f"{r['tflops']:.0f}" if r["tflops"] else "-"
        vs = f"{100 * r['vs_torch']:.1f}%" if r["vs_torch"] else "-"
        lines.append(f"| {r['name']} | {c.get('BLOCK_M', '')} | {c.get('BLOCK_N', '')} | {c.get('BLOCK_K', '')} | "
                     f"{c.get('stages', '')} | {c.get('warps', '')} | {ms} | {tf} | {vs} | {r['error'] or ''} |")
    lines += ["", f"Goal (best >= 95% of torch.matmul): {'met' if meta['goal_met'] else 'NOT met'}"]
    with open(os.path.join(args.out_dir, "triton_gemm_perf.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines[6:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
