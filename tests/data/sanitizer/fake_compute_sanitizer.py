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
    at_launch:   nodeid substring: what the plan does inside that test (inject, repeat, unknown, garble,
                 hidden, dies_*) happens at its first PIPECHECK-LAUNCH line (the child's record of a Triton
                 kernel it launched) instead of at its BEGIN line, as the real tool reports a kernel after
                 its launch; such a test that launches nothing gets none of it
    past:        {nodeid substring: [array name, bytes, "read" or "write"]}: in that test, when the child
                 prints the PIPECHECK-ALLOC line of that array (memcheck children allocate each array
                 exactly and say where: pytest_pipecheck/sanitizer/allocations.py), one invalid access that
                 many bytes past the end of its allocation, worded as the real tool words it (as in the
                 recorded memcheck_oob_x.txt)

Faults, for the fault-injection suite (tests/plugin/test_sanitizer_faults.py):

    repeat:      {nodeid substring: n}: print that test's injected records n times (a noisy test)
    print_limit: int: overrides the --print-limit given (0: all). Like the real tool, the limit counts
                 every record of the process; records past it are counted, not printed, and the summary
                 says so ("N errors were not printed", racecheck: "N hazards displayed")
    silent:      true: no sanitizer line at all (no header, no summary); exit with the target's status
    crash_mid:   nodeid substring: print the first half of a record, kill the target, exit 139
    garble:      nodeid substring: a record whose head line lost its prefix (only its continuation
                 lines keep it); counted as one error
    unknown:     nodeid substring: a record of a kind pipecheck does not know ("Warp Misaligned Address")
    hidden:      nodeid substring: one error counted in the summary whose record is never printed
    exit:        int: the exit status to return whatever was found
    dies_after:  nodeid substring: once that test ran, the target does not end cleanly (as after a
                 synccheck or memcheck error leaves the CUDA context dead): the tool says "Error:
                 process didn't terminate successfully" and "Target application returned an error"
                 before its summary (as compute-sanitizer 2026.4.0 prints it)
    dies_once:   as dies_after, in the first child of the tool that runs that test only (a crash at exit
                 that no test explains, as a child under 12 xdist workers on one GPU can have); needs
                 FAKE_SANITIZER_LOG, beside which it leaves a mark
    dies_in:     nodeid substring: after that test's injected records, the target dies before the test
                 ends (no PIPECHECK-END), the tool says so and exits 86 (as Triton 3.6's warp-specialized
                 GEMM does under compute-sanitizer 2026.4.0 synccheck: docs/validation/2026-11-25-h100-0950.md)
    xml:         what --xml --save writes: "ok" (default: the printed records), "truncate" (cut in the
                 middle), "missing" (no file), "extra" (one record more than the text)

FAKE_SANITIZER_LOG, when set, is a file to which each invocation's argv is appended as a JSON line; each
invocation that ran a target (not ``--version``) appends one line to FAKE_SANITIZER_LOG + ".ended" when it
exits, so a test can tell whether every child it started has ended.
FAKE_SANITIZER_VERSION, when set, is the version line ``--version`` prints (default
"Version 2099.1.0 fake"; the real formats are "Version 2025.3.1.0 (build 36400806) (public-release)"
and "Version 2026.4.0.0 (build 39022338) (public-release)"). Like the real tool, an option the
version does not have (OPTION_SINCE) is refused: "unrecognised option", exit 1, no summary.
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
          "--report-api-errors", "--initcheck-address-space", "--check-bulk-copy", "--check-warpgroup-mma"}
#: options the fake refuses from a version before this one (the real 2025.3.1 has no --initcheck-address-space)
OPTION_SINCE = {"--initcheck-address-space": (2025, 4), "--check-bulk-copy": (2026, 4),
                "--check-warpgroup-mma": (2025, 3)}
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


