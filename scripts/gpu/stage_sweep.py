"""The Triton fp16 GEMM stage sweep on a GPU, with the occupancy check on.

Usage: python scripts/gpu/stage_sweep.py OUTDIR

For num_stages 1..5 (BM=BN=128, BK=64, 4 warps, 4096^3): the JIT-compiled kernel's live n_regs,
shared and n_spills; the ahead-of-time sm_90 numbers from the same arguments (must be equal); the
predicted blocks/SM against the driver's occupancy API on the compiled function; TFLOP/s with
triton.testing.do_bench; and the occupancy check against a floor of 2 blocks/SM (must flag stage 4).
Also compares pipecheck's architecture table with the device's attributes. Prints a table, writes
stage_sweep.json and stage_sweep.md into OUTDIR. Each case is caught and reported on its own.
"""

from __future__ import annotations

import datetime
import json
import platform
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch
import triton

from pytest_pipecheck.arch import compare_with_device
from pytest_pipecheck.occupancy import occupancy
from pytest_pipecheck.resources.triton import live_resources, triton_resources
from reference_kernels.triton.simple_gemm import gemm_kernel

CASE_TIMEOUT_S = 240


class _Timeout(Exception):
    pass


def _alarm(_sig: int, _frame: Any) -> None:
    raise _Timeout(f"case exceeded {CASE_TIMEOUT_S} s")


def live_occupancy(function_handle: int, threads: int, dyn: int) -> int | None:
    """The driver's cuOccupancyMaxActiveBlocksPerMultiprocessor on the compiled function, if reachable."""
    try:
        from cupy.cuda import driver

        return int(driver.occupancyMaxActiveBlocksPerMultiprocessor(function_handle, threads, dyn))
    except Exception:
        pass
    try:
        from cuda.bindings import driver as cdrv  # type: ignore

        err, n = cdrv.cuOccupancyMaxActiveBlocksPerMultiprocessor(cdrv.CUfunction(function_handle), threads, dyn)
        return int(n) if int(err) == 0 else None
    except Exception:
        return None


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "stage_sweep_out")
    out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGALRM, _alarm)
    props = torch.cuda.get_device_properties(0)
    arch = f"sm_{props.major}{props.minor}"
    doc: dict[str, Any] = {
        "gpu": props.name, "arch": arch, "sms": props.multi_processor_count,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([sys.executable, *sys.argv]), "python": platform.python_version(),
        "torch": torch.__version__, "triton": triton.__version__,
        "table_vs_device": compare_with_device(props), "cases": [],
    }
    try:
        import cupy

        doc["table_vs_device_cupy"] = compare_with_device(cupy.cuda.runtime.getDeviceProperties(0))
    except Exception as exc:
        doc["table_vs_device_cupy"] = f"unavailable: {exc}"
    n = 4096
    a = torch.randn((n, n), device="cuda", dtype=torch.float16)
    b = torch.randn((n, n), device="cuda", dtype=torch.float16)
    c = torch.empty((n, n), device="cuda", dtype=torch.float16)
    args = (a, b, c, n, n, n, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    grid = (triton.cdiv(n, 128), triton.cdiv(n, 128))
    tiles = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}
    for stages in range(1, 6):
        case: dict[str, Any] = {"num_stages": stages}
        signal.alarm(CASE_TIMEOUT_S)
        try:
            compiled = gemm_kernel[grid](*args, num_warps=4, num_stages=stages, **tiles)
            torch.cuda.synchronize()
            live = live_resources(compiled, arch)
            case.update(live_shared=live.dynamic_smem, live_regs=live.registers, live_spills=live.spill_stores)
            t0 = time.perf_counter()
            aot = triton_resources(gemm_kernel, args, arch=arch, num_warps=4, num_stages=stages, **tiles)
            case.update(aot_seconds=round(time.perf_counter() - t0, 3), aot_shared=aot.dynamic_smem,
                        aot_regs=aot.registers, aot_equals_live=(aot.dynamic_smem, aot.registers)
                        == (live.dynamic_smem, live.registers))
            occ = occupancy(arch, 128, live.registers, 0, live.dynamic_smem)
            case.update(predicted_blocks=occ.blocks_per_sm, limiter=occ.limiter, cliff=occ.cliff_text(2),
                        floor_2_flagged=occ.blocks_per_sm < 2)
            handle = getattr(compiled, "function", None)
            case["live_blocks"] = live_occupancy(int(handle), 128, live.dynamic_smem) if handle else None
            case["prediction_matches_live"] = (case["live_blocks"] == occ.blocks_per_sm
                                               if case["live_blocks"] is not None else None)
            ms = triton.testing.do_bench(lambda s=stages: gemm_kernel[grid](*args, num_warps=4, num_stages=s,
                                                                            **tiles))
            case.update(ms=ms, tflops=2 * n**3 / (ms * 1e-3) / 1e12)
        except Exception as exc:
            case["error"] = f"{type(exc).__name__}: {exc}"
            case["traceback"] = traceback.format_exc(limit=5)
        finally:
            signal.alarm(0)
        doc["cases"].append(case)
    try:
        ms = triton.testing.do_bench(lambda: torch.matmul(a, b))
        doc["cublas_tflops"] = 2 * n**3 / (ms * 1e-3) / 1e12
    except Exception as exc:
        doc["cublas_tflops"] = f"error: {exc}"
    head = ("stages shared regs spills | aot_shared aot_regs equal | pred live limiter          | TFLOP/s "
            "| floor2")
    lines = [head]
    for cs in doc["cases"]:
        if "error" in cs:
            lines.append(f"{cs['num_stages']:>6} ERROR {cs['error'][:100]}")
            continue
        lines.append(f"{cs['num_stages']:>6} {cs['live_shared']:>6} {cs['live_regs']:>4} {cs['live_spills']:>6} | "
                     f"{cs['aot_shared']:>10} {cs['aot_regs']:>8} {cs['aot_equals_live']!s:>5} | "
                     f"{cs['predicted_blocks']:>4} {cs['live_blocks']!s:>4} {cs['limiter']:<16} | "
                     f"{cs.get('tflops', 0):7.1f} | {'FLAG' if cs['floor_2_flagged'] else 'ok'}")
    table = "\n".join(lines)
    print(f"{doc['gpu']} ({arch}), triton {triton.__version__}, table vs device: "
          f"{doc['table_vs_device'] or 'agree'}")
    print(table)
    print(f"cuBLAS: {doc['cublas_tflops']}")
    (out / "stage_sweep.json").write_text(json.dumps(doc, indent=2, default=str))
    md = [f"# Triton GEMM stage sweep on {doc['gpu']} ({arch})", "",
          f"- date: {doc['date']}", f"- command: `{doc['command']}`",
          f"- torch {doc['torch']}, triton {doc['triton']}, python {doc['python']}",
          f"- arch table vs device (torch): {doc['table_vs_device'] or 'agree'}",
          f"- arch table vs device (cupy): {doc['table_vs_device_cupy'] or 'agree'}",
          f"- cuBLAS TFLOP/s: {doc['cublas_tflops']}", "", "```", table, "```", ""]
    (out / "stage_sweep.md").write_text("\n".join(md))
    ok = all("error" not in cs for cs in doc["cases"])
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
