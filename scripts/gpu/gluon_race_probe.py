"""Where compute-sanitizer racecheck's hazards in the Gluon GEMM come from, and what Triton's ConSan says.

Usage (on a GPU, from the repository root):

    python3 scripts/gpu/gluon_race_probe.py OUT_DIR

The bundled suite's racecheck run of reference_kernels/triton/gluon_gemm.py reported WAR hazards
attributed to the kernel's ``def`` line. This script narrows them down: each variant below (a launch
configuration and one shape, chosen to switch on one part of the pipeline at a time: the staging
buffer of the TMA epilogue, the ring's wrap-around, several tiles per program) runs once in a child
process under

- ``compute-sanitizer --tool racecheck --racecheck-report hazard`` (every hazard with its shared
  memory address, threads and access kinds; the summary counts them), and
- Triton's concurrency sanitizer (``TRITON_INSTRUMENTATION_MODE=consan``), which instruments the
  kernel's own mbarrier, TMA and wgmma operations and aborts the kernel on an access that none of
  them orders.

Each child also compares C with torch.matmul. Writes OUT_DIR/gluon_race_probe.json and .md, and each
child's whole output as OUT_DIR/variantN_racecheck.log and variantN_consan.log.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from typing import Any

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, ROOT)

MASKED = {"epilogue_tma": False}
VARIANTS: list[tuple[str, dict[str, Any], tuple[int, int, int]]] = [
    # name, launch keywords, (M, K, N)
    ("1 tile, 1 K step, masked store", {**MASKED, "num_programs": 1}, (128, 64, 256)),
    ("1 tile, 1 K step, TMA store 2 chunks x 1 buffer", {"num_programs": 1}, (128, 64, 256)),
    ("1 tile, 16 K steps (ring wraps 4x), masked", {**MASKED, "num_programs": 1}, (128, 1024, 256)),
    ("4 tiles on 1 program, 16 K steps, masked", {**MASKED, "num_programs": 1}, (256, 1024, 512)),
    ("4 tiles on 1 program, 16 K steps, TMA 2x1", {"num_programs": 1}, (256, 1024, 512)),
    ("4 tiles on 1 program, 16 K steps, TMA 1x1 (3 stages)", {"stages": 3, "num_programs": 1}, (256, 1024, 512)),
]

_CHILD = r"""
import json, sys
import torch, triton
from reference_kernels.triton.gluon_gemm import launch_gluon_gemm
kw, (m, k, n) = json.loads(sys.argv[1]), json.loads(sys.argv[2])
triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
g = torch.Generator(device="cuda").manual_seed(0)
a = torch.randn(m, k, device="cuda", dtype=torch.float16, generator=g)
b = torch.randn(k, n, device="cuda", dtype=torch.float16, generator=g)
c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
launch_gluon_gemm(a, b, c, **kw)
torch.cuda.synchronize()
ref = a.float() @ b.float()
err = ((c.float() - ref).abs() / (ref.abs() + 1.0)).max().item()
print("RESULT " + json.dumps({"max_rel_err": err, "nan": bool(torch.isnan(c).any().item())}), flush=True)
"""


def _run(cmd: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
        rc, out = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as exc:
        parts = [x.decode(errors="replace") if isinstance(x, bytes) else (x or "") for x in (exc.stdout, exc.stderr)]
        rc, out = None, f"TIMEOUT after {timeout} s\n" + "".join(parts)
    result = next((json.loads(ln[7:]) for ln in out.splitlines() if ln.startswith("RESULT ")), None)
    return {"rc": rc, "seconds": round(time.monotonic() - t0, 1), "result": result, "output": out}


def _hazards(out: str) -> dict[str, Any]:
    """Racecheck's hazard lines summarized: counts per kind and shared-memory address, a few examples."""
    kinds: dict[str, int] = {}
    addresses: dict[str, int] = {}
    examples: list[str] = []
    lines = out.splitlines()
    for i, ln in enumerate(lines):
        m = re.search(r"(Error|Warning): Race reported between (\w+) access at (.+?) and\s*(\w+)? ?access", ln)
        if not m and "Race reported" not in ln and "Potential" not in ln:
            continue
        kind = re.search(r"(WAR|RAW|WAW)", " ".join(lines[i:i + 3]))
        key = kind.group(1) if kind else "race"
        kinds[key] = kinds.get(key, 0) + 1
        block = " | ".join(x.strip() for x in lines[i:i + 6])
        for addr in re.findall(r"__shared__ 0x[0-9a-f]+|address 0x[0-9a-f]+|\[0x[0-9a-f]+\]", block):
            addresses[addr] = addresses.get(addr, 0) + 1
        if len(examples) < 6:
            examples.append(block[:600])
    summary = next((ln.strip() for ln in lines if "RACECHECK SUMMARY" in ln), None)
    return {"kinds": kinds, "addresses": dict(sorted(addresses.items(), key=lambda kv: -kv[1])[:12]),
            "examples": examples, "summary": summary}


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "gluon_race_probe"
    os.makedirs(out_dir, exist_ok=True)
    from pytest_pipecheck.sanitizer.locate import HOW_TO_GET, find_compute_sanitizer

    found = find_compute_sanitizer()
    if found is None:
        sys.stderr.write(f"compute-sanitizer not found: {HOW_TO_GET}\n")
        return 2
    sanitizer = found.path
    env = {**os.environ, "PYTHONPATH": ROOT, "PYTHONUNBUFFERED": "1"}
    rows: list[dict[str, Any]] = []
    for i, (name, kw, shape) in enumerate(VARIANTS):
        args = [json.dumps(kw), json.dumps(list(shape))]
        rc_run = _run([sanitizer, "--tool", "racecheck", "--racecheck-report", "hazard", "--print-limit", "200",
                       sys.executable, "-c", _CHILD, *args], env, 240)
        consan = _run([sys.executable, "-c", _CHILD, *args],
                      {**env, "TRITON_INSTRUMENTATION_MODE": "consan", "TRITON_ALWAYS_COMPILE": "1"}, 240)
        row = {"variant": name, "launch": kw, "shape_MKN": shape,
               "racecheck": {"rc": rc_run["rc"], "seconds": rc_run["seconds"], "result": rc_run["result"],
                             **_hazards(rc_run["output"]), "tail": rc_run["output"][-1500:]},
               "consan": {"rc": consan["rc"], "seconds": consan["seconds"], "result": consan["result"],
                          "tail": consan["output"][-1500:]}}
        rows.append(row)
        for tool, run in (("racecheck", rc_run), ("consan", consan)):
            with open(os.path.join(out_dir, f"variant{i}_{tool}.log"), "w") as f:
                f.write(run["output"])
        print(f"{name}: racecheck {row['racecheck']['summary']} {row['racecheck']['kinds']}; consan rc "
              f"{consan['rc']} result {consan['result']}", flush=True)
    with open(os.path.join(out_dir, "gluon_race_probe.json"), "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rows": rows}, f, indent=2)
    lines = ["# Gluon GEMM: racecheck hazards by variant, and Triton ConSan", "",
             "| variant | M, K, N | racecheck summary | kinds | consan rc | consan result |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['shape_MKN']} | {r['racecheck']['summary']} | {r['racecheck']['kinds']} | "
                     f"{r['consan']['rc']} | {r['consan']['result']} |")
    with open(os.path.join(out_dir, "gluon_race_probe.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