def records(sample: str) -> list[list[str]]:
    """The finding records of a recorded output (no header, no summary), one list of lines each."""
    with open(os.path.join(HERE, sample), encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    keep = []
    for line in lines:
        if not line.startswith("========= "):
            continue
        body = line[len("========= "):]
        # the tool's own lines around the records (the plan's dies_after and dies_in print the trailer)
        if body.startswith(("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY", "Target application",
                            "Error: process didn't terminate")):
            continue
        keep.append(body)
    grouped: list[list[str]] = []
    for body in keep:
        if not body.strip():
            continue
        if body.startswith(" ") and grouped:
            grouped[-1].append(body)
        else:
            grouped.append([body])
    return grouped


class Tool:
    """What the tool printed and counted so far."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.errors = 0
        self.printed: list[str] = []  # record heads, for the XML file

    def record(self, lines: list[str], *, head_prefix: str = "========= ") -> None:
        self.errors += 1
        if self.limit and len(self.printed) >= self.limit:
            return
        self.printed.append(lines[0])
        out(head_prefix + lines[0])
        for line in lines[1:]:
            out("========= " + line)
        out("========= ")


def write_xml(path: str, heads: list[str], mode: str) -> None:
    if mode == "missing":
        return
    if mode == "extra":
        heads = [*heads, "Invalid __global__ write of size 4 bytes"]
    body = "".join(f"  <record>\n    <kind>Fake</kind>\n    <what><text>{h.replace('<', '&lt;')}</text></what>\n"
                   f"  </record>\n" for h in heads)
    text = ('<?xml version="1.0" encoding="utf-8"?>\n'
            + (f"<ComputeSanitizerOutput>\n{body}</ComputeSanitizerOutput>\n" if heads else "<ComputeSanitizerOutput/>\n"))
    if mode == "truncate":
        text = text[: max(len(text) // 2, 45)]
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def main() -> int:
    argv = sys.argv[1:]
    version_line = os.environ.get("FAKE_SANITIZER_VERSION", "Version 2099.1.0 fake")
    if argv and argv[0] == "--version":
        out(f"NVIDIA (R) Compute Sanitizer\nCopyright (c) 2020-2026 NVIDIA Corporation\n{version_line}")
        return 0
    nums = version_line.split()[1].split(".") if len(version_line.split()) > 1 else []
    version = tuple(int(n) for n in nums if n.isdigit())
    log = os.environ.get("FAKE_SANITIZER_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(argv) + "\n")
    tool = "memcheck"
    limit = 100
    save = None
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        if argv[i] in OPTION_SINCE and version < OPTION_SINCE[argv[i]]:
            out(f"========= Error: unrecognised option '{argv[i]}'")
            return 1
        if argv[i] == "--tool":
            tool = argv[i + 1]
        elif argv[i] == "--print-limit":
            limit = int(argv[i + 1])
        elif argv[i] == "--save":
            save = argv[i + 1]
        i += 2 if argv[i] in VALUED else 1
    target = argv[i:]
    plan = json.loads(os.environ.get("FAKE_SANITIZER_PLAN", "{}")).get(tool, {})
    env = dict(os.environ, PIPECHECK_CANARY_DRYRUN="1")
    t = Tool(int(plan.get("print_limit", limit)))
    silent = bool(plan.get("silent"))
    proc = subprocess.Popen(target, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    assert proc.stdout is not None
    if silent:
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
        return proc.wait()
    out("========= COMPUTE-SANITIZER")
    if plan.get("outside"):
        for rec in records(plan["outside"]):
            t.record(rec)

    def hit(key: str, nodeid: str) -> bool:
        return bool(plan.get(key)) and plan[key] in nodeid

    died = False
    deferred: str | None = None  # the running test, while its plan waits for its first LAUNCH line

    def in_test(nodeid: str) -> int | None:
        """What the plan does inside a test; an exit status where the target dies there."""
        nonlocal died
        for key, sample in plan.get("inject", {}).items():
            if key in nodeid:
                times = max((n for k, n in plan.get("repeat", {}).items() if k in nodeid), default=1)
                for _ in range(times):
                    for rec in records(sample):
                        t.record(rec)
        if hit("unknown", nodeid):
            t.record(["Warp Misaligned Address", "    at racy_tile+0x30 in k.cu:7",
                      "    by thread (3,0,0) in block (0,0,0)"])
        if hit("garble", nodeid):
            t.record(["Invalid __global__ read of size 4 bytes", "    at racy_tile+0x90 in k.cu:21",
                      "    by thread (96,0,0) in block (1,0,0)"], head_prefix="==\x1b[0m== ")
        if hit("hidden", nodeid):
            t.errors += 1
        if hit("dies_after", nodeid):
            died = True
        if hit("dies_once", nodeid):
            mark = os.environ["FAKE_SANITIZER_LOG"] + f".{tool}.died"
            if not os.path.exists(mark):
                open(mark, "w").close()
                died = True
        if hit("dies_in", nodeid):
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            out("========= Error: process didn't terminate successfully")
            out("========= Target application returned an error")
            out(f"========= ERROR SUMMARY: {t.errors} errors")
            return 86
        return None

    current: str | None = None
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        if "PIPECHECK-ALLOC " in line and current is not None:
            alloc = json.loads(line.split("PIPECHECK-ALLOC ", 1)[1])
            for key, (name, past, access) in plan.get("past", {}).items():
                if key in current and alloc["name"] == name:
                    end = alloc["start"] + alloc["bytes"]
                    t.record([f"Invalid __global__ {access} of size 2 bytes", "    at gemm_kernel+0x1c30 in gemm.py:42",
                              "    by thread (5,0,0) in block (3,0,0)",
                              f"    Access to {end + past:#x} is out of bounds",
                              f"    and is {past + 1} bytes after the nearest allocation at {alloc['start']:#x} of "
                              f"size {alloc['bytes']} bytes"])
            continue
        if deferred is not None and "PIPECHECK-LAUNCH " in line:
            nodeid, deferred = deferred, None
            status = in_test(nodeid)
            if status is not None:
                return status
            continue
        if "PIPECHECK-BEGIN " not in line:
            continue
        nodeid = line.split("PIPECHECK-BEGIN ", 1)[1].strip()
        current = nodeid
        deferred = None
        if nodeid.startswith("pipecheck-canary::"):
            mode = plan.get("canary", "catch")
            alone = "--deselect" in target
            if mode == "catch" or (mode == "blind_in_batch" and alone):
                t.record(CANARY[tool])
            continue
        if hit("hang", nodeid):
            time.sleep(3600)
        if hit("crash", nodeid) or hit("crash_mid", nodeid):
            if hit("crash_mid", nodeid):
                out("========= Invalid __global__ write of size 4 bytes")
                out("=========     at racy_ti")
            else:
                out("partial output before the crash")
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return 139
        if hit("at_launch", nodeid):
            deferred = nodeid
            continue
        status = in_test(nodeid)
        if status is not None:
            return status
    rc = proc.wait()
    if died:
        out("========= Error: process didn't terminate successfully")
        out("========= Target application returned an error")
    if not plan.get("no_summary"):
        if tool == "racecheck":
            out(f"========= RACECHECK SUMMARY: {len(t.printed)} hazards displayed ({t.errors} errors, 0 warnings)")
        else:
            out(f"========= ERROR SUMMARY: {t.errors} errors")
            if t.errors > len(t.printed):
                out(f"========= ERROR SUMMARY: {t.errors - len(t.printed)} errors were not printed. Use "
                    f"--print-limit option to adjust the number of printed errors")
    if save:
        write_xml(save, t.printed, plan.get("xml", "ok"))
    if "exit" in plan:
        return int(plan["exit"])
    return 86 if t.errors else rc


def _ended() -> None:
    log = os.environ.get("FAKE_SANITIZER_LOG")
    if log and sys.argv[1:2] != ["--version"]:
        with open(log + ".ended", "a", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()}\n")


if __name__ == "__main__":
    try:
        status = main()
    finally:
        _ended()
    sys.exit(status)
