"""What compute-sanitizer reports for warpgroup MMA (wgmma), with and without ``--check-warpgroup-mma``.

    python3 scripts/gpu/warpgroup_probe.py OUTDIR

Two parts, each child process launching one kernel once under one compute-sanitizer tool:

1. The wgmma targets of tests/gpu/sanitizer_targets/targets.py (one warpgroup, one
   ``wgmma.mma_async``, sm_90a): the correct tile (its result checked against the host), the tile whose
   last warp skips the wgmma (synccheck) and the tile whose B descriptor points past the block's shared
   memory (memcheck), each with ``--check-warpgroup-mma yes`` and ``no``, so the table shows which
   findings that option alone reports.
2. Triton's TMA GEMM of tests/data/sass/triton_gemm.py, plain and warp-specialized (512^3, exact integer
   inputs), under synccheck with both options and ``--show-backtrace device``: the barrier errors that
   compute-sanitizer 2026.4.0 reported in the warp-specialized one, in full, for triage.

Every compute-sanitizer found is used: pipecheck's discovery (the pinned package when installed) and the
toolkit's on PATH, when they differ. The raw output of every child is kept in OUTDIR/raw/. Writes
OUTDIR/warpgroup_probe.md and .json.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

TARGETS = ROOT / "tests" / "gpu" / "sanitizer_targets" / "targets.py"
KERNELS = {"clean": ("WGMMA", "wgmma_tile"), "skips_a_warp": ("WGMMA_SKIP", "wgmma_skips_a_warp"),
           "desc_oob": ("WGMMA_DESC_OOB", "wgmma_desc_oob")}

CHILD_WGMMA = r"""
import sys
import cupy as cp
cp.cuda.set_allocator(None)
path, name = sys.argv[1], sys.argv[2]
fn = cp.RawModule(path=path).get_function(name)
a = cp.asarray((cp.arange(64 * 16) % 7 - 3).reshape(64, 16), dtype=cp.float16)
b = cp.asarray((cp.arange(16 * 8) % 5 - 2).reshape(16, 8), dtype=cp.float16)
d = cp.full((64, 8), float("nan"), dtype=cp.float32)
fn((1,), (128,), (a, b, d))
cp.cuda.runtime.deviceSynchronize()
want = a.astype(cp.float32) @ b.astype(cp.float32)
print("RESULT exact" if bool(cp.array_equal(d, want)) else
      f"RESULT differs: max |d - ref| = {float(cp.nanmax(cp.abs(d - want)))}, nan {int(cp.isnan(d).sum())}")
"""

CHILD_TRITON = r"""
import sys
import importlib.util
import torch, triton
sys.path.insert(0, sys.argv[2])

def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

# the launch of tests/gpu/test_inspect_gpu.py (512^3, small integers, the result checked exactly)
gemm = load("triton_gemm_probe", sys.argv[1])
inspect_test = load("inspect_gpu_probe", sys.argv[2] + "/tests/gpu/test_inspect_gpu.py")
try:
    k = inspect_test._launch_tma(torch, triton, gemm, sys.argv[3] == "ws")
except AssertionError as exc:
    print("RESULT differs:", exc)
else:
    print("RESULT exact")
    print("PARTITIONS", "ttg.warp_specialize" in k.asm.get("ttgir", ""))
