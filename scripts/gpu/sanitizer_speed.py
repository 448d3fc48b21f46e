"""Sanitizer batching speed: pipecheck's racecheck run of 20 clean tests vs one plain compute-sanitizer run.

Usage: python3 scripts/gpu/sanitizer_speed.py OUTDIR

Writes 20 small clean CuPy tests into a temporary project, then times
  A) ``compute-sanitizer --tool racecheck python -m pytest -q -p no:cacheprovider <tests>`` (one process)
  B) ``python -m pytest --pipecheck --pipecheck-sanitizer=racecheck --pipecheck-checks=sanitizer <tests>``
     (the parent runs the tests normally too; the sanitizer time is read from pipecheck's progress
     line "racecheck: done in X s", which covers the child and its canary)
and writes OUTDIR/sanitizer_speed.json and .md with the GPU, date, commands and numbers. Goal: B/A <= 1.3.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TEST = '''
import pytest
cp = pytest.importorskip("cupy")
SRC = r"""
extern "C" __global__ void scale(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
"""
_k = None

def _kernel():
    global _k
    if _k is None:
        _k = cp.RawModule(code=SRC, options=("--generate-line-info",)).get_function("scale")
    return _k

@pytest.mark.parametrize("n", [1 + 37 * i for i in range(20)])
def test_scale(pipecheck, n):
    x = cp.arange(n, dtype=cp.float32)
    y = cp.zeros(n, dtype=cp.float32)
    _kernel()(((n + 127) // 128,), (128,), (x, y, cp.int32(n)))
    cp.cuda.runtime.deviceSynchronize()
    assert float(y[-1]) == 2.0 * (n - 1)
'''


def _run(cmd: list[str], cwd: str, timeout: float) -> tuple[float, int | None, str]:
    start = time.monotonic()
    try:
        p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
        return time.monotonic() - start, p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return time.monotonic() - start, None, out + "\nTIMEOUT"


def main() -> int:
    if len(sys.argv) != 2:
        sys.stderr.write(__doc__ or "")
        return 2
    outdir = Path(sys.argv[1])
    outdir.mkdir(parents=True, exist_ok=True)
    from pytest_pipecheck.sanitizer.locate import find_compute_sanitizer

    found = find_compute_sanitizer()
    sanitizer = found.path if found else None
    gpu = "unknown"
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as exc:
        gpu = f"nvidia-smi failed: {exc}"
    record: dict[str, object] = {"gpu": gpu, "date": datetime.datetime.now().isoformat(timespec="seconds"),
                                 "sanitizer": sanitizer, "version": found.version if found else None,
                                 "python": sys.version.split()[0]}
    if sanitizer is None:
        record["error"] = "compute-sanitizer not found"
        (outdir / "sanitizer_speed.json").write_text(json.dumps(record, indent=2))
        print("compute-sanitizer not found")
        return 1
    proj = Path(tempfile.mkdtemp(prefix="pipecheck-speed-"))
    (proj / "test_speed.py").write_text(TEST)
    (proj / "pytest.ini").write_text("[pytest]\n")
    env_note = "PYTORCH_NO_CUDA_MEMORY_CACHING=1 for B's child (set by pipecheck)"
    plain = [sanitizer, "--tool", "racecheck", sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "test_speed.py"]
    piped = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pipecheck",
             "--pipecheck-sanitizer=racecheck", "--pipecheck-checks=sanitizer", "test_speed.py"]
    bare = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_speed.py"]
    rows = []
    for name, cmd in (("plain pytest", bare), ("A: compute-sanitizer racecheck pytest", plain),
                      ("B: pytest --pipecheck (racecheck)", piped)):
        wall, rc, out = _run(cmd, str(proj), 580 if name.startswith("B") else 300)
        m = re.search(r"racecheck: done in ([\d.]+) s", out)
        rows.append({"name": name, "command": " ".join(cmd), "wall_s": round(wall, 2), "rc": rc,
                     "sanitizer_s": float(m.group(1)) if m else None,
                     "passed": len(re.findall(r"sanitizer:racecheck\s+\S*\s*\d* pass", out)) or None,
                     "tail": out[-3000:]})
    a = rows[1]["wall_s"]
    b_san = rows[2]["sanitizer_s"]
    ratio = (b_san / a) if (b_san and isinstance(a, float) and a > 0) else None
    record.update({"rows": rows, "ratio_pipecheck_sanitizer_over_plain": ratio, "goal": 1.3, "env": env_note})
    (outdir / "sanitizer_speed.json").write_text(json.dumps(record, indent=2))
    md = [f"# Sanitizer speed ({record['date']})", "", f"GPU: {gpu}; compute-sanitizer {record['version']}", "",
          "| run | wall s | sanitizer s | rc |", "|---|---|---|---|"]
    md += [f"| {r['name']} | {r['wall_s']} | {r['sanitizer_s']} | {r['rc']} |" for r in rows]
    md += ["", f"ratio (pipecheck sanitizer time / plain racecheck run): {ratio}", "",
           "Commands:", ""] + [f"    {r['command']}" for r in rows]
    (outdir / "sanitizer_speed.md").write_text("\n".join(md) + "\n")
    print(f"{'run':45s} {'wall_s':>8s} {'san_s':>8s} rc")
    for r in rows:
        print(f"{r['name']:45s} {r['wall_s']:8.2f} {r['sanitizer_s'] or float('nan'):8.2f} {r['rc']}")
    print(f"ratio = {ratio}")
    shutil.rmtree(proj, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
