"""Where a run's CPU time goes, read from Linux's /proc while it runs (no GPU needed to test it).

    with CpuUse() as use:
        subprocess.run(...)
    use.summary()  # {"cores": 32, "busy_cores_mean": 21.3, "saturated_fraction": 0.41, "by_kind": {...}}

Two samplers on one thread:

* the machine: the busy share of all cores from /proc/stat, every ``interval`` seconds. Its mean (in cores)
  and the share of samples with at least 90% of the cores busy say whether the run was bound by the CPU;
* the processes: user + system seconds of every process, every ``interval`` seconds, each counted from its
  value when the sampler started (a process older than the run counts only what it used during it) and
  sorted into kinds by its command line (:func:`kind_of`): the sanitizer children, compute-sanitizer's own
  front end, the pytest processes that run the tests, compilers. A process that lives less than one
  interval may be missed: the kinds are a breakdown, not a total (``getrusage`` of the run gives that).
"""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["CpuUse", "busy_fraction", "kind_of", "read_cpu_line", "read_process"]


def read_cpu_line(text: str) -> tuple[int, int]:
    """(busy, total) jiffies of the machine from /proc/stat's text: its first line, ``cpu user nice system
    idle iowait irq softirq steal ...``; idle and iowait are not busy."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            fields = [int(x) for x in line.split()[1:]]
            idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
            total = sum(fields[:8])
            return total - idle, total
    raise ValueError("no 'cpu ' line in /proc/stat")


def busy_fraction(before: tuple[int, int], after: tuple[int, int]) -> float:
    """The busy share of all cores between two :func:`read_cpu_line` readings (0 when no time passed)."""
    busy, total = after[0] - before[0], after[1] - before[1]
    return busy / total if total > 0 else 0.0


def read_process(stat_text: str) -> tuple[str, int, int]:
    """(comm, user + system ticks, start time in ticks) from a /proc/PID/stat line. The command name is in
    parentheses and may hold spaces and parentheses itself: the fields after it start at the last ')'."""
    close = stat_text.rindex(")")
    comm = stat_text[stat_text.index("(") + 1:close]
    rest = stat_text[close + 2:].split()
    # rest[0] is field 3 (state): utime is field 14, stime 15, starttime 22
    return comm, int(rest[11]) + int(rest[12]), int(rest[19])


def kind_of(comm: str, cmdline: str) -> str:
    """The kind of a process for the breakdown, from its command name and command line."""
    if "compute-sanitiz" in comm:
        return "compute-sanitizer front end"
    if "--pipecheck-child" in cmdline:
        return "sanitizer child (the tool's target)"
    if "--pipecheck-relay" in cmdline:
        return "relay child"
    if comm.startswith("ptxas") or comm in ("nvcc", "cicc", "cudafe++", "fatbinary", "nvlink") or "ptxas" in cmdline:
        return "CUDA compilers (nvcc, ptxas)"
    if comm in ("cc1plus", "cc1", "gcc", "g++", "cc", "ld", "as", "collect2", "x86_64-linux-gnu-gcc"):
        return "host compilers"
    if "pytest" in cmdline or "execnet" in cmdline or "sys.stdin.readline()" in cmdline:  # the last: xdist's workers
        return "pytest (the run and its xdist workers)"
    if comm in ("nvidia-smi",):
        return "nvidia-smi"
    return "other"


class CpuUse:
    """Samples the machine's busy cores and each process's CPU seconds on a thread while it is entered.
    ``proc`` stands in for /proc and ``clock`` for the monotonic clock (tests)."""

    def __init__(self, interval: float = 0.5, proc: Path = Path("/proc"),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.proc = proc
        self.clock = clock
        self.samples: list[float] = []  # busy share of all cores, one per interval
        self._start: dict[tuple[int, int], int] = {}  # (pid, start) -> ticks when first seen, if before us
        self._last: dict[tuple[int, int], tuple[str, int]] = {}  # (pid, start) -> (kind, ticks)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cpu: tuple[int, int] | None = None
        self._began = 0.0
        self.wall_s = 0.0
        self.cores = os.cpu_count() or 1

    # -- sampling

    def _machine(self) -> None:
        try:
            now = read_cpu_line((self.proc / "stat").read_text())
        except (OSError, ValueError):
            return
        if self._cpu is not None:
            self.samples.append(busy_fraction(self._cpu, now))
        self._cpu = now

    def _processes(self, first: bool) -> None:
        try:
            entries = [p for p in self.proc.iterdir() if p.name.isdigit()]
        except OSError:
            return
        for p in entries:
            try:
                comm, ticks, start = read_process((p / "stat").read_text())
            except (OSError, ValueError, IndexError):
                continue  # gone between the listing and the read
            key = (int(p.name), start)
            if first:
                self._start[key] = ticks
            if key not in self._last:
                try:
                    cmdline = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    cmdline = ""
                self._last[key] = (kind_of(comm, cmdline), ticks)
            else:
                self._last[key] = (self._last[key][0], ticks)

    def sample(self, first: bool = False) -> None:
        """One reading of both (the thread calls it every interval; tests call it by hand)."""
        self._machine()
        self._processes(first)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> CpuUse:
        self._began = self.clock()
        self.sample(first=True)
        self._thread = threading.Thread(target=self._loop, name="cpu-use", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()
        self.wall_s = self.clock() - self._began

    # -- the result

    def by_kind(self, ticks_per_s: float | None = None) -> dict[str, float]:
        """CPU seconds per kind of process while sampled, largest first."""
        hz = ticks_per_s or float(os.sysconf("SC_CLK_TCK"))
        out: dict[str, float] = defaultdict(float)
        for key, (kind, ticks) in self._last.items():
            used = ticks - self._start.get(key, 0)
            if used > 0:
                out[kind] += used / hz
        return {k: round(v, 1) for k, v in sorted(out.items(), key=lambda kv: -kv[1])}

    def summary(self, ticks_per_s: float | None = None) -> dict[str, Any]:
        busy = [s * self.cores for s in self.samples]
        return {"cores": self.cores, "samples": len(self.samples), "interval_s": self.interval,
                "busy_cores_mean": round(sum(busy) / len(busy), 1) if busy else None,
                "busy_cores_max": round(max(busy), 1) if busy else None,
                "saturated_fraction": round(sum(1 for s in self.samples if s >= 0.9) / len(self.samples), 2)
                if self.samples else None,
                "by_kind": self.by_kind(ticks_per_s), "busy_share": [round(x, 2) for x in self.samples]}


def main(argv: list[str]) -> int:
    """``cpu_use.py OUT.json [--interval S] -- COMMAND...``: run COMMAND, sampling as above; write the summary
    (with the wall seconds and COMMAND's exit status) to OUT.json and print its first lines. Exits as COMMAND."""
    import argparse
    import json
    import subprocess

    if "--" not in argv:
        print("usage: cpu_use.py OUT.json [--interval S] -- COMMAND...")
        return 2
    split = argv.index("--")
    ap = argparse.ArgumentParser(prog="cpu_use.py")
    ap.add_argument("out")
    ap.add_argument("--interval", type=float, default=1.0)
    args = ap.parse_args(argv[:split])
    with CpuUse(interval=args.interval) as use:
        rc = subprocess.call(argv[split + 1:])
    summary = dict(use.summary(), wall_s=round(use.wall_s, 1), exit=rc, command=argv[split + 1:])
    Path(args.out).write_text(json.dumps(summary, indent=1))
    print(f"cpu_use: {summary['busy_cores_mean']} of {summary['cores']} cores busy on average over "
          f"{summary['wall_s']} s; 90% or more busy in {summary['saturated_fraction']} of the samples; "
          + "; ".join(f"{k}: {v} s" for k, v in summary["by_kind"].items()))
    return rc


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
