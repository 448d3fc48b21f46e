"""Where a sanitizer child's Triton compile time goes: the tool, the compiler, or the instrumentation of loads.

Usage: python3 scripts/gpu/sanitizer_compile_profile.py OUTDIR [--sets fla,gemm] [--variants plain,cold,warm,cold-app]

For each test set, runs ``pytest --pipecheck --pipecheck-tier=gpu`` over it with one tool (racecheck) and one
child, from caches of its own, four ways:

  plain        no sanitizer (``--pipecheck-sanitizer=none``), empty Triton cache: the compile and the checks at
               native speed
  cold         racecheck, empty Triton cache: what a first CI run pays
  warm         racecheck, the Triton cache ``plain`` left: the compiles are cache hits, so what is left of
               the child's compile seconds is loading (and instrumenting) the binaries
  cold-app     racecheck, empty Triton cache, ``--target-processes application-only``: the tool is not
               injected into the compiler's own processes (ptxas)

Each run's wall time, its sanitizer children's test and compile seconds (from the JSON report) and its verdicts
go to OUTDIR/compile_profile.json and .md, with the GPU, the date and the commands.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

SETS: dict[str, list[str]] = {
    # fla-core's autotuned l2norm at the shape that cost most under the sanitizer (every config compiled)
    "fla": ["examples/fla/test_fla.py", "-k", "test_l2norm and T17-D319 and normal and contiguous"],
    # the bundled Triton GEMM's default cases (one kernel, many shapes, value patterns and layouts)
    "gemm": ["reference_kernels/triton/test_reference_triton.py", "-k", "test_reference_kernel and triton_gemm_float16"],
}


def _sanitizer() -> str:
    sys.path.insert(0, str(ROOT))
    from pytest_pipecheck.sanitizer.locate import find_compute_sanitizer

    found = find_compute_sanitizer()
    if found is None:
        raise SystemExit("no compute-sanitizer found")
    return str(found.path)


def _wrapper(real: str, folder: Path) -> str:
    """An executable that runs ``real`` with ``--target-processes application-only`` before its arguments."""
    path = folder / "compute-sanitizer"
    path.write_text(f'#!/bin/sh\nexec "{real}" --target-processes application-only "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)


def _summary(report: Path) -> dict[str, Any]:
    try:
        doc = json.loads(report.read_text())
    except (OSError, ValueError) as exc:
        return {"error": f"no report: {exc}"}
    tests = sum(1 for _ in doc.get("tests") or [])
    verdicts: dict[str, str] = {}
    test_s = compile_s = 0.0
    walls: set[float] = set()
    for r in doc.get("results") or []:
        verdicts[f"{r.get('nodeid')}|{r.get('check')}"] = str(r.get("verdict"))
        d = r.get("details") or {}
        if str(r.get("check", "")).startswith("sanitizer:"):
            test_s += float(d.get("test_seconds") or 0.0)
            compile_s += float(d.get("compile_seconds") or 0.0)
            if d.get("child_wall_s") is not None:
                walls.add(float(d["child_wall_s"]))
    return {"ok": doc.get("ok"), "tests": tests, "verdicts": verdicts, "sanitizer_test_s": round(test_s, 2),
            "sanitizer_compile_s": round(compile_s, 2), "child_wall_s": sorted(walls)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--sets", default="fla,gemm")
    ap.add_argument("--variants", default="plain,cold,warm,cold-app")
    ap.add_argument("--no-startup", action="store_true", help="leave out the start-up timings")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    real = _sanitizer()
    scratch = Path(tempfile.mkdtemp(prefix="pipecheck-compile-profile-"))
    wrapper = _wrapper(real, scratch)
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True, check=False).stdout.strip()
    runs: list[dict[str, Any]] = []
    startup = "import torch, triton; torch.zeros(1, device='cuda'); torch.cuda.synchronize()"
    starts = [] if args.no_startup else [("python", []), ("racecheck", [real, "--tool", "racecheck"]),
                                         ("racecheck-app", [wrapper, "--tool", "racecheck"])]
    for variant, prefix in starts:
        start = time.monotonic()
        proc = subprocess.run([*prefix, sys.executable, "-c", startup], cwd=ROOT, capture_output=True, text=True,
                              check=False)
        row = {"set": "start-up", "variant": variant, "wall_s": round(time.monotonic() - start, 2),
               "rc": proc.returncode, "command": " ".join([*prefix, "python", "-c", repr(startup)])}
        runs.append(row)
        print(json.dumps(row), flush=True)
    for name in args.sets.split(","):
        selection = SETS[name]
        plain_cache = scratch / name / "plain" / "triton"
        for variant in args.variants.split(","):
            caches = scratch / name / variant
            env = dict(os.environ, CUPY_CACHE_DIR=str(caches / "cupy"), PIPECHECK_CACHE_DIR=str(caches / "pipecheck"))
            if variant == "warm" and plain_cache.is_dir():
                shutil.copytree(plain_cache, caches / "triton")
            env["TRITON_CACHE_DIR"] = str(caches / "triton")
            env.pop("PIPECHECK_COMPUTE_SANITIZER", None)
            if variant == "cold-app":
                env["PIPECHECK_COMPUTE_SANITIZER"] = wrapper
            report = out / f"{name}-{variant}.json"
            cmd = [sys.executable, "-m", "pytest", "--pipecheck", "--pipecheck-tier=gpu", "-p", "no:cacheprovider",
                   "-q", f"--pipecheck-json={report}", "--pipecheck-sanitizer-jobs=1",
                   "--pipecheck-sanitizer=" + ("none" if variant == "plain" else "racecheck"), *selection]
            start = time.monotonic()
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
            wall = time.monotonic() - start
            (out / f"{name}-{variant}.log").write_text(proc.stdout + proc.stderr)
            row = {"set": name, "variant": variant, "wall_s": round(wall, 2), "rc": proc.returncode,
                   "command": " ".join(cmd[1:]), **_summary(report)}
            runs.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "verdicts"}), flush=True)
    doc = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "gpu": gpu,
           "compute_sanitizer": real, "runs": runs}
    (out / "compile_profile.json").write_text(json.dumps(doc, indent=1))
    lines = [f"# Sanitizer compile profile, {doc['date']}, {gpu}", "",
             "| set | variant | wall s | rc | tests | sanitizer test s | of which compile+load s |",
             "|---|---|---|---|---|---|---|"]
    for r in runs:
        lines.append(f"| {r['set']} | {r['variant']} | {r['wall_s']} | {r['rc']} | {r.get('tests')} | "
                     f"{r.get('sanitizer_test_s')} | {r.get('sanitizer_compile_s')} |")
    (out / "compile_profile.md").write_text("\n".join(lines) + "\n")
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
