"""Tune the Gluon warp-specialized GEMM (reference_kernels/triton/gluon_gemm.py) against torch.matmul.

Usage (on a GPU, from the repository root):

    python3 scripts/gpu/gluon_gemm_tune.py OUT_DIR [--size 4096] [--dtype float16] [--rep 200] [--rounds 7]
        [--budget 150] [--top 3] [--cooldown 1.0] [--quick]

Stage 1 times every configuration of :func:`grid` once (tile, stages, GROUP_M, epilogue plan,
programs); each first runs into a NaN-filled C and is checked against torch.matmul (max abs error
<= 1% of max |C| and relative Frobenius error <= 2e-3), and a configuration that fails to compile,
does not fit or is wrong is recorded with its error. Stage 2 re-times the ``--top`` fastest and the
launcher default, with the reference Triton GEMM's launcher default (reference_kernels/triton/gemm.py)
for context, in ``--rounds`` rounds that alternate torch.matmul and each candidate: every timing
starts after ``--cooldown`` seconds idle, and the order rotates from round to round, so no entry
always runs on a GPU its predecessor heated; the GPU's temperature, SM clock and power before each
timing are recorded (nvidia-smi). The reported ratio is the median over rounds of (torch ms / kernel
ms). Stage 1 times torch.matmul once, first, on a GPU that is still cool, so its ratios lean against
the kernels; stage 2's are the ones to quote. ``--quick`` replaces stage 1's grid by
:func:`quick_grid` and sends all of it to stage 2. Timing: triton.testing.do_bench, median, L2
flushed between repetitions.

Writes OUT_DIR/gluon_gemm_tune.json and .md (GPU, date, command, versions, both tables, and a last
line saying whether the best configuration reaches 95% of torch.matmul).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

from scripts.gpu._gemm_bench import add_common_options, square_inputs  # after the path above

GOAL = 0.95


def grid() -> list[dict[str, Any]]:
    """Stage 1's configurations (``epilogue``: None for the launcher's plan, ``masked``, or ``SxB``)."""
    out: list[dict[str, Any]] = []
    for stages in (3, 4):
        for group in (4, 8, 16, 32):
            for epi in ((None, "2x2", "4x2", "8x2") if stages == 3 else (None, "4x1", "4x2", "8x2")):
                out.append({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "stages": stages, "consumer_warps": 8,
                            "GROUP_M": group, "epilogue": epi})
    for group in (8, 16):
        for epi in ("2x1", "4x1", "8x2"):
            out.append({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 128, "stages": 2, "consumer_warps": 8,
                        "GROUP_M": group, "epilogue": epi})
        for stages in (3, 4):
            out.append({"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 64, "stages": stages, "consumer_warps": 8,
                        "GROUP_M": group, "epilogue": None})
    for programs in (128, 66):
        out.append({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "stages": 3, "consumer_warps": 8,
                    "GROUP_M": 16, "epilogue": None, "num_programs": programs})
    return out


def quick_grid() -> list[dict[str, Any]]:
    """The finalists of the full tuning grid on an H200, for ``--quick``
    (docs/validation/2026-11-23-h200-1257/run-c/gluon_gemm_tune.md)."""
    wide = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "consumer_warps": 8}
    return [{**wide, "stages": 3, "GROUP_M": 16, "epilogue": None},
            {**wide, "stages": 3, "GROUP_M": 16, "epilogue": None, "num_programs": 128},
            {**wide, "stages": 3, "GROUP_M": 4, "epilogue": "2x2"},
            {**wide, "stages": 4, "GROUP_M": 16, "epilogue": None}]


def gpu_state() -> dict[str, float] | None:
    """Temperature (C), SM clock (MHz) and power (W) of GPU 0 now, from nvidia-smi; None where it cannot tell."""
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "-i", "0", "--query-gpu=temperature.gpu,clocks.sm,power.draw",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10).stdout
        temp, clock, power = (float(x) for x in out.strip().split(","))
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return {"temp_c": temp, "sm_mhz": clock, "power_w": power}


def launch_kwargs(cfg: dict[str, Any]) -> dict[str, Any]:
    """launch_gluon_gemm's keyword arguments for a grid() entry."""
    kw = {k: cfg[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "stages", "consumer_warps", "GROUP_M")}
    if cfg.get("num_programs"):
        kw["num_programs"] = cfg["num_programs"]
    epi = cfg.get("epilogue")
    if epi == "masked":
        kw["epilogue_tma"] = False
    elif epi:
        split, bufs = (int(x) for x in epi.split("x"))
        kw.update(epilogue_tma=True, epi_split=split, epi_bufs=bufs)
    return kw