"""

_HEAD = re.compile(r"^========= (?P<head>(?:Barrier error|Warpgroup MMA sequence error|Invalid __\w+__ \w+|"
                   r"Uninitialized|Error|Warning|Program hit)[^\n]*)", re.M)
_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")


def _targets() -> dict[str, str]:
    text = TARGETS.read_text()
    body = text[text.index('WGMMA = r"""'):text.index('NEVER_WAITS = r"""')]
    ns: dict[str, str] = {}
    exec(body, ns)  # the three source strings and the .replace() edits that derive the mutants
    return {key: ns[var] for key, (var, _) in KERNELS.items()}


def _sanitizers() -> list[tuple[str, str, str]]:
    """(label, path, version) of each distinct compute-sanitizer: pipecheck's discovery, then PATH's."""
    from pytest_pipecheck.sanitizer.locate import find_compute_sanitizer

    out: list[tuple[str, str, str]] = []
    found = find_compute_sanitizer()
    if found is not None:
        out.append(("discovery", str(found.path), str(found.version)))
    on_path = shutil.which("compute-sanitizer")
    if on_path and all(os.path.realpath(on_path) != os.path.realpath(p) for _, p, _ in out):
        ver = subprocess.run([on_path, "--version"], capture_output=True, text=True).stdout
        m = re.search(r"Version (\S+)", ver)
        out.append(("PATH", on_path, m.group(1) if m else "?"))
    return out


def _knows_option(san: str) -> bool:
    return "check-warpgroup-mma" in subprocess.run([san, "--help"], capture_output=True, text=True).stdout


def _run(out: Path, label: str, san: str, tool: str, option: str | None, child: list[str]) -> dict:
    cmd = [san, "--tool", tool, "--error-exitcode", "86", "--show-backtrace", "device", "--print-limit", "200"]
    if option is not None:
        cmd += ["--check-warpgroup-mma", option]
    cmd += [sys.executable, *child]
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240,
                              env=dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1"))
        text, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        text, rc = f"{exc.stdout or ''}{exc.stderr or ''}\nTIMEOUT after 240 s", None
    raw = out / "raw" / f"{label}.txt"
    raw.write_text(" ".join(cmd) + "\n\n" + text)
    heads: dict[str, int] = {}
    for m in _HEAD.finditer(text):
        head = re.sub(r"\s+", " ", m.group("head")).strip()
        heads[head] = heads.get(head, 0) + 1
    summary = _SUMMARY.search(text)
    result = next((ln[len("RESULT "):] for ln in text.splitlines() if ln.startswith("RESULT ")), "no result")
    frames = sorted({ln.split("=========", 1)[1].strip() for ln in text.splitlines()
                     if re.match(r"^=========\s+(at|Device Frame:) ", ln)})[:12]
    return {"run": label, "rc": rc, "errors": int(summary.group(1)) if summary else None, "heads": heads,
            "result": result, "seconds": round(time.monotonic() - t0, 1), "device_frames": frames}


def main(argv: list[str]) -> int:
    out = Path(argv[1] if len(argv) > 1 else "warpgroup_probe")
    (out / "raw").mkdir(parents=True, exist_ok=True)
    from pytest_pipecheck.toolkit import compile_cuda

    tmp = Path(tempfile.mkdtemp(prefix="wgmma-probe-"))
    wchild, tchild = tmp / "wgmma_child.py", tmp / "triton_child.py"
    wchild.write_text(CHILD_WGMMA)
    tchild.write_text(CHILD_TRITON)
    cubins = {}
    for key, src in _targets().items():
        cubin = tmp / f"{key}.cubin"
        cubin.write_bytes(compile_cuda(src, "sm_90a", options=("-std=c++17",)).cubin)
        cubins[key] = cubin
    rows: list[dict] = []
    for slabel, san, version in _sanitizers():
        options: list[str | None] = ["yes", "no"] if _knows_option(san) else [None]
        for option in options:
            opt = option or "default"
            for key, tool in (("clean", "synccheck"), ("clean", "memcheck"), ("skips_a_warp", "synccheck"),
                              ("desc_oob", "memcheck")):
                row = _run(out, f"{slabel}-{tool}-wgmma-{key}-{opt}", san, tool, option,
                           [str(wchild), str(cubins[key]), KERNELS[key][1]])
                rows.append(dict(row, sanitizer=f"{slabel} {version}", option=opt, target=f"wgmma {key}", tool=tool))
            for variant in ("plain", "ws"):
                row = _run(out, f"{slabel}-synccheck-triton-{variant}-{opt}", san, "synccheck", option,
                           [str(tchild), str(ROOT / "tests" / "data" / "sass" / "triton_gemm.py"), str(ROOT), variant])
                rows.append(dict(row, sanitizer=f"{slabel} {version}", option=opt, target=f"triton tma {variant}",
                                 tool="synccheck"))
            print(json.dumps(rows[-1])[:400], flush=True)
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    (out / "warpgroup_probe.json").write_text(json.dumps({"gpu": gpu, "rows": rows}, indent=1))
    lines = [f"# warpgroup probe: {gpu}, {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}", "",
             "`python3 scripts/gpu/warpgroup_probe.py OUTDIR`; each row one child under "
             "`compute-sanitizer --tool T --show-backtrace device [--check-warpgroup-mma yes|no]`.", "",
             "| sanitizer | --check-warpgroup-mma | target | tool | errors | report heads | result | s |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        heads = "; ".join(f"{h} x{n}" for h, n in r["heads"].items()) or "-"
        lines.append(f"| {r['sanitizer']} | {r['option']} | {r['target']} | {r['tool']} | {r['errors']} | {heads} "
                     f"| {r['result']} | {r['seconds']} |")
    (out / "warpgroup_probe.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
