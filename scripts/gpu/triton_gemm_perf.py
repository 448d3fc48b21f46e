"""The reference Triton GEMM against torch.matmul at 4096^3 fp16 (goal: >= 95% of torch.matmul).

Usage (on a GPU, from the repository root):

    python3 scripts/gpu/triton_gemm_perf.py OUT_DIR [--size 4096] [--dtype float16] [--rep 200] [--budget 150]
        [--only KERNEL,...]

One run decides the sm_90 default of reference_kernels/triton/gemm.py. It times torch.matmul, then
every load path of the reference kernel (``tma``: device-side tensor descriptors; ``even_k``: pointer
loads without masks, EVEN_K + offsets wrapped modulo M/N; ``masked``: every load masked) at the
configs (BLOCK_M x BLOCK_N x BLOCK_K, stages, warps, GROUP_M)

    128x128x64 s3/s4 w4/w8 G8, 128x256x64 s3/s4 w8 G8, 256x128x64 s3/s4 w8 G8, 128x256x64 s4 w8 G16

and, for comparison only (not counted for the goal), the persistent warp-specialized GEMM and the
Gluon warp-specialized GEMM (reference_kernels/triton/gluon_gemm.py, rows ``gluon_ws_gemm``: a 1-warp
TMA loader partition feeding 4 or 8 wgmma consumer warps; configs in :func:`gluon_configs`). The
launcher's own choice for this GPU (``gpu_config`` + ``select_path``) runs first so that it is always
measured. Each case first runs once into a NaN-filled C and is compared with torch.matmul (max abs
error <= 1% of max |C| and relative Frobenius error <= 2e-3: fp16 rounding of two fp32-accumulated
results differs by about 3e-4), then is timed with triton.testing.do_bench (median; do_bench
flushes L2 between repetitions). A case that fails to compile, runs out of resources or gives a
wrong result is recorded as a row with its error and the sweep goes on (an error that breaks the
CUDA context, such as an illegal address, makes the following rows fail too; their errors say so).
When the sweep has run for ``--budget`` seconds the remaining cases are recorded as skipped, which
keeps a run (about 30 compiles) under ~3 minutes on an H100 or H200. ``--only`` limits the sweep to some
kernels (torch.matmul and the launcher default are always timed).

torch.matmul is timed once, first, while the GPU is still cool; the kernels after it run on a GPU the
sweep keeps busy, so the ratios here lean against the kernels (on an H200, 90-93% for kernels that
reach 97-101% when timed alternately with it: scripts/gpu/gluon_gemm_tune.py, stage 2;
docs/validation/2026-11-23-h200-1257.md). Use this
sweep to rank configurations, and gluon_gemm_tune.py's stage 2 for the ratio to torch.matmul.

Writes OUT_DIR/triton_gemm_perf.json and .md with the GPU name, date, command and versions at the
top, the table, the launcher default's number and fraction of torch.matmul, and a final line saying
whether the best reference-GEMM row reaches 95% of torch.matmul and which path/config it is (with the
best persistent and best gluon rows next to it). The rows measured before the Gluon kernel are first
written to OUT_DIR/triton_gemm_perf.partial.json, so that a Gluon kernel that hangs the GPU does not
lose them.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

from scripts.gpu._gemm_bench import add_common_options, square_inputs  # after the path above

GOAL = 0.95


def sweep_configs() -> list[dict[str, int]]:
    """The configs every path is timed at (the order they appear in the table)."""
    configs = []
    for stages in (3, 4):
        for warps in (4, 8):
            configs.append({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "stages": stages, "warps": warps,
                            "GROUP_M": 8})
    for bm, bn in ((128, 256), (256, 128)):
        for stages in (3, 4):
            configs.append({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 64, "stages": stages, "warps": 8, "GROUP_M": 8})
    configs.append({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "stages": 4, "warps": 8, "GROUP_M": 16})
    return configs


def persistent_configs() -> list[dict[str, Any]]:
    """Configs of the persistent descriptor GEMM (reference_kernels/triton/gemm.py: launch_persistent)."""
    wide = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "warps": 8, "GROUP_M": 8}
    return [
        {**wide, "stages": 3, "flatten": True, "tma_store": True, "split_epilogue": False},
        {**wide, "stages": 3, "flatten": True, "tma_store": True, "split_epilogue": True},
        {**wide, "stages": 4, "flatten": True, "tma_store": True, "split_epilogue": True},
        {**wide, "stages": 3, "flatten": True, "tma_store": False, "split_epilogue": False},
        {**wide, "stages": 3, "flatten": False, "tma_store": True, "split_epilogue": False},
        {**wide, "stages": 4, "flatten": False, "tma_store": True, "split_epilogue": True},
        {**wide, "BLOCK_M": 256, "BLOCK_N": 128, "stages": 3, "flatten": True, "tma_store": True,
         "split_epilogue": False},
        {**wide, "BLOCK_N": 128, "stages": 4, "flatten": True, "tma_store": True, "split_epilogue": False},
    ]


def gluon_configs() -> list[dict[str, Any]]:
    """Configs of the Gluon warp-specialized GEMM (``warps`` = consumer warps; the loader adds one).

    ``epilogue`` overrides the launcher's epilogue plan (gluon_gemm.epilogue_plan): absent, the plan
    it picks; ``masked``, masked stores; ``SxB``, S column chunks through B staging buffers.
    """
    wide = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "warps": 8, "GROUP_M": 8}
    return [
        {**wide, "stages": 3},                      # the whole 64 KB staging tile fits next to 3 stages
        {**wide, "stages": 4},                      # 4 stages: the plan stores two 128x128 chunks
        {**wide, "stages": 4, "epilogue": "4x2"},   # four 128x64 chunks, double-buffered
        {**wide, "stages": 4, "epilogue": "masked"},
        {**wide, "stages": 4, "epilogue": "4x2", "GROUP_M": 16},
        {**wide, "BLOCK_M": 256, "BLOCK_N": 128, "stages": 3},
        {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "stages": 4, "warps": 4, "GROUP_M": 8},
    ]


def gluon_epilogue_options(gcfg: dict[str, Any]) -> dict[str, Any]:
    """launch_gluon_gemm's epilogue arguments for a gluon_configs() entry."""
    epi = gcfg.get("epilogue")
    if epi is None:
        return {}
    if epi == "masked":
        return {"epilogue_tma": False}
    split, bufs = (int(x) for x in epi.split("x"))
    return {"epilogue_tma": True, "epi_split": split, "epi_bufs": bufs}