def label(cfg: dict[str, Any]) -> str:
    text = (f"{cfg['BLOCK_M']}x{cfg['BLOCK_N']}x{cfg['BLOCK_K']} s{cfg['stages']} w{cfg['consumer_warps']} "
            f"G{cfg['GROUP_M']} epi={cfg.get('epilogue') or 'plan'}")
    return text + (f" programs={cfg['num_programs']}" if cfg.get("num_programs") else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_common_options(parser)
    parser.add_argument("--rounds", type=int, default=7, help="stage 2 rounds (torch, candidate, ...)")
    parser.add_argument("--top", type=int, default=3, help="stage 1's fastest configurations re-timed in stage 2")
    parser.add_argument("--budget", type=float, default=150.0, help="seconds of stage 1 before the rest is skipped")
    parser.add_argument("--cooldown", type=float, default=1.0, help="idle seconds before each stage 2 timing")
    parser.add_argument("--quick", action="store_true", help="stage 1 = quick_grid(), all of it to stage 2")
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    started = time.monotonic()

    import torch
    import triton
    import triton.testing

    from reference_kernels.triton import gluon_gemm as gg

    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to measure")
        return 2
    reason = gg.unavailable_reason("cuda")
    if reason:
        print(f"the Gluon GEMM cannot run here: {reason}")
        return 2
    n = args.size
    dtype = getattr(torch, args.dtype)
    a, b = square_inputs(n, dtype)
    expected = torch.matmul(a, b).float()
    expected_max, expected_norm = expected.abs().max().item(), expected.norm().item()
    flops = 2.0 * n ** 3
    props = torch.cuda.get_device_properties(0)

    def bench(fn: Any) -> float:
        return float(triton.testing.do_bench(fn, rep=args.rep, return_mode="median"))

    def tflops(ms: float) -> float:
        return flops / (ms * 1e-3) / 1e12

    def prepare(cfg: dict[str, Any]) -> Any:
        c = torch.full((n, n), float("nan"), device="cuda", dtype=dtype)
        kw = launch_kwargs(cfg)
        gg.launch_gluon_gemm(a, b, c, **kw)
        torch.cuda.synchronize()
        diff = c.float() - expected
        err, rel = diff.abs().max().item(), diff.norm().item() / expected_norm
        if not (err <= 1e-2 * expected_max and rel <= 2e-3):
            raise AssertionError(f"wrong result vs torch.matmul: max abs err {err:.3g}, rel Frobenius err {rel:.3g}")
        return lambda: gg.launch_gluon_gemm(a, b, c, **kw)

    torch_ms = bench(lambda: torch.matmul(a, b))
    rows: list[dict[str, Any]] = []
    default_cfg = {**gg.GPU_CONFIG, "epilogue": None}
    configs = quick_grid() if args.quick else grid()
    if default_cfg not in configs:
        configs.insert(0, default_cfg)
    for cfg in configs:
        row: dict[str, Any] = {"config": cfg, "label": label(cfg), "ms": None, "tflops": None, "error": None}
        if time.monotonic() - started > args.budget:
            row["error"] = f"skipped: stage 1's time budget ({args.budget:.0f} s) was spent"
        else:
            try:
                row["ms"] = bench(prepare(cfg))
                row["tflops"] = tflops(row["ms"])
                row["vs_torch"] = torch_ms / row["ms"]
            except Exception as exc:
                text = str(exc).strip()
                row["error"] = f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"
                row["traceback"] = traceback.format_exc(limit=3)
        shown = f"{row['tflops']:.0f} TFLOP/s" if row["tflops"] else row["error"]
        print(f"[{time.monotonic() - started:6.1f}s] {row['label']:58s} {shown}", flush=True)
        rows.append(row)

    timed = sorted((r for r in rows if r["tflops"]), key=lambda r: -r["tflops"])
    finalists = timed if args.quick else timed[:args.top]
    default_row = next((r for r in rows if r["config"] == default_cfg), None)
    if default_row is not None and default_row["tflops"] and default_row not in finalists:
        finalists.append(default_row)
    runs: dict[str, Callable[[], Any]] = {"torch.matmul": lambda: torch.matmul(a, b)}
    runs.update({r["label"]: prepare(r["config"]) for r in finalists})
    from reference_kernels.triton import gemm as ref

    ref_cfg: dict[str, Any] = dict(ref.gpu_config((props.major, props.minor)))
    ref_path, _ = ref.select_path(a, b, **ref_cfg, kernel=ref.gemm_kernel)
    ref_label = f"context: reference Triton GEMM launcher default (path {ref_path})"
    try:
        c_ref = torch.empty((n, n), device="cuda", dtype=dtype)
        runs[ref_label] = lambda: ref.launch_gemm(ref.gemm_kernel, a, b, c_ref, **ref_cfg)
        runs[ref_label]()
    except Exception as exc:  # context only: its failure must not end the tuning run
        print(f"reference Triton GEMM not timed: {type(exc).__name__}: {exc}")
        runs.pop(ref_label, None)
    names = list(runs)
    rounds: list[dict[str, float]] = []
    states: list[dict[str, Any]] = []
    for i in range(args.rounds):
        one: dict[str, float] = {}
        for name in names[i % len(names):] + names[:i % len(names)]:
            time.sleep(args.cooldown)
            states.append({"round": i, "entry": name, "before": gpu_state()})
            one[name] = bench(runs[name])
        rounds.append(one)
    final = []
    others = [{"label": name, "config": {}} for name in names if name == ref_label]
    for r in finalists + others:
        ratios = [rd["torch.matmul"] / rd[r["label"]] for rd in rounds]
        kernel_ms = statistics.median(rd[r["label"]] for rd in rounds)
        final.append({"label": r["label"], "config": r["config"], "median_ms": kernel_ms,
                      "tflops": tflops(kernel_ms), "vs_torch_median": statistics.median(ratios),
                      "vs_torch_min": min(ratios), "vs_torch_max": max(ratios)})
    final.sort(key=lambda f: (f["label"] == ref_label, -f["vs_torch_median"]))
    torch_med = statistics.median(rd["torch.matmul"] for rd in rounds) if rounds else torch_ms
    best = next((f for f in final if f["label"] != ref_label), None)
    temps = [s["before"]["temp_c"] for s in states if s["before"]]

    meta = {"gpu": props.name, "sm_count": props.multi_processor_count, "capability": f"{props.major}.{props.minor}",
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join([sys.executable, *sys.argv]), "torch": torch.__version__,
            "triton": triton.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
            "size": n, "dtype": args.dtype, "timing": f"triton.testing.do_bench median, rep={args.rep} ms",
            "rounds": args.rounds, "cooldown_s": args.cooldown,
            "temp_c_range": [min(temps), max(temps)] if temps else None, "torch_ms_stage1": torch_ms, "torch_ms_stage2_median": torch_med,
            "seconds": round(time.monotonic() - started, 1),
            "goal": f"median over rounds of torch ms / kernel ms >= {GOAL}",
            "goal_met": bool(best and best["vs_torch_median"] >= GOAL), "best": best}
    with open(os.path.join(args.out_dir, "gluon_gemm_tune.json"), "w") as out:
        json.dump({"meta": meta, "stage1": rows, "stage2": final, "rounds": rounds, "gpu_states": states}, out, indent=2)

    lines = [f"# Gluon warp-specialized GEMM tuning, {n}^3 {args.dtype}", "",
             f"GPU {meta['gpu']} ({meta['sm_count']} SMs), {meta['date']}, torch {meta['torch']}, triton "
             f"{meta['triton']}, CUDA {meta['cuda']}", "",
             f"Command: `{meta['command']}`; timing: {meta['timing']}; {meta['seconds']} s", "",
             f"## Stage 1: every configuration once (torch.matmul {tflops(torch_ms):.0f} TFLOP/s)", "",
             "| configuration | ms | TFLOP/s | vs torch | error |", "|---|---|---|---|---|"]
    def fmt(value: float | None, spec: str, scale: float = 1.0, unit: str = "") -> str:
        return "-" if value is None else f"{scale * value:{spec}}{unit}"

    for r in rows:
        lines.append(f"| {r['label']} | {fmt(r['ms'], '.4f')} | {fmt(r['tflops'], '.0f')} | "
                     f"{fmt(r.get('vs_torch'), '.1f', 100, '%')} | {r['error'] or ''} |")
    temp_text = (f"; GPU {meta['temp_c_range'][0]:.0f}-{meta['temp_c_range'][1]:.0f} C before the timings"
                 if meta["temp_c_range"] else "")
    lines += ["", f"## Stage 2: {args.rounds} rounds alternating torch.matmul and each finalist, order rotating, "
              f"{args.cooldown:g} s idle before each timing (torch.matmul median {tflops(torch_med):.0f} TFLOP/s"
              f"{temp_text})", "",
              "| configuration | median ms | TFLOP/s | torch/kernel median | min | max |", "|---|---|---|---|---|---|"]
    for f in final:
        lines.append(f"| {f['label']} | {f['median_ms']:.4f} | {f['tflops']:.0f} | {100 * f['vs_torch_median']:.1f}% | "
                     f"{100 * f['vs_torch_min']:.1f}% | {100 * f['vs_torch_max']:.1f}% |")
    verdict = (f"best: {best['label']}: {best['tflops']:.0f} TFLOP/s, {100 * best['vs_torch_median']:.1f}% of "
               f"torch.matmul (median of {args.rounds} rounds)" if best else "no configuration has a number")
    lines += ["", f"Goal (>= {100 * GOAL:.0f}% of torch.matmul): {'met' if meta['goal_met'] else 'NOT met'}; {verdict}"]
    with open(os.path.join(args.out_dir, "gluon_gemm_tune.md"), "w") as out:
        out.write("\n".join(lines) + "\n")
    print("\n".join(lines[-(len(final) + 6):]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
