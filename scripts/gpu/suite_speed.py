"""The GPU tier's suites under the sanitizer from cold caches, several ways, with their verdicts compared.

Usage: python3 scripts/gpu/suite_speed.py OUTDIR [--runs SUITE:JOBS:OVERLAP[:TOOLS] ...] [--budget SECONDS]

Each run is ``pytest --pipecheck --pipecheck-tier=gpu -p no:cacheprovider --pipecheck-sanitizer-jobs=JOBS SUITE``
with ``PIPECHECK_SANITIZER_OVERLAP=OVERLAP`` and empty Triton, CuPy and pipecheck build caches of its own (what a
fresh CI machine pays). SUITE is ``reference_kernels`` or ``examples``; JOBS a number or ``auto``; TOOLS, when
given, the sanitizer tools joined by ``+`` (``racecheck+synccheck``: ``--pipecheck-sanitizer=racecheck,synccheck``;
left out: the default tools). Default runs: both suites at 4 and 8 children, the children to their end before
the tests. A run that would start after ``--budget`` seconds is left out (and said so). Runs of one suite are
compared on the (test, check) verdicts they share; the checks only one of them ran are counted apart.

Writes OUTDIR/suite_speed.json (each run: command, wall, pytest's summary line, when the children ended, its
15 slowest steps, every verdict) and suite_speed.md (the table, and whether the runs of one suite reached the
same verdicts, compared test by test and check by check), plus OUTDIR/logs.txt.gz (every run's output).
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_RUNS = "reference_kernels:4:0,reference_kernels:8:0,examples:4:0,examples:8:0"


def _verdicts(report: Path) -> tuple[dict[str, str], Any]:
    try:
        doc = json.loads(report.read_text())
    except (OSError, ValueError):
        return {}, None
    return ({f"{r.get('nodeid')}|{r.get('check')}": str(r.get("verdict")) for r in doc.get("results") or []},
            doc.get("ok"))


def _write(out: Path, gpu: str, runs: list[dict[str, Any]], logs: list[str]) -> None:
    """The files so far (written after every run: a call cut off by its time limit keeps what ran)."""
    same: dict[str, str] = {}
    for suite in dict.fromkeys(r["suite"] for r in runs):
        got = [r for r in runs if r["suite"] == suite and r.get("verdicts")]
        if len(got) < 2:
            continue
        first = got[0]["verdicts"]
        diffs = [(r["jobs"], r["overlap"], r.get("tools"), k) for r in got[1:] for k in set(first) & set(r["verdicts"])
                 if first.get(k) != r["verdicts"].get(k)]
        apart = {f"{r['jobs']}:{r['overlap']}:{r.get('tools')}": len(set(first) ^ set(r["verdicts"])) for r in got[1:]}
        shared = min(len(set(first) & set(r["verdicts"])) for r in got[1:])
        same[suite] = ((f"{shared} shared (test, check) verdicts, identical in all {len(got)} runs" if not diffs else
                        f"{len(diffs)} differences, first: {diffs[:5]}")
                       + (f"; verdicts in one run only: {apart}" if any(apart.values()) else ""))
    doc = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "gpu": gpu,
           "runs": runs, "same_verdicts": same}
    (out / "suite_speed.json").write_text(json.dumps(doc, indent=1))
    with gzip.open(out / "logs.txt.gz", "wt") as f:
        f.write("\n".join(logs))
    lines = [f"# Suites under the sanitizer from cold caches, {doc['date']}, {gpu}", "",
             "| suite | tools | children at once | overlap | wall s | children done at s | pytest | rc |",
             "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        tools = r.get("tools") or "default"
        if "left_out" in r:
            lines.append(f"| {r['suite']} | {tools} | {r['jobs']} | {r['overlap']} | left out: {r['left_out']} | | | |")
            continue
        lines.append(f"| {r['suite']} | {tools} | {r['jobs']} | {r['overlap']} | {r['wall_s']} | "
                     f"{', '.join(map(str, r['children_done_s']))} | {r['pytest']} | {r['rc']} |")
    lines += ["", *[f"- {suite}: {text}" for suite, text in same.items()]]
    (out / "suite_speed.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--runs", nargs="+", default=[DEFAULT_RUNS])
    ap.add_argument("--budget", type=float, default=520.0)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True, check=False).stdout.strip()
    began = time.monotonic()
    runs: list[dict[str, Any]] = []
    logs: list[str] = []
    for spec in [r for arg in args.runs for r in arg.split(",")]:
        suite, jobs, overlap, *rest = spec.split(":")
        tools = rest[0].replace("+", ",") if rest and rest[0] else None
        if time.monotonic() - began > args.budget:
            runs.append({"suite": suite, "jobs": jobs, "overlap": overlap, "tools": tools,
                         "left_out": "over the budget"})
            _write(out, gpu, runs, logs)
            continue
        caches = Path(tempfile.mkdtemp(prefix="pipecheck-suite-speed-"))
        report = caches / "report.json"
        env = dict(os.environ, TRITON_CACHE_DIR=str(caches / "triton"), CUPY_CACHE_DIR=str(caches / "cupy"),
                   PIPECHECK_CACHE_DIR=str(caches / "pipecheck"), PIPECHECK_SANITIZER_OVERLAP=overlap)
        cmd = [sys.executable, "-m", "pytest", "--pipecheck", "--pipecheck-tier=gpu", "-p", "no:cacheprovider", "-rs",
               "--durations=0", f"--pipecheck-sanitizer-jobs={jobs}", f"--pipecheck-json={report}",
               *([f"--pipecheck-sanitizer={tools}"] if tools else []), suite]
        start = time.monotonic()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        wall = time.monotonic() - start
        text = proc.stdout + proc.stderr
        logs.append(f"===== {spec}: {' '.join(cmd[1:])}\n{text}")
        verdicts, ok = _verdicts(report)
        summary = [line.strip("= ") for line in text.splitlines() if re.search(r"\d+ (passed|failed)", line)]
        done = re.findall(r"all tools done in ([\d.]+) s", text)
        slow = text.split("slowest durations", 1)[-1].splitlines()[1:16] if "slowest durations" in text else []
        runs.append({"suite": suite, "jobs": jobs, "overlap": overlap, "tools": tools, "command": " ".join(cmd[1:]),
                     "env": f"PIPECHECK_SANITIZER_OVERLAP={overlap}, empty caches", "rc": proc.returncode,
                     "wall_s": round(wall, 2), "pytest": summary[-1] if summary else None, "ok": ok,
                     "children_done_s": [float(x) for x in done], "slowest": slow, "verdicts": verdicts})
        print(json.dumps({k: v for k, v in runs[-1].items() if k not in ("verdicts", "slowest")}), flush=True)
        shutil.rmtree(caches, ignore_errors=True)
        _write(out, gpu, runs, logs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
