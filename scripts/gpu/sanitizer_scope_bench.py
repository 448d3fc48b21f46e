"""The sanitizer tier's speed: a child that runs each test whole against one that launches each kernel
once per shape (the setting ``sanitizer_scope``), with every verdict compared.

Usage: python3 scripts/gpu/sanitizer_scope_bench.py OUTDIR [--scopes launch,test] [PYTEST ARGS...]

BENCH_TIMEOUT (seconds, default 560) bounds both runs together.

Runs ``pytest --pipecheck --pipecheck-tier=gpu <args>`` (default args: ``reference_kernels``) once per
scope with a JSON report, and writes OUTDIR/sanitizer_scope.json and .md: the GPU, the date, each
command, its wall time, each tool's child time (pipecheck's progress line "TOOL: done in X s"), the
test outcomes, and every (test, check) whose verdicts differ between the scopes. Exit status 0 only
when both runs ended with the same outcomes and the same verdicts for every test and check.
"""

from __future__ import annotations

import collections
import datetime
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def _gpu() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as exc:  # no GPU: the record says so
        return f"nvidia-smi failed: {exc}"


def _verdicts(report: dict[str, Any]) -> dict[tuple[str, str], list[str]]:
    """(test, check) -> sorted verdicts of its results (a test checks several shapes or kernels)."""
    out: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
    for r in report.get("results", []):
        out[(r.get("nodeid", ""), r["check"])].append(r["verdict"])
    return {k: sorted(v) for k, v in out.items()}


def _outcomes(report: dict[str, Any]) -> dict[str, str]:
    tests = report.get("tests", {})
    if isinstance(tests, dict):
        return {k: (v.get("outcome") if isinstance(v, dict) else str(v)) for k, v in tests.items()}
    return {t["nodeid"]: t["outcome"] for t in tests}


def run(scope: str, args: list[str], outdir: Path, timeout: float) -> dict[str, Any]:
    report = outdir / f"pipecheck-{scope}.json"
    cmd = [sys.executable, "-m", "pytest", "--pipecheck", "--pipecheck-tier=gpu", "-p", "no:cacheprovider", "-q",
           f"--pipecheck-sanitizer-scope={scope}", f"--pipecheck-json={report}", *args]
    start = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        rc: int | None = p.returncode
        text = p.stdout + p.stderr
    except subprocess.TimeoutExpired as exc:
        rc, text = None, (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
    wall = time.monotonic() - start
    (outdir / f"pytest-{scope}.log").write_text(text)
    tools = {m.group(1): float(m.group(2)) for m in re.finditer(r"sanitizer: (\w+): done in ([\d.]+) s", text)}
    widened = sum(int(m.group(1)) for m in re.finditer(r"(\d+) test\(s\) failed on their own", text))
    doc = json.loads(report.read_text()) if report.exists() else {}
    return {"scope": scope, "command": " ".join(cmd[1:]).replace(str(outdir), "OUT"), "rc": rc,
            "wall_s": round(wall, 1), "child_s": tools, "widened": widened,
            "summary": (re.findall(r"^=+ (.*(?:passed|failed).*) =+$", text, re.M) or ["?"])[-1],
            "verdicts": _verdicts(doc), "outcomes": _outcomes(doc)}


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write(__doc__ or "")
        return 2
    outdir = Path(argv[0])
    outdir.mkdir(parents=True, exist_ok=True)
    scopes = ["launch", "test"]
    rest = argv[1:]
    if rest[:1] == ["--scopes"]:
        scopes, rest = rest[1].split(","), rest[2:]
    args = rest or ["reference_kernels"]
    deadline = time.monotonic() + float(os.environ.get("BENCH_TIMEOUT", "560"))
    runs = [run(s, args, outdir, deadline - time.monotonic()) for s in scopes]
    diffs: list[str] = []
    if len(runs) == 2:
        a, b = runs
        for key in sorted(set(a["verdicts"]) | set(b["verdicts"])):
            va, vb = a["verdicts"].get(key), b["verdicts"].get(key)
            if va != vb:
                diffs.append(f"{key[0]} {key[1]}: {a['scope']}={va} {b['scope']}={vb}")
        for nodeid in sorted(set(a["outcomes"]) | set(b["outcomes"])):
            oa, ob = a["outcomes"].get(nodeid), b["outcomes"].get(nodeid)
            if oa != ob:
                diffs.append(f"{nodeid} outcome: {a['scope']}={oa} {b['scope']}={ob}")
    record = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "gpu": _gpu(),
              "args": args, "runs": [{k: v for k, v in r.items() if k not in ("verdicts", "outcomes")} for r in runs],
              "checks_compared": len(runs[0]["verdicts"]), "tests_compared": len(runs[0]["outcomes"]),
              "differences": diffs,
              # a run that did not end (time limit), a usage error or nothing compared proves nothing
              "identical": not diffs and len({r["rc"] for r in runs}) == 1 and runs[0]["rc"] in (0, 1)
              and bool(runs[0]["outcomes"])}
    (outdir / "sanitizer_scope.json").write_text(json.dumps(record, indent=1))
    md = [f"# Sanitizer scope benchmark ({record['date']})", "", f"GPU: {record['gpu']}", "",
          "| scope | wall s | child s per tool | widened | pytest | exit |", "|---|---|---|---|---|---|"]
    for r in runs:
        tools = ", ".join(f"{t} {s:.1f}" for t, s in r["child_s"].items())
        md.append(f"| {r['scope']} | {r['wall_s']} | {tools} | {r['widened']} | {r['summary']} | {r['rc']} |")
    md += ["", f"(test, check) pairs compared: {record['checks_compared']}; tests: {record['tests_compared']}; "
           f"differences: {len(diffs)}", *[f"- {d}" for d in diffs], "", "Commands:", "",
           *[f"    {r['command']}" for r in runs]]
    (outdir / "sanitizer_scope.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0 if record["identical"] else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main(sys.argv[1:]))
