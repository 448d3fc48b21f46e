"""Benchmark the Hopper TMA + WGMMA GEMM against torch.matmul (cuBLAS) at 4096^3 and 8192^3, bf16.

    python scripts/gpu/hopper_gemm_bench.py OUT_DIR [--sizes 4096,8192] [--budget-s 150]

Writes OUT_DIR/hopper_gemm_bench.json and OUT_DIR/hopper_gemm_bench.md (GPU, date, command, versions)
and prints the table. Measured in the same run: torch.matmul(a, b.t()) (bf16 out, cuBLAS) and
``a.float() @ b.float().t()`` is NOT timed (it is only the correctness reference); the Hopper kernel
at each variant: stage sweep 2..6 with 2 consumer warpgroups (128x128 tiles), 1 vs 2 consumer
warpgroups, and 128x256 tiles. Each variant is checked against the fp32 reference before it is timed
(a fast wrong kernel is reported as wrong, not as fast). Note: the Hopper kernel writes C in fp32
(4 bytes per element), cuBLAS here writes bf16: at 4096^3 that is 64 MB vs 32 MB of output traffic.

Timing: CUDA events around 10 back-to-back launches, median of 7 such samples after 3 warm-up
launches; hot L2 (GEMMs at these sizes are compute-bound). Every variant runs in its own
try/except and the whole run stops starting new variants after --budget-s seconds. No mutant (and
so nothing that can hang) is run here.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SAMPLES = 7
LAUNCHES_PER_SAMPLE = 10


def _time_us(fn: Any) -> float:
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(SAMPLES):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(LAUNCHES_PER_SAMPLE):
            fn()
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop) * 1000.0 / LAUNCHES_PER_SAMPLE)
    return statistics.median(samples)


def _variants() -> list[tuple[str, dict[str, int]]]:
    out = [(f"2 consumers, 128x128, {s} stages", {"stages": s, "consumers": 2, "bn": 128}) for s in (2, 3, 4, 5, 6)]
    out += [(f"1 consumer, 64x128, {s} stages", {"stages": s, "consumers": 1, "bn": 128}) for s in (2, 4, 6)]
    out += [(f"2 consumers, 128x256, {s} stages", {"stages": s, "consumers": 2, "bn": 256}) for s in (2, 3, 4)]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--sizes", default="4096,8192")
    parser.add_argument("--budget-s", type=float, default=150.0)
    args = parser.parse_args(argv)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    report: dict[str, Any] = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "rows": [],
        "errors": [],
    }
    try:
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference must be fp32
        report["gpu"] = torch.cuda.get_device_name(0)
        props = torch.cuda.get_device_properties(0)
        report["sm_count"] = props.multi_processor_count
        report["torch"] = torch.__version__
        report["cuda"] = torch.version.cuda
        from pytest_pipecheck import toolkit
        from reference_kernels.hopper import launch as hl

        nvcc = toolkit.find_tool("nvcc")
        report["nvcc"] = nvcc.path if nvcc else None
    except Exception as exc:
        report["errors"].append(f"setup: {type(exc).__name__}: {exc}")
        _write(out_dir, report)
        print(json.dumps(report, indent=1))
        return 1

    for size in [int(s) for s in args.sizes.split(",")]:
        m = n = k = size
        flops = 2.0 * m * n * k
        try:
            gen = torch.Generator(device="cuda").manual_seed(size)
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
            b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=gen)
            ref = a.float() @ b.float().t()
            torch.cuda.synchronize()
        except Exception as exc:
            report["errors"].append(f"{size}: inputs: {type(exc).__name__}: {exc}")
            continue
        cublas_tflops = None
        try:
            us = _time_us(lambda a=a, b=b: torch.matmul(a, b.t()))
            cublas_tflops = flops / us / 1e6
            report["rows"].append({"size": size, "kernel": "torch.matmul (cuBLAS, bf16 out)", "us": round(us, 2),
                                   "tflops": round(cublas_tflops, 1), "vs_cublas": 1.0, "max_abs_err": None})
        except Exception as exc:
            report["errors"].append(f"{size}: torch.matmul: {type(exc).__name__}: {exc}")
        for label, kw in _variants():
            if time.monotonic() - t_start > args.budget_s:
                report["errors"].append(f"{size}: {label}: skipped, time budget of {args.budget_s} s spent")
                continue
            row: dict[str, Any] = {"size": size, "kernel": f"hopper TMA+WGMMA: {label}", **kw}
            try:
                variant = hl.Variant(**kw)
                c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
                launch = hl.prepare(a, b, c, variant=variant)
                launch()
                torch.cuda.synchronize()
                err = float((c - ref).abs().max().item())
                row["max_abs_err"] = err
                tol = 1e-3 * math.sqrt(k) + 1e-3 * float(ref.abs().max().item())
                if not math.isfinite(err) or err > tol:
                    row["error"] = f"WRONG RESULT: max abs err {err:.3g} > {tol:.3g}; not timed"
                else:
                    us = _time_us(launch)
                    row["us"] = round(us, 2)
                    row["tflops"] = round(flops / us / 1e6, 1)
                    if cublas_tflops:
                        row["vs_cublas"] = round(row["tflops"] / cublas_tflops, 3)
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
                report["errors"].append(f"{size}: {label}: {traceback.format_exc()[-1500:]}")
            report["rows"].append(row)
            print(json.dumps(row), flush=True)
        a = b = ref = c = None  # free this size's buffers before the next one
        torch.cuda.empty_cache()
    report["seconds"] = round(time.monotonic() - t_start, 1)
    _write(out_dir, report)
    print((out_dir / "hopper_gemm_bench.md").read_text())
    return 0


def _write(out_dir: Path, report: dict[str, Any]) -> None:
    (out_dir / "hopper_gemm_bench.json").write_text(json.dumps(report, indent=1))
    lines = [
        "# Hopper TMA + WGMMA GEMM vs torch.matmul (bf16 in, fp32 accumulate)",
        "",
        f"- GPU: {report.get('gpu')} ({report.get('sm_count')} SMs); torch {report.get('torch')}, "
        f"CUDA {report.get('cuda')}; nvcc {report.get('nvcc')}",
        f"- date: {report['date']}; command: `{report['command']}`; {report.get('seconds', '?')} s",
        "- timing: CUDA events, median of 7 samples of 10 back-to-back launches, hot L2; the Hopper kernel "
        "writes fp32 C, cuBLAS bf16 C",
        "",
        "| M=N=K | kernel | us | TFLOP/s | vs cuBLAS | max abs err vs fp32 |",
        "|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        err = r.get("max_abs_err")
        err_s = "" if err is None else f"{err:.2e}"
        if "error" in r:
            lines.append(f"| {r['size']} | {r['kernel']} | - | - | - | {err_s} {r['error']} |")
        else:
            lines.append(f"| {r['size']} | {r['kernel']} | {r.get('us')} | {r.get('tflops')} | "
                         f"{r.get('vs_cublas', '')} | {err_s} |")
    if report["errors"]:
        lines += ["", "## Errors", ""] + [f"- {e.splitlines()[-1] if e.strip() else e}" for e in report["errors"]]
    (out_dir / "hopper_gemm_bench.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
