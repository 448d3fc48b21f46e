"""Does this Triton really warp-specialize the persistent TMA GEMM on this GPU, and which loop form?

    python3 scripts/gpu/ws_partition_probe.py OUTDIR

For the reference kernel (reference_kernels/triton/persistent_ws_gemm.py) with warp_specialize on the
inner K loop and on the outer (flattened) tile loop, at 4 and 8 warps: compile and run it, check the
result against torch at a ragged shape, read the compiled TTGIR through pipecheck's inspect check
(partitions or not, and why), and time it at 4096^3 fp16 against torch.matmul. Writes OUTDIR.md and
OUTDIR.json.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else "ws_partition_probe")
    import torch
    import triton
    import triton.testing

    from pytest_pipecheck.inspect.triton_ir import analyze_triton
    from reference_kernels.triton import persistent_ws_gemm as ws

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    n = 4096
    a = torch.randn((n, n), device="cuda", dtype=torch.float16)
    b = torch.randn((n, n), device="cuda", dtype=torch.float16)
    c = torch.empty((n, n), device="cuda", dtype=torch.float16)
    torch_ms = triton.testing.do_bench(lambda: torch.matmul(a, b), rep=200)
    rows: list[dict[str, Any]] = []
    for loop in ("inner", "outer"):
        for warps in (4, 8):
            cfg = {**ws.GPU_CONFIG, "warps": warps, "ws_loop": loop}
            row: dict[str, Any] = {"ws_loop": loop, "warps": warps}
            try:
                m, k_, nn = 1000, 552, 776  # ragged M and K (552 = 8 x 64 + 40); rows stay 16-byte multiples (TMA)
                ra = torch.randint(-2, 3, (m, k_), device="cuda").to(torch.float16)
                rb = torch.randint(-2, 3, (k_, nn), device="cuda").to(torch.float16)
                rc = torch.full((m, nn), float("nan"), device="cuda", dtype=torch.float16)
                compiled = ws.launch({"a": ra, "b": rb, "c": rc}, cfg, sms)
                torch.cuda.synchronize()
                row["exact"] = bool(torch.equal(rc.float(), ra.float() @ rb.float()))
                ir = analyze_triton(compiled)
                row["warp_specialized"] = ir.warp_specialized
                row["partitions"] = ir.partitions
                row["why"] = ir.warp_specialize_reason
                ms = triton.testing.do_bench(lambda cfg=cfg: ws.launch({"a": a, "b": b, "c": c}, cfg, sms), rep=200)
                row["ms"] = round(ms, 4)
                row["tflops"] = round(2 * n**3 / ms / 1e9, 1)
                row["of_torch"] = round(torch_ms / ms, 3)
            except Exception as exc:  # a compile failure is a row, not a crash
                row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            rows.append(row)
            print(row, flush=True)
    lines = ["# Persistent TMA GEMM: is the loop warp-specialized?", "",
             f"GPU {torch.cuda.get_device_name(0)}, Triton {triton.__version__}, torch {torch.__version__}, "
             f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}",
             f"command: `python3 scripts/gpu/ws_partition_probe.py {out}`; torch.matmul 4096^3: "
             f"{2 * n**3 / torch_ms / 1e9:.0f} TFLOP/s", "",
             "| ws loop | warps | exact at 1000x776x552 | warp-specialized | partitions | TFLOP/s | of torch | note |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['ws_loop']} | {r['warps']} | {r.get('exact', '-')} | {r.get('warp_specialized', '-')} | "
                     f"{r.get('partitions', '-')} | {r.get('tflops', '-')} | {r.get('of_torch', '-')} | "
                     f"{r.get('error') or r.get('why') or ''} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1, default=str))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
