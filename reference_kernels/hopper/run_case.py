"""Run the Hopper GEMM (or one mutant) at a few shapes and compare with a float64 reference.

Meant to run as a child process so that a hang (the expect-tx mutant) can only cost a timeout::

    python -m reference_kernels.hopper.run_case --shapes 129x257x72,1000x1000x1000 \
        [--mutant NAME] [--stages 4] [--consumers 2] [--bn 128] [--fp16] [--seed 0]

Shapes are MxNxK. C starts as NaN (an element the kernel never writes stays NaN). An element passes
when ``|c - ref| <= atol + rtol * |ref|`` with ``rtol = 1e-3`` and ``atol = 1e-3 * sqrt(K)`` (exact
bf16 products, fp32 sums: the summation-order error grows like sqrt(K); a dropped 64-wide K tile
moves an element by about 8, far outside this).

The last line printed is ``PIPECHECK-HOPPER-RESULT {json}``. Exit status: 0 every shape matched,
1 some shape mismatched (a wrong result: what the coverage check would report), 2 the kernel never
ran (compile error, unsupported GPU, a launch the driver refused, a Python error before the launch),
3 the kernel ran and faulted (a CUDA launch failure, illegal address or instruction reported by the
launch or by the synchronize after it: pipecheck's coverage check fails such a kernel too, as "the
kernel raised"). The message is in the JSON, and its ``outcome`` names the case (``match``,
``mismatch``, ``error``, ``crash``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import traceback
from typing import Any

RESULT_PREFIX = "PIPECHECK-HOPPER-RESULT "
RTOL = 1e-3
EXIT_MATCH, EXIT_MISMATCH, EXIT_ERROR, EXIT_CRASH = 0, 1, 2, 3
# how the CUDA runtime / driver / torch word a fault of a kernel that ran (lower case)
_FAULT_MARKERS = (
    "unspecified launch failure", "cudaerrorlaunchfailure", "cuda_error_launch_failed",
    "illegal memory access", "cudaerrorillegaladdress", "cuda_error_illegal_address",
    "illegal instruction", "cudaerrorillegalinstruction", "cuda_error_illegal_instruction",
    "misaligned address", "cudaerrormisalignedaddress", "cuda_error_misaligned_address",
    "hardware stack error", "cuda_error_hardware_stack_error",
    "invalid program counter", "cuda_error_invalid_pc",
)


class KernelFault(RuntimeError):
    """The kernel was launched and faulted on the device (reported by the launch or the synchronize)."""


def is_device_fault(exc: BaseException) -> bool:
    """Whether ``exc`` reports a fault of a kernel that ran (not a refused launch or a host error)."""
    text = f"{type(exc).__name__}: {exc}".lower()
    return any(marker in text for marker in _FAULT_MARKERS)


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    shapes = []
    for part in text.split(","):
        dims = part.strip().lower().split("x")
        if len(dims) != 3 or not all(d.isdigit() and int(d) > 0 for d in dims):
            raise SystemExit(f"bad shape {part!r}: expected MxNxK with positive integers")
        shapes.append((int(dims[0]), int(dims[1]), int(dims[2])))
    return shapes


def run_shape(m: int, n: int, k: int, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from .launch import Variant, prepare

    dtype = torch.float16 if args.fp16 else torch.bfloat16
    gen = torch.Generator(device="cpu").manual_seed(args.seed + m * 1_000_003 + n * 1009 + k)
    a = torch.randn(m, k, generator=gen).to(device="cuda", dtype=dtype)
    b = torch.randn(n, k, generator=gen).to(device="cuda", dtype=dtype)
    c = torch.full((m, n), float("nan"), dtype=torch.float32, device="cuda")
    variant = Variant(stages=args.stages, consumers=args.consumers, bn=args.bn, fp16=args.fp16)
    t0 = time.perf_counter()
    launch = prepare(a, b, c, variant=variant, mutant=args.mutant)  # compile, load, tensor maps: no kernel yet
    try:
        launch()
        torch.cuda.synchronize()
    except Exception as exc:
        if is_device_fault(exc):
            raise KernelFault(f"{m}x{n}x{k}: the kernel faulted: {type(exc).__name__}: {exc}") from exc
        raise
    seconds = time.perf_counter() - t0
    ref = a.double() @ b.double().t()
    diff = (c.double() - ref).abs()
    nan = int(torch.isnan(c).sum().item())
    atol = 1e-3 * math.sqrt(k)
    bad_mask = ~(diff <= atol + RTOL * ref.abs())  # NaN never passes
    bad = int(bad_mask.sum().item())
    finite = diff[~torch.isnan(diff)]
    worst = float(finite.max().item()) if finite.numel() else float("nan")
    first_bad = None
    if bad:
        idx = bad_mask.nonzero()[0].tolist()
        first_bad = {"row": idx[0], "col": idx[1], "got": float(c[idx[0], idx[1]].item()),
                     "want": float(ref[idx[0], idx[1]].item())}
    return {"shape": f"{m}x{n}x{k}", "ok": bad == 0, "bad": bad, "nan": nan, "total": m * n,
            "max_abs_err": worst, "atol": atol, "rtol": RTOL, "first_bad": first_bad,
            "first_call_seconds": round(seconds, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", required=True, help="comma-separated MxNxK list")
    parser.add_argument("--mutant", default=None)
    parser.add_argument("--stages", type=int, default=4)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--bn", type=int, default=128)
    parser.add_argument("--fp16", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    shapes = parse_shapes(args.shapes)
    out: dict[str, Any] = {"mutant": args.mutant, "stages": args.stages, "consumers": args.consumers,
                           "bn": args.bn, "fp16": args.fp16, "seed": args.seed, "results": []}
    status = EXIT_MATCH
    try:
        for m, n, k in shapes:
            # printed before each launch: if the child is killed by a timeout, the parent sees where
            print(f"running {m}x{n}x{k} mutant={args.mutant}", flush=True)
            r = run_shape(m, n, k, args)
            out["results"].append(r)
            print(json.dumps(r), flush=True)
            if not r["ok"]:
                status = EXIT_MISMATCH
    except KernelFault as exc:
        out["error"] = str(exc)
        out["traceback"] = traceback.format_exc()
        status = EXIT_CRASH  # the context is dead after a fault: no further shape can run
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["traceback"] = traceback.format_exc()
        status = EXIT_ERROR
    out["outcome"] = {EXIT_MATCH: "match", EXIT_MISMATCH: "mismatch", EXIT_ERROR: "error", EXIT_CRASH: "crash"}[status]
    out["status"] = status
    print(RESULT_PREFIX + json.dumps(out), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