def config_label(cfg: dict[str, Any]) -> str:
    if not cfg:
        return ""
    return (f"{cfg['BLOCK_M']}x{cfg['BLOCK_N']}x{cfg['BLOCK_K']} s{cfg['stages']} w{cfg['warps']}"
            + (f" G{cfg['GROUP_M']}" if "GROUP_M" in cfg else ""))


def _error_text(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_common_options(parser)
    parser.add_argument("--budget", type=float, default=150.0,
                        help="seconds of sweep after which the remaining cases are skipped (default 150)")
    parser.add_argument("--only", default="", help=(
        "comma-separated kernels to time besides torch.matmul and the launcher default: triton_gemm, "
        "triton_gemm_persistent, triton_persistent_ws_gemm, gluon_ws_gemm (default: all)"))
    args = parser.parse_args()
    kernels = ("triton_gemm", "triton_gemm_persistent", "triton_persistent_ws_gemm", "gluon_ws_gemm")
    only = {k for k in args.only.split(",") if k}
    if only - set(kernels):
        parser.error(f"--only: unknown kernel(s) {sorted(only - set(kernels))}; choose from {', '.join(kernels)}")
    wanted = only or set(kernels)
    os.makedirs(args.out_dir, exist_ok=True)
    started = time.monotonic()

    import torch
    import triton
    import triton.testing

    from reference_kernels.triton import gemm as ref
    from reference_kernels.triton import persistent_ws_gemm as ws

    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to measure")
        return 2
    n = args.size
    dtype = getattr(torch, args.dtype)
    a, b = square_inputs(n, dtype)
    flops = 2.0 * n * n * n
    props = torch.cuda.get_device_properties(0)
    cap = (props.major, props.minor)
    expected = torch.matmul(a, b)
    expected_f = expected.float()
    expected_max = expected_f.abs().max().item()
    expected_norm = expected_f.norm().item()

    def tflops(ms: float) -> float:
        return flops / (ms * 1e-3) / 1e12

    def bench(fn: Callable[[], Any]) -> float:
        try:
            return float(triton.testing.do_bench(fn, rep=args.rep, return_mode="median"))
        except TypeError:  # a Triton without return_mode: the 0.5 quantile is the median
            out = triton.testing.do_bench(fn, rep=args.rep, quantiles=[0.5])
            return float(out[0] if isinstance(out, (list, tuple)) else out)

    def check(c: Any) -> None:
        torch.cuda.synchronize()
        diff = c.float() - expected_f
        err = diff.abs().max().item()
        rel = diff.norm().item() / expected_norm
        if not (err <= 1e-2 * expected_max and rel <= 2e-3):  # NaN (unwritten tiles) fails both
            raise AssertionError(f"wrong result vs torch.matmul: max abs err {err:.3g}, rel Frobenius err {rel:.3g}")

    def over_budget() -> bool:
        return time.monotonic() - started > args.budget

    def measure(row: dict[str, Any], make_run: Callable[..., Callable[[], Any]], may_skip: bool = True) -> None:
        """Fill ``row`` (unless it already carries an error): skipped when the budget is spent, else
        ``make_run(c)`` run once into a NaN-filled C, checked against torch.matmul and timed. Any
        failure is recorded in the row: one bad case must not end the sweep."""
        if row["error"] is not None:
            return
        if may_skip and over_budget():
            row["error"] = f"skipped: the sweep's time budget ({args.budget:.0f} s) was spent"
            row["skipped"] = True
            return
        t_case = time.monotonic()
        try:
            c = torch.full((n, n), float("nan"), device="cuda", dtype=dtype)
            run = make_run(c)
            run()
            check(c)
            ms = bench(run)
            row.update(ms=ms, tflops=tflops(ms))
        except Exception as exc:
            row["error"] = _error_text(exc)
            row["traceback"] = traceback.format_exc(limit=3)
        row["seconds"] = round(time.monotonic() - t_case, 2)

    rows: list[dict[str, Any]] = []
    torch_ms = bench(lambda: torch.matmul(a, b))
    rows.append({"name": "torch.matmul", "path": "", "config": {}, "ms": torch_ms, "tflops": tflops(torch_ms),
                 "error": None})

    # the launcher's own choice on this GPU, measured first so the budget cannot skip it
    default_cfg = ref.gpu_config(cap)
    default_path, default_why = ref.select_path(a, b, BLOCK_M=default_cfg["BLOCK_M"], BLOCK_N=default_cfg["BLOCK_N"],
                                                BLOCK_K=default_cfg["BLOCK_K"], kernel=ref.gemm_kernel,
                                                capability=cap)

    configs = sweep_configs()
    if default_cfg not in configs:
        configs.insert(0, default_cfg)
    cases = [(path, cfg) for path in ref.PATHS for cfg in configs]
    order = sorted(range(len(cases)), key=lambda i: cases[i] != (default_path, default_cfg))
    gemm_rows: dict[int, dict[str, Any]] = {}
    if "triton_gemm" not in wanted:   # the launcher default alone
        order = order[:1]
    for i in order:
        path, cfg = cases[i]
        row: dict[str, Any] = {"name": "triton_gemm", "path": path, "config": cfg, "ms": None, "tflops": None,
                               "error": None}
        gemm_rows[i] = row
        measure(row, lambda c, cfg=cfg, path=path: functools.partial(
            ref.launch_gemm, ref.gemm_kernel, a, b, c, **cfg, path=path),
            may_skip=cases[i] != (default_path, default_cfg))
        shown = f"{row['tflops']:.0f} TFLOP/s" if row["tflops"] else row["error"]
        print(f"[{time.monotonic() - started:6.1f}s] {path:6s} {config_label(cfg):22s} {shown}", flush=True)
    rows.extend(gemm_rows[i] for i in range(len(cases)) if i in gemm_rows)

    # the persistent descriptor kernel (gemm_persistent_kernel: one program per SM, GROUP_M tile order,
    # tile and K loops flattened into one pipeline or not, TMA or masked store, split epilogue)
    for pcfg in persistent_configs() if "triton_gemm_persistent" in wanted else []:
        cfg = {k: v for k, v in pcfg.items() if k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "stages", "warps", "GROUP_M")}
        opts = {k: v for k, v in pcfg.items() if k not in cfg}
        label = "persistent " + " ".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in opts.items())
        row = {"name": "triton_gemm_persistent", "path": label, "config": cfg, "ms": None, "tflops": None,
               "error": ref.tma_unavailable_reason(a, b, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"],
                                                   BLOCK_K=cfg["BLOCK_K"])}
        measure(row, lambda c, cfg=cfg, opts=opts: functools.partial(
            ref.launch_persistent, a, b, c, **cfg, num_programs=props.multi_processor_count, **opts))
        shown = f"{row['tflops']:.0f} TFLOP/s" if row["tflops"] else row["error"]
        print(f"[{time.monotonic() - started:6.1f}s] {label:40s} {config_label(cfg):22s} {shown}", flush=True)
        rows.append(row)

    reason = ws.unavailable_reason("cuda")
    for warps in (4, 8) if "triton_persistent_ws_gemm" in wanted else ():
        cfg = {**ws.GPU_CONFIG, "warps": warps}
        row = {"name": "triton_persistent_ws_gemm", "path": "tma (persistent, not counted)", "config": cfg,
               "ms": None, "tflops": None, "error": reason}
        measure(row, lambda c, cfg=cfg: functools.partial(
            ws.launch, {"a": a, "b": b, "c": c}, cfg, props.multi_processor_count))
        rows.append(row)

    # the Gluon warp-specialized kernel (not counted for the goal); what was measured so far is saved
    # first, because a pipeline that deadlocks on its mbarriers hangs the GPU instead of raising
    with open(os.path.join(args.out_dir, "triton_gemm_perf.partial.json"), "w") as f:
        json.dump({"rows": rows}, f, indent=2)
    gg: Any = None
    try:
        from reference_kernels.triton import gluon_gemm

        gg, gluon_reason = gluon_gemm, gluon_gemm.gluon_unavailable_reason()
    except Exception as exc:  # an import error must not end the sweep either
        gluon_reason = f"cannot import reference_kernels.triton.gluon_gemm: {_error_text(exc)}"
    for gcfg in gluon_configs() if "gluon_ws_gemm" in wanted else []:
        path = "gluon ws (1-warp TMA loader)"
        row = {"name": "gluon_ws_gemm", "path": path, "config": gcfg, "ms": None, "tflops": None,
               "error": gluon_reason}

        def gluon_run(c: Any, row: dict[str, Any] = row, gcfg: dict[str, int] = gcfg) -> Callable[[], Any]:
            tile = {k: gcfg[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "stages")}
            epi = gluon_epilogue_options(gcfg)
            tma_store, split, bufs = gg.epilogue_plan(
                int(c.shape[1]), int(c.element_size()), **tile, tma=epi.get("epilogue_tma"),
                split=epi.get("epi_split"), bufs=epi.get("epi_bufs"))
            row["path"] += (f", TMA store {split} chunk(s) x {bufs} buffer(s)" if tma_store else ", masked store")
            return functools.partial(gg.launch_gluon_gemm, a, b, c, **tile, consumer_warps=gcfg["warps"],
                                     GROUP_M=gcfg["GROUP_M"], num_programs=props.multi_processor_count, **epi)

        measure(row, gluon_run)
        shown = f"{row['tflops']:.0f} TFLOP/s" if row["tflops"] else row["error"]
        print(f"[{time.monotonic() - started:6.1f}s] {row['path']:40s} {config_label(gcfg):22s} {shown}", flush=True)
        rows.append(row)

    for row in rows:
        row["vs_torch"] = row["tflops"] / rows[0]["tflops"] if row["tflops"] else None
    candidates = [r for r in rows if r["name"] == "triton_gemm" and r["tflops"]]
    persistent_best = max((r for r in rows if r["name"] == "triton_gemm_persistent" and r["tflops"]),
                          key=lambda r: r["tflops"], default=None)
    gluon_best = max((r for r in rows if r["name"] == "gluon_ws_gemm" and r["tflops"]),
                     key=lambda r: r["tflops"], default=None)
    best = max(candidates, key=lambda r: r["tflops"], default=None)
    default_row = next(r for r in rows if r["name"] == "triton_gemm" and r["path"] == default_path
                       and r["config"] == default_cfg)
    skipped = sum(1 for r in rows if r.get("skipped"))
    meta = {
        "gpu": props.name, "sm_count": props.multi_processor_count,
        "capability": f"{props.major}.{props.minor}",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([sys.executable, *sys.argv]),
        "torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
        "python": platform.python_version(), "size": n, "dtype": args.dtype,
        "timing": f"triton.testing.do_bench median, rep={args.rep} ms",
        "goal": f"best triton_gemm >= {GOAL} x torch.matmul",
        "budget_s": args.budget, "skipped": skipped,
        "sweep_seconds": round(time.monotonic() - started, 1),
        "launcher_default": {"config": default_cfg, "path": default_path, "why": default_why,
                             "tflops": default_row["tflops"], "vs_torch": default_row["vs_torch"],
                             "error": default_row["error"]},
        "best": best and {"path": best["path"], "config": best["config"], "tflops": best["tflops"],
                          "vs_torch": best["vs_torch"]},
        "goal_met": bool(best and best["vs_torch"] >= GOAL),
        "persistent_best": persistent_best and {"path": persistent_best["path"], "config": persistent_best["config"],
                                                "tflops": persistent_best["tflops"],
                                                "vs_torch": persistent_best["vs_torch"]},
        "gluon_best": gluon_best and {"path": gluon_best["path"], "config": gluon_best["config"],
                                      "tflops": gluon_best["tflops"], "vs_torch": gluon_best["vs_torch"]},
    }
    with open(os.path.join(args.out_dir, "triton_gemm_perf.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=2)

    sm = f"sm_{props.major}{props.minor}"
    lines = [f"# Triton reference GEMM vs torch.matmul, {n}^3 {args.dtype}", "",
             f"GPU {meta['gpu']} ({meta['sm_count']} SMs, {sm}), {meta['date']}, "
             f"torch {meta['torch']}, triton {meta['triton']}, CUDA {meta['cuda']}", "",
             f"Command: `{meta['command']}`; timing: {meta['timing']}; sweep {meta['sweep_seconds']} s"
             + (f", {skipped} cases skipped (budget {args.budget:.0f} s)" if skipped else ""), "",
             "| kernel | path | BM | BN | BK | stages | warps | GROUP_M | ms | TFLOP/s | vs torch | error |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r["config"]
        ms_text = f"{r['ms']:.3f}" if r["ms"] else "-"
        tf = f"{r['tflops']:.0f}" if r["tflops"] else "-"
        vs = f"{100 * r['vs_torch']:.1f}%" if r["vs_torch"] else "-"
        lines.append(f"| {r['name']} | {r['path']} | {c.get('BLOCK_M', '')} | {c.get('BLOCK_N', '')} | "
                     f"{c.get('BLOCK_K', '')} | {c.get('stages', '')} | {c.get('warps', '')} | "
                     f"{c.get('GROUP_M', '')} | {ms_text} | {tf} | {vs} | {r['error'] or ''} |")
    d = meta["launcher_default"]
    if d["tflops"]:
        default_line = (f"Launcher default on {sm}: path {default_path}, {config_label(default_cfg)}: "
                        f"{d['tflops']:.0f} TFLOP/s = {100 * d['vs_torch']:.1f}% of torch.matmul "
                        f"({rows[0]['tflops']:.0f}) ({default_why})")
    else:
        default_line = (f"Launcher default on {sm}: path {default_path}, {config_label(default_cfg)}: "
                        f"no number ({d['error']})")
    if best:
        best_text = (f"best triton_gemm: path {best['path']}, {config_label(best['config'])}: "
                     f"{best['tflops']:.0f} TFLOP/s = {100 * best['vs_torch']:.1f}% of torch.matmul")
    else:
        best_text = "no triton_gemm row has a number"
    if persistent_best:
        best_text += (f"; best persistent: {persistent_best['path']}, {config_label(persistent_best['config'])}: "
                      f"{persistent_best['tflops']:.0f} TFLOP/s = {100 * persistent_best['vs_torch']:.1f}%")
    if gluon_best:
        best_text += (f"; best gluon: {gluon_best['path']}, {config_label(gluon_best['config'])}: "
                      f"{gluon_best['tflops']:.0f} TFLOP/s = {100 * gluon_best['vs_torch']:.1f}%")
    else:
        gluon_errors = sorted({r["error"] for r in rows if r["name"] == "gluon_ws_gemm" and r["error"]})
        best_text += f"; best gluon: no number ({gluon_errors[0] if gluon_errors else 'no rows'})"
    lines += ["", default_line, "",
              f"Goal (best >= {100 * GOAL:.0f}% of torch.matmul): {'met' if meta['goal_met'] else 'NOT met'}; "
              f"{best_text}", "",
              "torch.matmul was timed once, first, on a cool GPU: these ratios lean against the kernels; "
              "scripts/gpu/gluon_gemm_tune.py (stage 2) times them alternately for the ratio to quote."]
    with open(os.path.join(args.out_dir, "triton_gemm_perf.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines[6:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
