"""A stand-in for compute-sanitizer, for testing pipecheck's runner on a machine without a GPU.

It accepts compute-sanitizer's options, runs the target command it is given, forwards its output,
and behaves as the plan in the environment variable FAKE_SANITIZER_PLAN (JSON, keyed by tool) says:

    inject:      {nodeid substring: sample file in this directory}  records printed inside that test
    outside:     sample file whose records are printed before the first test
    hang:        nodeid substring: stop (sleep) when that test begins
    crash:       nodeid substring: kill the target and exit 139 when that test begins
    no_summary:  true: never print the summary line
    canary:      "catch" (default), "blind", or "blind_in_batch" (not reported when tests share the
                 child, as when --print-limit was used up by their findings; reported alone)

FAKE_SANITIZER_LOG, when set, is a file to which each invocation's argv is appended as a JSON line.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VALUED = {"--tool", "--error-exitcode", "--print-limit", "--save", "--racecheck-report", "--suppressions",
          "--kernel-name", "--kernel-name-exclude", "--padding", "--racecheck-deadlock-timeout",
          "--report-api-errors"}
CANARY = {
    "racecheck": ["Error: Race reported between Write access at pipecheck_canary_race+0xa0 in canary.cu:5",
                  "    and Read access at pipecheck_canary_race+0xb0 in canary.cu:6 [1024 hazards]"],
    "synccheck": ["Barrier error detected. Divergent thread(s) in warp.",
                  "    at pipecheck_canary_divergent_barrier+0x70", "    by thread (0,0,0) in block (0,0,0)"],
    "memcheck": ["Invalid __global__ write of size 4 bytes", "    at pipecheck_canary_oob+0x80",
                 "    by thread (0,0,0) in block (0,0,0)"],
    "initcheck": ["Uninitialized __global__ memory read of size 4 bytes", "    at pipecheck_canary_uninit+0x60",
                  "    by thread (0,0,0) in block (0,0,0)"],
}


def out(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def records(sample: str) -> list[str]:
    """The finding records of a recorded output (no header, no summary)."""
    with open(os.path.join(HERE, sample), encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    keep = []
    for line in lines:
        if not line.startswith("========= "):
            continue
        body = line[len("========= "):]
        if body.startswith(("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY", "Target application")):
            continue
        keep.append(body)
    return keep


def main() -> int:
    argv = sys.argv[1:]
    if argv and argv[0] == "--version":
        out("NVIDIA (R) Compute Sanitizer\nVersion 2099.1.0 fake")
        return 0
    log = os.environ.get("FAKE_SANITIZER_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(argv) + "\n")
    tool = "memcheck"
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        if argv[i] == "--tool":
            tool = argv[i + 1]
        i += 2 if argv[i] in VALUED else 1
    target = argv[i:]
    plan = json.loads(os.environ.get("FAKE_SANITIZER_PLAN", "{}")).get(tool, {})
    env = dict(os.environ, PIPECHECK_CANARY_DRYRUN="1")
    out("========= COMPUTE-SANITIZER")
    errors = 0
    if plan.get("outside"):
        for rec in records(plan["outside"]):
            out("========= " + rec)
        errors += 1
    proc = subprocess.Popen(target, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        if "PIPECHECK-BEGIN " not in line:
            continue
        nodeid = line.split("PIPECHECK-BEGIN ", 1)[1].strip()
        if nodeid.startswith("pipecheck-canary::"):
            mode = plan.get("canary", "catch")
            alone = "--deselect" in target
            if mode == "catch" or (mode == "blind_in_batch" and alone):
                for rec in CANARY[tool]:
                    out("========= " + rec)
                errors += 1
            continue
        if plan.get("hang") and plan["hang"] in nodeid:
            time.sleep(3600)
        if plan.get("crash") and plan["crash"] in nodeid:
            out("partial output before the crash")
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return 139
        for key, sample in plan.get("inject", {}).items():
            if key in nodeid:
                for rec in records(sample):
                    out("========= " + rec)
                errors += 1
    rc = proc.wait()
    if not plan.get("no_summary"):
        if tool == "racecheck":
            out(f"========= RACECHECK SUMMARY: {errors} hazards displayed ({errors} errors, 0 warnings)")
        else:
            out(f"========= ERROR SUMMARY: {errors} errors")
    return 86 if errors else rc


if __name__ == "__main__":
    sys.exit(main())
